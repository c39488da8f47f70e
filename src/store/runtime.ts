/**
 * Block G: the runtime state no stateless verifier can keep, decided
 * atomically in PostgreSQL.
 *
 * One transaction per allowed invocation: check revocation, insert the
 * invocation (its jti is the primary key, so a replay cannot insert twice),
 * then increment every counted DR with a conditional UPDATE after locking
 * the rows root-to-leaf (every chain locks in that order, so no deadlocks).
 * If any DR is at its ceiling the UPDATE skips it and the whole transaction
 * rolls back: nothing is consumed. There is no read-then-write: the ceiling
 * is checked by the same statement that increments.
 */
import { and, eq, inArray, sql } from 'drizzle-orm';
import type { RecordHash } from '../protocol/hash.js';
import type { Db } from './db.js';
import { rows } from './rows.js';
import { insertReceipt } from './receipts.js';
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
  | { readonly ok: true; readonly state: readonly ChainRuntimeState[]; readonly receiptId?: number }
  | { readonly ok: false; readonly reason: 'REPLAY_DETECTED' }
  | { readonly ok: false; readonly reason: 'RECEIPT_REVOKED'; readonly hash: string }
  | { readonly ok: false; readonly reason: 'CALLS_EXHAUSTED' | 'BUDGET_EXHAUSTED'; readonly state: ChainRuntimeState }
  | { readonly ok: false; readonly reason: 'BUNDLE_INCOMPLETE'; readonly hash: string };

/** Signals a deny from inside the transaction so that it rolls back. */
class Rollback extends Error {
  constructor(readonly outcome: Extract<CountOutcome, { ok: false }>) {
    super(outcome.reason);
  }
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

/** Whether a stored DR limits calls or spend, i.e. needs its row updated per call. */
export function isMetered(s: Pick<ChainRuntimeState, 'maxCalls' | 'maxSpendMicros'>): boolean {
  return s.maxCalls !== null || s.maxSpendMicros !== null;
}

/**
 * The allow path of /verify, all or nothing. Returns the chain state after
 * counting, or why it was denied (in which case nothing was written).
 */
export async function countCallsAtomically(
  db: Db,
  inv: InvocationToCount,
  /** Signed before the transaction, stored inside it: an allow is never committed without its receipt. */
  receipt?: { tenantId: string; kind: ReceiptKind; subject: string; jws: string; kid: string },
  /**
   * The chain's rows as read just before (saves a statement on the hot path).
   * Only their immutable limits are trusted: revocation is re-checked under
   * the row locks below and counters come from the UPDATE itself.
   */
  known?: readonly ChainRuntimeState[],
): Promise<CountOutcome> {
  try {
    return await db.transaction(async (tx) => {
      const before =
        known && inv.drChain.every((h) => known.some((s) => s.hash === h))
          ? [...known].sort((a, b) => a.depth - b.depth)
          : await readChainState(tx, inv.tenantId, inv.drChain);
      const missing = inv.drChain.find((h) => !before.some((s) => s.hash === h));
      if (missing) throw new Rollback({ ok: false, reason: 'BUNDLE_INCOMPLETE', hash: missing });
      const revoked = before.find((s) => s.revoked);
      if (revoked) throw new Rollback({ ok: false, reason: 'RECEIPT_REVOKED', hash: revoked.hash });

      const inserted = await tx
        .insert(invocations)
        .values({
          tenantId: inv.tenantId,
          jti: inv.jti,
          hash: inv.hash,
          jws: inv.jws,
          leafHash: inv.drChain[inv.drChain.length - 1]!,
          drChain: [...inv.drChain],
          tool: inv.tool,
          estimatedMicros: inv.estimatedMicros,
          callerKeyId: inv.callerKeyId,
        })
        .onConflictDoNothing()
        .returning({ jti: invocations.jti });
      if (inserted.length === 0) throw new Rollback({ ok: false, reason: 'REPLAY_DETECTED' });

      const receiptId = receipt ? await insertReceipt(tx, receipt) : undefined;
      const metered = before.filter(isMetered).map((s) => s.hash);
      const unmetered = before.filter((s) => !isMetered(s)).map((s) => s.hash);

      // Revocation must be decided against committed state that cannot
      // change before we commit: share-lock the unmetered rows (a revoke's
      // UPDATE waits for us, and we wait for a revoke in flight); metered
      // rows are locked below and re-checked by the same UPDATE. Shared
      // locks never conflict between verifies, and metered-ness is fixed per
      // row, so verifies cannot deadlock on each other here.
      if (unmetered.length > 0) {
        const locked = await rows<{ hash: string; revoked: boolean }>(
          tx,
          sql`select hash, revoked_at is not null as revoked from delegations
              where tenant_id = ${inv.tenantId} and hash = any(${sqlTextArray(unmetered)})
              order by depth
              for share`,
        );
        const revokedNow = locked.find((r) => r.revoked);
        if (revokedNow) throw new Rollback({ ok: false, reason: 'RECEIPT_REVOKED', hash: revokedNow.hash });
      }
      if (metered.length === 0) return { ok: true, state: before, ...(receiptId !== undefined ? { receiptId } : {}) };

      // Lock the metered rows root-to-leaf, then increment only where every
      // ceiling still holds. A skipped row means that DR is exhausted.
      // NO KEY UPDATE, not UPDATE: the invocation insert above holds a KEY
      // SHARE lock on the leaf (its foreign key), which FOR UPDATE would wait
      // on while another transaction waits for our root lock: a deadlock.
      const updated = await rows<{ hash: string; calls_used: string | number; spend_reserved_micros: string | number }>(
        tx,
        sql`with locked as (
              select hash from delegations
              where tenant_id = ${inv.tenantId} and hash = any(${sqlTextArray(metered)})
              order by depth
              for no key update
            )
            update delegations d
               set calls_used = d.calls_used + case when d.max_calls is null then 0 else 1 end,
                   spend_reserved_micros = d.spend_reserved_micros
                     + case when d.max_spend_micros is null then 0 else ${inv.estimatedMicros}::bigint end
              from locked
             where d.tenant_id = ${inv.tenantId}
               and d.hash = locked.hash
               and d.revoked_at is null
               and (d.max_calls is null or d.calls_used < d.max_calls)
               and (d.max_spend_micros is null or d.spend_reserved_micros + ${inv.estimatedMicros}::bigint <= d.max_spend_micros)
            returning d.hash, d.calls_used::text as calls_used, d.spend_reserved_micros::text as spend_reserved_micros`,
      );
      if (updated.length !== metered.length) {
        // The decision is made; re-read the (now locked) rows only to say which DR refused and why.
        const ok = new Set(updated.map((u) => u.hash));
        const current = await readChainState(tx, inv.tenantId, metered);
        const blocked = current.find((s) => !ok.has(s.hash))!;
        if (blocked.revoked) throw new Rollback({ ok: false, reason: 'RECEIPT_REVOKED', hash: blocked.hash });
        const callsOut = blocked.maxCalls !== null && blocked.callsUsed >= blocked.maxCalls;
        throw new Rollback({ ok: false, reason: callsOut ? 'CALLS_EXHAUSTED' : 'BUDGET_EXHAUSTED', state: blocked });
      }
      const after = new Map(updated.map((u) => [u.hash, u]));
      return {
        ok: true,
        ...(receiptId !== undefined ? { receiptId } : {}),
        state: before.map((s) => {
          const u = after.get(s.hash);
          return u ? { ...s, callsUsed: Number(u.calls_used), spendReservedMicros: Number(u.spend_reserved_micros) } : s;
        }),
      };
    });
  } catch (e) {
    if (e instanceof Rollback) return e.outcome;
    throw e;
  }
}

/**
 * What countCallsAtomically would decide, read-only: for dry runs, which
 * must run every check yet consume nothing.
 */
export async function predictCount(
  db: Db,
  inv: Pick<InvocationToCount, 'tenantId' | 'jti' | 'drChain' | 'estimatedMicros'>,
  /** Fresh state of verified DRs not stored yet (a dry run stores nothing). */
  unstored: readonly ChainRuntimeState[] = [],
): Promise<CountOutcome> {
  const state = [...(await readChainState(db, inv.tenantId, inv.drChain)), ...unstored].sort((a, b) => a.depth - b.depth);
  const missing = inv.drChain.find((h) => !state.some((s) => s.hash === h));
  if (missing) return { ok: false, reason: 'BUNDLE_INCOMPLETE', hash: missing };
  const revoked = state.find((s) => s.revoked);
  if (revoked) return { ok: false, reason: 'RECEIPT_REVOKED', hash: revoked.hash };
  const [used] = await db
    .select({ jti: invocations.jti })
    .from(invocations)
    .where(and(eq(invocations.tenantId, inv.tenantId), eq(invocations.jti, inv.jti)))
    .limit(1);
  if (used) return { ok: false, reason: 'REPLAY_DETECTED' };
  for (const s of state) {
    if (s.maxCalls !== null && s.callsUsed >= s.maxCalls) return { ok: false, reason: 'CALLS_EXHAUSTED', state: s };
    if (s.maxSpendMicros !== null && s.spendReservedMicros + inv.estimatedMicros > s.maxSpendMicros) {
      return { ok: false, reason: 'BUDGET_EXHAUSTED', state: s };
    }
  }
  return { ok: true, state };
}

/** A text[] parameter that both drivers bind the same way. */
function sqlTextArray(values: readonly string[]) {
  return sql`array[${sql.join(
    values.map((v) => sql`${v}`),
    sql`, `,
  )}]::text[]`;
}
