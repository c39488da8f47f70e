// Tool governance (migration 0005_tool_gate): versioned tool catalogs, human
// approvals of calls and of trifecta grants, per-tool rate windows. Checks and
// the in-statement gate live in the migration; this is what queries see.
import { sql } from 'drizzle-orm';
import { bigint, check, index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex } from 'drizzle-orm/pg-core';
import { createdAt, tenantId, unixSeconds } from './columns.js';

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

export const APPROVAL_STATUSES = ['pending', 'approved', 'rejected', 'expired', 'used'] as const;
export type ApprovalStatusColumn = (typeof APPROVAL_STATUSES)[number];

/** A human decision about one call; times are unix seconds of the service clock. */
export const approvals = pgTable(
  'approvals',
  {
    tenantId: tenantId(),
    id: text('id').notNull(), // 'apr_' + random
    binding: text('binding').notNull(),
    status: text('status').notNull().$type<ApprovalStatusColumn>(),
    requestedBy: text('requested_by').notNull(), // API key id of the verifying tool server
    invocationJti: text('invocation_jti').notNull(),
    drChain: text('dr_chain').array().notNull(),
    tool: text('tool'),
    toolServer: text('tool_server').notNull(),
    catalogVersion: integer('catalog_version').notNull(),
    rule: text('rule').notNull(),
    explanation: text('explanation').notNull(),
    createdAt: unixSeconds('created_at').notNull(),
    expiresAt: unixSeconds('expires_at').notNull(),
    decidedBy: text('decided_by'),
    actor: text('actor'),
    reason: text('reason'),
    decidedAt: unixSeconds('decided_at'),
    usedAt: unixSeconds('used_at'),
    usedJti: text('used_jti'),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    uniqueIndex('approvals_one_live_per_call')
      .on(t.tenantId, t.binding)
      .where(sql`${t.status} in ('pending','approved')`),
    index('approvals_tenant_status_idx').on(t.tenantId, t.status, t.createdAt),
  ],
);

export type ApprovalRow = typeof approvals.$inferSelect;

/** Delegations whose reach is a lethal trifecta: unusable until a human approves. */
export const grantApprovals = pgTable(
  'grant_approvals',
  {
    tenantId: tenantId(),
    drHash: text('dr_hash').notNull(),
    status: text('status').notNull().$type<'pending' | 'approved' | 'rejected'>(),
    explanation: text('explanation').notNull(),
    catalogVersion: integer('catalog_version').notNull(),
    decidedBy: text('decided_by'),
    actor: text('actor'),
    reason: text('reason'),
    decidedAt: unixSeconds('decided_at'),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.drHash] })],
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
  (t) => [primaryKey({ columns: [t.tenantId, t.tool, t.windowStart] })],
);
