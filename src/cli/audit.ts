/** `baton audit`: replay a tenant's transparency log offline and report what does not add up. */
import { existsSync } from 'node:fs';
import { BatonError } from '../protocol/errors.js';
import { auditLog, type AuditOptions, type AuditReport } from '../sdk/audit.js';
import { BatonClient, DEFAULT_TIMEOUT_MS } from '../sdk/client.js';
import { parseCliArgs } from './args.js';
import {
  COMMON_OPTIONS,
  DEFAULT_SERVER,
  EXIT_HELP,
  exitCodeFor,
  explainRefusal,
  integerFlag,
  printJson,
  readLocalText,
  SERVER_HELP,
  SERVER_OPTIONS,
  refuseStdoutPath,
  writeOutputFile,
} from './common.js';
import { resolveTarget } from './context.js';
import { UsageError, type CliIo } from './io.js';
import { printable } from './inspect.js';
import { readLogTrust } from './log.js';
import { publishedKeysFromText } from './service-receipt.js';

export const AUDIT_HELP = `Usage: baton audit [options]

Replays your tenant's transparency log (an audit-scope API key) and checks it
against its signed checkpoint:
  - fetches every level-0 tile and entry bundle, recomputes the Merkle root
    and compares it with the checkpoint's root;
  - checks every entry hashes to the leaf logged at its index (a service
    receipt rewritten or reordered in the database is reported), and that the
    service can still produce it (a service receipt deleted is reported missing);
  - re-verifies every service receipt's signature against the published service keys
    (GET /v1/keys) and that it belongs to this tenant;
  - re-verifies every decision's delegation chain at the decision's time:
    for each allow, denial and accepted DR it fetches the chain
    (GET /v1/delegations/{hash}/chain) and an allow's invocation
    (GET /v1/invocations/{jti}), checks every record hashes to the hash the
    service receipt names (a record swapped in the database is reported), and that
    an allow's chain authorises its invocation (signatures, linkage,
    attenuation, time windows) for the tool and chain the allow logged, and
    an accepted DR's chain verified when it was accepted. Revocation, call
    counters and budgets are service state: they are not re-derived;
  - pages GET /v1/service-receipts and reports service receipts the log does
    not contain;
  - with --previous, checks the current checkpoint extends an earlier one,
    by the level-0 tiles of the larger (a split view, or a rollback when the
    log is smaller and its tiles do not hold it, is reported). A proof answer
    alone (a refusal, a proof that does not verify) is never evidence, as
    anyone in the path can forge it: without the tiles it is a failed read,
    and so is a smaller checkpoint the tiles show to be a stale view.

Options:
  --trust <file>           pin the log's identity: JSON {"origin", "logKeys": [...],
                           "witnesses"?: [...], "requiredCosignatures"?: n}, or a
                           saved GET /v1/log answer (default: the keys the service
                           serves, each one a published service key, and say so)
  --keys <file>            the service's published keys, pinned (a saved GET /v1/keys or
                           JWKS, e.g. from baton service-receipt verify --save-keys):
                           receipts and the served log keys are checked against them
                           (default: GET /v1/keys of the service audited, even with
                           --trust, and the output says so)
  --tenant <id>            the tenant whose log this must be (your audit key's): the log
                           the service names must be <log name>/baton/<id>. Every tenant's
                           log is signed with the same service key, so --keys alone does
                           not tell yours from another's; without --tenant or --trust the
                           report says which log it took from the service. --tenant pins
                           the tenant, not the log name: the report says the name came
                           from the service (pin the whole origin with --trust)
  --previous <file>        an earlier checkpoint note to check consistency with
  --tree-size <n>          audit under the signed checkpoint of this size (default: the
                           latest), e.g. the one your witnesses cosigned when the log has
                           grown since: its entries are replayed, and the latest checkpoint
                           must extend it (GET /v1/log/checkpoints/{n})
  --root <did>             a root DID the tenant trusts (repeatable); without it a
                           decision's root is not checked for trust, and the report says so.
                           Pin the custodial root too if the tenant issues through Baton
                           (custodial_did in the answer of POST /v1/delegations/issue)
  --max-pending <s>        report a service receipt still outside the log after this
                           long: a stopped log or a stale checkpoint (default 600)
  --invocation-max-age <s> the service's BATON_INVOCATION_MAX_AGE (default 300)
  --clock-skew <s>         the service's BATON_CLOCK_SKEW (default 60)
  --save-checkpoint <file> write the checkpoint audited (with --tree-size, the latest,
                           which extends it), for the next --previous; only when the
                           audit found nothing (a file already there is kept otherwise,
                           and the output says so)
  --quiet                  no progress lines
  --json                   print the report as JSON
  -h, --help               show this help

${SERVER_HELP}

${EXIT_HELP}
Findings (exit 1): missing, rewritten or reordered entries (and unchecked
ones: in a bundle the service would not serve, those it names no receipt
for), an entry logged twice (duplicate), an entry of the tenant the service
does not list (not-listed), bad service receipts, service receipts not in
the log, a root mismatch, a split view or rollback, a tile or checkpoint the
log served that cannot be read (malformed: the service's fault, not your
input); for decisions: substituted records, a chain that does not verify
(chain-invalid), an allow that does not match its invocation (mismatch),
records the service cannot produce (records-missing).

A read that fails once the checkpoints are verified (a tile, an entry
bundle, a chain or GET /v1/service-receipts answering 5xx, a timeout) ends
the audit without dropping what it found: the findings are printed with the
notes and what could not be read (incomplete), exit 1; a split view or
rollback proven by the signed notes (and the tiles) stands whatever the
service answers next. With nothing found, such a failure is exit 3.`;

function summary(report: AuditReport): string {
  if (!report.checkpointRead)
    return [
      `FINDINGS: log ${report.origin}: its checkpoint could not be read, so nothing else was audited`,
      ...report.findings.map((f) => `  ${f.kind.padEnd(19)} ${'source' in f ? f.source : 'log'}: ${f.detail}`),
    ]
      .map(printable)
      .join('\n');
  const lines = [
    `${report.ok ? 'OK' : report.incomplete !== undefined ? 'FINDINGS, AUDIT INCOMPLETE' : 'FINDINGS'}: log ${report.origin}, ${report.treeSize} entries${report.latestCheckpoint !== undefined ? ` (the checkpoint of that size; the latest is of ${report.latestCheckpoint.split('\n')[1] ?? '?'})` : ''}`,
    `  entries checked    ${report.entriesChecked}`,
    `  service receipts   ${report.serviceReceiptsChecked} (${report.pendingServiceReceipts} after the checkpoint${report.latestCheckpoint !== undefined ? ' audited, logged since or pending' : ', not yet logged'})`,
    `  decisions checked  ${report.decisionsChecked}`,
    `  not checked        ${report.notChecked}`,
  ];
  if (!report.rootsPinned) lines.push('  note               decision roots not checked for trust; pin them with --root');
  // Receipt signatures are judged against the service keys: unpinned, they are the audited service's own, --trust or not.
  if (!report.serviceKeysPinned)
    lines.push(
      '  note               service keys taken from the service audited (GET /v1/keys): receipt signatures were checked against them; pin them with --keys',
    );
  if (report.trustedOnFirstUse)
    lines.push('  note               log keys taken from the service audited (GET /v1/log); pin them with --trust or --keys');
  if (!report.originPinned)
    lines.push(
      `  note               which log this is (${report.origin}) taken from the service audited; pin it with --tenant <id> or --trust`,
    );
  else if (!report.logNamePinned)
    lines.push(
      `  note               the log's name (${report.origin}) taken from the service audited, its tenant pinned by --tenant; pin the whole log with --trust`,
    );
  for (const f of report.findings) {
    const where =
      'source' in f
        ? f.source
        : 'index' in f
          ? `entry ${f.index}`
          : 'serviceReceiptId' in f
            ? `service receipt ${f.serviceReceiptId}`
            : 'log';
    lines.push(`  ${f.kind.padEnd(19)} ${where}: ${f.detail}`);
  }
  // What could not be read once the checkpoints were verified: the findings above stand, the rest was not checked.
  for (const x of report.incomplete ?? [])
    lines.push(
      `  ${'incomplete'.padEnd(19)} ${x.source}: ${x.status === 0 ? '' : `HTTP ${x.status} `}${x.code}: ${x.detail} Not checked: ${x.notChecked}.`,
    );
  // A rollback or split view is proven by two signed notes: print both, not only under --json.
  for (const f of report.findings) {
    if (f.kind !== 'rollback' && f.kind !== 'split-view') continue;
    const [a, b] = f.finding.kind === 'same-size-different-roots' ? f.finding.checkpoints : [f.finding.older, f.finding.newer];
    for (const [title, note] of [
      [`the earlier note, of ${a.checkpoint.size} leaves (evidence)`, a.note],
      [`the note served, of ${b.checkpoint.size} leaves (evidence)`, b.note],
    ] as const) {
      lines.push('', `--- ${title}`, ...note.replace(/\n$/, '').split('\n'));
    }
  }
  return lines.map(printable).join('\n');
}

/** Why the baseline is not replaced: the kinds found, at most a few. */
function keptBecause(report: AuditReport): string {
  const kinds = [...new Set(report.findings.map((f) => f.kind))];
  const found = kinds.length <= 4 ? kinds.join(', ') : `${kinds.slice(0, 4).join(', ')} and more`;
  return report.incomplete !== undefined ? `${found}, and could not finish` : found;
}

/**
 * A refusal found by the audit (a checkpoint that does not open, a key the service should not
 * name, an answer that does not parse), as main() shows refusals, but not closed as a local check
 * ("nothing was signed or sent"): the audit read the service to find it.
 */
function explainAuditRefusal(e: BatonError): string {
  return explainRefusal(e, 'baton audit', 'Found by this audit, on this machine, in what it read from the service and the files given.');
}

export async function runAudit(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('audit', {
    args: argv,
    allowPositionals: true,
    options: {
      trust: { type: 'string' },
      previous: { type: 'string' },
      root: { type: 'string', multiple: true },
      'invocation-max-age': { type: 'string' },
      'max-pending': { type: 'string' },
      keys: { type: 'string' },
      tenant: { type: 'string' },
      'clock-skew': { type: 'string' },
      'save-checkpoint': { type: 'string' },
      'tree-size': { type: 'string' },
      quiet: { type: 'boolean', default: false },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help) {
    io.out(AUDIT_HELP);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`, AUDIT_HELP);
  refuseStdoutPath(values['save-checkpoint'], '--save-checkpoint', AUDIT_HELP);
  if (values.tenant === '') throw new UsageError('--tenant takes a tenant id (ten_...)', AUDIT_HELP);
  // Server and key as every online command resolves them: flags, then environment, then the
  // context (src/cli/context.ts).
  const { server, serverFrom, apiKey, context, keyWithheld, envSetAside } = resolveTarget(values, io, DEFAULT_SERVER);
  if (!apiKey)
    throw new UsageError(
      `give --api-key (an audit-scope key)${values.context === undefined ? ', set BATON_API_KEY,' : ''} or use a context that has one${keyWithheld !== undefined ? ` (${keyWithheld})` : context !== undefined ? ` (context "${context}" has no key)` : ''}${envSetAside !== undefined ? `; ${envSetAside}` : ''}`,
      AUDIT_HELP,
    );
  if (envSetAside !== undefined) io.err(`note: ${envSetAside}`);
  const timeoutMs = values.timeout !== undefined ? integerFlag('--timeout', values.timeout, 1) : DEFAULT_TIMEOUT_MS;
  let baseUrl: string;
  try {
    // The same check of the URL as every other online command's client (BatonClient).
    baseUrl = new BatonClient({ baseUrl: server, timeoutMs }).baseUrl;
  } catch (e) {
    throw new UsageError(`${serverFrom}: ${(e as Error).message}`);
  }
  const decisions = {
    ...(values.root !== undefined ? { trustedRoots: values.root } : {}),
    ...(values['invocation-max-age'] !== undefined
      ? { invocationMaxAgeSeconds: integerFlag('--invocation-max-age', values['invocation-max-age'], 1) }
      : {}),
    ...(values['clock-skew'] !== undefined ? { clockSkewSeconds: integerFlag('--clock-skew', values['clock-skew'], 0) } : {}),
  };
  let lastShown = -1;
  const options: AuditOptions = {
    baseUrl,
    apiKey,
    timeoutMs,
    ...(values.trust !== undefined ? { trust: readLogTrust(values.trust, AUDIT_HELP) } : {}),
    ...(values.tenant !== undefined ? { tenantId: values.tenant } : {}),
    ...(values.previous !== undefined ? { previousCheckpoint: readLocalText(values.previous, '--previous', AUDIT_HELP) } : {}),
    // Parsed as baton log proof parses it: a checkpoint has at least one leaf to audit.
    ...(values['tree-size'] !== undefined ? { treeSize: integerFlag('--tree-size', values['tree-size'], 1) } : {}),
    ...(values['max-pending'] !== undefined ? { maxPendingSeconds: integerFlag('--max-pending', values['max-pending'], 1) } : {}),
    ...(values.keys !== undefined
      ? { serviceKeys: publishedKeysFromText(readLocalText(values.keys, '--keys', AUDIT_HELP), values.keys) }
      : {}),
    decisions,
    onProgress: (done, total) => {
      // One line per tenth of the log at most, so long runs show life without flooding.
      const step = Math.floor((done * 10) / Math.max(total, 1));
      if (values.quiet || values.json || step === lastShown) return;
      lastShown = step;
      io.err(`audit: ${done}/${total} entries checked`);
    },
  };
  let report: AuditReport;
  try {
    report = await auditLog(options);
  } catch (e) {
    if (!(e instanceof BatonError) || values.json) throw e;
    io.err(explainAuditRefusal(e));
    return exitCodeFor(e);
  }
  // The saved checkpoint is the next run's baseline: replaced only by one the audit found nothing
  // wrong with, or a rollback or split view served once would become the view checked against.
  // With --tree-size it is the latest checkpoint, which --previous was compared with and which
  // extends the one audited: saving the smaller one would let the next run accept a log rolled
  // back to anything that extends it.
  const save = values['save-checkpoint'];
  if (save !== undefined && report.ok)
    await writeOutputFile(save, report.latestCheckpoint ?? report.checkpoint, '--save-checkpoint', AUDIT_HELP);
  else if (save !== undefined)
    io.err(
      printable(
        existsSync(save)
          ? `note: ${save} was not written, so the baseline it holds is kept: the audit found ${keptBecause(report)}. Keep using it as --previous, and keep this report (it holds the checkpoint served) as evidence until the findings are explained.`
          : `note: ${save} was not written: the audit found ${keptBecause(report)}. Keep this report (it holds the checkpoint served) as evidence until the findings are explained.`,
      ),
    );
  if (values.json) printJson(io, report);
  else io.out(summary(report));
  // An audit that could not finish still proved what it found (a split view or rollback from the
  // signed notes outranks "could not check"): exit 1. Only with nothing found is it the service's
  // failure, exit 3 (auditLog throws then; this is in case a report says so itself).
  return report.ok ? 0 : report.findings.length > 0 ? 1 : 3;
}
