// Tenants and the root DIDs each tenant trusts. Query functions only: they
// report what they found as data; the service decides what that means in HTTP.
import { and, asc, eq, ne, sql } from 'drizzle-orm';
import { transactionBehind, type CommitCheck, type Db } from './db.js';
import { newId } from './ids.js';
import { delegations, tenants, trustedRoots, type Tenant, type TrustedRoot } from './schema/index.js';

export async function createTenant(db: Db, name: string): Promise<Tenant> {
  const [row] = await db
    .insert(tenants)
    .values({ id: newId('ten'), name })
    .returning();
  if (!row) throw new Error('createTenant: INSERT … RETURNING gave no row');
  return row;
}

/** Oldest first; ties broken by id so the order is stable. */
export function listTenants(db: Db): Promise<Tenant[]> {
  return db.select().from(tenants).orderBy(asc(tenants.createdAt), asc(tenants.id));
}

export async function findTenant(db: Db, id: string): Promise<Tenant | undefined> {
  const [row] = await db.select().from(tenants).where(eq(tenants.id, id)).limit(1);
  return row;
}

export type AddTrustedRootResult =
  | { kind: 'created'; root: TrustedRoot }
  /** The tenant already trusts this DID: the stored row, unchanged (label included). */
  | { kind: 'existing'; root: TrustedRoot }
  | { kind: 'no-tenant' }
  /**
   * Another tenant trusts this DID. A DR belongs to its root's tenant, so one
   * root DID may belong to one tenant only; otherwise a chain's owner is ambiguous.
   */
  | { kind: 'other-tenant' }
  | { kind: 'records-elsewhere' };

/**
 * Trusts `did` as a root of `tenantId`. Serialised per DID with a transaction-
 * scoped advisory lock, so two concurrent adds of one DID to two tenants cannot
 * both pass the "no other tenant trusts it" check.
 */
export function addTrustedRoot(
  db: Db,
  tenantId: string,
  did: string,
  label: string | null,
  gate?: CommitCheck,
): Promise<AddTrustedRootResult> {
  return transactionBehind(db, gate, async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`baton:trusted-root:${did}`}, 0))`);
    const [tenant] = await tx.select({ id: tenants.id }).from(tenants).where(eq(tenants.id, tenantId)).limit(1);
    if (!tenant) return { kind: 'no-tenant' } as const;
    const holders = await tx.select().from(trustedRoots).where(eq(trustedRoots.did, did));
    const own = holders.find((r) => r.tenantId === tenantId);
    if (own) return { kind: 'existing', root: own } as const;
    if (holders.length > 0) return { kind: 'other-tenant' } as const;
    // Delegations rooted at this DID that another tenant stored keep their counters, revocations and
    // used jtis there (every one keyed by tenant): trusting it here would start them all afresh.
    const elsewhere = await tx
      .select({ hash: delegations.hash })
      .from(delegations)
      .where(and(eq(delegations.iss, did), eq(delegations.depth, 0), ne(delegations.tenantId, tenantId)))
      .limit(1);
    if (elsewhere.length > 0) return { kind: 'records-elsewhere' } as const;
    const [root] = await tx.insert(trustedRoots).values({ tenantId, did, label }).returning();
    if (!root) throw new Error('addTrustedRoot: INSERT … RETURNING gave no row');
    return { kind: 'created', root } as const;
  });
}

export function listTrustedRoots(db: Db, tenantId: string): Promise<TrustedRoot[]> {
  return db
    .select()
    .from(trustedRoots)
    .where(eq(trustedRoots.tenantId, tenantId))
    .orderBy(asc(trustedRoots.createdAt), asc(trustedRoots.did));
}

/** True when a row was removed; false when the tenant did not trust this DID (or does not exist). */
export async function removeTrustedRoot(db: Db, tenantId: string, did: string): Promise<boolean> {
  const removed = await db
    .delete(trustedRoots)
    .where(and(eq(trustedRoots.tenantId, tenantId), eq(trustedRoots.did, did)))
    .returning({ did: trustedRoots.did });
  return removed.length > 0;
}
