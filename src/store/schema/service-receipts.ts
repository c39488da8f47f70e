// Service receipts the service signs for what it did. Append-only: the trigger in
// migrations/0001_receipts_append_only.sql refuses UPDATE, DELETE and TRUNCATE.
import { bigserial, check, index, pgTable, text } from 'drizzle-orm/pg-core';
import { SERVICE_RECEIPT_KINDS, type ServiceReceiptKind } from '../../protocol/lists.js';
import { createdAt, oneOf, tenantId } from './columns.js';
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
  (t) => [
    index('receipts_tenant_id_idx').on(t.tenantId, t.id),
    index('receipts_subject_idx').on(t.tenantId, t.subject),
    check('receipts_kind_known', oneOf(t.kind, SERVICE_RECEIPT_KINDS)),
  ],
);

export type ServiceReceipt = typeof serviceReceipts.$inferSelect;
export type NewServiceReceipt = typeof serviceReceipts.$inferInsert;
