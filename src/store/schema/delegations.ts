// Stored delegation records (DRs) and their runtime counters.
import { sql } from 'drizzle-orm';
import { bigint, check, foreignKey, index, integer, jsonb, pgTable, primaryKey, text, unique } from 'drizzle-orm/pg-core';
import { createdAt, micros, serverTime, tenantId, unixSeconds } from './columns.js';

export const delegations = pgTable(
  'delegations',
  {
    tenantId: tenantId(), // the root's tenant
    hash: text('hash').notNull(), // 'sha256:' + hex of the exact JWS
    jws: text('jws').notNull(),
    jti: text('jti').notNull(),
    iss: text('iss').notNull(),
    sub: text('sub').notNull(),
    aud: text('aud').notNull(),
    cmd: text('cmd').notNull(),
    policy: jsonb('policy').notNull().$type<Record<string, unknown>>(),
    nbf: unixSeconds('nbf').notNull(),
    exp: unixSeconds('exp'), // null = no expiry
    iat: unixSeconds('iat').notNull(),
    parentHash: text('parent_hash'), // null at the root
    rootHash: text('root_hash').notNull(),
    depth: integer('depth').notNull(), // 0 = root
    /** Hashes root→parent (empty at the root): subtree queries and cascading revocation. */
    ancestors: text('ancestors')
      .array()
      .notNull()
      .default(sql`'{}'::text[]`),
    maxCalls: bigint('max_calls', { mode: 'number' }),
    callsUsed: bigint('calls_used', { mode: 'number' }).notNull().default(0),
    maxSpendMicros: micros('max_spend_micros'),
    /** Metered actuals + estimates of unmetered invocations in the subtree; kept only when max_spend is set. */
    spendReservedMicros: micros('spend_reserved_micros').notNull().default(0),
    revokedAt: serverTime('revoked_at'),
    revokedReason: text('revoked_reason'),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.hash] }),
    // A jti names a DR among its issuer's records (DRS): scoped per issuer, so
    // no other holder can take the jti of a DR it did not sign before it is stored.
    // Issuer first, like delegations_children_idx's parent first: no index but the
    // primary key leads with tenant_id alone, so the verify statement's generic
    // plans look chain links up by it (0014).
    unique('delegations_tenant_iss_jti_uq').on(t.iss, t.jti, t.tenantId),
    // A sub-DR must extend a DR stored for the same tenant.
    foreignKey({
      name: 'delegations_parent_fk',
      columns: [t.tenantId, t.parentHash],
      foreignColumns: [t.tenantId, t.hash],
    }),
    index('delegations_children_idx').on(t.parentHash, t.tenantId),
    index('delegations_ancestors_gin').using('gin', t.ancestors),
    // The ceiling the counting transaction relies on: a racing increment fails here, never overshoots.
    check('delegations_calls_within_max', sql`${t.maxCalls} is null or ${t.callsUsed} <= ${t.maxCalls}`),
    check('delegations_calls_nonneg', sql`${t.callsUsed} >= 0 and (${t.maxCalls} is null or ${t.maxCalls} >= 0)`),
    // No check against max_spend: a metered actual is a fact and must be recordable even past the budget.
    check('delegations_spend_nonneg', sql`${t.spendReservedMicros} >= 0 and (${t.maxSpendMicros} is null or ${t.maxSpendMicros} >= 0)`),
    // delegations_shape (depth, parent and ancestors agree) and delegations_hash_format are
    // checked by the trigger delegations_shape_checked (migration 0015), on INSERT and on an
    // UPDATE of those columns: as CHECK constraints they ran on every counter update too.
  ],
);

export type Delegation = typeof delegations.$inferSelect;
export type NewDelegation = typeof delegations.$inferInsert;
