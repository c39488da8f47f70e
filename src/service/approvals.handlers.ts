/** Approval handlers: thin, one service call each (see src/api/approvals.ts for the contract). */
import type { OpenAPIHono } from '@hono/zod-openapi';
import {
  approveRoute,
  getApprovalRoute,
  GuardrailTripleSchema,
  listApprovalsRoute,
  rejectRoute,
  ApprovalListQuery,
  approveGrantRoute,
  GrantListQuery,
  listGrantsRoute,
  rejectGrantRoute,
} from '../api/approvals.js';
import { decideGrant, grantsOf } from './tool-grants.js';
import { requireScope, tenantOf } from './auth.js';
import { approvalOf, approvalsOf, decideApproval } from './approvals.js';
import { contractApp, strictJsonBody } from './tools.handlers.js';
import { parseQuery, parseRequest } from './validate.js';
import type { AppEnv, ServiceDeps } from './types.js';

export function approvalRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = contractApp();
  const readers = requireScope(deps, 'approve', 'audit');

  app.openapi({ ...listApprovalsRoute, middleware: [readers] }, async (c) => {
    const { status } = parseQuery(c, ApprovalListQuery);
    return c.json({ approvals: await approvalsOf(deps, tenantOf(c.get('auth')), status) }, 200);
  });

  app.openapi({ ...getApprovalRoute, middleware: [readers] }, async (c) =>
    c.json(await approvalOf(deps, tenantOf(c.get('auth')), c.req.valid('param').id), 200),
  );

  for (const [route, outcome] of [
    [approveRoute, 'approved'],
    [rejectRoute, 'rejected'],
  ] as const) {
    app.openapi({ ...route, middleware: [requireScope(deps, 'approve'), strictJsonBody(deps)] }, async (c) => {
      const triple = parseRequest(GuardrailTripleSchema, c.req.valid('json'), 'request body');
      const auth = c.get('auth');
      return c.json(await decideApproval(deps, tenantOf(auth), c.req.valid('param').id, outcome, triple, auth.keyId), 200);
    });
  }
  app.openapi({ ...listGrantsRoute, middleware: [readers] }, async (c) => {
    const { status } = parseQuery(c, GrantListQuery);
    return c.json({ grants: await grantsOf(deps, tenantOf(c.get('auth')), status) }, 200);
  });
  for (const [route, outcome] of [
    [approveGrantRoute, 'approved'],
    [rejectGrantRoute, 'rejected'],
  ] as const) {
    app.openapi({ ...route, middleware: [requireScope(deps, 'approve'), strictJsonBody(deps)] }, async (c) => {
      const triple = parseRequest(GuardrailTripleSchema, c.req.valid('json'), 'request body');
      const auth = c.get('auth');
      return c.json(await decideGrant(deps, tenantOf(auth), c.req.valid('param').hash, outcome, triple, auth.keyId), 200);
    });
  }
  return app;
}
