/**
 * GET /v1/service-receipts?after=&limit=&kind=&subject=&since=&until=: an
 * auditor pages through its tenant's service receipts, oldest first, by id,
 * optionally filtered (paging by id stays exact under any filter). Needs an `audit` key; the tenant comes from
 * the key, never from the request.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { listServiceReceiptsRoute } from '../api/service-receipts.js';
import { z } from 'zod';
import { listServiceReceipts, type ServiceReceiptRow } from '../store/service-receipts.js';
import { requireScope, tenantOf } from './auth.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';
import { InstantQuerySchema, parseQuery } from './validate.js';
import { SERVICE_RECEIPT_KINDS } from '../protocol/lists.js';

export const SERVICE_RECEIPTS_DEFAULT_LIMIT = 100;
export const SERVICE_RECEIPTS_MAX_LIMIT = 500;

/** Decimal without sign or leading zeros, at most 15 digits (so always a safe integer). */
const decimal = z
  .string()
  .regex(/^(0|[1-9][0-9]{0,14})$/, 'must be a non-negative whole number')
  .transform(Number);

const ServiceReceiptsQuery = z
  .strictObject({
    after: decimal.optional().default(0),
    limit: decimal.pipe(z.number().min(1).max(SERVICE_RECEIPTS_MAX_LIMIT)).optional().default(SERVICE_RECEIPTS_DEFAULT_LIMIT),
    kind: z.enum(SERVICE_RECEIPT_KINDS).optional(),
    subject: z
      .string()
      .min(1)
      .max(256)
      .regex(/^[\x21-\x7e]*$/, 'must be printable ASCII without spaces (a DR hash or an invocation jti)')
      .optional(),
    since: InstantQuerySchema.optional(),
    until: InstantQuerySchema.optional(),
  })
  .superRefine((q, ctx) => {
    if (q.since !== undefined && q.until !== undefined && q.since.getTime() >= q.until.getTime())
      ctx.addIssue({ code: 'custom', path: ['until'], message: 'must be later than since' });
  });

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
