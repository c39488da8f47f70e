/** Approval routes (contract style); handlers in src/service/approvals.handlers.ts. */
import { createRoute, z } from '@hono/zod-openapi';
import { GuardrailTripleSchema } from '../protocol/approval.js';
import { ErrorSchema } from './tools.js';

export const ApprovalSchema = z
  .object({
    id: z.string(),
    status: z.enum(['pending', 'approved', 'rejected', 'expired', 'used']),
    tool: z.string().nullable(),
    tool_server: z.string(),
    dr_chain: z.array(z.string()),
    invocation_jti: z.string(),
    requested_by: z.string(),
    catalog_version: z.int(),
    rule: z.string(),
    explanation: z.string(),
    created_at: z.int(),
    expires_at: z.int(),
    decision: z.object({ actor: z.string(), decided_by: z.string(), reason: z.string(), at: z.int() }).nullable(),
    used_at: z.int().nullable(),
  })
  .openapi('Approval');

export const DecisionBody = z
  .strictObject({ actor: z.string(), confirm: z.literal(true), reason: z.string() })
  .openapi('ApprovalDecision', { example: { actor: 'alice@example.com', confirm: true, reason: 'Quarterly export agreed with legal.' } });

/** The guardrail triple as judged (non-blank, plain text); the route schema above only documents it. */
export { GuardrailTripleSchema };

export const ApprovalListQuery = z.strictObject({
  status: z.enum(['pending', 'approved', 'rejected', 'expired', 'used']).optional(),
});

const IdParam = z.object({ id: z.string().openapi({ param: { name: 'id', in: 'path' }, example: 'apr_…' }) });
const json = (schema: z.ZodType, description: string) => ({ description, content: { 'application/json': { schema } } });
const errors = {
  400: json(ErrorSchema, 'Invalid request'),
  401: json(ErrorSchema, 'No valid API key'),
  403: json(ErrorSchema, 'Scope missing, or the requester deciding its own approval (SELF_APPROVAL)'),
  404: json(ErrorSchema, 'No such approval for this tenant'),
};

export const listApprovalsRoute = createRoute({
  method: 'get',
  path: '/v1/approvals',
  summary: 'Approvals of the tenant, oldest first (pending ones first to decide)',
  request: { query: ApprovalListQuery },
  responses: { 200: json(z.object({ approvals: z.array(ApprovalSchema) }), 'Approvals'), ...errors },
});

export const getApprovalRoute = createRoute({
  method: 'get',
  path: '/v1/approvals/{id}',
  summary: 'One approval',
  request: { params: IdParam },
  responses: { 200: json(ApprovalSchema, 'The approval'), ...errors },
});

const decideRoute = (what: 'approve' | 'reject') =>
  createRoute({
    method: 'post',
    path: `/v1/approvals/{id}/${what}`,
    summary: `${what === 'approve' ? 'Approve' : 'Reject'} a pending approval with the guardrail triple (approve scope)`,
    request: { params: IdParam, body: { required: true, content: { 'application/json': { schema: DecisionBody } } } },
    responses: {
      200: json(ApprovalSchema, 'Decided, with its receipt stored'),
      409: json(ErrorSchema, 'Already decided (CONFLICT)'),
      ...errors,
    },
  });

export const approveRoute = decideRoute('approve');
export const rejectRoute = decideRoute('reject');

// ---------------------------------------------------------------- delegations held for the trifecta

export const GrantSchema = z
  .object({
    dr_hash: z.string(),
    status: z.enum(['pending', 'approved', 'rejected']),
    explanation: z.string(),
    catalog_version: z.int(),
    decision: z.object({ actor: z.string(), decided_by: z.string(), reason: z.string(), at: z.int() }).nullable(),
  })
  .openapi('Grant');

export const GrantListQuery = z.strictObject({ status: z.enum(['pending', 'approved', 'rejected']).optional() });

export const listGrantsRoute = createRoute({
  method: 'get',
  path: '/v1/grants',
  summary: 'Delegations held for human approval because their tools together form the lethal trifecta',
  request: { query: GrantListQuery },
  responses: { 200: json(z.object({ grants: z.array(GrantSchema) }), 'Held delegations'), ...errors },
});

const HashParam = z.object({ hash: z.string().openapi({ param: { name: 'hash', in: 'path' }, example: 'sha256:…' }) });
const decideGrantRoute = (what: 'approve' | 'reject') =>
  createRoute({
    method: 'post',
    path: `/v1/grants/{hash}/${what}`,
    summary: `${what === 'approve' ? 'Approve' : 'Reject'} a delegation held for the trifecta (approve scope)`,
    request: { params: HashParam, body: { required: true, content: { 'application/json': { schema: DecisionBody } } } },
    responses: { 200: json(GrantSchema, 'Decided'), 409: json(ErrorSchema, 'Already decided (CONFLICT)'), ...errors },
  });

export const approveGrantRoute = decideGrantRoute('approve');
export const rejectGrantRoute = decideGrantRoute('reject');
