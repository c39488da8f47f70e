/**
 * `baton log`: where a service receipt sits in the tenant's transparency log, proved and checked.
 * `proof` fetches a service receipt's inclusion proof (audit key) and checks it; `check` checks
 * saved proofs again, offline, against pinned log keys; `consistency` checks that one signed
 * checkpoint extends another. The checks are the SDK's (src/sdk/audit.ts), so the CLI, the SDK and
 * `baton audit` judge a proof alike.
 */
import { groupHelp, parseCliArgs, runSubcommand, type Subcommand } from './args.js';
import {
  clientFrom,
  COMMON_OPTIONS,
  integerFlag,
  parseJsonDocument,
  printJson,
  readLocalText,
  readText,
  SERVER_HELP,
  SERVER_OPTIONS,
  refuseStdoutPath,
  writeOutputFile,
} from './common.js';
import { inspectJws, looksLikeJws, printable } from './inspect.js';
import { findServiceReceipts } from './service-receipt.js';
import { UsageError, type CliIo } from './io.js';
import { BatonError } from '../protocol/errors.js';
import { openCheckpoint, parseTlogProof } from '../protocol/tlog-proof.js';
import {
  judgeCheckpointsByTiles,
  logPolicy,
  logRefusedProof,
  verifyCheckpointConsistency,
  verifyServiceReceiptInclusion,
  type ConsistencyResult,
  type LogTrust,
} from '../sdk/audit.js';
import { BatonApiError, type BatonClient, type ServiceReceiptLogProof } from '../sdk/client.js';

const TRUST_HELP = `The log's keys: --trust <file> pins them, as JSON {"origin": "...",
"logKeys": ["<note verifier key>", ...], "witnesses"?: [...],
"requiredCosignatures"?: n}, or a saved GET /v1/log answer (--save-trust
writes one).`;

const PROOF_HELP = `Usage: baton log proof <service-receipt-id> [--trust <file>] [--save <file>] [options]

Fetches a service receipt's inclusion proof from the tenant's transparency log
(GET /v1/log/service-receipts/{id}/proof, audit key) and checks it: the
checkpoint's signature under the log's keys, its origin, the witness quorum,
and that the proof binds the service receipt to the checkpoint's root. With
--save the answer is kept, for "baton log check" to check again later,
anywhere, without the service.

${TRUST_HELP} Without --trust the keys the service serves (GET /v1/log) are
taken, and the output says so: that proves the service is consistent with
itself, not that it is the log you trust.

A service receipt enters the log in the integration round after it is
written (a fraction of a second): until then the service answers 404 with
details.status "pending"; ask again.

The answer's numeric id is not signed (a service receipt's JWS does not carry
it): the output names the receipt by what its proven payload says (kind,
subject, jti). --jws <file> checks the proof is for exactly the receipt you
hold (its JWS, or any answer carrying it).

Options:
  --trust <file>       the log's keys, pinned
  --save-trust <file>  write the log's keys fetched from the service (GET /v1/log)
  --jws <file|->       the service receipt you hold: the proof must be for exactly it
  --tree-size <n>      prove under the signed checkpoint of this size (default: the latest)
  --save <file>        write the proof answer (service receipt, index, size, bundle)
  --json               print the result as JSON
  -h, --help           show this help

${SERVER_HELP}

Exit codes: 0 included, 1 the proof does not hold or the service refused
(404 for a service receipt of another tenant, or one not yet logged), 2 unusable
input, 3 server unreachable, timed out or failing.`;

const CHECK_HELP = `Usage: baton log check <file|-> ... --trust <file> [--json]

Checks saved inclusion proofs offline: each file holds a proof answer
(baton log proof --save, or a saved GET /v1/log/service-receipts/{id}/proof;
"-" reads stdin). For each: the checkpoint's signature under the pinned log
keys, its origin and witness quorum, that the proof binds the service
receipt's JWS to the checkpoint's root at the index the answer names, and
that the answer's tree_size is the checkpoint's. The answer's numeric id is
not signed: a receipt is named by what its proven payload says, and --jws
<file> checks a proof is for exactly the receipt you hold. The service
receipt's own signature is checked by "baton service-receipt verify" on the
same file.

A proof holds under any checkpoint the log's key signed. Unless the trust
requires witness cosignatures (requiredCosignatures), that includes a
forked view shown only to you, so INCLUDED does not rule out a split view
and the output says so: check the checkpoint extends one you saved earlier
with "baton log consistency", or require witnesses.

${TRUST_HELP}

Options:
  --trust <file>       the log's keys, pinned (required: nothing is fetched)
  --jws <file|->       with one proof file: the service receipt it must be for
  --json               print each result as JSON
  -h, --help           show this help

Exit codes: 0 every proof holds, 1 some proof does not, 2 unusable input.`;

const CONSISTENCY_HELP = `Usage: baton log consistency <older-note> <newer-note> --trust <file> [--proof <file>] [options]

Checks that the newer signed checkpoint extends the older one: both notes
must open under the pinned log keys. Equal sizes with different roots are a
split view, printed with both notes as the evidence. A newer checkpoint
smaller than the older, shown to be its prefix, is NOT CHECKED (exit 3): a
stale view reads the same as a rollback, and the order is only yours. The
notes are files (baton audit --save-checkpoint, or saved GET
/v1/log/checkpoint answers).

Online (audit key), the consistency proof is asked (GET /v1/log/consistency,
RFC 9162): a proof that verifies settles the pair, as nothing in the path can
forge one. Any other answer (a refusal, a proof that does not verify) is no
evidence, as anyone in the path can forge it: then the larger checkpoint's
level-0 tiles are read (GET /v1/log/tile/0/...), and when they rebuild its
signed root the smaller must be their prefix, else it is a split view; when
they cannot be read either, exit 3, could not check. With --proof (a saved GET /v1/log/consistency
answer for the two notes' sizes, or a JSON array of base64 hashes) nothing
is fetched; a proof file that is not well-formed, is for other sizes, or
does not link the two notes is unusable input (exit 2), not a split view.

${TRUST_HELP}

Options:
  --trust <file>       the log's keys, pinned (required)
  --proof <file>       the consistency proof, saved
  --json               print the result as JSON
  -h, --help           show this help

${SERVER_HELP}

Exit codes: 0 consistent, 1 split view, 2 unusable input, 3 server
unreachable, timed out or failing, or the pair could not be checked (a
smaller second note included).`;

function parseJson(text: string, what: string, help: string): unknown {
  return parseJsonDocument(text, what, () => new UsageError(`${what} is not JSON`, help));
}

/** The log's keys from a --trust file: a LogTrust, or a saved GET /v1/log answer (its verifier_keys). */
export function logTrustFrom(value: unknown, what: string, help: string): LogTrust {
  const saved = (value ?? {}) as Partial<LogTrust> & { verifier_keys?: unknown };
  const t = saved.logKeys === undefined && saved.verifier_keys !== undefined ? { ...saved, logKeys: saved.verifier_keys } : saved;
  const strings = (v: unknown) => Array.isArray(v) && v.every((k) => typeof k === 'string');
  if (typeof t.origin !== 'string' || !strings(t.logKeys))
    throw new UsageError(`${what}: give {"origin": "...", "logKeys": ["<verifier key>", ...]}, or a saved GET /v1/log answer`, help);
  if (
    (t.witnesses !== undefined && !strings(t.witnesses)) ||
    (t.requiredCosignatures !== undefined && typeof t.requiredCosignatures !== 'number')
  )
    throw new UsageError(`${what}: "witnesses" is a list of witness verifier keys, "requiredCosignatures" a number`, help);
  try {
    // Every key must parse, and the witness quorum be one that can hold, now: a bad trust file is
    // unusable input (exit 2), not a proof that does not hold.
    logPolicy(t as LogTrust);
  } catch (e) {
    throw new UsageError(`${what}: ${(e as Error).message}`, help);
  }
  return t as LogTrust;
}

/** Reads and checks a --trust file. */
export function readLogTrust(path: string, help: string): LogTrust {
  return logTrustFrom(parseJson(readLocalText(path, '--trust', help), `--trust ${path}`, help), `--trust ${path}`, help);
}

interface InclusionResult {
  readonly where: string;
  readonly included: boolean;
  /** The answer's id for the receipt: not signed (the JWS does not carry it), so never proof of which receipt this is. */
  readonly claimed_id: number;
  /** What the proven service receipt says of itself, from its payload: the log signed these bytes. */
  readonly kind: string | null;
  readonly subject: string | null;
  readonly jti: string | null;
  readonly leaf_index: number | null;
  readonly tree_size: number | null;
  readonly origin: string | null;
  readonly reason?: string;
}

/** A proof answer's shape, checked before anything is verified. */
function proofAnswerFrom(value: unknown, where: string, help: string): ServiceReceiptLogProof {
  const a = value as Partial<ServiceReceiptLogProof> | null;
  const ok =
    a !== null &&
    typeof a === 'object' &&
    typeof a.proof === 'string' &&
    typeof a.service_receipt?.jws === 'string' &&
    Number.isSafeInteger(a.service_receipt.id) &&
    Number.isSafeInteger(a.leaf_index) &&
    Number.isSafeInteger(a.tree_size);
  if (!ok)
    throw new UsageError(
      `${where} is not a proof answer: expected {"service_receipt": {"id", "jws"}, "leaf_index", "tree_size", "proof"} (baton log proof --save)`,
      help,
    );
  // A bundle that cannot be read (CR LF line endings, a missing line) proves nothing either way.
  try {
    parseTlogProof(a.proof!);
  } catch (e) {
    if (e instanceof BatonError) throw new UsageError(`${where}: its proof cannot be read: ${e.code}: ${e.message}`, help);
    throw e;
  }
  return a as ServiceReceiptLogProof;
}

/**
 * --jws: the service receipt the user holds, as its compact JWS or any answer carrying exactly one
 * (found as `baton service-receipt verify` finds them). The proof must be for exactly these bytes.
 */
async function heldReceiptFrom(file: string, help: string): Promise<string> {
  const found = findServiceReceipts(await readText(file, '--jws file'), file === '-' ? 'stdin' : file);
  const held = found.length === 1 ? found[0]! : undefined;
  if (held !== undefined && !looksLikeJws(held.jws))
    throw new UsageError(`--jws ${file}: ${held.where} is not a readable compact JWS, so no proof can be for it`, help);
  if (held !== undefined) return held.jws;
  throw new UsageError(
    `--jws ${file} holds ${found.length} service receipts: give the one the proof must be for (its compact JWS, or an answer that carries it)`,
    help,
  );
}

/** What a service receipt's payload says of itself; null fields where it does not say (or does not decode). */
function receiptFacts(jws: string): Pick<InclusionResult, 'kind' | 'subject' | 'jti'> {
  const payload = inspectJws(jws, 'service receipt').payload as Record<string, unknown> | null;
  const text = (v: unknown) => (typeof v === 'string' ? v : null);
  return { kind: text(payload?.['baton_receipt']), subject: text(payload?.['subject']), jti: text(payload?.['jti']) };
}

/** Checks one proof answer under `trust`; never throws for a proof that does not hold. */
function checkInclusion(
  answer: ServiceReceiptLogProof,
  where: string,
  trust: LogTrust,
  now: number,
  expect: { held?: string | undefined; treeSize?: number | undefined } = {},
): InclusionResult {
  const base = { where, claimed_id: answer.service_receipt.id, ...receiptFacts(answer.service_receipt.jws) };
  const none = { leaf_index: null, tree_size: null, origin: null };
  // The receipt the user holds must be the one proven, byte for byte: the answer's id is unsigned.
  if (expect.held !== undefined && expect.held !== answer.service_receipt.jws)
    return { ...base, ...none, included: false, reason: 'the proof is for another service receipt than the one given with --jws' };
  try {
    const verified = verifyServiceReceiptInclusion(answer.service_receipt.jws, answer.proof, trust, now);
    const size = verified.checkpoint.checkpoint.size;
    const facts = { leaf_index: verified.index, tree_size: size, origin: verified.checkpoint.checkpoint.origin };
    const refuse = (reason: string): InclusionResult => ({ ...base, ...facts, included: false, reason });
    // The answer's own numbers are unsigned: they must say what the signed proof says.
    if (verified.index !== answer.leaf_index)
      return refuse(`the answer says leaf ${answer.leaf_index}, the proof proves leaf ${verified.index}`);
    if (size !== answer.tree_size) return refuse(`the answer says tree size ${answer.tree_size}, the checkpoint is of ${size}`);
    if (expect.treeSize !== undefined && size !== expect.treeSize)
      return refuse(`asked for a proof under the checkpoint of ${expect.treeSize} leaves, got one of ${size}`);
    return { ...base, ...facts, included: true };
  } catch (e) {
    if (!(e instanceof BatonError)) throw e;
    return { ...base, ...none, included: false, reason: `${e.code}: ${e.message}${originHint(answer.proof, trust)}` };
  }
}

/** When a checkpoint does not open: whether it is even of the log the pinned keys are for (unverified, as a hint). */
function originHint(bundle: string, trust: LogTrust): string {
  try {
    const origin = parseTlogProof(bundle).checkpoint.split('\n', 1)[0];
    return origin !== undefined && origin !== trust.origin
      ? ` The checkpoint names log ${origin}; the pinned keys are for ${trust.origin}: pin that log's keys.`
      : '';
  } catch {
    return '';
  }
}

/**
 * With no witness cosignatures required, a proof holds under any checkpoint the log's key signed,
 * including one of a fork shown to this auditor alone: INCLUDED does not rule out a split view.
 */
function splitViewNote(trust: LogTrust, results: readonly InclusionResult[]): string | undefined {
  if ((trust.requiredCosignatures ?? 0) > 0 || !results.some((r) => r.included)) return undefined;
  return (
    'the trust requires no witness cosignatures, so a proof holds under any checkpoint the log key signed, ' +
    'a forked view shown only to you included: this check does not rule out a split view. ' +
    'Check the checkpoint extends one you saved earlier (baton log consistency <saved note> <newer note> --trust <file>; ' +
    'baton audit --save-checkpoint keeps one), or require witnesses (witnesses and requiredCosignatures in the trust file)'
  );
}

const joinNotes = (...notes: (string | undefined)[]): string | undefined => {
  const some = notes.filter((n): n is string => n !== undefined);
  return some.length > 0 ? some.join('; ') : undefined;
};

function printInclusion(io: CliIo, results: readonly InclusionResult[], json: boolean, note?: string): number {
  const failed = results.filter((r) => !r.included).length;
  if (json) printJson(io, { valid: failed === 0, checked: results.length, failed, results, ...(note ? { note } : {}) });
  else {
    for (const r of results)
      io.out(
        printable(
          r.included
            ? `INCLUDED  ${r.where}  ${r.kind ?? '(no kind)'} ${r.subject ?? '(no subject)'} (jti ${r.jti ?? '?'}) is entry ${r.leaf_index} (counted from 0) of the ${r.tree_size} in ${r.origin}`
            : `INVALID   ${r.where}  ${r.reason}`,
        ),
      );
    // The kind, subject and jti come from the proven bytes; the answer's numeric id does not.
    if (failed < results.length)
      io.out('The receipts named are as their signed payloads say; the service receipt ids the answers carry are not signed.');
    if (note) io.out(`note: ${note}`);
  }
  return failed === 0 ? 0 : 1;
}

async function runProof(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('log proof', {
    args: argv,
    allowPositionals: true,
    options: {
      trust: { type: 'string' },
      'save-trust': { type: 'string' },
      'tree-size': { type: 'string' },
      save: { type: 'string' },
      jws: { type: 'string' },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help) {
    io.out(PROOF_HELP);
    return 0;
  }
  if (positionals.length !== 1) throw new UsageError('give one service receipt id (GET /v1/service-receipts lists them)', PROOF_HELP);
  const id = integerFlag('service receipt id', positionals[0]!, 1);
  const treeSize = values['tree-size'] !== undefined ? integerFlag('--tree-size', values['tree-size'], 1) : undefined;
  refuseStdoutPath(values['save-trust'], '--save-trust', PROOF_HELP);
  refuseStdoutPath(values.save, '--save', PROOF_HELP);
  if (values.trust !== undefined && values['save-trust'] !== undefined)
    throw new UsageError('--save-trust saves the keys the service serves; with --trust they are not fetched', PROOF_HELP);
  const pinned = values.trust !== undefined ? readLogTrust(values.trust, PROOF_HELP) : undefined;
  const held = values.jws !== undefined ? await heldReceiptFrom(values.jws, PROOF_HELP) : undefined;
  const client: BatonClient = clientFrom(values, io);
  let trust = pinned;
  let note: string | undefined;
  if (trust === undefined) {
    const info = await client.logInfo();
    trust = logTrustFrom(info, `${client.baseUrl}/v1/log`, PROOF_HELP);
    note = `the log's keys were taken from the service itself (GET /v1/log); pin them with --trust`;
    if (values['save-trust'] !== undefined) {
      const saved = `${JSON.stringify({ origin: info.origin, logKeys: info.verifier_keys }, null, 2)}\n`;
      await writeOutputFile(values['save-trust'], saved, '--save-trust', PROOF_HELP);
      io.err(`saved the log's keys to ${values['save-trust']}: check offline with --trust ${values['save-trust']}`);
    }
  }
  const answer = await client.logProof(id, treeSize !== undefined ? { treeSize } : {});
  if (values.save !== undefined) {
    await writeOutputFile(values.save, `${JSON.stringify(answer, null, 2)}\n`, '--save', PROOF_HELP);
    // The trust file this run pinned or saved, when there is one: the advice is then a command to run as is.
    const trustFile = values.trust ?? values['save-trust'] ?? '<file>';
    io.err(`saved the proof to ${values.save}: check it again with baton log check ${values.save} --trust ${trustFile}`);
  }
  const result = checkInclusion(answer, `#${id}`, trust, Math.floor(Date.now() / 1000), { held, treeSize });
  if (result.included && result.claimed_id !== id)
    return printInclusion(
      io,
      [{ ...result, included: false, reason: `asked for service receipt ${id}, got ${result.claimed_id}` }],
      values.json,
    );
  if (held === undefined && result.included)
    note = joinNotes(note, 'pass --jws <file> with the service receipt you hold to check the proof is for exactly it');
  return printInclusion(io, [result], values.json, joinNotes(note, splitViewNote(trust, [result])));
}

async function runCheck(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('log check', {
    args: argv,
    allowPositionals: true,
    options: { trust: { type: 'string' }, jws: { type: 'string' }, ...COMMON_OPTIONS },
  });
  if (values.help) {
    io.out(CHECK_HELP);
    return 0;
  }
  if (positionals.length === 0) throw new UsageError('give proof files (baton log proof --save), or - for stdin', CHECK_HELP);
  if (positionals.filter((p) => p === '-').length > 1) throw new UsageError('stdin ("-") can be read once', CHECK_HELP);
  if (values.jws !== undefined && positionals.length > 1)
    throw new UsageError('--jws names the one service receipt a proof must be for: give one proof file with it', CHECK_HELP);
  if (values.trust === undefined)
    throw new UsageError(
      "give --trust <file>: an offline check needs the log's keys pinned (baton log proof --save-trust writes them)",
      CHECK_HELP,
    );
  const trust = readLogTrust(values.trust, CHECK_HELP);
  const held = values.jws !== undefined ? await heldReceiptFrom(values.jws, CHECK_HELP) : undefined;
  // Every file is read and parsed before anything is judged: a bad input is exit 2, not a verdict.
  const answers: { where: string; answer: ServiceReceiptLogProof }[] = [];
  for (const file of positionals) {
    const where = file === '-' ? 'stdin' : file;
    answers.push({ where, answer: proofAnswerFrom(parseJson(await readText(file, 'proof file'), where, CHECK_HELP), where, CHECK_HELP) });
  }
  const now = Math.floor(Date.now() / 1000);
  const results = answers.map((a) => checkInclusion(a.answer, a.where, trust, now, { held }));
  return printInclusion(io, results, values.json, splitViewNote(trust, results));
}

/**
 * A saved consistency proof: a GET /v1/log/consistency answer or a bare array of base64 SHA-256
 * hashes. A proof that is not even well-formed, or an answer for other sizes than the notes', is
 * unusable input (exit 2): only a well-formed proof for these two checkpoints can show a split view.
 */
function consistencyProofFrom(value: unknown, where: string, sizes: readonly [number, number]): string[] {
  const answer = Array.isArray(value) ? { proof: value } : ((value ?? {}) as { proof?: unknown; from?: unknown; to?: unknown });
  const proof = answer.proof;
  const isHash = (h: unknown) => typeof h === 'string' && /^[A-Za-z0-9+/]{43}=$/.test(h);
  if (!Array.isArray(proof) || !proof.every(isHash))
    throw new UsageError(
      `${where}: give a saved GET /v1/log/consistency answer or a JSON array of base64 SHA-256 hashes`,
      CONSISTENCY_HELP,
    );
  const [from, to] = [Math.min(...sizes), Math.max(...sizes)];
  if ((answer.from !== undefined && answer.from !== from) || (answer.to !== undefined && answer.to !== to))
    throw new UsageError(
      `${where} proves ${String(answer.from)} to ${String(answer.to)} leaves, not ${from} to ${to} as the two notes need: save GET /v1/log/consistency?from=${from}&to=${to}`,
      CONSISTENCY_HELP,
    );
  return proof as string[];
}

/**
 * Refuses a service that names another log than the trust file's (GET /v1/log): a key of another
 * tenant (a saved context, say) would read another tenant's log and report a false fork.
 */
async function requirePinnedLog(client: BatonClient, trust: LogTrust): Promise<void> {
  const served = (await client.logInfo()).origin;
  if (served !== trust.origin)
    throw new UsageError(
      `the service names the log ${printable(served)} for this API key (GET /v1/log), not ${trust.origin} that --trust pins: ` +
        'the key is of another tenant (a context or BATON_API_KEY of another), or the server is another service. ' +
        `Give an audit key of the tenant of ${trust.origin}, or the trust file of ${printable(served)}.`,
      CONSISTENCY_HELP,
    );
}

/**
 * The pair judged online: the consistency proof the log serves first (one request; a proof that
 * verifies settles it, and no proxy can forge one), and when it does not, the larger checkpoint's
 * level-0 tiles, which nothing in the path can forge either when they rebuild its signed root. Any
 * other proof answer (a proof that does not verify, a refusal, even in Baton's envelope, a proxy's
 * page, a failure) is no evidence: with the tiles unreadable too, it is thrown as a check that could
 * not be made (exit 3).
 */
async function judgedOnline(
  client: BatonClient,
  notes: readonly [string, string],
  trust: LogTrust,
  now: number,
  sizes: readonly [number, number],
): Promise<ConsistencyResult> {
  const [from, to] = [Math.min(...sizes), Math.max(...sizes)];
  let proofSaid: string;
  let failed: BatonApiError | undefined;
  try {
    const checked = verifyCheckpointConsistency(notes[0], notes[1], (await client.logConsistency(from, to)).proof, trust, now);
    // A rollback here is the order given: the proof showed the smaller a prefix of the larger.
    if (checked.consistent || checked.finding.kind === 'rollback') return checked;
    proofSaid = `served does not join them (${checked.finding.kind === 'not-consistent' ? checked.finding.reason : checked.finding.kind})`;
  } catch (e) {
    if (!(e instanceof BatonApiError) || e.status === 401 || e.status === 403) throw e;
    const refusal = logRefusedProof(e, to) ? ', worded as the log refusing it' : '';
    proofSaid = `was answered HTTP ${e.status} ${e.code} (${e.message})${refusal}`;
    failed = e;
  }
  const byTiles = await judgeCheckpointsByTiles(client, notes[0], notes[1], trust, now);
  if (byTiles.result !== null) return byTiles.result;
  const said = {
    code: 'UNEXPECTED_RESPONSE' as const,
    message:
      `Could not check the checkpoints of ${from} and ${to} leaves: the consistency proof ${proofSaid}, and the log's tiles of ${to} leaves did not judge them (${byTiles.why}). ` +
      'A proof answer alone is no evidence against the log (anything in the path can forge it), so this is no split view.',
    suggestion: 'Ask again; if it persists, read the log through another path, or ask the operator, keeping both notes.',
  };
  const asked = { method: 'GET', url: `${client.baseUrl.replace(/\/+$/, '')}/v1/log/consistency?from=${from}&to=${to}` };
  throw failed === undefined
    ? new BatonApiError({ status: 200, ...said, ...asked })
    : new BatonApiError({ status: failed.status, ...said, ...asked, details: failed.details, requestId: failed.requestId, cause: failed });
}

async function runConsistency(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('log consistency', {
    args: argv,
    allowPositionals: true,
    options: { trust: { type: 'string' }, proof: { type: 'string' }, ...SERVER_OPTIONS, ...COMMON_OPTIONS },
  });
  if (values.help) {
    io.out(CONSISTENCY_HELP);
    return 0;
  }
  if (positionals.length !== 2) throw new UsageError('give two checkpoint notes: the older, then the newer', CONSISTENCY_HELP);
  if (values.trust === undefined) throw new UsageError("give --trust <file>: both notes must open under the log's keys", CONSISTENCY_HELP);
  const trust = readLogTrust(values.trust, CONSISTENCY_HELP);
  const [olderNote, newerNote] = positionals.map((p) => readLocalText(p, 'checkpoint note', CONSISTENCY_HELP)) as [string, string];
  const now = Math.floor(Date.now() / 1000);
  const policy = logPolicy(trust);
  const sizes = positionals.map((p, i) => {
    try {
      return openCheckpoint(i === 0 ? olderNote : newerNote, policy, now).checkpoint.size;
    } catch (e) {
      if (!(e instanceof BatonError)) throw e;
      throw new UsageError(`${p} does not open under the pinned log keys: ${e.code}: ${e.message}`, CONSISTENCY_HELP);
    }
  }) as [number, number];
  const [from, to] = [Math.min(...sizes), Math.max(...sizes)];
  let result: ConsistencyResult;
  if (values.proof !== undefined) {
    const where = values.proof;
    const proof = consistencyProofFrom(parseJson(readLocalText(where, '--proof', CONSISTENCY_HELP), where, CONSISTENCY_HELP), where, sizes);
    result = verifyCheckpointConsistency(olderNote, newerNote, proof, trust, now);
  } else if (from !== to && from !== 0) {
    const client = clientFrom(values, io);
    await requirePinnedLog(client, trust);
    result = await judgedOnline(client, [olderNote, newerNote], trust, now, sizes);
  } else {
    // Equal sizes need no proof (the roots must match); from size 0 the service proves nothing either.
    result = verifyCheckpointConsistency(olderNote, newerNote, [], trust, now);
  }
  // Only evidence nothing in the path can forge counts against the log: a saved file
  // that does not link them may be corrupt, or for another pair. (A finding that needs no proof,
  // equal sizes with different roots, or a size-0 checkpoint with another root, still stands.)
  if (values.proof !== undefined && !result.consistent && result.finding.kind === 'not-consistent' && from > 0)
    throw new UsageError(
      `the saved proof ${values.proof} does not link these checkpoints (${from} to ${to} leaves): ${result.finding.reason}. ` +
        'It may be corrupt, or for another pair of checkpoints, so it is no evidence against the log. ' +
        'Run without --proof to ask the log itself: its level-0 tiles, when they rebuild the larger root, decide the pair.',
      CONSISTENCY_HELP,
    );
  // The second note smaller than the first and shown its prefix (by a proof, the tiles, or size 0):
  // the order is the caller's claim, and a stale cache serves the same pair, so it proves nothing.
  if (!result.consistent && result.finding.kind === 'rollback') {
    const reason = `the second note (${sizes[1]} leaves) is smaller than the first (${sizes[0]}) and its prefix: a stale view, or a rollback no note can prove`;
    if (values.json) printJson(io, { consistent: null, checked: false, reason });
    else {
      io.out(printable(`NOT CHECKED  ${reason}`));
      io.out(
        'Keep both notes and check again later (or with a note saved after this one); if you gave them the other way round, swap them.',
      );
    }
    return 3;
  }
  if (values.json)
    printJson(
      io,
      result.consistent ? { consistent: true, older: sizes[0], newer: sizes[1] } : { consistent: false, finding: result.finding },
    );
  else if (result.consistent) io.out(`CONSISTENT  the checkpoint of ${sizes[1]} leaves extends the one of ${sizes[0]}`);
  else {
    const f = result.finding;
    const [a, b] = f.kind === 'same-size-different-roots' ? f.checkpoints : [f.older, f.newer];
    const reason = f.kind === 'same-size-different-roots' ? `two checkpoints of ${f.size} leaves with different roots` : f.reason;
    io.out(printable(`SPLIT VIEW  ${reason}`));
    for (const [title, note] of [
      ['the first note', a.note],
      ['the second note', b.note],
    ] as const) {
      io.out(`\n--- ${title} (evidence)`);
      for (const line of note.replace(/\n$/, '').split('\n')) io.out(printable(line));
    }
  }
  return result.consistent ? 0 : 1;
}

const SUBCOMMANDS: Record<string, Subcommand> = {
  proof: { run: runProof, summary: "fetch a service receipt's inclusion proof and check it (audit key)" },
  check: { run: runCheck, summary: 'check saved inclusion proofs offline, against pinned log keys' },
  consistency: { run: runConsistency, summary: 'check that one signed checkpoint extends another' },
};

const LOG_HELP = groupHelp(
  'log',
  "The tenant's transparency log: inclusion and consistency proofs. baton audit replays the whole log.",
  SUBCOMMANDS,
  'Exit codes: 0 holds, 1 does not hold, 2 unusable input, 3 server unreachable.',
);

export function runLog(argv: string[], io: CliIo): Promise<number> {
  return runSubcommand('log', argv, io, SUBCOMMANDS, LOG_HELP);
}
