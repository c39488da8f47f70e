/** /v1/delegations: submit signed DRs, custodial issuance, and reads. */
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { MiddlewareHandler } from 'hono';
import {
  DelegationHashParams,
  getDelegationChainRoute,
  getDelegationRoute,
  getDelegationTreeRoute,
  issueDelegationRoute,
  IssueRequest,
  SubmitDelegationsRequest,
  submitDelegationsRoute,
} from '../api/delegations.js';
import { refuseBoundKeys, requireScope, tenantOf } from './auth.js';
import { submitDelegations } from './delegation-submission.js';
import { chainOfDelegation, describeDelegation, treeOfDelegation } from './delegations.handlers.js';
import { issueCustodialRoot } from './issue.handlers.js';
import { parseJsonBody, parseParams } from './validate.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';
import { READ_SCOPES } from '../protocol/lists.js';

export function delegationRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const r = newRouter();
  // A key bound to one tool server reads only its server's invocations, never a delegation: the
  // record, chain and tree carry every server's calls and spend (refuseBoundKeys, before any lookup).
  const readers = requireScope(deps, ...READ_SCOPES);

  // Agents prove themselves by signature, so a key is optional here; with one, it picks the tenant.
  const optionalIssuer: MiddlewareHandler<AppEnv> = async (c, next) => {
    if (c.req.header('authorization') === undefined) return next();
    return requireScope(deps, 'issue')(c, next);
  };

  serve(r, submitDelegationsRoute, optionalIssuer, async (c) => {
    const body = await parseJsonBody(c, deps.config.maxBodyBytes, SubmitDelegationsRequest);
    const list = 'receipts' in body ? body.receipts : [body.receipt];
    const auth = c.get('auth');
    const result = await submitDelegations(deps, auth ? tenantOf(auth) : null, list, auth?.keyId ?? null, c.get('commitGate'));
    return c.json(result, result.created ? 201 : 200);
  });

  serve(r, issueDelegationRoute, requireScope(deps, 'issue'), async (c) => {
    const body = await parseJsonBody(c, deps.config.maxBodyBytes, IssueRequest);
    const result = await issueCustodialRoot(deps, tenantOf(c.get('auth')), body, c.get('auth').keyId, c.get('commitGate'));
    return c.json(result.body, result.created ? 201 : 200);
  });

  serve(r, getDelegationRoute, readers, refuseBoundKeys, async (c) =>
    c.json(await describeDelegation(deps, tenantOf(c.get('auth')), parseParams(c, DelegationHashParams).hash)),
  );
  serve(r, getDelegationChainRoute, readers, refuseBoundKeys, async (c) =>
    c.json(await chainOfDelegation(deps, tenantOf(c.get('auth')), parseParams(c, DelegationHashParams).hash)),
  );
  serve(r, getDelegationTreeRoute, readers, refuseBoundKeys, async (c) =>
    c.json(await treeOfDelegation(deps, tenantOf(c.get('auth')), parseParams(c, DelegationHashParams).hash)),
  );
  return r;
}
