/**
 * The verified-DR cache saves work on the hot path: a chain sent by reference
 * resolves to the same stored text on every verify, and a cached record of
 * exactly that text is reused without decoding or hashing it again. It never
 * decides: a record with other bytes is decoded and checked as usual.
 */
import { describe, expect, it, vi } from 'vitest';
import type * as HashModule from '../../src/protocol/hash.js';
import type * as PolicyModule from '../../src/protocol/policy.js';

const hashing = vi.hoisted(() => ({ calls: 0 }));
const attenuation = vi.hoisted(() => ({ calls: 0 }));
vi.mock('../../src/protocol/policy.js', async (importOriginal) => {
  const actual = await importOriginal<typeof PolicyModule>();
  return {
    ...actual,
    checkAttenuation: (...args: Parameters<typeof actual.checkAttenuation>) => {
      attenuation.calls++;
      return actual.checkAttenuation(...args);
    },
  };
});
vi.mock('../../src/protocol/hash.js', async (importOriginal) => {
  const actual = await importOriginal<typeof HashModule>();
  return {
    ...actual,
    recordHash: (jws: string) => {
      hashing.calls++;
      return actual.recordHash(jws);
    },
  };
});

const { DelegationCache, verifyChain } = await import('../../src/protocol/chain.js');
const { createInvocation, makeBundle } = await import('../../src/sdk/records.js');
const { buildChain, ARGS, T0 } = await import('../support/fixtures.js');

const policy = { allowed_tools: ['web_search', 'file_read'], max_cost_usd: 10, pii_access: false, write_access: false };

describe('DelegationCache: records found by their exact text', () => {
  const chain = buildChain([policy, policy, policy]);
  const byHash = new Map(chain.drs.map((d) => [d.hash, d.jws]));
  const verify = (bundle: unknown, cache: InstanceType<typeof DelegationCache>) =>
    verifyChain(bundle, { now: T0 + 10, trustedRoots: [chain.keys[0]!.did], resolveDelegation: (h) => byHash.get(h), cache });

  it('a chain verified before is not decoded or hashed again: only the invocation is', () => {
    const cache = new DelegationCache();
    expect(verify(makeBundle(chain.invoke().invocation, chain.drs, 'reference'), cache).valid).toBe(true);
    const bundle = makeBundle(chain.invoke().invocation, chain.drs, 'reference');
    hashing.calls = 0;
    const second = verify(bundle, cache);
    expect(second.valid).toBe(true);
    expect(hashing.calls).toBe(1);
  });

  it('a record with other bytes is decoded and refused as usual, whatever is cached', () => {
    const cache = new DelegationCache();
    expect(verify(makeBundle(chain.invoke().invocation, chain.drs, 'reference'), cache).valid).toBe(true);
    const root = chain.drs[0]!.jws;
    const forged = root.slice(0, -4) + (root.endsWith('AAAA') ? 'BAAA' : 'AAAA');
    const { invocation } = chain.invoke();
    const decision = verify(
      { ...makeBundle(invocation, chain.drs, 'value'), receipts: [forged, ...chain.drs.slice(1).map((d) => d.jws)] },
      cache,
    );
    expect(decision.valid).toBe(false);
    expect(cache.getByJws(forged)).toBeUndefined();
  });

  it('evicts a record from both lookups when full', () => {
    const cache = new DelegationCache(2);
    expect(verify(makeBundle(chain.invoke().invocation, chain.drs, 'reference'), cache).valid).toBe(true);
    expect(cache.size).toBe(2);
    expect(cache.getByJws(chain.drs[0]!.jws)).toBeUndefined();
    expect(cache.get(chain.drs[0]!.hash)).toBeUndefined();
    expect(cache.getByJws(chain.drs[2]!.jws)?.hash).toBe(chain.drs[2]!.hash);
  });

  it('a chain that passed is not checked for linkage and attenuation again; the same records otherwise arranged are', () => {
    const cache = new DelegationCache();
    expect(verify(makeBundle(chain.invoke().invocation, chain.drs, 'reference'), cache).valid).toBe(true);
    const bundle = makeBundle(chain.invoke().invocation, chain.drs, 'reference');
    attenuation.calls = 0;
    expect(verify(bundle, cache).valid).toBe(true);
    expect(attenuation.calls).toBe(0);

    // The leaf and its parent without the root: the same cached leaf object, another chain.
    const tail = chain.drs.slice(1);
    const invocation = createInvocation({
      chain: tail,
      invoker: chain.invoker,
      args: ARGS,
      toolServer: 'mcp://tools.example.com',
      iat: T0,
    });
    const headless = verify(makeBundle(invocation, tail, 'value'), cache);
    expect(headless.valid).toBe(false);
    expect(headless.valid ? [] : headless.violations.map((v) => v.code)).toContain('CHAIN_HASH_MISMATCH');
    expect(attenuation.calls).toBeGreaterThan(0);
  });
});
