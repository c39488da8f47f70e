/**
 * Block G: the runtime state no stateless verifier can keep, decided
 * atomically in PostgreSQL.
 *
 * One statement per verify: the SQL function baton_verify_count (migration
 * 0003_verify_statement) re-checks every mutable fact (API key active, root
 * still trusted, DRs stored and not revoked), detects a replay or a retry,
 * and checks the call and budget ceilings under row locks taken root to leaf;
 * only when all hold does it insert the invocation (its jti is the primary
 * key, so a replay cannot insert twice), increment the counted DRs and store
 * the allow's receipt, all in the one implicit transaction of the statement.
 * A refusal writes nothing. The function text explains the lock order.
 *
 * It is called with a fixed SQL text through the driver (prepared once per
 * connection), never built per request.
 */
import { and, eq, inArray } from 'drizzle-orm';
import type { RecordHash } from '../protocol/hash.js';
import type { Db, RawQuery } from './db.js';
import { delegations, invocations, type ReceiptKind } from './schema/index.js';

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
      readonly receiptId?: number;
      /** Set when the same key re-sent an invocation already allowed: its original receipt, nothing counted now. */
      readonly retry?: { readonly receiptId: number; readonly kid: string; readonly jws: string } | true;
    }
  | { readonly ok: false; readonly reason: 'REPLAY_DETECTED' | 'UNTRUSTED_ROOT' }
  /** The caller's API key was revoked since it was cached: a 401, nothing recorded. */
  | { readonly ok: false; readonly reason: 'KEY_REVOKED' }
  | { readonly ok: false; readonly reason: 'RECEIPT_REVOKED'; readonly hash: string }
  | { readonly ok: false; readonly reason: 'CALLS_EXHAUSTED' | 'BUDGET_EXHAUSTED'; readonly state: ChainRuntimeState }
  | { readonly ok: false; readonly reason: 'BUNDLE_INCOMPLETE'; readonly hash: string }
  /** Refused by the tool gate inside the statement (see ToolGateRefusal). */
  | { readonly ok: false; readonly reason: 'TOOL_GATE'; readonly refusal: ToolGateRefusal };

/** What the service decided the tool gate on; the statement re-checks it (migration 0005_tool_gate). */
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
    | 'TOOL_RATE_LIMITED';
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

const VERIFY_COUNT_SQL = 'select baton_verify_count($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::text::jsonb) as r';
// The violations travel as JSON text: a driver given a jsonb parameter would JSON-encode the text again.
const RECORD_DENIAL_SQL = 'select baton_record_denial($1, $2, $3, $4, $5, $6, $7, $8, $9::text::jsonb, $10, $11, $12) as r';

/** What baton_verify_count answers (jsonb): o = the outcome, s = [hash, calls_used, spend] per DR. */
interface CountAnswer {
  readonly o: 'ALLOWED' | 'RETRY' | 'REPLAY_DETECTED' | 'UNTRUSTED_ROOT' | 'KEY_REVOKED' | 'RECEIPT_REVOKED' | 'BUNDLE_INCOMPLETE';
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
}

/** The one jsonb value a hot-path statement returns (postgres.js and PGlite both parse jsonb). */
async function answerOf<T>(query: RawQuery, text: string, params: readonly unknown[]): Promise<T> {
  const [row] = await query(text, params);
  const r = row?.['r'];
  if (r === undefined || r === null) throw new Error('a hot-path statement returned no answer');
  return (typeof r === 'string' ? JSON.parse(r) : r) as T;
}

/**
 * The allow path of /verify, all or nothing, in one statement. Returns the
 * chain state after counting, or why it was refused (then nothing was written).
 */
export async function countCallsAtomically(
  query: RawQuery,
  inv: InvocationToCount,
  /** Signed before the statement, stored by it: an allow is never committed without its receipt. */
  receipt: { kind: ReceiptKind; jws: string; kid: string },
  /** The chain's immutable limits (from a cache or a read); counters come from the statement. */
  limits: readonly ChainLimits[],
  /** Root of the chain, re-checked as trusted by the statement. */
  rootDid: string,
  /** After this the caller no longer waits: the statement refuses to run or commit (SQLSTATE 57014). */
  deadline: Date,
  /** The tool gate's inputs; null when the tenant has no catalog. */
  gate: ToolGateParams | null = null,
): Promise<CountOutcome> {
  const answer = await answerOf<CountAnswer | BlockedAnswer | ToolGateRefusal>(query, VERIFY_COUNT_SQL, [
    deadline.toISOString(),
    inv.tenantId,
    inv.callerKeyId,
    rootDid,
    inv.drChain,
    inv.jti,
    inv.hash,
    inv.jws,
    inv.tool,
    inv.estimatedMicros,
    receipt.jws,
    receipt.kid,
    gate === null ? null : JSON.stringify(gate),
  ]);
  const byHash = new Map(limits.map((l) => [l.hash, l]));
  const limitsOf = (hash: string): ChainLimits => byHash.get(hash) ?? { hash, depth: 0, maxCalls: null, maxSpendMicros: null };
  const stateOf = (s: CountAnswer['s']): ChainRuntimeState[] =>
    (s ?? [])
      .map(([hash, calls, spend]) => ({ ...limitsOf(hash), revoked: false, callsUsed: Number(calls), spendReservedMicros: Number(spend) }))
      .sort((a, b) => a.depth - b.depth);
  switch (answer.o) {
    case 'ALLOWED':
      return { ok: true, state: stateOf(answer.s), receiptId: Number(answer.rid) };
    case 'RETRY':
      return { ok: true, state: stateOf(answer.s), retry: { receiptId: Number(answer.rid), kid: answer.kid!, jws: answer.jws! } };
    case 'CALLS_EXHAUSTED':
    case 'BUDGET_EXHAUSTED':
      return {
        ok: false,
        reason: answer.o,
        state: { ...limitsOf(answer.h), revoked: false, callsUsed: Number(answer.c), spendReservedMicros: Number(answer.sp) },
      };
    case 'RECEIPT_REVOKED':
    case 'BUNDLE_INCOMPLETE':
      return { ok: false, reason: answer.o, hash: answer.h! };
    case 'REPLAY_DETECTED':
    case 'UNTRUSTED_ROOT':
    case 'KEY_REVOKED':
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
  readonly receipt: { readonly subject: string; readonly jws: string; readonly kid: string };
}

/**
 * Stores a refusal and its receipt in one statement. Returns false (and
 * stores nothing) when the API key was revoked since it was cached.
 */
export async function recordDenial(query: RawQuery, d: DenialToRecord, deadline: Date): Promise<boolean> {
  const answer = await answerOf<{ o: 'DENIED' | 'KEY_REVOKED' }>(query, RECORD_DENIAL_SQL, [
    deadline.toISOString(),
    d.tenantId,
    d.callerKeyId,
    d.jti,
    d.invocationHash,
    d.code,
    d.block,
    d.drChain,
    JSON.stringify(d.violations),
    d.receipt.subject,
    d.receipt.jws,
    d.receipt.kid,
  ]);
  return answer.o === 'DENIED';
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
