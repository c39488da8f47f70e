/**
 * /v1/invocations: metered actuals (a `report` key) and audit reads; and
 * GET /v1/delegations/{hash}/invocations (a DR's subtree, newest first).
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { listDelegationInvocationsRoute } from '../api/delegations.js';
import { getInvocationRoute, recordActualRoute } from '../api/invocations.js';
import { z } from 'zod';
import { RecordHashSchema } from '../protocol/records.js';
import { requireScope, tenantOf } from './auth.js';
import { readJsonBody } from './body.js';
import {
  ActualRequestSchema,
  describeInvocation,
  INVOCATIONS_DEFAULT_LIMIT,
  INVOCATIONS_MAX_LIMIT,
  invocationsOfDelegation,
  JtiParamSchema,
  recordActual,
} from './invocations.handlers.js';
import { parseQuery, parseRequest } from './validate.js';
import { newRouter, serve } from './router.js';
import { READ_SCOPES, type AppEnv, type ServiceDeps } from './types.js';

const ListQuery = z.strictObject({
  cursor: z.string().min(1).max(512).optional(),
  limit: z
    .string()
    .regex(/^[1-9][0-9]{0,2}$/, `must be a whole number from 1 to ${INVOCATIONS_MAX_LIMIT}`)
    .transform(Number)
    .pipe(z.number().max(INVOCATIONS_MAX_LIMIT, `must be at most ${INVOCATIONS_MAX_LIMIT}`))
    .optional()
    .default(INVOCATIONS_DEFAULT_LIMIT),
});

export function invocationRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const r = newRouter();
  const readers = requireScope(deps, ...READ_SCOPES);
  const jtiParam = (raw: string) => parseRequest(JtiParamSchema, raw, 'path parameter jti');

  serve(r, recordActualRoute, requireScope(deps, 'report'), async (c) => {
    const auth = c.get('auth');
    const tenantId = tenantOf(auth);
    const jti = jtiParam(c.req.param('jti'));
    const body = parseRequest(ActualRequestSchema, await readJsonBody(c, deps.config.maxBodyBytes), 'request body');
    const result = await recordActual(deps, auth, tenantId, jti, body);
    return c.json(result.body, result.status);
  });

  serve(r, getInvocationRoute, readers, async (c) =>
    c.json(await describeInvocation(deps, tenantOf(c.get('auth')), jtiParam(c.req.param('jti')))),
  );

  serve(r, listDelegationInvocationsRoute, readers, async (c) => {
    const tenantId = tenantOf(c.get('auth'));
    const hash = parseRequest(RecordHashSchema, c.req.param('hash'), 'path parameter hash');
    const q = parseQuery(c, ListQuery);
    return c.json(await invocationsOfDelegation(deps, tenantId, hash, q));
  });

  return r;
}
