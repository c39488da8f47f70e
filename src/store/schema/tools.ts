// Tool governance (migration 0005_tool_gate): versioned tool catalogs, human
// approvals of calls and of trifecta grants, per-tool rate windows. The
// in-statement gate lives in the migration.
import { sql } from 'drizzle-orm';
import { bigint, check, index, integer, jsonb, numeric, pgTable, primaryKey, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { APPROVAL_STATUSES, GRANT_STATUSES, type ApprovalStatus, type GrantStatus } from '../../protocol/lists.js';
import { createdAt, oneOf, tenantId, unixSeconds } from './columns.js';

/** One immutable version of a tenant's tool document; the current one is the highest. */
export const toolCatalogs = pgTable(
  'tool_catalogs',
  {
    tenantId: tenantId(),
    version: integer('version').notNull(),
    document: jsonb('document').notNull(),
    hash: text('hash').notNull(),
    createdBy: text('created_by').notNull(), // API key id that published it
    createdAt: createdAt(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.version] }), check('tool_catalogs_version_positive', sql`${t.version} >= 1`)],
);

/** A human decision about one call; times are unix seconds of the service clock. */
export const approvals = pgTable(
  'approvals',
  {
    tenantId: tenantId(),
    id: text('id').notNull(), // 'apr_' + random
    binding: text('binding').notNull(),
    status: text('status').notNull().$type<ApprovalStatus>(),
    requestedBy: text('requested_by').notNull(), // DID of the invoking agent
    /** The API key whose verify asked for it (migration 0021; null on older rows): it may not decide it either. */
    requestedByKey: text('requested_by_key'),
    /** Every API key whose verify asked while it was pending (migration 0030): none of them may decide it. */
    askedByKeys: text('asked_by_keys')
      .array()
      .notNull()
      .default(sql`'{}'`),
    invocationJti: text('invocation_jti').notNull(),
    drChain: text('dr_chain').array().notNull(),
    tool: text('tool'),
    toolServer: text('tool_server').notNull(),
    catalogVersion: integer('catalog_version').notNull(),
    rule: text('rule').notNull(),
    explanation: text('explanation').notNull(),
    /** The call's command and args, shown to the approver (migration 0023; null on older rows). */
    cmd: text('cmd'),
    args: jsonb('args').$type<Record<string, unknown>>(),
    createdAt: unixSeconds('created_at').notNull(),
    expiresAt: unixSeconds('expires_at').notNull(),
    decidedBy: text('decided_by'),
    actor: text('actor'),
    reason: text('reason'),
    decidedAt: unixSeconds('decided_at'),
    usedAt: unixSeconds('used_at'),
    usedJti: text('used_jti'),
    /** A decision signed by an approver DID (migration 0010): its jti, unique per signer, and the record itself. */
    decisionJti: text('decision_jti'),
    decisionJws: text('decision_jws'),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    check('approvals_status_known', oneOf(t.status, APPROVAL_STATUSES)),
    check('approvals_deadline_after_creation', sql`${t.expiresAt} > ${t.createdAt}`),
    check(
      'approvals_decided_complete',
      sql`(${oneOf(t.status, ['pending', 'expired'] satisfies ApprovalStatus[])}) or (${t.decidedBy} is not null and ${t.actor} is not null and ${t.reason} is not null and ${t.decidedAt} is not null)`,
    ),
    check('approvals_used_complete', sql`${t.status} <> 'used' or (${t.usedAt} is not null and ${t.usedJti} is not null)`),
    uniqueIndex('approvals_one_live_per_call')
      .on(t.tenantId, t.binding)
      .where(oneOf(t.status, ['pending', 'approved'] satisfies ApprovalStatus[])),
    // Pages of approvals, oldest first, with and without a status (migration 0029).
    index('approvals_tenant_status_idx').on(t.tenantId, t.status, t.createdAt, t.id),
    index('approvals_tenant_created_idx').on(t.tenantId, t.createdAt, t.id),
    // A call's standing rejection, looked up before it asks again (migration 0026).
    index('approvals_rejected_by_call')
      .on(t.tenantId, t.binding, t.expiresAt)
      .where(sql`${t.status} = 'rejected'`),
    uniqueIndex('approvals_decision_jti_once')
      .on(t.tenantId, t.decidedBy, t.decisionJti)
      .where(sql`${t.decisionJti} is not null`),
    index('approvals_id_idx').on(t.id),
    // Approvals waiting under one chain root, counted against their cap (migrations 0031, 0032).
    index('approvals_pending_by_root')
      .on(t.tenantId, sql`(${t.drChain}[1])`, t.expiresAt)
      .where(sql`${t.status} = 'pending'`),
  ],
);

export type ApprovalRow = typeof approvals.$inferSelect;

/** Delegations whose reach is a lethal trifecta: unusable until a human approves. */
export const grantApprovals = pgTable(
  'grant_approvals',
  {
    tenantId: tenantId(),
    drHash: text('dr_hash').notNull(),
    status: text('status').notNull().$type<GrantStatus>(),
    explanation: text('explanation').notNull(),
    catalogVersion: integer('catalog_version').notNull(),
    /**
     * The API key that submitted the held record (migration 0024): it may not decide the grant.
     * Null for a keyless submission and on older rows, which any approver key decides.
     */
    requestedByKey: text('requested_by_key'),
    decidedBy: text('decided_by'),
    actor: text('actor'),
    reason: text('reason'),
    decidedAt: unixSeconds('decided_at'),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.drHash] }), check('grant_approvals_status_known', oneOf(t.status, GRANT_STATUSES))],
);

/** Calls allowed per tool and minute of the database clock. */
export const toolRateWindows = pgTable(
  'tool_rate_windows',
  {
    tenantId: tenantId(),
    tool: text('tool').notNull(),
    windowStart: bigint('window_start', { mode: 'number' }).notNull(),
    calls: integer('calls').notNull(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.tool, t.windowStart] }), check('tool_rate_windows_calls_positive', sql`${t.calls} >= 1`)],
);

/**
 * Per delegation, over every invocation through it: how many were metered,
 * their metered cost and what was declared for them (migration 0010, kept by a
 * trigger on actuals). Read by the verify statement for cost calibration.
 */
export const drCostCalibration = pgTable(
  'dr_cost_calibration',
  {
    tenantId: text('tenant_id').notNull(),
    drHash: text('dr_hash').notNull(),
    meteredInvocations: integer('metered_invocations').notNull(),
    meteredMicros: numeric('metered_micros').notNull(),
    declaredMicros: numeric('declared_micros').notNull(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.drHash] })],
);
