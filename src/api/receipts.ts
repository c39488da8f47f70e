import { createRoute, z } from '@hono/zod-openapi';
import {
  Jws,
  Timestamp,
  BadRequestResponse,
  UnauthorizedResponse,
  ForbiddenResponse,
  StorageUnavailableResponse,
  InternalResponse,
} from './common.js';

export const ReceiptKind = z
  .enum([
    'delegation.accepted',
    'invocation.allowed',
    'invocation.denied',
    'actual.recorded',
    'delegation.revoked',
    'tools.catalog.published',
    'approval.requested',
    'approval.approved',
    'approval.rejected',
    'grant.pending',
    'grant.approved',
    'grant.rejected',
  ])
  .openapi('ReceiptKind');

export const Receipt = z
  .strictObject({
    id: z.int().min(1).openapi({ description: 'Paging cursor (`after`).' }),
    kind: ReceiptKind,
    subject: z.string().openapi({ description: 'What it is about, e.g. a DR hash or an invocation jti.' }),
    kid: z.string(),
    jws: Jws,
    created_at: Timestamp,
  })
  .openapi('Receipt');

export const ReceiptPage = z
  .strictObject({
    receipts: z.array(Receipt),
    next_after: z.int().nullable().openapi({ description: '`after` for the next page; `null` on the last page.' }),
  })
  .openapi('ReceiptPage');

export const ReceiptsAfter = z
  .int()
  .min(0)
  .max(999999999999999)
  .openapi('ReceiptsAfter', {
    param: { name: 'after', in: 'query', description: 'Return receipts with an id greater than this (`next_after` of the previous page).' },
    default: 0,
  });

export const ReceiptsLimit = z
  .int()
  .min(1)
  .max(500)
  .openapi('ReceiptsLimit', { param: { name: 'limit', in: 'query' }, default: 100 });

export const listReceiptsRoute = createRoute({
  method: 'get',
  path: '/v1/receipts',
  tags: ['receipts'],
  operationId: 'listReceipts',
  summary: "The tenant's service receipts, oldest first",
  description:
    'Pages by receipt id: pass `next_after` back as `after` until it is `null`. Each receipt is a JWS signed by the service key named by its `kid` (see `GET /v1/keys`).',
  'x-baton-scopes': ['audit'],
  security: [{ bearerAuth: [] }],
  request: { query: z.object({ after: ReceiptsAfter.optional(), limit: ReceiptsLimit.optional() }) },
  responses: {
    200: { description: 'One page.', content: { 'application/json': { schema: ReceiptPage } } },
    400: BadRequestResponse('`after` or `limit` is invalid, repeated, or an unknown parameter is given (`INVALID_REQUEST`).'),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('The key lacks the `audit` scope, or is the admin key (`FORBIDDEN`).'),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
