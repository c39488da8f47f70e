// API keys: how secrets look, how they are stored (only as a SHA-256 hash),
// and the queries over api_keys. The plaintext secret leaves this module once,
// in the result of the function that minted it, and is never stored or logged.
import { createHash, randomBytes } from 'node:crypto';
import { and, asc, eq, isNull, sql } from 'drizzle-orm';
import type { Db } from './db.js';
import { newId } from './ids.js';
import { apiKeys, type ApiKey, type ApiKeyScope } from './schema/index.js';

/** Tenant keys: 'bt_' + base64url(32 random bytes) (43 characters, no padding). */
export const TENANT_KEY_PREFIX = 'bt_';
/** Generated admin keys: 'bt_admin_' + base64url(32 random bytes). */
export const ADMIN_KEY_PREFIX = 'bt_admin_';
/** The shape of every key Baton mints (both prefixes); anything else is not one of ours. */
export const MINTED_KEY_PATTERN = /^bt_(?:admin_)?[A-Za-z0-9_-]{43}$/;

export function mintApiKeySecret(kind: 'tenant' | 'admin'): string {
  return (kind === 'admin' ? ADMIN_KEY_PREFIX : TENANT_KEY_PREFIX) + randomBytes(32).toString('base64url');
}

/** The stored form of a secret: lowercase hex SHA-256 of its UTF-8 bytes. */
export function hashApiKeySecret(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex');
}

/** The columns authentication needs; never the plaintext (it is not stored). */
export type ApiKeyForAuth = Pick<ApiKey, 'id' | 'tenantId' | 'secretHash' | 'scopes' | 'toolServer' | 'revokedAt'>;

/** One indexed lookup (api_keys_secret_hash_uq). Revoked keys are returned too; the caller refuses them. */
export async function findApiKeyByHash(db: Db, secretHash: string): Promise<ApiKeyForAuth | undefined> {
  const [row] = await db
    .select({
      id: apiKeys.id,
      tenantId: apiKeys.tenantId,
      secretHash: apiKeys.secretHash,
      scopes: apiKeys.scopes,
      toolServer: apiKeys.toolServer,
      revokedAt: apiKeys.revokedAt,
    })
    .from(apiKeys)
    .where(eq(apiKeys.secretHash, secretHash))
    .limit(1);
  return row;
}

/** An api_keys row without its hash: what listings may show. */
export type ApiKeyInfo = Omit<ApiKey, 'secretHash'>;

const infoColumns = {
  id: apiKeys.id,
  tenantId: apiKeys.tenantId,
  scopes: apiKeys.scopes,
  name: apiKeys.name,
  toolServer: apiKeys.toolServer,
  createdAt: apiKeys.createdAt,
  revokedAt: apiKeys.revokedAt,
};

export async function createTenantApiKey(
  db: Db,
  opts: { tenantId: string; scopes: readonly Exclude<ApiKeyScope, 'admin'>[]; name: string | null; toolServer: string | null },
): Promise<{ key: string; info: ApiKeyInfo }> {
  const key = mintApiKeySecret('tenant');
  const [info] = await db
    .insert(apiKeys)
    .values({
      id: newId('key'),
      tenantId: opts.tenantId,
      secretHash: hashApiKeySecret(key),
      scopes: [...opts.scopes],
      name: opts.name,
      toolServer: opts.toolServer,
    })
    .returning(infoColumns);
  if (!info) throw new Error('createTenantApiKey: INSERT … RETURNING gave no row');
  return { key, info };
}

/** Every key of the tenant, revoked ones included (with revoked_at), oldest first. */
export function listTenantApiKeys(db: Db, tenantId: string): Promise<ApiKeyInfo[]> {
  return db.select(infoColumns).from(apiKeys).where(eq(apiKeys.tenantId, tenantId)).orderBy(asc(apiKeys.createdAt), asc(apiKeys.id));
}

/**
 * Sets revoked_at once; revoking again keeps the first time. Returns the row
 * (so the caller can evict it from caches) or undefined when no key has this id.
 */
export async function revokeApiKey(db: Db, id: string): Promise<ApiKeyInfo | undefined> {
  const [row] = await db
    .update(apiKeys)
    .set({ revokedAt: sql`coalesce(${apiKeys.revokedAt}, now())` })
    .where(eq(apiKeys.id, id))
    .returning(infoColumns);
  return row;
}

/**
 * The first-start admin key: creates one (tenant null, scopes ['admin']) and
 * returns its plaintext, unless an unrevoked admin key is already stored, in
 * which case it returns null. An advisory lock makes nodes starting together
 * on one fresh database mint exactly one.
 */
export function createBootstrapAdminKey(db: Db): Promise<string | null> {
  return db.transaction(async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended('baton:bootstrap-admin-key', 0))`);
    const [existing] = await tx
      .select({ id: apiKeys.id })
      .from(apiKeys)
      .where(and(isNull(apiKeys.tenantId), isNull(apiKeys.revokedAt), sql`'admin' = any(${apiKeys.scopes})`))
      .limit(1);
    if (existing) return null;
    const key = mintApiKeySecret('admin');
    await tx.insert(apiKeys).values({
      id: newId('key'),
      tenantId: null,
      secretHash: hashApiKeySecret(key),
      scopes: ['admin'],
      name: 'bootstrap admin key',
      toolServer: null,
    });
    return key;
  });
}

/** Whether the key exists and is not revoked: read fresh, for paths no statement re-checks. */
export async function isApiKeyActive(db: Db, id: string): Promise<boolean> {
  const [row] = await db
    .select({ id: apiKeys.id })
    .from(apiKeys)
    .where(and(eq(apiKeys.id, id), isNull(apiKeys.revokedAt)))
    .limit(1);
  return row !== undefined;
}
