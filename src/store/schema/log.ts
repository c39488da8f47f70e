// The transparency log: one append-only Merkle tree of service receipts per
// tenant (RFC 6962 hashing, served as C2SP tiles). A trigger on the receipts table
// queues every new service receipt in log_pending inside the service receipt's own
// transaction; the single integrator (src/service/log-integrator.ts) assigns
// indexes, stores hashes and signs a checkpoint. Everything but the queue is
// append-only (migrations/0006_transparency_log.sql refuses UPDATE, DELETE
// and TRUNCATE).
import { sql } from 'drizzle-orm';
import { bigint, boolean, check, customType, integer, pgTable, primaryKey, text, unique } from 'drizzle-orm/pg-core';
import { createdAt, serverTime, tenantId } from './columns.js';

/** Raw bytes; postgres.js returns a Buffer and PGlite a Uint8Array, both read as Uint8Array. */
export const bytea = customType<{ data: Uint8Array; driverData: Uint8Array }>({
  dataType: () => 'bytea',
  toDriver: (value) => Buffer.from(value.buffer, value.byteOffset, value.byteLength),
  fromDriver: (value) => Uint8Array.from(value),
});

/** Service receipts committed but not yet integrated, oldest service receipt first. Rows leave when integrated. */
export const logPending = pgTable('log_pending', {
  receiptId: bigint('receipt_id', { mode: 'number' }).primaryKey(),
  tenantId: text('tenant_id').notNull(),
  createdAt: createdAt(),
});

/** Tile level 0: one row per leaf, in log order. The entry is the receipt's JWS. */
export const logLeaves = pgTable(
  'log_leaves',
  {
    tenantId: tenantId(),
    leafIndex: bigint('leaf_index', { mode: 'number' }).notNull(),
    receiptId: bigint('receipt_id', { mode: 'number' }).notNull(),
    leafHash: bytea('leaf_hash').notNull(),
    /** When the service receipt was queued (its commit, to within the transaction). */
    queuedAt: serverTime('queued_at').notNull(),
    /** When the integrator appended it; integrated_at - queued_at is the lag to inclusion. */
    integratedAt: serverTime('integrated_at').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.leafIndex] }),
    unique('log_leaves_receipt_uq').on(t.receiptId),
    check('log_leaves_hash_size', sql`octet_length(${t.leafHash}) = 32 and ${t.leafIndex} >= 0`),
  ],
);

/**
 * Tile levels 1 and up: the hash at (level, index) is the root of the 256^level
 * leaves from index * 256^level, stored once that range is complete.
 */
export const logHashes = pgTable(
  'log_hashes',
  {
    tenantId: tenantId(),
    level: integer('level').notNull(),
    hashIndex: bigint('hash_index', { mode: 'number' }).notNull(),
    hash: bytea('hash').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.level, t.hashIndex] }),
    check('log_hashes_shape', sql`octet_length(${t.hash}) = 32 and ${t.level} >= 1 and ${t.hashIndex} >= 0`),
  ],
);

/** Signed checkpoints (C2SP tlog-checkpoint notes), one per tree size the integrator reached. */
export const logCheckpoints = pgTable(
  'log_checkpoints',
  {
    tenantId: tenantId(),
    treeSize: bigint('tree_size', { mode: 'number' }).notNull(),
    rootHash: bytea('root_hash').notNull(),
    /** The signed note, verbatim, without witness cosignatures. */
    note: text('note').notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.treeSize] }),
    check('log_checkpoints_shape', sql`octet_length(${t.rootHash}) = 32 and ${t.treeSize} > 0`),
  ],
);

/** Witness cosignatures (C2SP tlog-cosignature), at most one per witness key and checkpoint. */
export const logCosignatures = pgTable(
  'log_cosignatures',
  {
    tenantId: tenantId(),
    treeSize: bigint('tree_size', { mode: 'number' }).notNull(),
    /** The witness's verifier key string (name+id+key). */
    witnessKey: text('witness_key').notNull(),
    /** The note signature line, verbatim ("— <name> <base64>"). */
    line: text('line').notNull(),
    /** The audit key that posted it (migration 0022; null on older rows): each key fills few of a checkpoint's slots. */
    postedByKey: text('posted_by_key'),
    createdAt: createdAt(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.treeSize, t.witnessKey] })],
);

export type LogLeaf = typeof logLeaves.$inferSelect;
export type LogCheckpoint = typeof logCheckpoints.$inferSelect;

/**
 * The name every tenant's log carries (BATON_TLOG_NAME), fixed by the first checkpoint: a round
 * writes it in the transaction of its checkpoints, and a node configured with another name signs
 * none (migration 0034). One row; append-only like the log.
 */
export const logName = pgTable(
  'log_name',
  {
    singleton: boolean('singleton').primaryKey().default(true),
    name: text('name').notNull(),
    createdAt: createdAt(),
  },
  (t) => [check('log_name_singleton', sql`${t.singleton}`)],
);
