// Metered spend reported after execution, held apart from the estimates
// declared at verify time (invocations.estimated_micros).
import { sql } from 'drizzle-orm';
import { bigint, check, foreignKey, pgTable, primaryKey, text } from 'drizzle-orm/pg-core';
import { ACTUAL_SOURCES, type ActualSource } from '../../protocol/lists.js';
import { createdAt, micros, oneOf } from './columns.js';
import { invocations } from './invocations.js';

/** At most one metered actual per invocation (the primary key). */
export const actuals = pgTable(
  'actuals',
  {
    tenantId: text('tenant_id').notNull(),
    jti: text('jti').notNull(),
    costMicros: micros('cost_micros'), // null iff source = 'unavailable'
    tokensIn: bigint('tokens_in', { mode: 'number' }),
    tokensOut: bigint('tokens_out', { mode: 'number' }),
    source: text('source').notNull().$type<ActualSource>(),
    unavailableReason: text('unavailable_reason'),
    bodyHash: text('body_hash').notNull(), // same body again = idempotent, different = 409
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.jti] }),
    foreignKey({
      name: 'actuals_invocation_fk',
      columns: [t.tenantId, t.jti],
      foreignColumns: [invocations.tenantId, invocations.jti],
    }),
    check('actuals_source_known', oneOf(t.source, ACTUAL_SOURCES)),
    check('actuals_cost_iff_available', sql`(${t.source} = 'unavailable') = (${t.costMicros} is null)`),
    check(
      'actuals_unavailable_has_reason',
      sql`${t.source} <> 'unavailable' or (${t.unavailableReason} is not null and btrim(${t.unavailableReason}) <> '')`,
    ),
    check(
      'actuals_nonneg',
      sql`(${t.costMicros} is null or ${t.costMicros} >= 0) and (${t.tokensIn} is null or ${t.tokensIn} >= 0) and (${t.tokensOut} is null or ${t.tokensOut} >= 0)`,
    ),
  ],
);

export type Actual = typeof actuals.$inferSelect;
export type NewActual = typeof actuals.$inferInsert;
