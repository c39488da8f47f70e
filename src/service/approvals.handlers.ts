/** Approval handlers: thin, one service call each (contract in src/api/approvals.ts). */
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { Context } from 'hono';
import {
  ApprovalListQuery,
  approveGrantRoute,
  approveRoute,
  getApprovalRoute,
  GrantListQuery,
  DecisionRequest,
  listApprovalsRoute,
  listGrantsRoute,
  rejectGrantRoute,
  rejectRoute,
  SignedDecisionRequest,
  signedDecisionRoute,
  ApprovalIdParams,
} from '../api/approvals.js';
import { DelegationHashParams } from '../api/delegations.js';
import type { GuardrailTriple } from '../protocol/approval.js';
import { approvalOf, approvalsOf, decideApproval, decideApprovalSigned } from './approvals.js';
import { requireScope, tenantOf } from './auth.js';
import { newRouter, serve } from './router.js';
import { decideGrant, grantsOf } from './tool-grants.js';
import { parseJsonBody, parseParams, parseQuery } from './validate.js';
import type { AppEnv, ServiceDeps } from './types.js';

export function approvalRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = newRouter();
  const readers = requireScope(deps, 'approve', 'audit');
  const approver = requireScope(deps, 'approve');
  const triple = async (c: Context<AppEnv>): Promise<GuardrailTriple> => parseJsonBody(c, deps.config.maxBodyBytes, DecisionRequest);

  app.openapi({ ...listApprovalsRoute, middleware: [readers] }, async (c) => {
    const { status, cursor } = parseQuery(c, ApprovalListQuery);
    return c.json(await approvalsOf(deps, tenantOf(c.get('auth')), status, cursor), 200);
  });

  app.openapi({ ...getApprovalRoute, middleware: [readers] }, async (c) =>
    c.json(await approvalOf(deps, tenantOf(c.get('auth')), c.req.valid('param').id), 200),
  );

  for (const [route, outcome] of [
    [approveRoute, 'approved'],
    [rejectRoute, 'rejected'],
  ] as const) {
    serve(app, route, approver, async (c) => {
      const { id } = parseParams(c, ApprovalIdParams);
      const decision = await triple(c);
      const auth = c.get('auth');
      const decided = await decideApproval(deps, tenantOf(auth), id, outcome, decision, auth.keyId, c.get('commitGate'));
      deps.log.info('approval decided', { tenant_id: tenantOf(auth), approval_id: id, status: decided.status, decided_by: auth.keyId });
      return c.json(decided, 200);
    });
  }

  // Keyless: the signed record is the authority (any Authorization header is ignored).
  serve(app, signedDecisionRoute, async (c) => {
    const { id } = parseParams(c, ApprovalIdParams);
    const body = await parseJsonBody(c, deps.config.maxBodyBytes, SignedDecisionRequest);
    // decideApprovalSigned logs the decision: it knows the approval's tenant.
    const decided = await decideApprovalSigned(deps, id, body.signed_decision, c.get('commitGate'));
    return c.json(decided, 200);
  });

  app.openapi({ ...listGrantsRoute, middleware: [readers] }, async (c) => {
    const { status, cursor } = parseQuery(c, GrantListQuery);
    return c.json(await grantsOf(deps, tenantOf(c.get('auth')), status, cursor), 200);
  });

  for (const [route, outcome] of [
    [approveGrantRoute, 'approved'],
    [rejectGrantRoute, 'rejected'],
  ] as const) {
    serve(app, route, approver, async (c) => {
      const { hash } = parseParams(c, DelegationHashParams);
      const decision = await triple(c);
      const auth = c.get('auth');
      const decided = await decideGrant(deps, tenantOf(auth), hash, outcome, decision, auth.keyId, c.get('commitGate'));
      deps.log.info('grant decided', { tenant_id: tenantOf(auth), dr_hash: hash, status: decided.status, decided_by: auth.keyId });
      return c.json(decided, 200);
    });
  }
  return app;
}
