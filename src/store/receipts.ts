// Queries for receipts. The table is append-only (a trigger refuses UPDATE,
// DELETE and TRUNCATE), so there is deliberately nothing here but inserts
// and reads.
import { and, asc, eq, gt, inArray } from 'drizzle-orm';
import type { Db } from './db.js';
import { receipts, type Receipt, type ReceiptKind } from './schema/index.js';

export async function insertReceipt(
  db: Db,
  row: { tenantId: string; kind: ReceiptKind; subject: string; jws: string; kid: string },
): Promise<number> {
  const [inserted] = await db.insert(receipts).values(row).returning({ id: receipts.id });
  if (!inserted) throw new Error('insert into receipts returned no row');
  return inserted.id;
}

export type ReceiptRow = Pick<Receipt, 'id' | 'kind' | 'subject' | 'kid' | 'jws' | 'createdAt'>;

const columns = {
  id: receipts.id,
  kind: receipts.kind,
  subject: receipts.subject,
  kid: receipts.kid,
  jws: receipts.jws,
  createdAt: receipts.createdAt,
};

/**
 * One page of a tenant's receipts with id > after, oldest first. nextAfter is
 * the last id of the page when more rows follow it, else null.
 */
export async function listReceipts(
  db: Db,
  q: { tenantId: string; after: number; limit: number },
): Promise<{ rows: ReceiptRow[]; nextAfter: number | null }> {
  const found = await db
    .select(columns)
    .from(receipts)
    .where(and(eq(receipts.tenantId, q.tenantId), gt(receipts.id, q.after)))
    .orderBy(asc(receipts.id))
    .limit(q.limit + 1);
  const more = found.length > q.limit;
  const rows = more ? found.slice(0, q.limit) : found;
  return { rows, nextAfter: more ? (rows[rows.length - 1]?.id ?? null) : null };
}

/** A tenant's receipts about one subject (a DR hash, an invocation jti), oldest first. */
export async function receiptsForSubject(db: Db, tenantId: string, subject: string): Promise<ReceiptRow[]> {
  return db
    .select(columns)
    .from(receipts)
    .where(and(eq(receipts.tenantId, tenantId), eq(receipts.subject, subject)))
    .orderBy(asc(receipts.id));
}

export interface ReceiptRef {
  readonly id: number;
  readonly kid: string;
  readonly jws: string;
}

/** The first receipt of `kind` for each subject, keyed by subject. */
export async function firstReceipts(
  db: Db,
  tenantId: string,
  kind: ReceiptKind,
  subjects: readonly string[],
): Promise<Map<string, ReceiptRef>> {
  if (subjects.length === 0) return new Map();
  const found = await db
    .select({ subject: receipts.subject, id: receipts.id, kid: receipts.kid, jws: receipts.jws })
    .from(receipts)
    .where(and(eq(receipts.tenantId, tenantId), eq(receipts.kind, kind), inArray(receipts.subject, [...subjects])))
    .orderBy(asc(receipts.id));
  const out = new Map<string, ReceiptRef>();
  for (const r of found) if (!out.has(r.subject)) out.set(r.subject, { id: r.id, kid: r.kid, jws: r.jws });
  return out;
}

/** The first receipt of one kind about a subject (e.g. the acceptance of a DR): what an idempotent repeat returns. */
export async function firstReceipt(db: Db, tenantId: string, subject: string, kind: ReceiptKind): Promise<ReceiptRef | undefined> {
  return (await firstReceipts(db, tenantId, kind, [subject])).get(subject);
}
