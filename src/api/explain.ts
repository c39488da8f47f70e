/** POST /v1/explain's HTTP contract; the handler is in src/service/explain.handlers.ts. */
import { createRoute, z } from '@hono/zod-openapi';
import { TOOL_READ_SCOPES } from '../protocol/lists.js';
import { MAX_CHAIN_DEPTH } from '../protocol/records.js';
import { RISK_FLAGS } from '../protocol/tool-catalog.js';
import {
  BadRequestResponse,
  ForbiddenResponse,
  InternalResponse,
  NotFoundResponse,
  PayloadTooLargeResponse,
  RecordHash,
  StorageUnavailableResponse,
  UnauthorizedResponse,
  Violation,
} from './common.js';
import { RuleDecision, ToolDeclaration } from './tools.js';

export const ExplainBody = z
  .strictObject({
    dr_chain: z
      .array(RecordHash)
      .min(1)
      .max(MAX_CHAIN_DEPTH)
      .openapi({ description: "Delegations stored for the key's tenant: a chain, root first, each the child of the one before." }),
    args: z.record(z.string(), z.unknown()).openapi({ description: 'The args the call would carry.' }),
    context: z
      .strictObject({ near_limit: z.boolean().optional(), cost_calibration: z.boolean().optional() })
      .openapi({
        description:
          "Runtime facts to assume; by default each is read from the store as verify reads it for this call, for a key that reads the tenant's records (false for other keys).",
      })
      .optional(),
  })
  .openapi('ExplainRequest');

const FlagSource = z
  .strictObject({
    kind: z.enum(['declared', 'undeclared', 'any_undeclared']),
    tool: z.string().openapi({ description: 'Absent for `any_undeclared`: an unrestricted delegation in a non-strict tenant.' }).optional(),
  })
  .openapi('TrifectaFlagSource');

const TrifectaReport = z
  .strictObject({
    detected: z.boolean().openapi({ description: 'The reach combines all three risk flags.' }),
    reach: z.enum(['listed', 'unrestricted']),
    sources: z
      .strictObject(
        Object.fromEntries(RISK_FLAGS.map((flag) => [flag, z.array(FlagSource)])) as Record<
          (typeof RISK_FLAGS)[number],
          z.ZodArray<typeof FlagSource>
        >,
      )
      .openapi({ description: 'For each risk flag, every tool in reach that carries it.' }),
  })
  .openapi('TrifectaReport');

const ResolvedTool = z
  .strictObject({
    kind: z.enum(['declared', 'undeclared', 'confusable']),
    tool: ToolDeclaration.optional(),
    name: z.string().optional(),
    declared: ToolDeclaration.optional(),
  })
  .openapi('ResolvedTool', {
    description:
      '`declared` (with `tool`), `undeclared` (with `name` when `args.tool` is a string), or `confusable`: a look-alike (`name`) of a declared tool (`declared`).',
  });

const RuleOutcome = z
  .strictObject({
    decision: RuleDecision,
    source: z.enum(['rule', 'default']),
    rule: z
      .strictObject({ index: z.int().min(0), id: z.string(), description: z.string().optional() })
      .openapi({ description: 'The rule that decided (`source: rule`).' })
      .optional(),
    certain: z.boolean().openapi({ description: 'false when the rule won as a possible match on unknown facts.' }).optional(),
    why: z.array(z.string()),
  })
  .openapi('RuleOutcome');

export const Explanation = z
  .strictObject({
    decision: RuleDecision,
    violations: z.array(
      // A fresh strict object, not extend(): the generator would write allOf over a closed Violation.
      z
        .strictObject({ ...Violation.shape, remediation: z.string().openapi({ description: 'What to do about it.' }) })
        .openapi('ExplainedViolation', { description: 'An unmet condition and what to do about it.' }),
    ),
    catalog_version: z.int().min(0),
    tool: ResolvedTool,
    estimate_usd: z
      .number()
      .min(0)
      .nullable()
      .openapi({ description: "The estimate verify would count (after the catalog's cost floor)." }),
    estimate_raised: z.boolean(),
    grants: z.array(TrifectaReport).openapi({
      description:
        "The trifecta judgement of each delegation's reach under the current catalog (`catalog_version`), root first. It does not decide holds: the stored grants do, judged when each delegation was stored (a held one is a GRANT_PENDING_APPROVAL violation whatever `detected` says here, and one stored without a grant is never held), as verify reads them.",
    }),
    chain_trifecta: TrifectaReport,
    rule: RuleOutcome,
  })
  .openapi('Explanation', {
    description: '`deny` if any condition other than approval is unmet, `require_approval` if only that, else `allow`.',
  });

export const explainRoute = createRoute({
  method: 'post',
  path: '/v1/explain',
  tags: ['tools'],
  operationId: 'explainCall',
  summary: 'Every unmet condition of a hypothetical call, each with a remediation',
  description:
    "What verify would refuse of this call now: its policies against `args`, the catalog's requirements, held grants and the tenant's rules; and, for a key that reads the tenant's records (`issue`, `verify`, `report`, `audit`; not `approve` alone, nor a `verify` or `report` key bound to a tool server without `issue`, `audit` or `approve`), the chain's standing (its root's trust, each delegation's time window, revocation and counters), the tool's rate window this minute, and NEAR_LIMIT and cost calibration as verify reads them (false for other keys unless `context` gives them). Reads only: nothing is counted, consumed or recorded.",
  'x-baton-scopes': [...TOOL_READ_SCOPES],
  security: [{ bearerAuth: [] }],
  request: { body: { required: true, content: { 'application/json': { schema: ExplainBody } } } },
  responses: {
    200: { description: 'The explanation.', content: { 'application/json': { schema: Explanation } } },
    400: BadRequestResponse(
      'The body is not a valid `ExplainRequest`, or `dr_chain` is not a chain from its root, each DR the child of the one before (`INVALID_REQUEST`).',
    ),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('The key has none of the scopes `issue`, `verify`, `audit`, `approve`, or is the admin key (`FORBIDDEN`).'),
    404: NotFoundResponse('A delegation of `dr_chain` is not stored for this tenant (`NOT_FOUND`).'),
    413: PayloadTooLargeResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
