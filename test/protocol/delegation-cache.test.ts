/**
 * The verified-DR cache is bounded by bytes as well as by records: counted in
 * records only, 10,000 records of 60 KB held ~1.1 GB (up to 17 times their JWS
 * length each, for payloads dense in objects). And a request's scratch cache
 * reads through to the shared one without writing it, so a chain that
 * establishes no trust never occupies the process-wide cache.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import {
  DelegationCache,
  DEFAULT_DELEGATION_CACHE_BYTES,
  decodeDelegation,
  recordCacheBytes,
  RequestDelegationCache,
  verifyDelegations,
  verifyDelegationSegment,
  type VerifiedDelegation,
} from '../../src/protocol/chain.js';
import { signDelegation } from '../../src/protocol/root-delegation.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation } from '../../src/sdk/records.js';
import { buildChain, T0 } from '../support/fixtures.js';

const issuer = generateKeyPair();
const policy = { allowed_tools: ['web_search', 'file_read'], max_cost_usd: 10 };

/** A decoded root DR; `tools` names make it larger. */
function record(tools = 2): VerifiedDelegation {
  const names = Array.from({ length: tools }, (_, k) => `tool_${k}`);
  const dr = createRootDelegation({ issuer, audience: generateKeyPair().did, policy: { ...policy, allowed_tools: names }, iat: T0 });
  return decodeDelegation(dr.jws, 0);
}

describe('DelegationCache: bounded by bytes', () => {
  it('evicts the oldest records, from both lookups, until the estimate is within the budget', () => {
    const [a, b, c] = [record(), record(), record()];
    const budget = recordCacheBytes(a) + recordCacheBytes(b) + 10; // the three are alike in size
    const cache = new DelegationCache(10_000, budget);
    cache.set(a);
    cache.set(b);
    expect(cache.size).toBe(2);
    expect(cache.bytes).toBe(recordCacheBytes(a) + recordCacheBytes(b));
    cache.set(c);
    expect(cache.size).toBe(2);
    expect(cache.get(a.hash)).toBeUndefined();
    expect(cache.getByJws(a.jws)).toBeUndefined();
    expect(cache.getByJws(b.jws)).toBe(b);
    expect(cache.get(c.hash)).toBe(c);
    expect(cache.bytes).toBe(recordCacheBytes(b) + recordCacheBytes(c));
    expect(cache.bytes).toBeLessThanOrEqual(budget);
  });

  it('a large record evicts as many old ones as its estimate needs', () => {
    const small = Array.from({ length: 6 }, () => record());
    const large = record(200);
    const cache = new DelegationCache(10_000, recordCacheBytes(large) + recordCacheBytes(small[0]!));
    for (const dr of small) cache.set(dr);
    cache.set(large);
    expect(cache.get(large.hash)).toBe(large);
    expect(cache.size).toBeLessThanOrEqual(2);
    expect(cache.getByJws(small[0]!.jws)).toBeUndefined();
    expect(cache.bytes).toBeLessThanOrEqual(recordCacheBytes(large) + recordCacheBytes(small[0]!));
  });

  it('a record estimated above the whole budget is not cached, and evicts nothing', () => {
    const kept = record();
    const huge = record(200);
    const cache = new DelegationCache(10_000, recordCacheBytes(huge) - 1);
    cache.set(kept);
    cache.set(huge);
    expect(cache.get(huge.hash)).toBeUndefined();
    expect(cache.getByJws(kept.jws)).toBe(kept);
    expect(cache.bytes).toBe(recordCacheBytes(kept));
  });

  it('the same record set again is counted once; the record bound still holds', () => {
    const [a, b, c] = [record(), record(), record()];
    const cache = new DelegationCache(2);
    cache.set(a);
    cache.set(a);
    expect(cache.size).toBe(1);
    expect(cache.bytes).toBe(recordCacheBytes(a));
    cache.set(b);
    cache.set(c);
    expect(cache.size).toBe(2);
    expect(cache.get(a.hash)).toBeUndefined();
    expect(cache.bytes).toBe(recordCacheBytes(b) + recordCacheBytes(c));
  });

  it('estimates at least what a record was measured to hold, per JWS character', () => {
    // Measured with a forced GC over thousands of records per shape (heap and external memory):
    // an ordinary record held 3.1 times its JWS length, 200 long tool names 1.9, 59 KB of [{},{},...] 16.8.
    const ordinary = record();
    expect(recordCacheBytes(ordinary) / ordinary.jws.length).toBeGreaterThan(3.1);
    const dense = signDelegation(
      {
        iss: issuer.did,
        sub: issuer.did,
        aud: generateKeyPair().did,
        drs_v: '4.0',
        drs_type: 'delegation-receipt',
        cmd: '/mcp/tools/call',
        policy,
        iat: T0,
        nbf: T0,
        exp: T0 + 3600,
        jti: 'dr:dense',
        drs_root_type: 'organisation',
        budget: { x: Array.from({ length: 14_000 }, () => ({})) },
      },
      issuer,
    );
    const decoded = decodeDelegation(dense.jws, 0);
    expect(recordCacheBytes(decoded) / dense.jws.length).toBeGreaterThan(16.8);
    // The default budget holds the default 10,000 ordinary records: the count binds first.
    expect(DEFAULT_DELEGATION_CACHE_BYTES / recordCacheBytes(ordinary)).toBeGreaterThan(9_500);
  });

  it('counts 2 bytes a character more for a string with one character above U+00FF, as V8 stores it', () => {
    // One such character makes V8 store the whole string at 2 bytes a character. Measured with
    // node --expose-gc over 600 records per shape (heap and external memory, after two forced GCs,
    // the records held by a DelegationCache): 46,000 ASCII characters and one 'ā', as a value or as
    // a member name, held 3.52 times the JWS length (3.08 estimated before strings were weighed);
    // all ASCII, 2.77.
    const shapes = {
      value: { s: 'ā'.padEnd(46_000, 'x') },
      name: { ['ā'.padEnd(46_000, 'x')]: 1 },
      astral: { s: '😀'.padEnd(46_000, 'x') },
    };
    for (const [shape, budget] of Object.entries(shapes)) {
      const signed = signDelegation(
        {
          iss: issuer.did,
          sub: issuer.did,
          aud: generateKeyPair().did,
          drs_v: '4.0',
          drs_type: 'delegation-receipt',
          cmd: '/mcp/tools/call',
          policy,
          iat: T0,
          nbf: T0,
          exp: T0 + 3600,
          jti: `dr:two-byte-${shape}`,
          drs_root_type: 'organisation',
          budget,
        },
        issuer,
      );
      expect(recordCacheBytes(decodeDelegation(signed.jws, 0)) / signed.jws.length, shape).toBeGreaterThan(3.53);
    }
  });

  it('an evicted ancestor is freed while its leaf stays cached, and the chain it passed is still known by its leaf', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const cache = new DelegationCache(2);
    const chain = buildChain([policy, policy]);
    const jwsList = chain.drs.map((d) => d.jws);
    const verified = (() => {
      const decision = verifyDelegations(jwsList, { now: T0 + 10, trustedRoots: [chain.keys[0]!.did], cache });
      if (!decision.valid) throw new Error(decision.error.message);
      cache.rememberPassedStructure(decision.delegations);
      return decision.delegations.map((d) => new WeakRef(d));
    })();
    const [root, leaf] = verified;
    cache.set(record()); // evicts the root, the oldest; the leaf stays
    await new Promise((resolve) => setTimeout(resolve, 0)); // WeakRefs hold their target until the job ends
    gc();
    expect(root!.deref()).toBeUndefined();
    expect(cache.get(leaf!.deref()!.hash)).toBe(leaf!.deref());

    // The root decoded again is another object of the same bytes: the chain it passed is still known.
    const rootAgain = decodeDelegation(jwsList[0]!, 0, cache);
    expect(cache.passedStructure([rootAgain, leaf!.deref()!])).toBe(true);
    expect(cache.passedStructure([record(), leaf!.deref()!])).toBe(false);
  });

  it('an evicted record is freed, with what the cache kept beside it', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const cache = new DelegationCache(2);
    // Verified and remembered as a passed chain, then nothing but the cache holds the records.
    const cacheChain = () => {
      const chain = buildChain([policy, policy]);
      const decision = verifyDelegations(
        chain.drs.map((d) => d.jws),
        { now: T0 + 10, trustedRoots: [chain.keys[0]!.did], cache },
      );
      if (!decision.valid) throw new Error(decision.error.message);
      cache.rememberPassedStructure(decision.delegations);
      return decision.delegations.map((d) => new WeakRef(d));
    };
    const [evicted, leaf] = cacheChain();
    cache.set(record());
    cache.set(record());
    await new Promise((resolve) => setTimeout(resolve, 0)); // WeakRefs hold their target until the job ends
    gc();
    expect(evicted!.deref()).toBeUndefined();
    expect(leaf!.deref()).toBeUndefined();
  });
});

describe('RequestDelegationCache: one request scratch', () => {
  it('reads through to the shared cache, keeps its own records to itself until keepIn', () => {
    const shared = new DelegationCache();
    const known = record();
    shared.set(known);
    const scratch = new RequestDelegationCache(shared);
    expect(scratch.getByJws(known.jws)).toBe(known);
    const fresh = record();
    scratch.set(fresh);
    expect(scratch.get(fresh.hash)).toBe(fresh);
    expect(shared.get(fresh.hash)).toBeUndefined();
    expect(shared.size).toBe(1);
    scratch.keepIn([known, fresh]);
    expect(shared.getByJws(fresh.jws)).toBe(fresh);
    expect(shared.size).toBe(2);
  });

  it('a segment never writes a shared cache, even one passed as such from untyped code', () => {
    const chain = buildChain([policy, policy]);
    const jwsList = chain.drs.map((d) => d.jws);
    const shared = new DelegationCache();
    const plain = verifyDelegationSegment(jwsList, { now: T0 + 10, cache: shared as RequestDelegationCache });
    expect(plain.valid).toBe(true);
    expect(shared.size).toBe(0);

    // Through a scratch: kept there, and its verified records reused by the full check.
    const scratch = new RequestDelegationCache(shared);
    expect(verifyDelegationSegment(jwsList, { now: T0 + 10, cache: scratch }).valid).toBe(true);
    expect(shared.size).toBe(0);
    const segmentRecords = chain.drs.map((d) => scratch.get(d.hash));
    const full = verifyDelegations(jwsList, { now: T0 + 10, trustedRoots: [chain.keys[0]!.did], cache: scratch });
    expect(full.valid && full.delegations.every((d, i) => d === segmentRecords[i])).toBe(true);
    if (full.valid) scratch.keepIn(full.delegations);
    expect(shared.size).toBe(2);
  });
});
