// Queries for the keys the service itself holds: its service-receipt signing keys
// (service_keys) and the tenants' custodial root keys (custodial_keys).
// Seeds are only ever stored sealed (src/service/secrets.ts); nothing here
// sees plaintext.
import { and, asc, desc, eq, isNull } from 'drizzle-orm';
import type { Db } from './db.js';
import { inExistingTenant } from './errors.js';
import { custodialKeys, serviceKeys, trustedRoots, type CustodialKey, type ServiceKey } from './schema/index.js';

/** The one active (not retired) signing key, if any. */
export async function activeServiceKey(db: Db): Promise<ServiceKey | undefined> {
  const [row] = await db.select().from(serviceKeys).where(isNull(serviceKeys.retiredAt)).limit(1);
  return row;
}

/** The signing key `kid`, active or retired. */
export async function serviceKeyByKid(db: Db, kid: string): Promise<ServiceKey | undefined> {
  const [row] = await db.select().from(serviceKeys).where(eq(serviceKeys.kid, kid)).limit(1);
  return row;
}

/**
 * Inserts a new active signing key. Throws a unique violation
 * (service_keys_one_active_uq) when another active key exists already.
 */
export async function insertServiceKey(
  db: Db,
  row: { kid: string; publicKey: string; encryptedSeed: string; createdAt?: Date },
): Promise<ServiceKey> {
  const [inserted] = await db.insert(serviceKeys).values(row).returning();
  if (!inserted) throw new Error('insert into service_keys returned no row');
  return inserted;
}

/** Retires the active key (if any) at `at`; returns the retired kid. */
export async function retireActiveServiceKey(db: Db, at: Date): Promise<string | undefined> {
  const [row] = await db
    .update(serviceKeys)
    .set({ retiredAt: at })
    .where(isNull(serviceKeys.retiredAt))
    .returning({ kid: serviceKeys.kid });
  return row?.kid;
}

/** Every signing key, current first, then retired ones newest first. Public columns only. */
export async function listServiceKeys(db: Db): Promise<Pick<ServiceKey, 'kid' | 'publicKey' | 'createdAt' | 'retiredAt'>[]> {
  return db
    .select({
      kid: serviceKeys.kid,
      publicKey: serviceKeys.publicKey,
      createdAt: serviceKeys.createdAt,
      retiredAt: serviceKeys.retiredAt,
    })
    .from(serviceKeys)
    .orderBy(desc(isNull(serviceKeys.retiredAt)), desc(serviceKeys.createdAt), asc(serviceKeys.kid));
}

export async function findCustodialKey(db: Db, tenantId: string): Promise<CustodialKey | undefined> {
  const [row] = await db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, tenantId)).limit(1);
  return row;
}

/**
 * Inserts the tenant's custodial key unless one exists (a concurrent first
 * use may have won: it then waits for that insert and returns undefined).
 */
export async function insertCustodialKeyIfAbsent(
  db: Db,
  row: { tenantId: string; did: string; encryptedSeed: string },
): Promise<CustodialKey | undefined> {
  const [inserted] = await inExistingTenant(() =>
    db.insert(custodialKeys).values(row).onConflictDoNothing({ target: custodialKeys.tenantId }).returning(),
  );
  return inserted;
}

/** Trusts `did` as a root of the tenant (idempotent). */
export async function trustRoot(db: Db, tenantId: string, did: string, label: string): Promise<void> {
  await db.insert(trustedRoots).values({ tenantId, did, label }).onConflictDoNothing();
}

export async function isTrustedRoot(db: Db, tenantId: string, did: string): Promise<boolean> {
  const [row] = await db
    .select({ did: trustedRoots.did })
    .from(trustedRoots)
    .where(and(eq(trustedRoots.tenantId, tenantId), eq(trustedRoots.did, did)))
    .limit(1);
  return row !== undefined;
}
