// Queries for service receipts. The table is append-only (a trigger refuses UPDATE,
// DELETE and TRUNCATE), so there is deliberately nothing here but inserts
// and reads.
import { and, asc, eq, gt, gte, inArray, lt } from 'drizzle-orm';
import type { Db } from './db.js';
import type { ServiceReceiptKind } from '../protocol/lists.js';
import { serviceReceipts, type ServiceReceipt } from './schema/index.js';

export async function insertServiceReceipt(
  db: Db,
  row: { tenantId: string; kind: ServiceReceiptKind; subject: string; jws: string; kid: string },
): Promise<number> {
  const [inserted] = await db.insert(serviceReceipts).values(row).returning({ id: serviceReceipts.id });
  if (!inserted) throw new Error('insert into receipts returned no row');
  return inserted.id;
}

export type ServiceReceiptRow = Pick<ServiceReceipt, 'id' | 'kind' | 'subject' | 'kid' | 'jws' | 'createdAt'>;

const columns = {
  id: serviceReceipts.id,
  kind: serviceReceipts.kind,
  subject: serviceReceipts.subject,
  kid: serviceReceipts.kid,
  jws: serviceReceipts.jws,
  createdAt: serviceReceipts.createdAt,
};

/**
 * One page of a tenant's service receipts with id > after, oldest first. nextAfter is
 * the last id of the page when more rows follow it, else null.
 */
export async function listServiceReceipts(
  db: Db,
  q: {
    tenantId: string;
    after: number;
    limit: number;
    kind?: ServiceReceiptKind | undefined;
    subject?: string | undefined;
    since?: Date | undefined;
    until?: Date | undefined;
  },
): Promise<{ rows: ServiceReceiptRow[]; nextAfter: number | null }> {
  const where = [eq(serviceReceipts.tenantId, q.tenantId), gt(serviceReceipts.id, q.after)];
  if (q.kind !== undefined) where.push(eq(serviceReceipts.kind, q.kind));
  if (q.subject !== undefined) where.push(eq(serviceReceipts.subject, q.subject));
  if (q.since !== undefined) where.push(gte(serviceReceipts.createdAt, q.since));
  if (q.until !== undefined) where.push(lt(serviceReceipts.createdAt, q.until));
  const found = await db
    .select(columns)
    .from(serviceReceipts)
    .where(and(...where))
    .orderBy(asc(serviceReceipts.id))
    .limit(q.limit + 1);
  const more = found.length > q.limit;
  const rows = more ? found.slice(0, q.limit) : found;
  return { rows, nextAfter: more ? (rows[rows.length - 1]?.id ?? null) : null };
}

/** A tenant's service receipts about one subject (a DR hash, an invocation jti), oldest first. */
export async function serviceReceiptsForSubject(db: Db, tenantId: string, subject: string): Promise<ServiceReceiptRow[]> {
  return db
    .select(columns)
    .from(serviceReceipts)
    .where(and(eq(serviceReceipts.tenantId, tenantId), eq(serviceReceipts.subject, subject)))
    .orderBy(asc(serviceReceipts.id));
}

export interface ServiceReceiptRef {
  readonly id: number;
  readonly kid: string;
  readonly jws: string;
}

/** The first service receipt of `kind` for each subject, keyed by subject. */
export async function firstServiceReceipts(
  db: Db,
  tenantId: string,
  kind: ServiceReceiptKind,
  subjects: readonly string[],
): Promise<Map<string, ServiceReceiptRef>> {
  if (subjects.length === 0) return new Map();
  const found = await db
    .select({ subject: serviceReceipts.subject, id: serviceReceipts.id, kid: serviceReceipts.kid, jws: serviceReceipts.jws })
    .from(serviceReceipts)
    .where(and(eq(serviceReceipts.tenantId, tenantId), eq(serviceReceipts.kind, kind), inArray(serviceReceipts.subject, [...subjects])))
    .orderBy(asc(serviceReceipts.id));
  const out = new Map<string, ServiceReceiptRef>();
  for (const r of found) if (!out.has(r.subject)) out.set(r.subject, { id: r.id, kid: r.kid, jws: r.jws });
  return out;
}

/** The first service receipt of one kind about a subject (e.g. the acceptance of a DR): what an idempotent repeat returns. */
export async function firstServiceReceipt(
  db: Db,
  tenantId: string,
  subject: string,
  kind: ServiceReceiptKind,
): Promise<ServiceReceiptRef | undefined> {
  return (await firstServiceReceipts(db, tenantId, kind, [subject])).get(subject);
}
