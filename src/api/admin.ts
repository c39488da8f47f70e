import { createRoute, z } from '@hono/zod-openapi';
import { TENANT_KEY_SCOPES } from '../protocol/lists.js';
import { NOT_PLAIN, PLAIN_NAME } from '../protocol/text.js';
import {
  DidKey,
  Timestamp,
  AdminBadRequestResponse,
  UnauthorizedResponse,
  ForbiddenResponse,
  NotFoundResponse,
  ConflictResponse,
  PayloadTooLargeResponse,
  StorageUnavailableResponse,
  InternalResponse,
  orNull,
} from './common.js';

/** The longest lifetime a key may be given (10 years), and the longest rotation grace period (30 days). */
export const MAX_KEY_LIFETIME_SECONDS = 10 * 365 * 86_400;
export const MAX_ROTATION_GRACE_SECONDS = 30 * 86_400;

// Messages are predicates: parseRequest puts the field name in front of them.
export const wholeSeconds = (min: number, max: number, maxText: string) =>
  z
    .number({ error: 'must be a whole number of seconds' })
    .int('must be a whole number of seconds')
    .min(min, min === 0 ? 'must not be negative' : `must be at least ${min}`)
    .max(max, `must be at most ${max} (${maxText})`);

/** A key's lifetime in seconds (creation and rotation); null or absent: it never expires. */
export const keyLifetimeSeconds = () => wholeSeconds(1, MAX_KEY_LIFETIME_SECONDS, '10 years').nullable().optional();

export const Tenant = z.strictObject({ id: z.string(), name: z.string(), created_at: Timestamp }).openapi('Tenant');

export const TenantList = z.strictObject({ tenants: z.array(Tenant) }).openapi('TenantList');

// The request schemas below are the ones the service parses with (parseRequest), so their
// messages are predicates, like those of wholeSeconds.
export const DisplayName = z
  .string({ error: (iss) => (iss.input === undefined ? 'is required (a string)' : 'must be a string') })
  .trim()
  .min(1, 'must not be empty or only whitespace')
  .max(200, 'must be at most 200 characters')
  .regex(PLAIN_NAME, NOT_PLAIN)
  .openapi('DisplayName', {
    description: '1-200 characters after trimming, no control, bidi, zero-width or other invisible characters; stored trimmed.',
  });

export const CreateTenantRequest = z.strictObject({ name: DisplayName }).openapi('CreateTenantRequest');

export const TrustedRoot = z
  .strictObject({ tenant_id: z.string(), did: DidKey, label: z.string().nullable(), created_at: Timestamp })
  .openapi('TrustedRoot');

export const TrustedRootList = z.strictObject({ roots: z.array(TrustedRoot) }).openapi('TrustedRootList');

export const AddRootRequest = z
  .strictObject({
    // Only the type here: the DID itself is judged by publicKeyFromDidKey, whose INVALID_DID / WEAK_KEY codes the caller gets.
    did: z.string({ error: 'must be a did:key string' }).openapi({ description: 'A canonical Ed25519 did:key.' }),
    label: orNull(DisplayName, 'must be a string or null').optional(),
  })
  .openapi('AddRootRequest');

export const TenantScope = z.enum(TENANT_KEY_SCOPES, { error: `must be one of ${TENANT_KEY_SCOPES.join(', ')}` }).openapi('TenantScope');

export const CreateApiKeyRequest = z
  .strictObject({
    scopes: z
      .array(TenantScope, { error: 'must be an array of scope names' })
      .min(1, 'must name at least one scope')
      .refine((s) => new Set(s).size === s.length, 'must not repeat a scope')
      .openapi({ uniqueItems: true }),
    name: orNull(DisplayName, 'must be a string or null').optional(),
    tool_server: z
      .string({ error: 'must be a string' })
      .min(1, 'must not be empty')
      .max(512, 'must be at most 512 characters')
      // It is compared exactly with the invocation's tool_server: stray spaces would never match.
      .refine((s) => s.trim() === s, 'must not start or end with whitespace')
      // An invisible character would list like another tool server and never match one.
      .regex(PLAIN_NAME, NOT_PLAIN)
      .nullable()
      .openapi({
        description:
          'Binds a `verify` or `report` key to invocations naming this tool server: it verifies, and reports actual costs for, only those (only with one of those scopes; no surrounding whitespace). Unless it also holds `issue`, `audit` or `approve`, it also reads only those invocations, and no delegation.',
      })
      .optional(),
    expires_in_seconds: keyLifetimeSeconds().openapi({ description: "The key's lifetime; default: it never expires." }),
  })
  .superRefine((body, ctx) => {
    // A report key needs binding as much as a verify key: the first actual reported for a call is
    // the one kept, so an unbound report key could settle another server's calls (and reopen a budget).
    if (body.tool_server != null && !body.scopes.includes('verify') && !body.scopes.includes('report')) {
      ctx.addIssue({
        code: 'custom',
        path: ['tool_server'],
        message: 'is only allowed when scopes include "verify" or "report" (it binds the key to one tool server)',
      });
    }
  })
  .openapi('CreateApiKeyRequest');

export const ApiKey = z
  .strictObject({
    id: z.string(),
    tenant_id: z.string().nullable(),
    scopes: z.array(z.string()),
    name: z.string().nullable(),
    tool_server: z.string().nullable(),
    created_at: Timestamp,
    revoked_at: orNull(Timestamp),
    expires_at: orNull(Timestamp),
    last_used_at: orNull(Timestamp),
    rotated_from: z.string().nullable().openapi({ description: 'The key this one replaced by rotation.' }),
  })
  .openapi('ApiKey');

export const ApiKeyList = z.strictObject({ api_keys: z.array(ApiKey) }).openapi('ApiKeyList');

export const CreatedApiKey = z
  .strictObject({
    id: z.string(),
    key: z
      .string()
      .regex(/^bt_[A-Za-z0-9_-]{43}$/)
      .openapi({ description: 'The secret. Shown only in this response.', example: 'bt_Q2hhbmdlTWVfVGhpc19Jc19Pbmx5X0FuX0V4YW1wbGU' }),
    tenant_id: z.string().nullable(),
    scopes: z.array(TenantScope),
    name: z.string().nullable(),
    tool_server: z.string().nullable(),
    created_at: Timestamp,
    expires_at: orNull(Timestamp),
    rotated_from: z.string().nullable().openapi({ description: 'The key this one replaces by rotation.' }),
  })
  .openapi('CreatedApiKey');

export const TenantId = z.string().openapi('TenantId', { param: { name: 'tenant', in: 'path', required: true } });

export const RootDid = z
  .string()
  .openapi('RootDid', { param: { name: 'did', in: 'path', required: true, description: 'The trusted root DID, as stored.' } });

export const ApiKeyId = z.string().openapi('ApiKeyId', { param: { name: 'id', in: 'path', required: true } });

export const createTenantRoute = createRoute({
  method: 'post',
  path: '/v1/admin/tenants',
  tags: ['admin'],
  operationId: 'createTenant',
  summary: 'Create a tenant',
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  request: { body: { required: true, content: { 'application/json': { schema: CreateTenantRequest } } } },
  responses: {
    201: { description: 'Created.', content: { 'application/json': { schema: Tenant } } },
    400: AdminBadRequestResponse(),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse(),
    413: PayloadTooLargeResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const listTenantsRoute = createRoute({
  method: 'get',
  path: '/v1/admin/tenants',
  tags: ['admin'],
  operationId: 'listTenants',
  summary: 'List tenants',
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  responses: {
    200: { description: 'Every tenant.', content: { 'application/json': { schema: TenantList } } },
    401: UnauthorizedResponse(),
    403: ForbiddenResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const addTrustedRootRoute = createRoute({
  method: 'post',
  path: '/v1/admin/tenants/{tenant}/roots',
  tags: ['admin'],
  operationId: 'addTrustedRoot',
  summary: 'Trust a root DID for a tenant',
  description:
    "A root DID belongs to one tenant only, since a delegation belongs to its root's tenant. Adding a DID the tenant already trusts returns the stored row (`200`).",
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  request: {
    params: z.object({ tenant: TenantId }),
    body: { required: true, content: { 'application/json': { schema: AddRootRequest } } },
  },
  responses: {
    200: { description: 'The tenant already trusts this DID; the stored row.', content: { 'application/json': { schema: TrustedRoot } } },
    201: { description: 'Trusted.', content: { 'application/json': { schema: TrustedRoot } } },
    400: AdminBadRequestResponse(
      'The body is invalid (`INVALID_REQUEST`), or `did` is not a canonical Ed25519 did:key (`INVALID_DID`) or names a small-order key (`WEAK_KEY`).',
    ),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse(),
    404: NotFoundResponse('No such tenant (or, for a tenant key, another tenant) (`NOT_FOUND`).'),
    409: ConflictResponse(
      'Another tenant already trusts this DID, or stores delegations rooted at it (their counters, revocations and used invocations stay there) (`CONFLICT`).',
    ),
    413: PayloadTooLargeResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const listTrustedRootsRoute = createRoute({
  method: 'get',
  path: '/v1/admin/tenants/{tenant}/roots',
  tags: ['admin'],
  operationId: 'listTrustedRoots',
  summary: "List a tenant's trusted root DIDs",
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  request: { params: z.object({ tenant: TenantId }) },
  responses: {
    200: { description: 'The roots.', content: { 'application/json': { schema: TrustedRootList } } },
    401: UnauthorizedResponse(),
    403: ForbiddenResponse(),
    404: NotFoundResponse('No such tenant (or, for a tenant key, another tenant) (`NOT_FOUND`).'),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const removeTrustedRootRoute = createRoute({
  method: 'delete',
  path: '/v1/admin/tenants/{tenant}/roots/{did}',
  tags: ['admin'],
  operationId: 'removeTrustedRoot',
  summary: 'Stop trusting a root DID',
  description: 'Records already stored stay stored; new roots and verifications under this DID are refused as `UNTRUSTED_ROOT`.',
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  request: { params: z.object({ tenant: TenantId, did: RootDid }) },
  responses: {
    204: { description: 'Removed.' },
    401: UnauthorizedResponse(),
    403: ForbiddenResponse(),
    404: NotFoundResponse('The tenant does not trust this DID, or does not exist (`NOT_FOUND`).'),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const createApiKeyRoute = createRoute({
  method: 'post',
  path: '/v1/admin/tenants/{tenant}/api-keys',
  tags: ['admin'],
  operationId: 'createApiKey',
  summary: 'Issue an API key for a tenant',
  description:
    'The plaintext `key` is in this response only; Baton stores its SHA-256. `tool_server` binds a `verify` or `report` key to invocations naming that tool server (it verifies, reports for and, without `issue`, `audit` or `approve`, reads only those). Responses are `Cache-Control: no-store`.',
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  request: {
    params: z.object({ tenant: TenantId }),
    body: { required: true, content: { 'application/json': { schema: CreateApiKeyRequest } } },
  },
  responses: {
    201: { description: 'The new key, shown once.', content: { 'application/json': { schema: CreatedApiKey } } },
    400: AdminBadRequestResponse(),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse(),
    404: NotFoundResponse('No such tenant (or, for a tenant key, another tenant) (`NOT_FOUND`).'),
    413: PayloadTooLargeResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const listApiKeysRoute = createRoute({
  method: 'get',
  path: '/v1/admin/tenants/{tenant}/api-keys',
  tags: ['admin'],
  operationId: 'listApiKeys',
  summary: "List a tenant's API keys (never their secrets)",
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  request: { params: z.object({ tenant: TenantId }) },
  responses: {
    200: { description: 'The keys, revoked ones included.', content: { 'application/json': { schema: ApiKeyList } } },
    401: UnauthorizedResponse(),
    403: ForbiddenResponse(),
    404: NotFoundResponse('No such tenant (or, for a tenant key, another tenant) (`NOT_FOUND`).'),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const revokeApiKeyRoute = createRoute({
  method: 'delete',
  path: '/v1/admin/api-keys/{id}',
  tags: ['admin'],
  operationId: 'revokeApiKey',
  summary: 'Revoke an API key',
  description: 'Idempotent. The key stops working at once, on every route of every node sharing the database.',
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  request: { params: z.object({ id: ApiKeyId }) },
  responses: {
    204: { description: 'Revoked (now or before).' },
    401: UnauthorizedResponse(),
    403: ForbiddenResponse(),
    404: NotFoundResponse('No API key has this id (`NOT_FOUND`).'),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
