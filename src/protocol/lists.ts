/**
 * The enumerated values the service stores and serves, each written once.
 * The drizzle schema builds its check constraints from these lists, the API's
 * zod enums (and so openapi.yaml and the SDK's wire types) are made from
 * them, and the handlers, SDK and CLI import them. A test compares the live
 * PostgreSQL constraints with them, so a list changed without a migration
 * fails. The tool catalog's own lists (tool types, blast radii, sensitivity
 * tags, risk flags) are in tool-catalog.ts, and rule decisions in
 * approval-rules.ts, next to the schemas that use them.
 */

/** Scopes an operator may give a tenant's key. */
export const TENANT_KEY_SCOPES = ['issue', 'verify', 'report', 'audit', 'approve'] as const;
/** Every API key scope; `admin` belongs to no tenant. */
export const API_KEY_SCOPES = ['admin', ...TENANT_KEY_SCOPES] as const;
export type TenantKeyScope = (typeof TENANT_KEY_SCOPES)[number];
export type ApiKeyScope = (typeof API_KEY_SCOPES)[number];

/** The tenant scopes that may read delegations and invocations: one list, one order, for every such route. */
export const READ_SCOPES = ['issue', 'verify', 'report', 'audit'] as const satisfies readonly TenantKeyScope[];
/** The tenant scopes that may read the tool catalog and explain a call against it. */
export const TOOL_READ_SCOPES = ['issue', 'verify', 'audit', 'approve'] as const satisfies readonly TenantKeyScope[];

/** The provenance of a metered cost; an actual without one is refused. */
export const ACTUAL_SOURCES = ['harness-reported', 'api-usage', 'manual-meter', 'unavailable'] as const;
export type ActualSource = (typeof ACTUAL_SOURCES)[number];

/** What a service receipt records. */
export const SERVICE_RECEIPT_KINDS = [
  'delegation.accepted',
  'invocation.allowed',
  'invocation.denied',
  'actual.recorded',
  'delegation.revoked',
  'tools.catalog.published',
  'approval.requested',
  'approval.approved',
  'approval.rejected',
  'grant.pending',
  'grant.approved',
  'grant.rejected',
] as const;
export type ServiceReceiptKind = (typeof SERVICE_RECEIPT_KINDS)[number];

/** The states of an approval of one call (see approval.ts for the transitions). */
export const APPROVAL_STATUSES = ['pending', 'approved', 'rejected', 'expired', 'used'] as const;
export type ApprovalStatus = (typeof APPROVAL_STATUSES)[number];

/** The states of a delegation held because its tools form the lethal trifecta. */
export const GRANT_STATUSES = ['pending', 'approved', 'rejected'] as const satisfies readonly ApprovalStatus[];
export type GrantStatus = (typeof GRANT_STATUSES)[number];

/** The outcomes a human decision records, on an approval or a grant. */
export const DECISION_OUTCOMES = ['approved', 'rejected'] as const satisfies readonly GrantStatus[];
export type DecisionOutcome = (typeof DECISION_OUTCOMES)[number];

/** The kinds of root issuer a root delegation may declare (`drs_root_type`). */
export const ROOT_TYPES = ['human', 'organisation', 'automated-system'] as const;
export type RootType = (typeof ROOT_TYPES)[number];

/** A stored delegation's status at a moment; `revoked` when the record or an ancestor is revoked. */
export const DELEGATION_STATUSES = ['active', 'revoked', 'expired', 'held', 'not_yet_valid'] as const;
export type DelegationStatus = (typeof DELEGATION_STATUSES)[number];
