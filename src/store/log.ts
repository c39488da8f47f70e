// Queries for the transparency log (schema/log.ts). Leaves, hashes,
// checkpoints and cosignatures are append-only; only the pending queue
// loses rows, when the integrator has turned them into leaves.
import { and, asc, desc, eq, gte, inArray, lt, sql } from 'drizzle-orm';
import type { Db } from './db.js';
import { rows } from './rows.js';
import { logCheckpoints, logCosignatures, logHashes, logLeaves, logPending, receipts, type LogCheckpoint } from './schema/index.js';

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

export interface PendingLeaf {
  readonly receiptId: number;
  readonly tenantId: string;
  readonly queuedAt: Date;
  /** null when the receipt row is gone (it never should be). */
  readonly jws: string | null;
}

/** The oldest committed pending receipts, by receipt id. */
export async function pendingLeaves(db: Db, limit: number): Promise<PendingLeaf[]> {
  return db
    .select({ receiptId: logPending.receiptId, tenantId: logPending.tenantId, queuedAt: logPending.createdAt, jws: receipts.jws })
    .from(logPending)
    .leftJoin(receipts, eq(receipts.id, logPending.receiptId))
    .orderBy(asc(logPending.receiptId))
    .limit(limit);
}

export async function removePending(db: Db, receiptIds: readonly number[]): Promise<void> {
  if (receiptIds.length > 0) await db.delete(logPending).where(inArray(logPending.receiptId, [...receiptIds]));
}

export async function countPending(db: Db): Promise<number> {
  const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(logPending);
  return Number(row?.n ?? 0);
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
  readonly queuedAt: Date;
  readonly integratedAt: Date;
}

const INSERT_CHUNK = 1000;

async function insertInChunks<T>(items: readonly T[], insert: (chunk: T[]) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += INSERT_CHUNK) await insert(items.slice(i, i + INSERT_CHUNK));
}

/** Appends one integration round of a tenant: leaves, completed tile hashes and the signed checkpoint. */
export async function appendToLog(
  db: Db,
  round: {
    leaves: readonly NewLeaf[];
    hashes: readonly { tenantId: string; level: number; hashIndex: number; hash: Uint8Array }[];
    checkpoint: { tenantId: string; treeSize: number; rootHash: Uint8Array; note: string };
  },
): Promise<void> {
  await insertInChunks(round.leaves, (chunk) => db.insert(logLeaves).values(chunk));
  await insertInChunks(round.hashes, (chunk) => db.insert(logHashes).values(chunk));
  await db.insert(logCheckpoints).values(round.checkpoint);
}

/** Where a receipt of the tenant sits in its log, or undefined (another tenant's, unknown, or still pending). */
export async function leafOfReceipt(
  db: Db,
  tenantId: string,
  receiptId: number,
): Promise<{ leafIndex: number; jws: string | null } | undefined> {
  const [row] = await db
    .select({ leafIndex: logLeaves.leafIndex, jws: receipts.jws })
    .from(logLeaves)
    .leftJoin(receipts, eq(receipts.id, logLeaves.receiptId))
    .where(and(eq(logLeaves.tenantId, tenantId), eq(logLeaves.receiptId, receiptId)))
    .limit(1);
  return row;
}

/** Whether the tenant has this receipt queued, not yet integrated. */
export async function isPending(db: Db, tenantId: string, receiptId: number): Promise<boolean> {
  const [row] = await db
    .select({ id: logPending.receiptId })
    .from(logPending)
    .where(and(eq(logPending.tenantId, tenantId), eq(logPending.receiptId, receiptId)))
    .limit(1);
  return row !== undefined;
}

/** The entries (receipt JWS) of leaves [from, to), in order; jws null where the receipt row is gone. */
export async function entriesAt(
  db: Db,
  tenantId: string,
  from: number,
  to: number,
): Promise<{ leafIndex: number; receiptId: number; jws: string | null }[]> {
  return db
    .select({ leafIndex: logLeaves.leafIndex, receiptId: logLeaves.receiptId, jws: receipts.jws })
    .from(logLeaves)
    .leftJoin(receipts, eq(receipts.id, logLeaves.receiptId))
    .where(and(eq(logLeaves.tenantId, tenantId), gte(logLeaves.leafIndex, from), lt(logLeaves.leafIndex, to)))
    .orderBy(asc(logLeaves.leafIndex));
}

/** Witness cosignature lines of one checkpoint, oldest first. */
export async function cosignatureLines(db: Db, tenantId: string, treeSize: number): Promise<string[]> {
  const found = await db
    .select({ line: logCosignatures.line })
    .from(logCosignatures)
    .where(and(eq(logCosignatures.tenantId, tenantId), eq(logCosignatures.treeSize, treeSize)))
    .orderBy(asc(logCosignatures.createdAt), asc(logCosignatures.witnessKey));
  return found.map((r) => r.line);
}

/** Stores a witness's cosignature; false when this witness key already cosigned this checkpoint. */
export async function insertCosignature(
  db: Db,
  row: { tenantId: string; treeSize: number; witnessKey: string; line: string },
): Promise<boolean> {
  const inserted = await db.insert(logCosignatures).values(row).onConflictDoNothing().returning({ size: logCosignatures.treeSize });
  return inserted.length > 0;
}

/** Commit-to-inclusion lag of leaves integrated since `since`, in milliseconds, for the bench. */
export async function inclusionLagsMs(db: Db, since: Date): Promise<number[]> {
  const found = await db
    .select({ ms: sql<number>`(extract(epoch from (${logLeaves.integratedAt} - ${logLeaves.queuedAt})) * 1000)::float8` })
    .from(logLeaves)
    .where(gte(logLeaves.integratedAt, since));
  return found.map((r) => Number(r.ms));
}
