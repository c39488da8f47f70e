/**
 * Offline checks of a Baton tenant's transparency log, for auditors:
 *
 * - verifyServiceReceiptInclusion: a service receipt is in the log under a signed checkpoint
 *   (C2SP tlog-proof bundle, as GET /v1/log/service-receipts/{id}/proof returns it);
 * - verifyCheckpointConsistency: a newer checkpoint only appended to an older
 *   one (else a split-view or rollback finding, with both signed notes as evidence);
 * - auditLog: replays the whole log from its tiles and entry bundles,
 *   recomputes the root, re-verifies every service receipt's signature and tenant,
 *   re-verifies every decision's delegation chain (checkDecision), cross-checks
 *   the service receipts listing, and reports every entry missing, reordered
 *   or rewritten.
 *
 * The checks themselves are the pure protocol modules; auditLog only adds
 * HTTP reads (through a fetch function the caller may replace).
 */
import { decodeBase64url } from '../protocol/base64url.js';
import { leafHash, rootOf, type Hash } from '../protocol/merkle.js';
import { COSIGNATURE_V1, NOTE_ED25519, parseVerifierKey, type VerifierKey } from '../protocol/note.js';
import { verifyServiceReceipt, type ServiceVerificationKey } from '../protocol/service-receipt.js';
import { findSplitView, type SplitViewFinding } from '../protocol/split-view.js';
import { entryBundlePath, parseEntryBundle, tileHashes, tilePath, TILE_WIDTH } from '../protocol/tiles.js';
import { openCheckpoint, verifyTlogProof, type LogPolicy, type SignedCheckpoint, type VerifiedTlogProof } from '../protocol/tlog-proof.js';
import { bytesEqual, decodeBase64, encodeBase64, utf8 } from '../protocol/tlog-input.js';
import { verifyChain, verifyDelegations } from '../protocol/chain.js';
import { BatonError, isMalformed, type Violation } from '../protocol/errors.js';
import { isRecordHash, recordHash } from '../protocol/hash.js';
import { DRS_VERSION } from '../protocol/records.js';
import { DOCUMENT_MAX_NESTING, jsonAmbiguity } from '../protocol/strict-json.js';
import type { JsonValue } from '../protocol/jcs.js';
import { listOf, LOG_CONSISTENCY, nullable, SERVICE_RECEIPT_PAGE, shapeProblem, type Shape } from './answer-shape.js';
import { BatonApiError, BatonClient, DEFAULT_TIMEOUT_MS, followCursorOnce } from './client.js';

/** What an auditor trusts about one tenant's log, as strings it can keep in a file. */
export interface LogTrust {
  /** The checkpoint origin, e.g. baton.example.com/baton/ten_4f2a. */
  readonly origin: string;
  /** The log's note verifier keys (GET /v1/log verifier_keys). */
  readonly logKeys: readonly string[];
  /** Witness cosignature verifier keys. */
  readonly witnesses?: readonly string[];
  /** How many of `witnesses` must have cosigned a checkpoint (default 0). */
  readonly requiredCosignatures?: number;
}

/**
 * The policy a LogTrust pins, its keys parsed. A trust whose keys are of the wrong type, or whose
 * witness quorum can never hold, is refused here, before any checkpoint is read (INVALID_REQUEST,
 * INVALID_VERIFIER_KEY): the mistake is the trust's, so it must not read as a fault of the log.
 */
export function logPolicy(trust: LogTrust): LogPolicy {
  const logKeys = trust.logKeys.map(parseVerifierKey);
  const witnesses = (trust.witnesses ?? []).map(parseVerifierKey);
  const required = trust.requiredCosignatures ?? 0;
  checkKeys(logKeys, witnesses, required);
  return { origin: trust.origin, logKeys, witnesses, requiredCosignatures: required };
}

function checkKeys(logKeys: readonly VerifierKey[], witnesses: readonly VerifierKey[], required: number): void {
  const fix = 'List at least as many distinct witness keys (witnesses) as requiredCosignatures, or lower requiredCosignatures.';
  if (!Number.isSafeInteger(required) || required < 0)
    throw new BatonError('INVALID_REQUEST', {
      message: `requiredCosignatures is ${String(required)}: give a whole number of witnesses, 0 or more.`,
      suggestion: fix,
    });
  const notLogKey = logKeys.find((k) => k.type !== NOTE_ED25519);
  if (notLogKey !== undefined)
    throw new BatonError('INVALID_VERIFIER_KEY', {
      message: `The log key ${notLogKey.name} is not a note signing key (type 0x01): it could never sign a checkpoint.`,
      suggestion: "List the log's note verifier keys (GET /v1/log verifier_keys).",
    });
  const notWitness = witnesses.find((w) => w.type !== COSIGNATURE_V1);
  if (notWitness !== undefined)
    throw new BatonError('INVALID_VERIFIER_KEY', {
      message: `The witness ${notWitness.name} is not a cosignature key (type 0x04): a witness's cosignatures could never count.`,
      suggestion: "List the witness's cosignature verifier key (type 0x04), not a note key.",
    });
  const logKeyBytes = new Set(logKeys.map((k) => hex(k.publicKey)));
  const alsoLog = witnesses.find((w) => logKeyBytes.has(hex(w.publicKey)));
  if (alsoLog !== undefined)
    throw new BatonError('INVALID_VERIFIER_KEY', {
      message: `The witness ${alsoLog.name} has a log key: the log could cosign its own checkpoints.`,
      suggestion: 'A witness is someone other than the log: list its own key.',
    });
  // Quorums count distinct keys (one key listed under two names cosigns once), so the message does too.
  const distinct = new Set(witnesses.map((w) => hex(w.publicKey))).size;
  if (required > distinct) {
    const listed = witnesses.length === distinct ? '' : ` (${witnesses.length} listed: a key under two names counts once)`;
    const have =
      distinct === 0
        ? 'no witness key is listed'
        : `only ${distinct} distinct witness key${distinct === 1 ? ' is' : 's are'} listed${listed}`;
    throw new BatonError('INVALID_REQUEST', {
      message: `A quorum of ${required} witness${required === 1 ? '' : 'es'} (requiredCosignatures) cannot be met: ${have}.`,
      suggestion: fix,
      details: { required, distinctWitnessKeys: distinct, witnessesListed: witnesses.length },
    });
  }
}

/** The leaf hash of a service receipt: the log entry is the service receipt's JWS. */
export function serviceReceiptLeafHash(jws: string): Hash {
  return leafHash(utf8(jws));
}

/**
 * Verifies that `jws` is the leaf at the bundle's index under its signed
 * checkpoint (log signature, origin, witness quorum, inclusion proof). Throws
 * a BatonError (NOTE_NOT_VERIFIED, COSIGNATURES_INSUFFICIENT,
 * LOG_PROOF_INVALID, MALFORMED_…) otherwise. `now` is Unix seconds.
 */
export function verifyServiceReceiptInclusion(jws: string, bundle: string, trust: LogTrust, now: number): VerifiedTlogProof {
  return verifyTlogProof(bundle, serviceReceiptLeafHash(jws), logPolicy(trust), now);
}

/**
 * The checkpoint given as newer is smaller than the one given as older: the log rolled back, or
 * the auditor was served a stale view. Both notes are signed, so the pair is the evidence.
 */
export interface RollbackFinding {
  readonly kind: 'rollback';
  readonly origin: string;
  readonly older: SignedCheckpoint;
  readonly newer: SignedCheckpoint;
  readonly reason: string;
}

export type ConsistencyFinding = SplitViewFinding | RollbackFinding;

export type ConsistencyResult =
  | { readonly consistent: true; readonly older: SignedCheckpoint; readonly newer: SignedCheckpoint }
  | { readonly consistent: false; readonly finding: ConsistencyFinding };

/**
 * Checks that checkpoint `newerNote` extends `olderNote` with a consistency proof of base64
 * hashes (from the smaller size to the larger). Both notes must open under the trust. A failure
 * of the proof, or equal sizes with different roots, is a split view; a newer checkpoint smaller
 * than the older one is a `rollback` finding, even when it is a prefix of the older (the order of
 * the arguments is what the caller saw, and a log must never shrink). A split view is reported
 * in preference to a rollback: it proves a fork. Each finding carries both notes as evidence.
 */
export function verifyCheckpointConsistency(
  olderNote: string,
  newerNote: string,
  proof: readonly string[],
  trust: LogTrust,
  now: number,
): ConsistencyResult {
  const policy = logPolicy(trust);
  const older = openCheckpoint(olderNote, policy, now);
  const newer = openCheckpoint(newerNote, policy, now);
  const hashes = proof.map((p) => decodeBase64(p) ?? new Uint8Array(0));
  const finding = findSplitView(older, newer, hashes);
  if (finding !== null) return { consistent: false, finding };
  // findSplitView joins the pair in either order; only the caller's order says which came first.
  if (newer.checkpoint.size < older.checkpoint.size) return { consistent: false, finding: rollbackFinding(older, newer) };
  return { consistent: true, older, newer };
}

/** `newer` is smaller than `older`: no proof can join them (a log never shrinks), and none is needed. */
function rollbackFinding(older: SignedCheckpoint, newer: SignedCheckpoint): RollbackFinding {
  return {
    kind: 'rollback',
    origin: older.checkpoint.origin,
    older,
    newer,
    reason: `the log shrank from ${older.checkpoint.size} to ${newer.checkpoint.size} leaves (rolled back, or a stale view)`,
  };
}

// ---------------------------------------------------------------------------
// Decisions: the chain of every decision a service receipt records, re-verified offline.

/** The service receipt kinds that record a decision over a delegation chain. */
export const DECISION_KINDS: ReadonlySet<string> = new Set(['invocation.allowed', 'invocation.denied', 'delegation.accepted']);

/** What the audit re-derives of a decision, and what it cannot. */
export const OFFLINE_LIMITS =
  'revocation, call counters and spend budgets are service state and are not re-derived offline; ' +
  'a denial is only checked for substituted records (its chain need not be stored)';

/** A decision as a verified service receipt in the log records it. */
export interface LoggedDecision {
  readonly index: number;
  readonly kind: string;
  readonly subject: string;
  /** The decision time (the service receipt's iat, service clock, Unix seconds). */
  readonly iat: number;
  readonly data: Readonly<Record<string, JsonValue>>;
}

/** A root-to-leaf chain as the service served it: each JWS beside the hash the service says it is. */
export interface ServedChain {
  readonly receipts: readonly string[];
  readonly hashes: readonly string[];
}

/** The records a decision needs, as served; null where the service could not produce them. */
export interface DecisionRecords {
  readonly chain: ServedChain | null;
  /** An allow's invocation JWS. */
  readonly invocation?: string | null;
}

export interface DecisionCheckOptions {
  /** Root DIDs the tenant trusts; without them, any root is accepted (trust is not re-derived). */
  readonly trustedRoots?: readonly string[];
  /** The service's BATON_INVOCATION_MAX_AGE (default 300 s). */
  readonly invocationMaxAgeSeconds?: number;
  /** The service's BATON_CLOCK_SKEW (default 60 s). */
  readonly clockSkewSeconds?: number;
}

export type DecisionProblemKind = 'substituted' | 'chain-invalid' | 'mismatch' | 'records-missing';

export interface DecisionProblem {
  readonly kind: DecisionProblemKind;
  readonly detail: string;
}

const stringList = (v: JsonValue | undefined): string[] | null =>
  Array.isArray(v) && v.every((x) => typeof x === 'string') ? (v as string[]) : null;

/** The hash of the chain's leaf a decision names (what to fetch its chain by), or null when it names none. */
export function decisionChainLeaf(d: LoggedDecision): string | null {
  if (d.kind === 'delegation.accepted') return d.subject;
  const chain = stringList(d.data['dr_chain']);
  return chain && chain.length > 0 ? chain[chain.length - 1]! : null;
}

/** Served JWSs that do not hash to the hash served beside them: the service swapped a record's bytes. */
function servedSubstitutions(chain: ServedChain, leaf: string): DecisionProblem[] {
  const out: DecisionProblem[] = [];
  if (chain.receipts.length !== chain.hashes.length || chain.hashes[chain.hashes.length - 1] !== leaf)
    out.push({ kind: 'substituted', detail: `the service answered the chain of ${leaf} with another chain` });
  chain.receipts.forEach((jws, i) => {
    const actual = recordHash(jws);
    if (actual !== chain.hashes[i])
      out.push({ kind: 'substituted', detail: `the record served as ${chain.hashes[i]} hashes to ${actual}` });
  });
  return out;
}

/**
 * What a chain that does not verify is found to be. A root that is only missing from the pinned
 * roots is said as such, not as the protocol's "not a trusted root here": a tenant also trusts the
 * custodial root Baton signs with for it, which auditors tend not to know to pin (an outside probe
 * read the finding as tampering).
 */
function chainInvalid(what: string, decision: { readonly violations: readonly Violation[] }): DecisionProblem {
  const roots = decision.violations.filter((v) => v.code === 'UNTRUSTED_ROOT');
  if (roots.length > 0 && roots.length === decision.violations.length) {
    return {
      kind: 'chain-invalid',
      detail:
        `${what}: its root is issued by ${String(roots[0]!.actual)}, which is not among the roots this audit pins (--root, trustedRoots). ` +
        'If the tenant trusts it (as it does its custodial root, the custodial_did that POST /v1/delegations/issue answers), pin it too; if not, the service accepted a chain from a root the tenant does not trust.',
    };
  }
  return { kind: 'chain-invalid', detail: `${what}: ${violationText(decision)}` };
}

const violationText = (v: { readonly violations: readonly Violation[] }) =>
  v.violations
    .map((x) => `${x.code} at ${x.dr_index === undefined ? '' : `dr ${x.dr_index} `}${x.field}${x.message ? ` (${x.message})` : ''}`)
    .join('; ');

function verifyOptions(d: LoggedDecision, o: DecisionCheckOptions) {
  return {
    now: d.iat,
    trustedRoots: o.trustedRoots ?? (() => true),
    ...(o.invocationMaxAgeSeconds !== undefined ? { invocationMaxAgeSeconds: o.invocationMaxAgeSeconds } : {}),
    ...(o.clockSkewSeconds !== undefined ? { clockSkewSeconds: o.clockSkewSeconds } : {}),
  };
}

function checkAllow(d: LoggedDecision, r: DecisionRecords, o: DecisionCheckOptions): DecisionProblem[] {
  const named = stringList(d.data['dr_chain']);
  if (named === null || named.length === 0) return [{ kind: 'mismatch', detail: 'the allow names no delegation chain' }];
  if (r.chain === null) return [{ kind: 'records-missing', detail: `the service cannot produce the chain of ${named[named.length - 1]}` }];
  const problems: DecisionProblem[] = [];
  if (r.chain.receipts.length !== named.length)
    problems.push({ kind: 'substituted', detail: `the service served ${r.chain.receipts.length} records for a chain of ${named.length}` });
  r.chain.receipts.forEach((jws, i) => {
    const actual = recordHash(jws);
    if (named[i] !== undefined && actual !== named[i])
      problems.push({ kind: 'substituted', detail: `the record served as ${named[i]} (dr ${i}) hashes to ${actual}` });
  });
  if (r.invocation === null || r.invocation === undefined)
    return [...problems, { kind: 'records-missing', detail: `the service cannot produce invocation ${d.subject}` }];
  if (recordHash(r.invocation) !== d.data['invocation_hash'])
    problems.push({ kind: 'substituted', detail: `the invocation served as ${d.subject} does not hash to the allow's invocation_hash` });
  // A verdict over substituted records would be about other records than the ones decided on.
  if (problems.length > 0) return problems;

  const decision = verifyChain({ bundle_version: DRS_VERSION, invocation: r.invocation, receipts: r.chain.receipts }, verifyOptions(d, o));
  if (!decision.valid) return [chainInvalid('the chain does not authorise the invocation', decision)];
  const c = decision.context;
  const differs = (what: string, signed: unknown, logged: unknown) =>
    signed === logged
      ? []
      : [{ kind: 'mismatch' as const, detail: `${what}: the invocation says ${String(signed)}, the allow ${String(logged)}` }];
  return [
    ...differs('jti', c.invocation_jti, d.subject),
    ...differs('tool', c.tool, d.data['tool'] ?? null),
    ...differs('tool_server', c.tool_server, d.data['tool_server']),
    ...differs('dr_chain', c.dr_chain.join(','), named.join(',')),
  ];
}

function checkAccepted(d: LoggedDecision, r: DecisionRecords, o: DecisionCheckOptions): DecisionProblem[] {
  if (r.chain === null) return [{ kind: 'records-missing', detail: `the service cannot produce the chain of ${d.subject}` }];
  const problems = servedSubstitutions(r.chain, d.subject);
  if (problems.length > 0) return problems;
  const hashes = r.chain.hashes;
  const expect = (what: string, logged: JsonValue | undefined, served: unknown) =>
    logged === served
      ? []
      : [{ kind: 'mismatch' as const, detail: `${what}: the service receipt says ${String(logged)}, the chain ${String(served)}` }];
  const shape: DecisionProblem[] = [
    ...expect('depth', d.data['depth'], hashes.length - 1),
    ...expect('root_hash', d.data['root_hash'], hashes[0]),
    ...expect('parent_hash', d.data['parent_hash'] ?? null, hashes[hashes.length - 2] ?? null),
  ];
  // A DR may be stored before its nbf; everything else must hold when it was accepted.
  const decision = verifyDelegations(r.chain.receipts, { ...verifyOptions(d, o), allowNotYetValid: true });
  if (!decision.valid) shape.push(chainInvalid('the accepted chain does not verify', decision));
  return shape;
}

/**
 * Re-checks one decision against the records the service serves for it
 * (pure): every record must hash to the hash the service receipt (or the service)
 * names, an allow's chain must authorise its invocation at the decision's
 * time (signatures, linkage, attenuation, time windows, arguments) and match
 * the tool and chain the allow logged, and an accepted DR's chain must
 * verify when it was accepted. A denial's chain is only checked for
 * substitution: a refused chain need not verify, or be stored at all.
 */
export function checkDecision(d: LoggedDecision, records: DecisionRecords, opts: DecisionCheckOptions = {}): DecisionProblem[] {
  switch (d.kind) {
    case 'invocation.allowed':
      return checkAllow(d, records, opts);
    case 'delegation.accepted':
      return checkAccepted(d, records, opts);
    case 'invocation.denied': {
      const leaf = decisionChainLeaf(d);
      return leaf === null || records.chain === null ? [] : servedSubstitutions(records.chain, leaf);
    }
    default:
      return [];
  }
}

// ---------------------------------------------------------------------------
// Full audit.

export type AuditFinding =
  | { readonly kind: 'missing'; readonly index: number; readonly detail: string }
  /** Entries of a bundle the service could not serve whose receipts it did not name either: nothing about them is known. */
  | { readonly kind: 'unchecked'; readonly index: number; readonly detail: string }
  | { readonly kind: 'rewritten'; readonly index: number; readonly detail: string }
  | { readonly kind: 'reordered'; readonly index: number; readonly detail: string }
  | { readonly kind: 'bad-service-receipt'; readonly index: number; readonly detail: string }
  | { readonly kind: DecisionProblemKind; readonly index: number; readonly detail: string }
  | { readonly kind: 'not-in-log'; readonly serviceReceiptId: number; readonly detail: string }
  /** Something the log served that cannot be read (a tile, a checkpoint, a verifier key): `source` names the request. */
  | { readonly kind: 'malformed'; readonly index: number; readonly source: string; readonly detail: string }
  | { readonly kind: 'malformed'; readonly source: string; readonly detail: string }
  /** A leaf logged twice: the second index holds the same service receipt as an earlier one. */
  | { readonly kind: 'duplicate'; readonly index: number; readonly detail: string }
  /** An entry of this tenant, validly signed, that GET /v1/service-receipts does not list. */
  | { readonly kind: 'not-listed'; readonly index: number; readonly detail: string }
  | { readonly kind: 'root-mismatch'; readonly detail: string }
  | { readonly kind: 'split-view'; readonly detail: string; readonly finding: SplitViewFinding }
  | { readonly kind: 'rollback'; readonly detail: string; readonly finding: RollbackFinding };

export interface AuditReport {
  readonly origin: string;
  readonly treeSize: number;
  /** The checkpoint the audit checked against, verbatim. */
  readonly checkpoint: string;
  /**
   * False when the checkpoint to audit could not be read (a `malformed` finding): nothing else was
   * audited, and `treeSize` is 0.
   */
  readonly checkpointRead: boolean;
  /** The log's latest checkpoint, verbatim, when the audit was of an earlier one (`treeSize` option). */
  readonly latestCheckpoint?: string;
  readonly entriesChecked: number;
  readonly serviceReceiptsChecked: number;
  /** Service receipts listed after the last logged one: committed after the checkpoint, or a log that stopped. */
  readonly pendingServiceReceipts: number;
  /** Decision service receipts whose records were re-checked (allows, denials, accepted DRs). */
  readonly decisionsChecked: number;
  /** Whether root trust was checked against pinned roots (trustedRoots) or left out. */
  readonly rootsPinned: boolean;
  /** What an offline audit cannot re-derive (OFFLINE_LIMITS). */
  readonly notChecked: string;
  readonly findings: readonly AuditFinding[];
  /** True when neither the log's keys (trust) nor the service's keys (serviceKeys) were pinned: both came from the service audited. */
  readonly trustedOnFirstUse: boolean;
  /**
   * Whether the service's keys were pinned (serviceKeys). False: every service receipt's signature
   * was judged against the keys GET /v1/keys of the service audited serves, even when the log's keys
   * were pinned (trust), so a service that re-keys with a key of its own passes that check.
   */
  readonly serviceKeysPinned: boolean;
  /**
   * Whether which tenant's log this is was pinned (trust's origin, or tenantId). False: it is the
   * log the service named (GET /v1/log), and every tenant's log is signed with the same service key,
   * so pinned keys alone do not tell the auditor's tenant's log from another's.
   */
  readonly originPinned: boolean;
  /**
   * Whether the log's name (the `<log name>` of its origin) was pinned too (trust). False with
   * tenantId alone: the tenant is pinned, the name is the service's, so another log of that tenant
   * signed with the same key (one kept from before the log was renamed, say) would pass as this one.
   */
  readonly logNamePinned: boolean;
  /**
   * Present when the audit could not finish: reads that failed after the checkpoints were verified
   * (a tile, an entry bundle, a proof, GET /v1/service-receipts answering 5xx, a timeout), each with
   * what it left unchecked. The findings made before are kept (a split view or rollback proven from
   * the notes stands whatever the service answers next), and `ok` is false. An audit that finds
   * nothing and cannot finish throws the first such failure instead, as it did before.
   */
  readonly incomplete?: readonly AuditReadFailure[];
  readonly ok: boolean;
}

/** A read the audit could not make after the checkpoints were verified, and what that left unchecked. */
export interface AuditReadFailure {
  /** The request, e.g. `GET /v1/log/tile/0/001`. */
  readonly source: string;
  /** The HTTP status answered; 0 when no answer came (NETWORK_ERROR, TIMEOUT). */
  readonly status: number;
  /** The error code (the service's, or the client's: NETWORK_ERROR, TIMEOUT, UNEXPECTED_RESPONSE). */
  readonly code: string;
  readonly detail: string;
  /** What the audit could not check because of it. */
  readonly notChecked: string;
}

export interface AuditOptions {
  readonly baseUrl: string;
  /** An API key with the audit scope. */
  readonly apiKey: string;
  /** Pin the log's identity; without it the keys the service serves are used (and the report says so). */
  readonly trust?: LogTrust;
  /**
   * The tenant whose log this must be (the audit key's): the log's origin must be
   * `<log name>/baton/<tenantId>`, as the service names a tenant's log. Without it or `trust`, the
   * log audited is whichever the service names (GET /v1/log), and the report says so (originPinned).
   * It pins the tenant, not the log's name (logNamePinned): pin the whole origin with `trust`.
   */
  readonly tenantId?: string;
  /** An earlier checkpoint note to check the current one against (split views, rollbacks). */
  readonly previousCheckpoint?: string;
  /**
   * Audit the log under its signed checkpoint of this size (GET /v1/log/checkpoints/{size}), not the
   * latest: e.g. the one the witnesses cosigned. The latest checkpoint is still read, opened with the
   * log's keys alone, and must extend it; the leaves after it tell which listed service receipts were
   * logged later.
   */
  readonly treeSize?: number;
  /**
   * The service's published keys, pinned (a saved GET /v1/keys, from a source you trust): service
   * receipts are checked against them, and so are the log keys the service names when `trust` is
   * not given. Without them both come from the service being audited (trust on first use).
   */
  readonly serviceKeys?: readonly ServiceVerificationKey[];
  /** Unix seconds; default the system clock. */
  readonly now?: number;
  /** How each decision is re-verified (pinned roots, the service's time limits). */
  readonly decisions?: DecisionCheckOptions;
  /** Record fetches in flight at once while checking decisions (default 8). */
  readonly concurrency?: number;
  /** Per-request bound in milliseconds, response body included (default 10 000, as BatonClient's). */
  readonly timeoutMs?: number;
  /**
   * A fetch implementation (tests, proxies); `signal` aborts the request at the timeout. Pass
   * `redirect` on: Baton never redirects, and an answer reached through one is refused anyway, but a
   * fetch that follows it has sent the audit key on to wherever it pointed.
   */
  readonly fetch?: (url: string, init: { headers: Record<string, string>; signal: AbortSignal; redirect: 'manual' }) => Promise<Response>;
  /**
   * Seconds a service receipt may wait outside the log before the audit reports it `not-in-log`
   * (default 600): the integrator logs receipts within seconds, so one older than this points at a
   * frozen log or a stale checkpoint served to the auditor.
   */
  readonly maxPendingSeconds?: number;
  /** Called after each tile of entries: done of total leaves. */
  readonly onProgress?: (done: number, total: number) => void;
}

interface Http {
  url(path: string): string;
  /** The JSON answer, refused (UNEXPECTED_RESPONSE) unless it has `shape`: the audit reads these members. */
  json(path: string, shape: Shape): Promise<unknown>;
  /** As json, but null for a 404. */
  jsonOrNull(path: string): Promise<unknown>;
  text(path: string): Promise<string>;
  bytes(path: string): Promise<Uint8Array>;
  /** As bytes, but a failed answer that `isAnswer` accepts is returned (its body parsed when JSON), not thrown. */
  bytesOrAnswer(
    path: string,
    isAnswer: (status: number, body: unknown) => boolean,
  ): Promise<{ ok: true; bytes: Uint8Array } | { ok: false; status: number; body: unknown }>;
}

const decodeText = (b: Uint8Array): string => new TextDecoder().decode(b);

/**
 * The audit's HTTP reads, through BatonClient's transport: the same key, timeout and errors as any
 * other call (NETWORK_ERROR or TIMEOUT when no answer came, the service's own code when it refused
 * or failed, UNEXPECTED_RESPONSE when the answer is not Baton's), so a caller and the CLI's exit
 * codes treat an audit like any other call.
 */
function http(o: AuditOptions): Http {
  const client = new BatonClient({
    baseUrl: o.baseUrl,
    apiKey: o.apiKey,
    timeoutMs: o.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    ...(o.fetch ? { fetch: auditFetch(o.fetch) } : {}),
  });
  const base = o.baseUrl.replace(/\/+$/, '');
  const get = async (path: string, answerStatuses?: (status: number, body: unknown) => boolean) => {
    try {
      return await client.getBytes(path, answerStatuses ? { answerStatuses } : {});
    } catch (e) {
      throw withAuditScope(e);
    }
  };
  const jsonOf = (path: string, bytes: Uint8Array, shape?: Shape): unknown => {
    const text = decodeText(bytes);
    const unexpected = (message: string) =>
      new BatonApiError({
        status: 200,
        code: 'UNEXPECTED_RESPONSE',
        method: 'GET',
        url: `${base}${path}`,
        message,
        suggestion: 'Check that the base URL points at Baton itself, not a proxy or another service.',
      });
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw unexpected(`Baton answered GET ${path} but not with JSON: ${text.slice(0, 120) || '(empty body)'}`);
    }
    // The audit distrusts the service: an answer with a repeated key could show another auditor's tool
    // (which keeps the first) other records than this one checked.
    const ambiguity = jsonAmbiguity(text, DOCUMENT_MAX_NESTING);
    if (ambiguity !== undefined) throw unexpected(`Baton's answer to GET ${path} ${ambiguity}; readers disagree on which value it holds.`);
    const problem = shape === undefined ? undefined : shapeProblem(value, shape);
    if (problem !== undefined) throw unexpected(`Baton's answer to GET ${path} is not the answer of that route: ${problem}.`);
    return value;
  };
  return {
    url: (path) => `${base}${path}`,
    json: async (path, shape) => jsonOf(path, (await get(path)).bytes, shape),
    async jsonOrNull(path) {
      // Baton's own 404 (its envelope): a proxy's page says nothing of what is stored, and is thrown.
      const a = await get(path, (status, body) => status === 404 && isBatonNotFound(body));
      return a.status === 404 ? null : jsonOf(path, a.bytes);
    },
    text: async (path) => decodeText((await get(path)).bytes),
    bytes: async (path) => (await get(path)).bytes,
    async bytesOrAnswer(path, isAnswer) {
      const a = await get(path, isAnswer);
      return a.status >= 200 && a.status < 300 ? { ok: true, bytes: a.bytes } : { ok: false, status: a.status, body: a.body };
    },
  };
}

/** The audit's narrower fetch option, as the client's. */
function auditFetch(f: NonNullable<AuditOptions['fetch']>): typeof fetch {
  return (input, init) =>
    f(String(input), {
      headers: (init?.headers ?? {}) as Record<string, string>,
      signal: init?.signal ?? new AbortController().signal,
      redirect: 'manual',
    });
}

/** A refused key: say which key the audit needs, not only that this one was refused. */
function withAuditScope(e: unknown): unknown {
  if (e instanceof BatonApiError && (e.status === 400 || e.status === 413)) {
    // The audit builds its own requests from what the log served: a refusal of one as malformed
    // is the service's (or a proxy's) doing, not the caller's input, which is checked before.
    return new BatonApiError({
      status: e.status,
      code: 'UNEXPECTED_RESPONSE',
      message: `The service refused a request the audit made itself (${e.method ?? 'GET'} ${e.url ?? ''}: HTTP ${e.status} ${e.code}: ${e.message}).`,
      suggestion: 'Check that the base URL points at Baton itself, not at a proxy that rewrites requests; then report it to the operator.',
      details: e.details,
      requestId: e.requestId,
      method: e.method,
      url: e.url,
      cause: e,
    });
  }
  if (!(e instanceof BatonApiError) || (e.status !== 401 && e.status !== 403)) return e;
  return new BatonApiError({
    status: e.status,
    code: e.code,
    message: e.message,
    suggestion: `The audit reads the tenant's log, chains and service receipts with a tenant API key that has the audit scope.${e.suggestion ? ` ${e.suggestion}` : ''}`,
    details: e.details,
    requestId: e.requestId,
    method: e.method,
    url: e.url,
    cause: e,
  });
}

/** The largest tree size the service's routes take (15 decimal digits, as WholeNumberText). */
const MAX_TREE_SIZE = 999_999_999_999_999;

const hex = (h: Uint8Array) => Buffer.from(h).toString('hex');

/**
 * An entry bundle the service cannot produce is a finding: it answers 500 with the indexes whose
 * service receipts are gone (details.missing_indexes), or 404. Any other failure (a refused key,
 * storage unavailable, a proxy's error page) says nothing about the log and is thrown; so is a
 * redirect, whatever its body says (Baton never redirects: it is another server's answer, and
 * BatonClient refuses it as UNEXPECTED_RESPONSE).
 */
function cannotProduce(status: number, body: unknown): boolean {
  if (status < 400) return false;
  const details = (body as { error?: { details?: { missing_indexes?: unknown } } } | null)?.error?.details;
  return (status === 404 && isBatonNotFound(body)) || Array.isArray(details?.missing_indexes);
}

/** Baton's own NOT_FOUND envelope, not a proxy's or gateway's 404 page (which says nothing about the log). */
function isBatonNotFound(body: unknown): boolean {
  return (body as { error?: { code?: unknown } } | null)?.error?.code === 'NOT_FOUND';
}

/**
 * The receipts the service names at the indexes of a bundle it cannot serve (details.present_entries):
 * only whole-number ids at indexes of this bundle, each index once and none it calls missing. Anything
 * else the service says there is ignored, and those indexes are reported as not checked.
 */
function presentEntries(
  served: unknown,
  inTile: (i: unknown) => i is number,
  missing: ReadonlySet<number>,
): { index: number; id: number }[] {
  if (!Array.isArray(served)) return [];
  const out = new Map<number, number>();
  for (const e of served as { index?: unknown; service_receipt_id?: unknown }[]) {
    const id = e?.service_receipt_id;
    if (!inTile(e?.index) || missing.has(e.index) || out.has(e.index) || !Number.isSafeInteger(id) || (id as number) < 1) continue;
    out.set(e.index, id as number);
  }
  return [...out].map(([index, id]) => ({ index, id }));
}

function servedChain(h: Http, path: string, body: unknown): ServedChain {
  const b = (body ?? {}) as { receipts?: unknown; records?: { hash?: unknown }[] };
  const receipts = Array.isArray(b.receipts) && b.receipts.every((r) => typeof r === 'string') ? (b.receipts as string[]) : null;
  const hashes = Array.isArray(b.records) ? b.records.map((r) => r?.hash) : null;
  if (receipts === null || hashes === null || !hashes.every((x) => typeof x === 'string'))
    throw new BatonApiError({
      status: 200,
      code: 'UNEXPECTED_RESPONSE',
      method: 'GET',
      url: h.url(path),
      message: `GET ${path} did not answer a chain ({receipts, records}).`,
    });
  return { receipts, hashes: hashes as string[] };
}

/** What the audit reads of GET /v1/log and GET /v1/keys (and no more: each is checked for these). */
const LOG_NAMES: Shape = { origin: 'string', verifier_keys: listOf('string') };
const KEYS_READ: Shape = { keys: listOf({ kid: 'string', public_key: 'string' }) };

/**
 * Seconds within which a service receipt may commit after a later one was logged: its transaction
 * (a verify's ends within BATON_VERIFY_DEADLINE_MS, 5 s by default), then the next integration
 * round (BATON_TLOG_INTERVAL_MS, at most 60 s), with a margin.
 */
const LATE_COMMIT_SECONDS = 120;

/** Seconds a service receipt's iat may lie ahead of the auditor's clock at least (more if decisions.clockSkewSeconds says). */
const RECEIPT_CLOCK_SKEW_SECONDS = 60;

/** The leaf indexes of one entry bundle, in order. */
const indexesOf = (first: number, width: number): number[] => Array.from({ length: width }, (_, k) => first + k);

/**
 * The findings of an entry bundle the service refused to serve. It names the indexes whose receipts
 * are gone (details.missing_indexes) or too long for a bundle (details.oversized_indexes), and the
 * receipt at each index still there (details.present_entries): each of those is read on its own from
 * the listing and handed to `checkEntry` at its index, so one entry gone does not hide what the
 * others hold. Whatever nothing names is `unchecked`; the refusal itself is always a finding.
 */
async function checkUnservedBundle(
  h: Http,
  bundle: { status: number; body: unknown },
  { index, first, width }: { index: number; first: number; width: number },
  checkEntry: (at: number, entry: Uint8Array) => void,
  concurrency: number,
): Promise<AuditFinding[]> {
  const findings: AuditFinding[] = [];
  const details = (
    bundle.body as { error?: { details?: { missing_indexes?: unknown; oversized_indexes?: unknown; present_entries?: unknown } } } | null
  )?.error?.details;
  const inTile = (i: unknown): i is number => Number.isSafeInteger(i) && (i as number) >= first && (i as number) < first + width;
  const named = Array.isArray(details?.missing_indexes) ? details.missing_indexes.filter(inTile) : [];
  const present = presentEntries(details?.present_entries, inTile, new Set(named));
  // The service names what is gone, what is there, or neither (a 404, an older service): then all is missing.
  const missing = named.length > 0 || present.length > 0 ? named : indexesOf(first, width);
  for (const i of missing)
    findings.push({
      kind: 'missing',
      index: i,
      detail: `the service cannot produce the service receipt of entry ${i} (HTTP ${bundle.status})`,
    });
  const checked = new Set<number>(missing);
  await inPool(present, concurrency, async ({ index: at, id }) => {
    // Read member by member below: a page not as listed is a finding here, not the end of the audit.
    const page = (await h.json(`/v1/service-receipts?after=${id - 1}&limit=1`, nullable('object'))) as {
      service_receipts?: { id?: unknown; jws?: unknown }[];
    } | null;
    const listed = page?.service_receipts?.[0];
    checked.add(at);
    if (listed?.id !== id || typeof listed.jws !== 'string')
      findings.push({ kind: 'missing', index: at, detail: `the service names service receipt ${id} at entry ${at} but does not list it` });
    else checkEntry(at, utf8(listed.jws));
  });
  // A bundle no tlog-tiles client can read is a finding even when every entry checks out one by one.
  const oversized = Array.isArray(details?.oversized_indexes) ? details.oversized_indexes.filter(inTile) : [];
  for (const i of oversized)
    findings.push({ kind: 'missing', index: i, detail: `entry ${i} is over 65,535 bytes, more than an entry bundle can carry` });
  if (missing.length === 0 && oversized.length === 0)
    findings.push({
      kind: 'missing',
      index: first,
      detail: `the service refused entry bundle ${index} (HTTP ${bundle.status}) but names no entry missing or too long`,
    });
  const unchecked = indexesOf(first, width).filter((i) => !checked.has(i));
  if (unchecked.length > 0)
    findings.push({
      kind: 'unchecked',
      index: unchecked[0]!,
      detail: `${unchecked.length} entries of entry bundle ${index} were not checked (${unchecked.length <= 8 ? unchecked.join(', ') : `${unchecked[0]} to ${unchecked.at(-1)}`}): the service serves no bundle and names no receipt for them`,
    });
  return findings;
}

/** Chains fetched once per leaf (most decisions share a few chains); the memo is bounded. */
const CHAIN_MEMO = 10_000;

/** Fetches the records a decision names from the service (with the auditor's key). */
function decisionRecordsFrom(h: Http): (d: LoggedDecision) => Promise<DecisionRecords> {
  const chains = new Map<string, Promise<ServedChain | null>>();
  const chainOf = (leaf: string): Promise<ServedChain | null> => {
    const known = chains.get(leaf);
    if (known) return known;
    if (chains.size >= CHAIN_MEMO) chains.clear();
    const path = `/v1/delegations/${encodeURIComponent(leaf)}/chain`;
    const fetched = h.jsonOrNull(path).then((body) => (body === null ? null : servedChain(h, path, body)));
    chains.set(leaf, fetched);
    return fetched;
  };
  return async (d) => {
    const leaf = decisionChainLeaf(d);
    // A denial may name anything as its chain; only a well-formed hash can be asked for.
    const chain = leaf !== null && isRecordHash(leaf) ? await chainOf(leaf) : null;
    if (d.kind !== 'invocation.allowed') return { chain };
    const inv = (await h.jsonOrNull(`/v1/invocations/${encodeURIComponent(d.subject)}`)) as { jws?: unknown } | null;
    return { chain, invocation: typeof inv?.jws === 'string' ? inv.jws : null };
  };
}

/** fn over items, at most `limit` at once, results in order. */
async function inPool<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/**
 * The log's verifier keys as the service names them, when the caller pinned none: each must be one
 * of the service's keys (`serviceKeys` pinned, else GET /v1/keys), or a checkpoint signed by a key
 * the service does not publish would pass.
 */
function publishedLogKeys(verifierKeys: readonly string[], published: readonly ServiceVerificationKey[]): string[] {
  const publishedKeys = new Set(published.map((k) => hex(k.publicKey)));
  for (const vkey of verifierKeys) {
    if (!publishedKeys.has(hex(parseVerifierKey(vkey).publicKey)))
      throw new BatonError('NOTE_NOT_VERIFIED', {
        message: `The log names a verifier key that is not one of the service's published keys (pinned, or GET /v1/keys): ${vkey}.`,
        suggestion:
          "Pin the log's keys (trust; baton audit --trust) or the service's (serviceKeys; --keys) from a source you trust, and ask the operator why the service names another.",
      });
  }
  return [...verifierKeys];
}

/** A service receipt payload that records a decision, in the shape checkDecision takes; null for any other kind. */
function asDecision(index: number, payload: Record<string, JsonValue>): LoggedDecision | null {
  const { baton_receipt: kind, subject, iat, data } = payload;
  if (typeof kind !== 'string' || !DECISION_KINDS.has(kind)) return null;
  if (typeof subject !== 'string' || typeof iat !== 'number' || data === null || typeof data !== 'object' || Array.isArray(data))
    return { index, kind, subject: String(subject), iat: Number(iat), data: {} };
  return { index, kind, subject, iat, data };
}

/**
 * openCheckpoint for the audit. A refusal names the note (the log's current checkpoint, or the
 * earlier one given) and the keys it was checked against and, when the note names another log than
 * those keys are for, says it is likely another tenant's: each tenant's log has its own name and
 * key, so a note of another tenant fails as "No trusted key signed the note".
 */
function openAudited(
  note: string,
  which: 'current' | 'previous',
  trust: LogTrust,
  policy: LogPolicy,
  pinned: boolean,
  now: number,
  path = '/v1/log/checkpoint',
): SignedCheckpoint {
  try {
    return openCheckpoint(note, policy, now);
  } catch (e) {
    if (!(e instanceof BatonError)) throw e;
    const what =
      which === 'current'
        ? `The log's ${path === '/v1/log/checkpoint' ? 'current checkpoint' : `checkpoint of size ${path.slice(path.lastIndexOf('/') + 1)}`} (GET ${path})`
        : 'The earlier checkpoint given to compare with (previousCheckpoint; baton audit --previous)';
    const keys = pinned ? 'the pinned log keys (trust; baton audit --trust)' : 'the log keys the service serves (GET /v1/log)';
    const against =
      e.code === 'NOTE_NOT_VERIFIED' || e.code === 'COSIGNATURES_INSUFFICIENT' ? ` Checked against ${keys}, of ${trust.origin}.` : '';
    throw new BatonError(e.code, {
      message: `${what} is refused: ${e.message}${against}`,
      suggestion: (e.code === 'NOTE_NOT_VERIFIED' ? otherLogHint(note, which, trust.origin, pinned) : undefined) ?? e.suggestion,
      details: { ...e.details, checkpoint: which },
    });
  }
}

/** When a note that did not verify names another log than the audited one (unverified, so only a hint). */
function otherLogHint(note: string, which: 'current' | 'previous', origin: string, pinned: boolean): string | undefined {
  const named = (note.split('\n', 1)[0] ?? '').slice(0, 200);
  // Unpinned, the keys are the ones the service names for its current log: no other tenant to suspect.
  if (named === '' || named === origin || (which === 'current' && !pinned)) return undefined;
  return which === 'current'
    ? `The service serves this API key's tenant the log ${named}, and the pinned keys are for ${origin}: another tenant's log (each has its own name and key), or another service's. Pin the keys of ${named} (its GET /v1/log), or audit ${origin} with an audit key of its own tenant.`
    : `That note names the log ${named}, not ${origin}: likely a checkpoint of another tenant's log (each has its own name and key), or of another service. Give a checkpoint saved from the log audited (baton audit --save-checkpoint, with the same API key).`;
}

/**
 * A level-0 tile as the log serves it: its hashes, or why they cannot be read (the log's fault, a
 * finding). A 404 is one too: the audit asks only for tiles a checkpoint the log signed commits to,
 * so a log that says it has none of them cannot produce what it signed (as an entry bundle's 404 is
 * `missing`). Any other failure says nothing about the log and is thrown.
 */
async function readLeafTile(
  h: Http,
  tile: { level: number; index: number; width: number },
): Promise<{ hashes: Hash[] | null; problem?: string; what?: string }> {
  // Baton's own 404 (its envelope), not a proxy's page: that says nothing about the log, and is thrown.
  const answer = await h.bytesOrAnswer(`/v1/log/${tilePath(tile)}`, (status, body) => status === 404 && isBatonNotFound(body));
  if (!answer.ok) {
    const error = (answer.body as { error?: { code?: unknown } } | null)?.error;
    const code = typeof error?.code === 'string' ? ` ${error.code}` : '';
    return { hashes: null, problem: `HTTP ${answer.status}${code}`, what: 'does not serve a level-0 tile that its checkpoint commits to' };
  }
  const bytes = answer.bytes;
  try {
    return { hashes: tileHashes(tile, bytes) };
  } catch (e) {
    if (!(e instanceof BatonError) || !isMalformed(e.code)) throw e;
    return {
      hashes: null,
      problem: `${e.code}: ${e.message} It has ${bytes.length} bytes.`,
      what: 'served a level-0 tile that cannot be read',
    };
  }
}

/**
 * How Baton itself refuses a consistency proof (GET /v1/log/consistency, src/service/log.handlers.ts)
 * that the audit asks for: a log smaller than `to` (404 NOT_FOUND, saying its size in
 * details.tree_size), or MALFORMED_LOG_PROOF from the proof's own check. Each in its error envelope.
 * Not 400 INVALID_REQUEST: the audit always asks `1 <= from < to`, so that answer only comes when
 * something in the path changed the query (dropped it, or added a parameter): a failed read.
 */
const PROOF_REFUSALS: readonly { readonly status: number; readonly code: string }[] = [
  { status: 400, code: 'MALFORMED_LOG_PROOF' },
  { status: 404, code: 'NOT_FOUND' },
];

/**
 * Whether an error is the log refusing the consistency proof up to `to` leaves between two
 * checkpoints it signed. Only Baton's own refusal counts, its envelope carrying one of the codes it
 * refuses a proof with (PROOF_REFUSALS), and a 404 only as the route words it: a size below `to`
 * (details.tree_size), so the log contradicts its own note of `to` leaves. A proxy's or gateway's
 * 404, 400 or 422 page, a misrouted path or mangled query (400 INVALID_REQUEST), a busy proxy
 * (408, 429), a key refused (401, 403) or a failure (5xx) proves nothing about the log: that is a
 * failed read, as a 503 is. Anyone in the path can still forge this answer: the audit lets the
 * tiles overrule it whenever they rebuild the larger root.
 */
export function logRefusedProof(e: unknown, to: number): boolean {
  if (!(e instanceof BatonApiError)) return false;
  const answered = answerOf(e);
  if (!PROOF_REFUSALS.some((r) => r.status === answered.status && r.code === answered.code)) return false;
  if (answered.code !== 'NOT_FOUND') return true;
  const size = answered.details?.['tree_size'];
  return typeof size === 'number' && Number.isSafeInteger(size) && size >= 0 && size < to;
}

/**
 * The service's answer behind an error: withAuditScope wraps a 400 as UNEXPECTED_RESPONSE, the answer
 * itself its cause. An answer with no envelope is UNEXPECTED_RESPONSE from the start, a code no
 * refusal carries.
 */
const answerOf = (e: BatonApiError): BatonApiError => (e.cause instanceof BatonApiError ? e.cause : e);

/** What the log answered when asked for the consistency proof between two checkpoints of a pair. */
type ProofAnswer =
  | { readonly kind: 'verified' }
  /** The proof served does not join them (or is not even well-formed): anyone in the path can forge this. */
  | { readonly kind: 'not-verified'; readonly reason: string }
  /** The log's own refusal (logRefusedProof), its answer as text. */
  | { readonly kind: 'refused'; readonly answer: string }
  /** Not asked (equal sizes, size 0, a pair judged from the tiles alone), or the read failed (recorded as such). */
  | { readonly kind: 'none' };

/**
 * Two checkpoints the log signed, to be judged. `older` and `newer` are as the auditor came by them
 * (a --previous, then what the log serves): a newer one smaller than the older is a rollback unless
 * shown a stale view. `ordered` false: no order is implied (an audited earlier checkpoint and a
 * --previous may come in either), so only a fork is looked for.
 */
interface CheckpointPair {
  readonly older: SignedCheckpoint;
  readonly newer: SignedCheckpoint;
  readonly ordered: boolean;
  proof: ProofAnswer;
}

/** A tree whose leaves the log served and which rebuild the root of `note`, a checkpoint it signed. */
interface RebuiltTree {
  readonly note: SignedCheckpoint;
  readonly leaves: readonly Hash[];
}

const bySize = (a: SignedCheckpoint, b: SignedCheckpoint): [SignedCheckpoint, SignedCheckpoint] =>
  a.checkpoint.size <= b.checkpoint.size ? [a, b] : [b, a];

/**
 * Asks the log for the proof joining a pair of different sizes (the smaller above 0). A failed read
 * is thrown, for the caller to record; the log's own refusal and a proof that does not verify are
 * answers, judged later with the tiles.
 */
async function askProof(h: Http, pair: CheckpointPair): Promise<ProofAnswer> {
  const [smaller, larger] = bySize(pair.older, pair.newer);
  const [from, to] = [smaller.checkpoint.size, larger.checkpoint.size];
  let proof: Hash[];
  try {
    const served = (await h.json(`/v1/log/consistency?from=${from}&to=${to}`, LOG_CONSISTENCY)) as { proof: string[] };
    proof = served.proof.map((p) => decodeBase64(p) ?? new Uint8Array(0));
  } catch (e) {
    if (!logRefusedProof(e, to)) throw e;
    const answered = answerOf(e as BatonApiError);
    return { kind: 'refused', answer: `HTTP ${answered.status} ${answered.code}: ${answered.message}` };
  }
  const finding = findSplitView(smaller, larger, proof);
  return finding === null
    ? { kind: 'verified' }
    : { kind: 'not-verified', reason: finding.kind === 'not-consistent' ? finding.reason : finding.kind };
}

/**
 * The findings of a pair that need no read: equal sizes with different roots, or a size-0
 * checkpoint without the empty-tree root. Two notes the log signed are the whole proof, so they are
 * made before anything is read, and no answer of the service can take them away.
 */
function noteFindings(pair: CheckpointPair): AuditFinding[] {
  const [smaller, larger] = bySize(pair.older, pair.newer);
  if (smaller.checkpoint.size !== larger.checkpoint.size && smaller.checkpoint.size > 0) return [];
  const finding = findSplitView(smaller, larger, []);
  if (finding === null) return [];
  return [
    {
      kind: 'split-view',
      detail: `checkpoints of sizes ${smaller.checkpoint.size} and ${larger.checkpoint.size} do not agree (${finding.kind}): the two signed notes are the proof`,
      finding,
    },
  ];
}

/**
 * The verdict on a pair of different sizes, once the tiles were read. Evidence that anyone in the
 * path could not forge outranks a proof answer, which they could: when the leaves of the larger
 * checkpoint's tree were read and rebuild its root, they decide (the smaller's root must be that of
 * their prefix, else a split view), and a proof answer that said otherwise is `malformed`, not a
 * fork. Only without such leaves does a proof answer decide: the log's refusal, or a proof that does
 * not verify, is a split view. A newer checkpoint smaller than the older one (`ordered`) is a
 * rollback, unless the proof or the tiles show it is a prefix of the older: a stale view served in
 * front of an honest log (a cache ignoring no-cache), returned as `stale` for the caller to report
 * as a failed read.
 */
function judgePair(
  pair: CheckpointPair,
  trees: readonly RebuiltTree[],
  found: readonly AuditFinding[],
): { findings: AuditFinding[]; stale?: string } {
  const [smaller, larger] = bySize(pair.older, pair.newer);
  const [from, to] = [smaller.checkpoint.size, larger.checkpoint.size];
  const rollback = pair.ordered && pair.newer.checkpoint.size < pair.older.checkpoint.size;
  const staleText = `the log served its checkpoint of ${from} leaves after the one of ${to} leaves, which extends it`;
  const tree = trees.find((t) => sameCheckpoint(t.note, larger));
  if (tree !== undefined) {
    const forks = prefixDisagrees(smaller, tree.leaves, larger, found);
    if (forks.length > 0 || splitViewFound(found, smaller, larger)) return { findings: forks };
    const findings: AuditFinding[] = [];
    const source = `GET /v1/log/consistency?from=${from}&to=${to}`;
    // Two pairs of one size each (the one audited and a --previous of its size) ask the same proof: said once.
    const said = found.some((f) => f.kind === 'malformed' && f.source === source);
    if ((pair.proof.kind === 'refused' || pair.proof.kind === 'not-verified') && !said)
      findings.push({
        kind: 'malformed',
        source,
        detail: `the consistency proof answer ${pair.proof.kind === 'refused' ? `refuses to join the checkpoints of ${from} and ${to} leaves (${pair.proof.answer})` : `does not join the checkpoints of ${from} and ${to} leaves (${pair.proof.reason})`}, yet the log's tiles rebuild the root of ${to} leaves and hold the one of ${from} as their prefix: not a split view, but an answer the log (or something in front of it) should not give`,
      });
    return rollback ? { findings, stale: `${staleText} (its tiles show it)` } : { findings };
  }
  if (splitViewFound(found, smaller, larger)) return { findings: [] };
  const proof = pair.proof;
  if (rollback) {
    if (proof.kind === 'verified') return { findings: [], stale: `${staleText} (the consistency proof shows it)` };
    const finding = rollbackFinding(pair.older, pair.newer);
    const why =
      proof.kind === 'refused'
        ? `; the log would not prove the smaller a prefix of the larger (${proof.answer})`
        : proof.kind === 'not-verified'
          ? `; the consistency proof served does not show the smaller a prefix of the larger (${proof.reason})`
          : from > 0
            ? '; the consistency proof could not be read, so a stale view in front of the log is not ruled out'
            : '';
    return { findings: [{ kind: 'rollback', detail: `${finding.reason}${why}`, finding }] };
  }
  if (proof.kind !== 'refused' && proof.kind !== 'not-verified') return { findings: [] };
  const finding: SplitViewFinding = {
    kind: 'not-consistent',
    origin: larger.checkpoint.origin,
    older: smaller,
    newer: larger,
    reason: proof.kind === 'refused' ? 'the log refused the consistency proof' : proof.reason,
  };
  const detail =
    proof.kind === 'refused'
      ? `the log would not prove its checkpoints of sizes ${from} and ${to} consistent (${proof.answer}); keep both notes`
      : `checkpoints of sizes ${from} and ${to} do not agree (${finding.kind}: ${proof.reason}); the tiles of the larger could not be used to judge them`;
  return { findings: [{ kind: 'split-view', detail, finding }] };
}

/** Two checkpoints are one when they have the same size and root (a cosignature more changes neither). */
const sameCheckpoint = (a: SignedCheckpoint, b: SignedCheckpoint): boolean =>
  a.checkpoint.size === b.checkpoint.size && bytesEqual(a.checkpoint.rootHash, b.checkpoint.rootHash);

/** Whether a split view between `a` and `b` (either order) is among the findings already made. */
function splitViewFound(found: readonly AuditFinding[], a: SignedCheckpoint, b: SignedCheckpoint): boolean {
  return found.some((f) => {
    if (f.kind !== 'split-view') return false;
    const [x, y] = f.finding.kind === 'same-size-different-roots' ? f.finding.checkpoints : [f.finding.older, f.finding.newer];
    return (sameCheckpoint(x, a) && sameCheckpoint(y, b)) || (sameCheckpoint(x, b) && sameCheckpoint(y, a));
  });
}

/**
 * A split view between `previous` (an earlier checkpoint the log signed) and `served`, found from the
 * leaves of `served`'s tree, which the caller has checked rebuild its root: the root of their first
 * `previous.size` must be `previous`'s. None when this pair's split view was found already (by the
 * consistency proof: each pair is judged on its own, so one fork found never hides another), or
 * `previous` is not within the leaves. Both notes are signed and the leaves are `served`'s own, so
 * an honest log (however flaky what is in front of it) is never reported here.
 */
function prefixDisagrees(
  previous: SignedCheckpoint | undefined,
  leaves: readonly Hash[],
  served: SignedCheckpoint,
  found: readonly AuditFinding[],
): AuditFinding[] {
  if (previous === undefined || previous.checkpoint.size > leaves.length || splitViewFound(found, previous, served)) return [];
  const prefix = rootOf(leaves.slice(0, previous.checkpoint.size));
  if (bytesEqual(prefix, previous.checkpoint.rootHash)) return [];
  const [from, to] = [previous.checkpoint.size, served.checkpoint.size];
  const finding: SplitViewFinding =
    from === to
      ? { kind: 'same-size-different-roots', origin: served.checkpoint.origin, size: to, checkpoints: [previous, served] }
      : {
          kind: 'not-consistent',
          origin: served.checkpoint.origin,
          older: previous,
          newer: served,
          reason: `the first ${from} leaves of the tree served hash to ${encodeBase64(prefix)}, not the earlier checkpoint's root`,
        };
  return [
    {
      kind: 'split-view',
      detail: `checkpoints of sizes ${from} and ${to} do not agree (${finding.kind}): the tiles of the larger do not hold the smaller`,
      finding,
    },
  ];
}

/** How much of the log's origin the auditor pinned: the report's originPinned and logNamePinned. */
const pinnedOrigin = (o: AuditOptions): { originPinned: boolean; logNamePinned: boolean } => ({
  originPinned: o.trust !== undefined || o.tenantId !== undefined,
  logNamePinned: o.trust !== undefined,
});

/** Which keys the auditor pinned: the report's trustedOnFirstUse and serviceKeysPinned. */
const pinnedKeys = (o: AuditOptions): { trustedOnFirstUse: boolean; serviceKeysPinned: boolean } => ({
  trustedOnFirstUse: o.trust === undefined && o.serviceKeys === undefined,
  serviceKeysPinned: o.serviceKeys !== undefined,
});

/** A read that failed (a BatonApiError), as the report names it: the request, its answer, and what it left unchecked. */
function readFailure(base: string, e: BatonApiError, notChecked: string): AuditReadFailure {
  const url = e.url ?? '';
  const path = base !== '' && url.startsWith(base) ? url.slice(base.length) : url;
  return { source: `${e.method ?? 'GET'} ${path}`, status: e.status, code: String(e.code), detail: e.message, notChecked };
}

/** The tenant a log origin names: its last part after `/baton/` (`<log name>/baton/<tenant>`, as the service forms it). */
function originTenant(origin: string): string | undefined {
  const at = origin.lastIndexOf('/baton/');
  return at > 0 ? origin.slice(at + '/baton/'.length) : undefined;
}

/**
 * Refuses a log that is not `tenantId`'s. Every tenant's log is signed with the same service key, so
 * keys pinned without an origin would accept another tenant's log the service passes off as this
 * one; its origin names the tenant, and the checkpoints are opened under that origin.
 */
function requireTenantLog(origin: string, tenantId: string, from: 'trust' | 'service'): void {
  if (originTenant(origin) === tenantId) return;
  if (from === 'trust')
    throw new BatonError('INVALID_REQUEST', {
      message: `The pinned log ${origin} (trust) is not the log of tenant ${tenantId} (tenantId): a tenant's log is <log name>/baton/${tenantId}.`,
      suggestion: "Pin the tenant's own log (its GET /v1/log, with an audit key of that tenant), or give the tenant that log is of.",
    });
  throw new BatonError('NOTE_NOT_VERIFIED', {
    message: `The service names the log ${origin} (GET /v1/log), not the log of tenant ${tenantId}, which must be <log name>/baton/${tenantId}: another tenant's log, or another service's.`,
    suggestion: `Check the audit key is of tenant ${tenantId}; if it is, the service served another log than this key's, so keep this output as evidence.`,
    details: { origin, tenant: tenantId },
  });
}

/** The report of an audit that could not read the checkpoint to audit: one finding, nothing audited. */
function emptyReport(origin: string, note: string, o: AuditOptions, finding: AuditFinding): AuditReport {
  return {
    origin,
    treeSize: 0,
    checkpoint: note,
    checkpointRead: false,
    entriesChecked: 0,
    serviceReceiptsChecked: 0,
    pendingServiceReceipts: 0,
    decisionsChecked: 0,
    rootsPinned: o.decisions?.trustedRoots !== undefined,
    notChecked: OFFLINE_LIMITS,
    findings: [finding],
    ...pinnedKeys(o),
    ...pinnedOrigin(o),
    ok: false,
  };
}

/**
 * Replays a tenant's log (see the module comment). Findings never throw, and what the log serves
 * that cannot be read (a tile, a checkpoint, an unpinned verifier key) is a `malformed` finding;
 * a checkpoint that does not verify throws (a BatonError), as does a caller's own input that cannot
 * be read (trust, previousCheckpoint, treeSize), and so does a service
 * that cannot be read before the checkpoints are verified (a BatonApiError, as BatonClient throws:
 * NETWORK_ERROR, TIMEOUT, the service's refusal such as UNAUTHORIZED or FORBIDDEN, or
 * UNEXPECTED_RESPONSE): there is nothing to audit against. A read that fails after that (a proof,
 * a tile, an entry bundle, a chain, GET /v1/service-receipts) ends the audit with the findings made
 * so far kept: the report is returned with `incomplete` naming what could not be read and what it
 * left unchecked, `ok` false. Only when nothing was found is that failure thrown instead.
 */
export async function auditLog(o: AuditOptions): Promise<AuditReport> {
  const now = o.now ?? Math.floor(Date.now() / 1000);
  if (o.treeSize !== undefined && (!Number.isSafeInteger(o.treeSize) || o.treeSize < 1 || o.treeSize > MAX_TREE_SIZE))
    throw new BatonError('INVALID_REQUEST', {
      message: `treeSize is ${String(o.treeSize)}: give the size of a checkpoint the log signed, a whole number from 1 to ${MAX_TREE_SIZE}.`,
      suggestion: 'Omit treeSize to audit the latest checkpoint.',
    });
  if (o.tenantId === '')
    throw new BatonError('INVALID_REQUEST', {
      message: 'tenantId is empty: give the id of the tenant whose log this must be (ten_...), or leave it out.',
      suggestion: "Pass the audit key's tenant id, or pin the whole log with trust.",
    });
  if (o.tenantId !== undefined && o.trust !== undefined) requireTenantLog(o.trust.origin, o.tenantId, 'trust');
  const h = http(o);
  const info = (await h.json('/v1/log', LOG_NAMES)) as { origin: string; verifier_keys: string[] };
  if (o.tenantId !== undefined && o.trust === undefined) requireTenantLog(info.origin, o.tenantId, 'service');
  const pinned = o.trust !== undefined;
  /** Nothing more can be audited: the report of what the log served that could not be read. */
  const unreadable = (origin: string, note: string, source: string, what: string, e: BatonError): AuditReport =>
    emptyReport(origin, note, o, {
      kind: 'malformed',
      source,
      detail: `the log served ${what} that cannot be read (${e.code}: ${e.message}); nothing else was audited`,
    });
  let keys: readonly ServiceVerificationKey[];
  if (o.serviceKeys !== undefined) keys = o.serviceKeys;
  else {
    const served = ((await h.json('/v1/keys', KEYS_READ)) as { keys: { kid: string; public_key: string }[] }).keys;
    try {
      keys = served.map((k): ServiceVerificationKey => ({ kid: k.kid, publicKey: decodeBase64url(k.public_key, 'service public key') }));
    } catch (e) {
      if (!(e instanceof BatonError) || !isMalformed(e.code)) throw e;
      return unreadable(info.origin, '', 'GET /v1/keys', 'a service key', e);
    }
  }
  let trust: LogTrust;
  let policy: LogPolicy;
  if (o.trust !== undefined) {
    // The caller's own trust: a mistake in it is theirs (thrown), not the log's.
    trust = o.trust;
    policy = logPolicy(trust);
  } else {
    try {
      trust = { origin: info.origin, logKeys: publishedLogKeys(info.verifier_keys, keys) };
      policy = logPolicy(trust);
    } catch (e) {
      if (!(e instanceof BatonError) || !isMalformed(e.code)) throw e;
      return unreadable(info.origin, '', 'GET /v1/log', 'a verifier key', e);
    }
  }
  // What the log serves is the log's: a checkpoint that cannot be read is a finding, not the caller's bad input.
  const latestNote = await h.text('/v1/log/checkpoint');
  const auditedPath = o.treeSize === undefined ? '/v1/log/checkpoint' : `/v1/log/checkpoints/${o.treeSize}`;
  const note = o.treeSize === undefined ? latestNote : await h.text(auditedPath);
  let current: SignedCheckpoint;
  try {
    current = openAudited(note, 'current', trust, policy, pinned, now, auditedPath);
  } catch (e) {
    if (!(e instanceof BatonError) || !isMalformed(e.code)) throw e;
    return unreadable(trust.origin, note, `GET ${auditedPath}`, 'a checkpoint', e);
  }
  const size = current.checkpoint.size;
  const findings: AuditFinding[] = [];
  if (o.treeSize !== undefined && size !== o.treeSize)
    return emptyReport(trust.origin, note, o, {
      kind: 'malformed',
      source: `GET ${auditedPath}`,
      detail: `asked for the checkpoint of size ${o.treeSize}, the log served one of size ${size}; nothing else was audited`,
    });
  // Auditing an earlier checkpoint, the latest must extend it: opened with the log's keys alone (the
  // witnesses may not have cosigned it yet). undefined when the latest could not be read.
  let latest: SignedCheckpoint | undefined = current;
  if (o.treeSize !== undefined) {
    try {
      latest = openAudited(latestNote, 'current', trust, { ...policy, requiredCosignatures: 0 }, pinned, now);
    } catch (e) {
      if (!(e instanceof BatonError) || !isMalformed(e.code)) throw e;
      latest = undefined;
      findings.push({
        kind: 'malformed',
        source: 'GET /v1/log/checkpoint',
        detail: `the log served a latest checkpoint that cannot be read (${e.code}: ${e.message}): not checked to extend the one audited, and service receipts outside the one audited are not judged`,
      });
    }
  }
  // Opened with the log's keys alone, as the latest is above: it is a checkpoint the log signed and
  // this auditor kept (with --tree-size, the latest, which the witnesses may not have cosigned yet),
  // and the log's own signature on both notes is what makes a fork between them evidence. The
  // witness quorum vouches for the checkpoint audited now, not for the baseline. Opened before any
  // proof is read: it is the caller's input, and a refusal of it must not wait on the service.
  const previous =
    o.previousCheckpoint === undefined
      ? undefined
      : openAudited(o.previousCheckpoint, 'previous', trust, { ...policy, requiredCosignatures: 0 }, pinned, now);

  // From here on every check starts from notes already verified. A read that fails now (a tile, an
  // entry bundle, a proof, the listing answering 5xx, a timeout) must not take the findings already
  // made with it: a log that forks could otherwise turn every audit that would expose it into
  // "server failing". Each failure is recorded with what it left unchecked, and the report is
  // returned incomplete (or, with nothing found, the failure is thrown as before).
  const failures: { error: BatonApiError; failure: AuditReadFailure }[] = [];
  const failed = (e: unknown, notChecked: string): void => {
    if (!(e instanceof BatonApiError)) throw e;
    failures.push({ error: e, failure: readFailure(h.url(''), e, notChecked) });
  };
  // The pairs of checkpoints the log signed that must agree, each judged on its own so one fork found
  // never hides another: the one audited and the latest; a --previous and the latest (the log's view
  // now: an earlier one audited may well be smaller than the previous; without the latest, only one
  // audited at least as large says anything); and, auditing an earlier checkpoint, the --previous
  // and the one audited, in no particular order (only a fork is looked for there).
  const pairs: CheckpointPair[] = [];
  const pairNotChecked = new Map<CheckpointPair, string>();
  if (o.treeSize !== undefined && latest !== undefined) {
    const pair: CheckpointPair = { older: current, newer: latest, ordered: true, proof: { kind: 'none' } };
    pairs.push(pair);
    pairNotChecked.set(pair, `whether the latest checkpoint (${latest.checkpoint.size} leaves) extends the one audited (${size} leaves)`);
  }
  if (previous !== undefined && (latest !== undefined || previous.checkpoint.size <= size)) {
    const served = latest ?? current;
    const pair: CheckpointPair = { older: previous, newer: served, ordered: true, proof: { kind: 'none' } };
    pairs.push(pair);
    pairNotChecked.set(
      pair,
      `whether the checkpoint served (${served.checkpoint.size} leaves) extends the earlier one given (previousCheckpoint, ${previous.checkpoint.size} leaves)`,
    );
  }
  if (previous !== undefined && o.treeSize !== undefined && latest !== undefined)
    pairs.push({ older: previous, newer: current, ordered: false, proof: { kind: 'none' } });
  // Two notes that disagree with no read needed (same size, different roots): found before any read.
  for (const pair of pairs) findings.push(...noteFindings(pair));
  for (const pair of pairs) {
    const [smaller, larger] = bySize(pair.older, pair.newer);
    if (!pairNotChecked.has(pair) || smaller.checkpoint.size === 0 || smaller.checkpoint.size === larger.checkpoint.size) continue;
    try {
      pair.proof = await askProof(h, pair);
    } catch (e) {
      failed(e, pairNotChecked.get(pair)!);
    }
  }

  // As requireTenantLog reads it: a tenant id is the origin's part after its last `/baton/`.
  const tenantId = originTenant(trust.origin);
  const treeLeaves: Hash[] = [];
  /** Each leaf of the tree audited, at the first index it is logged at. */
  const firstIndexOf = new Map<string, number>();
  /** Each entry that verified as this tenant's service receipt, at its first index: all must be listed. */
  const tenantEntries = new Map<string, number>();
  /** False once a tile could not be read and no entry bundle stood in for it: the root cannot be recomputed. */
  let rootKnown = true;
  let entriesChecked = 0;
  let decisionsChecked = 0;
  const recordsOf = decisionRecordsFrom(h);
  /** The first leaf index not yet replayed: where a failed read stopped the replay. */
  let replayedTo = 0;
  /** True when a failed read stopped the replay: the entries and the listing are not judged. */
  let replayStopped = false;
  /** The report as it stands; with nothing found and a read failed, that failure is thrown. */
  const report = (): AuditReport => {
    // A fork or rollback (two signed notes) first, then what concerns the log as a whole, then entries in order.
    const rank = (f: AuditFinding) => ('index' in f ? f.index : f.kind === 'split-view' || f.kind === 'rollback' ? -2 : -1);
    findings.sort((a, b) => rank(a) - rank(b));
    if (findings.length === 0 && failures.length > 0) throw failures[0]!.error;
    return {
      origin: trust.origin,
      treeSize: size,
      checkpoint: note,
      checkpointRead: true,
      ...(o.treeSize !== undefined ? { latestCheckpoint: latestNote } : {}),
      entriesChecked,
      serviceReceiptsChecked,
      pendingServiceReceipts,
      decisionsChecked,
      rootsPinned: o.decisions?.trustedRoots !== undefined,
      notChecked: OFFLINE_LIMITS,
      findings,
      ...pinnedKeys(o),
      ...pinnedOrigin(o),
      ...(failures.length > 0 ? { incomplete: failures.map((f) => f.failure) } : {}),
      ok: findings.length === 0 && failures.length === 0,
    };
  };
  let serviceReceiptsChecked = 0;
  let pendingServiceReceipts = 0;
  try {
    for (let index = 0; index * TILE_WIDTH < size; index++) {
      const width = Math.min(TILE_WIDTH, size - index * TILE_WIDTH);
      const first = index * TILE_WIDTH;
      replayedTo = first;
      const tile = { level: 0, index, width };
      const read = await readLeafTile(h, tile);
      const hashes = read.hashes;
      const positions = new Map((hashes ?? []).map((x, i) => [hex(x), first + i]));
      const decisions: LoggedDecision[] = [];
      /** The checks of one entry at its index: its leaf, its signature and tenant, and (later) its decision. */
      const checkEntry = (at: number, entry: Uint8Array) => {
        entriesChecked++;
        const lh = leafHash(entry);
        const logged = hashes?.[at - first];
        // Without the tile (it could not be read), the entry's leaf is known only from the entry.
        if (hashes !== null && (logged === undefined || !bytesEqual(lh, logged))) {
          const elsewhere = positions.get(hex(lh));
          if (elsewhere !== undefined)
            findings.push({ kind: 'reordered', index: at, detail: `entry ${at} is the leaf logged at index ${elsewhere}` });
          else
            findings.push({
              kind: 'rewritten',
              index: at,
              detail: `entry ${at} does not hash to the logged leaf ${encodeBase64(logged ?? new Uint8Array(0))}`,
            });
        }
        const verified = verifyServiceReceipt(decodeText(entry), keys);
        if (!verified.valid)
          findings.push({ kind: 'bad-service-receipt', index: at, detail: `service receipt signature: ${verified.reason}` });
        else if (tenantId === undefined || verified.payload?.['tenant'] !== tenantId)
          findings.push({
            kind: 'bad-service-receipt',
            index: at,
            detail: `service receipt belongs to tenant ${String(verified.payload?.['tenant'])}${tenantId === undefined ? `; the log's origin ${trust.origin} names no tenant (<log name>/baton/<tenant>)` : ''}`,
          });
        else {
          if (!tenantEntries.has(hex(lh))) tenantEntries.set(hex(lh), at);
          const decision = asDecision(at, verified.payload);
          if (decision !== null) decisions.push(decision);
        }
      };
      const bundle = await h.bytesOrAnswer(`/v1/log/${entryBundlePath(index, width)}`, cannotProduce);
      let fromBundle: Hash[] | null = null;
      if (!bundle.ok) {
        findings.push(...(await checkUnservedBundle(h, bundle, { index, first, width }, checkEntry, o.concurrency ?? 8)));
      } else {
        let entries: Uint8Array[] = [];
        let problem = '';
        try {
          entries = parseEntryBundle(bundle.bytes);
        } catch (e) {
          /* counted as wrong below */
          if (e instanceof BatonError) problem = `: ${e.message}`;
        }
        if (entries.length !== width) {
          findings.push({
            kind: 'missing',
            index: first,
            detail: `entry bundle ${index} holds ${entries.length} entries, not ${width}${problem}`,
          });
        } else fromBundle = entries.map((e) => leafHash(e));
        entries.forEach((entry, i) => checkEntry(first + i, entry));
      }
      // A tile that cannot be read: its leaves are taken from the entry bundle, which the root then checks.
      const leaves = hashes ?? fromBundle;
      if (read.problem !== undefined)
        findings.push({
          kind: 'malformed',
          index: first,
          source: `GET /v1/log/${tilePath(tile)}`,
          detail: `the log ${read.what} (${read.problem}); ${leaves !== null ? "its entries were checked, and the root recomputed, from the entry bundle's" : 'the root could not be recomputed'}`,
        });
      if (leaves === null) rootKnown = false;
      (leaves ?? indexesOf(first, width).map(() => new Uint8Array(32))).forEach((leaf, i) => {
        treeLeaves.push(leaf);
        if (leaves === null) return;
        const earlier = firstIndexOf.get(hex(leaf));
        if (earlier === undefined) firstIndexOf.set(hex(leaf), first + i);
        else
          findings.push({
            kind: 'duplicate',
            index: first + i,
            detail: `entry ${first + i} is the leaf logged at index ${earlier} again: a service receipt is logged once`,
          });
      });
      const served = await inPool(decisions, o.concurrency ?? 8, recordsOf);
      decisions.forEach((d, i) => {
        decisionsChecked++;
        for (const p of checkDecision(d, served[i]!, o.decisions)) findings.push({ ...p, index: d.index });
      });
      o.onProgress?.(first + width, size);
    }
  } catch (e) {
    failed(
      e,
      `entries ${replayedTo} to ${size - 1} of the ${size} audited (the replay stopped at the tile holding entry ${replayedTo}: their leaves, service receipts and decisions, not all checked), the root, and GET /v1/service-receipts against the log`,
    );
    replayStopped = true;
  }
  // Trees whose leaves the log served and which rebuild a root it signed: what judges each pair.
  const trees: RebuiltTree[] = [];
  const tilesRoot = rootKnown && !replayStopped ? rootOf(treeLeaves) : undefined;
  // Only tiles that rebuild the checkpoint's root are the tree it signed (else root-mismatch says so).
  const tilesAreTheTree = tilesRoot !== undefined && bytesEqual(tilesRoot, current.checkpoint.rootHash);
  if (tilesRoot !== undefined && !tilesAreTheTree)
    findings.push({ kind: 'root-mismatch', detail: `the tiles hash to ${encodeBase64(tilesRoot)}, not the checkpoint's root` });
  if (tilesAreTheTree) trees.push({ note: current, leaves: treeLeaves });

  // Auditing an earlier checkpoint: the latest tree's leaves, read from its own tiles (the full tiles
  // before the audited tree's last one are the same tiles, read above, unless the replay stopped:
  // then all are read again), must rebuild its root. Then the leaves the log added since tell a
  // service receipt logged later from one left out, and the pairs are judged against them. Done even
  // when the replay stopped: a fork the latest's tiles prove needs nothing the replay could not read.
  const later = new Set<string>();
  let laterKnown = latest !== undefined;
  if (latest !== undefined && latest.checkpoint.size > size) {
    const end = latest.checkpoint.size;
    const boundary = replayStopped ? 0 : Math.floor(size / TILE_WIDTH) * TILE_WIDTH;
    // The whole of the latest's tile holding the audited tree's last leaves is kept, not only the
    // leaves after it: a log serving the audited tree a partial tile of another history would
    // otherwise have its leaves stand in for the latest's own.
    const latestLeaves: Hash[] = treeLeaves.slice(0, boundary);
    try {
      for (let index = boundary / TILE_WIDTH; index * TILE_WIDTH < end; index++) {
        const first = index * TILE_WIDTH;
        const tile = { level: 0, index, width: Math.min(TILE_WIDTH, end - first) };
        const read = await readLeafTile(h, tile);
        if (read.hashes === null) {
          laterKnown = false;
          findings.push({
            kind: 'malformed',
            index: first,
            source: `GET /v1/log/${tilePath(tile)}`,
            detail: `in its latest tree, the log ${read.what} (${read.problem})`,
          });
          continue;
        }
        latestLeaves.push(...read.hashes);
      }
    } catch (e) {
      // Without the latest tree, a listed receipt outside the one audited may have been logged since.
      laterKnown = false;
      failed(e, `the leaves logged after the checkpoint audited, up to the latest checkpoint (${end} leaves), and its root`);
    }
    // The full tiles before the boundary come from the replay: unknown there, the root cannot be rebuilt.
    const latestKnown = laterKnown && (replayStopped || rootKnown);
    if (latestKnown) {
      const latestRoot = rootOf(latestLeaves);
      if (!bytesEqual(latestRoot, latest.checkpoint.rootHash)) {
        laterKnown = false;
        findings.push({
          kind: 'root-mismatch',
          detail: `the tiles of the latest checkpoint (${end} leaves${boundary > 0 ? `; those before entry ${boundary} as read for the one audited` : ''}) hash to ${encodeBase64(latestRoot)}, not its root`,
        });
      } else trees.push({ note: latest, leaves: latestLeaves });
    }
    if (laterKnown) for (const leaf of latestLeaves.slice(size)) later.add(hex(leaf));
  }
  // Each pair judged: by the tiles of its larger checkpoint when they rebuild its root, else by the
  // proof the log answered. A stale view shown consistent is no finding, but a read that failed.
  for (const pair of pairs) {
    const judged = judgePair(pair, trees, findings);
    findings.push(...judged.findings);
    if (judged.stale !== undefined)
      failed(
        new BatonApiError({
          status: 200,
          code: 'UNEXPECTED_RESPONSE',
          method: 'GET',
          url: h.url('/v1/log/checkpoint'),
          message: `GET /v1/log/checkpoint served a stale view: ${judged.stale}. A cache in front of the log that ignores no-cache serves that; a log that rolled back could not prove it.`,
          suggestion: 'Ask the operator to keep caches off GET /v1/log/checkpoint (it is served no-cache), then audit again.',
        }),
        pairNotChecked.get(pair) ?? 'whether the log extends the checkpoint given',
      );
  }
  // Without the tiles of the tree audited, the entries and the listing could not be judged.
  if (replayStopped) return report();

  // Every service receipt the service lists must be in the log, unless it came after the checkpoint;
  // and every entry of the tenant in the log must be listed.
  const logged = new Set(firstIndexOf.keys());
  const listed = new Set<string>();
  const lastLogged = { id: 0 };
  const unlogged: { id: number; jws: string }[] = [];
  let loggedLater = 0;
  const seenAfter = new Set<string>(['0']);
  try {
    for (let after = 0; ;) {
      const page = (await h.json(`/v1/service-receipts?after=${after}&limit=500`, SERVICE_RECEIPT_PAGE)) as {
        service_receipts: { id: number; jws: string }[];
        next_after: number | null;
      };
      for (const r of page.service_receipts) {
        serviceReceiptsChecked++;
        const leaf = hex(serviceReceiptLeafHash(r.jws));
        listed.add(leaf);
        if (logged.has(leaf)) lastLogged.id = Math.max(lastLogged.id, r.id);
        else if (later.has(leaf)) {
          // In the log, after the checkpoint audited.
          lastLogged.id = Math.max(lastLogged.id, r.id);
          loggedLater++;
        } else unlogged.push(r);
      }
      if (page.next_after === null) break;
      // A server that answers an earlier page again would keep this audit reading forever.
      after = followCursorOnce(seenAfter, page.next_after, '/v1/service-receipts', page.service_receipts.length);
    }
  } catch (e) {
    failed(
      e,
      'GET /v1/service-receipts to its end: which entries of the log it does not list (not-listed), and which receipts it lists are not in the log (not-in-log)',
    );
    return report();
  }
  // Every entry was committed before the checkpoint that holds it was signed, so before this listing
  // was read: the service lists it, unless it hides it (or it is another tenant's, reported above).
  for (const [leaf, at] of tenantEntries)
    if (!listed.has(leaf))
      findings.push({
        kind: 'not-listed',
        index: at,
        detail: `entry ${at} is a service receipt of this tenant that GET /v1/service-receipts does not list`,
      });
  // A service receipt outside the log is pending while the integrator may not have seen it yet.
  // Its id is drawn when it is inserted and it is seen when its transaction commits, so one with a
  // lower id than a logged one may still be on its way for as long as a commit can take; past that
  // (or past maxPending, for any) it was left out, or the checkpoint is stale.
  const maxPending = o.maxPendingSeconds ?? 600;
  const lateCommit = Math.min(LATE_COMMIT_SECONDS, maxPending);
  // The service's own skew (decisions.clockSkewSeconds) may be 0 while the two clocks still differ a little.
  const skew = o.decisions?.clockSkewSeconds;
  const ahead = Math.max(RECEIPT_CLOCK_SKEW_SECONDS, Number.isFinite(skew) ? skew! : 0);
  // Service receipts logged after an earlier checkpoint audited count as after it, as pending ones do.
  pendingServiceReceipts = loggedLater;
  for (const r of unlogged) {
    const verified = verifyServiceReceipt(r.jws, keys);
    if (!verified.valid) {
      findings.push({
        kind: 'not-in-log',
        serviceReceiptId: r.id,
        detail: `service receipt ${r.id} is outside the log and does not verify: ${verified.reason}`,
      });
      continue;
    }
    // Without the latest tree (it could not be read), one outside the tree audited may have been logged since.
    if (!laterKnown) {
      pendingServiceReceipts++;
      continue;
    }
    // A receipt dated ahead of the auditor's clock (or not dated) would stay "pending" for good.
    const signed = verified.payload?.['iat'];
    if (typeof signed !== 'number' || signed > now + ahead) {
      findings.push({
        kind: 'not-in-log',
        serviceReceiptId: r.id,
        detail: `service receipt ${r.id} is outside the log and ${typeof signed === 'number' ? `dated ${signed - now} s in the future` : 'carries no iat'}, so it cannot be pending`,
      });
      continue;
    }
    const age = now - signed;
    if (r.id < lastLogged.id && age > lateCommit) {
      findings.push({
        kind: 'not-in-log',
        serviceReceiptId: r.id,
        detail: `service receipt ${r.id} is listed by the service but is not in the log, though service receipt ${lastLogged.id} (a later one) is`,
      });
      continue;
    }
    pendingServiceReceipts++;
    if (age > maxPending)
      findings.push({
        kind: 'not-in-log',
        serviceReceiptId: r.id,
        detail: `service receipt ${r.id} was signed ${age} s ago and is still not in the log (at most ${maxPending} s expected): the log stopped, or this checkpoint is stale`,
      });
  }
  return report();
}
