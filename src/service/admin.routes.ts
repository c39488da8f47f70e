/**
 * Admin API: tenants, their trusted root DIDs, their API keys. Every route
 * needs the admin key. Routes stay thin: read the body strictly, parse with
 * zod, call one handler, send its result.
 *
 * A tenant key on a route naming ANOTHER tenant gets 404 (that tenant's data
 * does not exist for it); on every other admin route 403.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { MiddlewareHandler } from 'hono';
import {
  addTrustedRootRoute,
  createApiKeyRoute,
  createTenantRoute,
  listApiKeysRoute,
  listTenantsRoute,
  listTrustedRootsRoute,
  removeTrustedRootRoute,
  revokeApiKeyRoute,
  AddRootRequest,
  CreateApiKeyRequest,
  CreateTenantRequest,
} from '../api/admin.js';
import { BatonError } from '../protocol/errors.js';
import {
  addRootHandler,
  createApiKeyHandler,
  createTenantHandler,
  listApiKeysHandler,
  listRootsHandler,
  listTenantsHandler,
  removeRootHandler,
  revokeApiKeyHandler,
} from './admin.handlers.js';
import { assertScope, authenticateRequest } from './auth.js';
import { parseJsonBody } from './validate.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';

/** The admin key only; a tenant key naming another tenant gets 404. Answers are never cached. */
export function adminOnly(deps: ServiceDeps): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const auth = await authenticateRequest(deps, c);
    const tenant = c.req.param('tenant');
    if (auth.tenantId !== null && tenant !== undefined && tenant !== auth.tenantId) throw new BatonError('NOT_FOUND');
    assertScope(auth, ['admin']);
    await next();
    // Responses may carry a freshly minted secret: never cache them anywhere.
    c.header('Cache-Control', 'no-store');
  };
}

export function adminRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const r = newRouter();

  const admin = adminOnly(deps);

  serve(r, createTenantRoute, admin, async (c) => {
    const input = await parseJsonBody(c, deps.config.maxBodyBytes, CreateTenantRequest);
    return c.json(await createTenantHandler(deps, input, c.get('commitGate')), 201);
  });

  serve(r, listTenantsRoute, admin, async (c) => c.json(await listTenantsHandler(deps), 200));

  serve(r, addTrustedRootRoute, admin, async (c) => {
    const input = await parseJsonBody(c, deps.config.maxBodyBytes, AddRootRequest);
    const { created, root } = await addRootHandler(deps, c.req.param('tenant'), input, c.get('commitGate'));
    return c.json(root, created ? 201 : 200);
  });

  serve(r, listTrustedRootsRoute, admin, async (c) => c.json(await listRootsHandler(deps, c.req.param('tenant')), 200));

  serve(r, removeTrustedRootRoute, admin, async (c) => {
    await removeRootHandler(deps, c.req.param('tenant'), c.req.param('did'), c.get('commitGate'));
    return c.body(null, 204);
  });

  serve(r, createApiKeyRoute, admin, async (c) => {
    const input = await parseJsonBody(c, deps.config.maxBodyBytes, CreateApiKeyRequest);
    return c.json(await createApiKeyHandler(deps, c.req.param('tenant'), input, c.get('commitGate')), 201);
  });

  serve(r, listApiKeysRoute, admin, async (c) => c.json(await listApiKeysHandler(deps, c.req.param('tenant')), 200));

  serve(r, revokeApiKeyRoute, admin, async (c) => {
    await revokeApiKeyHandler(deps, c.req.param('id'), c.get('commitGate'));
    return c.body(null, 204);
  });

  return r;
}
