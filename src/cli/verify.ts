/**
 * `baton verify <bundle.json> --trust <did> ...`: offline verification of a
 * bundle with the same pure pipeline the service runs; `--chain-only` checks
 * a bare delegation chain instead.
 *
 * Exit codes: 0 allowed (with --chain-only: the chain is valid), 1 denied,
 * 2 unusable input (unreadable file, not JSON, not a bundle, bad flags, no invocation
 * without --chain-only).
 */
import { parseCliArgs } from './args.js';
import { verifyChain, verifyDelegations, type ChainDecision, type DelegationsDecision } from '../protocol/chain.js';
import { decodeBase64url } from '../protocol/base64url.js';
import { utf8Decode } from '../protocol/jcs.js';
import { ERROR_TABLE, isErrorCode, requirementText, type ErrorCode } from '../protocol/errors.js';
import { publicKeyFromDidKey } from '../protocol/did-key.js';
import { oneLine, printableLines, printedItems, UsageError, type CliIo } from './io.js';
import { parseJsonDocument, readText } from './basics.js';
import { isRecordHash, recordHash } from '../protocol/hash.js';
import { fetchedChainProblem, SIGNED_RECORD_MEMBERS } from '../sdk/fetched-chain.js';

export const VERIFY_HELP = `Usage: baton verify <bundle.json> --trust <did> [--trust <did> ...] [options]
       baton verify <chain.json> --chain-only --trust <did> [--trust <did> ...] [--leaf <hash>] [options]

Verifies a DRS 4.0 bundle (invocation + delegation chain) offline, with the
same rules the Baton service applies: JCS, Ed25519, linkage, attenuation,
policy on the invocation args, and time.

The file may hold a bundle {bundle_version, invocation, receipts}, an object
with such a bundle under "bundle" (DRS fixture files), or the base64url form
DRS sends in the X-DRS-Bundle header. A file without an invocation is
unusable input (exit 2): there is no call to allow.

With --chain-only the file must be a chain without an invocation
({receipts: [...]}, as GET /v1/delegations/{hash}/chain returns), and only
its delegation records are verified; exit 0 then says the chain is valid,
not that any call is allowed. The hash of its last record (the leaf) is
printed. A file that says whose chain it is (the answer's "hash", and the
"hash" of each of its "records") must say what its receipts are, or it is
refused (exit 1); so is one whose "records" (the decoded copies the answer
shows beside the receipts), "chain" (the same copies, as "baton chain --json"
writes them) or "root_principal" say other than its receipts sign, as
"baton chain" refuses such an answer. What no receipt signs is not checked:
the usage, status and revocation members beside each record, and the whole
"tree" of a "baton chain --json" file (the output says so when it has one).
--leaf <hash> requires the chain to end at that record.

Options:
  --trust <did>        a trusted root did:key (repeatable; at least one)
  --chain-only         verify a chain alone (no invocation in the file)
  --leaf <hash>        with --chain-only: the chain must end at this record
  --at <unix-seconds>  verify as of this time instead of now
  --max-age <seconds>  how old the invocation may be (default 300)
  --max-depth <n>      longest chain accepted (default 16)
  --json               print the decision as JSON
  -h, --help           show this help

Offline means what the records alone prove: revocation, max_calls counters,
replay and the tenant's tool rules live in the service, and are not checked
here. Ask the service with "baton check" (a dry run) for those.

Exit codes: 0 allowed (with --chain-only: chain valid), 1 denied,
2 unusable input (including a file with no invocation, unless --chain-only).`;

export async function runVerify(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('verify', {
    args: argv,
    allowPositionals: true,
    options: {
      trust: { type: 'string', multiple: true },
      'chain-only': { type: 'boolean', default: false },
      leaf: { type: 'string' },
      at: { type: 'string' },
      'max-age': { type: 'string' },
      'max-depth': { type: 'string' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    io.out(VERIFY_HELP);
    return 0;
  }
  const file = positionals[0];
  if (!file || positionals.length > 1) throw new UsageError('give exactly one bundle file', VERIFY_HELP);
  const trust = values.trust ?? [];
  if (trust.length === 0) throw new UsageError('give at least one --trust <did:key:...> (the root you trust)', VERIFY_HELP);
  for (const did of trust) {
    // A typo would otherwise read as a verdict on the bundle (DENIED: UNTRUSTED_ROOT, exit 1).
    try {
      publicKeyFromDidKey(did);
    } catch (e) {
      throw new UsageError(`--trust ${JSON.stringify(did)} is not an Ed25519 did:key: ${(e as Error).message}`, VERIFY_HELP);
    }
  }

  const chainOnly = values['chain-only'];
  if (chainOnly && values['max-age'] !== undefined)
    throw new UsageError('--max-age limits the invocation; --chain-only verifies a chain without one', VERIFY_HELP);
  const wantedLeaf = values.leaf;
  if (wantedLeaf !== undefined && !chainOnly)
    throw new UsageError('--leaf goes with --chain-only: a bundle is verified against the chain its invocation names', VERIFY_HELP);
  if (wantedLeaf !== undefined && !isRecordHash(wantedLeaf))
    throw new UsageError(`--leaf must be "sha256:" followed by 64 lowercase hex digits, got "${wantedLeaf}"`, VERIFY_HELP);

  const input = parseBundleFile(await readText(file, 'bundle file'), file);
  const now = values.at !== undefined ? integerFlag('--at', values.at) : Math.floor(Date.now() / 1000);
  const maxDepth = values['max-depth'] !== undefined ? { maxDepth: integerFlag('--max-depth', values['max-depth']) } : {};
  const isObject = input !== null && typeof input === 'object' && !Array.isArray(input);
  const hasInvocation = isObject && 'invocation' in input;
  const name = file === '-' ? 'the input' : file;
  if (chainOnly) {
    // Refused rather than verified without the invocation: exit 0 under --chain-only must only
    // ever mean "this bare chain is valid", so a flag left in a script cannot turn a bundle whose
    // call is denied into a success.
    if (hasInvocation)
      throw new UsageError(
        `${name} carries an invocation: --chain-only verifies a chain without one. Drop --chain-only to verify the invocation against its chain.`,
      );
    if (!isChain(input)) throw new UsageError(`${name} is not a delegation chain: --chain-only expects {"receipts": ["<JWS>", ...]}`);
    if (input.receipts.length === 0)
      throw new UsageError(`${name} holds no receipts: a delegation chain has at least its root record, {"receipts": ["<JWS>", ...]}`);
    // A chain fetched from GET /v1/delegations/{hash}/chain: no invocation to judge.
    const hashes = input.receipts.map((jws) => recordHash(jws));
    const leaf = hashes[hashes.length - 1]!; // receipts is not empty (above)
    // In --json an invalid answer carries its error as every other does: DR_CHAIN_MISMATCH, as for
    // an invocation whose dr_chain does not list the hashes of the receipts beside it.
    const notThatChain = (mismatch: string, verified: boolean): number => {
      const advice = verified
        ? 'Its receipts verify, but what the file shows beside them is not what they sign: get the chain of the record meant (baton chain <hash> --json).'
        : 'Its receipts were not verified: get the chain of the record meant (baton chain <hash> --json).';
      const error = {
        code: 'DR_CHAIN_MISMATCH',
        block: ERROR_TABLE.DR_CHAIN_MISMATCH.block,
        message: `Not that chain: ${mismatch}.`,
        suggestion: verified
          ? 'Get the chain of the record meant (baton chain <hash> --json); the records beside its receipts are not what the receipts sign.'
          : 'Get the chain of the record meant (baton chain <hash> --json); its receipts were not verified.',
      };
      io.out(
        values.json
          ? JSON.stringify({ valid: false, leaf_hash: leaf, mismatch, error, violations: [] }, null, 2)
          : `NOT THAT CHAIN: ${oneLine(mismatch)}\n  leaf         ${leaf}\n  ${advice}`,
      );
      return 1;
    };
    const mismatch = notTheChain(input, hashes, wantedLeaf);
    if (mismatch !== undefined) return notThatChain(mismatch, false);
    const decision = verifyDelegations(input.receipts, { now, trustedRoots: trust, ...maxDepth });
    // The decoded records beside the receipts are what a reader of the file takes for its policies:
    // a GET /v1/delegations/{hash}/chain answer's "records", and "baton chain --json"'s "chain".
    // Each is checked against the receipts as the SDK's getChain checks them (the signed members
    // only: a chain entry's usage and revoked_reason are the service's state, which no receipt
    // signs), and "root_principal" whenever the file has it. A file that leaves out "hash" or
    // "root_principal" claims nothing of them.
    if (decision.valid) {
      const rootIssuer = decision.delegations[0]!.payload.iss;
      if ('root_principal' in input && input['root_principal'] !== rootIssuer)
        return notThatChain(
          `it names ${JSON.stringify(input['root_principal'])} as root principal, not the root's issuer ${rootIssuer}`,
          true,
        );
      for (const member of DECODED_MEMBERS) {
        if (!(member in input)) continue;
        const problem = fetchedChainProblem(leaf, {
          hash: leaf,
          root_principal: rootIssuer,
          receipts: input.receipts,
          records: input[member],
        } as unknown as Parameters<typeof fetchedChainProblem>[1]);
        // Named as the file names them: records[1].policy, or chain[1].policy.
        if (problem !== undefined) return notThatChain(problem.replace(/^records\[/, `${member}[`), true);
      }
    }
    // What the file shows that no receipt signs (the service's view: "baton chain --json"'s tree,
    // each record's status, usage and revocation): said, not passed off as checked.
    const unchecked = uncheckedMembers(input);
    io.out(
      values.json
        ? JSON.stringify(
            decision.valid
              ? {
                  valid: true,
                  chain_depth: decision.delegations.length,
                  leaf_hash: leaf,
                  ...(unchecked.length > 0 ? { unchecked } : {}),
                }
              : { valid: false, leaf_hash: leaf, error: decision.error, violations: decision.violations },
            null,
            2,
          )
        : explainChain(decision) +
            (decision.valid ? OFFLINE_ONLY : '') +
            (decision.valid && unchecked.length > 0 ? notSigned(unchecked) : ''),
    );
    return decision.valid ? 0 : 1;
  }
  if (isChain(input))
    // Judged as a bare chain, a bundle with its invocation deleted would exit 0 like an allowed call
    // and fool `baton verify bundle.json && run_tool`: verifying a chain alone must be asked for.
    throw new UsageError(
      `${name} carries no invocation, so there is no call to allow. Sign one for this chain with "baton invoke" and verify the bundle it writes, or pass --chain-only to verify the delegation chain alone.`,
    );
  // Not a bundle at all (unusable input, exit 2, as `baton check` refuses it before sending): a
  // value that is not a JSON object, or an object without an "invocation" member (a key file,
  // {"x": 1}). An object with an invocation claims to be a bundle and is judged: its malformations
  // are the verifier's block A denial (exit 1), as POST /v1/verify answers them (403, not 400), so
  // a broken or tampered bundle is never passed off as mere bad input.
  if (!hasInvocation) throw new UsageError(`${name} is not a DRS bundle: ${notABundle(input)}. ${BUNDLE_SHAPE}`);
  const decision = verifyChain(input, {
    now,
    trustedRoots: trust,
    ...(values['max-age'] !== undefined ? { invocationMaxAgeSeconds: integerFlag('--max-age', values['max-age']) } : {}),
    ...maxDepth,
  });
  io.out(
    values.json
      ? JSON.stringify(decisionJson(decision), null, 2)
      : explainDecision(decision, OFFLINE_SUGGESTIONS) + (decision.valid ? OFFLINE_ONLY : ''),
  );
  return decision.valid ? 0 : 1;
}

/** What of a chain file is the service's word (its view of usage, status, revocation, the tree): no receipt in the file signs it. */
function notSigned(members: readonly string[]): string {
  return `\n  not checked  the file's ${members.map((m) => JSON.stringify(m)).join(', ')} (the service's view of usage, status and revocation): no receipt in the file signs them`;
}

/** An offline allow says what it could not check, so it is not read as the service's allow. */
const OFFLINE_ONLY =
  '\n  checked      offline: signatures, chain, policy and time only; not revocation, max_calls, replay or tool rules (ask the service: baton check)';

const BUNDLE_SHAPE =
  'A bundle is a JSON object {"bundle_version": "4.0", "invocation": "<JWS>", "receipts": ["<JWS>", ...]} as "baton invoke" writes it, a DRS fixture with one under "bundle", or its base64url X-DRS-Bundle form.';

/** What the input is instead of a bundle, in a few words. */
function notABundle(value: unknown): string {
  if (value === null) return 'it is JSON null';
  if (Array.isArray(value)) return 'it is a JSON array';
  if (typeof value !== 'object') return `it is a JSON ${typeof value}`;
  const keys = Object.keys(value);
  if (keys.length === 0) return 'it is an empty object';
  const shown = keys.slice(0, 5).map((k) => JSON.stringify(k));
  return `it has no "invocation" (its members: ${shown.join(', ')}${keys.length > 5 ? ', ...' : ''})`;
}

function isChain(value: unknown): value is Record<string, unknown> & { receipts: string[] } {
  if (!value || typeof value !== 'object' || 'invocation' in value) return false;
  const receipts = (value as { receipts?: unknown }).receipts;
  return Array.isArray(receipts) && receipts.every((r) => typeof r === 'string');
}

/**
 * Why a chain file is not the chain it says or is asked to be, if it is not: --leaf, or the members
 * GET /v1/delegations/{hash}/chain answers beside the receipts (`hash`, `records`; `chain` where
 * "baton chain --json" wrote the file), which a reader takes for what the file holds. A valid chain
 * of another record must not pass as this one.
 */
function notTheChain(
  input: Record<string, unknown> & { receipts: string[] },
  hashes: readonly string[],
  wanted?: string,
): string | undefined {
  const leaf = hashes[hashes.length - 1]!;
  if (wanted !== undefined && leaf !== wanted) return `its receipts end at ${leaf}, not at --leaf ${wanted}`;
  if ('hash' in input && input['hash'] !== leaf)
    return `it says it is the chain of ${JSON.stringify(input['hash'])}, but its receipts end at ${leaf}`;
  for (const member of DECODED_MEMBERS) {
    if (!(member in input)) continue;
    const records = input[member];
    if (!Array.isArray(records) || records.length !== hashes.length)
      return `its ${member} do${member === 'chain' ? 'es' : ''} not list its ${hashes.length} receipt(s) one for one`;
    const differing = records.findIndex((r: unknown, i) => {
      const record = (r !== null && typeof r === 'object' ? r : {}) as Record<string, unknown>;
      return record['hash'] !== hashes[i] || ('jws' in record && record['jws'] !== input.receipts[i]);
    });
    if (differing >= 0)
      return `${member}[${differing}] says another record than receipts[${differing}], which hashes to ${hashes[differing]}`;
  }
  return undefined;
}

/**
 * Where a chain file shows its records decoded beside the receipts: "records" in a GET
 * /v1/delegations/{hash}/chain answer, "chain" in what "baton chain --json" prints.
 */
const DECODED_MEMBERS = ['records', 'chain'] as const;

/** What a chain file may hold that no receipt in it signs: said beside a valid chain, so that it is not read as checked. */
/**
 * What a chain check compares of a file, at its top (and a bundle's version, which says how to read
 * it, not what it grants): every other member is the service's word, or anyone's.
 */
const CHECKED_MEMBERS = new Set(['receipts', 'hash', 'root_principal', 'bundle_version', ...DECODED_MEMBERS]);
const CHECKED_RECORD_MEMBERS = new Set<string>(SIGNED_RECORD_MEMBERS);

/**
 * Every member of `input` a chain check leaves unchecked, at its top (`tree`, ...) and in each
 * decoded record (`chain[].status`, ...): whatever no receipt signs, by name, so an added
 * `"verified": true` is named too, not only the members the service writes today (a review).
 */
function uncheckedMembers(input: Record<string, unknown>): string[] {
  const found = Object.keys(input).filter((m) => !CHECKED_MEMBERS.has(m));
  for (const list of DECODED_MEMBERS) {
    const records = input[list];
    if (!Array.isArray(records)) continue;
    const members = new Set<string>();
    for (const r of records)
      if (r !== null && typeof r === 'object') for (const m of Object.keys(r)) if (!CHECKED_RECORD_MEMBERS.has(m)) members.add(m);
    for (const m of members) found.push(`${list}[].${m}`);
  }
  return found;
}

function explainChain(decision: DelegationsDecision): string {
  if (decision.valid) {
    const root = decision.delegations[0]!.payload;
    const leaf = decision.delegations[decision.delegations.length - 1]!;
    return [
      `VALID CHAIN: ${decision.delegations.length} delegation record(s)`,
      `  root         ${root.iss} (${root.drs_root_type ?? 'root'})`,
      `  leaf         ${leaf.hash}`,
      `  held by      ${leaf.payload.aud}`,
      `  leaf policy  ${JSON.stringify(leaf.payload.policy)}`,
    ].join('\n');
  }
  return explainDecision({ valid: false, error: decision.error, violations: decision.violations }, OFFLINE_SUGGESTIONS);
}

/** Offline, trust is the --trust flag's, not a tenant's: what to do says so. */
const OFFLINE_SUGGESTIONS: Partial<Record<ErrorCode, string>> = {
  BUNDLE_INCOMPLETE:
    'Offline, every record of dr_chain must travel in the bundle, root first: sign the invocation with its records (baton invoke without --by-reference), or ask the service, which holds the stored ones (baton check <file>).',
  UNTRUSTED_ROOT:
    'If you trust the root issuer (its DID is under "got" above), pass it with --trust <did>; offline, no tenant decides trust.',
};

function integerFlag(name: string, raw: string): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n)) throw new UsageError(`${name} takes a whole number, got "${raw}"`);
  return n;
}

/** Accepts a bundle, a DRS fixture wrapping one, or the X-DRS-Bundle base64url form. */
export function parseBundleFile(text: string, name: string): unknown {
  const trimmed = text.trim();
  const notABundle = () => new UsageError(`${name} is neither bundle JSON nor a base64url-encoded bundle`);
  let json: string;
  try {
    json = trimmed.startsWith('{') ? trimmed : utf8Decode(decodeBase64url(trimmed, 'bundle'));
  } catch {
    throw notABundle();
  }
  const value = parseJsonDocument(json, name, notABundle);
  if (value && typeof value === 'object' && 'bundle' in value && !('invocation' in value)) {
    return (value as { bundle: unknown }).bundle;
  }
  return value;
}

/** The wire shape of a decision, as `/verify` and `--json` print it. */
export function decisionJson(decision: ChainDecision): Record<string, unknown> {
  if (decision.valid) return { valid: true, context: decision.context };
  return { valid: false, error: decision.error, violations: decision.violations };
}

/** The fields whose values are unix seconds: shown with their UTC time, which a person can read. */
const TIME_FIELDS = new Set(['nbf', 'exp', 'iat', 'invocation.iat']);
const withUtc = (text: string): string =>
  text.replace(/\b\d{9,11}\b/g, (n) => `${n} (${new Date(Number(n) * 1000).toISOString().replace('.000Z', 'Z')})`);

/** A person-readable explanation: verdict, every unmet condition, and what to do. */
export function explainDecision(
  decision: Pick<Extract<ChainDecision, { valid: true }>, 'valid' | 'context'> | Extract<ChainDecision, { valid: false }>,
  /** What to do where it differs from the service's advice (offline checks, say). */
  suggestionFor: Partial<Record<ErrorCode, string>> = {},
): string {
  if (decision.valid) {
    const c = decision.context;
    // An allow's text is the service's too (baton check): each line kept on its line and cut.
    return printableLines([
      `ALLOWED: ${c.tool ? `tool "${c.tool}"` : c.cmd} on ${c.tool_server}`,
      `  invoked by   ${c.invoker}`,
      `  on behalf of ${c.root_principal} (${c.root_type ?? 'root'})`,
      `  chain        ${c.chain_depth} delegation record(s), leaf policy ${JSON.stringify(c.leaf_policy)}`,
    ]);
  }
  const { error, violations } = decision;
  const lines = [
    `DENIED: ${error.code}${error.block ? ` (block ${error.block})` : ''}`,
    `  ${error.message}`,
    '',
    `Unmet conditions (${violations.length}):`,
  ];
  lines.push(
    ...printedItems(violations, (v, i) => {
      const where = v.dr_index === undefined ? 'invocation' : `receipts[${v.dr_index}]`;
      let req = requirementText(v);
      if (TIME_FIELDS.has(v.field)) req = withUtc(req);
      return [`  ${i + 1}. ${v.code} at ${where}, ${v.field}${req}`, ...(v.message ? [`     ${v.message}`] : [])];
    }),
  );
  // The service's own advice for this refusal, where it wrote one, replaces its code's (see explainRefusal).
  const given = decision.error.suggestion;
  // A server's answer may name a code this client does not know: its advice is then only the server's.
  const known = (code: string) => (isErrorCode(code) ? ERROR_TABLE[code].suggestion : undefined);
  const replaced = given !== undefined && given !== known(decision.error.code);
  const suggestions = [
    ...new Set([
      ...(replaced ? [given] : []),
      ...violations
        .filter((v) => !(replaced && v.code === decision.error.code))
        .map((v) => suggestionFor[v.code] ?? known(v.code))
        .filter((s): s is string => s !== undefined),
    ]),
  ];
  lines.push('', 'What to do:', ...suggestions.map((s) => `  - ${s}`));
  // baton check prints the service's decision here: each line kept on its one line and cut, as
  // explainRefusal's (a denial's huge message or thousands of unmet conditions are not printed whole).
  return printableLines(lines);
}
