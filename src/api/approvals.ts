/**
 * The approval routes' HTTP contract: calls waiting for a human, and
 * delegations held because their tools together form the lethal trifecta.
 * Handlers are in src/service/approvals.handlers.ts.
 */
import { createRoute, z } from '@hono/zod-openapi';
import { GuardrailTripleSchema } from '../protocol/approval.js';
import { APPROVAL_STATUSES, GRANT_STATUSES } from '../protocol/lists.js';
import { APPROVAL_DECISION_MAX_AGE_SECONDS, APPROVAL_DECISION_TYPE } from '../protocol/approval-decision.js';
import { MAX_JWS_LENGTH } from '../protocol/records.js';
import {
  BadRequestResponse,
  ConflictResponse,
  fromProtocol,
  ForbiddenResponse,
  InternalResponse,
  NotFoundResponse,
  PayloadTooLargeResponse,
  RecordHash,
  StorageUnavailableResponse,
  UnauthorizedResponse,
} from './common.js';
import { DelegationHashParams } from './delegations.js';

/** Unix time in seconds. */
const UnixSeconds = z.int().min(0);

export const Decision = z
  .strictObject({
    actor: z.string().openapi({ description: 'Who decided, as they named themselves.' }),
    decided_by: z.string().openapi({ description: 'The id of the key that recorded the decision, or the approver DID that signed it.' }),
    reason: z.string(),
    at: UnixSeconds,
    record: z.string().optional().openapi({
      description:
        "Only on a decision signed by an approver DID, where the approval is read (`GET /v1/approvals`, `GET /v1/approvals/{id}`, and a decision's answer): the decision record itself (compact JWS), as posted to `/v1/approvals/{id}/signed-decision`. Its hash is `decision_record` in the decision's service receipt; check the signature, the approval it names and that hash offline (SDK `verifyApprovalDecision`). Absent on a decision recorded with an API key, on grants, and in the `approval` a verify or dry-run answer names.",
    }),
  })
  .openapi('Decision', { description: 'A recorded human decision.' });

export const CannotRun = z
  .strictObject({
    code: z
      .enum(['RECEIPT_REVOKED', 'RECEIPT_EXPIRED', 'UNTRUSTED_ROOT'])
      .openapi({ description: "What every verify of the call meets now: the first of these in verify's order (trust, time, revocation)." }),
    dr_hash: RecordHash.openapi({
      description:
        'The root record whose issuer is no longer trusted, or the delegation of the chain expired or revoked (nearest the root).',
    }),
    message: z.string().openapi({ description: 'Says which in words; it names no time and no DID.' }),
  })
  .openapi('ApprovalCannotRun', {
    description:
      "Why the call of a live approval cannot run now, whatever is decided: it cannot be approved now (`409`), and can be rejected or left to expire. Under a root the tenant no longer trusts (`UNTRUSTED_ROOT`) this can change: the approval keeps its place under its root's cap, and can be approved once the root is trusted again; a delegation expired or revoked stays so. A revocation ends the pending approvals through the revoked delegation (they read `expired`; one a verify held at that moment is ended just after, or by the next ask that meets its root's cap, unless a decision recorded it meanwhile: an approved one cannot be spent), and an approval's deadline is at most its chain's `exp`, so this is mostly seen on an approval whose root the tenant no longer trusts or on an approved one.",
  });

export const Approval = z
  .strictObject({
    id: z.string(),
    status: z.enum(APPROVAL_STATUSES).openapi({ description: 'An approved approval allows one call, then is `used`.' }),
    tool: z.string().nullable(),
    tool_server: z.string(),
    cmd: z.string().nullable().openapi({ description: 'The command of the call (null on approvals requested before Baton kept it).' }),
    args: z.record(z.string(), z.unknown()).nullable().openapi({
      description:
        'The arguments of the call, exactly as signed: what the approver allows. `binding` commits to them (null on approvals requested before Baton kept them).',
    }),
    dr_chain: z.array(RecordHash),
    invocation_jti: z.string(),
    requested_by: z.string().openapi({ description: 'The DID of the agent whose invocation asked.' }),
    catalog_version: z.int().min(0),
    rule: z.string().openapi({ description: 'The rule (or `default`) that required the approval.' }),
    explanation: z.string(),
    created_at: UnixSeconds,
    expires_at: UnixSeconds,
    decision: z.union([Decision, z.null()]),
    used_at: UnixSeconds.nullable(),
    cannot_run: CannotRun.optional().openapi({
      description:
        'Present only on a pending or approved approval (inside its deadline) whose call cannot run now: the tenant no longer trusts its root, or a delegation of its chain has expired or was revoked. Served by `GET /v1/approvals` and `GET /v1/approvals/{id}`.',
    }),
  })
  .openapi('Approval', { description: 'A call that waits for, or got, a human decision.' });

const nextCursor = z.string().nullable().openapi({ description: '`cursor` for the next page; `null` on the last page.' });

export const ApprovalList = z.strictObject({ approvals: z.array(Approval), next_cursor: nextCursor }).openapi('ApprovalList');

/** The protocol's guardrail triple (it also refuses blank and control text), described for the document. */
export const DecisionRequest = GuardrailTripleSchema.extend({
  actor: fromProtocol(GuardrailTripleSchema.shape.actor).openapi({ minLength: 1, description: 'Who decides; not blank, plain text.' }),
  confirm: fromProtocol(GuardrailTripleSchema.shape.confirm).openapi({ description: 'The decision must be confirmed explicitly.' }),
  reason: fromProtocol(GuardrailTripleSchema.shape.reason).openapi({ minLength: 1, description: 'Why; not blank, plain text.' }),
}).openapi('ApprovalDecision', { description: 'The guardrail triple: who, an explicit confirmation, and why.' });

/** `apr_` and 32 lowercase hex digits, as approvals.ts makes them: anything else names no approval. */
export const APPROVAL_ID = /^apr_[0-9a-f]{32}$/;
const approvalCursor = z
  .string()
  .regex(APPROVAL_ID, 'must be next_cursor of the previous page (an approval id)')
  .optional()
  .openapi({
    param: { name: 'cursor', in: 'query', description: '`next_cursor` of the previous page, unchanged. Omit for the first page.' },
  });
const grantCursor = RecordHash.optional().openapi({
  param: { name: 'cursor', in: 'query', description: '`next_cursor` of the previous page, unchanged. Omit for the first page.' },
});
export const ApprovalListQuery = z.strictObject({ status: z.enum(APPROVAL_STATUSES).optional(), cursor: approvalCursor });
export const GrantListQuery = z.strictObject({ status: z.enum(GRANT_STATUSES).optional(), cursor: grantCursor });

export const Grant = z
  .strictObject({
    dr_hash: RecordHash,
    status: z.enum(GRANT_STATUSES),
    explanation: z.string(),
    catalog_version: z.int().min(0),
    decision: z.union([Decision, z.null()]),
  })
  .openapi('Grant', { description: 'A delegation held until a human approves its reach.' });

export const GrantList = z.strictObject({ grants: z.array(Grant), next_cursor: nextCursor }).openapi('GrantList');

const tags = ['approvals'];
const readScopes = { 'x-baton-scopes': ['approve', 'audit'], security: [{ bearerAuth: [] }] };
const decideScopes = { 'x-baton-scopes': ['approve'], security: [{ bearerAuth: [] }] };
const readForbidden = ForbiddenResponse('The key has neither the `approve` nor the `audit` scope, or is the admin key (`FORBIDDEN`).');
const json = (schema: z.ZodType, description: string) => ({ description, content: { 'application/json': { schema } } });
const failures = { 500: InternalResponse(), 503: StorageUnavailableResponse() };

export const listApprovalsRoute = createRoute({
  method: 'get',
  path: '/v1/approvals',
  tags,
  operationId: 'listApprovals',
  summary: "The tenant's approvals, oldest first, 100 a page",
  description:
    'Keyset paged, so no number of approvals hides a newer one: pass `next_cursor` back as `cursor`, with the same `status`, until it is `null`.',
  ...readScopes,
  request: {
    query: z.object({
      status: z
        .enum(APPROVAL_STATUSES)
        .optional()
        .openapi({ param: { name: 'status', in: 'query', description: 'Only approvals in this status.' } }),
      cursor: approvalCursor,
    }),
  },
  responses: {
    200: json(ApprovalList, 'A page of approvals.'),
    400: BadRequestResponse(
      '`status` is not a status, `cursor` is not an approval of this tenant, a parameter is repeated, or an unknown parameter is given (`INVALID_REQUEST`).',
    ),
    401: UnauthorizedResponse(),
    403: readForbidden,
    ...failures,
  },
});

/** Approval ids are `apr_` and 32 lowercase hex digits (approvals.ts makes them): anything else names none. */
export const ApprovalIdParams = z.object({
  id: z
    .string()
    .regex(APPROVAL_ID, 'must be an approval id: apr_ followed by 32 lowercase hex digits')
    .openapi({ param: { name: 'id', in: 'path', description: 'The approval id (`apr_` and 32 hex digits).' } }),
});
const approvalId = ApprovalIdParams;
const badApprovalId = BadRequestResponse('`id` is not an approval id (`INVALID_REQUEST`).');

export const getApprovalRoute = createRoute({
  method: 'get',
  path: '/v1/approvals/{id}',
  tags,
  operationId: 'getApproval',
  summary: 'One approval',
  ...readScopes,
  request: { params: approvalId },
  responses: {
    200: json(Approval, 'The approval.'),
    400: badApprovalId,
    401: UnauthorizedResponse(),
    403: readForbidden,
    404: NotFoundResponse('This tenant has no such approval (`NOT_FOUND`).'),
    ...failures,
  },
});

/** What both kinds of decision may answer besides their own 403, 404 and 409. */
const decisionRefusals = {
  400: BadRequestResponse('The path names no approval or delegation, or the body is not a valid `ApprovalDecision` (`INVALID_REQUEST`).'),
  401: UnauthorizedResponse(),
  413: PayloadTooLargeResponse(),
  ...failures,
};
const decisionBody = { required: true, content: { 'application/json': { schema: DecisionRequest } } };

const decideApprovalRoute = (what: 'approve' | 'reject') =>
  createRoute({
    method: 'post',
    path: `/v1/approvals/{id}/${what}`,
    tags,
    operationId: `${what}Approval`,
    summary: `${what === 'approve' ? 'Approve' : 'Reject'} a pending approval`,
    description: 'The decision is final and stored with its service receipt. The key that asked for the approval cannot decide it.',
    ...decideScopes,
    request: { params: approvalId, body: decisionBody },
    responses: {
      200: json(Approval, 'Decided.'),
      403: ForbiddenResponse(
        'The key lacks the `approve` scope or is the admin key (`FORBIDDEN`), it asked for this approval itself (`SELF_APPROVAL`), or the approval passed its deadline, pending or approved and unused (`APPROVAL_EXPIRED`).',
      ),
      404: NotFoundResponse('This tenant has no such approval (`NOT_FOUND`).'),
      409: ConflictResponse(
        'The approval is no longer pending, or (approving) the call cannot run: a delegation of its chain was revoked (`details.revoked_dr`) or has expired (`details.expired_dr`), the tenant no longer trusts its root (`details.untrusted_root`), or it was asked under a tool catalog version a newer one has replaced (`details.current_catalog_version`) (`CONFLICT`).',
      ),
      ...decisionRefusals,
    },
  });

/** How the keyless decision body is parsed and documented. */
export const SignedDecisionRequest = z
  .strictObject({
    signed_decision: z
      .string()
      .min(1)
      .max(MAX_JWS_LENGTH)
      .openapi({ description: `A decision record (compact JWS) signed by an approver DID the tenant lists.` }),
  })
  .openapi('SignedApprovalDecision');

export const signedDecisionRoute = createRoute({
  method: 'post',
  path: '/v1/approvals/{id}/signed-decision',
  tags,
  operationId: 'decideApprovalSigned',
  summary: 'Approve or reject a pending approval with a record signed by an approver DID',
  description: `No API key is needed (one sent is ignored): the signature is the authority. The record's payload is \`{iss, drs_v: "4.0", drs_type: "${APPROVAL_DECISION_TYPE}", approval_id, decision: "approve"|"reject", confirm: true, reason, iat, jti}\`, encoded like a delegation record. It is accepted when \`approval_id\` is the path id, \`iat\` is at most ${APPROVAL_DECISION_MAX_AGE_SECONDS} s old, the signature verifies, \`iss\` is in the \`approvers\` of the approval's tenant in the tool document version current when the decision is stored, and the approval is pending and unexpired. The decision is then stored like a key holder's, with \`iss\` as actor and decider, and its service receipt names the record; the record itself is served as \`decision.record\` of the approval. A record decides once: its \`jti\` is kept per signer. An unknown approval id and a signer the tenant does not list get the same \`404\`.`,
  'x-baton-scopes': [],
  security: [],
  request: { params: approvalId, body: { required: true, content: { 'application/json': { schema: SignedDecisionRequest } } } },
  responses: {
    200: json(Approval, 'Decided.'),
    400: BadRequestResponse(
      '`id` is not an approval id or the body is invalid (`INVALID_REQUEST`), or the record is malformed, names another approval, or its `iat` is in the future or too old (`MALFORMED_JWS`, `NON_CANONICAL_JSON`, `INVALID_FIELD`, `INVALID_DID`, `WEAK_KEY`, ...).',
    ),
    403: ForbiddenResponse(
      'The signature does not verify (`SIGNATURE_INVALID`); the signer requested this approval itself (`SELF_APPROVAL`); or the approval expired (`APPROVAL_EXPIRED`).',
    ),
    404: NotFoundResponse('No approval with this id accepts decisions from the signer: unknown id or unlisted signer alike (`NOT_FOUND`).'),
    409: ConflictResponse(
      "The approval is no longer pending, an approving record's call cannot run (a delegation of its chain revoked, `details.revoked_dr`, or expired, `details.expired_dr`; its root no longer trusted, `details.untrusted_root`) or was asked under a tool catalog version a newer one has replaced (`details.current_catalog_version`), or this signer already used the record's `jti` (`CONFLICT`).",
    ),
    413: PayloadTooLargeResponse(),
    ...failures,
  },
});

export const approveRoute = decideApprovalRoute('approve');
export const rejectRoute = decideApprovalRoute('reject');

export const listGrantsRoute = createRoute({
  method: 'get',
  path: '/v1/grants',
  tags,
  operationId: 'listGrants',
  summary: 'Delegations held for a human because their tools together form the lethal trifecta, 100 a page',
  description: 'By DR hash, keyset paged: pass `next_cursor` back as `cursor`, with the same `status`, until it is `null`.',
  ...readScopes,
  request: {
    query: z.object({
      status: z
        .enum(GRANT_STATUSES)
        .optional()
        .openapi({ param: { name: 'status', in: 'query', description: 'Only grants in this status.' } }),
      cursor: grantCursor,
    }),
  },
  responses: {
    200: json(GrantList, 'A page of held delegations.'),
    400: BadRequestResponse(
      '`status` is not a status, `cursor` is not a record hash, a parameter is repeated, or an unknown parameter is given (`INVALID_REQUEST`).',
    ),
    401: UnauthorizedResponse(),
    403: readForbidden,
    ...failures,
  },
});

const decideGrantRoute = (what: 'approve' | 'reject') =>
  createRoute({
    method: 'post',
    path: `/v1/grants/{hash}/${what}`,
    tags,
    operationId: `${what}Grant`,
    summary: `${what === 'approve' ? 'Approve' : 'Reject'} a delegation held for the trifecta`,
    description: 'The decision is final and stored with its service receipt.',
    ...decideScopes,
    request: {
      params: DelegationHashParams,
      body: decisionBody,
    },
    responses: {
      200: json(Grant, 'Decided.'),
      403: ForbiddenResponse(
        'The key lacks the `approve` scope, or is the admin key (`FORBIDDEN`); or it is the key that submitted the held record (`SELF_APPROVAL`).',
      ),
      404: NotFoundResponse('No such delegation is held in this tenant (`NOT_FOUND`).'),
      409: ConflictResponse(
        'The grant is already decided, or (approving) no call can run through the held delegation: it or one of its ancestors was revoked (`details.revoked_dr`) or has expired (`details.expired_dr`), or the tenant no longer trusts its root (`details.untrusted_root`) (`CONFLICT`).',
      ),
      ...decisionRefusals,
    },
  });

export const approveGrantRoute = decideGrantRoute('approve');
export const rejectGrantRoute = decideGrantRoute('reject');
