import { createRoute, z } from '@hono/zod-openapi';
import { SERVICE_RECEIPT_KINDS } from '../protocol/lists.js';
import {
  Jws,
  Timestamp,
  BadRequestResponse,
  UnauthorizedResponse,
  ForbiddenResponse,
  StorageUnavailableResponse,
  InternalResponse,
  InstantQuery,
  sinceBeforeUntil,
  WholeNumberText,
} from './common.js';

export const ServiceReceiptKind = z.enum(SERVICE_RECEIPT_KINDS).openapi('ServiceReceiptKind');

export const ServiceReceipt = z
  .strictObject({
    id: z.int().min(1).openapi({ description: 'Paging cursor (`after`).' }),
    kind: ServiceReceiptKind,
    subject: z.string().openapi({
      description:
        "What it is about, e.g. a DR hash or an invocation jti (a denial refused before its chain verified names the invocation's hash instead: its jti was only claimed).",
    }),
    kid: z.string(),
    jws: Jws,
    created_at: Timestamp,
  })
  .openapi('ServiceReceipt');

export const ServiceReceiptPage = z
  .strictObject({
    service_receipts: z.array(ServiceReceipt),
    next_after: z.int().nullable().openapi({ description: '`after` for the next page; `null` on the last page.' }),
  })
  .openapi('ServiceReceiptPage');

export const SERVICE_RECEIPTS_DEFAULT_LIMIT = 100;
export const SERVICE_RECEIPTS_MAX_LIMIT = 500;

export const ServiceReceiptsAfter = WholeNumberText.openapi('ServiceReceiptsAfter', {
  type: 'integer',
  minimum: 0,
  maximum: 999999999999999,
  param: {
    name: 'after',
    in: 'query',
    description: 'Return service receipts with an id greater than this (`next_after` of the previous page).',
  },
  default: 0,
});

export const ServiceReceiptsLimit = WholeNumberText.pipe(z.number().min(1).max(SERVICE_RECEIPTS_MAX_LIMIT)).openapi(
  'ServiceReceiptsLimit',
  {
    type: 'integer',
    minimum: 1,
    maximum: SERVICE_RECEIPTS_MAX_LIMIT,
    param: { name: 'limit', in: 'query' },
    default: SERVICE_RECEIPTS_DEFAULT_LIMIT,
  },
);

/** Strict: an unknown parameter is refused. */
export const ServiceReceiptsQuery = z
  .strictObject({
    after: ServiceReceiptsAfter.optional().default(0),
    limit: ServiceReceiptsLimit.optional().default(SERVICE_RECEIPTS_DEFAULT_LIMIT),
    kind: ServiceReceiptKind.optional().openapi({
      param: { name: 'kind', in: 'query', description: 'Only service receipts of this kind.' },
    }),
    subject: z
      .string()
      .min(1)
      .max(256)
      .regex(/^[\x21-\x7e]*$/, 'must be printable ASCII without spaces (a DR hash or an invocation jti)')
      .optional()
      .openapi({
        param: { name: 'subject', in: 'query', description: 'Only service receipts about this subject: a DR hash or an invocation jti.' },
      }),
    since: InstantQuery.optional().openapi({
      param: {
        name: 'since',
        in: 'query',
        description: 'Only service receipts signed at or after this instant (RFC 3339, with a zone).',
      },
    }),
    until: InstantQuery.optional().openapi({
      param: { name: 'until', in: 'query', description: 'Only service receipts signed before this instant (RFC 3339, with a zone).' },
    }),
  })
  .superRefine(sinceBeforeUntil);

export const listServiceReceiptsRoute = createRoute({
  method: 'get',
  path: '/v1/service-receipts',
  tags: ['service-receipts'],
  operationId: 'listServiceReceipts',
  summary: "The tenant's service receipts, oldest first",
  description:
    'Pages by service receipt id: pass `next_after` back as `after`, with the same filters, until it is `null`. Filters combine with AND: `kind`, `subject` (a DR hash or an invocation jti), `since` (inclusive) and `until` (exclusive). For decisions by DR subtree, tool or outcome, see `GET /v1/invocations`. Each service receipt is a JWS signed by the service key named by its `kid` (see `GET /v1/keys`).',
  'x-baton-scopes': ['audit'],
  security: [{ bearerAuth: [] }],
  request: {
    query: ServiceReceiptsQuery,
  },
  responses: {
    200: { description: 'One page.', content: { 'application/json': { schema: ServiceReceiptPage } } },
    400: BadRequestResponse(
      'A parameter is invalid (`after`, `limit`, an unknown `kind`, a date-time without a zone, `until` not after `since`), repeated, or unknown (`INVALID_REQUEST`).',
    ),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('The key lacks the `audit` scope, or is the admin key (`FORBIDDEN`).'),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
