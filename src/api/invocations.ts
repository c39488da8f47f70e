import { createRoute, z } from '@hono/zod-openapi';
import {
  ErrorCode,
  Block,
  RecordHash,
  Violation,
  Jws,
  Timestamp,
  Usd,
  ReceiptRef,
  ActualSource,
  InvocationSummary,
  BadRequestResponse,
  UnauthorizedResponse,
  ForbiddenResponse,
  NotFoundResponse,
  ConflictResponse,
  PayloadTooLargeResponse,
  StorageUnavailableResponse,
  InternalResponse,
  orNull,
} from './common.js';

export const ActualRequest = z
  .strictObject({
    cost_usd: z
      .number()
      .min(0)
      .max(1000000)
      .nullable()
      .openapi({
        description:
          'Required unless `source` is `unavailable`, then absent or null. At most the per-invocation maximum of 1,000,000 USD (`NUMBER_OUT_OF_RANGE` above it).',
      })
      .optional(),
    tokens_in: z.int().min(0).nullable().optional(),
    tokens_out: z.int().min(0).nullable().optional(),
    source: ActualSource,
    unavailable_reason: z
      .string()
      .max(500)
      .nullable()
      .openapi({ description: 'Required (non-blank) when `source` is `unavailable`, otherwise absent or null.' })
      .optional(),
  })
  .openapi('ActualRequest');

export const Actual = z
  .strictObject({
    jti: z.string(),
    cost_usd: orNull(Usd),
    tokens_in: z.int().nullable(),
    tokens_out: z.int().nullable(),
    source: ActualSource,
    unavailable_reason: z.string().nullable(),
    declared_usd: Usd,
    recorded_at: Timestamp,
    receipt: orNull(ReceiptRef),
  })
  .openapi('Actual');

export const Denial = z
  .strictObject({
    code: ErrorCode,
    block: orNull(Block),
    dr_chain: z.array(RecordHash),
    invocation_hash: orNull(RecordHash),
    caller_key_id: z.string(),
    created_at: Timestamp,
    violations: z.array(Violation),
  })
  .openapi('Denial');

export const InvocationAllowed = z
  .strictObject({
    ...InvocationSummary.shape,
    jws: Jws,
    denials: z.array(Denial).openapi({ description: 'Later denials of this jti (replay attempts).' }),
  })
  .openapi('InvocationAllowed');

export const InvocationDenied = z
  .strictObject({ jti: z.string(), decision: z.literal('denied'), denials: z.array(Denial).min(1) })
  .openapi('InvocationDenied', { description: 'A jti that was only ever denied (a denial never consumes it).' });

export const InvocationJti = z
  .string()
  .min(1)
  .max(160)
  .regex(/^[!-~]+$/)
  .openapi('InvocationJti', {
    param: { name: 'jti', in: 'path', required: true, description: "The invocation's `jti` (`inv:...`), URL-encoded where needed." },
  });

export const recordActualRoute = createRoute({
  method: 'post',
  path: '/v1/invocations/{jti}/actuals',
  tags: ['invocations'],
  operationId: 'recordActual',
  summary: 'Report the metered cost of an allowed invocation',
  description:
    "One actual per invocation, with provenance (`source`). `source: unavailable` needs a non-blank `unavailable_reason` and no `cost_usd`; every other source needs `cost_usd` and no reason. Costs are rounded up to whole micro-dollars. A `cost_usd` above the per-invocation maximum of 1,000,000 USD is refused with `400` `NUMBER_OUT_OF_RANGE` (`details.field` `cost_usd`) and nothing is stored.\n\nThe same body again is idempotent (`200`, the stored actual); a different body is `409`. A metered cost replaces the invocation's declared estimate in the `max_spend_usd` budgets of its chain. An actual with `source: unavailable` leaves the declared estimate reserved against those budgets for good (an unmetered call never makes a budget look unused); the usage rollup counts it under `unmetered_invocations` and `unavailable_invocations`. A key bound to a tool server may only report for invocations naming it.",
  'x-baton-scopes': ['report'],
  security: [{ bearerAuth: [] }],
  request: {
    params: z.object({ jti: InvocationJti }),
    body: { required: true, content: { 'application/json': { schema: ActualRequest } } },
  },
  responses: {
    200: { description: 'This actual was already recorded with the same body.', content: { 'application/json': { schema: Actual } } },
    201: { description: 'Recorded and signed for.', content: { 'application/json': { schema: Actual } } },
    400: BadRequestResponse(
      'The jti or body is invalid, e.g. no `source` (`INVALID_REQUEST`), or the cost is above the per-invocation maximum of 1,000,000 USD (`NUMBER_OUT_OF_RANGE`).',
    ),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('The key lacks the `report` scope, is the admin key, or is bound to another tool server (`FORBIDDEN`).'),
    404: NotFoundResponse("No allowed invocation with this jti in the key's tenant (`NOT_FOUND`)."),
    409: ConflictResponse('A different actual is already recorded for this invocation; `details.stored` shows it (`CONFLICT`).'),
    413: PayloadTooLargeResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const getInvocationRoute = createRoute({
  method: 'get',
  path: '/v1/invocations/{jti}',
  tags: ['invocations'],
  operationId: 'getInvocation',
  summary: 'An invocation, its decision, service receipt, actual and denials',
  description:
    'An allowed invocation comes with its JWS, chain, declared estimate, receipt, actual and any later denials of the same jti (replay attempts). A jti that was only ever denied comes back as `decision: denied` with every recorded denial.',
  'x-baton-scopes': ['audit', 'report', 'verify', 'issue'],
  security: [{ bearerAuth: [] }],
  request: { params: z.object({ jti: InvocationJti }) },
  responses: {
    200: { description: 'The invocation.', content: { 'application/json': { schema: z.union([InvocationAllowed, InvocationDenied]) } } },
    400: BadRequestResponse('The jti is not 1-160 printable ASCII characters (`INVALID_REQUEST`).'),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('The key lacks a read scope, or is the admin key (`FORBIDDEN`).'),
    404: NotFoundResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
