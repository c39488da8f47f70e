/**
 * The admin API's decisions: request schemas (zod, strict) and one function
 * per route that takes parsed input and returns the response body. Refusals
 * are thrown as BatonError and mapped to HTTP in http.ts.
 */
import type { z } from 'zod';
import type { AddRootRequest, CreateApiKeyRequest, CreateTenantRequest } from '../api/admin.js';
import { publicKeyFromDidKey } from '../protocol/did-key.js';
import { BatonError, isBatonError } from '../protocol/errors.js';
import { createTenantApiKey, listTenantApiKeys, revokeApiKey } from '../store/api-keys.js';
import { apiKeyJson, createdApiKeyJson, UNKNOWN_KEY_ID, type ApiKeyJson, type CreatedApiKeyJson } from './api-key-views.js';
import { transactionBehind, type CommitCheck } from '../store/db.js';
import type { Tenant, TrustedRoot } from '../store/schema/index.js';
import { addTrustedRoot, createTenant, listTenants, listTrustedRoots, removeTrustedRoot } from '../store/tenants.js';
import { evictApiKey } from './auth.js';
import { hotPathCacheOf } from './hot-cache.js';
import { noTenant, requireTenant } from './tenants.js';
import type { ServiceDeps } from './types.js';

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

export async function createTenantHandler(
  deps: ServiceDeps,
  body: z.output<typeof CreateTenantRequest>,
  gate: CommitCheck | undefined,
): Promise<TenantJson> {
  const tenant = await transactionBehind(deps.store.db, gate, (tx) => createTenant(tx, body.name));
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
  body: z.output<typeof AddRootRequest>,
  gate: CommitCheck | undefined,
): Promise<{ created: boolean; root: RootJson }> {
  try {
    publicKeyFromDidKey(body.did);
  } catch (e) {
    if (isBatonError(e)) throw new BatonError(e.code, { message: e.message, details: { field: 'did', ...(e.details ?? {}) } });
    throw e;
  }
  const result = await addTrustedRoot(deps.store.db, tenantId, body.did, body.label ?? null, gate);
  switch (result.kind) {
    case 'no-tenant':
      throw noTenant();
    case 'other-tenant':
      throw new BatonError('CONFLICT', {
        message:
          "Another tenant already trusts this root DID; a root DID can belong to one tenant only, because a delegation belongs to its root's tenant.",
        suggestion:
          'Give this tenant its own root key. (Removing the DID from the other tenant lets it move only while that tenant stores no delegation rooted at it.)',
        details: { did: body.did },
      });
    case 'records-elsewhere':
      throw new BatonError('CONFLICT', {
        message:
          'Another tenant stores delegations rooted at this DID, with their call counters, revocations and used invocations; trusting it here would start them afresh (a revoked delegation live again, max_calls reset, an invocation allowed twice).',
        suggestion: 'Give this tenant its own root key, or trust the DID again in the tenant that stores its delegations.',
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

export async function removeRootHandler(deps: ServiceDeps, tenantId: string, did: string, gate: CommitCheck | undefined): Promise<void> {
  if (!(await transactionBehind(deps.store.db, gate, (tx) => removeTrustedRoot(tx, tenantId, did)))) {
    throw new BatonError('NOT_FOUND', { message: 'This tenant does not trust this root DID (or the tenant does not exist).' });
  }
  // This node's verifies read the roots again at once (other nodes learn it from their denial or verify statements).
  hotPathCacheOf(deps).forgetRoots(tenantId);
  deps.log.info('trusted root removed', { tenant_id: tenantId, did });
}

/** The plaintext key is in this response only; Baton keeps its SHA-256. */
export async function createApiKeyHandler(
  deps: ServiceDeps,
  tenantId: string,
  body: z.output<typeof CreateApiKeyRequest>,
  gate: CommitCheck | undefined,
): Promise<CreatedApiKeyJson> {
  await requireTenant(deps, tenantId);
  const created = await transactionBehind(deps.store.db, gate, (tx) =>
    createTenantApiKey(tx, {
      tenantId,
      scopes: body.scopes,
      name: body.name ?? null,
      toolServer: body.tool_server ?? null,
      expiresInSeconds: body.expires_in_seconds ?? null,
    }),
  );
  const answer = createdApiKeyJson(created.key, created.info);
  deps.log.info('api key created', { tenant_id: tenantId, key_id: answer.id, scopes: answer.scopes, expires_at: answer.expires_at });
  return answer;
}

export async function listApiKeysHandler(deps: ServiceDeps, tenantId: string): Promise<{ api_keys: ApiKeyJson[] }> {
  await requireTenant(deps, tenantId);
  return { api_keys: (await listTenantApiKeys(deps.store.db, tenantId)).map(apiKeyJson) };
}

/**
 * Revokes (idempotently) and evicts the key from this node's auth cache. Other nodes refuse it
 * too from their next request: every use re-checks the key in the database (the verify statement,
 * or a fresh read before work no statement re-checks).
 */
export async function revokeApiKeyHandler(deps: ServiceDeps, keyId: string, gate: CommitCheck | undefined): Promise<void> {
  const row = await revokeApiKey(deps.store.db, keyId, gate);
  if (!row) throw new BatonError('NOT_FOUND', { message: 'No API key has this id.', suggestion: UNKNOWN_KEY_ID });
  evictApiKey(deps, row.id);
  deps.log.info('api key revoked', { key_id: row.id, tenant_id: row.tenantId });
}
