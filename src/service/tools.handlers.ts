/** Tool catalog handlers: thin, one service call each (contract in src/api/tools.ts). */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { adminToolsRoute, currentToolsRoute, publishToolsRoute, PublishToolsRequest, toolsVersionRoute } from '../api/tools.js';
import { requireTenant } from './tenants.js';
import { TOOL_READ_SCOPES } from '../protocol/lists.js';
import { requireScope, tenantOf } from './auth.js';
import { adminOnly } from './admin.routes.js';
import { newRouter, serve } from './router.js';
import { publishToolDocument, storedToolDocument, toolDocumentJson } from './tools.js';
import { parseJsonBody } from './validate.js';
import type { AppEnv, ServiceDeps } from './types.js';

export function toolRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = newRouter();

  serve(app, publishToolsRoute, adminOnly(deps), async (c) => {
    const body = await parseJsonBody(c, deps.config.maxBodyBytes, PublishToolsRequest);
    const stored = await publishToolDocument(deps, c.req.param('tenant'), body, c.get('auth').keyId, c.get('commitGate'));
    const published = toolDocumentJson(stored, 'admin');
    deps.log.info('tool catalog published', {
      tenant_id: c.req.param('tenant'),
      version: published.version,
      tools: published.tools.length,
      key_id: c.get('auth').keyId,
    });
    return c.json(published, 201);
  });

  // The operator publishes a tenant's catalog, so reads it back too (the next base_version is its version).
  serve(app, adminToolsRoute, adminOnly(deps), async (c) => {
    const tenantId = c.req.param('tenant');
    await requireTenant(deps, tenantId);
    return c.json(toolDocumentJson(await storedToolDocument(deps, tenantId), 'admin'), 200);
  });

  const readers = requireScope(deps, ...TOOL_READ_SCOPES);
  app.openapi({ ...currentToolsRoute, middleware: [readers] }, async (c) =>
    c.json(toolDocumentJson(await storedToolDocument(deps, tenantOf(c.get('auth'))), 'tenant'), 200),
  );

  app.openapi({ ...toolsVersionRoute, middleware: [readers] }, async (c) => {
    const { version } = c.req.valid('param');
    return c.json(toolDocumentJson(await storedToolDocument(deps, tenantOf(c.get('auth')), version), 'tenant'), 200);
  });

  return app;
}
