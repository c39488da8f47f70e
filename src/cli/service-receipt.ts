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
import { canonicalJson } from '../protocol/jcs.js';
import { microsToUsd, type Micros } from '../protocol/money.js';
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
another call swapped in is INVALID. The answer around a receipt must also
say what the receipt signed, wherever it states it: a verify answer's valid
and its context's chain, tool, tool server and invocation; an invocation's
chain, tool, caller, hash and declared estimate; an actual's cost, tokens and
source; a submitted record's parties, depth and parents; a revocation's
reason, time and revoker; a tenant_id beside any of them. An answer holds
only its own kind of receipt (an actual's place takes no allow), and a dry
run carries none. Other members are not signed: the receipt is what vouches.

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

/** One place a service receipt was found: what it may be about, and what the answer around it claims. */
interface Attachment {
  /** Identifiers it may be about: its holder's, or (none there) those of the nearest object around it that names one. */
  readonly ids: ReadonlySet<string>;
  /** The object holding it: each member it states that the receipt signs too must be what was signed. */
  readonly holder: Readonly<Record<string, unknown>>;
  /** The listing form (GET /v1/service-receipts): `{kind, subject, jws}`, whose `kind` names the receipt's. */
  readonly listed: boolean;
  /** Identifier members of the holder that are not strings (a call named by a number names nothing). */
  readonly badIds: readonly string[];
}

/** A string in a service receipt's place in a service answer, and what it is attached to there. */
interface ReceiptSlot {
  readonly where: string;
  readonly jws: string;
  readonly attachment: Attachment;
}

/** Members that name what an object is about: a call (`invocation_id`, `jti`) or a record (`hash`). */
const ID_MEMBERS = ['invocation_id', 'jti', 'hash'] as const;

/**
 * Every string in a service receipt's place in a service answer, with its JSON path and what it is
 * attached to: the identifiers of the object holding it (or, where it names none, of the nearest
 * object around it that does: an invocation's `actual`), one of which it must be about. A receipt
 * under `service_receipt` (or `service_receipt.jws`) is about its object's call (`invocation_id`,
 * `jti`) or record (`hash`); one listed with its `kind` and `subject` (GET /v1/service-receipts) is
 * about that subject. A signature alone does not say a receipt belongs where it was found: a valid
 * receipt of another call or record could be swapped in, and its subject is then none of these. Nor
 * does it vouch for the answer around it: what the holder states of what the receipt signs must be
 * what it signed (SIGNED_MEMBERS).
 */
function receiptSlots(value: unknown, path = '', out: ReceiptSlot[] = [], around: ReadonlySet<string> = new Set()): ReceiptSlot[] {
  if (Array.isArray(value)) value.forEach((v, i) => receiptSlots(v, itemPath(path, i), out, around));
  else if (value !== null && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    const own = ID_MEMBERS.map((m) => o[m]).filter((id): id is string => typeof id === 'string');
    const ids = own.length > 0 ? new Set(own) : around;
    const badIds = ID_MEMBERS.filter((m) => o[m] !== undefined && o[m] !== null && typeof o[m] !== 'string');
    const slot = (where: string, jws: unknown, attachment: Attachment) => {
      if (typeof jws === 'string') out.push({ where, jws, attachment });
    };
    const ref = o['service_receipt'];
    const refPath = memberPath(path, 'service_receipt');
    const held: Attachment = { ids, holder: o, listed: false, badIds };
    if (typeof ref === 'string') slot(refPath, ref, held);
    else if (ref !== null && typeof ref === 'object') slot(memberPath(refPath, 'jws'), (ref as Record<string, unknown>)['jws'], held);
    if (typeof o['kind'] === 'string') {
      const subject = typeof o['subject'] === 'string' ? new Set([o['subject']]) : new Set<string>();
      slot(memberPath(path, 'jws'), o['jws'], { ids: subject, holder: o, listed: true, badIds: [] });
    }
    for (const [k, v] of Object.entries(o)) receiptSlots(v, memberPath(path, k), out, ids);
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
  for (const s of slots) attached.set(s.jws, [...(attached.get(s.jws) ?? []), s.attachment]);
  return found.map((r) => ({ where: r.where, jws: r.jws, attachments: attached.get(r.jws) }));
}

/** A value as signed: the receipt's `data` member, or its `subject`; `as` turns it into the answer's form. */
interface SignedMember {
  readonly stated: string;
  readonly signed: string;
  readonly as?: (signed: unknown) => unknown;
}

const micros = (signed: unknown) => (typeof signed === 'number' ? microsToUsd(signed as Micros) : signed);

/**
 * For each kind of receipt, the members an answer holding it states that the receipt signs too
 * (`stated` a path in the holder, `signed` a member of its `data`, or `subject`): each one the
 * answer states must be what was signed, so an edited tool server, chain, cost or revoker does not
 * pass as VALID beside an untouched receipt. Members an answer recounts or reads fresh (a
 * revocation's `descendants`, an invocation's current standing) are not among them.
 */
const SIGNED_MEMBERS: Readonly<Record<string, readonly SignedMember[]>> = {
  'invocation.allowed': [
    // A verify answer states them in its context; an invocation read (GET /v1/invocations) at top level.
    { stated: 'context.dr_chain', signed: 'dr_chain' },
    { stated: 'context.tool', signed: 'tool' },
    { stated: 'context.tool_server', signed: 'tool_server' },
    { stated: 'context.invocation_hash', signed: 'invocation_hash' },
    { stated: 'context.invocation_jti', signed: 'subject' },
    { stated: 'dr_chain', signed: 'dr_chain' },
    { stated: 'tool', signed: 'tool' },
    { stated: 'tool_server', signed: 'tool_server' },
    { stated: 'caller_key_id', signed: 'caller_key_id' },
    { stated: 'hash', signed: 'invocation_hash' },
    // The estimate the call was counted at: what its budgets were charged.
    { stated: 'declared_usd', signed: 'estimated_micros', as: micros },
  ],
  'actual.recorded': [
    { stated: 'cost_usd', signed: 'cost_micros', as: micros },
    { stated: 'declared_usd', signed: 'estimated_micros', as: micros },
    { stated: 'source', signed: 'source' },
    { stated: 'tokens_in', signed: 'tokens_in' },
    { stated: 'tokens_out', signed: 'tokens_out' },
    { stated: 'unavailable_reason', signed: 'unavailable_reason' },
  ],
  'delegation.accepted': [
    { stated: 'jti', signed: 'jti' },
    { stated: 'iss', signed: 'iss' },
    { stated: 'aud', signed: 'aud' },
    { stated: 'depth', signed: 'depth' },
    { stated: 'parent_hash', signed: 'parent_hash' },
    { stated: 'root_hash', signed: 'root_hash' },
  ],
  'delegation.revoked': [
    { stated: 'reason', signed: 'reason' },
    { stated: 'revoked_at', signed: 'revoked_at' },
    { stated: 'revoked_by', signed: 'revoked_by' },
  ],
};

/**
 * Members that say what kind of answer holds a receipt, and the kinds of receipt it may hold: a
 * valid receipt of the same call but another kind (the allow's, in the place of its actual's)
 * would otherwise pass where it was swapped in.
 */
const KINDS_HELD_BY: readonly (readonly [member: string, kinds: readonly string[]])[] = [
  ['valid', ['invocation.allowed', 'invocation.denied']],
  ['decision', ['invocation.allowed', 'invocation.denied']],
  // An actual's own members: an answer stating any of them is an actual's, whatever else it adds
  // (an allow's receipt beside an edited cost, with a decision added to pass as an invocation's).
  ['source', ['actual.recorded']],
  ['cost_usd', ['actual.recorded']],
  ['tokens_in', ['actual.recorded']],
  ['tokens_out', ['actual.recorded']],
  ['unavailable_reason', ['actual.recorded']],
  ['recorded_at', ['actual.recorded']],
  ['descendants', ['delegation.revoked']],
  ['parent_hash', ['delegation.accepted']],
];

/**
 * For each kind of receipt the table holds, the members an answer holding it shows one of: what
 * kind of answer it is. Without one, a receipt of the same call but another kind could sit where
 * that member was taken out (an allow's in an actual whose `source` was removed).
 */
const MARKS_OF_HOLDER: Readonly<Record<string, readonly string[]>> = {
  'invocation.allowed': ['valid', 'decision'],
  'invocation.denied': ['valid', 'decision'],
  'actual.recorded': ['source'],
  'delegation.accepted': ['parent_hash'],
  'delegation.revoked': ['descendants'],
};

/** A log proof answer (GET /v1/log/service-receipts/{id}/proof) holds its leaf, a receipt of any kind. */
const isProofAnswer = (h: Readonly<Record<string, unknown>>) => 'leaf_index' in h && 'proof' in h;

/** The value at a dotted path of members, or undefined where the path leaves the objects. */
function memberAt(holder: Readonly<Record<string, unknown>>, path: string): unknown {
  let at: unknown = holder;
  for (const name of path.split('.')) {
    if (at === null || typeof at !== 'object' || Array.isArray(at)) return undefined;
    at = (at as Record<string, unknown>)[name];
  }
  return at;
}

const shown = (value: unknown) => JSON.stringify(value) ?? String(value);

/** Where the answer holding a receipt says other than the receipt signed, if it does. */
function contradicted(payload: Record<string, unknown>, a: Attachment): string | undefined {
  const kind = payload['baton_receipt'];
  const data = payload['data'] !== null && typeof payload['data'] === 'object' ? (payload['data'] as Record<string, unknown>) : {};
  const h = a.holder;
  if (a.badIds.length > 0) return `signed, but the answer around it names what it is about with a non-string ${a.badIds.join(', ')}`;
  if (a.listed) return h['kind'] === kind ? undefined : `signed ${String(kind)}, but listed as ${shown(h['kind'])}`;
  for (const [member, kinds] of KINDS_HELD_BY) {
    if (member in h && !kinds.includes(String(kind)))
      return `signed ${String(kind)}, but it is where an answer with ${member} holds its ${kinds.join(' or ')} receipt`;
  }
  const marks = typeof kind === 'string' ? MARKS_OF_HOLDER[kind] : undefined;
  if (marks !== undefined && !isProofAnswer(h) && !marks.some((m) => m in h))
    return `signed ${String(kind)}, but the answer around it shows none of ${marks.join(', ')}, as one holding that kind of receipt does`;
  if ('tenant_id' in h && h['tenant_id'] !== payload['tenant'])
    return `signed for tenant ${shown(payload['tenant'])}, but the answer around it says tenant_id ${shown(h['tenant_id'])}`;
  if (kind === 'invocation.allowed' || kind === 'invocation.denied') {
    const allowed = kind === 'invocation.allowed';
    // What a DRS client reads: valid. Any value but the boolean the receipt signed (a string "true", say) is a contradiction.
    if ('valid' in h && h['valid'] !== allowed) return `signed ${kind}, but the answer around it says valid: ${shown(h['valid'])}`;
    if ('valid' in h && a.ids.size === 0) return `signed ${kind}, but the answer around it names no invocation (invocation_id)`;
    if ('decision' in h && h['decision'] !== (allowed ? 'allowed' : 'denied'))
      return `signed ${kind}, but the answer around it says decision: ${shown(h['decision'])}`;
    // A dry run counts nothing and is given no receipt: one beside it is a counted call's.
    if ('dry_run' in h && h['dry_run'] !== false)
      return `signed ${kind}, but the answer around it says dry_run: ${shown(h['dry_run'])} (a dry run carries no service receipt)`;
  }
  for (const m of typeof kind === 'string' ? (SIGNED_MEMBERS[kind] ?? []) : []) {
    const stated = memberAt(h, m.stated);
    const raw = m.signed === 'subject' ? payload['subject'] : data[m.signed];
    if (stated === undefined || raw === undefined) continue;
    const signed = m.as ? m.as(raw) : raw;
    if (canonicalJson(stated) === canonicalJson(signed)) continue;
    return `signed ${m.stated} ${shown(signed)}, but the answer around it says ${shown(stated)}`;
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
  const elsewhere = expected.attachments?.find((a) => a.ids.size > 0 && (subject === null || !a.ids.has(subject)));
  if (elsewhere !== undefined)
    return `signed, but about ${subject ?? '(no subject)'}, not ${[...elsewhere.ids].join(' or ')} it is attached to`;
  for (const a of expected.attachments ?? []) {
    const why = contradicted(payload, a);
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
      const listing = { ids: new Set([item.subject]), holder: item as unknown as Record<string, unknown>, listed: true, badIds: [] };
      results.push(check(item.jws, `service receipt #${item.id}`, keys, { attachments: [listing], tenant }));
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
