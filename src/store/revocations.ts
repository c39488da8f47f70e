/**
 * Revocation of stored delegation records.
 *
 * Revocation marks one row; descendants are denied because verification
 * checks every DR of a chain (and the counting transaction re-reads that
 * status from the shared database), so nothing else needs writing. The
 * mark is set once: a second revocation never moves revoked_at or the reason.
 */
import { and, eq, sql } from 'drizzle-orm';
import type { Db } from './db.js';
import { rows } from './rows.js';
import { delegations } from './schema/index.js';

export interface RevocationMark {
  readonly revokedAt: Date;
  readonly reason: string | null;
  /** True when this call set the mark; false when it was already set. */
  readonly newly: boolean;
}

/** What a revocation reads of a stored DR before it locks anything (applyRevocation). */
export interface RevocationTarget {
  /** The root of the record's chain, under which the approvals through it are found (endApprovalsThrough): fixed once stored, so read without a lock. */
  readonly rootHash: string;
  /** Whether a revocation of it has committed (read without a lock: markRevoked reads it again under one). */
  readonly revoked: boolean;
}

/**
 * The root of the DR's chain and whether it is revoked, unlocked; undefined when the tenant holds no
 * such DR. A revocation takes its root's approvals lock before the record's row lock (markRevoked),
 * so it needs the root first: holding the record while it queued for that lock held up every verify
 * through the record and its descendants (an outside review measured 1.8 s behind a 2 s ask).
 */
export async function revocationTarget(db: Db, tenantId: string, hash: string): Promise<RevocationTarget | undefined> {
  const [found] = await db
    .select({ rootHash: delegations.rootHash, revoked: sql<boolean>`${delegations.revokedAt} is not null` })
    .from(delegations)
    .where(and(eq(delegations.tenantId, tenantId), eq(delegations.hash, hash)))
    .limit(1);
  return found;
}

/**
 * Sets revoked_at/revoked_reason on the DR unless already set. Returns the
 * mark as stored (the original one when it was already revoked), or
 * undefined when the tenant holds no such DR.
 *
 * The row is locked first, and revoked_at is the database's clock read after
 * that lock is held. Every verify that counted a call through this DR held a
 * lock on its row and committed before ours was granted, and an invocation's
 * created_at is its transaction's start, so every call allowed through the DR
 * was created before its revoked_at: an auditor comparing the two columns sees
 * no call "allowed after the revocation" (a mark set from the node's clock, in
 * whole seconds, was up to a second early). A concurrent revocation waits and
 * then sees the first one's mark.
 */
export async function markRevoked(db: Db, tenantId: string, hash: string, reason: string | null): Promise<RevocationMark | undefined> {
  const thisRow = and(eq(delegations.tenantId, tenantId), eq(delegations.hash, hash));
  const [locked] = await db
    .select({ revokedAt: delegations.revokedAt, reason: delegations.revokedReason })
    .from(delegations)
    .where(thisRow)
    .limit(1)
    // FOR UPDATE, not NO KEY UPDATE: it must wait for a submission under this DR, which locks its
    // chain FOR KEY SHARE (firstRevokedLocked), so the record is counted here or refused there.
    .for('update');
  if (!locked) return undefined;
  if (locked.revokedAt) return { revokedAt: locked.revokedAt, reason: locked.reason, newly: false };
  const [set] = await db
    .update(delegations)
    // Rounded up to the millisecond, the precision the API and the signed receipt carry: shown, it is
    // still later than every counted call (PostgreSQL keeps microseconds; a value cut down was not).
    .set({ revokedAt: sql`date_trunc('milliseconds', clock_timestamp()) + interval '1 millisecond'`, revokedReason: reason })
    .where(thisRow)
    .returning({ revokedAt: delegations.revokedAt, reason: delegations.revokedReason });
  if (!set?.revokedAt) throw new Error(`the revocation mark of ${hash} was not written under its row lock`);
  return { revokedAt: set.revokedAt, reason: set.reason, newly: true };
}

/** Issuer and holder of one stored DR: what deciding who may revoke needs. */
export interface ChainPartyRow {
  readonly hash: string;
  readonly iss: string;
  readonly aud: string;
}

/**
 * For every tenant holding `hash`: the parties of its chain, root first,
 * `hash` last. One query, whether the hash is stored or not.
 */
export async function chainPartiesByTenant(db: Db, hash: string): Promise<Map<string, ChainPartyRow[]>> {
  const found = await rows<{ tenant_id: string; hash: string; iss: string; aud: string }>(
    db,
    sql`select t.tenant_id, c.hash, c.iss, c.aud
          from delegations t
          join delegations c on c.tenant_id = t.tenant_id and (c.hash = t.hash or c.hash = any(t.ancestors))
         where t.hash = ${hash}
         order by t.tenant_id, c.depth`,
  );
  const out = new Map<string, ChainPartyRow[]>();
  for (const r of found) {
    const chain = out.get(r.tenant_id) ?? [];
    chain.push({ hash: r.hash, iss: r.iss, aud: r.aud });
    out.set(r.tenant_id, chain);
  }
  return out;
}

/** Number of DRs below `hash` (its subtree without itself). */
export async function countDescendants(db: Db, tenantId: string, hash: string): Promise<number> {
  const [r] = await rows<{ n: number | string }>(
    db,
    sql`select count(*)::int as n from delegations where tenant_id = ${tenantId} and ancestors @> array[${hash}]::text[]`,
  );
  return Number(r?.n ?? 0);
}
