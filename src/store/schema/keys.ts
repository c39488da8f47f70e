// Credentials and signing keys: API keys, trusted roots, custodial root keys,
// the service's own service-receipt signing keys.
import { sql } from 'drizzle-orm';
import { check, index, pgTable, primaryKey, text, uniqueIndex, type AnyPgColumn } from 'drizzle-orm/pg-core';
import { API_KEY_SCOPES, type ApiKeyScope } from '../../protocol/lists.js';
import { createdAt, serverTime, sqlLiterals, tenantId } from './columns.js';
import { tenants } from './tenants.js';

export const apiKeys = pgTable(
  'api_keys',
  {
    id: text('id').primaryKey(), // 'key_' + random; not secret
    tenantId: text('tenant_id').references(() => tenants.id), // null only for admin keys
    secretHash: text('secret_hash').notNull(), // lowercase hex sha256 of the secret; the secret is never stored
    scopes: text('scopes').array().notNull().$type<ApiKeyScope[]>(),
    name: text('name'),
    toolServer: text('tool_server'), // binds a verify key to invocations naming this tool server
    createdAt: createdAt(),
    revokedAt: serverTime('revoked_at'),
    expiresAt: serverTime('expires_at'), // null: never expires; rotation sets it to the end of the grace period
    lastUsedAt: serverTime('last_used_at'), // coarse: written at most about once a minute per key and node
    rotatedFrom: text('rotated_from').references((): AnyPgColumn => apiKeys.id), // the key this one replaced
  },
  (t) => [
    uniqueIndex('api_keys_secret_hash_uq').on(t.secretHash),
    index('api_keys_tenant_idx').on(t.tenantId),
    // The newer direction of a rotation lineage (baton_key_lineage, migration 0033).
    index('api_keys_rotated_from_idx')
      .on(t.rotatedFrom)
      .where(sql`${t.rotatedFrom} is not null`),
    check('api_keys_scopes_known', sql`${t.scopes} <@ array[${sqlLiterals(API_KEY_SCOPES)}]::text[]`),
    check('api_keys_scopes_nonempty', sql`cardinality(${t.scopes}) > 0`),
    check('api_keys_tenant_or_admin', sql`${t.tenantId} is not null or 'admin' = any(${t.scopes})`),
  ],
);

export const trustedRoots = pgTable(
  'trusted_roots',
  {
    tenantId: tenantId(),
    did: text('did').notNull(),
    label: text('label'),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.did] }),
    // Issuance looks a root up by DID across tenants ("trusted by some tenant").
    index('trusted_roots_did_idx').on(t.did),
  ],
);

/** One service-held root key per tenant, for POST /v1/delegations/issue. */
export const custodialKeys = pgTable('custodial_keys', {
  tenantId: text('tenant_id')
    .primaryKey()
    .references(() => tenants.id),
  did: text('did').notNull(),
  encryptedSeed: text('encrypted_seed').notNull(), // sealed with BATON_MASTER_KEY
  createdAt: createdAt(),
});

/** The service's service-receipt signing keys; retired keys stay for verification. */
export const serviceKeys = pgTable(
  'service_keys',
  {
    kid: text('kid').primaryKey(),
    publicKey: text('public_key').notNull(),
    encryptedSeed: text('encrypted_seed').notNull(),
    createdAt: createdAt(),
    retiredAt: serverTime('retired_at'),
  },
  (t) => [
    // At most one active key, so nodes starting together cannot each mint one.
    uniqueIndex('service_keys_one_active_uq')
      .on(sql`(true)`)
      .where(sql`${t.retiredAt} is null`),
  ],
);

export type ApiKey = typeof apiKeys.$inferSelect;
export type NewApiKey = typeof apiKeys.$inferInsert;
export type TrustedRoot = typeof trustedRoots.$inferSelect;
export type NewTrustedRoot = typeof trustedRoots.$inferInsert;
export type CustodialKey = typeof custodialKeys.$inferSelect;
export type NewCustodialKey = typeof custodialKeys.$inferInsert;
export type ServiceKey = typeof serviceKeys.$inferSelect;
export type NewServiceKey = typeof serviceKeys.$inferInsert;
