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

/**
 * Judges checkpoint `newerNote` against `olderNote` (both opened under the trust) by what nothing in
 * the path can forge, reading the level-0 tiles of the larger from entry 0 with `client` (an audit
 * key of the log's tenant): when they rebuild its signed root, the smaller must be their prefix, else
 * a split view with both notes. A newer checkpoint smaller than the older that the tiles hold as
 * their prefix is a `rollback` result in the caller's order, which no note can prove (a stale view
 * reads the same: callers say so). When the tiles cannot be read or do not rebuild the larger root,
 * `result` is null, with why: then only a consistency proof that verifies can settle the pair, and
 * any other answer is a failed read.
 */
export async function judgeCheckpointsByTiles(
  client: BatonClient,
  olderNote: string,
  newerNote: string,
  trust: LogTrust,
  now: number,
): Promise<{ result: ConsistencyResult } | { result: null; why: string }> {
  const policy = logPolicy(trust);
  const older = openCheckpoint(olderNote, policy, now);
  const newer = openCheckpoint(newerNote, policy, now);
  const [smaller, larger] = bySize(older, newer);
  // Equal sizes, or a size-0 checkpoint: the notes alone decide.
  if (smaller.checkpoint.size === larger.checkpoint.size || smaller.checkpoint.size === 0)
    return { result: verifyCheckpointConsistency(olderNote, newerNote, [], trust, now) };
  const read = await treeLeavesFrom(client, larger);
  const rollback = newer.checkpoint.size < older.checkpoint.size;
  // Unreadable tiles judge nothing, in either order: a smaller second note is a stale view as likely as a rollback.
  if ('why' in read) return { result: null, why: read.why };
  const tree: RebuiltTree = { note: larger, leaves: read.leaves };
  if (!holds(tree, smaller)) {
    const prefix = encodeBase64(rootOf(read.leaves.slice(0, smaller.checkpoint.size)));
    const finding: SplitViewFinding = {
      kind: 'not-consistent',
      origin: larger.checkpoint.origin,
      older: smaller,
      newer: larger,
      reason: `the log's tiles of ${larger.checkpoint.size} leaves rebuild that checkpoint's root, and their first ${smaller.checkpoint.size} hash to ${prefix}, not the root of the checkpoint of ${smaller.checkpoint.size} leaves`,
    };
    return { result: { consistent: false, finding } };
  }
  return { result: rollback ? { consistent: false, finding: rollbackFinding(older, newer) } : { consistent: true, older, newer } };
}

/** The leaves of `note`'s tree from its level-0 tiles when they rebuild its root; else why not. */
async function treeLeavesFrom(client: BatonClient, note: SignedCheckpoint): Promise<{ leaves: Hash[] } | { why: string }> {
  const size = note.checkpoint.size;
  const leaves: Hash[] = [];
  for (let index = 0; index * TILE_WIDTH < size; index++) {
    const tile = { level: 0, index, width: Math.min(TILE_WIDTH, size - index * TILE_WIDTH) };
    const path = `/v1/log/${tilePath(tile)}`;
    try {
      const answer = await client.getBytes(path, { answerStatuses: (status, body) => status === 404 && isBatonNotFound(body) });
      if (answer.status === 404) return { why: `GET ${path} answered 404 NOT_FOUND` };
      leaves.push(...tileHashes(tile, answer.bytes));
    } catch (e) {
      if (e instanceof BatonError && isMalformed(e.code)) return { why: `GET ${path} served a tile that cannot be read (${e.code})` };
      if (!(e instanceof BatonApiError) || e.status === 401 || e.status === 403) throw e;
      return { why: `GET ${path} failed: HTTP ${e.status} ${e.code}: ${e.message}` };
    }
  }
  return bytesEqual(rootOf(leaves), note.checkpoint.rootHash)
    ? { leaves }
    : { why: `the tiles of ${size} leaves hash to ${encodeBase64(rootOf(leaves))}, not that checkpoint's root` };
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
 * Whether an error reads as the log refusing the consistency proof up to `to` leaves between two
 * checkpoints it signed: Baton's own envelope carrying one of the codes it refuses a proof with
 * (PROOF_REFUSALS), and a 404 only as the route words it, a size below `to` (details.tree_size). It
 * says how an answer is worded, never that the log refused: anyone in the path can forge this
 * answer, so neither auditLog nor baton log consistency counts it as evidence. It is a failed read
 * unless the level-0 tiles of the larger checkpoint decide the pair.
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

/**
 * Two checkpoints the log signed, to be judged. `older` and `newer` are as the auditor came by them
 * (a --previous, then what the log serves): a newer one smaller than the older is rollback-shaped, a
 * stale view or a rollback. `ordered` false: no order is implied (an audited earlier checkpoint and
 * a --previous may come in either), so only a fork is looked for, and no proof is asked.
 */
interface CheckpointPair {
  readonly older: SignedCheckpoint;
  readonly newer: SignedCheckpoint;
  readonly ordered: boolean;
}

/** A tree whose leaves the log served and which rebuild the root of `note`, a checkpoint it signed. */
interface RebuiltTree {
  readonly note: SignedCheckpoint;
  readonly leaves: readonly Hash[];
}

const bySize = (a: SignedCheckpoint, b: SignedCheckpoint): [SignedCheckpoint, SignedCheckpoint] =>
  a.checkpoint.size <= b.checkpoint.size ? [a, b] : [b, a];

/** Whether `note`'s root is that of the first `note.size` leaves of `tree`: the tree the log signed holds it. */
function holds(tree: RebuiltTree, note: SignedCheckpoint): boolean {
  const n = note.checkpoint.size;
  if (n > tree.leaves.length) return false;
  const root = n === tree.leaves.length ? tree.note.checkpoint.rootHash : rootOf(tree.leaves.slice(0, n));
  return bytesEqual(root, note.checkpoint.rootHash);
}

/**
 * Asks the log for the proof joining a pair of different sizes (the smaller above 0), for a pair no
 * rebuilt tree could judge. Returns when it verifies: nothing in the path can forge a proof that
 * does. Anything else is thrown as the failed read it is: a refusal (even in Baton's envelope,
 * logRefusedProof) or a proof that does not verify is no evidence on its own, since anyone in the
 * path can forge it.
 */
async function proofJoins(h: Http, smaller: SignedCheckpoint, larger: SignedCheckpoint): Promise<void> {
  const [from, to] = [smaller.checkpoint.size, larger.checkpoint.size];
  const path = `/v1/log/consistency?from=${from}&to=${to}`;
  const served = (await h.json(path, LOG_CONSISTENCY)) as { proof: string[] };
  const finding = findSplitView(
    smaller,
    larger,
    served.proof.map((p) => decodeBase64(p) ?? new Uint8Array(0)),
  );
  if (finding === null) return;
  throw new BatonApiError({
    status: 200,
    code: 'UNEXPECTED_RESPONSE',
    method: 'GET',
    url: h.url(path),
    message: `GET ${path} served a proof that does not join the checkpoints of ${from} and ${to} leaves (${finding.kind === 'not-consistent' ? finding.reason : finding.kind}). A proof answer is no evidence on its own: anything in the path can forge one.`,
    suggestion: 'Audit again; if the tiles of the larger checkpoint still cannot be read, ask the operator why, keeping both notes.',
  });
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
 * The verdict on a pair of different sizes from `tree`, leaves the log served that rebuild a root it
 * signed and hold the larger checkpoint as their prefix: nothing in the path can forge those. The
 * smaller must be their prefix too. When it is, a rollback-shaped pair is a stale view (an older
 * genuine note served in front of an honest log), returned as `stale` for the caller to report as a
 * failed read; when it is not, the log signed two checkpoints no tree joins: a split view, or a
 * `rollback` when the smaller came as the newer (the log shrank to a tree it never held). Both
 * notes are the evidence, with the tiles.
 */
function judgeByTree(pair: CheckpointPair, tree: RebuiltTree): { finding?: AuditFinding; stale?: string } {
  const [smaller, larger] = bySize(pair.older, pair.newer);
  const [from, to] = [smaller.checkpoint.size, larger.checkpoint.size];
  const rollback = pair.ordered && pair.newer.checkpoint.size < pair.older.checkpoint.size;
  const tilesOf = `the tiles of ${tree.note.checkpoint.size === to ? 'the larger' : `a tree of ${tree.note.checkpoint.size} leaves the log signed, which holds the larger,`}`;
  if (holds(tree, smaller))
    return rollback
      ? { stale: `the log served its checkpoint of ${from} leaves after the one of ${to} leaves, which extends it (${tilesOf} show it)` }
      : {};
  const prefix = encodeBase64(rootOf(tree.leaves.slice(0, from)));
  if (rollback) {
    const finding: RollbackFinding = {
      kind: 'rollback',
      origin: larger.checkpoint.origin,
      older: pair.older,
      newer: pair.newer,
      reason: `the log shrank from ${to} to ${from} leaves, and not to a prefix: ${tilesOf} do not hold the checkpoint of ${from} leaves (their first ${from} hash to ${prefix}), so it is no stale view`,
    };
    return { finding: { kind: 'rollback', detail: finding.reason, finding } };
  }
  const finding: SplitViewFinding = {
    kind: 'not-consistent',
    origin: larger.checkpoint.origin,
    older: smaller,
    newer: larger,
    reason: `the first ${from} leaves of the tree served hash to ${prefix}, not the smaller checkpoint's root`,
  };
  return {
    finding: {
      kind: 'split-view',
      detail: `checkpoints of sizes ${from} and ${to} do not agree (${finding.kind}): ${tilesOf} do not hold the smaller`,
      finding,
    },
  };
}

/** Two checkpoints are one when they have the same size and root (a cosignature more changes neither). */
const sameCheckpoint = (a: SignedCheckpoint, b: SignedCheckpoint): boolean =>
  a.checkpoint.size === b.checkpoint.size && bytesEqual(a.checkpoint.rootHash, b.checkpoint.rootHash);

/** Whether a split view or rollback between `a` and `b` (either order) is among the findings already made. */
function forkFound(found: readonly AuditFinding[], a: SignedCheckpoint, b: SignedCheckpoint): boolean {
  return found.some((f) => {
    if (f.kind !== 'split-view' && f.kind !== 'rollback') return false;
    const [x, y] = f.finding.kind === 'same-size-different-roots' ? f.finding.checkpoints : [f.finding.older, f.finding.newer];
    return (sameCheckpoint(x, a) && sameCheckpoint(y, b)) || (sameCheckpoint(x, b) && sameCheckpoint(y, a));
  });
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
    const pair: CheckpointPair = { older: current, newer: latest, ordered: true };
    pairs.push(pair);
    pairNotChecked.set(pair, `whether the latest checkpoint (${latest.checkpoint.size} leaves) extends the one audited (${size} leaves)`);
  }
  if (previous !== undefined && (latest !== undefined || previous.checkpoint.size <= size)) {
    const served = latest ?? current;
    const pair: CheckpointPair = { older: previous, newer: served, ordered: true };
    pairs.push(pair);
    pairNotChecked.set(
      pair,
      `whether the checkpoint served (${served.checkpoint.size} leaves) extends the earlier one given (previousCheckpoint, ${previous.checkpoint.size} leaves)`,
    );
  }
  if (previous !== undefined && o.treeSize !== undefined && latest !== undefined)
    pairs.push({ older: previous, newer: current, ordered: false });
  // Two notes that disagree with no read needed (same size, different roots): found before any read.
  // No proof is asked yet: only a pair that no rebuilt tree can judge needs one, once the tiles are read.
  for (const pair of pairs) findings.push(...noteFindings(pair));

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
  // Level-0 leaves by tile path, each tile read once: a full tile is the same tile in every tree that
  // holds it, so the replay's serve the latest's and any other tree's rebuilt to judge a pair.
  const tileLeaves = new Map<string, Hash[]>();
  /** Tiles the log answered for with no leaves (reported where first read), and tiles whose read failed (recorded). */
  const tilesUnreadable = new Set<string>();
  const tilesFailed = new Set<string>();
  const readTile = async (tile: { level: number; index: number; width: number }) => {
    try {
      const read = await readLeafTile(h, tile);
      if (read.hashes !== null) tileLeaves.set(tilePath(tile), read.hashes);
      return read;
    } catch (e) {
      tilesFailed.add(tilePath(tile));
      throw e;
    }
  };
  /**
   * The leaves of the tree of `treeSize` leaves, read from its level-0 tiles from entry 0 (those read
   * already are not read again), or null when one cannot be read: a failed read is recorded with
   * `notChecked`; a tile the log answers for with no leaves is reported by `unreadable` when given
   * (the rest are read on, to report them all), else ends the read.
   */
  const leavesUpTo = async (
    treeSize: number,
    notChecked: string,
    unreadable?: (first: number, tile: { level: number; index: number; width: number }, what: string) => AuditFinding,
  ): Promise<Hash[] | null> => {
    const leaves: Hash[] = [];
    let known = true;
    for (let index = 0; index * TILE_WIDTH < treeSize; index++) {
      const first = index * TILE_WIDTH;
      const tile = { level: 0, index, width: Math.min(TILE_WIDTH, treeSize - first) };
      const path = tilePath(tile);
      const cached = tileLeaves.get(path);
      if (cached !== undefined) {
        leaves.push(...cached);
        continue;
      }
      if (tilesFailed.has(path)) return null;
      if (!tilesUnreadable.has(path)) {
        let read: Awaited<ReturnType<typeof readLeafTile>>;
        try {
          read = await readTile(tile);
        } catch (e) {
          failed(e, notChecked);
          return null;
        }
        if (read.hashes !== null) {
          leaves.push(...read.hashes);
          continue;
        }
        tilesUnreadable.add(path);
        if (unreadable !== undefined) findings.push(unreadable(first, tile, `${read.what} (${read.problem})`));
      }
      if (unreadable === undefined) return null;
      known = false;
    }
    return known ? leaves : null;
  };
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
      const read = await readTile(tile);
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
      // The entry bundle's leaves stand in for a tile that could not be read, for every tree that holds it.
      if (leaves !== null) tileLeaves.set(tilePath(tile), leaves);
      else tilesUnreadable.add(tilePath(tile));
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
  /** The checkpoints whose own tiles were read (by size and root), so none is read twice. */
  const treesRead = new Set<string>([`${size}:${hex(current.checkpoint.rootHash)}`]);
  if (!replayStopped) {
    const tilesRoot = rootKnown ? rootOf(treeLeaves) : undefined;
    // Only tiles that rebuild the checkpoint's root are the tree it signed (else root-mismatch says so).
    if (tilesRoot !== undefined && !bytesEqual(tilesRoot, current.checkpoint.rootHash))
      findings.push({ kind: 'root-mismatch', detail: `the tiles hash to ${encodeBase64(tilesRoot)}, not the checkpoint's root` });
    else if (tilesRoot !== undefined) trees.push({ note: current, leaves: treeLeaves });
  } else {
    // The replay stopped (a tile, an entry bundle or a chain could not be read): the tiles of the tree
    // audited are still read to its end (tiles only, those read reused), so a fork they show is not
    // hidden by a failing read of something else.
    const leaves = await leavesUpTo(
      size,
      `the root of the checkpoint audited (${size} leaves), from its level-0 tiles`,
      (first, tile, what) => ({
        kind: 'malformed',
        index: first,
        source: `GET /v1/log/${tilePath(tile)}`,
        detail: `the log ${what}; the root could not be recomputed`,
      }),
    );
    if (leaves !== null) {
      const root = rootOf(leaves);
      if (!bytesEqual(root, current.checkpoint.rootHash))
        findings.push({
          kind: 'root-mismatch',
          detail: `the tiles hash to ${encodeBase64(root)}, not the checkpoint's root (read to its end after the replay stopped)`,
        });
      else trees.push({ note: current, leaves });
    }
  }

  // Auditing an earlier checkpoint: the latest tree's leaves, read from its own tiles (the full tiles
  // of the tree audited are the same tiles, not read again; the latest's tile holding the audited
  // tree's last leaves is read whole, not only the leaves after it, so a log serving the audited tree
  // a partial tile of another history cannot have its leaves stand in for the latest's own), must
  // rebuild its root. Then the leaves the log added since tell a service receipt logged later from
  // one left out, and the pairs are judged against them. Done even when the replay stopped: a fork
  // the latest's tiles prove needs nothing the replay could not read.
  const later = new Set<string>();
  let laterKnown = latest !== undefined;
  if (latest !== undefined && latest.checkpoint.size > size) {
    const end = latest.checkpoint.size;
    treesRead.add(`${end}:${hex(latest.checkpoint.rootHash)}`);
    // Without the latest tree, a listed receipt outside the one audited may have been logged since.
    laterKnown = false;
    const latestLeaves = await leavesUpTo(
      end,
      `the leaves logged after the checkpoint audited, up to the latest checkpoint (${end} leaves), and its root`,
      (first, tile, what) => ({
        kind: 'malformed',
        index: first,
        source: `GET /v1/log/${tilePath(tile)}`,
        detail: `in its latest tree, the log ${what}`,
      }),
    );
    if (latestLeaves !== null) {
      const latestRoot = rootOf(latestLeaves);
      if (!bytesEqual(latestRoot, latest.checkpoint.rootHash))
        findings.push({
          kind: 'root-mismatch',
          detail: `the tiles of the latest checkpoint (${end} leaves; the full ones also the audited tree's, read once) hash to ${encodeBase64(latestRoot)}, not its root`,
        });
      else {
        trees.push({ note: latest, leaves: latestLeaves });
        laterKnown = true;
        for (const leaf of latestLeaves.slice(size)) later.add(hex(leaf));
      }
    }
  }

  // Each pair judged by a tree the log signed that holds its larger checkpoint (that checkpoint's
  // own tiles, read now when no tree read so far holds it), which nothing in the path can forge.
  // Only a pair no such tree judges asks the log for the proof: one that verifies settles it, and
  // anything else (a refusal, a proof that does not verify, a failure) is a failed read, never a
  // finding, since anyone in the path can forge it. A stale view is no finding either, but a read
  // that failed.
  const judged: CheckpointPair[] = [];
  for (const pair of pairs) {
    const [smaller, larger] = bySize(pair.older, pair.newer);
    const [from, to] = [smaller.checkpoint.size, larger.checkpoint.size];
    // Equal sizes were judged from the notes alone; a pair seen before is judged once.
    const again = judged.some(
      (p) => p.ordered === pair.ordered && sameCheckpoint(p.older, pair.older) && sameCheckpoint(p.newer, pair.newer),
    );
    if (from === to || again || forkFound(findings, smaller, larger)) continue;
    judged.push(pair);
    const rollback = pair.ordered && pair.newer.checkpoint.size < pair.older.checkpoint.size;
    const notChecked = rollback
      ? `whether the checkpoint served (${from} leaves) is a stale view or a rollback of the earlier one (${to} leaves): keep both notes, and audit again`
      : `${pairNotChecked.get(pair) ?? `whether the checkpoints of ${from} and ${to} leaves agree`} (the tiles of the larger could not be read, and a proof answer alone is no evidence)`;
    let tree = trees.find((t) => holds(t, larger));
    const key = `${to}:${hex(larger.checkpoint.rootHash)}`;
    if (tree === undefined && !treesRead.has(key)) {
      treesRead.add(key);
      const leaves = await leavesUpTo(to, notChecked);
      if (leaves !== null && bytesEqual(rootOf(leaves), larger.checkpoint.rootHash)) {
        tree = { note: larger, leaves };
        trees.push(tree);
      }
    }
    let stale: string | undefined;
    if (tree !== undefined) {
      const verdict = judgeByTree(pair, tree);
      if (verdict.finding !== undefined) findings.push(verdict.finding);
      stale = verdict.stale;
    } else {
      // A --previous and an earlier checkpoint audited, in no order: only what needs no proof.
      if (!pair.ordered) continue;
      try {
        // From size 0 no proof is served: only the tiles tell a stale view from a rollback.
        if (from === 0) {
          if (rollback)
            throw new BatonApiError({
              status: 200,
              code: 'UNEXPECTED_RESPONSE',
              method: 'GET',
              url: h.url('/v1/log/checkpoint'),
              message: `GET /v1/log/checkpoint served the checkpoint of 0 leaves after the one of ${to} leaves, whose tiles could not be read: a stale view or a rollback.`,
              suggestion: 'Keep both notes, and audit again.',
            });
          continue;
        }
        await proofJoins(h, smaller, larger);
        if (rollback)
          stale = `the log served its checkpoint of ${from} leaves after the one of ${to} leaves, which extends it (the consistency proof shows it)`;
      } catch (e) {
        failed(e, notChecked);
      }
    }
    if (stale !== undefined)
      failed(
        new BatonApiError({
          status: 200,
          code: 'UNEXPECTED_RESPONSE',
          method: 'GET',
          url: h.url('/v1/log/checkpoint'),
          message: `GET /v1/log/checkpoint served a stale view: ${stale}. A cache in front of the log that ignores no-cache serves that.`,
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
