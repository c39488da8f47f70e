// Receipts the service signs for what it did. Append-only: the trigger in
// migrations/0001_receipts_append_only.sql refuses UPDATE, DELETE and TRUNCATE.
import { sql } from 'drizzle-orm';
import { bigserial, check, index, pgTable, text } from 'drizzle-orm/pg-core';
import { createdAt, tenantId } from './columns.js';
import { serviceKeys } from './keys.js';

export const RECEIPT_KINDS = [
  'delegation.accepted',
  'invocation.allowed',
  'invocation.denied',
  'actual.recorded',
  'delegation.revoked',
  // Tool governance (migration 0005_tool_gate).
  'tools.catalog.published',
  'approval.requested',
  'approval.approved',
  'approval.rejected',
  'grant.pending',
  'grant.approved',
  'grant.rejected',
] as const;
export type ReceiptKind = (typeof RECEIPT_KINDS)[number];

export const receipts = pgTable(
  'receipts',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(), // the `after=` paging cursor
    tenantId: tenantId(),
    kind: text('kind').notNull().$type<ReceiptKind>(),
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
    check(
      'receipts_kind_known',
      sql`${t.kind} in ('delegation.accepted','invocation.allowed','invocation.denied','actual.recorded','delegation.revoked','tools.catalog.published','approval.requested','approval.approved','approval.rejected','grant.pending','grant.approved','grant.rejected')`,
    ),
  ],
);

export type Receipt = typeof receipts.$inferSelect;
export type NewReceipt = typeof receipts.$inferInsert;
