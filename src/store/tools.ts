// Queries for versioned tool catalogs. Versions are immutable (a trigger
// refuses UPDATE and DELETE): publishing inserts the next version, and the
// primary key (tenant, version) makes two concurrent publishers on the same
// base collide instead of both succeeding.
import { and, desc, eq } from 'drizzle-orm';
import type { Db } from './db.js';
import { toolCatalogs } from './schema/index.js';

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

/** Inserts a new version; a unique violation means someone published on the same base first. */
export async function insertToolDocument(
  db: Db,
  row: { tenantId: string; version: number; document: unknown; hash: string; createdBy: string },
): Promise<void> {
  await db.insert(toolCatalogs).values(row);
}
