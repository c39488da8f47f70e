/**
 * /v1/invocations: metered actuals (a `report` key) and audit reads (the
 * filtered decision list needs an `audit` key); and
 * GET /v1/delegations/{hash}/invocations (a DR's subtree, newest first).
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { listDelegationInvocationsRoute } from '../api/delegations.js';
import { ActualRequest, getInvocationRoute, listInvocationsRoute, recordActualRoute } from '../api/invocations.js';
import { ERROR_TABLE, type ErrorCode } from '../protocol/errors.js';
import { z } from 'zod';
import { READ_SCOPES } from '../protocol/lists.js';
import { RecordHashSchema } from '../protocol/records.js';
import { requireScope, tenantOf } from './auth.js';
import {
  describeInvocation,
  INVOCATIONS_DEFAULT_LIMIT,
  INVOCATIONS_MAX_LIMIT,
  invocationsOfDelegation,
  JtiParamSchema,
  listTenantDecisions,
  recordActual,
} from './invocations.handlers.js';
import { InstantQuerySchema, parseJsonBody, parseQuery, parseRequest } from './validate.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';

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

const DecisionsQuery = ListQuery.extend({
  dr: RecordHashSchema.optional(),
  tool: z
    .string()
    .min(1)
    .max(256)
    .regex(/^[^\u0000-\u001f\u007f]*$/, 'must not contain control characters')
    .optional(),
  outcome: z.enum(['allowed', 'denied']).optional(),
  code: z.enum(Object.keys(ERROR_TABLE) as [ErrorCode, ...ErrorCode[]], { error: 'must be a Baton error code' }).optional(),
  since: InstantQuerySchema.optional(),
  until: InstantQuerySchema.optional(),
}).superRefine((q, ctx) => {
  // Contradictions are refused rather than answered with an empty page that looks like "nothing happened".
  if (q.code !== undefined && q.outcome === 'allowed')
    ctx.addIssue({ code: 'custom', path: ['code'], message: 'selects denials; it cannot be combined with outcome=allowed' });
  if (q.tool !== undefined && q.outcome === 'denied')
    ctx.addIssue({
      code: 'custom',
      path: ['tool'],
      message: 'selects allowed invocations (a denial stores no tool); it cannot be combined with outcome=denied',
    });
  if (q.tool !== undefined && q.code !== undefined)
    ctx.addIssue({ code: 'custom', path: ['tool'], message: 'selects allowed invocations and code selects denials; give one of them' });
  if (q.since !== undefined && q.until !== undefined && q.since.getTime() >= q.until.getTime())
    ctx.addIssue({ code: 'custom', path: ['until'], message: 'must be later than since' });
});

export function invocationRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const r = newRouter();
  const readers = requireScope(deps, ...READ_SCOPES);
  const jtiParam = (raw: string) => parseRequest(JtiParamSchema, raw, 'path parameter jti');

  serve(r, recordActualRoute, requireScope(deps, 'report'), async (c) => {
    const auth = c.get('auth');
    const tenantId = tenantOf(auth);
    const jti = jtiParam(c.req.param('jti'));
    const body = await parseJsonBody(c, deps.config.maxBodyBytes, ActualRequest);
    const result = await recordActual(deps, auth, tenantId, jti, body);
    return c.json(result.body, result.status);
  });

  serve(r, listInvocationsRoute, requireScope(deps, 'audit'), async (c) =>
    c.json(await listTenantDecisions(deps, tenantOf(c.get('auth')), parseQuery(c, DecisionsQuery))),
  );

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
