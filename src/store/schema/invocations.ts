// Verified invocations (allowed only; each consumed its jti) and recorded
// denials (which never consume a jti).
import { sql } from 'drizzle-orm';
import { bigserial, check, foreignKey, index, jsonb, pgTable, primaryKey, text } from 'drizzle-orm/pg-core';
import { createdAt, micros, tenantId } from './columns.js';
import { delegations } from './delegations.js';

export const invocations = pgTable(
  'invocations',
  {
    tenantId: tenantId(),
    jti: text('jti').notNull(), // 'inv:' + id; the primary key is the replay guard
    hash: text('hash').notNull(),
    jws: text('jws').notNull(),
    leafHash: text('leaf_hash').notNull(),
    drChain: text('dr_chain').array().notNull(), // root→leaf hashes
    tool: text('tool'),
    estimatedMicros: micros('estimated_micros').notNull().default(0), // declared, from args
    callerKeyId: text('caller_key_id').notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.jti] }),
    foreignKey({
      name: 'invocations_leaf_fk',
      columns: [t.tenantId, t.leafHash],
      foreignColumns: [delegations.tenantId, delegations.hash],
    }),
    // Secondary indexes never lead with tenant_id alone, or are partial, so the
    // verify statement's generic plans find rows by the primary key (0014).
    index('invocations_leaf_recent_idx').on(t.leafHash, t.tenantId, t.createdAt.desc()),
    index('invocations_dr_chain_gin').using('gin', t.drChain),
    // The decision list (migration 0011).
    index('invocations_tenant_recent_idx')
      .on(t.tenantId, t.createdAt.desc())
      .where(sql`${t.createdAt} is not null`),
    index('invocations_tool_recent_idx').on(t.tool, t.tenantId, t.createdAt.desc()),
    check('invocations_estimate_nonneg', sql`${t.estimatedMicros} >= 0`),
  ],
);

export type Violation = Record<string, unknown>;

export const denials = pgTable(
  'denials',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    tenantId: tenantId(),
    jti: text('jti'), // null when the invocation was too malformed to read one
    invocationHash: text('invocation_hash'),
    code: text('code').notNull(),
    block: text('block'),
    drChain: text('dr_chain')
      .array()
      .notNull()
      .default(sql`'{}'::text[]`),
    callerKeyId: text('caller_key_id').notNull(),
    violations: jsonb('violations')
      .notNull()
      .default(sql`'[]'::jsonb`)
      .$type<Violation[]>(),
    createdAt: createdAt(),
  },
  (t) => [
    index('denials_tenant_jti_idx').on(t.tenantId, t.jti),
    index('denials_dr_chain_gin').using('gin', t.drChain),
    // The decision list (migration 0011).
    index('denials_tenant_recent_idx').on(t.tenantId, t.createdAt.desc()),
    index('denials_tenant_code_recent_idx').on(t.tenantId, t.code, t.createdAt.desc()),
  ],
);

export type Invocation = typeof invocations.$inferSelect;
export type NewInvocation = typeof invocations.$inferInsert;
export type Denial = typeof denials.$inferSelect;
export type NewDenial = typeof denials.$inferInsert;
