/**
 * Calling the verify statement (baton_verify_batch) directly, for tests of its
 * SQL on both drivers: a tenant that may call it, allow items, and a batch.
 */
import { randomBytes } from 'node:crypto';
import type { Store } from '../../src/store/db.js';
import type { BatchItem, ChainMetering } from '../../src/store/verify-batch.js';
import { fakeHash, seedServiceKey, seedTenant } from './fixtures.js';

/** A tenant with an active verify key, a trusted root DID and a service key to sign with. */
export interface VerifyCaller {
  readonly tenantId: string;
  readonly keyId: string;
  readonly rootDid: string;
  readonly kid: string;
}

export async function seedVerifyCaller(store: Store, name: string, rootDid: string): Promise<VerifyCaller> {
  const tenantId = await seedTenant(store.db, name);
  const kid = await seedServiceKey(store.db);
  const keyId = `key_${randomBytes(6).toString('hex')}`;
  await store.query(`insert into api_keys (id, tenant_id, secret_hash, scopes) values ($1, $2, $3, '{verify}')`, [
    keyId,
    tenantId,
    'ab'.repeat(32),
  ]);
  await store.query(`insert into trusted_roots (tenant_id, did) values ($1, $2)`, [tenantId, rootDid]);
  return { tenantId, keyId, rootDid, kid };
}

/** An allow item of the batch. */
export type AllowItem = Extract<BatchItem, { k: 'a' }>;

/** An allow item through `chain` (hashes, root first) with a fresh jti and a stand-in receipt. */
export function allowItem(caller: VerifyCaller, chain: readonly string[], opts: { est?: number; mt?: ChainMetering } = {}): AllowItem {
  const jti = `inv-${randomBytes(6).toString('hex')}`;
  return {
    k: 'a',
    t: caller.tenantId,
    key: caller.keyId,
    root: caller.rootDid,
    chain,
    jti,
    hash: fakeHash(jti),
    jws: `jws-of-${jti}`,
    tool: 'web_search',
    est: opts.est ?? 0,
    rjws: `receipt-of-${jti}`,
    rkid: caller.kid,
    ...(opts.mt === undefined ? {} : { mt: opts.mt }),
  };
}

/**
 * The statement's answers, one per item, in order (a deadline 5 s away). `on` is a store, or one
 * session of it where the session's plans matter.
 */
export async function decideBatch(on: Pick<Store, 'query'>, items: readonly BatchItem[]): Promise<Record<string, unknown>[]> {
  const [row] = await on.query('select baton_verify_batch($1, $2::text::jsonb) as r', [
    new Date(Date.now() + 5_000).toISOString(),
    JSON.stringify(items),
  ]);
  const r = row!['r'];
  return (typeof r === 'string' ? JSON.parse(r) : r) as Record<string, unknown>[];
}
