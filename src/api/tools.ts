/**
 * The tool catalog's HTTP contract: each route declared once; handlers are in
 * src/service/tools.handlers.ts. The schemas here describe the shapes for the
 * document; the handlers parse with the protocol's schemas (src/protocol),
 * which also refuse what JSON Schema cannot say (a name declared twice, look-
 * alike names, repeated rule ids).
 */
import { createRoute, z } from '@hono/zod-openapi';
import {
  ApprovalRulesSchema,
  CostCalibrationSettingsSchema,
  MAX_RULES,
  RULE_DECISIONS,
  WebhookUrlSchema,
} from '../protocol/approval-rules.js';
import { TOOL_READ_SCOPES } from '../protocol/lists.js';
import { DidKeySchema } from '../protocol/records.js';
import {
  BLAST_RADII,
  MAX_CATALOG_TOOLS,
  MAX_RATE_LIMIT_PER_MINUTE,
  RISK_FLAGS,
  SENSITIVITY_TAGS,
  TOOL_TYPES,
  ToolDeclarationSchema,
} from '../protocol/tool-catalog.js';
import {
  AdminBadRequestResponse,
  BadRequestResponse,
  ConflictResponse,
  DidKey,
  ForbiddenResponse,
  InternalResponse,
  NotFoundResponse,
  PayloadTooLargeResponse,
  RecordHash,
  StorageUnavailableResponse,
  Timestamp,
  UnauthorizedResponse,
  Usd,
} from './common.js';

export const RuleDecision = z.enum(RULE_DECISIONS).openapi('RuleDecision', {
  description: 'What a rule (or the default) decides for a call: `allow`, `deny`, or wait for a human (`require_approval`).',
});

export const ToolDeclaration = z
  .strictObject({
    name: z.string().min(1).max(256).openapi({
      description:
        'The exact name calls carry in `args.tool`: no control characters, not `*`, unique in the catalog up to case and Unicode form.',
    }),
    type: z.enum(TOOL_TYPES),
    blast_radius: z.enum(BLAST_RADII),
    untrusted_content: z.boolean().openapi({ description: 'The tool reads content an attacker may control.' }),
    private_data_access: z.boolean().openapi({ description: 'The tool reads private data.' }),
    external_communication: z.boolean().openapi({ description: 'The tool can send data outside the organisation.' }),
    tags: z.array(z.enum(SENSITIVITY_TAGS)).max(SENSITIVITY_TAGS.length).openapi({ description: 'Sensitivity tags, each at most once.' }),
    action_type: z
      .string()
      .max(129)
      .regex(/^[a-z][a-z0-9_.-]{0,63}:[a-z][a-z0-9_.-]{0,63}$/)
      .openapi({ description: '`category:action` in lower case.', example: 'files:delete' }),
    rate_limit_per_minute: z.int().min(1).max(MAX_RATE_LIMIT_PER_MINUTE).optional(),
    cost_per_invocation_usd: Usd.max(1000000000)
      .openapi({ description: 'A floor under the estimate of every call of this tool.' })
      .optional(),
  })
  .openapi('ToolDeclaration', { description: 'One tool of the catalog and the risk it carries.' });

/** A non-empty any-of list of a rule condition. */
const anyOf = <T extends z.ZodType>(item: T) =>
  z.array(item).min(1).max(64).openapi({ description: 'Any of these (each at most once).' }).optional();

export const RuleConditions = z
  .strictObject({
    type: anyOf(z.enum(TOOL_TYPES)),
    blast_radius: anyOf(z.enum(BLAST_RADII)),
    action_type: anyOf(
      z
        .string()
        .max(129)
        .regex(/^[a-z][a-z0-9_.-]{0,63}:(?:[a-z][a-z0-9_.-]{0,63}|\*)$/)
        .openapi({ description: '`category:action`, or `category:*` for every action of a category.', example: 'files:*' }),
    ),
    tags: anyOf(z.enum(SENSITIVITY_TAGS)),
    flags: anyOf(z.enum(RISK_FLAGS)),
    undeclared: z.boolean().openapi({ description: 'true: the tool is not in the catalog; false: it is.' }).optional(),
    trifecta: z.boolean().openapi({ description: "The chain's reach combines all three risk flags." }).optional(),
    near_limit: z.boolean().openapi({ description: 'Calls or budget of the chain have passed 80% of a ceiling.' }).optional(),
    estimate_above_usd: Usd.max(1000000000)
      .openapi({ description: "The estimate (after the catalog's cost floor) is above this amount." })
      .optional(),
    cost_calibration: z.boolean().openapi({ description: 'A delegation of the chain is flagged for cost calibration.' }).optional(),
  })
  .openapi('RuleConditions', {
    description: 'All must hold; an empty object matches every call. A condition on an unknown fact makes the rule a possible match only.',
  });

export const ApprovalRule = z
  .strictObject({
    id: z
      .string()
      .min(1)
      .max(64)
      .regex(/^[a-z0-9][a-z0-9_.-]*$/)
      .openapi({ description: 'Unique in the list.', example: 'org-wide-writes' }),
    when: RuleConditions,
    decision: RuleDecision,
    description: z.string().max(500).openapi({ description: 'Shown to the caller when the rule matches.' }).optional(),
  })
  .openapi('ApprovalRule', { description: 'Rules are read in order; the first certain match wins.' });

/** The undeclared-tool rule, fail closed either way: in strict mode by denial, otherwise by counting every risk. */
const STRICT_DESCRIPTION =
  "true: undeclared tools are denied (`TOOL_UNDECLARED`) and add nothing to a delegation's reach. " +
  'false: they may be called, and since nothing says what they do, an undeclared tool counts as carrying all three ' +
  'risk flags: a delegation naming one in `allowed_tools`, or leaving its tools unrestricted (it then reaches any ' +
  "undeclared tool), is a lethal trifecta and is held for approval; the held grant's explanation says so.";

const CostCalibration = z
  .strictObject({
    ratio_above: z
      .number()
      .min(1)
      .max(1000)
      .openapi({ description: 'Flagged when metered cost is above this many times the declared estimates.' }),
    min_metered_invocations: z
      .int()
      .min(1)
      .max(1_000_000)
      .openapi({ description: 'Only once at least this many invocations were metered.' }),
  })
  .openapi('CostCalibrationSettings', {
    description:
      'When a delegation of a chain is flagged for cost calibration (the `cost_calibration` rule condition): over the metered invocations through it (its whole subtree), metered cost above `ratio_above` times what was declared for them, over at least `min_metered_invocations`. Default `{ratio_above: 1.2, min_metered_invocations: 3}`.',
  });

export const ToolDocument = z
  .strictObject({
    version: z.int().min(1),
    strict: z.boolean().openapi({ description: STRICT_DESCRIPTION }),
    default_decision: RuleDecision,
    rules: z.array(ApprovalRule),
    approvers: z.array(DidKey).openapi({ description: 'DIDs whose signed approvals the tenant accepts.' }),
    webhook_url: z
      .string()
      .nullable()
      .openapi({ description: 'Where each new pending approval is pushed (best effort); `null` for none.' }),
    cost_calibration: CostCalibration,
    tools: z.array(ToolDeclaration),
    hash: RecordHash.openapi({ description: 'Hash of the whole version: catalog and settings.' }),
    catalog_hash: RecordHash.openapi({ description: 'Hash of the canonical catalog alone.' }),
    created_by: z.string().openapi({ description: 'The id of the key that published it.' }),
    created_at: Timestamp,
  })
  .openapi('ToolDocument', { description: "One immutable version of a tenant's tool catalog and approval settings." });

export const PublishToolsRequest = z
  .strictObject({
    base_version: z
      .int()
      .min(0)
      .openapi({ description: 'The version this one replaces (0 for the first); a stale base is refused with `CONFLICT`.' }),
    strict: z.boolean().openapi({ description: STRICT_DESCRIPTION }),
    tools: z.array(ToolDeclaration).max(MAX_CATALOG_TOOLS),
    rules: z.array(ApprovalRule).max(MAX_RULES).openapi({ description: 'Default: the built-in rules.' }).optional(),
    default_decision: RuleDecision.optional(),
    approvers: z.array(DidKey).max(64).optional(),
    webhook_url: z
      .string()
      .max(2048)
      .openapi({ description: 'An absolute http(s) URL without credentials; each new pending approval is POSTed to it.' })
      .optional(),
    cost_calibration: CostCalibration.optional(),
  })
  .openapi('PublishTools', { description: 'The whole next version, on top of the version the publisher read.' });

/** How the publish body is parsed: the protocol's own schemas, documented as PublishToolsRequest. */
export const PublishToolsBody = z.strictObject({
  base_version: z.int().min(0),
  strict: z.boolean(),
  tools: z.array(ToolDeclarationSchema).max(MAX_CATALOG_TOOLS),
  rules: ApprovalRulesSchema.optional(),
  default_decision: z.enum(RULE_DECISIONS).optional(),
  approvers: z.array(DidKeySchema).max(64).optional(),
  webhook_url: WebhookUrlSchema.optional(),
  cost_calibration: CostCalibrationSettingsSchema.optional(),
});
export type PublishToolsInput = z.infer<typeof PublishToolsBody>;

const tags = ['tools'];
const readScopes = { 'x-baton-scopes': [...TOOL_READ_SCOPES], security: [{ bearerAuth: [] }] };
const readForbidden = ForbiddenResponse(
  'The key has none of the scopes `issue`, `verify`, `audit`, `approve`, or is the admin key (`FORBIDDEN`).',
);
const document = (description: string) => ({ description, content: { 'application/json': { schema: ToolDocument } } });

export const publishToolsRoute = createRoute({
  method: 'post',
  path: '/v1/admin/tenants/{tenant}/tools',
  tags,
  operationId: 'publishTools',
  summary: "Publish the next version of a tenant's tool catalog and approval settings",
  description:
    'Stores the version with a `tools.catalog.published` service receipt, all or nothing. Responses are `Cache-Control: no-store`.',
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  request: {
    params: z.object({ tenant: z.string().openapi({ param: { name: 'tenant', in: 'path', description: 'The tenant id.' } }) }),
    body: { required: true, content: { 'application/json': { schema: PublishToolsRequest } } },
  },
  responses: {
    201: document('The new version.'),
    400: AdminBadRequestResponse(),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('Not the admin key (`FORBIDDEN`).'),
    404: NotFoundResponse('No tenant has this id (`NOT_FOUND`).'),
    409: ConflictResponse('`base_version` is not the current version (`CONFLICT`): read the catalog again.'),
    413: PayloadTooLargeResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const currentToolsRoute = createRoute({
  method: 'get',
  path: '/v1/tools',
  tags,
  operationId: 'getTools',
  summary: "The tenant's current tool catalog and approval settings",
  ...readScopes,
  responses: {
    200: document('The current version.'),
    401: UnauthorizedResponse(),
    403: readForbidden,
    404: NotFoundResponse('The tenant has not published a catalog yet (`NOT_FOUND`).'),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const toolsVersionRoute = createRoute({
  method: 'get',
  path: '/v1/tools/versions/{version}',
  tags,
  operationId: 'getToolsVersion',
  summary: "One version of the tenant's tool catalog (versions never change)",
  ...readScopes,
  request: {
    params: z.object({
      version: z.coerce
        .number()
        .int()
        .min(1)
        .openapi({ param: { name: 'version', in: 'path', description: 'A version number, from 1.' } }),
    }),
  },
  responses: {
    200: document('That version.'),
    400: BadRequestResponse('`version` is not a whole number from 1 (`INVALID_REQUEST`).'),
    401: UnauthorizedResponse(),
    403: readForbidden,
    404: NotFoundResponse('The tenant has no such version (`NOT_FOUND`).'),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
