/**
 * `baton tools` and `baton approvals`: the tenant's versioned tool catalog,
 * and the humans' side of approval gates (calls waiting for approval, and
 * delegations held because their tools form the lethal trifecta).
 */
import { parseCliArgs } from './args.js';
import {
  clientFrom,
  COMMON_OPTIONS,
  EXIT_HELP,
  integerFlag,
  printJson,
  readJsonArg,
  readKeyFile,
  SERVER_HELP,
  SERVER_OPTIONS,
  calendarIso,
} from './common.js';
import { oneLine, printableLines, UsageError, type CliIo } from './io.js';
import type { GrantStatus } from '../protocol/lists.js';
import {
  createApprovalDecision,
  type ApprovalStatus,
  type ApprovalView,
  type PublishToolsInput,
  type ToolDocumentView,
} from '../sdk/tools.js';

export const TOOLS_HELP = `Usage: baton tools show [--version <n>]
       baton tools show --tenant <id>                         (admin key)
       baton tools publish <file.json|-|JSON> --tenant <id>   (admin key)

show     prints the tenant's current tool catalog and approval settings (or one version):
         each tool with its cost floor and rate limit, the rules, the approver DIDs,
         the webhook and cost calibration. With --tenant and the admin key: that
         tenant's current version, its webhook URL whole (other keys see its scheme).
publish  publishes the next version: the file holds {base_version, strict, tools,
         rules?, default_decision?, approvers?, webhook_url?, cost_calibration?}
         (webhook_url: where each new pending approval is POSTed; cost_calibration:
         {ratio_above, min_metered_invocations}, default 1.2 and 3); base_version
         must be the current version (0 for the first, else what show --tenant
         prints), so concurrent publishers cannot overwrite each other.

Options:
  --version <n>        a past version (versions are immutable)
  --tenant <id>        the tenant to show or publish for (admin key)
  --json               print the service's answer
  -h, --help           show this help

${SERVER_HELP}

${EXIT_HELP}`;

export const APPROVALS_HELP = `Usage: baton approvals list [--status pending|approved|rejected|expired|used]
       baton approvals show <id>
       baton approvals approve <id|dr-hash> --actor <name> --reason <text>
       baton approvals reject  <id|dr-hash> --actor <name> --reason <text>
       baton approvals approve|reject <id> --sign-with <keyfile> --reason <text>
       baton approvals grants  [--status pending|approved|rejected]

Calls a tenant rule sent to a human wait as approvals (apr_...): approve one and
the agent's retry of the same call is allowed once. Delegations whose tools
together form the lethal trifecta wait as grants, named by their hash (sha256:...).
Deciding needs an API key with the approve scope, an actor and a non-blank reason;
or, without a key, --sign-with the key file of an approver DID the tenant lists
(its tool document's approvers): the signed record is the authority, and the DID
is recorded as the actor.

list shows what each approval allows: the tool and tool server, the command and the
args exactly as the agent signed them, who asked, the rule and the deadline (UTC).
Long values are shortened there (marked "more characters"); show prints all of it.
Invisible characters (zero-width, bidi, soft hyphen, controls) print as \\uXXXX
escapes, and names and values are JSON-quoted, so a look-alike cannot pass for a
declared tool.

Options:
  --status <s>         only approvals (or grants) in this state
  --actor <name>       who decides (recorded and signed into the service receipt)
  --sign-with <file>   decide as the approver DID of this key file (from baton keygen), no API key needed
  --reason <text>      why (required, non-blank)
  --json               print the service's answer
  -h, --help           show this help

${SERVER_HELP}

${EXIT_HELP}`;

export async function runTools(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('tools', {
    args: argv,
    allowPositionals: true,
    options: { version: { type: 'string' }, tenant: { type: 'string' }, ...SERVER_OPTIONS, ...COMMON_OPTIONS },
  });
  if (values.help || positionals.length === 0) {
    io.out(TOOLS_HELP);
    return values.help ? 0 : 2;
  }
  const [sub, arg, ...rest] = positionals;
  if (rest.length > 0) throw new UsageError('too many arguments', TOOLS_HELP);
  const client = clientFrom(values, io);
  if (sub === 'show') {
    if (values.tenant !== undefined && values.version !== undefined)
      throw new UsageError('--tenant shows the current version; a past version is read with a key of the tenant', TOOLS_HELP);
    const doc =
      values.tenant !== undefined
        ? await client.tools.currentOf(values.tenant)
        : values.version === undefined
          ? await client.tools.current()
          : await client.tools.version(integerFlag('--version', values.version, 1));
    if (values.json) printJson(io, doc);
    else io.out(describeToolDocument(doc));
    return 0;
  }
  if (sub === 'publish') {
    if (arg === undefined) throw new UsageError('give the catalog file (or - for stdin, or inline JSON)', TOOLS_HELP);
    if (values.tenant === undefined) throw new UsageError('give --tenant <id>', TOOLS_HELP);
    const input = (await readJsonArg(arg, 'catalog')) as PublishToolsInput;
    const doc = await client.tools.publish(values.tenant, input);
    if (values.json) printJson(io, doc);
    else io.out(oneLine(`PUBLISHED: tool catalog v${doc.version} (${doc.tools.length} tools), ${doc.hash}`));
    return 0;
  }
  throw new UsageError(`unknown subcommand "${sub}"`, TOOLS_HELP);
}

/**
 * A tool document as the operator reads it: every setting that decides a call (each tool's cost floor
 * and rate limit, the rules, the approvers, the webhook and cost calibration). The server's strings
 * are kept to one line each and cut to a printable length; --json has them whole.
 */
function describeToolDocument(doc: ToolDocumentView): string {
  const lines = [`tool catalog v${doc.version} (${doc.strict ? 'strict' : 'not strict'}, default ${doc.default_decision}), ${doc.hash}`];
  for (const t of doc.tools) {
    const flags = [t.untrusted_content && 'untrusted', t.private_data_access && 'private', t.external_communication && 'external'].filter(
      Boolean,
    );
    const limits = [
      t.cost_per_invocation_usd === undefined ? '' : `  cost ${t.cost_per_invocation_usd} USD/call`,
      t.rate_limit_per_minute === undefined ? '' : `  ${t.rate_limit_per_minute} calls/min`,
    ].join('');
    lines.push(
      `  ${t.name}  ${t.type}  ${t.blast_radius}  ${t.action_type}${flags.length ? `  [${flags.join(',')}]` : ''}${t.tags.length ? `  tags ${t.tags.join(',')}` : ''}${limits}`,
    );
  }
  lines.push(`  rules: ${doc.rules.map((r) => `${r.id}->${r.decision}`).join(', ') || '(none)'}`);
  lines.push(`  approvers: ${doc.approvers.join(', ') || '(none: API keys with the approve scope only)'}`);
  lines.push(`  webhook: ${doc.webhook_url ?? '(none)'}`);
  // Optional here: the answer's shape does not require it (a server older than cost calibration sends none).
  const calibration = doc.cost_calibration as ToolDocumentView['cost_calibration'] | undefined;
  if (calibration !== undefined)
    lines.push(
      `  cost calibration: flagged above ${calibration.ratio_above}x the declared cost, over at least ${calibration.min_metered_invocations} metered invocations${doc.cost_calibration_default === true ? ' (the default)' : ''}`,
    );
  return printableLines(lines);
}

export async function runApprovals(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('approvals', {
    args: argv,
    allowPositionals: true,
    options: {
      status: { type: 'string' },
      actor: { type: 'string' },
      reason: { type: 'string' },
      'sign-with': { type: 'string' },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help || positionals.length === 0) {
    io.out(APPROVALS_HELP);
    return values.help ? 0 : 2;
  }
  const [sub, id, ...rest] = positionals;
  if (rest.length > 0) throw new UsageError('too many arguments', APPROVALS_HELP);
  const client = clientFrom(values, io);
  if (sub === 'list') {
    const { approvals } = await client.tools.approvals(values.status as ApprovalStatus | undefined);
    if (values.json) printJson(io, { approvals });
    else if (approvals.length === 0) io.out('no approvals');
    else for (const a of approvals) io.out(describeApproval(a, LIST_LIMITS));
    return 0;
  }
  if (sub === 'show') {
    if (id === undefined) throw new UsageError('give the approval id (apr_...) to show', APPROVALS_HELP);
    if (id.startsWith('sha256:'))
      throw new UsageError('show reads approvals of calls (apr_...); held delegations: baton approvals grants', APPROVALS_HELP);
    const approval = await client.tools.approval(id);
    if (values.json) printJson(io, approval);
    else io.out(describeApproval(approval, FULL));
    return 0;
  }
  if (sub === 'grants') {
    const { grants } = await client.tools.grants(values.status as GrantStatus | undefined);
    if (values.json) printJson(io, { grants });
    else if (grants.length === 0) io.out('no held delegations');
    else for (const g of grants) io.out(`${g.dr_hash}  ${g.status}  ${oneLine(g.explanation)}`);
    return 0;
  }
  if (sub === 'approve' || sub === 'reject') {
    if (id === undefined) throw new UsageError(`give the approval id (or the held delegation's hash) to ${sub}`, APPROVALS_HELP);
    const keyFile = values['sign-with'];
    if (keyFile !== undefined) {
      if (id.startsWith('sha256:'))
        throw new UsageError('--sign-with decides approvals of calls (apr_...), not held delegations', APPROVALS_HELP);
      if (values.actor !== undefined)
        throw new UsageError('--sign-with records the signing DID as the actor: leave out --actor', APPROVALS_HELP);
      if (!values.reason?.trim()) throw new UsageError('give --reason <text>: a decision needs a non-blank reason', APPROVALS_HELP);
      const signer = await readKeyFile(keyFile);
      const record = createApprovalDecision({ signer, approvalId: id, decision: sub, reason: values.reason });
      const decided = await client.tools.decideSigned(record);
      if (values.json) printJson(io, decided);
      else
        io.out(
          `${decided.status.toUpperCase()}: ${id} by ${signer.did} (signed): ${oneLine(values.reason)}\n${describeApproval(decided, FULL)}`,
        );
      return 0;
    }
    if (!values.actor?.trim()) throw new UsageError('give --actor <name>: who decides', APPROVALS_HELP);
    if (!values.reason?.trim()) throw new UsageError('give --reason <text>: a decision needs a non-blank reason', APPROVALS_HELP);
    const input = { actor: values.actor, reason: values.reason };
    const decided = id.startsWith('sha256:')
      ? await client.tools.decideGrant(id, sub, input)
      : sub === 'approve'
        ? await client.tools.approve(id, input)
        : await client.tools.reject(id, input);
    if (values.json) printJson(io, decided);
    else if ('dr_hash' in decided) io.out(`${decided.status.toUpperCase()}: ${id} by ${oneLine(input.actor)}: ${oneLine(input.reason)}`);
    else
      io.out(
        `${decided.status.toUpperCase()}: ${id} by ${oneLine(input.actor)}: ${oneLine(input.reason)}\n${describeApproval(decided, FULL)}`,
      );
    return 0;
  }
  throw new UsageError(`unknown subcommand "${sub}"`, APPROVALS_HELP);
}

// ---------------------------------------------------------------- what an approver reads

interface Limits {
  /** Characters of one name or value (an escape counts as one); the rest is cut with a marker. */
  readonly chars: number;
}
/**
 * The list stays scannable: one header line per approval, one line per arg under it, long names and
 * values cut. Every arg is listed, so none can be pushed out of sight by padding the args.
 */
const LIST_LIMITS: Limits = { chars: 160 };
const FULL: Limits = { chars: Infinity };

/** One escape (`\uXXXX`, `\n`...) or one code point: where a shortened value may be cut. */
const UNITS = /\\u[0-9a-fA-F]{4}|\\[^u]|[^\\]/gsu;

/**
 * `value` as JSON on one line, every invisible character escaped: strings are quoted, so padding
 * shows, and `update_record\u200b` never reads as `update_record`. Cut past `limits.chars` with
 * an explicit marker naming where to read all of it.
 */
function shown(value: unknown, id: string, limits: Limits): string {
  const text = oneLine(JSON.stringify(value) ?? String(value));
  if (text.length <= limits.chars) return text;
  const units = text.match(UNITS) ?? [];
  if (units.length <= limits.chars) return text;
  return `${units.slice(0, limits.chars).join('')}…[${units.length - limits.chars} more characters: baton approvals show ${id}, or --json]`;
}

/** A unix time in seconds as a readable UTC time (the raw value is in --json). */
function utc(seconds: number): string {
  return (
    calendarIso(seconds)
      ?.replace('T', ' ')
      .replace(/\.\d{3}Z$/, ' UTC') ?? String(seconds)
  );
}

/** A header line (id, status, tool, tool server, requester, deadline), then what is approved, indented. */
function describeApproval(a: ApprovalView, limits: Limits): string {
  const id = oneLine(a.id);
  const q = (v: unknown) => shown(v, id, limits);
  const deadline =
    a.status === 'pending' || a.status === 'approved'
      ? `  until ${utc(a.expires_at)}`
      : a.status === 'expired'
        ? `  expired ${utc(a.expires_at)}`
        : '';
  const lines = [
    `${id}  ${a.status}  tool ${a.tool === null ? '(none named)' : q(a.tool)} on ${q(a.tool_server)}  asked by ${oneLine(a.requested_by)}${deadline}`,
  ];
  const notKept = '(not recorded: approval made before the service kept it)';
  lines.push(`    cmd   ${a.cmd == null ? notKept : q(a.cmd)}`);
  if (a.args == null) lines.push(`    args  ${notKept}`);
  else {
    const entries = Object.entries(a.args);
    if (entries.length === 0) lines.push('    args  {}');
    entries.forEach(([k, v], i) => lines.push(`    ${i === 0 ? 'args' : '    '}  ${q(k)}: ${q(v)}`));
  }
  lines.push(`    why   ${oneLine(a.explanation)}`);
  if (limits === FULL) {
    lines.push(`    rule  ${oneLine(a.rule)} (catalog v${a.catalog_version})`);
    lines.push(
      `    call  invocation ${oneLine(a.invocation_jti)}, asked ${utc(a.created_at)}, chain ${a.dr_chain.map(oneLine).join(' > ')}`,
    );
    if (a.status !== 'pending' && a.status !== 'approved' && a.status !== 'expired') lines.push(`    deadline was ${utc(a.expires_at)}`);
  }
  const d = a.decision;
  if (d !== null) lines.push(`    decided ${utc(d.at)} by ${q(d.actor)} (${oneLine(d.decided_by)}): ${q(d.reason)}`);
  if (a.used_at !== null) lines.push(`    used  ${utc(a.used_at)}`);
  return lines.join('\n');
}
