/**
 * `baton service-receipt verify`: checks the service's signed service receipts against its
 * published keys (GET /v1/keys or /.well-known/jwks.json). With --keys the
 * check is offline; --save-keys keeps fetched keys for that.
 */
import { parseCliArgs, groupHelp, runSubcommand, type Subcommand } from './args.js';
import {
  clientFrom,
  COMMON_OPTIONS,
  integerFlag,
  printJson,
  readText,
  SERVER_HELP,
  SERVER_OPTIONS,
  refuseStdoutPath,
  writeOutputFile,
} from './common.js';
import { findRecords, itemPath, jwsHeader, looksLikeJws, memberPath, noSignedRecord, printable, type FoundRecord } from './inspect.js';
import { resolveTarget } from './context.js';
import { DEFAULT_SERVER, parseJsonDocument } from './basics.js';
import { UsageError, type CliIo } from './io.js';
import { verifyServiceReceipt, type ServiceVerificationKey } from '../protocol/service-receipt.js';
import type { BatonClient } from '../sdk/client.js';

/** How many service receipts --fetch checks when no --limit is given. */
const FETCH_LIMIT = 1000;
/**
 * At most this many service receipts are checked from one input. Every one found is checked, or
 * none: an input holding more is refused whole, since checking only some would let a forgery past
 * the cap go unseen.
 */
export const MAX_SERVICE_RECEIPTS = 10_000;

const VERIFY_HELP = `Usage: baton service-receipt verify [<file|-> ...] [--fetch] [--keys <file>] [options]

Checks service receipts: the header, the Ed25519 signature under the
published key its kid names, that the payload's iss and kid name that key,
and that each is about what it is attached to (a verify answer's
invocation_id, a record's hash, a listed subject): a valid receipt of
another call swapped in is INVALID. A verify answer must also say what its
receipt signed: valid, and context.dr_chain, context.tool,
context.tool_server and context.invocation_hash (its other members are not
signed; the receipt is what vouches for the call); a dry run carries none.

Service receipts come from files (any service answer that carries them: a
service receipt JWS, a submit/verify/revoke answer, a chain, a
GET /v1/service-receipts page; "-" reads stdin), or with --fetch from
GET /v1/service-receipts (audit key). Every service receipt in a file is
checked: each signed record whose header names a kid, and each string where
an answer carries a receipt (service_receipt, service_receipt.jws, a listed
jws), whatever it holds: one that is not a readable compact JWS is INVALID.
A file holding more than ${MAX_SERVICE_RECEIPTS} is refused whole (exit 2); split it.

The keys come from --keys (a saved GET /v1/keys or /.well-known/jwks.json
answer: offline, nothing is fetched), else from the server's /v1/keys
(no API key needed). --save-keys writes the fetched keys for later offline
runs: fetch them once from a source you trust, then verify anywhere. With
--fetch and no --keys, receipts and keys both come from the service checked,
and a note (on stderr, "note" in --json) says so.

Options:
  --keys <file>        the service's published keys (v1/keys or JWKS form)
  --save-keys <file>   write the keys fetched from the server to this file
  --tenant <id>        every service receipt must name this tenant
  --fetch              verify the tenant's service receipts from
                       GET /v1/service-receipts (needs an audit key)
  --after <id>         with --fetch: start after this service receipt id
  --limit <n>          with --fetch: check at most n service receipts (default
                       ${FETCH_LIMIT}); when more follow, a "more:" line (next_after in
                       --json) gives the --after to go on from
  --all                with --fetch: check every service receipt, no limit
  --json               print each result as JSON
  -h, --help           show this help

${SERVER_HELP}

Exit codes: 0 every service receipt checked is valid (with --fetch, past
--limit more may follow unchecked: see "more:"; --all checks every one),
1 some service receipt invalid, 2 unusable input or no service receipt
found, 3 server unreachable, timed out, failing or answering unexpectedly.`;

interface Checked {
  readonly where: string;
  readonly valid: boolean;
  readonly kid: string | null;
  readonly kind: string | null;
  readonly subject: string | null;
  readonly tenant: string | null;
  readonly reason?: string;
}

/** Keys from a GET /v1/keys answer ({kid, public_key}) or a JWKS ({kid, kty: OKP, crv: Ed25519, x}). */
export function parsePublishedKeys(value: unknown, name: string): ServiceVerificationKey[] {
  const keys = (value as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys) || keys.length === 0) throw new UsageError(`${name} holds no keys: save GET /v1/keys or /.well-known/jwks.json`);
  return keys.map((k: unknown, i) => {
    const key = k as { kid?: unknown; public_key?: unknown; x?: unknown; kty?: unknown; crv?: unknown };
    const raw = typeof key.public_key === 'string' ? key.public_key : key.kty === 'OKP' && key.crv === 'Ed25519' ? key.x : undefined;
    const publicKey = typeof raw === 'string' && /^[A-Za-z0-9_-]{43}$/.test(raw) ? Buffer.from(raw, 'base64url') : undefined;
    if (typeof key.kid !== 'string' || key.kid === '' || publicKey?.length !== 32)
      throw new UsageError(`${name}: keys[${i}] is not an Ed25519 key with a kid`);
    return { kid: key.kid, publicKey: new Uint8Array(publicKey) };
  });
}

/** A saved GET /v1/keys or /.well-known/jwks.json answer, as text. */
export function publishedKeysFromText(text: string, name: string): ServiceVerificationKey[] {
  return parsePublishedKeys(
    parseJsonDocument(text, name, () => new UsageError(`${name} is not JSON`)),
    name,
  );
}

async function keysFor(values: { keys?: string | undefined; 'save-keys'?: string | undefined }, client: () => BatonClient, io: CliIo) {
  if (values.keys !== undefined) return publishedKeysFromText(await readText(values.keys, 'keys file'), values.keys);
  const c = client();
  io.err(`fetching the published keys from ${c.baseUrl}/v1/keys (public, no API key needed) ...`);
  const answer = await c.keys();
  if (values['save-keys'] !== undefined) {
    await writeOutputFile(values['save-keys'], `${JSON.stringify(answer, null, 2)}\n`, '--save-keys', VERIFY_HELP);
    io.err(`saved ${answer.keys.length} key(s) to ${values['save-keys']}: verify offline with --keys ${values['save-keys']}`);
  }
  return parsePublishedKeys(answer, `${c.baseUrl}/v1/keys`);
}

/** One place a service receipt was found: what it may be about, and what a verify answer around it claims. */
interface Attachment {
  readonly ids: ReadonlySet<string>;
  /** The verify answer holding it: its unsigned members, which the receipt's signed ones must match. */
  readonly answer?: { readonly valid: boolean; readonly dry_run: unknown; readonly context: Readonly<Record<string, unknown>> };
}

/** A string in a service receipt's place in a service answer, and what it is attached to there. */
interface ReceiptSlot {
  readonly where: string;
  readonly jws: string;
  /** None when the object holding it names nothing it could be about. */
  readonly attachment?: Attachment;
}

/**
 * Every string in a service receipt's place in a service answer, with its JSON path and what it is
 * attached to: the identifiers of the object holding it, one of which it must be about. A receipt
 * under `service_receipt` (or `service_receipt.jws`) is about its object's call (`invocation_id`,
 * `jti`) or record (`hash`); one listed with its `kind` and `subject` (GET /v1/service-receipts) is
 * about that subject. A signature alone does not say a receipt belongs where it was found: a valid
 * receipt of another call or record could be swapped in, and its subject is then none of these. Nor
 * does it vouch for the answer around it: a verify answer's `valid` and the members of its
 * `context` that the receipt signs too (SIGNED_CONTEXT_MEMBERS) must say what its receipt signed.
 */
function receiptSlots(value: unknown, path = '', out: ReceiptSlot[] = []): ReceiptSlot[] {
  const slot = (where: string, jws: unknown, idList: readonly unknown[], answer?: Attachment['answer']) => {
    if (typeof jws !== 'string') return;
    const ids = new Set(idList.filter((id): id is string => typeof id === 'string'));
    out.push({ where, jws, ...(ids.size > 0 ? { attachment: answer === undefined ? { ids } : { ids, answer } } : {}) });
  };
  if (Array.isArray(value)) value.forEach((v, i) => receiptSlots(v, itemPath(path, i), out));
  else if (value !== null && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    const ref = o['service_receipt'];
    const refPath = memberPath(path, 'service_receipt');
    const context = o['context'] !== null && typeof o['context'] === 'object' ? (o['context'] as Record<string, unknown>) : {};
    const answer =
      typeof o['valid'] === 'boolean' && typeof o['invocation_id'] === 'string'
        ? { valid: o['valid'], dry_run: o['dry_run'], context }
        : undefined;
    const ids = [o['invocation_id'], o['jti'], o['hash']];
    if (typeof ref === 'string') slot(refPath, ref, ids, answer);
    else if (ref !== null && typeof ref === 'object')
      slot(memberPath(refPath, 'jws'), (ref as Record<string, unknown>)['jws'], ids, answer);
    if (typeof o['kind'] === 'string') slot(memberPath(path, 'jws'), o['jws'], [o['subject']]);
    for (const [k, v] of Object.entries(o)) receiptSlots(v, memberPath(path, k), out);
  }
  return out;
}

/** A service receipt found in an input, with what it is attached to wherever it was found (receiptSlots). */
export interface FoundServiceReceipt extends FoundRecord {
  readonly attachments: readonly Attachment[] | undefined;
}

/**
 * The service receipts in `text`, every one to be checked: each signed record whose header names a
 * kid (the DRS records beside them name none), and each string in a service receipt's place in an
 * answer (receiptSlots) whatever it holds, so that one that cannot be read as a service receipt (a
 * header without alg, a leading space, a string too long) is checked and fails rather than is passed
 * over. All of them, or a usage error when there are more than MAX_SERVICE_RECEIPTS.
 */
export function findServiceReceipts(text: string, name: string): FoundServiceReceipt[] {
  const { records, document } = findRecords(text, name);
  const slots = receiptSlots(document);
  const found = records.filter((r) => typeof jwsHeader(r.jws)?.['kid'] === 'string');
  const seen = new Set(found.map((r) => r.where));
  for (const s of slots) {
    if (seen.has(s.where)) continue;
    found.push(s);
    seen.add(s.where);
  }
  if (found.length === 0)
    throw records.length === 0
      ? noSignedRecord(name)
      : new UsageError(
          `${name} holds ${records.length} signed record(s) but no service receipt (a service receipt's header names a kid; these do not). For a chain or a bundle, use baton verify (--chain-only for a chain).`,
        );
  if (found.length > MAX_SERVICE_RECEIPTS)
    throw new UsageError(
      `${name} holds ${found.length} service receipts, more than the ${MAX_SERVICE_RECEIPTS} checked from one input; ` +
        `none was checked. Split it into files of at most ${MAX_SERVICE_RECEIPTS} service receipts and check each.`,
    );
  const attached = new Map<string, Attachment[]>();
  for (const s of slots) if (s.attachment) attached.set(s.jws, [...(attached.get(s.jws) ?? []), s.attachment]);
  return found.map((r) => ({ where: r.where, jws: r.jws, attachments: attached.get(r.jws) }));
}

/**
 * The members of a verify answer's `context` that its invocation.allowed receipt signs in its
 * `data` under the same names: each one the answer states must be what was signed (a tampered
 * tool server would otherwise pass as VALID beside a receipt of another).
 */
const SIGNED_CONTEXT_MEMBERS = ['dr_chain', 'tool', 'tool_server', 'invocation_hash'] as const;

/** Where a verify answer says other than the receipt it carries signed, if it does. */
function contradicted(payload: Record<string, unknown>, answer: NonNullable<Attachment['answer']>): string | undefined {
  const kind = payload['baton_receipt'];
  const data = payload['data'] !== null && typeof payload['data'] === 'object' ? (payload['data'] as Record<string, unknown>) : {};
  if ((kind === 'invocation.allowed') !== answer.valid)
    return `signed ${String(kind)}, but the answer around it says valid: ${answer.valid}`;
  // A dry run counts nothing and is given no receipt: one beside it is a counted call's.
  if (answer.dry_run === true) return `signed ${String(kind)}, but the answer around it says dry_run: true (a dry run carries no service receipt)`;
  for (const member of SIGNED_CONTEXT_MEMBERS) {
    const stated = answer.context[member];
    const signed = data[member];
    if (stated === undefined || signed === undefined || JSON.stringify(stated) === JSON.stringify(signed)) continue;
    return `signed context.${member} ${JSON.stringify(signed)}, but the answer around it says ${JSON.stringify(stated)}`;
  }
  return undefined;
}

interface Expected {
  /** Where the answer it came from says: for each place it was found, what it may be about. */
  readonly attachments?: readonly Attachment[] | undefined;
  /** --tenant: the tenant every receipt must name. */
  readonly tenant?: string | undefined;
}

/** Why a validly signed receipt does not belong where it was found, if it does not. */
function misplacement(
  payload: Record<string, unknown>,
  subject: string | null,
  tenant: string | null,
  expected: Expected,
): string | undefined {
  const elsewhere = expected.attachments?.find((a) => subject === null || !a.ids.has(subject));
  if (elsewhere !== undefined)
    return `signed, but about ${subject ?? '(no subject)'}, not ${[...elsewhere.ids].join(' or ')} it is attached to`;
  for (const a of expected.attachments ?? []) {
    const why = a.answer && contradicted(payload, a.answer);
    if (why !== undefined) return why;
  }
  if (expected.tenant !== undefined && tenant !== expected.tenant)
    return `signed, but for tenant ${tenant ?? '(none)'}, not ${expected.tenant}`;
  return undefined;
}

function check(jws: string, where: string, keys: readonly ServiceVerificationKey[], expected: Expected = {}): Checked {
  const none = { kid: null, kind: null, subject: null, tenant: null };
  if (!looksLikeJws(jws)) return { where, valid: false, ...none, reason: 'not a readable compact JWS' };
  const result = verifyServiceReceipt(jws, keys);
  // Kind and subject are shown from the payload only once the signature held.
  const payload = result.valid ? result.payload : null;
  const subject = typeof payload?.['subject'] === 'string' ? payload['subject'] : null;
  const tenant = typeof payload?.['tenant'] === 'string' ? payload['tenant'] : null;
  const misplaced = payload ? misplacement(payload, subject, tenant, expected) : undefined;
  const reason = misplaced ?? result.reason;
  return {
    where,
    valid: result.valid && misplaced === undefined,
    kid: result.kid,
    kind: typeof payload?.['baton_receipt'] === 'string' ? payload['baton_receipt'] : null,
    subject,
    tenant,
    ...(reason !== undefined ? { reason } : {}),
  };
}

async function runVerifyServiceReceipts(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('service-receipt verify', {
    args: argv,
    allowPositionals: true,
    options: {
      keys: { type: 'string' },
      'save-keys': { type: 'string' },
      tenant: { type: 'string' },
      fetch: { type: 'boolean', default: false },
      after: { type: 'string' },
      limit: { type: 'string' },
      all: { type: 'boolean', default: false },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help) {
    io.out(VERIFY_HELP);
    return 0;
  }
  if (positionals.length === 0 && !values.fetch) throw new UsageError('give service receipt files, or --fetch', VERIFY_HELP);
  if (values.keys !== undefined && values['save-keys'] !== undefined)
    throw new UsageError('--save-keys saves fetched keys; with --keys nothing is fetched', VERIFY_HELP);
  refuseStdoutPath(values['save-keys'], '--save-keys', VERIFY_HELP);
  if (!values.fetch && (values.after !== undefined || values.limit !== undefined || values.all))
    throw new UsageError('--after, --limit and --all go with --fetch', VERIFY_HELP);
  if (values.all && values.limit !== undefined) throw new UsageError('give --limit or --all, not both', VERIFY_HELP);
  const limit = values.all ? Infinity : values.limit !== undefined ? integerFlag('--limit', values.limit, 1) : FETCH_LIMIT;
  const after = values.after !== undefined ? integerFlag('--after', values.after) : undefined;

  // Inputs are read and parsed before anything is fetched.
  const inputs: FoundServiceReceipt[] = [];
  for (const file of positionals) {
    const serviceReceipts = findServiceReceipts(await readText(file, 'service receipt file'), file === '-' ? 'stdin' : file);
    inputs.push(...serviceReceipts.map((r) => ({ ...r, where: `${file}: ${r.where}` })));
  }
  // --fetch reads a route that needs an audit key: without one, say so before any request.
  const target = values.fetch ? resolveTarget(values, io, DEFAULT_SERVER) : undefined;
  if (target !== undefined && !target.apiKey) {
    throw new UsageError(
      '--fetch reads GET /v1/service-receipts, which needs an API key with the audit scope (the published keys need none): ' +
        `pass --api-key <key>${values.context === undefined ? ', set BATON_API_KEY,' : ''} or use a context that holds one (--context <name>, baton context --help)${target.keyWithheld !== undefined ? `; ${target.keyWithheld}` : ''}${target.envSetAside !== undefined ? `; ${target.envSetAside}` : ''}`,
      VERIFY_HELP,
    );
  }
  let client: BatonClient | undefined;
  const clientOnce = () => (client ??= clientFrom(values, io));
  const keys = await keysFor(values, clientOnce, io);

  const tenant = values.tenant;
  const results: Checked[] = inputs.map((r) => check(r.jws, r.where, keys, { attachments: r.attachments, tenant }));
  /** With --fetch, the id of the last service receipt checked when more follow it unchecked (past --limit). */
  let nextAfter: number | null = null;
  if (values.fetch) {
    io.err(`fetching service receipts from ${clientOnce().baseUrl}/v1/service-receipts (audit key) ...`);
    let n = 0;
    let lastId: number | undefined;
    for await (const item of clientOnce().iterateServiceReceipts(after !== undefined ? { after } : {})) {
      // One past the limit is read, not checked: it says more follow.
      if (n === limit) {
        nextAfter = lastId ?? null;
        break;
      }
      results.push(check(item.jws, `service receipt #${item.id}`, keys, { attachments: [{ ids: new Set([item.subject]) }], tenant }));
      lastId = item.id;
      n++;
    }
    if (n === 0 && inputs.length === 0) io.err("the service holds no service receipts for this key's tenant (after the given id)");
  }
  const invalid = results.filter((r) => !r.valid).length;
  // Receipts and keys from the same service prove only that it agrees with itself (as audit and log
  // proof say when they take their keys from the service checked).
  const note =
    values.fetch && values.keys === undefined
      ? `the keys came from the service being checked (${clientOnce().baseUrl}/v1/keys), so a service that forged ` +
        'its receipts would serve keys that match them; pin the keys with --keys <file> (saved with --save-keys from a source you trust)'
      : undefined;
  if (note !== undefined) io.err(`note: ${note}`);
  const more =
    nextAfter === null
      ? undefined
      : `more: service receipts after #${nextAfter} were not checked (--limit ${limit}): ` +
        `baton service-receipt verify --fetch --after ${nextAfter} ...   (or --all)`;
  if (values.json)
    printJson(io, {
      valid: invalid === 0,
      checked: results.length,
      invalid,
      ...(values.fetch ? { next_after: nextAfter } : {}),
      ...(note !== undefined ? { note } : {}),
      results,
    });
  else {
    for (const r of results) {
      io.out(
        printable(
          r.valid
            ? `VALID    ${r.where}  ${r.kind ?? ''} ${r.subject ?? ''}  (tenant ${r.tenant ?? '(none)'}, kid ${r.kid})`
            : `INVALID  ${r.where}  ${r.reason}${r.kid ? ` (kid ${r.kid})` : ''}`,
        ),
      );
    }
    io.out(
      `\n${results.length - invalid} of ${results.length} service receipt(s) valid${invalid > 0 ? `, ${invalid} INVALID` : ''}${more !== undefined ? '; more follow, not checked' : ''}.`,
    );
    if (more !== undefined) io.out(more);
  }
  return invalid === 0 ? 0 : 1;
}

const SUBCOMMANDS: Record<string, Subcommand> = {
  verify: { run: runVerifyServiceReceipts, summary: "check service receipts against the service's published keys" },
};

const SERVICE_RECEIPT_HELP = groupHelp(
  'service-receipt',
  "The service's signed service receipts.",
  SUBCOMMANDS,
  'Exit codes: 0 valid, 1 invalid, 2 unusable input, 3 server unreachable.',
);

export function runServiceReceipt(argv: string[], io: CliIo): Promise<number> {
  return runSubcommand('service-receipt', argv, io, SUBCOMMANDS, SERVICE_RECEIPT_HELP);
}
