/**
 * The tool catalog's HTTP contract: each route declared once; handlers are in
 * src/service/tools.handlers.ts. The schemas are the protocol's (src/protocol),
 * described for the document, so the publish body is parsed as documented and
 * also refused for what JSON Schema cannot say (repeated rule ids, and, when
 * the catalog is checked, a name declared twice or look-alike names).
 */
import { createRoute, z } from '@hono/zod-openapi';
import {
  ApprovalRuleSchema,
  CostCalibrationSettingsSchema,
  MAX_RULES,
  noRepeatedRuleIds,
  RULE_DECISIONS,
  RuleConditionsSchema,
  WebhookUrlSchema,
} from '../protocol/approval-rules.js';
import { TOOL_READ_SCOPES } from '../protocol/lists.js';
import { EVEN_WITH_ITEM_ISSUES, MAX_CATALOG_TOOLS, ToolDeclarationSchema } from '../protocol/tool-catalog.js';
import {
  AdminBadRequestResponse,
  BadRequestResponse,
  ConflictResponse,
  DidKey,
  ForbiddenResponse,
  fromProtocol,
  InternalResponse,
  NotFoundResponse,
  PayloadTooLargeResponse,
  RecordHash,
  StorageUnavailableResponse,
  Timestamp,
  UnauthorizedResponse,
  WholeNumberText,
} from './common.js';

export const RuleDecision = z.enum(RULE_DECISIONS).openapi('RuleDecision', {
  description: 'What a rule (or the default) decides for a call: `allow`, `deny`, or wait for a human (`require_approval`).',
});

const declared = ToolDeclarationSchema.shape;

export const ToolDeclaration = ToolDeclarationSchema.extend({
  name: fromProtocol(declared.name).openapi({
    description:
      'The exact name calls carry in `args.tool`: no control characters, not `*`, unique in the catalog up to case and Unicode form.',
  }),
  untrusted_content: fromProtocol(declared.untrusted_content).openapi({ description: 'The tool reads content an attacker may control.' }),
  private_data_access: fromProtocol(declared.private_data_access).openapi({ description: 'The tool reads private data.' }),
  external_communication: fromProtocol(declared.external_communication).openapi({
    description: 'The tool can send data outside the organisation.',
  }),
  tags: fromProtocol(declared.tags).openapi({ description: 'Sensitivity tags, each at most once.' }),
  action_type: fromProtocol(declared.action_type).openapi({ description: '`category:action` in lower case.', example: 'files:delete' }),
  cost_per_invocation_usd: fromProtocol(declared.cost_per_invocation_usd).openapi({
    description: 'A floor under the estimate of every call of this tool.',
  }),
}).openapi('ToolDeclaration', { description: 'One tool of the catalog and the risk it carries.' });

const conditions = RuleConditionsSchema.shape;
/** A non-empty any-of list of a rule condition. */
const anyOf = <T extends z.ZodType>(list: T) => fromProtocol(list).openapi({ description: 'Any of these (each at most once).' });

export const RuleConditions = RuleConditionsSchema.extend({
  type: anyOf(conditions.type),
  blast_radius: anyOf(conditions.blast_radius),
  action_type: fromProtocol(conditions.action_type).openapi({
    description: 'Any of these (each at most once): `category:action`, or `category:*` for every action of a category.',
    example: ['files:*'],
  }),
  tags: anyOf(conditions.tags),
  flags: anyOf(conditions.flags),
  undeclared: fromProtocol(conditions.undeclared).openapi({ description: 'true: the tool is not in the catalog; false: it is.' }),
  trifecta: fromProtocol(conditions.trifecta).openapi({ description: "The chain's reach combines all three risk flags." }),
  near_limit: fromProtocol(conditions.near_limit).openapi({ description: 'Calls or budget of the chain have passed 80% of a ceiling.' }),
  estimate_above_usd: fromProtocol(conditions.estimate_above_usd).openapi({
    description: "The estimate (after the catalog's cost floor) is above this amount.",
  }),
  cost_calibration: fromProtocol(conditions.cost_calibration).openapi({
    description: 'A delegation of the chain is flagged for cost calibration.',
  }),
}).openapi('RuleConditions', {
  description: 'All must hold; an empty object matches every call. A condition on an unknown fact makes the rule a possible match only.',
});

export const ApprovalRule = ApprovalRuleSchema.extend({
  id: fromProtocol(ApprovalRuleSchema.shape.id).openapi({ description: 'Unique in the list.', example: 'org-wide-writes' }),
  when: RuleConditions,
  decision: RuleDecision,
  description: fromProtocol(ApprovalRuleSchema.shape.description).openapi({ description: 'Shown to the caller when the rule matches.' }),
}).openapi('ApprovalRule', { description: 'Rules are read in order; the first certain match wins.' });

/** The undeclared-tool rule, fail closed either way: in strict mode by denial, otherwise by counting every risk. */
const STRICT_DESCRIPTION =
  "true: undeclared tools are denied (`TOOL_UNDECLARED`) and add nothing to a delegation's reach. " +
  'false: they may be called, and since nothing says what they do, an undeclared tool counts as carrying all three ' +
  'risk flags: a delegation naming one in `allowed_tools`, or leaving its tools unrestricted (it then reaches any ' +
  "undeclared tool), is a lethal trifecta and is held for approval; the held grant's explanation says so.";

const CostCalibration = CostCalibrationSettingsSchema.extend({
  ratio_above: fromProtocol(CostCalibrationSettingsSchema.shape.ratio_above).openapi({
    description: 'Flagged when metered cost is above this many times the declared estimates.',
  }),
  min_metered_invocations: fromProtocol(CostCalibrationSettingsSchema.shape.min_metered_invocations).openapi({
    description: 'Only once at least this many invocations were metered.',
  }),
}).openapi('CostCalibrationSettings', {
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
    webhook_url: z.string().nullable().openapi({
      description:
        "Where each new pending approval is pushed (best effort); `null` for none. Whole only to the admin key (publish, and the admin read). Tenant keys see that one is set, and its scheme: `https://…`. A webhook URL is often its own credential (in its path, or its host name), and a tenant key may be one tool server's.",
    }),
    cost_calibration: CostCalibration,
    cost_calibration_default: z.boolean().openapi({
      description:
        '`true` when the version was published without `cost_calibration`: the defaults shown apply, and `hash` does not cover them (it covers the settings as published).',
    }),
    tools: z.array(ToolDeclaration),
    hash: RecordHash.openapi({
      description:
        'Hash of the whole version: `sha256:` + hex SHA-256 of the JCS form of `{catalog_hash, settings}`, `settings` being `strict`, `rules`, `default_decision`, `approvers`, `webhook_url` when set and `cost_calibration` when `cost_calibration_default` is `false` (SDK `toolDocumentHashes`).',
    }),
    catalog_hash: RecordHash.openapi({
      description:
        'Hash of the canonical catalog alone: `{version, tools}`, tools sorted by name, tags sorted, optional fields only when set.',
    }),
    created_by: z.string().openapi({ description: 'The id of the key that published it.' }),
    created_at: Timestamp,
  })
  .openapi('ToolDocument', { description: "One immutable version of a tenant's tool catalog and approval settings." });

/** The publish body, parsed as documented: the protocol's schemas, which also refuse a rule id used twice. */
export const PublishToolsRequest = z
  .strictObject({
    base_version: z
      .int()
      .min(0)
      .openapi({ description: 'The version this one replaces (0 for the first); a stale base is refused with `CONFLICT`.' }),
    strict: z.boolean().openapi({ description: STRICT_DESCRIPTION }),
    tools: z.array(ToolDeclaration).max(MAX_CATALOG_TOOLS),
    rules: z
      .array(ApprovalRule)
      .max(MAX_RULES)
      .superRefine(noRepeatedRuleIds, EVEN_WITH_ITEM_ISSUES)
      .openapi({ description: 'Default: the built-in rules.' })
      .optional(),
    default_decision: RuleDecision.optional(),
    approvers: z.array(DidKey).max(64).optional(),
    webhook_url: fromProtocol(WebhookUrlSchema)
      .openapi({ description: 'An absolute http(s) URL without credentials; each new pending approval is POSTed to it.' })
      .optional(),
    cost_calibration: CostCalibration.optional(),
  })
  .openapi('PublishTools', { description: 'The whole next version, on top of the version the publisher read.' });
export type PublishToolsInput = z.output<typeof PublishToolsRequest>;

/** Catalog versions are a 32-bit column: a larger number names no version, and is refused as such. */
const MAX_CATALOG_VERSION = 2_147_483_647;

const tags = ['tools'];
const readScopes = { 'x-baton-scopes': [...TOOL_READ_SCOPES], security: [{ bearerAuth: [] }] };
const readForbidden = ForbiddenResponse(
  'The key has none of the scopes `issue`, `verify`, `audit`, `approve`, or is the admin key (`FORBIDDEN`).',
);
const tenantParam = z.object({ tenant: z.string().openapi({ param: { name: 'tenant', in: 'path', description: 'The tenant id.' } }) });
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
    params: tenantParam,
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

export const adminToolsRoute = createRoute({
  method: 'get',
  path: '/v1/admin/tenants/{tenant}/tools',
  tags,
  operationId: 'getTenantTools',
  summary: "A tenant's current tool catalog and approval settings, for the operator",
  description:
    'What `GET /v1/tools` answers a key of the tenant, read with the admin key: the operator publishes the catalog, and needs its current `version` as the next `base_version`.',
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  request: {
    params: tenantParam,
  },
  responses: {
    200: document('The current version.'),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('Not the admin key (`FORBIDDEN`).'),
    404: NotFoundResponse('No tenant has this id, or it has not published a catalog yet (`NOT_FOUND`).'),
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
      version: WholeNumberText.pipe(z.int().min(1).max(MAX_CATALOG_VERSION)).openapi({
        type: 'integer',
        minimum: 1,
        maximum: MAX_CATALOG_VERSION,
        param: { name: 'version', in: 'path', description: 'A version number, from 1, in decimal digits.' },
      }),
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
