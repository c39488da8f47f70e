/** Tool catalog handlers: thin, one service call each (see src/api/tools.ts for the contract). */
import { OpenAPIHono } from '@hono/zod-openapi';
import type { MiddlewareHandler } from 'hono';
import { BatonError } from '../protocol/errors.js';
import { currentToolsRoute, publishToolsRoute, toolsVersionRoute } from '../api/tools.js';
import { requireScope, tenantOf } from './auth.js';
import { adminOnly } from './admin.routes.js';
import { readJsonBody } from './body.js';
import { parseRequest } from './validate.js';
import { publishToolDocument, storedToolDocument, toolDocumentJson, PublishToolsBody } from './tools.js';
import type { AppEnv, ServiceDeps } from './types.js';

/**
 * Reads the body with Baton's strict JSON reader (size limit, no duplicate
 * keys) and hands the value to the route's validator through Hono's body cache.
 */
export function strictJsonBody(deps: ServiceDeps): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const value = await readJsonBody(c, deps.config.maxBodyBytes);
    (c.req as unknown as { bodyCache: Record<string, Promise<unknown>> }).bodyCache['json'] = Promise.resolve(value);
    await next();
  };
}

/** An OpenAPIHono sub-app whose validation failures are Baton's 400 INVALID_REQUEST. */
export function contractApp(): OpenAPIHono<AppEnv> {
  return new OpenAPIHono<AppEnv>({
    defaultHook: (result) => {
      if (!result.success)
        throw new BatonError('INVALID_REQUEST', {
          message: result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '),
        });
    },
  });
}

const READ_SCOPES = ['issue', 'verify', 'audit', 'approve'] as const;

export function toolRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = contractApp();

  const admin = adminOnly(deps);

  app.openapi({ ...publishToolsRoute, middleware: [admin, strictJsonBody(deps)] }, async (c) => {
    const { tenant } = c.req.valid('param');
    const body = parseRequest(PublishToolsBody, c.req.valid('json'), 'request body');
    const stored = await publishToolDocument(deps, tenant, body, c.get('auth').keyId);
    return c.json(toolDocumentJson(stored), 201);
  });

  const readers = requireScope(deps, ...READ_SCOPES);
  app.openapi({ ...currentToolsRoute, middleware: [readers] }, async (c) =>
    c.json(toolDocumentJson(await storedToolDocument(deps, tenantOf(c.get('auth')))), 200),
  );

  app.openapi({ ...toolsVersionRoute, middleware: [readers] }, async (c) => {
    const { version } = c.req.valid('param');
    return c.json(toolDocumentJson(await storedToolDocument(deps, tenantOf(c.get('auth')), version)), 200);
  });

  return app;
}
