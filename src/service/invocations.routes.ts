/**
 * /v1/invocations: metered actuals (a `report` key) and audit reads (the
 * filtered decision list needs an `audit` key); and
 * GET /v1/delegations/{hash}/invocations (a DR's subtree, newest first).
 * A key bound to one tool server reads only invocations naming that server.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { DelegationHashParams, InvocationsPageQuery, listDelegationInvocationsRoute } from '../api/delegations.js';
import {
  ActualRequest,
  DecisionsQuery,
  getInvocationRoute,
  InvocationJtiParams,
  listInvocationsRoute,
  recordActualRoute,
} from '../api/invocations.js';
import { READ_SCOPES } from '../protocol/lists.js';
import { boundToolServerOf, requireScope, tenantOf } from './auth.js';
import { describeInvocation, invocationsOfDelegation, listTenantDecisions, recordActual } from './invocations.handlers.js';
import { parseJsonBody, parseParams, parseQuery } from './validate.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';

export function invocationRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const r = newRouter();
  const readers = requireScope(deps, ...READ_SCOPES);

  serve(r, recordActualRoute, requireScope(deps, 'report'), async (c) => {
    const auth = c.get('auth');
    const tenantId = tenantOf(auth);
    const { jti } = parseParams(c, InvocationJtiParams);
    const body = await parseJsonBody(c, deps.config.maxBodyBytes, ActualRequest);
    const result = await recordActual(deps, auth, tenantId, jti, body, c.get('commitGate'));
    return c.json(result.body, result.status);
  });

  serve(r, listInvocationsRoute, requireScope(deps, 'audit'), async (c) =>
    c.json(await listTenantDecisions(deps, tenantOf(c.get('auth')), parseQuery(c, DecisionsQuery))),
  );

  // A key bound to one tool server (without issue, audit or approve) reads only the invocations naming it.
  serve(r, getInvocationRoute, readers, async (c) => {
    const auth = c.get('auth');
    const { jti } = parseParams(c, InvocationJtiParams);
    return c.json(await describeInvocation(deps, tenantOf(auth), jti, boundToolServerOf(auth)));
  });

  serve(r, listDelegationInvocationsRoute, readers, async (c) => {
    const auth = c.get('auth');
    const tenantId = tenantOf(auth);
    const { hash } = parseParams(c, DelegationHashParams);
    const q = parseQuery(c, InvocationsPageQuery);
    return c.json(await invocationsOfDelegation(deps, tenantId, hash, q, boundToolServerOf(auth)));
  });

  return r;
}
