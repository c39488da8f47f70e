// Service receipts the service signs for what it did. Append-only: the trigger in
// migrations/0001_receipts_append_only.sql refuses UPDATE, DELETE and TRUNCATE.
// The kind is one of SERVICE_RECEIPT_KINDS, checked on INSERT by the trigger
// receipts_queue_for_log (migration 0019; as constraint "receipts_kind_known",
// SQLSTATE 23514): a CHECK constraint's expression is rebuilt from its text by
// every statement that writes the table, one receipt per verify.
import { bigserial, index, pgTable, text } from 'drizzle-orm/pg-core';
import type { ServiceReceiptKind } from '../../protocol/lists.js';
import { createdAt, tenantId } from './columns.js';
import { serviceKeys } from './keys.js';

export const serviceReceipts = pgTable(
  'receipts',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(), // the `after=` paging cursor
    tenantId: tenantId(),
    kind: text('kind').notNull().$type<ServiceReceiptKind>(),
    subject: text('subject').notNull(), // DR hash, invocation jti, …
    jws: text('jws').notNull(),
    kid: text('kid')
      .notNull()
      .references(() => serviceKeys.kid),
    createdAt: createdAt(),
  },
  (t) => [index('receipts_tenant_id_idx').on(t.tenantId, t.id), index('receipts_subject_idx').on(t.tenantId, t.subject)],
);

export type ServiceReceipt = typeof serviceReceipts.$inferSelect;
export type NewServiceReceipt = typeof serviceReceipts.$inferInsert;
