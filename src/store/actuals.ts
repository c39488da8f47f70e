/**
 * Metered actuals: one per invocation (the primary key), held apart from the
 * estimates declared at verify time.
 *
 * delegations.spend_reserved_micros holds, on every DR with a budget, the
 * metered actuals plus the estimates of not-yet-metered invocations in its
 * subtree. Recording a metered actual swaps that invocation's estimate for
 * its cost; an 'unavailable' actual leaves the estimate reserved.
 */
import { and, eq, sql } from 'drizzle-orm';
import { MAX_EXACT_MICROS } from '../protocol/money.js';
import type { Db } from './db.js';
import { rows } from './rows.js';
import type { ActualSource } from '../protocol/lists.js';
import { actuals, type Actual } from './schema/index.js';

export interface ActualToRecord {
  readonly tenantId: string;
  readonly jti: string;
  readonly costMicros: number | null;
  readonly tokensIn: number | null;
  readonly tokensOut: number | null;
  readonly source: ActualSource;
  readonly unavailableReason: string | null;
  readonly bodyHash: string;
}

/** Inserts the actual unless one exists for the invocation; true when inserted. */
export async function insertActual(db: Db, a: ActualToRecord): Promise<boolean> {
  const inserted = await db.insert(actuals).values(a).onConflictDoNothing().returning({ jti: actuals.jti });
  return inserted.length === 1;
}

export async function findActual(db: Db, tenantId: string, jti: string): Promise<Actual | undefined> {
  const [row] = await db
    .select()
    .from(actuals)
    .where(and(eq(actuals.tenantId, tenantId), eq(actuals.jti, jti)))
    .limit(1);
  return row;
}

/**
 * Adds `deltaMicros` (negative when the cost came in under the estimate) to
 * spend_reserved_micros of every budgeted DR in `chain`, locking the rows
 * root-to-leaf like the counting transaction does, so the two never deadlock.
 * Never below zero and never above MAX_EXACT_MICROS (so the counter always
 * reads back exactly and still denies): a recorded fact must never fail on a
 * constraint or an overflow.
 */
export async function adjustReservedSpend(db: Db, tenantId: string, chain: readonly string[], deltaMicros: number): Promise<number> {
  if (deltaMicros === 0 || chain.length === 0) return 0;
  const updated = await rows<{ hash: string }>(
    db,
    sql`with locked as (
          select hash from delegations
           where tenant_id = ${tenantId}
             and hash = any(array[${sql.join(
               chain.map((h) => sql`${h}`),
               sql`, `,
             )}]::text[])
             and max_spend_micros is not null
           order by depth
           -- NO KEY UPDATE, the UPDATE's own lock (no key changes): FOR UPDATE made a cost report
           -- and a submission under the same budgeted DR (its chain locked FOR KEY SHARE) take turns.
           for no key update
        )
        update delegations d
           set spend_reserved_micros = least(${MAX_EXACT_MICROS}::bigint, greatest(0, d.spend_reserved_micros + ${deltaMicros}::bigint))
          from locked
         where d.tenant_id = ${tenantId} and d.hash = locked.hash
        returning d.hash`,
  );
  return updated.length;
}
