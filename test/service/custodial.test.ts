import { randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeBase64url } from '../../src/protocol/base64url.js';
import { BatonError } from '../../src/protocol/errors.js';
import { publicKeyFromDidKey } from '../../src/protocol/did-key.js';
import { signJws } from '../../src/protocol/jws.js';
import { verifyEd25519 } from '../../src/protocol/ed25519.js';
import { utf8Encode } from '../../src/protocol/jcs.js';
import { custodialRootKey } from '../../src/service/custodial.js';
import { openSecret } from '../../src/service/secrets.js';
import { openStore, type Store } from '../../src/store/db.js';
import { custodialKeys, trustedRoots } from '../../src/store/schema/index.js';
import { freshDatabase } from '../setup/db.js';
import { seedTenant } from '../support/fixtures.js';

let store: Store;
let url: string;
let drop: () => Promise<void>;
const masterKey = new Uint8Array(randomBytes(32));

beforeAll(async () => {
  ({ store, url, drop } = await freshDatabase({ max: 10 }));
});
afterAll(() => drop());

async function rejection(p: Promise<unknown>): Promise<BatonError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(BatonError);
    return err as BatonError;
  }
  throw new Error('expected a rejection');
}

describe('custodialRootKey', () => {
  it('creates the key once, sealed at rest, trusted as a root of that tenant only', async () => {
    const tenant = await seedTenant(store.db, 'a');
    const other = await seedTenant(store.db, 'b');
    const key = await custodialRootKey(store.db, tenant, masterKey);
    const again = await custodialRootKey(store.db, tenant, masterKey);
    expect(again.did).toBe(key.did);
    expect(again.seed).toEqual(key.seed);

    // The key signs records that verify under its did:key.
    const jws = signJws({ hello: 'world' }, key.seed);
    const [h, p, s] = jws.split('.') as [string, string, string];
    expect(verifyEd25519(publicKeyFromDidKey(key.did), utf8Encode(`${h}.${p}`), Buffer.from(s, 'base64url'))).toBe(true);

    const rows = await store.db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, tenant));
    expect(rows).toHaveLength(1);
    const row = rows[0]!;
    expect(row.did).toBe(key.did);
    expect(row.encryptedSeed).toMatch(/^v1\./);
    for (const spelling of [Buffer.from(key.seed).toString('hex'), encodeBase64url(key.seed), Buffer.from(key.seed).toString('base64')]) {
      expect(row.encryptedSeed).not.toContain(spelling);
    }
    expect(openSecret(row.encryptedSeed, masterKey, `custodial:${tenant}`)).toEqual(key.seed);

    expect(await store.db.select().from(trustedRoots).where(eq(trustedRoots.did, key.did))).toEqual([
      expect.objectContaining({ tenantId: tenant, did: key.did, label: 'custodial' }),
    ]);
    expect(await store.db.select().from(trustedRoots).where(eq(trustedRoots.tenantId, other))).toHaveLength(0);

    const otherKey = await custodialRootKey(store.db, other, masterKey);
    expect(otherKey.did).not.toBe(key.did);
  });

  it('converges on one key when first uses race, on one pool and across nodes', async () => {
    const nodes = await Promise.all(Array.from({ length: 2 }, () => openStore({ databaseUrl: url, max: 4 })));
    try {
      for (let round = 0; round < 3; round++) {
        const tenant = await seedTenant(store.db, `race-${round}`);
        const keys = await Promise.all(
          Array.from({ length: 9 }, (_, i) => custodialRootKey([store, ...nodes][i % 3]!.db, tenant, masterKey)),
        );
        expect(new Set(keys.map((k) => k.did)).size).toBe(1);
        expect(await store.db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, tenant))).toHaveLength(1);
        expect(await store.db.select().from(trustedRoots).where(eq(trustedRoots.tenantId, tenant))).toEqual([
          expect.objectContaining({ did: keys[0]!.did, label: 'custodial' }),
        ]);
      }
    } finally {
      for (const n of nodes) await n.close();
    }
  });

  it("reads the winner's key when another request creates it between its read and its insert", async () => {
    const tenant = await seedTenant(store.db, 'lost-race');
    let winner: Awaited<ReturnType<typeof custodialRootKey>> | undefined;
    // A Db on which another request creates the key just before this one's transaction: a deterministic lost race.
    const racing = new Proxy(store.db, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (prop !== 'transaction' || winner) return value;
        return async (...args: unknown[]) => {
          winner = await custodialRootKey(store.db, tenant, masterKey);
          return (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        };
      },
    }) as Store['db'];
    const loser = await custodialRootKey(racing, tenant, masterKey);
    expect(loser.did).toBe(winner!.did);
    expect(await store.db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, tenant))).toHaveLength(1);
    expect(await store.db.select().from(trustedRoots).where(eq(trustedRoots.tenantId, tenant))).toHaveLength(1);
  });

  it("works inside a caller's transaction, and rolls back with it", async () => {
    const tenant = await seedTenant(store.db, 'tx');
    await expect(
      store.db.transaction(async (tx) => {
        await custodialRootKey(tx, tenant, masterKey);
        throw new Error('issuance failed');
      }),
    ).rejects.toThrow('issuance failed');
    expect(await store.db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, tenant))).toHaveLength(0);
    expect(await store.db.select().from(trustedRoots).where(eq(trustedRoots.tenantId, tenant))).toHaveLength(0);
    const key = await store.db.transaction((tx) => custodialRootKey(tx, tenant, masterKey));
    expect((await custodialRootKey(store.db, tenant, masterKey)).did).toBe(key.did);
  });

  it('refuses another master key, without replacing the stored key', async () => {
    const tenant = await seedTenant(store.db, 'mk');
    const key = await custodialRootKey(store.db, tenant, masterKey);
    const e = await rejection(custodialRootKey(store.db, tenant, new Uint8Array(randomBytes(32))));
    expect(e.code).toBe('INTERNAL');
    expect(e.message).toMatch(/BATON_MASTER_KEY/);
    const rows = await store.db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, tenant));
    expect(rows.map((r) => r.did)).toEqual([key.did]);
  });

  it("refuses a sealed seed copied to another tenant's row", async () => {
    const victim = await seedTenant(store.db, 'victim');
    const thief = await seedTenant(store.db, 'thief');
    await custodialRootKey(store.db, victim, masterKey);
    const [row] = await store.db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, victim));
    await store.db.insert(custodialKeys).values({ tenantId: thief, did: row!.did, encryptedSeed: row!.encryptedSeed });
    const e = await rejection(custodialRootKey(store.db, thief, masterKey));
    expect(e.code).toBe('INTERNAL');
  });

  it('refuses a row whose DID does not belong to its seed', async () => {
    const tenant = await seedTenant(store.db, 'swap');
    const other = await seedTenant(store.db, 'swap-other');
    await custodialRootKey(store.db, tenant, masterKey);
    const otherKey = await custodialRootKey(store.db, other, masterKey);
    await store.db.update(custodialKeys).set({ did: otherKey.did }).where(eq(custodialKeys.tenantId, tenant));
    const e = await rejection(custodialRootKey(store.db, tenant, masterKey));
    expect(e.code).toBe('INTERNAL');
    expect(e.message).toMatch(/does not belong to the stored DID/);
  });

  it('answers NOT_FOUND for a tenant that does not exist, storing nothing', async () => {
    const e = await rejection(custodialRootKey(store.db, 'ten_missing', masterKey));
    expect(e.code).toBe('NOT_FOUND');
    expect(await store.db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, 'ten_missing'))).toHaveLength(0);
  });
});
