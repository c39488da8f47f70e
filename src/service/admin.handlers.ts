/**
 * The admin API's decisions: request schemas (zod, strict) and one function
 * per route that takes parsed input and returns the response body. Refusals
 * are thrown as BatonError and mapped to HTTP in http.ts.
 */
import { z } from 'zod';
import { parseRequest } from './validate.js';
import { keyLifetimeSeconds } from '../api/admin.js';
import { publicKeyFromDidKey } from '../protocol/did-key.js';
import { BatonError, isBatonError } from '../protocol/errors.js';
import { createTenantApiKey, listTenantApiKeys, revokeApiKey } from '../store/api-keys.js';
import { apiKeyJson, createdApiKeyJson, type ApiKeyJson, type CreatedApiKeyJson } from './api-key-views.js';
import { PG_FOREIGN_KEY_VIOLATION, pgError } from '../store/errors.js';
import type { Tenant, TrustedRoot } from '../store/schema/index.js';
import { addTrustedRoot, createTenant, findTenant, listTenants, listTrustedRoots, removeTrustedRoot } from '../store/tenants.js';
import { evictApiKey } from './auth.js';
import type { ServiceDeps } from './types.js';

// ---------------------------------------------------------------- schemas

/** Scopes an operator may give a tenant key ('admin' belongs to no tenant). */
export const TENANT_KEY_SCOPES = ['issue', 'verify', 'report', 'audit', 'approve'] as const;

// Messages are predicates: the field name is put in front of them by parseRequest.
const displayName = () =>
  z.string({ error: 'must be a string' }).trim().min(1, 'must not be empty or only whitespace').max(200, 'must be at most 200 characters');

export const CreateTenantBody = z.strictObject({ name: displayName() });

export const AddRootBody = z.strictObject({
  // Only the type here: the DID itself is judged by publicKeyFromDidKey, whose
  // INVALID_DID / WEAK_KEY codes the caller gets.
  did: z.string({ error: 'must be a did:key string' }),
  label: displayName().nullable().optional(),
});

export const CreateApiKeyBody = z
  .strictObject({
    scopes: z
      .array(z.enum(TENANT_KEY_SCOPES, { error: `must be one of ${TENANT_KEY_SCOPES.join(', ')}` }), {
        error: 'must be an array of scope names',
      })
      .min(1, 'must name at least one scope')
      .refine((s) => new Set(s).size === s.length, 'must not repeat a scope'),
    name: displayName().nullable().optional(),
    tool_server: z
      .string({ error: 'must be a string' })
      .min(1, 'must not be empty')
      .max(512, 'must be at most 512 characters')
      // It is compared exactly with the invocation's tool_server: stray spaces would never match.
      .refine((s) => s.trim() === s, 'must not start or end with whitespace')
      .nullable()
      .optional(),
    expires_in_seconds: keyLifetimeSeconds(),
  })
  .superRefine((body, ctx) => {
    if (body.tool_server != null && !body.scopes.includes('verify')) {
      ctx.addIssue({
        code: 'custom',
        path: ['tool_server'],
        message: 'is only allowed when scopes include "verify" (it binds a verify key to one tool server)',
      });
    }
  });

/** Parses a request body with `schema`: 400 INVALID_REQUEST listing every field problem. */
export function parseBody<S extends z.ZodType>(schema: S, raw: unknown): z.output<S> {
  return parseRequest(schema, raw, 'request body') as z.output<S>;
}

// ---------------------------------------------------------------- responses

export interface TenantJson {
  id: string;
  name: string;
  created_at: string;
}
export interface RootJson {
  tenant_id: string;
  did: string;
  label: string | null;
  created_at: string;
}
const tenantJson = (t: Tenant): TenantJson => ({ id: t.id, name: t.name, created_at: t.createdAt.toISOString() });

const rootJson = (r: TrustedRoot): RootJson => ({
  tenant_id: r.tenantId,
  did: r.did,
  label: r.label,
  created_at: r.createdAt.toISOString(),
});

// ---------------------------------------------------------------- decisions

function noTenant(): BatonError {
  return new BatonError('NOT_FOUND', { message: 'No tenant has this id.' });
}

async function requireTenant(deps: ServiceDeps, tenantId: string): Promise<Tenant> {
  const tenant = await findTenant(deps.store.db, tenantId);
  if (!tenant) throw noTenant();
  return tenant;
}

export async function createTenantHandler(deps: ServiceDeps, body: z.output<typeof CreateTenantBody>): Promise<TenantJson> {
  const tenant = await createTenant(deps.store.db, body.name);
  deps.log.info('tenant created', { tenant_id: tenant.id });
  return tenantJson(tenant);
}

export async function listTenantsHandler(deps: ServiceDeps): Promise<{ tenants: TenantJson[] }> {
  return { tenants: (await listTenants(deps.store.db)).map(tenantJson) };
}

/** 201 with the new row, or 200 with the stored row when the tenant already trusts this DID. */
export async function addRootHandler(
  deps: ServiceDeps,
  tenantId: string,
  body: z.output<typeof AddRootBody>,
): Promise<{ created: boolean; root: RootJson }> {
  try {
    publicKeyFromDidKey(body.did);
  } catch (e) {
    if (isBatonError(e)) throw new BatonError(e.code, { message: e.message, details: { field: 'did', ...(e.details ?? {}) } });
    throw e;
  }
  const result = await addTrustedRoot(deps.store.db, tenantId, body.did, body.label ?? null);
  switch (result.kind) {
    case 'no-tenant':
      throw noTenant();
    case 'other-tenant':
      throw new BatonError('CONFLICT', {
        message:
          "Another tenant already trusts this root DID; a root DID can belong to one tenant only, because a delegation belongs to its root's tenant.",
        suggestion: 'Give this tenant its own root key, or remove the DID from the other tenant first.',
        details: { did: body.did },
      });
    case 'existing':
      return { created: false, root: rootJson(result.root) };
    case 'created':
      deps.log.info('trusted root added', { tenant_id: tenantId, did: body.did });
      return { created: true, root: rootJson(result.root) };
  }
}

export async function listRootsHandler(deps: ServiceDeps, tenantId: string): Promise<{ roots: RootJson[] }> {
  await requireTenant(deps, tenantId);
  return { roots: (await listTrustedRoots(deps.store.db, tenantId)).map(rootJson) };
}

export async function removeRootHandler(deps: ServiceDeps, tenantId: string, did: string): Promise<void> {
  if (!(await removeTrustedRoot(deps.store.db, tenantId, did))) {
    throw new BatonError('NOT_FOUND', { message: 'This tenant does not trust this root DID (or the tenant does not exist).' });
  }
  deps.log.info('trusted root removed', { tenant_id: tenantId, did });
}

/** The plaintext key is in this response only; Baton keeps its SHA-256. */
export async function createApiKeyHandler(
  deps: ServiceDeps,
  tenantId: string,
  body: z.output<typeof CreateApiKeyBody>,
): Promise<CreatedApiKeyJson> {
  await requireTenant(deps, tenantId);
  let created: Awaited<ReturnType<typeof createTenantApiKey>>;
  try {
    created = await createTenantApiKey(deps.store.db, {
      tenantId,
      scopes: body.scopes,
      name: body.name ?? null,
      toolServer: body.tool_server ?? null,
      expiresInSeconds: body.expires_in_seconds ?? null,
    });
  } catch (e) {
    if (pgError(e)?.code === PG_FOREIGN_KEY_VIOLATION) throw noTenant();
    throw e;
  }
  const answer = createdApiKeyJson(created.key, created.info);
  deps.log.info('api key created', { tenant_id: tenantId, key_id: answer.id, scopes: answer.scopes, expires_at: answer.expires_at });
  return answer;
}

export async function listApiKeysHandler(deps: ServiceDeps, tenantId: string): Promise<{ api_keys: ApiKeyJson[] }> {
  await requireTenant(deps, tenantId);
  return { api_keys: (await listTenantApiKeys(deps.store.db, tenantId)).map(apiKeyJson) };
}

/**
 * Revokes (idempotently) and evicts the key from this node's auth cache.
 * Other nodes may accept it until their cache entry expires (at most 10 s).
 */
export async function revokeApiKeyHandler(deps: ServiceDeps, keyId: string): Promise<void> {
  const row = await revokeApiKey(deps.store.db, keyId);
  if (!row) throw new BatonError('NOT_FOUND', { message: 'No API key has this id.' });
  evictApiKey(deps, row.id);
  deps.log.info('api key revoked', { key_id: row.id, tenant_id: row.tenantId });
}
