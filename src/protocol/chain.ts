/**
 * Chain verification: blocks A-F of the verification pipeline (docs/design.md), pure.
 *
 * One function, verifyChain, decides whether an invocation is authorised by
 * its delegation chain at time `now`. It is conjunctive (every DR must
 * permit the call) and fail-closed (anything it cannot establish is a deny).
 * A deny lists every unmet condition it could evaluate, ordered by block, so
 * a caller fixes everything in one round trip. Block G (replay, counters,
 * budgets) needs the database and lives in the store.
 */
import { blockOf, BatonError, ERROR_TABLE, type Block, type ErrorCode, type Violation } from './errors.js';
import { isRecordHash, type RecordHash } from './hash.js';
import { canonicalJson } from './jcs.js';
import { decodeJws, signatureValid, type DecodedJws } from './jws.js';
import { publicKeyFromDidKey } from './did-key.js';
import { checkAttenuation, effectiveLimits, evaluateArgs, evaluateEstimate, type EffectiveLimits, type Policy } from './policy.js';
import {
  BundleSchema,
  DelegationPayloadSchema,
  InvocationPayloadSchema,
  MAX_CHAIN_DEPTH,
  parseWith,
  type DelegationPayload,
  type InvocationPayload,
} from './records.js';

export interface VerifiedDelegation {
  readonly hash: RecordHash;
  readonly jws: string;
  readonly payload: DelegationPayload;
}

export interface VerifiedInvocation {
  readonly hash: RecordHash;
  readonly jws: string;
  readonly payload: InvocationPayload;
}

/**
 * What the cache may hold at most, by its estimate (recordCacheBytes): 64 MiB. At the default
 * 10,000 records the count binds first for ordinary records (about 7 KB estimated, 2.4 KB held,
 * for a 0.8 KB JWS), so the budget costs the hot path no hits; it binds for large or
 * object-dense records, which would otherwise hold up to 17 times their JWS length each
 * (~10 GB at 10,000 records of 60 KB).
 */
export const DEFAULT_DELEGATION_CACHE_BYTES = 64 * 1024 * 1024;

/**
 * Decoded DRs whose signature verified. A DR is immutable and its hash names
 * its exact bytes, so a verdict once reached never changes; trust, time and
 * revocation are still checked on every call. A record is found by its hash,
 * or by its exact JWS text before any decoding: a chain sent by reference
 * resolves to the stored text, so a hit skips decoding, hashing and shape
 * checks of every link on every verify.
 *
 * Bounded by records and by an estimate of the bytes they hold, the oldest
 * evicted first until both hold; a record estimated above the whole budget is
 * not cached. Only records of a chain verified under a root the verifier
 * trusts belong here: anyone can sign a chain under a key of their own.
 */
export class DelegationCache {
  private readonly entries = new Map<RecordHash, VerifiedDelegation>();
  private readonly byJws = new Map<string, VerifiedDelegation>();
  /** Each entry's estimate, apart from `entries` so that a hit reads nothing more. */
  private readonly bytesOf = new Map<RecordHash, number>();
  private heldBytes = 0;
  constructor(
    private readonly capacity = 10_000,
    private readonly maxBytes = DEFAULT_DELEGATION_CACHE_BYTES,
  ) {}
  get(hash: RecordHash): VerifiedDelegation | undefined {
    return this.entries.get(hash);
  }
  /** The verified record of exactly these bytes, if cached. */
  getByJws(jws: string): VerifiedDelegation | undefined {
    return this.byJws.get(jws);
  }
  set(dr: VerifiedDelegation): void {
    const bytes = recordCacheBytes(dr);
    this.evict(dr.hash);
    if (bytes > this.maxBytes) return;
    while (this.entries.size > 0 && (this.entries.size >= this.capacity || this.heldBytes + bytes > this.maxBytes)) {
      this.evict(this.entries.keys().next().value!);
    }
    this.entries.set(dr.hash, dr);
    this.byJws.set(dr.jws, dr);
    this.bytesOf.set(dr.hash, bytes);
    this.heldBytes += bytes;
  }
  get size(): number {
    return this.entries.size;
  }
  /** The estimated bytes the cached records hold (recordCacheBytes), at most the budget. */
  get bytes(): number {
    return this.heldBytes;
  }
  private evict(hash: RecordHash): void {
    const dr = this.entries.get(hash);
    if (!dr) return;
    this.entries.delete(hash);
    this.byJws.delete(dr.jws);
    this.heldBytes -= this.bytesOf.get(hash) ?? 0;
    this.bytesOf.delete(hash);
  }

  /**
   * Chains (by their records' hashes, root first) whose linkage and attenuation
   * checks found nothing: those checks read only the records, and a hash names
   * a record's exact bytes, so the same records in the same order pass again.
   * Keyed by the cached leaf object, so an entry lives only as long as its leaf.
   * Hashes, not the records: a leaf still cached would otherwise keep its
   * evicted ancestors alive outside the byte budget (up to twice the budget);
   * the hashes are the records' own strings, under 2 KB a leaf (16 of ~110
   * bytes) once those are gone, within the margin of the leaf's estimate
   * (recordCacheBytes: 6.7 KB for the 2.4 KB an ordinary record holds).
   */
  private readonly passedChains = new WeakMap<VerifiedDelegation, readonly RecordHash[]>();
  /** Whether these records, in this order, passed linkage and attenuation before (this very leaf object). */
  passedStructure(drs: readonly VerifiedDelegation[]): boolean {
    const known = this.passedChains.get(drs[drs.length - 1]!);
    return known !== undefined && known.length === drs.length && known.every((hash, i) => hash === drs[i]!.hash);
  }
  rememberPassedStructure(drs: readonly VerifiedDelegation[]): void {
    this.passedChains.set(
      drs[drs.length - 1]!,
      drs.map((dr) => dr.hash),
    );
  }
}

/**
 * One request's scratch: it reads through to a shared cache but keeps what it
 * learns to itself, so records verified before their chain is established
 * under a trusted root (a keyless submission's own records, judged alone
 * first) are not verified twice in the request, nor held by the process once
 * it ends. `keepIn` hands the shared cache the records of a chain that passed.
 */
export class RequestDelegationCache extends DelegationCache {
  constructor(private readonly shared: DelegationCache) {
    // A request holds at most a chain's stored ancestors and its submitted records.
    super(2 * MAX_CHAIN_DEPTH);
  }
  override get(hash: RecordHash): VerifiedDelegation | undefined {
    return super.get(hash) ?? this.shared.get(hash);
  }
  override getByJws(jws: string): VerifiedDelegation | undefined {
    return super.getByJws(jws) ?? this.shared.getByJws(jws);
  }
  override passedStructure(drs: readonly VerifiedDelegation[]): boolean {
    return super.passedStructure(drs) || this.shared.passedStructure(drs);
  }
  /** Caches in the shared cache these records (of a chain verified under a trusted root) it lacks. */
  keepIn(records: readonly VerifiedDelegation[]): void {
    for (const dr of records) if (!this.shared.get(dr.hash)) this.shared.set(dr);
  }
}

/**
 * What a cached record holds, over-estimated (measured with a forced GC over
 * thousands of records of each shape, heap plus external memory): its JWS, the
 * signed bytes and payload strings decoded beside it (under 3 bytes a JWS
 * character), 96 bytes for every JSON value and object member of the payload
 * (an empty object in an array holds ~68, a member of a large object ~200
 * with the schema's copy of it), and 1 KB for the entry itself. Measured: 1.59 MB
 * estimated for 1.0 MB held (59 KB of `[{},{},...]`), 710 KB for 607 KB (an
 * object of 3,000 members, the closest), 6.7 KB for 2.4 KB (an ordinary record).
 * A string (value or member name) with one character above U+00FF is stored at
 * 2 bytes a character: it counts 2 bytes a character more (one copy measured,
 * a second allowed for). Measured: 46,000 ASCII characters and one 'ā' held
 * 218 KB in a 62 KB JWS, estimated 283 KB (191 KB if weighed as ASCII).
 * Walked only when a record is cached, after its signature was verified.
 */
export function recordCacheBytes(dr: VerifiedDelegation): number {
  let nodes = 0;
  let twoByteChars = 0;
  const pending: unknown[] = [dr.payload];
  while (pending.length > 0) {
    const value = pending.pop();
    nodes++;
    if (typeof value === 'string') {
      twoByteChars += twoByteLength(value);
    } else if (Array.isArray(value)) {
      for (const item of value) pending.push(item);
    } else if (value !== null && typeof value === 'object') {
      for (const [name, member] of Object.entries(value)) {
        nodes++;
        twoByteChars += twoByteLength(name);
        pending.push(member);
      }
    }
  }
  return 1024 + 3 * dr.jws.length + 96 * nodes + 2 * twoByteChars;
}

/** A character above U+00FF makes V8 store the whole string at 2 bytes a character: its length then, else 0. */
function twoByteLength(text: string): number {
  return ABOVE_LATIN1.test(text) ? text.length : 0;
}
const ABOVE_LATIN1 = /[\u0100-\uffff]/;

export interface ChainOptions {
  /** Unix seconds. Passed in: the protocol never reads a clock. */
  readonly now: number;
  /** Root DIDs the verifier trusts. */
  readonly trustedRoots: ReadonlySet<string> | readonly string[] | ((did: string) => boolean);
  readonly isRevoked?: (hash: RecordHash) => boolean;
  /** At most MAX_CHAIN_DEPTH (16); lower values tighten it. */
  readonly maxDepth?: number;
  /** How old an invocation may be (default 300 s). */
  readonly invocationMaxAgeSeconds?: number;
  /** How far in the future an invocation iat may lie (default 60 s). */
  readonly clockSkewSeconds?: number;
  /** Looks up DRs by hash when a bundle carries its chain by reference (empty receipts). */
  readonly resolveDelegation?: (hash: RecordHash) => string | undefined;
  readonly cache?: DelegationCache;
  /** The request body the tool server received, compared with args under JCS. */
  readonly body?: unknown;
  readonly requireBinding?: boolean;
}

export type Binding = 'match' | 'mismatch' | 'absent';

export interface ChainContext {
  readonly root_principal: string;
  readonly root_type: DelegationPayload['drs_root_type'];
  readonly subject: string;
  readonly chain_depth: number;
  readonly leaf_policy: Policy;
  readonly effective_limits: EffectiveLimits;
  readonly invoker: string;
  readonly tool_server: string;
  readonly cmd: string;
  readonly tool: string | null;
  readonly dr_chain: readonly RecordHash[];
  readonly invocation_jti: string;
  readonly invocation_hash: RecordHash;
  readonly binding: Binding;
  /** The root's `drs_consent`, as signed (a human root carries one), as DRS verifiers report it. */
  readonly consent_record?: DelegationPayload['drs_consent'];
  /** The root's `drs_regulatory`, as signed. */
  readonly regulatory?: DelegationPayload['drs_regulatory'];
  /** `drs_consent.session_id` when it is a string. */
  readonly session_id?: string;
}

export interface DecisionError {
  readonly code: ErrorCode;
  readonly block: Block | null;
  readonly message: string;
  readonly suggestion: string;
}

export type ChainDecision =
  | {
      readonly valid: true;
      readonly context: ChainContext;
      readonly delegations: readonly VerifiedDelegation[];
      readonly invocation: VerifiedInvocation;
    }
  | {
      readonly valid: false;
      readonly error: DecisionError;
      readonly violations: readonly Violation[];
      /** Whatever could be decoded, for the audit trail of denials. */
      readonly invocation?: VerifiedInvocation;
      readonly dr_chain?: readonly RecordHash[];
    };

const DEFAULT_MAX_AGE_SECONDS = 300;
const DEFAULT_SKEW_SECONDS = 60;
const BLOCK_ORDER = 'ABCDEFG';

/**
 * The protocol reads no clock, so the time is the caller's. A `now` that is not a finite number
 * (missing, from plain JavaScript) would make every time check pass: NaN and undefined compare false.
 */
function assertNow(now: unknown, where: string): void {
  if (typeof now !== 'number' || !Number.isFinite(now)) {
    throw new TypeError(`${where}: options.now must be the current time in Unix seconds, a finite number (got ${String(now)}).`);
  }
}

export function verifyChain(bundleInput: unknown, opts: ChainOptions): ChainDecision {
  assertNow(opts.now, 'verifyChain');
  // Block A: shape, size, completeness. Nothing later can be judged without it.
  let invocation: VerifiedInvocation;
  let receipts: readonly string[];
  try {
    const bundle = parseWith(BundleSchema, bundleInput, 'bundle');
    invocation = decodeInvocation(bundle.invocation);
    receipts = bundle.receipts;
  } catch (e) {
    return deny([violationFromError(e, 'bundle')]);
  }
  const dr_chain = invocation.payload.dr_chain;
  const partial = { invocation, dr_chain };

  const maxDepth = Math.min(opts.maxDepth ?? MAX_CHAIN_DEPTH, MAX_CHAIN_DEPTH);
  const depth = Math.max(dr_chain.length, receipts.length);
  if (depth > maxDepth) {
    return deny(
      [
        {
          code: 'CHAIN_TOO_DEEP',
          field: 'dr_chain',
          required: `at most ${maxDepth}`,
          actual: depth,
          message: `The chain has ${depth} delegation records; this verifier accepts at most ${maxDepth}.`,
        },
      ],
      partial,
    );
  }

  const gathered = gatherDelegations(receipts, dr_chain, opts.resolveDelegation);
  if ('violations' in gathered) return deny(gathered.violations, partial);

  const decoded = decodeDelegations(gathered.jwsList, opts.cache);
  if ('violations' in decoded) return deny(decoded.violations, partial);
  const { delegations, fresh } = decoded;

  const violations: Violation[] = [
    ...delegationViolations(delegations, fresh, opts),
    ...checkInvocationLinkage(delegations, invocation),
    ...invocationSignatureViolations(invocation),
    ...checkArgs(delegations, invocation),
    ...checkInvocationTime(invocation, opts),
  ];
  const binding = compareBinding(invocation.payload.args, opts.body);
  if (opts.requireBinding && binding !== 'match') {
    violations.push({
      code: 'BINDING_MISMATCH',
      field: 'body',
      required: 'JCS-equal to invocation args',
      actual: binding,
      message:
        binding === 'absent'
          ? 'Binding was required but no request body was supplied to compare with the signed args.'
          : `The request body differs from the signed invocation args under JCS: ${bindingDifference(invocation.payload.args, opts.body)}.`,
    });
  }
  if (violations.length > 0) return deny(violations, partial);

  // Only records of a chain that passed every check, its root's trust included, reach the cache.
  for (const dr of delegations) if (fresh.has(dr.hash)) opts.cache?.set(dr);
  opts.cache?.rememberPassedStructure(delegations);

  const root = delegations[0]!.payload;
  const leaf = delegations[delegations.length - 1]!.payload;
  const tool = invocation.payload.args['tool'];
  return {
    valid: true,
    delegations,
    invocation,
    context: {
      root_principal: root.iss,
      root_type: root.drs_root_type,
      subject: root.sub,
      chain_depth: delegations.length,
      leaf_policy: leaf.policy,
      // Attenuation held along this chain (checked above, or when its structure was cached).
      effective_limits: effectiveLimits(
        delegations.map((d) => d.payload.policy),
        { attenuated: true },
      ),
      invoker: invocation.payload.iss,
      tool_server: invocation.payload.tool_server,
      cmd: invocation.payload.cmd,
      tool: typeof tool === 'string' ? tool : null,
      dr_chain,
      invocation_jti: invocation.payload.jti,
      invocation_hash: invocation.hash,
      binding,
      ...humanRootContext(root),
    },
  };
}

/** What DRS verifiers add to the context from the root's consent and regulatory claims, when it has them. */
function humanRootContext(root: DelegationPayload): Pick<ChainContext, 'consent_record' | 'regulatory' | 'session_id'> {
  if (root.drs_consent === undefined && root.drs_regulatory === undefined) return {};
  const sessionId = root.drs_consent?.['session_id'];
  return {
    ...(root.drs_consent !== undefined ? { consent_record: root.drs_consent } : {}),
    ...(root.drs_regulatory !== undefined ? { regulatory: root.drs_regulatory } : {}),
    ...(typeof sessionId === 'string' ? { session_id: sessionId } : {}),
  };
}

// ---------------------------------------------------------------- delegations alone

export interface DelegationChainOptions {
  readonly now: number;
  readonly trustedRoots: ChainOptions['trustedRoots'];
  readonly isRevoked?: ChainOptions['isRevoked'];
  readonly maxDepth?: number;
  readonly cache?: DelegationCache;
  /** Issuance may store a DR before its nbf; verification may not use one. */
  readonly allowNotYetValid?: boolean;
}

export type DelegationsDecision =
  | { readonly valid: true; readonly delegations: readonly VerifiedDelegation[] }
  | { readonly valid: false; readonly error: DecisionError; readonly violations: readonly Violation[] };

/**
 * Verifies a root-to-leaf list of DRs without an invocation: what issuance
 * checks before storing a chain. Same blocks, same codes as verifyChain.
 */
export function verifyDelegations(jwsList: readonly string[], opts: DelegationChainOptions): DelegationsDecision {
  return verifyDelegationList(jwsList, opts, false);
}

function verifyDelegationList(jwsList: readonly string[], opts: DelegationChainOptions, segment: boolean): DelegationsDecision {
  assertNow(opts.now, segment ? 'verifyDelegationSegment' : 'verifyDelegations');
  const maxDepth = Math.min(opts.maxDepth ?? MAX_CHAIN_DEPTH, MAX_CHAIN_DEPTH);
  if (jwsList.length === 0) {
    return deny([{ code: 'BUNDLE_INCOMPLETE', field: 'receipts', required: 'at least 1', actual: 0 }]);
  }
  if (jwsList.length > maxDepth) {
    return deny([
      {
        code: 'CHAIN_TOO_DEEP',
        field: 'receipts',
        required: `at most ${maxDepth}`,
        actual: jwsList.length,
        message: `The chain would be ${jwsList.length} delegation records deep; at most ${maxDepth} are allowed.`,
      },
    ]);
  }
  const decoded = decodeDelegations(jwsList, opts.cache);
  if ('violations' in decoded) return deny(decoded.violations);
  const violations = delegationViolations(decoded.delegations, decoded.fresh, opts, segment);
  if (violations.length > 0) return deny(violations);
  // As in verifyChain; a segment's cache is a request's scratch (verifyDelegationSegment).
  for (const dr of decoded.delegations) if (decoded.fresh.has(dr.hash)) opts.cache?.set(dr);
  return { valid: true, delegations: decoded.delegations };
}

export type DelegationSegmentOptions = Omit<DelegationChainOptions, 'trustedRoots' | 'isRevoked' | 'cache'> & {
  /**
   * Read through to a shared cache; the records verified here are kept for this request only. A
   * segment establishes no trust (anyone can sign one under a key of their own), so what it
   * verified never enters a shared cache from here.
   */
  readonly cache?: RequestDelegationCache;
};

/**
 * The checks of verifyDelegations that need nothing but the records given:
 * shape, each record's signature by its own iss, and linkage, attenuation,
 * time nesting and expiry between consecutive records. The list may start
 * below the root (its first record names a parent); trust, revocation and
 * the hand-off from that parent are the caller's to judge, on the full chain.
 * Every violation it reports echoes only the records given. It caches only
 * in the request's scratch (RequestDelegationCache).
 */
export function verifyDelegationSegment(jwsList: readonly string[], opts: DelegationSegmentOptions): DelegationsDecision {
  // Typed so already; a plain cache from untyped code is read through, never written.
  const cache = opts.cache && !(opts.cache instanceof RequestDelegationCache) ? new RequestDelegationCache(opts.cache) : opts.cache;
  return verifyDelegationList(jwsList, { ...opts, cache, trustedRoots: () => true }, true);
}

function decodeDelegations(
  jwsList: readonly string[],
  cache: DelegationCache | undefined,
): { delegations: VerifiedDelegation[]; fresh: Set<RecordHash> } | { violations: Violation[] } {
  const violations: Violation[] = [];
  const delegations: VerifiedDelegation[] = [];
  const fresh = new Set<RecordHash>();
  jwsList.forEach((jws, index) => {
    try {
      const dr = decodeDelegation(jws, index, cache);
      if (!cache?.get(dr.hash)) fresh.add(dr.hash);
      delegations.push(dr);
    } catch (e) {
      violations.push(violationFromError(e, `receipts[${index}]`, index));
    }
  });
  return violations.length > 0 ? { violations } : { delegations, fresh };
}

/** Blocks B-F for the DRs themselves: linkage, signatures, trust, attenuation, time, status. */
function delegationViolations(
  drs: readonly VerifiedDelegation[],
  fresh: ReadonlySet<RecordHash>,
  opts: DelegationChainOptions,
  segment = false,
): Violation[] {
  // Cached records already verified as this very chain: linkage and attenuation read only them.
  const structurePassed = !segment && fresh.size === 0 && opts.cache?.passedStructure(drs) === true;
  return [
    ...(structurePassed ? [] : checkDelegationLinkage(drs, segment)),
    ...checkDelegationSignatures(drs, fresh),
    ...checkTrust(drs, opts.trustedRoots),
    ...(structurePassed ? [] : checkAttenuationAlongChain(drs)),
    ...checkDelegationTimes(drs, opts.now, opts.allowNotYetValid ?? false),
    ...checkStatus(drs, opts.isRevoked),
  ];
}

// ---------------------------------------------------------------- decoding

export function decodeInvocation(jws: string): VerifiedInvocation {
  const decoded = decodeJws(jws, 'invocation');
  const payload = parseWith(InvocationPayloadSchema, decoded.payload, 'invocation payload');
  return withDecoded({ hash: decoded.hash, jws, payload }, decoded);
}

/** Decodes one DR, reusing a cached verified copy when the exact bytes were seen before. */
export function decodeDelegation(jws: string, index: number, cache?: DelegationCache): VerifiedDelegation {
  const known = cache?.getByJws(jws);
  if (known) return known;
  // Not "the root" at 0: a submission may start below one, with a child.
  const what = `delegation record receipts[${index}]`;
  const decoded = decodeJws(jws, what);
  const cached = cache?.get(decoded.hash);
  if (cached) return cached;
  const payload = parseWith(DelegationPayloadSchema, decoded.payload, `payload of the ${what}`);
  return withDecoded({ hash: decoded.hash, jws, payload }, decoded);
}

/**
 * The decoded bytes behind each record, kept beside it rather than in it so
 * signature material never leaks into JSON responses.
 */
const decodedByRecord = new WeakMap<object, DecodedJws>();

function withDecoded<T extends object>(record: T, decoded: DecodedJws): T {
  decodedByRecord.set(record, decoded);
  return record;
}

function decodedOf(record: VerifiedDelegation | VerifiedInvocation): DecodedJws {
  return decodedByRecord.get(record) ?? decodeJws(record.jws, 'record');
}

function gatherDelegations(
  receipts: readonly string[],
  dr_chain: readonly RecordHash[],
  resolve: ChainOptions['resolveDelegation'],
): { jwsList: readonly string[] } | { violations: Violation[] } {
  if (receipts.length > 0) {
    if (receipts.length < dr_chain.length) {
      return {
        violations: [
          {
            code: 'BUNDLE_INCOMPLETE',
            field: 'receipts',
            required: dr_chain.length,
            actual: receipts.length,
            message: `The invocation names ${dr_chain.length} delegation records but the bundle carries ${receipts.length}.`,
          },
        ],
      };
    }
    return { jwsList: receipts };
  }
  const jwsList: string[] = [];
  const missing: Violation[] = [];
  dr_chain.forEach((hash, index) => {
    const jws = resolve?.(hash);
    if (jws === undefined) {
      missing.push({
        code: 'BUNDLE_INCOMPLETE',
        dr_index: index,
        dr_hash: hash,
        field: `dr_chain[${index}]`,
        message: `Delegation record ${hash} is neither in the bundle nor known to this verifier.`,
      });
    } else {
      jwsList.push(jws);
    }
  });
  return missing.length > 0 ? { violations: missing } : { jwsList };
}

// ---------------------------------------------------------------- block B

/**
 * A command may only be narrowed by appending path segments, except a command that names a tool:
 * it names exactly that one, so it covers only itself. Tool names may hold `/` (MCP namespaces
 * tools so: github/delete_repo), and a grant of /mcp/tools/call/fs covered
 * /mcp/tools/call/fs/delete_all, another tool (an outside probe).
 */
export function commandCovers(parent: string, child: string): boolean {
  if (child === parent) return true;
  if (toolNamedByCmd(parent) !== undefined) return false;
  return child.startsWith(parent.endsWith('/') ? parent : `${parent}/`);
}

/** What a command under `parent` must be, as a violation's `required` says it. */
export function commandsCoveredBy(parent: string): string {
  return toolNamedByCmd(parent) === undefined ? `${parent} or a sub-path` : `${parent} exactly (it names one tool)`;
}

/** The command of an MCP tools/call; a grant narrowed to one tool appends its name: /mcp/tools/call/<tool>. */
export const MCP_TOOLS_CALL_CMD = '/mcp/tools/call';

/** The tool a cmd names (/mcp/tools/call/<tool>), if it names one. */
export function toolNamedByCmd(cmd: string): string | undefined {
  const prefix = `${MCP_TOOLS_CALL_CMD}/`;
  return cmd.startsWith(prefix) && cmd.length > prefix.length ? cmd.slice(prefix.length) : undefined;
}

function checkDelegationLinkage(drs: readonly VerifiedDelegation[], segment: boolean): Violation[] {
  const out: Violation[] = [];
  const rootSub = drs[0]!.payload.sub;
  drs.forEach((dr, i) => {
    const at = { dr_index: i, dr_hash: dr.hash };
    const p = dr.payload;
    if (p.sub !== rootSub) {
      out.push({ ...at, code: 'SUBJECT_MISMATCH', field: 'sub', required: rootSub, actual: p.sub });
    }
    const parent = drs[i - 1];
    if (!parent) {
      if (p.prev_dr_hash != null && !segment) {
        out.push({
          ...at,
          code: 'CHAIN_HASH_MISMATCH',
          field: 'prev_dr_hash',
          required: null,
          actual: p.prev_dr_hash,
          message: 'The first record of the chain must be a root (no prev_dr_hash); the chain is missing its ancestors.',
        });
      }
      return;
    }
    if (p.prev_dr_hash !== parent.hash) {
      out.push({ ...at, code: 'CHAIN_HASH_MISMATCH', field: 'prev_dr_hash', required: parent.hash, actual: p.prev_dr_hash ?? null });
    }
    if (p.iss !== parent.payload.aud) {
      out.push({
        ...at,
        code: 'ISSUER_AUDIENCE_GAP',
        field: 'iss',
        required: parent.payload.aud,
        actual: p.iss,
        message: `receipts[${i}] is issued by ${p.iss}, but its parent delegated to ${parent.payload.aud}.`,
      });
    }
    if (!commandCovers(parent.payload.cmd, p.cmd)) {
      out.push({ ...at, code: 'COMMAND_MISMATCH', field: 'cmd', required: commandsCoveredBy(parent.payload.cmd), actual: p.cmd });
    }
  });
  return out;
}

function checkInvocationLinkage(drs: readonly VerifiedDelegation[], inv: VerifiedInvocation): Violation[] {
  const out: Violation[] = [];
  const chain = inv.payload.dr_chain;
  if (drs.length !== chain.length) {
    out.push({
      code: 'DR_CHAIN_MISMATCH',
      field: 'dr_chain',
      required: drs.length,
      actual: chain.length,
      message: `The bundle carries ${drs.length} delegation records but the invocation dr_chain lists ${chain.length}.`,
    });
  }
  drs.forEach((dr, i) => {
    if (chain[i] !== undefined && chain[i] !== dr.hash) {
      out.push({
        dr_index: i,
        dr_hash: dr.hash,
        code: 'DR_CHAIN_MISMATCH',
        field: `dr_chain[${i}]`,
        required: dr.hash,
        actual: chain[i],
        message: `dr_chain[${i}] does not name the hash of receipts[${i}].`,
      });
    }
  });
  const root = drs[0]!.payload;
  const leaf = drs[drs.length - 1]!.payload;
  const ip = inv.payload;
  if (ip.iss !== leaf.aud) {
    out.push({
      code: 'ISSUER_AUDIENCE_GAP',
      field: 'invocation.iss',
      required: leaf.aud,
      actual: ip.iss,
      message: `The invocation names ${ip.iss} as its signer (iss), but the leaf delegation was granted to ${leaf.aud}.`,
    });
  }
  if (ip.sub !== root.sub) {
    out.push({ code: 'SUBJECT_MISMATCH', field: 'invocation.sub', required: root.sub, actual: ip.sub });
  }
  if (!commandCovers(leaf.cmd, ip.cmd)) {
    out.push({ code: 'COMMAND_MISMATCH', field: 'invocation.cmd', required: commandsCoveredBy(leaf.cmd), actual: ip.cmd });
  }
  // A cmd that names a tool calls that tool: otherwise a grant narrowed to one tool by its cmd
  // (and no allowed_tools) would cover a call of any other tool in args.
  const named = toolNamedByCmd(ip.cmd);
  const tool = ip.args['tool'];
  if (named !== undefined && tool !== named) {
    out.push({
      code: 'COMMAND_MISMATCH',
      field: 'args.tool',
      required: named,
      actual: typeof tool === 'string' ? tool : (tool ?? null),
      message: `The invocation's cmd ${ip.cmd} names tool ${JSON.stringify(named)}, but its args call ${tool === undefined ? 'no tool' : JSON.stringify(tool)}.`,
    });
  }
  return out;
}

// ---------------------------------------------------------------- block C

function checkDelegationSignatures(drs: readonly VerifiedDelegation[], fresh: ReadonlySet<RecordHash>): Violation[] {
  const out: Violation[] = [];
  drs.forEach((dr, i) => {
    if (!fresh.has(dr.hash)) return; // cached: verified before, and the hash pins the exact bytes
    const problem = signatureProblem(dr, dr.payload.iss);
    if (problem) out.push({ ...problem, dr_index: i, dr_hash: dr.hash, field: 'signature' });
    // Delegating to (or on behalf of) a weak or non-canonical key is refused
    // too: authority handed to a small-order key is authority anyone can use.
    for (const field of ['aud', 'sub'] as const) {
      const keyProblem = didKeyProblem(dr.payload[field]);
      if (keyProblem) out.push({ ...keyProblem, dr_index: i, dr_hash: dr.hash, field, actual: dr.payload[field] });
    }
  });
  return out;
}

/** Why a did:key is not an acceptable Ed25519 key (WEAK_KEY / INVALID_DID), or null. */
function didKeyProblem(did: string): Pick<Violation, 'code' | 'message'> | null {
  try {
    publicKeyFromDidKey(did);
    return null;
  } catch (e) {
    const v = violationFromError(e, 'did');
    return { code: v.code, ...(v.message ? { message: v.message } : {}) };
  }
}

function invocationSignatureViolations(inv: VerifiedInvocation): Violation[] {
  const problem = signatureProblem(inv, inv.payload.iss);
  return problem ? [{ ...problem, field: 'invocation.signature' }] : [];
}

function checkTrust(drs: readonly VerifiedDelegation[], roots: ChainOptions['trustedRoots']): Violation[] {
  const rootIssuer = drs[0]!.payload.iss;
  if (isTrusted(rootIssuer, roots)) return [];
  return [
    {
      code: 'UNTRUSTED_ROOT',
      dr_index: 0,
      dr_hash: drs[0]!.hash,
      field: 'iss',
      actual: rootIssuer,
      message: `The root delegation is issued by ${rootIssuer}, which is not a trusted root here.`,
    },
  ];
}

function signatureProblem(record: VerifiedDelegation | VerifiedInvocation, issuer: string): Omit<Violation, 'field'> | null {
  try {
    if (signatureValid(decodedOf(record), issuer)) return null;
    return { code: 'SIGNATURE_INVALID', actual: issuer, message: `The signature does not verify under the issuer key ${issuer}.` };
  } catch (e) {
    const v = violationFromError(e, 'iss');
    return { code: v.code, actual: issuer, ...(v.message ? { message: v.message } : {}) };
  }
}

function isTrusted(did: string, roots: ChainOptions['trustedRoots']): boolean {
  if (typeof roots === 'function') return roots(did);
  if (roots instanceof Set) return roots.has(did);
  return (roots as readonly string[]).includes(did);
}

// ---------------------------------------------------------------- block D

function checkAttenuationAlongChain(drs: readonly VerifiedDelegation[]): Violation[] {
  const out: Violation[] = [];
  drs.forEach((dr, i) => {
    const parent = drs[i - 1];
    if (!parent) return;
    const at = { dr_index: i, dr_hash: dr.hash };
    for (const v of checkAttenuation(parent.payload.policy, dr.payload.policy)) out.push({ ...v, ...at });
    for (const v of checkTimeNesting(parent.payload, dr.payload)) out.push({ ...v, ...at });
  });
  return out;
}

function checkArgs(drs: readonly VerifiedDelegation[], inv: VerifiedInvocation): Violation[] {
  const out: Violation[] = [];
  drs.forEach((dr, i) => {
    for (const v of evaluateArgs(dr.payload.policy, inv.payload.args)) out.push({ ...v, dr_index: i, dr_hash: dr.hash });
  });
  // A declared estimate is counted even where no DR caps cost, so it must be a usable amount everywhere.
  if (!out.some((v) => v.field === 'args.estimated_cost_usd')) out.push(...evaluateEstimate(inv.payload.args));
  return out;
}

/** A child may not outlive its parent nor start before it. */
export function checkTimeNesting(
  parent: Pick<DelegationPayload, 'nbf' | 'exp'>,
  child: Pick<DelegationPayload, 'nbf' | 'exp'>,
): Violation[] {
  const out: Violation[] = [];
  if (child.nbf < parent.nbf) {
    out.push({
      code: 'POLICY_ESCALATION',
      field: 'nbf',
      required: `>= ${parent.nbf}`,
      actual: child.nbf,
      message: `The delegation starts (nbf ${child.nbf}) before its parent does (nbf ${parent.nbf}).`,
    });
  }
  if (parent.exp !== null && (child.exp === null || child.exp > parent.exp)) {
    out.push({
      code: 'POLICY_ESCALATION',
      field: 'exp',
      required: `<= ${parent.exp}`,
      actual: child.exp,
      message: `The delegation expires (${child.exp ?? 'never'}) after its parent does (${parent.exp}).`,
    });
  }
  return out;
}

// ---------------------------------------------------------------- block E

export type TemporalVerdict = 'valid' | 'RECEIPT_NOT_YET_VALID' | 'RECEIPT_EXPIRED';

/** nbf and exp are both inclusive bounds (DRS temporal vectors). */
export function temporalStatus(nbf: number, exp: number | null, now: number): TemporalVerdict {
  if (now < nbf) return 'RECEIPT_NOT_YET_VALID';
  if (exp !== null && now > exp) return 'RECEIPT_EXPIRED';
  return 'valid';
}

function checkDelegationTimes(drs: readonly VerifiedDelegation[], now: number, allowNotYetValid: boolean): Violation[] {
  const out: Violation[] = [];
  drs.forEach((dr, i) => {
    const verdict = temporalStatus(dr.payload.nbf, dr.payload.exp, now);
    if (verdict === 'RECEIPT_NOT_YET_VALID' && !allowNotYetValid) {
      out.push({ code: verdict, dr_index: i, dr_hash: dr.hash, field: 'nbf', required: `<= ${now}`, actual: dr.payload.nbf });
    } else if (verdict === 'RECEIPT_EXPIRED') {
      out.push({ code: verdict, dr_index: i, dr_hash: dr.hash, field: 'exp', required: `>= ${now}`, actual: dr.payload.exp });
    }
  });
  return out;
}

function checkInvocationTime(inv: VerifiedInvocation, opts: ChainOptions): Violation[] {
  const maxAge = opts.invocationMaxAgeSeconds ?? DEFAULT_MAX_AGE_SECONDS;
  const skew = opts.clockSkewSeconds ?? DEFAULT_SKEW_SECONDS;
  const iat = inv.payload.iat;
  if (opts.now - iat > maxAge) {
    return [
      {
        code: 'INVOCATION_STALE',
        field: 'invocation.iat',
        required: `>= ${opts.now - maxAge}`,
        actual: iat,
        message: `The invocation was signed ${opts.now - iat} s ago; invocations are accepted for ${maxAge} s.`,
      },
    ];
  }
  if (iat - opts.now > skew) {
    return [
      {
        code: 'INVOCATION_STALE',
        field: 'invocation.iat',
        required: `<= ${opts.now + skew}`,
        actual: iat,
        message: `The invocation claims to be signed ${iat - opts.now} s in the future; the allowed clock skew is ${skew} s.`,
      },
    ];
  }
  return [];
}

// ---------------------------------------------------------------- block F

function checkStatus(drs: readonly VerifiedDelegation[], isRevoked: ChainOptions['isRevoked']): Violation[] {
  if (!isRevoked) return [];
  const out: Violation[] = [];
  drs.forEach((dr, i) => {
    if (isRevoked(dr.hash)) {
      out.push({ code: 'RECEIPT_REVOKED', dr_index: i, dr_hash: dr.hash, field: 'status', required: 'active', actual: 'revoked' });
    }
  });
  return out;
}

// ---------------------------------------------------------------- binding

/** DRS binding: the body a tool server received must equal the signed args under JCS. */
export function compareBinding(args: Record<string, unknown>, body: unknown): Binding {
  if (body === undefined) return 'absent';
  try {
    return canonicalJson(body) === canonicalJson(args) ? 'match' : 'mismatch';
  } catch {
    return 'mismatch';
  }
}

/**
 * Where a body that is not the signed args differs from them, by member name only (the values are
 * the caller's own): the signed args also hold what the agent declared (tool, estimated_cost_usd,
 * pii_access, write_access), which a tool server's body usually lacks.
 */
export function bindingDifference(args: Record<string, unknown>, body: unknown): string {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    return `the body is ${body === null ? 'null' : Array.isArray(body) ? 'an array' : `a ${typeof body}`}, the signed args an object`;
  }
  const names = (list: string[]) => {
    // Names only, each cut short: the body may be the agent's, and the denial is stored.
    const shown = list
      .slice(0, 8)
      .map((k) => JSON.stringify(k.length > 64 ? `${k.slice(0, 64)}…` : k))
      .join(', ');
    return list.length > 8 ? `${shown} and ${list.length - 8} more` : shown;
  };
  const same = (a: unknown, b: unknown) => {
    try {
      return canonicalJson(a) === canonicalJson(b);
    } catch {
      return false;
    }
  };
  const given = body as Record<string, unknown>;
  const missing = Object.keys(args)
    .filter((k) => !Object.hasOwn(given, k))
    .sort();
  const extra = Object.keys(given)
    .filter((k) => !Object.hasOwn(args, k))
    .sort();
  const differ = Object.keys(args)
    .filter((k) => Object.hasOwn(given, k) && !same(args[k], given[k]))
    .sort();
  const parts = [
    ...(missing.length > 0 ? [`the body lacks ${names(missing)}`] : []),
    ...(extra.length > 0 ? [`the body has ${names(extra)}, which the args do not`] : []),
    ...(differ.length > 0 ? [`${names(differ)} differ${differ.length === 1 ? 's' : ''}`] : []),
  ];
  return parts.length > 0 ? parts.join('; ') : 'a value the body holds is not JSON';
}

// ---------------------------------------------------------------- decisions

export function violationFromError(e: unknown, field: string, dr_index?: number): Violation {
  if (e instanceof BatonError) {
    return {
      code: e.code,
      field,
      ...(dr_index === undefined ? {} : { dr_index }),
      message: e.message,
      ...(e.details ? { actual: e.details } : {}),
    };
  }
  throw e; // a bug, not a verdict: never turn an unexpected failure into an allow or a silent deny
}

function blockRank(v: Violation): number {
  return BLOCK_ORDER.indexOf(blockOf(v.code) ?? 'A');
}

/** Violations in the order the spec's blocks run (then by DR), so the first is the cause to name. */
export function inBlockOrder(violations: readonly Violation[]): Violation[] {
  return [...violations].sort((a, b) => blockRank(a) - blockRank(b) || (a.dr_index ?? 99) - (b.dr_index ?? 99));
}

export type ChainDenial = Extract<ChainDecision, { valid: false }>;

/**
 * Whether what the invocation of a denial verifyChain returned claims (its jti, its dr_chain) is
 * its signers' word: true when it was refused in block D or later. verifyChain gathers every
 * violation of blocks B-F in one list, in block order, so such a refusal means linkage, every
 * signature and the root's trust all held. Refused earlier, they are whatever the request wrote,
 * and anyone may write any (under a root of their own, every signature verifies): recorded under
 * them, a forged invocation would be listed under any jti it named.
 */
export function denialClaimsVerified(d: ChainDenial): boolean {
  return d.error.block !== null && BLOCK_ORDER.indexOf(d.error.block) >= BLOCK_ORDER.indexOf('D');
}

export function deny(
  violations: readonly Violation[],
  partial: { invocation?: VerifiedInvocation; dr_chain?: readonly RecordHash[] } = {},
): ChainDenial {
  const sorted = inBlockOrder(violations);
  const first = sorted[0]!;
  const spec = ERROR_TABLE[first.code];
  return {
    valid: false,
    error: {
      code: first.code,
      block: blockOf(first.code) ?? null,
      message: first.message ?? spec.message,
      suggestion: spec.suggestion,
    },
    violations: sorted,
    ...partial,
  };
}

export { isRecordHash };
