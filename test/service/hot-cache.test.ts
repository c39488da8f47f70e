/**
 * The hot path's cache of stored DRs is bounded by bytes as well as by records. Counted in records
 * only (100,000), it could hold 6.4 GB of JWS: a miss caches what the invocation's dr_chain names
 * before any signature is checked, and it stays when the verify is refused. A reviewer stored 10
 * sub-DRs of ~62 KB each, keyless, under one DR of a trusted root, then verified each by reference
 * with an invocation signed by a throwaway key: all 403, all 10 kept (621,372 JWS characters).
 * On real PostgreSQL, in process.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type * as DelegationsModule from '../../src/store/delegations.js';

const reads = vi.hoisted(() => ({ delegations: 0 }));
vi.mock('../../src/store/delegations.js', async (importOriginal) => {
  const actual = await importOriginal<typeof DelegationsModule>();
  return {
    ...actual,
    delegationsByHash: (...args: Parameters<typeof actual.delegationsByHash>) => {
      reads.delegations++;
      return actual.delegationsByHash(...args);
    },
  };
});

const { generateKeyPair } = await import('../../src/sdk/keys.js');
const { createInvocation, createRootDelegation, createSubDelegation, makeBundle } = await import('../../src/sdk/records.js');
const { signDelegation } = await import('../../src/protocol/root-delegation.js');
const { HotPathCache, installHotPathCache, storedDelegationBytes } = await import('../../src/service/hot-cache.js');
const { setupTenant, startTestService } = await import('../support/service.js');
const { ARGS, T0, TOOL_SERVER } = await import('../support/fixtures.js');

type Service = Awaited<ReturnType<typeof startTestService>>;
type Tenant = Awaited<ReturnType<typeof setupTenant>>;
type KeyPair = ReturnType<typeof generateKeyPair>;
type SignedDelegation = ReturnType<typeof createRootDelegation>;
type Db = Service['store']['db'];

/** About three of the large sub-DRs below (each estimated ~125 KB), or a hundred ordinary ones. */
const BUDGET = 400_000;
const policy = { allowed_tools: ['web_search', 'file_read'], max_cost_usd: 10 };
/** Any use of it fails: a lookup through it must be answered from the cache. */
const dbThatThrows = new Proxy({} as Db, {
  get() {
    throw new Error('read the database');
  },
});

let svc: Service;
let tenant: Tenant;
let cache: InstanceType<typeof HotPathCache>;
let holder: KeyPair;
let root: SignedDelegation;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  cache = new HotPathCache(BUDGET);
  installHotPathCache(svc.deps, cache);
  holder = generateKeyPair();
  root = createRootDelegation({ issuer: tenant.root, audience: holder.did, policy, iat: T0, nbf: T0 - 10, exp: T0 + 3600 });
  await store([root], tenant.keys.issue);
});
afterAll(async () => svc?.close());

async function store(chain: readonly SignedDelegation[], key?: string): Promise<void> {
  const r = await svc.call('POST', '/v1/delegations', { ...(key ? { key } : {}), json: { receipts: chain.map((d) => d.jws) } });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
}

/** A sub-DR of `root` by its holder, ~62 KB of JWS from a large `budget` (anything JSON goes there). */
function largeSubDelegation(n: number): SignedDelegation {
  return signDelegation(
    {
      iss: holder.did,
      sub: root.payload.sub,
      aud: generateKeyPair().did,
      drs_v: '4.0',
      drs_type: 'delegation-receipt',
      cmd: root.payload.cmd,
      policy,
      iat: T0,
      nbf: root.payload.nbf,
      exp: root.payload.exp,
      jti: `dr:large:${n}`,
      prev_dr_hash: root.hash,
      budget: { s: `${n}`.padEnd(46_000, 'x') },
    },
    holder,
  );
}

describe('HotPathCache: bounded by bytes', () => {
  it('evicts the oldest stored DRs until its estimate is within the budget; a hit reads nothing', async () => {
    const subs = Array.from({ length: 5 }, (_, n) => largeSubDelegation(100 + n));
    for (const sub of subs) await store([sub]);
    const own = new HotPathCache(BUDGET);
    for (const sub of subs) {
      const found = await own.delegations(svc.store.db, tenant.id, [sub.hash]);
      expect(found.get(sub.hash)?.jws).toBe(sub.jws);
      expect(own.delegationsCached.bytes).toBeLessThanOrEqual(BUDGET);
    }
    // The five are alike in size.
    const each = storedDelegationBytes(`${tenant.id} ${subs[0]!.hash}`, {
      hash: subs[0]!.hash,
      jws: subs[0]!.jws,
      iss: holder.did,
      revoked: false,
    });
    expect(each).toBeGreaterThan(2 * subs[0]!.jws.length);
    const kept = Math.floor(BUDGET / each);
    expect(own.delegationsCached).toEqual({ count: kept, bytes: kept * each });

    // The newest are answered without a read, the oldest were evicted and are read again.
    const newest = subs.slice(-kept).map((d) => d.hash);
    expect([...(await own.delegations(dbThatThrows, tenant.id, newest)).keys()]).toEqual(newest);
    await expect(own.delegations(dbThatThrows, tenant.id, [subs[0]!.hash])).rejects.toThrow('read the database');

    // Forgotten, an entry's bytes leave with it.
    own.forgetDelegation(tenant.id, newest[0]!);
    expect(own.delegationsCached).toEqual({ count: kept - 1, bytes: (kept - 1) * each });
  });

  it('a stored DR estimated above the whole budget is not cached, and evicts nothing', async () => {
    const [small, large] = [
      createSubDelegation({ parent: root, issuer: holder, audience: generateKeyPair().did, policy, iat: T0 }),
      largeSubDelegation(200),
    ];
    await store([small]);
    await store([large]);
    const own = new HotPathCache(100_000);
    await own.delegations(svc.store.db, tenant.id, [small.hash]);
    const before = own.delegationsCached;
    expect(before.count).toBe(1);
    expect((await own.delegations(svc.store.db, tenant.id, [large.hash])).get(large.hash)?.jws).toBe(large.jws);
    expect(own.delegationsCached).toEqual(before);
    await expect(own.delegations(dbThatThrows, tenant.id, [large.hash])).rejects.toThrow('read the database');
    expect((await own.delegations(dbThatThrows, tenant.id, [small.hash])).has(small.hash)).toBe(true);
  });
});

describe('refused verifies by reference and the hot-path cache', () => {
  it("large sub-DRs a holder stored keyless stay within the cache's budget, and ordinary verifies still hit", async () => {
    // An ordinary chain under the same root, verified first: its records are then the oldest cached.
    const invoker = generateKeyPair();
    const ordinary = createSubDelegation({ parent: root, issuer: holder, audience: invoker.did, policy, iat: T0 });
    await store([ordinary]);
    const verifyOrdinary = async () => {
      const invocation = createInvocation({ chain: [root, ordinary], invoker, args: ARGS, toolServer: TOOL_SERVER, iat: T0 });
      const r = await svc.call('POST', '/v1/verify', {
        key: tenant.keys.verify,
        json: makeBundle(invocation, [root, ordinary], 'reference'),
      });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    };
    await verifyOrdinary();
    reads.delegations = 0;
    await verifyOrdinary();
    expect(reads.delegations).toBe(0);

    // The reviewer's probe: large sub-DRs, stored without a key, verified by reference under invocations of throwaway keys.
    let jwsChars = 0;
    for (let n = 0; n < 10; n++) {
      const sub = largeSubDelegation(n);
      await store([sub]);
      jwsChars += sub.jws.length;
      const invocation = createInvocation({ chain: [root, sub], invoker: generateKeyPair(), args: ARGS, toolServer: TOOL_SERVER, iat: T0 });
      const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(invocation, [root, sub], 'reference') });
      expect(r.status).toBe(403);
      expect(r.body.error.code).toBe('ISSUER_AUDIENCE_GAP');
      expect(cache.delegationsCached.bytes).toBeLessThanOrEqual(BUDGET);
    }
    expect(jwsChars).toBeGreaterThan(600_000);
    expect(cache.delegationsCached.count).toBeLessThan(5);

    // The ordinary chain was evicted by the large records: read once, then answered from the cache again.
    reads.delegations = 0;
    await verifyOrdinary();
    expect(reads.delegations).toBe(1);
    await verifyOrdinary();
    expect(reads.delegations).toBe(1);
    expect(cache.delegationsCached.bytes).toBeLessThanOrEqual(BUDGET);
  });
});
