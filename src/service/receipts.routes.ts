/**
 * GET /v1/receipts?after=&limit=: an auditor pages through its tenant's
 * receipts, oldest first, by id. Needs an `audit` key; the tenant comes from
 * the key, never from the request.
 */
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { BatonError } from '../protocol/errors.js';
import { listReceipts, type ReceiptRow } from '../store/receipts.js';
import { requireScope, tenantOf } from './auth.js';
import type { AppEnv, ServiceDeps } from './types.js';

export const RECEIPTS_DEFAULT_LIMIT = 100;
export const RECEIPTS_MAX_LIMIT = 500;

/** Decimal without sign or leading zeros, at most 15 digits (so always a safe integer). */
const decimal = z.string().regex(/^(0|[1-9][0-9]{0,14})$/, 'must be a non-negative whole number').transform(Number);

const ReceiptsQuery = z.strictObject({
  after: decimal.optional().default(0),
  limit: decimal.pipe(z.number().min(1).max(RECEIPTS_MAX_LIMIT)).optional().default(RECEIPTS_DEFAULT_LIMIT),
});

/** Each query parameter at most once: a repeated one is ambiguous, so it is refused. */
function singleValuedQuery(c: Context<AppEnv>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, values] of Object.entries(c.req.queries())) {
    if (values.length !== 1) {
      throw new BatonError('INVALID_REQUEST', {
        message: `The query parameter "${name}" is given ${values.length} times; give it once.`,
        details: { parameter: name },
      });
    }
    out[name] = values[0] as string;
  }
  return out;
}

function parseQuery(c: Context<AppEnv>): z.infer<typeof ReceiptsQuery> {
  const parsed = ReceiptsQuery.safeParse(singleValuedQuery(c));
  if (!parsed.success) {
    throw new BatonError('INVALID_REQUEST', {
      message: `Invalid query: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'query'} ${i.message}`).join('; ')}.`,
      suggestion: `Use after=<receipt id> (default 0) and limit=1..${RECEIPTS_MAX_LIMIT} (default ${RECEIPTS_DEFAULT_LIMIT}), nothing else.`,
      details: { issues: parsed.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })) },
    });
  }
  return parsed.data;
}

function receiptView(r: ReceiptRow) {
  return { id: r.id, kind: r.kind, subject: r.subject, kid: r.kid, jws: r.jws, created_at: r.createdAt.toISOString() };
}

export function receiptRoutes(deps: ServiceDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.get('/v1/receipts', requireScope(deps, 'audit'), async (c) => {
    const tenantId = tenantOf(c.get('auth'));
    const q = parseQuery(c);
    const page = await listReceipts(deps.store.db, { tenantId, after: q.after, limit: q.limit });
    return c.json({ receipts: page.rows.map(receiptView), next_after: page.nextAfter }, 200);
  });

  return app;
}
