// Queries for the transparency log (schema/log.ts). Leaves, hashes,
// checkpoints and cosignatures are append-only; only the pending queue
// loses rows, when the integrator has turned them into leaves.
import { and, asc, desc, eq, gte, lt, sql } from 'drizzle-orm';
import { transactionBehind, type CommitCheck, type Db } from './db.js';
import { rows } from './rows.js';
import {
  logCheckpoints,
  logCosignatures,
  logHashes,
  logLeaves,
  logName,
  logPending,
  serviceReceipts,
  type LogCheckpoint,
} from './schema/index.js';

/**
 * The advisory lock only the integrating node holds: a transaction-level
 * lock, so it is released by the commit or rollback of the round itself and
 * never outlives a node that dies mid-round. The value is arbitrary but fixed
 * ('baton-tlog' as ASCII).
 */
export const INTEGRATOR_LOCK_KEY = 0x626174_6f6e2d74n;

/** Inside a transaction: true when this transaction now holds the integrator lock. */
export async function tryIntegratorLock(tx: Db): Promise<boolean> {
  const [row] = await rows<{ locked: boolean }>(
    tx,
    sql`select pg_try_advisory_xact_lock(${INTEGRATOR_LOCK_KEY.toString()}::bigint) as locked`,
  );
  return row?.locked === true;
}

/**
 * Inside the round's transaction, before its queries: no sequential scans.
 * The planner sizes a round by the claim's LIMIT (thousands of pending rows,
 * when a round usually finds dozens), and for that many it preferred reading
 * whole tables (every service receipt ever stored, in every round). Every
 * table a round reads has an index for what it looks up; plans the driver
 * keeps per prepared statement are made under this setting too.
 */
export async function preferIndexes(tx: Db): Promise<void> {
  // JIT off too: a sequential scan a plan still needs is then priced past jit_above_cost, and compiling
  // a round's small queries never pays. One round trip for both.
  await tx.execute(sql`select set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`);
}

export interface PendingLeaf {
  readonly receiptId: number;
  readonly tenantId: string;
  /** null when the service receipt row is gone (it never should be). */
  readonly jws: string | null;
}

/** A tenant's log as its latest checkpoint states it. */
export interface LogHead {
  readonly size: number;
  readonly rootHex: string | null;
}

export type ClaimedRound =
  { readonly locked: false } | { readonly locked: true; readonly pending: PendingLeaf[]; readonly heads: ReadonlyMap<string, LogHead> };

/**
 * Inside the round's transaction: takes the integrator lock and, if it got
 * it, reads the oldest committed pending service receipts (by receipt id) with
 * the head of each of their tenants' logs, in one statement.
 *
 * The lock comes first, in a statement of its own. A statement reads what was
 * committed when it began: taking the lock inside the reading statement, a
 * node could begin it, see another node's round commit and release the lock,
 * then take the lock and read the pending rows and heads from before that
 * round. It then appended the same leaf indexes again, and its round failed
 * on log_checkpoints' primary key (a test racing two nodes caught it).
 */
export async function claimPending(tx: Db, limit: number): Promise<ClaimedRound> {
  if (!(await tryIntegratorLock(tx))) return { locked: false };
  const found = await rows<{
    receipt_id: string | number;
    tenant_id: string;
    jws: string | null;
    tree_size: string | number | null;
    root_hex: string | null;
  }>(
    tx,
    sql`with pend as materialized (
        select p.receipt_id, p.tenant_id from log_pending p order by p.receipt_id limit ${limit}),
      heads as (
        select t.tenant_id, c.tree_size, encode(c.root_hash, 'hex') as root_hex
        from (select distinct tenant_id from pend) t
        left join lateral (
          select tree_size, root_hash from log_checkpoints c where c.tenant_id = t.tenant_id order by tree_size desc limit 1) c on true)
      select pend.receipt_id::text as receipt_id, pend.tenant_id,
        -- Looked up per claimed row, by primary key: as a join, the planner sized this by the
        -- LIMIT and could read every receipt ever stored to hash-join a few dozen.
        (select r.jws from receipts r where r.id = pend.receipt_id) as jws,
        heads.tree_size::text as tree_size, heads.root_hex
      from pend
      left join heads on heads.tenant_id = pend.tenant_id
      order by pend.receipt_id`,
  );
  const pending: PendingLeaf[] = [];
  const heads = new Map<string, LogHead>();
  for (const r of found) {
    pending.push({ receiptId: Number(r.receipt_id), tenantId: r.tenant_id, jws: r.jws });
    heads.set(r.tenant_id, { size: r.tree_size === null ? 0 : Number(r.tree_size), rootHex: r.root_hex });
  }
  return { locked: true, pending, heads };
}

export async function countPending(db: Db): Promise<number> {
  const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(logPending);
  return Number(row?.n ?? 0);
}

/** Service receipts not yet in a tenant's log, across tenants, and how long the oldest has waited (0 when none). */
export async function pendingBacklog(db: Db): Promise<{ receipts: number; oldestAgeSeconds: number }> {
  const [row] = await db
    .select({
      n: sql<number>`count(*)::int`,
      age: sql<number>`coalesce(extract(epoch from clock_timestamp() - min(${logPending.createdAt})), 0)::float8`,
    })
    .from(logPending);
  return { receipts: Number(row?.n ?? 0), oldestAgeSeconds: Math.max(0, Number(row?.age ?? 0)) };
}

/**
 * Each tenant's latest checkpoint note and when it was signed: one backward probe of the primary key
 * per tenant (a DISTINCT ON over the table sorted every checkpoint ever signed, about a second and
 * 290 MB of sort at a million).
 */
export async function latestCheckpointNotes(db: Db): Promise<{ tenantId: string; note: string; createdAt: Date }[]> {
  const found = await rows<{ tenant_id: string; note: string; created_at: Date | string }>(
    db,
    sql`select t.id as tenant_id, c.note, c.created_at
          from tenants t
          cross join lateral (
            select note, created_at from log_checkpoints c where c.tenant_id = t.id order by tree_size desc limit 1) c`,
  );
  return found.map((r) => ({ tenantId: r.tenant_id, note: r.note, createdAt: new Date(r.created_at) }));
}

/** The checkpoint of the largest tree size, if the tenant's log has any leaf. */
export async function latestCheckpoint(db: Db, tenantId: string): Promise<LogCheckpoint | undefined> {
  const [row] = await db
    .select()
    .from(logCheckpoints)
    .where(eq(logCheckpoints.tenantId, tenantId))
    .orderBy(desc(logCheckpoints.treeSize))
    .limit(1);
  return row;
}

export async function checkpointOfSize(db: Db, tenantId: string, treeSize: number): Promise<LogCheckpoint | undefined> {
  const [row] = await db
    .select()
    .from(logCheckpoints)
    .where(and(eq(logCheckpoints.tenantId, tenantId), eq(logCheckpoints.treeSize, treeSize)))
    .limit(1);
  return row;
}

/**
 * Stored hashes at tile level `level` with index in [from, to), in order:
 * leaf hashes at level 0, full-tile roots above.
 */
export async function hashesAt(db: Db, tenantId: string, level: number, from: number, to: number): Promise<Uint8Array[]> {
  if (to <= from) return [];
  if (level === 0) {
    const found = await db
      .select({ hash: logLeaves.leafHash })
      .from(logLeaves)
      .where(and(eq(logLeaves.tenantId, tenantId), gte(logLeaves.leafIndex, from), lt(logLeaves.leafIndex, to)))
      .orderBy(asc(logLeaves.leafIndex));
    return found.map((r) => r.hash);
  }
  const found = await db
    .select({ hash: logHashes.hash })
    .from(logHashes)
    .where(and(eq(logHashes.tenantId, tenantId), eq(logHashes.level, level), gte(logHashes.hashIndex, from), lt(logHashes.hashIndex, to)))
    .orderBy(asc(logHashes.hashIndex));
  return found.map((r) => r.hash);
}

export interface NewLeaf {
  readonly tenantId: string;
  readonly leafIndex: number;
  readonly receiptId: number;
  readonly leafHash: Uint8Array;
}

const hexOf = (b: Uint8Array) => Buffer.from(b).toString('hex');

/**
 * Writes one integration round in one statement: the leaves (queued_at
 * from their pending rows, integrated_at the time of this write), the
 * completed tile hashes, the signed checkpoints, and the removal of every
 * claimed pending row (`claimed`: also those with no receipt left). Throws,
 * rolling the round back, unless every leaf found its pending row.
 */
export async function appendRound(
  tx: Db,
  round: {
    leaves: readonly NewLeaf[];
    hashes: readonly { tenantId: string; level: number; hashIndex: number; hash: Uint8Array }[];
    checkpoints: readonly { tenantId: string; treeSize: number; rootHash: Uint8Array; note: string }[];
    claimed: readonly number[];
  },
): Promise<void> {
  const leaves = JSON.stringify(round.leaves.map((l) => [l.tenantId, l.leafIndex, l.receiptId, hexOf(l.leafHash)]));
  const hashes = JSON.stringify(round.hashes.map((h) => [h.tenantId, h.level, h.hashIndex, hexOf(h.hash)]));
  const checkpoints = JSON.stringify(round.checkpoints.map((c) => [c.tenantId, c.treeSize, hexOf(c.rootHash), c.note]));
  const [written] = await rows<{ leaves: number; removed: number }>(
    tx,
    sql`with
      l as (
        insert into log_leaves (tenant_id, leaf_index, receipt_id, leaf_hash, queued_at, integrated_at)
        select x->>0, (x->>1)::bigint, (x->>2)::bigint, decode(x->>3, 'hex'), p.created_at, clock_timestamp()
        from jsonb_array_elements(${leaves}::jsonb) x join log_pending p on p.receipt_id = (x->>2)::bigint
        returning 1),
      h as (
        insert into log_hashes (tenant_id, level, hash_index, hash)
        select x->>0, (x->>1)::int, (x->>2)::bigint, decode(x->>3, 'hex') from jsonb_array_elements(${hashes}::jsonb) x
        returning 1),
      c as (
        insert into log_checkpoints (tenant_id, tree_size, root_hash, note)
        select x->>0, (x->>1)::bigint, decode(x->>2, 'hex'), x->>3 from jsonb_array_elements(${checkpoints}::jsonb) x
        returning 1),
      d as (
        delete from log_pending where receipt_id in (select v::bigint from jsonb_array_elements_text(${JSON.stringify(round.claimed)}::jsonb) v)
        returning 1)
      select (select count(*) from l)::int as leaves, (select count(*) from d)::int as removed`,
  );
  if (Number(written?.leaves) !== round.leaves.length)
    throw new Error(
      `the log round wrote ${String(written?.leaves)} of ${round.leaves.length} leaves: a pending row vanished under the lock`,
    );
}

/** Where a service receipt of the tenant sits in its log, or undefined (another tenant's, unknown, or still pending). */
export async function leafOfServiceReceipt(
  db: Db,
  tenantId: string,
  receiptId: number,
): Promise<{ leafIndex: number; jws: string | null } | undefined> {
  const [row] = await db
    .select({ leafIndex: logLeaves.leafIndex, jws: serviceReceipts.jws })
    .from(logLeaves)
    .leftJoin(serviceReceipts, eq(serviceReceipts.id, logLeaves.receiptId))
    .where(and(eq(logLeaves.tenantId, tenantId), eq(logLeaves.receiptId, receiptId)))
    .limit(1);
  return row;
}

/** Whether the tenant has this service receipt queued, not yet integrated. */
export async function isPending(db: Db, tenantId: string, receiptId: number): Promise<boolean> {
  const [row] = await db
    .select({ id: logPending.receiptId })
    .from(logPending)
    .where(and(eq(logPending.tenantId, tenantId), eq(logPending.receiptId, receiptId)))
    .limit(1);
  return row !== undefined;
}

/** The entries (service receipt JWS) of leaves [from, to), in order; jws null where the service receipt row is gone. */
export async function entriesAt(
  db: Db,
  tenantId: string,
  from: number,
  to: number,
): Promise<{ leafIndex: number; receiptId: number; jws: string | null }[]> {
  return db
    .select({ leafIndex: logLeaves.leafIndex, receiptId: logLeaves.receiptId, jws: serviceReceipts.jws })
    .from(logLeaves)
    .leftJoin(serviceReceipts, eq(serviceReceipts.id, logLeaves.receiptId))
    .where(and(eq(logLeaves.tenantId, tenantId), gte(logLeaves.leafIndex, from), lt(logLeaves.leafIndex, to)))
    .orderBy(asc(logLeaves.leafIndex));
}

/** Witness cosignature lines of one checkpoint, oldest first. */
export async function cosignatureLines(db: Db, tenantId: string, treeSize: number): Promise<string[]> {
  return (await storedCosignatures(db, tenantId, treeSize)).map((r) => r.line);
}

/** Each cosignature of one checkpoint, in the order it is served, with the API key that posted it (null before 0022). */
export async function storedCosignatures(
  db: Db,
  tenantId: string,
  treeSize: number,
): Promise<{ line: string; postedByKey: string | null }[]> {
  return db
    .select({ line: logCosignatures.line, postedByKey: logCosignatures.postedByKey })
    .from(logCosignatures)
    .where(and(eq(logCosignatures.tenantId, tenantId), eq(logCosignatures.treeSize, treeSize)))
    .orderBy(asc(logCosignatures.createdAt), asc(logCosignatures.witnessKey));
}

/**
 * What storing a cosignature did: stored, already there (this witness key cosigned it), refused by a
 * cap, or refused because another key with the same witness name and key ID cosigned it (`key-id-taken`).
 */
export type CosignatureStored = 'stored' | 'already' | 'key-full' | 'checkpoint-full' | 'key-id-taken';

/**
 * A verifier key string's name and key ID (`<name>+<hex key ID>+<base64 key>`): what a note's
 * signature line names. A name holds no `+`, the base64 key may.
 */
const nameAndKeyId = (vkey: string): string => vkey.slice(0, vkey.indexOf('+', vkey.indexOf('+') + 1));

/**
 * Stores a witness's cosignature unless this witness key already cosigned the checkpoint, or the
 * key that posts it, or the checkpoint, already has as many as it may. The caps count what is
 * stored, so posts to one checkpoint take turns (a transaction-level advisory lock): counted side
 * by side, 12 concurrent posts by one key stored 8 where 2 were allowed (an outside probe).
 */
export async function insertCosignatureWithinCaps(
  db: Db,
  row: { tenantId: string; treeSize: number; witnessKey: string; line: string; postedByKey: string },
  caps: { readonly perKey: number; readonly perCheckpoint: number },
  gate?: CommitCheck,
): Promise<CosignatureStored> {
  return transactionBehind(db, gate, async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`cosignatures of ${row.tenantId} ${row.treeSize}`}, 0))`);
    const cosigned = await tx
      .select({ witnessKey: logCosignatures.witnessKey, postedByKey: logCosignatures.postedByKey })
      .from(logCosignatures)
      .where(and(eq(logCosignatures.tenantId, row.tenantId), eq(logCosignatures.treeSize, row.treeSize)));
    if (cosigned.some((c) => c.witnessKey === row.witnessKey)) return 'already';
    // A reader looks a signature line up by (name, key ID) alone: a second key under the pair of a
    // stored one would meet a trusted key whose signature fails, and the whole note be refused by
    // every client that trusts the first (the table is append-only).
    if (cosigned.some((c) => nameAndKeyId(c.witnessKey) === nameAndKeyId(row.witnessKey))) return 'key-id-taken';
    if (cosigned.filter((c) => c.postedByKey === row.postedByKey).length >= caps.perKey) return 'key-full';
    if (cosigned.length >= caps.perCheckpoint) return 'checkpoint-full';
    await tx.insert(logCosignatures).values(row);
    return 'stored';
  });
}

/**
 * The logs' name, fixed by the first round that signs a checkpoint (migration 0034): writes `name`
 * when none is stored yet, and returns the stored one. Run in the round's transaction, so the name
 * and the first checkpoint under it commit together.
 */
export async function fixLogName(tx: Db, name: string): Promise<string> {
  await tx.insert(logName).values({ name }).onConflictDoNothing();
  return (await fixedLogName(tx))!;
}

/** The logs' name as the first round that signed a checkpoint fixed it; undefined before that round. */
export async function fixedLogName(db: Db): Promise<string | undefined> {
  const [stored] = await db.select({ name: logName.name }).from(logName);
  return stored?.name;
}
