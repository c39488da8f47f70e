/**
 * API-key lifecycle for operators (the admin key): keys that expire, and
 * rotation without downtime (a new key, the old one valid for a grace
 * period). Works through a BatonClient's transport:
 *
 *   const keys = adminKeys(new BatonClient({ baseUrl, apiKey: adminKey }));
 *   const { key, previous } = await keys.rotate('key_…', { grace_seconds: 3600 });
 */
import type { ApiKeyView, BatonClient, CreatedApiKey, RequestOptions, TenantScope } from './client.js';
import { API_KEY_LIST, CREATED_API_KEY, ROTATED_API_KEY, type Shape } from './answer-shape.js';

/** What the lifecycle adds to every API-key view. */
export interface ApiKeyLifecycleView {
  /** After this instant the key is refused; null: it never expires. */
  readonly expires_at: string | null;
  /** Coarse (updated at most about once a minute per key and node); null: never used. */
  readonly last_used_at: string | null;
  /** The key this one replaced by rotation, if any. */
  readonly rotated_from: string | null;
}

export type LifecycleApiKey = ApiKeyView & ApiKeyLifecycleView;
export type CreatedLifecycleApiKey = CreatedApiKey & Omit<ApiKeyLifecycleView, 'last_used_at'>;

export interface CreateApiKeyInput {
  readonly scopes: readonly TenantScope[];
  readonly name?: string | null;
  readonly tool_server?: string | null;
  /** The key stops working this many seconds after creation. */
  readonly expires_in_seconds?: number;
}

export interface RotateApiKeyInput {
  /** How long the old key stays valid; default 86400 (24 h), at most 30 days. 0 retires it now. */
  readonly grace_seconds?: number;
  /** The new key's lifetime; default none. */
  readonly expires_in_seconds?: number;
}

export interface RotatedApiKey {
  /** The new key, with its secret (shown once). */
  readonly key: CreatedLifecycleApiKey;
  /** The old key, now expiring at previous.expires_at. */
  readonly previous: LifecycleApiKey;
}

type Call = <T>(
  spec: { method: 'GET' | 'POST' | 'DELETE'; path: string; body?: unknown; auth: 'key' | 'none'; answer: Shape },
  opts: RequestOptions,
) => Promise<{ body: T }>;

/**
 * The client's authenticated transport. BatonAdmin keeps it as its
 * (TypeScript-private) `call`; reached here so this module adds routes
 * without changing the client class.
 */
function transportOf(client: BatonClient): Call {
  const call = (client.admin as unknown as { call?: unknown }).call;
  if (typeof call !== 'function') throw new TypeError('adminKeys: this BatonClient has no admin transport');
  return call as Call;
}

const enc = encodeURIComponent;

/** API-key lifecycle calls over `client` (which must hold the admin key). */
export function adminKeys(client: BatonClient) {
  const call = transportOf(client);
  return {
    /** POST /v1/admin/tenants/{tenant}/api-keys; the secret is in this answer only. */
    async create(tenantId: string, input: CreateApiKeyInput, opts: RequestOptions = {}): Promise<CreatedLifecycleApiKey> {
      return (
        await call<CreatedLifecycleApiKey>(
          { method: 'POST', path: `/v1/admin/tenants/${enc(tenantId)}/api-keys`, body: input, auth: 'key', answer: CREATED_API_KEY },
          opts,
        )
      ).body;
    },

    /** GET /v1/admin/tenants/{tenant}/api-keys with expiry and last use. */
    async list(tenantId: string, opts: RequestOptions = {}): Promise<{ api_keys: LifecycleApiKey[] }> {
      return (
        await call<{ api_keys: LifecycleApiKey[] }>(
          { method: 'GET', path: `/v1/admin/tenants/${enc(tenantId)}/api-keys`, auth: 'key', answer: API_KEY_LIST },
          opts,
        )
      ).body;
    },

    /** POST /v1/admin/api-keys/{id}/rotate: a new key now, the old one valid for the grace period. */
    async rotate(keyId: string, input: RotateApiKeyInput = {}, opts: RequestOptions = {}): Promise<RotatedApiKey> {
      return (
        await call<RotatedApiKey>(
          { method: 'POST', path: `/v1/admin/api-keys/${enc(keyId)}/rotate`, body: input, auth: 'key', answer: ROTATED_API_KEY },
          opts,
        )
      ).body;
    },
  };
}

export type AdminKeys = ReturnType<typeof adminKeys>;
