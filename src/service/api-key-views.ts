/** The JSON views of API keys, shared by the admin and the lifecycle (rotation) handlers. */
import type { ApiKeyInfo } from '../store/api-keys.js';

export interface ApiKeyJson {
  id: string;
  tenant_id: string | null;
  scopes: string[];
  name: string | null;
  tool_server: string | null;
  created_at: string;
  revoked_at: string | null;
  expires_at: string | null;
  last_used_at: string | null;
  rotated_from: string | null;
}

export const apiKeyJson = (k: ApiKeyInfo): ApiKeyJson => ({
  id: k.id,
  tenant_id: k.tenantId,
  scopes: [...k.scopes],
  name: k.name,
  tool_server: k.toolServer,
  created_at: k.createdAt.toISOString(),
  revoked_at: k.revokedAt ? k.revokedAt.toISOString() : null,
  expires_at: k.expiresAt ? k.expiresAt.toISOString() : null,
  last_used_at: k.lastUsedAt ? k.lastUsedAt.toISOString() : null,
  rotated_from: k.rotatedFrom,
});

/** A new key's answer: the secret (shown once) and the row, without what a new key cannot have yet. */
export type CreatedApiKeyJson = Omit<ApiKeyJson, 'revoked_at' | 'last_used_at'> & { key: string };

export function createdApiKeyJson(key: string, k: ApiKeyInfo): CreatedApiKeyJson {
  const { revoked_at: _revoked, last_used_at: _used, ...info } = apiKeyJson(k);
  return { key, ...info };
}

/** NOT_FOUND's advice on the admin key routes, where no tenant is involved to check the key against. */
export const UNKNOWN_KEY_ID =
  "Key ids look like key_…: list a tenant's keys for theirs (GET /v1/admin/tenants/{tenant}/api-keys, or baton keys list). The key in BATON_ADMIN_KEY has no id: to retire it, unset the variable and restart.";
