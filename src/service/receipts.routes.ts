/**
 * GET /v1/receipts?after=&limit=: an auditor pages through its tenant's
 * receipts, oldest first, by id. Needs an `audit` key; the tenant comes from
 * the key, never from the request.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { listReceiptsRoute } from '../api/receipts.js';
import { z } from 'zod';
import { listReceipts, type ReceiptRow } from '../store/receipts.js';
import { requireScope, tenantOf } from './auth.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';
import { parseQuery } from './validate.js';

export const RECEIPTS_DEFAULT_LIMIT = 100;
export const RECEIPTS_MAX_LIMIT = 500;

/** Decimal without sign or leading zeros, at most 15 digits (so always a safe integer). */
const decimal = z
  .string()
  .regex(/^(0|[1-9][0-9]{0,14})$/, 'must be a non-negative whole number')
  .transform(Number);

const ReceiptsQuery = z.strictObject({
  after: decimal.optional().default(0),
  limit: decimal.pipe(z.number().min(1).max(RECEIPTS_MAX_LIMIT)).optional().default(RECEIPTS_DEFAULT_LIMIT),
});

function receiptView(r: ReceiptRow) {
  return { id: r.id, kind: r.kind, subject: r.subject, kid: r.kid, jws: r.jws, created_at: r.createdAt.toISOString() };
}

export function receiptRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = newRouter();

  serve(app, listReceiptsRoute, requireScope(deps, 'audit'), async (c) => {
    const tenantId = tenantOf(c.get('auth'));
    const q = parseQuery(c, ReceiptsQuery);
    const page = await listReceipts(deps.store.db, { tenantId, after: q.after, limit: q.limit });
    return c.json({ receipts: page.rows.map(receiptView), next_after: page.nextAfter }, 200);
  });

  return app;
}
