/**
 * Queries over stored delegation records. Every query is scoped by tenant:
 * a DR belongs to its root's tenant and is never visible to another.
 */
import { and, asc, eq, inArray, sql } from 'drizzle-orm';
import type { VerifiedDelegation } from '../protocol/chain.js';
import { saturatingMicros, usdToMicros } from '../protocol/money.js';
import type { Policy } from '../protocol/policy.js';
import type { Db } from './db.js';
import { rows } from './rows.js';
import { delegations, trustedRoots, type Delegation } from './schema/index.js';

export async function findDelegation(db: Db, tenantId: string, hash: string): Promise<Delegation | undefined> {
  const [row] = await db
    .select()
    .from(delegations)
    .where(and(eq(delegations.tenantId, tenantId), eq(delegations.hash, hash)))
    .limit(1);
  return row;
}

/** Tenants holding a DR with this hash (a parent may be stored for more than one tenant). */
export async function tenantsHoldingDelegation(db: Db, hash: string): Promise<string[]> {
  const found = await db.select({ tenantId: delegations.tenantId }).from(delegations).where(eq(delegations.hash, hash));
  return found.map((r) => r.tenantId);
}

/** Each tenant holding a DR with this hash, with the DR's holder (aud: the same in every tenant, the hash pins the record). */
export async function holdersOfDelegation(db: Db, hash: string): Promise<{ tenantId: string; aud: string }[]> {
  return db.select({ tenantId: delegations.tenantId, aud: delegations.aud }).from(delegations).where(eq(delegations.hash, hash));
}

export async function tenantsTrustingRoot(db: Db, did: string): Promise<string[]> {
  const found = await db.select({ tenantId: trustedRoots.tenantId }).from(trustedRoots).where(eq(trustedRoots.did, did));
  return found.map((r) => r.tenantId);
}

export async function trustedRootsOf(db: Db, tenantId: string): Promise<Set<string>> {
  const found = await db.select({ did: trustedRoots.did }).from(trustedRoots).where(eq(trustedRoots.tenantId, tenantId));
  return new Set(found.map((r) => r.did));
}

/** The stored chain root→`hash` (inclusive), ordered by depth; empty if `hash` is unknown. */
export async function storedChainTo(db: Db, tenantId: string, hash: string): Promise<Delegation[]> {
  const leaf = await findDelegation(db, tenantId, hash);
  if (!leaf) return [];
  if (leaf.ancestors.length === 0) return [leaf];
  const ancestors = await db
    .select()
    .from(delegations)
    .where(and(eq(delegations.tenantId, tenantId), inArray(delegations.hash, leaf.ancestors)))
    .orderBy(asc(delegations.depth));
  return [...ancestors, leaf];
}

/** Stored rows for a list of hashes, keyed by hash. */
export async function delegationsByHash(db: Db, tenantId: string, hashes: readonly string[]): Promise<Map<string, Delegation>> {
  if (hashes.length === 0) return new Map();
  const found = await db
    .select()
    .from(delegations)
    .where(and(eq(delegations.tenantId, tenantId), inArray(delegations.hash, [...hashes])));
  return new Map(found.map((r) => [r.hash, r]));
}

/** The ceilings a DR's row enforces at run time, as insertDelegation stores them. */
export function runtimeLimits(policy: Policy): { maxCalls: number | null; maxSpendMicros: number | null } {
  return {
    maxCalls: policy.max_calls ?? null,
    maxSpendMicros: policy.max_spend_usd === undefined ? null : usdToMicros(policy.max_spend_usd, 'floor'),
  };
}

/**
 * Inserts a verified DR under its (already stored) parent. Returns false when
 * a row with the same (tenant, hash) or (tenant, iss, jti) already exists;
 * the caller tells the two apart.
 */
export async function insertDelegation(
  db: Db,
  tenantId: string,
  dr: VerifiedDelegation,
  parent: Pick<Delegation, 'hash' | 'rootHash' | 'ancestors' | 'depth'> | null,
): Promise<boolean> {
  const p = dr.payload;
  const inserted = await db
    .insert(delegations)
    .values({
      tenantId,
      hash: dr.hash,
      jws: dr.jws,
      jti: p.jti,
      iss: p.iss,
      sub: p.sub,
      aud: p.aud,
      cmd: p.cmd,
      policy: p.policy as Record<string, unknown>,
      nbf: p.nbf,
      exp: p.exp,
      iat: p.iat,
      parentHash: parent?.hash ?? null,
      rootHash: parent?.rootHash ?? dr.hash,
      depth: parent ? parent.depth + 1 : 0,
      ancestors: parent ? [...parent.ancestors, parent.hash] : [],
      ...runtimeLimits(p.policy),
    })
    .onConflictDoNothing()
    .returning({ hash: delegations.hash });
  return inserted.length === 1;
}

/**
 * Hashes of those `drs` whose (iss, jti) a stored DR of the tenant already
 * uses under another hash: what insertDelegation would refuse, found without
 * writing.
 */
export async function jtisTakenByOthers(db: Db, tenantId: string, drs: readonly VerifiedDelegation[]): Promise<Set<string>> {
  if (drs.length === 0) return new Set();
  const found = await db
    .select({ hash: delegations.hash, iss: delegations.iss, jti: delegations.jti })
    .from(delegations)
    .where(
      and(
        eq(delegations.tenantId, tenantId),
        inArray(delegations.iss, [...new Set(drs.map((d) => d.payload.iss))]),
        inArray(delegations.jti, [...new Set(drs.map((d) => d.payload.jti))]),
      ),
    );
  return new Set(
    drs.filter((d) => found.some((r) => r.iss === d.payload.iss && r.jti === d.payload.jti && r.hash !== d.hash)).map((d) => d.hash),
  );
}

/** What a tree node shows of a record: not its JWS (GET /v1/delegations/{hash} has it), nor its revocation's reason. */
const treeColumns = {
  hash: delegations.hash,
  jti: delegations.jti,
  iss: delegations.iss,
  sub: delegations.sub,
  aud: delegations.aud,
  cmd: delegations.cmd,
  policy: delegations.policy,
  nbf: delegations.nbf,
  exp: delegations.exp,
  iat: delegations.iat,
  depth: delegations.depth,
  parentHash: delegations.parentHash,
  rootHash: delegations.rootHash,
  maxCalls: delegations.maxCalls,
  callsUsed: delegations.callsUsed,
  revokedAt: delegations.revokedAt,
  createdAt: delegations.createdAt,
};

export type TreeRow = Pick<Delegation, keyof typeof treeColumns>;

/**
 * The DR and its descendants, shallowest first, as long as there are at most `records` of them and
 * their policies (as JSON text) come to at most `policyBytes`, measured by their JWS (an upper
 * bound); the DR itself always comes. Records
 * under a DR may be stored by any holder of it, without a key, each with a policy of up to about
 * 48 KB (a JWS is at most 64 KiB): the byte bound is what keeps this answer small. Both bounds hold in the database, which
 * measures the policies of the first `records` + 1 and ships only the rows kept. Every kept record's
 * parent is kept (it is shallower), so the rows are a tree. `truncated`: some record was left out.
 */
export async function subtreeOf(
  db: Db,
  tenantId: string,
  hash: string,
  bounds: { records: number; policyBytes: number },
): Promise<{ rows: TreeRow[]; truncated: boolean }> {
  // The first records by (depth, created_at, hash) are found without reading their policies; only
  // those are measured, a running sum in that order, each by its JWS's length: an upper bound of its
  // policy's JSON (the JWS holds it base64url-encoded), read from the stored length without
  // decoding anything (policy::text decoded every one, ~0.25 s a request for a thousand large ones).
  const measured = sql`(
    select hash, n, policy_bytes_through, count(*) over () as considered from (
      select f.hash, row_number() over w as n, sum(octet_length(p.jws)) over w as policy_bytes_through
      from (
        select hash, depth, created_at from delegations
        where tenant_id = ${tenantId} and (hash = ${hash} or ancestors @> array[${hash}]::text[])
        order by depth, created_at, hash
        limit ${bounds.records + 1}
      ) f
      join delegations p on p.tenant_id = ${tenantId} and p.hash = f.hash
      window w as (order by f.depth, f.created_at, f.hash rows between unbounded preceding and current row)
    ) ranked
  ) measured`;
  const found = await db
    .select({ ...treeColumns, considered: sql<number>`measured.considered`.mapWith(Number) })
    .from(delegations)
    .innerJoin(measured, sql`measured.hash = ${delegations.hash}`)
    .where(
      and(
        eq(delegations.tenantId, tenantId),
        sql`(measured.n = 1 or (measured.n <= ${bounds.records} and measured.policy_bytes_through <= ${bounds.policyBytes}))`,
      ),
    )
    .orderBy(sql`measured.n`);
  const considered = found[0]?.considered ?? 0;
  return { rows: found.map(({ considered: _, ...row }) => row), truncated: considered > found.length };
}

export interface SpendRollup {
  calls: number;
  declared_micros: number;
  metered_micros: number;
  metered_invocations: number;
  /** Invocations without a metered cost (no actual yet, or source 'unavailable'). */
  unmetered_invocations: number;
  /** Of those, the ones whose tool server reported the cost as unavailable. */
  unavailable_invocations: number;
  /** Estimates of the invocations that have a metered cost: the denominator of calibration. */
  declared_of_metered_micros: number;
  /** Some sum reached MAX_EXACT_MICROS and is reported as that lower bound. */
  saturated: boolean;
}

/** Calls and spend over every invocation made through `hash` (its whole subtree). */
export async function spendRollup(db: Db, tenantId: string, hash: string): Promise<SpendRollup> {
  const [r] = await rows<Record<string, string | number | null>>(
    db,
    sql`select
          count(*)::int as calls,
          coalesce(sum(i.estimated_micros), 0)::text as declared,
          coalesce(sum(a.cost_micros), 0)::text as metered,
          count(a.cost_micros)::int as metered_count,
          (count(*) - count(a.cost_micros))::int as unmetered,
          count(*) filter (where a.jti is not null and a.cost_micros is null)::int as unavailable,
          coalesce(sum(i.estimated_micros) filter (where a.cost_micros is not null), 0)::text as declared_of_metered
        from invocations i
        left join actuals a on a.tenant_id = i.tenant_id and a.jti = i.jti
        where i.tenant_id = ${tenantId} and i.dr_chain @> array[${hash}]::text[]`,
  );
  // The sums are numeric in SQL (never overflow) and saturate here, so no history can make this read fail.
  const declared = saturatingMicros(r?.['declared'] ?? 0);
  const metered = saturatingMicros(r?.['metered'] ?? 0);
  const declaredOfMetered = saturatingMicros(r?.['declared_of_metered'] ?? 0);
  return {
    calls: Number(r?.['calls'] ?? 0),
    declared_micros: declared.micros,
    metered_micros: metered.micros,
    metered_invocations: Number(r?.['metered_count'] ?? 0),
    unmetered_invocations: Number(r?.['unmetered'] ?? 0),
    unavailable_invocations: Number(r?.['unavailable'] ?? 0),
    declared_of_metered_micros: declaredOfMetered.micros,
    saturated: declared.saturated || metered.saturated || declaredOfMetered.saturated,
  };
}

/**
 * Allowed calls through each of `hashes`, DRs of the subtree under `top`, counted from the
 * invocations: the count a DR with no max_calls has, since the verify statement counts only DRs
 * with one in their own row. Every call through the subtree goes through `top`, which the GIN index
 * finds; each call's chain is then joined to the list by hash (not compared element by element).
 */
export async function callsThrough(db: Db, tenantId: string, top: string, hashes: readonly string[]): Promise<Map<string, number>> {
  if (hashes.length === 0) return new Map();
  const found = await rows<{ hash: string; calls: number }>(
    db,
    sql`select l.h as hash, count(*)::int as calls
        from invocations i
        cross join lateral unnest(i.dr_chain) as c(h)
        join unnest(${textArray(hashes)}) as l(h) on l.h = c.h
        where i.tenant_id = ${tenantId} and i.dr_chain @> array[${top}]::text[]
        group by l.h`,
  );
  return new Map(found.map((r) => [r.hash, Number(r.calls)]));
}

/**
 * Locks the stored ones of `hashes` (one chain) FOR KEY SHARE, root first as the verify statement
 * orders its locks, and returns the first of them that is revoked. A revocation's row lock
 * (markRevoked, FOR UPDATE) then waits for this transaction, or this one reads the revocation it
 * committed: a record stored under a DR is never accepted after that DR's revocation has answered,
 * unseen by its count. KEY SHARE, the foreign key's own lock, does not wait for a verify counting
 * through the DR (FOR NO KEY UPDATE), so a submission holds up no verify.
 */
export async function firstRevokedLocked(
  db: Db,
  tenantId: string,
  hashes: readonly string[],
): Promise<{ readonly revoked: string | null; readonly locked: ReadonlySet<string> }> {
  if (hashes.length === 0) return { revoked: null, locked: new Set() };
  const locked = await rows<{ hash: string; revoked: boolean }>(
    db,
    sql`select hash, revoked_at is not null as revoked from delegations
        where tenant_id = ${tenantId} and hash = any(${textArray(hashes)})
        order by depth, hash
        for key share`,
  );
  return { revoked: locked.find((r) => r.revoked)?.hash ?? null, locked: new Set(locked.map((r) => r.hash)) };
}

/** A text[] parameter list: one bound parameter per element. */
function textArray(values: readonly string[]) {
  return sql`array[${sql.join(
    values.map((v) => sql`${v}`),
    sql`, `,
  )}]::text[]`;
}

/** Whether the DR or any of its ancestors is revoked, and which one. */
export async function revokedInChain(db: Db, tenantId: string, row: Pick<Delegation, 'hash' | 'ancestors'>): Promise<string | null> {
  const [found] = await db
    .select({ hash: delegations.hash })
    .from(delegations)
    .where(
      and(
        eq(delegations.tenantId, tenantId),
        inArray(delegations.hash, [...row.ancestors, row.hash]),
        sql`${delegations.revokedAt} is not null`,
      ),
    )
    .orderBy(asc(delegations.depth))
    .limit(1);
  return found?.hash ?? null;
}
