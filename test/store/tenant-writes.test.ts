/**
 * Writes that name a tenant answer in Baton's terms, not PostgreSQL's: the
 * store turns a foreign-key violation into NOT_FOUND and a version already
 * taken into a typed result, on both drivers, so no caller reads SQLSTATEs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonError } from '../../src/protocol/errors.js';
import { createTenantApiKey } from '../../src/store/api-keys.js';
import type { Store } from '../../src/store/db.js';
import { insertCustodialKeyIfAbsent } from '../../src/store/service-keys.js';
import { insertToolDocument } from '../../src/store/tools.js';
import { seedTenant } from '../support/fixtures.js';
import { drivers } from '../setup/drivers.js';

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

describe.each(drivers)('writes naming a tenant ($name)', ({ open }) => {
  let store: Store;
  let drop: () => Promise<void>;
  let tenantId: string;
  beforeAll(async () => {
    ({ store, drop } = await open());
    tenantId = await seedTenant(store.db, 'acme');
  });
  afterAll(() => drop());

  const missing = 'ten_missing';
  const doc = (tenant: string, version: number) => ({ tenantId: tenant, version, document: {}, hash: `h${version}`, createdBy: 'test' });

  it.each([
    ['createTenantApiKey', () => createTenantApiKey(store.db, { tenantId: missing, scopes: ['verify'], name: null, toolServer: null })],
    [
      'insertCustodialKeyIfAbsent',
      () => insertCustodialKeyIfAbsent(store.db, { tenantId: missing, did: 'did:key:z6Mkx', encryptedSeed: 's' }),
    ],
    ['insertToolDocument', () => insertToolDocument(store.db, doc(missing, 1))],
  ])('%s for a tenant that does not exist: NOT_FOUND', async (_name, write) => {
    const err = await rejection(write());
    expect(err).toBeInstanceOf(BatonError);
    expect((err as BatonError).code).toBe('NOT_FOUND');
  });

  it('insertToolDocument says whether it stored the version; a version already taken is false, not an error', async () => {
    expect(await insertToolDocument(store.db, doc(tenantId, 1))).toBe(true);
    expect(await insertToolDocument(store.db, doc(tenantId, 1))).toBe(false);
    expect(await insertToolDocument(store.db, doc(tenantId, 2))).toBe(true);
  });
});
