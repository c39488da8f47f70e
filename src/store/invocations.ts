/**
 * Reads over allowed invocations, recorded denials and the receipts and
 * actuals attached to them. Every query is scoped by tenant.
 */
import { and, asc, desc, eq, inArray, sql } from 'drizzle-orm';
import type { Db } from './db.js';
import { actuals, denials, invocations, type Actual, type Denial, type Invocation } from './schema/index.js';

export async function findInvocation(db: Db, tenantId: string, jti: string): Promise<Invocation | undefined> {
  const [row] = await db
    .select()
    .from(invocations)
    .where(and(eq(invocations.tenantId, tenantId), eq(invocations.jti, jti)))
    .limit(1);
  return row;
}

/** Recorded denials of a jti, oldest first (bounded). */
export async function denialsOf(db: Db, tenantId: string, jti: string, limit: number): Promise<Denial[]> {
  return db
    .select()
    .from(denials)
    .where(and(eq(denials.tenantId, tenantId), eq(denials.jti, jti)))
    .orderBy(asc(denials.id))
    .limit(limit);
}

export async function actualsOf(db: Db, tenantId: string, jtis: readonly string[]): Promise<Map<string, Actual>> {
  if (jtis.length === 0) return new Map();
  const found = await db
    .select()
    .from(actuals)
    .where(and(eq(actuals.tenantId, tenantId), inArray(actuals.jti, [...jtis])));
  return new Map(found.map((a) => [a.jti, a]));
}

export { firstReceipts, type ReceiptRef } from './receipts.js';

/**
 * Keyset position: created_at with its full microsecond precision (as UTC
 * text, since a JS Date keeps only milliseconds) and the jti breaking ties.
 */
export interface InvocationKey {
  readonly createdAt: string;
  readonly jti: string;
}

/** created_at as 'YYYY-MM-DDTHH:MM:SS.ffffffZ', exact to the microsecond. */
const createdAtText = sql<string>`to_char(${invocations.createdAt} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

export type InvocationWithKey = Invocation & { readonly key: InvocationKey };

/**
 * One page of the invocations made through `hash` (any DR of its subtree:
 * dr_chain contains it), newest first, strictly after `after` in that order.
 * Returns limit + 1 rows at most so the caller can tell whether more follow.
 */
export async function invocationsThrough(
  db: Db,
  tenantId: string,
  hash: string,
  after: InvocationKey | null,
  limit: number,
): Promise<InvocationWithKey[]> {
  const conditions = [eq(invocations.tenantId, tenantId), sql`${invocations.drChain} @> array[${hash}]::text[]`];
  if (after) conditions.push(sql`(${invocations.createdAt}, ${invocations.jti}) < (${after.createdAt}::timestamptz, ${after.jti})`);
  const found = await db
    .select({ row: invocations, createdAtText })
    .from(invocations)
    .where(and(...conditions))
    .orderBy(desc(invocations.createdAt), desc(invocations.jti))
    .limit(limit + 1);
  return found.map((f) => ({ ...f.row, key: { createdAt: f.createdAtText, jti: f.row.jti } }));
}
