/**
 * GET /v1/service-receipts?after=&limit=&kind=&subject=&since=&until=: an
 * auditor pages through its tenant's service receipts, oldest first, by id,
 * optionally filtered (paging by id stays exact under any filter). Needs an `audit` key; the tenant comes from
 * the key, never from the request.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { listServiceReceiptsRoute, ServiceReceiptsQuery } from '../api/service-receipts.js';
import { listServiceReceipts, type ServiceReceiptRow } from '../store/service-receipts.js';
import { requireScope, tenantOf } from './auth.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';
import { parseQuery } from './validate.js';

function serviceReceiptView(r: ServiceReceiptRow) {
  return { id: r.id, kind: r.kind, subject: r.subject, kid: r.kid, jws: r.jws, created_at: r.createdAt.toISOString() };
}

export function serviceReceiptRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = newRouter();

  serve(app, listServiceReceiptsRoute, requireScope(deps, 'audit'), async (c) => {
    const tenantId = tenantOf(c.get('auth'));
    const q = parseQuery(c, ServiceReceiptsQuery);
    const page = await listServiceReceipts(deps.store.db, { ...q, tenantId });
    return c.json({ service_receipts: page.rows.map(serviceReceiptView), next_after: page.nextAfter }, 200);
  });

  return app;
}
