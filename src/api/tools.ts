/**
 * Tool catalog routes (contract style): each declared once with its zod
 * request and response schemas; handlers live in src/service/tools.handlers.ts.
 */
import { createRoute, z } from '@hono/zod-openapi';
import { ApprovalRulesSchema, RULE_DECISIONS, WebhookUrlSchema } from '../protocol/approval-rules.js';
import { DidKeySchema } from '../protocol/records.js';
import { MAX_CATALOG_TOOLS, ToolDeclarationSchema } from '../protocol/tool-catalog.js';

const ErrorSchema = z
  .object({ error: z.object({ code: z.string(), message: z.string(), suggestion: z.string() }).passthrough() })
  .openapi('Error');

const EXAMPLE_TOOL = {
  name: 'crm_export',
  type: 'write',
  blast_radius: 'organizational',
  untrusted_content: false,
  private_data_access: true,
  external_communication: false,
  tags: ['pii'],
  action_type: 'crm:export',
  rate_limit_per_minute: 10,
  cost_per_invocation_usd: 0.05,
};

export const ToolDocumentSchema = z
  .object({
    version: z.int(),
    strict: z.boolean(),
    default_decision: z.enum(['allow', 'deny', 'require_approval']),
    rules: z.array(z.object({}).passthrough()),
    approvers: z.array(z.string()),
    webhook_url: z.string().nullable(),
    tools: z.array(z.object({}).passthrough()),
    hash: z.string(),
    catalog_hash: z.string(),
    created_by: z.string(),
    created_at: z.string(),
  })
  .openapi('ToolDocument', {
    example: {
      version: 1,
      strict: true,
      default_decision: 'allow',
      rules: [],
      approvers: [],
      webhook_url: 'https://approvals.example.com/baton',
      tools: [EXAMPLE_TOOL],
      hash: 'sha256:…',
      catalog_hash: 'sha256:…',
      created_by: 'key_…',
      created_at: '2026-11-23T08:00:00.000Z',
    },
  });

/** What a publisher sends: the whole next version, on top of the version it read. */
export const PublishToolsBody = z.strictObject({
  /** The version this one replaces (0 for the first): a publish on a stale base is refused with CONFLICT. */
  base_version: z.int().min(0),
  strict: z.boolean(),
  tools: z.array(ToolDeclarationSchema).max(MAX_CATALOG_TOOLS),
  rules: ApprovalRulesSchema.optional(),
  default_decision: z.enum(RULE_DECISIONS).optional(),
  approvers: z.array(DidKeySchema).max(64).optional(),
  /** Each new pending approval is POSTed here, best effort. */
  webhook_url: WebhookUrlSchema.optional(),
});
export type PublishToolsInput = z.infer<typeof PublishToolsBody>;

export const PublishToolsSchema = PublishToolsBody.openapi('PublishTools', {
  example: { base_version: 0, strict: true, tools: [EXAMPLE_TOOL] },
});

const TenantParam = z.object({ tenant: z.string().openapi({ param: { name: 'tenant', in: 'path' }, example: 'ten_…' }) });
const VersionParam = z.object({
  version: z.coerce
    .number()
    .int()
    .min(1)
    .openapi({ param: { name: 'version', in: 'path' }, example: 1 }),
});

const errors = {
  400: { description: 'Invalid request', content: { 'application/json': { schema: ErrorSchema } } },
  401: { description: 'No valid API key', content: { 'application/json': { schema: ErrorSchema } } },
  403: { description: 'Scope missing', content: { 'application/json': { schema: ErrorSchema } } },
  404: { description: 'Not found', content: { 'application/json': { schema: ErrorSchema } } },
} as const;

export const publishToolsRoute = createRoute({
  method: 'post',
  path: '/v1/admin/tenants/{tenant}/tools',
  summary: 'Publish the next version of a tenant tool catalog and its approval settings (admin)',
  request: { params: TenantParam, body: { required: true, content: { 'application/json': { schema: PublishToolsSchema } } } },
  responses: {
    201: { description: 'The new version, with its receipt stored', content: { 'application/json': { schema: ToolDocumentSchema } } },
    409: { description: 'base_version is not the current version', content: { 'application/json': { schema: ErrorSchema } } },
    ...errors,
  },
});

export const currentToolsRoute = createRoute({
  method: 'get',
  path: '/v1/tools',
  summary: "The tenant's current tool catalog and approval settings",
  responses: { 200: { description: 'Current version', content: { 'application/json': { schema: ToolDocumentSchema } } }, ...errors },
});

export const toolsVersionRoute = createRoute({
  method: 'get',
  path: '/v1/tools/versions/{version}',
  summary: 'One version of the tenant tool catalog (versions are immutable)',
  request: { params: VersionParam },
  responses: { 200: { description: 'That version', content: { 'application/json': { schema: ToolDocumentSchema } } }, ...errors },
});

export { ErrorSchema };
