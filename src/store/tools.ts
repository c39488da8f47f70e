// Queries for versioned tool catalogs. Versions are immutable (a trigger
// refuses UPDATE and DELETE): publishing inserts the next version, and the
// primary key (tenant, version) makes two concurrent publishers on the same
// base collide instead of both succeeding.
import { and, desc, eq, gt, inArray, sql } from 'drizzle-orm';
import type { Db } from './db.js';
import { inExistingTenant } from './errors.js';
import { drCostCalibration, toolCatalogs, toolRateWindows } from './schema/index.js';

export interface StoredToolDocument {
  readonly version: number;
  readonly document: unknown;
  readonly hash: string;
  readonly createdBy: string;
  readonly createdAt: Date;
}

const columns = {
  version: toolCatalogs.version,
  document: toolCatalogs.document,
  hash: toolCatalogs.hash,
  createdBy: toolCatalogs.createdBy,
  createdAt: toolCatalogs.createdAt,
};

/** The tenant's current (highest) version, or undefined before the first publish. */
export async function currentToolDocument(db: Db, tenantId: string): Promise<StoredToolDocument | undefined> {
  const [row] = await db
    .select(columns)
    .from(toolCatalogs)
    .where(eq(toolCatalogs.tenantId, tenantId))
    .orderBy(desc(toolCatalogs.version))
    .limit(1);
  return row;
}

export async function toolDocumentVersion(db: Db, tenantId: string, version: number): Promise<StoredToolDocument | undefined> {
  const [row] = await db
    .select(columns)
    .from(toolCatalogs)
    .where(and(eq(toolCatalogs.tenantId, tenantId), eq(toolCatalogs.version, version)))
    .limit(1);
  return row;
}

/** Every version, newest first, without the documents. */
export async function listToolDocumentVersions(db: Db, tenantId: string): Promise<Omit<StoredToolDocument, 'document'>[]> {
  return db
    .select({
      version: toolCatalogs.version,
      hash: toolCatalogs.hash,
      createdBy: toolCatalogs.createdBy,
      createdAt: toolCatalogs.createdAt,
    })
    .from(toolCatalogs)
    .where(eq(toolCatalogs.tenantId, tenantId))
    .orderBy(desc(toolCatalogs.version));
}

/**
 * The tenant's catalog lock, held to the end of the transaction: a publish takes it exclusive, a
 * transaction storing delegations shared, so a stored record was judged under the version that is
 * current when it commits (a publish waits for the submissions storing, and they for it). Nothing
 * else takes it: a submission waits on a publish only, never on a verify. A submission takes it
 * after its row locks, never before a wait: a publish waiting for it would queue every later
 * submission of the tenant behind that wait.
 */
export async function lockToolCatalog(tx: Db, tenantId: string, mode: 'publish' | 'store'): Promise<void> {
  const key = sql`hashtextextended(${`baton:tool-catalog:${tenantId}`}, 0)`;
  await tx.execute(mode === 'publish' ? sql`select pg_advisory_xact_lock(${key})` : sql`select pg_advisory_xact_lock_shared(${key})`);
}

/** The tenant's current version number, 0 before the first publish. */
export async function currentToolDocumentVersion(db: Db, tenantId: string): Promise<number> {
  const [row] = await db
    .select({ version: toolCatalogs.version })
    .from(toolCatalogs)
    .where(eq(toolCatalogs.tenantId, tenantId))
    .orderBy(desc(toolCatalogs.version))
    .limit(1);
  return row?.version ?? 0;
}

/** Inserts a new version; a unique violation means someone published on the same base first. */
/** Stores one version; false when the tenant already has that version (another publish won), NOT_FOUND for an unknown tenant. */
export async function insertToolDocument(
  db: Db,
  row: { tenantId: string; version: number; document: unknown; hash: string; createdBy: string },
): Promise<boolean> {
  const stored = await inExistingTenant(() =>
    db.insert(toolCatalogs).values(row).onConflictDoNothing().returning({ version: toolCatalogs.version }),
  );
  return stored.length === 1;
}

/**
 * The first delegation of `chain` flagged for cost calibration, or null: over
 * at least `minMetered` metered invocations through it, metered cost above
 * `ratioAbove` times what was declared for them. The same test as inside the
 * verify statement (baton_tool_gate, migration 0010), for dry runs and explain.
 */
export async function costCalibrationFlagged(
  db: Db,
  tenantId: string,
  chain: readonly string[],
  t: { readonly ratioAbove: number; readonly minMetered: number },
): Promise<string | null> {
  if (chain.length === 0) return null;
  const [row] = await db
    .select({ hash: drCostCalibration.drHash })
    .from(drCostCalibration)
    .where(
      and(
        eq(drCostCalibration.tenantId, tenantId),
        inArray(drCostCalibration.drHash, [...chain]),
        sql`${drCostCalibration.meteredInvocations} >= ${t.minMetered}`,
        sql`${drCostCalibration.meteredMicros} > ${String(t.ratioAbove)}::numeric * ${drCostCalibration.declaredMicros}`,
      ),
    )
    .limit(1);
  return row?.hash ?? null;
}

/**
 * The calls a tool has had in the current minute of the database clock, as the verify statement
 * counts them (fixed one-minute windows, baton_tool_gate_checks); 0 when none.
 */
export async function toolCallsThisMinute(db: Db, tenantId: string, tool: string): Promise<number> {
  const [row] = await db
    .select({ calls: toolRateWindows.calls })
    .from(toolRateWindows)
    .where(
      and(
        eq(toolRateWindows.tenantId, tenantId),
        eq(toolRateWindows.tool, tool),
        eq(toolRateWindows.windowStart, sql`floor(extract(epoch FROM clock_timestamp()) / 60)::bigint * 60`),
      ),
    );
  return row?.calls ?? 0;
}

/** Whether the tenant has published a catalog after `version`: a decision made under it is stale. */
export async function newerCatalogExists(db: Db, tenantId: string, version: number): Promise<boolean> {
  const [row] = await db
    .select({ version: toolCatalogs.version })
    .from(toolCatalogs)
    .where(and(eq(toolCatalogs.tenantId, tenantId), gt(toolCatalogs.version, version)))
    .limit(1);
  return row !== undefined;
}
