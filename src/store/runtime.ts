/**
 * Block G: the runtime state no stateless verifier can keep, decided
 * atomically in PostgreSQL.
 *
 * One statement per verify, shared with the verifies arriving at the same
 * time (group commit, see verify-batch.ts): the SQL function
 * baton_verify_item (migration 0004_verify_group_commit; 0017 adds the chain's metering, 0018 folds the chain in SQL) re-checks every
 * mutable fact (API key active, root still trusted, DRs stored and not
 * revoked), detects a replay or a retry, and checks the call and budget
 * ceilings under row locks; only when all hold does it insert the invocation
 * (its jti is the primary key, so a replay cannot insert twice), increment
 * the counted DRs and store the allow's service receipt, in the transaction of the
 * batch. A refusal writes nothing. The function text explains the lock order.
 *
 * It is called with a fixed SQL text through the driver (prepared once per
 * connection), never built per request.
 */
import { and, eq, inArray, sql } from 'drizzle-orm';
import type { RecordHash } from '../protocol/hash.js';
import type { Db, RawQuery } from './db.js';
import type { ServiceReceiptKind } from '../protocol/lists.js';
import { rows, textArray } from './rows.js';
import { delegations, invocations } from './schema/index.js';
import { verifyBatcherOf, type ChainMetering } from './verify-batch.js';

export interface ChainRuntimeState {
  readonly hash: string;
  readonly depth: number;
  readonly revoked: boolean;
  readonly callsUsed: number;
  readonly maxCalls: number | null;
  readonly spendReservedMicros: number;
  readonly maxSpendMicros: number | null;
}

/** What never changes about a stored DR: safe to cache, and all the statement's caller needs. */
export type ChainLimits = Pick<ChainRuntimeState, 'hash' | 'depth' | 'maxCalls' | 'maxSpendMicros'>;

export interface InvocationToCount {
  readonly tenantId: string;
  readonly jti: string;
  readonly hash: string;
  readonly jws: string;
  readonly drChain: readonly RecordHash[];
  readonly tool: string | null;
  readonly estimatedMicros: number;
  readonly callerKeyId: string;
}

export type CountOutcome =
  | {
      readonly ok: true;
      readonly state: readonly ChainRuntimeState[];
      readonly serviceReceiptId?: number;
      /** Set when the same key re-sent an invocation already allowed: its original service receipt, nothing counted now. */
      readonly retry?: { readonly serviceReceiptId: number; readonly kid: string; readonly jws: string } | true;
    }
  | { readonly ok: false; readonly reason: 'REPLAY_DETECTED' | 'UNTRUSTED_ROOT' }
  /** The caller's API key was revoked since it was cached: a 401, nothing recorded. */
  | { readonly ok: false; readonly reason: 'KEY_REVOKED' }
  | { readonly ok: false; readonly reason: 'RECEIPT_REVOKED'; readonly hash: string }
  | {
      readonly ok: false;
      readonly reason: 'CALLS_EXHAUSTED' | 'BUDGET_EXHAUSTED';
      readonly state: ChainRuntimeState;
      /** Set when the refusal was predicted and stored by the statement itself: its service receipt. */
      readonly deniedServiceReceiptId?: number;
    }
  /** A refusal was predicted, so no allow service receipt was signed, but the invocation would be allowed: sign one and ask again. */
  | { readonly ok: false; readonly reason: 'UNPREDICTED' }
  | { readonly ok: false; readonly reason: 'BUNDLE_INCOMPLETE'; readonly hash: string }
  /** Refused by the tool gate inside the statement (see ToolGateRefusal). */
  | { readonly ok: false; readonly reason: 'TOOL_GATE'; readonly refusal: ToolGateRefusal };

/** What the service decided the tool gate on; the statement re-checks it (baton_tool_gate, migration 0005). */
export interface ToolGateParams {
  /** Catalog version decided with. */
  readonly v: number;
  /** Service clock, unix seconds. */
  readonly n: number;
  readonly t: string | null;
  readonly rl: number | null;
  /** Approval to spend, and the call's binding. */
  readonly a: string | null;
  readonly b: string | null;
  /** The verify's API key, sent with a named approval (0033): refuse APPROVAL_DECIDED_BY_CALLER when it, or its rotation lineage, decided it. */
  readonly k?: string;
  /** Check cost calibration (0010): refuse COST_CALIBRATION_FLAGGED when a DR's metered cost is above r × declared over ≥ m metered calls. */
  readonly cc?: { readonly r: number; readonly m: number } | null;
  /** A near_limit rule would decide otherwise (0025): refuse NEAR_LIMIT_REACHED when this call takes a locked counter past 80%. */
  readonly nl?: boolean;
  /** A dry run (0028): read the approval and the rate window without locking or counting, and change nothing. */
  readonly d?: boolean;
}

/** baton_tool_gate's refusal: o = code; v = current version; h = pending DR; a = approval id; t/rl = tool and rate. */
export interface ToolGateRefusal {
  readonly o:
    | 'CATALOG_CHANGED'
    | 'GRANT_PENDING_APPROVAL'
    | 'APPROVAL_REQUIRED'
    | 'APPROVAL_REJECTED'
    | 'APPROVAL_EXPIRED'
    | 'APPROVAL_USED'
    | 'APPROVAL_MISMATCH'
    | 'APPROVAL_DECIDED_BY_CALLER'
    | 'TOOL_RATE_LIMITED'
    | 'COST_CALIBRATION_FLAGGED'
    | 'NEAR_LIMIT_REACHED';
  readonly v?: number;
  readonly h?: string;
  readonly a?: string;
  readonly t?: string;
  readonly rl?: number;
}

/** Counters, budgets and revocation of a stored chain, root first. */
export async function readChainState(db: Db, tenantId: string, chain: readonly string[]): Promise<ChainRuntimeState[]> {
  const found = await db
    .select({
      hash: delegations.hash,
      depth: delegations.depth,
      revokedAt: delegations.revokedAt,
      callsUsed: delegations.callsUsed,
      maxCalls: delegations.maxCalls,
      spendReservedMicros: delegations.spendReservedMicros,
      maxSpendMicros: delegations.maxSpendMicros,
    })
    .from(delegations)
    .where(and(eq(delegations.tenantId, tenantId), inArray(delegations.hash, [...chain])));
  return found
    .map((r) => ({
      hash: r.hash,
      depth: r.depth,
      revoked: r.revokedAt !== null,
      callsUsed: r.callsUsed,
      maxCalls: r.maxCalls,
      spendReservedMicros: r.spendReservedMicros,
      maxSpendMicros: r.maxSpendMicros,
    }))
    .sort((a, b) => a.depth - b.depth);
}

/**
 * 'all' when every DR of the chain has a ceiling to count against, 'none' when
 * none has, undefined when they are mixed or `limits` do not cover the chain.
 * Ceilings come from signed policies and never change, so this is known before
 * the statement; the statement still checks it against the stored rows (0017).
 */
export function chainMeteringOf(chain: readonly string[], limits: readonly ChainLimits[]): ChainMetering | undefined {
  return meteringOf(chain, new Map(limits.map((l) => [l.hash, l])));
}

function meteringOf(chain: readonly string[], limitsByHash: ReadonlyMap<string, ChainLimits>): ChainMetering | undefined {
  const metered = (h: string) => {
    const l = limitsByHash.get(h);
    return l === undefined ? undefined : l.maxCalls !== null || l.maxSpendMicros !== null;
  };
  if (chain.every((h) => metered(h) === true)) return 'all';
  if (chain.every((h) => metered(h) === false)) return 'none';
  return undefined;
}

/** What baton_verify_item answers (jsonb): o = the outcome, s = [hash, calls_used, spend] per DR. */
interface CountAnswer {
  readonly o:
    'ALLOWED' | 'RETRY' | 'REPLAY_DETECTED' | 'UNTRUSTED_ROOT' | 'KEY_REVOKED' | 'RECEIPT_REVOKED' | 'BUNDLE_INCOMPLETE' | 'UNPREDICTED';
  readonly rid?: number;
  readonly kid?: string;
  readonly jws?: string;
  readonly h?: string;
  readonly s?: readonly (readonly [string, number | string, number | string])[];
}
interface BlockedAnswer {
  readonly o: 'CALLS_EXHAUSTED' | 'BUDGET_EXHAUSTED';
  readonly h: string;
  readonly c: number | string;
  readonly sp: number | string;
  readonly denied?: { readonly o: string; readonly rid?: number | string };
}

/** A block-G refusal predicted from a fact that never reverts (a DR's max_calls used up), with its service receipt signed in advance. */
export interface PredictedDenial {
  readonly code: 'CALLS_EXHAUSTED';
  /** The DR predicted to refuse. */
  readonly hash: string;
  /** The violations to store; the statement sets the first one's `actual` to the calls_used it saw. */
  readonly violations: unknown;
  readonly serviceReceipt: { readonly jws: string; readonly kid: string };
}

/**
 * The allow path of /verify, all or nothing, in one statement. Returns the
 * chain state after counting, or why it was refused (then nothing was written).
 */
export async function countCallsAtomically(
  query: RawQuery,
  inv: InvocationToCount,
  /**
   * Signed before the statement, stored by it: an allow is never committed
   * without its service receipt. Null with a predicted refusal (an allow then
   * answers UNPREDICTED).
   */
  serviceReceipt: { kind: ServiceReceiptKind; jws: string; kid: string } | null,
  /** The chain's immutable limits (from a cache or a read); counters come from the statement. */
  limits: readonly ChainLimits[],
  /** Root of the chain, re-checked as trusted by the statement. */
  rootDid: string,
  /** After this the caller no longer waits: the statement refuses to run or commit (SQLSTATE 57014). */
  deadline: Date,
  predicted?: PredictedDenial,
  /** The tool gate's inputs; null when the tenant has no catalog. */
  gate: ToolGateParams | null = null,
): Promise<CountOutcome> {
  // One map of the chain's limits, for the metering hint and then for the answer's state.
  const byHash = new Map(limits.map((l) => [l.hash, l]));
  const metering = meteringOf(inv.drChain, byHash);
  const answer = (await verifyBatcherOf(query).run(
    {
      k: 'a',
      t: inv.tenantId,
      key: inv.callerKeyId,
      root: rootDid,
      chain: inv.drChain,
      jti: inv.jti,
      hash: inv.hash,
      jws: inv.jws,
      tool: inv.tool,
      est: inv.estimatedMicros,
      rjws: serviceReceipt?.jws ?? null,
      rkid: serviceReceipt?.kid ?? predicted?.serviceReceipt.kid ?? '',
      ...(gate === null ? {} : { gate: { ...gate } }),
      ...(metering === undefined ? {} : { mt: metering }),
      ...(predicted
        ? {
            deny: {
              code: predicted.code,
              h: predicted.hash,
              v: predicted.violations,
              rjws: predicted.serviceReceipt.jws,
              rkid: predicted.serviceReceipt.kid,
            },
          }
        : {}),
    },
    deadline,
  )) as unknown as CountAnswer | BlockedAnswer | ToolGateRefusal;
  // Spelled out, not spread: this runs once per DR of every verify, and V8 copies spread properties
  // one by one through its runtime (at depth 16 the spread version cost ~60 us per verify).
  const runtimeStateOf = (hash: string, calls: number | string, spend: number | string): ChainRuntimeState => {
    const l = byHash.get(hash);
    return {
      hash,
      depth: l?.depth ?? 0,
      revoked: false,
      callsUsed: Number(calls),
      maxCalls: l?.maxCalls ?? null,
      spendReservedMicros: Number(spend),
      maxSpendMicros: l?.maxSpendMicros ?? null,
    };
  };
  const stateOf = (s: CountAnswer['s']): ChainRuntimeState[] =>
    (s ?? []).map((row) => runtimeStateOf(row[0], row[1], row[2])).sort((a, b) => a.depth - b.depth);
  switch (answer.o) {
    case 'ALLOWED':
      return { ok: true, state: stateOf(answer.s), serviceReceiptId: Number(answer.rid) };
    case 'RETRY':
      return { ok: true, state: stateOf(answer.s), retry: { serviceReceiptId: Number(answer.rid), kid: answer.kid!, jws: answer.jws! } };
    case 'CALLS_EXHAUSTED':
    case 'BUDGET_EXHAUSTED':
      return {
        ok: false,
        reason: answer.o,
        state: runtimeStateOf(answer.h, answer.c, answer.sp),
        ...(answer.denied?.o === 'DENIED' ? { deniedServiceReceiptId: Number(answer.denied.rid) } : {}),
      };
    case 'RECEIPT_REVOKED':
    case 'BUNDLE_INCOMPLETE':
      return { ok: false, reason: answer.o, hash: answer.h! };
    case 'REPLAY_DETECTED':
    case 'UNTRUSTED_ROOT':
    case 'KEY_REVOKED':
    case 'UNPREDICTED':
      return { ok: false, reason: answer.o };
    default:
      return { ok: false, reason: 'TOOL_GATE', refusal: answer };
  }
}

export interface DenialToRecord {
  readonly tenantId: string;
  readonly callerKeyId: string;
  readonly jti: string | null;
  readonly invocationHash: string | null;
  readonly code: string;
  readonly block: string | null;
  readonly drChain: readonly string[];
  readonly violations: unknown;
  /** The receipt's subject, kid and JWS (signed before the statement). */
  readonly serviceReceipt: { readonly subject: string; readonly jws: string; readonly kid: string };
}

/**
 * What storing a refusal answered: its service receipt's id; KEY_REVOKED when the API key was
 * revoked since it was cached; or STALE when the chain's facts the refusal was decided on no longer
 * hold (records revoked, or the root no longer trusted, since this node cached them: 0041).
 * Neither of the last two stores anything.
 */
export type DenialOutcome =
  | { readonly o: 'DENIED'; readonly serviceReceiptId: number }
  | { readonly o: 'KEY_REVOKED' }
  | { readonly o: 'STALE'; readonly revoked: readonly string[]; readonly untrusted: boolean };

/**
 * Stores a refusal and its service receipt in one statement, which re-checks the API key and, for
 * a chain that verified, its records' revocation and its root's trust (see DenialOutcome).
 */
export async function recordDenial(query: RawQuery, d: DenialToRecord, deadline: Date): Promise<DenialOutcome> {
  const answer = await verifyBatcherOf(query).run(
    {
      k: 'd',
      t: d.tenantId,
      key: d.callerKeyId,
      jti: d.jti,
      ih: d.invocationHash,
      code: d.code,
      block: d.block,
      chain: d.drChain,
      v: d.violations,
      subj: d.serviceReceipt.subject,
      rjws: d.serviceReceipt.jws,
      rkid: d.serviceReceipt.kid,
    },
    deadline,
  );
  switch (answer.o) {
    case 'DENIED':
      return { o: 'DENIED', serviceReceiptId: Number(answer['rid']) };
    case 'STALE': {
      const revoked = answer['revoked'];
      return {
        o: 'STALE',
        revoked: Array.isArray(revoked) ? revoked.filter((h): h is string => typeof h === 'string') : [],
        untrusted: answer['untrusted'] === true,
      };
    }
    default:
      return { o: 'KEY_REVOKED' };
  }
}

/**
 * What countCallsAtomically would decide, read-only: for dry runs, which
 * must run every check yet consume nothing.
 */
export async function predictCount(
  db: Db,
  inv: Pick<InvocationToCount, 'tenantId' | 'jti' | 'hash' | 'callerKeyId' | 'drChain' | 'estimatedMicros'>,
  /** Fresh state of verified DRs not stored yet (a dry run stores nothing). */
  unstored: readonly ChainRuntimeState[] = [],
): Promise<CountOutcome> {
  const state = [...(await readChainState(db, inv.tenantId, inv.drChain)), ...unstored].sort((a, b) => a.depth - b.depth);
  const missing = inv.drChain.find((h) => !state.some((s) => s.hash === h));
  if (missing) return { ok: false, reason: 'BUNDLE_INCOMPLETE', hash: missing };
  const revoked = state.find((s) => s.revoked);
  if (revoked) return { ok: false, reason: 'RECEIPT_REVOKED', hash: revoked.hash };
  const [used] = await db
    .select({ hash: invocations.hash, callerKeyId: invocations.callerKeyId })
    .from(invocations)
    .where(and(eq(invocations.tenantId, inv.tenantId), eq(invocations.jti, inv.jti)))
    .limit(1);
  // The same key re-sending the same allowed invocation gets its original answer (see baton_prior_use).
  if (used)
    return used.hash === inv.hash && used.callerKeyId === inv.callerKeyId
      ? { ok: true, state, retry: true }
      : { ok: false, reason: 'REPLAY_DETECTED' };
  for (const s of state) {
    if (s.maxCalls !== null && s.callsUsed >= s.maxCalls) return { ok: false, reason: 'CALLS_EXHAUSTED', state: s };
    if (s.maxSpendMicros !== null && s.spendReservedMicros + inv.estimatedMicros > s.maxSpendMicros) {
      return { ok: false, reason: 'BUDGET_EXHAUSTED', state: s };
    }
  }
  return { ok: true, state };
}

/**
 * What the statement's tool gate (baton_tool_gate) would answer for this call now: the gate's own
 * checks in their read-only mode (d, 0028). So a dry run refuses what the real call's gate refuses
 * (a rate window full, a grant held, an approval rejected, used, expired or for another call, the
 * catalog changed), by the same SQL rather than a copy of it, and it takes no lock, rate slot or
 * approval: a flood of dry runs never waits on, or holds up, the real calls of a tool.
 * Null: the gate lets the call through.
 */
export async function predictToolGate(
  db: Db,
  inv: Pick<InvocationToCount, 'tenantId' | 'jti' | 'drChain'>,
  gate: ToolGateParams,
): Promise<ToolGateRefusal | null> {
  const dryGate: ToolGateParams = { ...gate, d: true };
  const [row] = await rows<{ r: string | null }>(
    db,
    sql`select baton_tool_gate(${inv.tenantId}, ${textArray(inv.drChain)},
                               ${inv.jti}, ${JSON.stringify(dryGate)}::jsonb)::text as r`,
  );
  return row?.r ? (JSON.parse(row.r) as ToolGateRefusal) : null;
}
