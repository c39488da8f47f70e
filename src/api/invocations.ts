import { createRoute, z } from '@hono/zod-openapi';
import { MAX_INVOCATION_USD } from '../protocol/money.js';
import { NOT_PLAIN, PLAIN_TEXT, SAYS_SOMETHING } from '../protocol/text.js';
import {
  ErrorCode,
  Block,
  RecordHash,
  Violation,
  Jws,
  Timestamp,
  Usd,
  countedEstimateDescription,
  ServiceReceiptRef,
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
  InstantQuery,
  sinceBeforeUntil,
} from './common.js';
import { InvocationListItem, InvocationsPageQuery } from './delegations.js';

export const MAX_UNAVAILABLE_REASON = 500;

const tokenCount = z.int({ error: 'must be a whole number of tokens, at most 2^53 - 1' }).min(0, 'must not be negative');

/**
 * cost_usd has no maximum here: the documented one is usdToMicros's, which
 * answers NUMBER_OUT_OF_RANGE (z.number() already refuses NaN and the infinities).
 */
export const ActualRequest = z
  .strictObject({
    cost_usd: z
      .number({ error: 'must be a number of US dollars' })
      .min(0, 'must not be negative')
      .nullable()
      .openapi({
        maximum: MAX_INVOCATION_USD,
        description:
          'Required unless `source` is `unavailable`, then absent or null. At most the per-invocation maximum of 1,000,000 USD (`NUMBER_OUT_OF_RANGE` above it).',
      })
      .optional(),
    tokens_in: tokenCount.nullable().optional(),
    tokens_out: tokenCount.nullable().optional(),
    source: ActualSource,
    unavailable_reason: z
      .string()
      .max(MAX_UNAVAILABLE_REASON, `must be at most ${MAX_UNAVAILABLE_REASON} characters`)
      .regex(PLAIN_TEXT, NOT_PLAIN)
      .nullable()
      .openapi({ description: 'Required (non-blank) when `source` is `unavailable`, otherwise absent or null.' })
      .optional(),
  })
  .superRefine((b, ctx) => {
    const hasCost = b.cost_usd !== undefined && b.cost_usd !== null;
    if (b.source === 'unavailable') {
      if (hasCost)
        ctx.addIssue({
          code: 'custom',
          path: ['cost_usd'],
          message: 'must be absent when source is unavailable (there is no metered cost)',
        });
      if (!SAYS_SOMETHING.test(b.unavailable_reason ?? ''))
        ctx.addIssue({
          code: 'custom',
          path: ['unavailable_reason'],
          message: 'is required when source is unavailable, and must say why (at least one letter or digit)',
        });
    } else {
      if (!hasCost) ctx.addIssue({ code: 'custom', path: ['cost_usd'], message: `is required when source is ${b.source}` });
      if (b.unavailable_reason !== undefined && b.unavailable_reason !== null)
        ctx.addIssue({ code: 'custom', path: ['unavailable_reason'], message: 'is only allowed when source is unavailable' });
    }
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
    declared_usd: Usd.openapi({ description: countedEstimateDescription('The estimate the invocation was counted at:') }),
    recorded_at: Timestamp,
    service_receipt: orNull(ServiceReceiptRef),
  })
  .openapi('Actual');

export const Denial = z
  .strictObject({
    code: ErrorCode,
    block: orNull(Block),
    dr_chain: z.array(RecordHash).openapi({
      description:
        "The invocation's `dr_chain`, once its linkage, every signature and its root's trust held (a refusal in block D or later); empty when refused before that, since it is then only what the request claimed.",
    }),
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
    denials: z.array(Denial).openapi({
      description:
        'Later denials recorded under this jti: the same invocation sent again by another key, or another invocation reusing the jti (`invocation_hash` tells which), signed on a chain of this tenant that verified through block C. A denial refused earlier is recorded under no jti.',
    }),
  })
  .openapi('InvocationAllowed');

export const InvocationDenied = z
  .strictObject({ jti: z.string(), decision: z.literal('denied'), denials: z.array(Denial).min(1) })
  .openapi('InvocationDenied', { description: 'A jti that was only ever denied (a denial never consumes it).' });

export const InvocationJti = z
  .string()
  .min(1)
  .max(160)
  .regex(/^[!-~]+$/, 'must be printable ASCII without spaces')
  .openapi('InvocationJti', {
    param: { name: 'jti', in: 'path', required: true, description: "The invocation's `jti` (`inv:...`), URL-encoded where needed." },
    example: 'inv:7d3c9a4e-1f2b-4c5d-8e6f-9a0b1c2d3e4f',
  });
export const InvocationJtiParams = z.object({ jti: InvocationJti });

export const recordActualRoute = createRoute({
  method: 'post',
  path: '/v1/invocations/{jti}/actuals',
  tags: ['invocations'],
  operationId: 'recordActual',
  summary: 'Report the metered cost of an allowed invocation',
  description:
    "One actual per invocation, with provenance (`source`). `source: unavailable` needs a non-blank `unavailable_reason` and no `cost_usd`; every other source needs `cost_usd` and no reason. Costs are rounded up to whole micro-dollars. A `cost_usd` above the per-invocation maximum of 1,000,000 USD is refused with `400` `NUMBER_OUT_OF_RANGE` (`details.field` `cost_usd`) and nothing is stored.\n\nThe same body again is idempotent (`200`, the stored actual); a different body is `409`. A metered cost replaces the invocation's declared estimate in the `max_spend_usd` budgets of its chain. An actual with `source: unavailable` leaves the declared estimate reserved against those budgets for good (an unmetered call never makes a budget look unused); the usage rollup counts it under `unmetered_invocations` and `unavailable_invocations`. A key bound to a tool server may only report for invocations naming it; another server's invocation is answered `404` exactly as an unknown jti.",
  'x-baton-scopes': ['report'],
  security: [{ bearerAuth: [] }],
  request: {
    params: InvocationJtiParams,
    body: { required: true, content: { 'application/json': { schema: ActualRequest } } },
  },
  responses: {
    200: { description: 'This actual was already recorded with the same body.', content: { 'application/json': { schema: Actual } } },
    201: { description: 'Recorded and signed for.', content: { 'application/json': { schema: Actual } } },
    400: BadRequestResponse(
      'The jti or body is invalid, e.g. no `source` (`INVALID_REQUEST`), or the cost is above the per-invocation maximum of 1,000,000 USD (`NUMBER_OUT_OF_RANGE`).',
    ),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('The key lacks the `report` scope, or is the admin key (`FORBIDDEN`).'),
    404: NotFoundResponse(
      "No allowed invocation with this jti in the key's tenant, or, for a key bound to a tool server, none naming that server (answered the same) (`NOT_FOUND`).",
    ),
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
    "An allowed invocation comes with its JWS, chain, declared estimate, service receipt, actual and any later denials of the same jti (replay attempts). A jti that was only ever denied comes back as `decision: denied` with every recorded denial. A key bound to a tool server (`tool_server`) without `issue`, `audit` or `approve` reads only invocations naming its server, and only the denials recorded by its server's keys or replaying that invocation; anything else is `404` exactly as an unknown jti.",
  'x-baton-scopes': ['audit', 'report', 'verify', 'issue'],
  security: [{ bearerAuth: [] }],
  request: { params: InvocationJtiParams },
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

export const DenialListItem = z
  .strictObject({
    decision: z.literal('denied'),
    denial_id: z.int().min(1),
    jti: z.string().nullable().openapi({
      description:
        "Null when the invocation was too malformed to read one, or was refused before its linkage, every signature and its root's trust held (blocks A-C): its jti was then only what the request claimed, which anyone may write. `invocation_hash` still names the bytes sent.",
    }),
    ...Denial.shape,
  })
  .openapi('DenialListItem', { description: 'A recorded denial (it consumed nothing).' });

export const DecisionPage = z
  .strictObject({
    invocations: z.array(z.union([InvocationListItem, DenialListItem])),
    next_cursor: z.string().nullable().openapi({ description: '`cursor` for the next page; `null` on the last page.' }),
  })
  .openapi('DecisionPage');

const filterParam = (name: string, description: string) => ({ param: { name, in: 'query' as const, description } });

export const DecisionsQuery = z
  .strictObject({
    dr: RecordHash.optional().openapi(filterParam('dr', 'Only decisions whose `dr_chain` contains this delegation record hash.')),
    tool: z
      .string()
      .min(1)
      .max(256)
      .regex(/^[^\u0000-\u001f\u007f]*$/, 'must not contain control characters')
      .optional()
      .openapi(filterParam('tool', 'Only allowed invocations of this tool.')),
    outcome: z.enum(['allowed', 'denied']).optional().openapi(filterParam('outcome', 'Only allowed invocations, or only denials.')),
    code: ErrorCode.optional().openapi(filterParam('code', "Only denials with this code (the denial's or one of its violations').")),
    since: InstantQuery.optional().openapi(filterParam('since', 'Only decisions at or after this instant (RFC 3339, with a zone).')),
    until: InstantQuery.optional().openapi(filterParam('until', 'Only decisions before this instant (RFC 3339, with a zone).')),
    ...InvocationsPageQuery.shape,
  })
  .superRefine((q, ctx) => {
    // Contradictions are refused rather than answered with an empty page that looks like "nothing happened".
    if (q.code !== undefined && q.outcome === 'allowed')
      ctx.addIssue({ code: 'custom', path: ['code'], message: 'selects denials; it cannot be combined with outcome=allowed' });
    if (q.tool !== undefined && q.outcome === 'denied')
      ctx.addIssue({
        code: 'custom',
        path: ['tool'],
        message: 'selects allowed invocations (a denial stores no tool); it cannot be combined with outcome=denied',
      });
    if (q.tool !== undefined && q.code !== undefined)
      ctx.addIssue({ code: 'custom', path: ['tool'], message: 'selects allowed invocations and code selects denials; give one of them' });
    sinceBeforeUntil(q, ctx);
  });

export const listInvocationsRoute = createRoute({
  method: 'get',
  path: '/v1/invocations',
  tags: ['invocations'],
  operationId: 'listInvocations',
  summary: "The tenant's verify decisions (allowed invocations and denials), filtered, newest first",
  description:
    "Every allowed invocation (`decision: allowed`) and every recorded denial (`decision: denied`) of the key's tenant, newest first, keyset paged: pass `next_cursor` back as `cursor`, with the same filters, until it is `null`. Filters combine with AND:\n\n- `dr`: decisions whose chain passes through this delegation record (its whole subtree);\n- `tool`: allowed invocations of this tool (a denial stores no tool, so `tool` selects allowed invocations only);\n- `outcome`: `allowed` or `denied`;\n- `code`: denials with this code, as the denial's own code or the code of one of its violations (a denial lists every unmet condition of the stage that refused), which implies `denied`;\n- `since` (inclusive) and `until` (exclusive): RFC 3339 date-times with a zone.\n\nA contradictory combination (`code` with `outcome=allowed` or with `tool`, `tool` with `outcome=denied`, `until` not after `since`) is refused with `400` rather than answered with an empty page.",
  'x-baton-scopes': ['audit'],
  security: [{ bearerAuth: [] }],
  request: {
    query: DecisionsQuery,
  },
  responses: {
    200: { description: 'One page.', content: { 'application/json': { schema: DecisionPage } } },
    400: BadRequestResponse(
      'A filter, `limit` or `cursor` is invalid (an unknown code, a date-time without a zone, a cursor this service did not issue), filters contradict each other, a parameter is repeated, or an unknown parameter is given (`INVALID_REQUEST`, `details.issues`).',
    ),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('The key lacks the `audit` scope, or is the admin key (`FORBIDDEN`).'),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
