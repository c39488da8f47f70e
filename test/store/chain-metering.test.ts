/**
 * The chain's metering hint (migration 0017): the service says whether every
 * DR of a chain is metered, or none is, and the verify statement skips the
 * lock pass that would find no rows. The hint saves work and never decides:
 * a wrong one is an error that writes nothing, on both drivers.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import { chainMeteringOf, type ChainLimits } from '../../src/store/runtime.js';
import type { BatchItem, ChainMetering } from '../../src/store/verify-batch.js';
import type { Delegation } from '../../src/store/schema/index.js';
import { fakeHash, seedDelegation } from '../support/fixtures.js';
import { allowItem, decideBatch, seedVerifyCaller, type VerifyCaller } from '../support/verify-statement.js';
import { drivers } from '../setup/drivers.js';

const limit = (hash: string, maxCalls: number | null, maxSpendMicros: number | null = null): ChainLimits => ({
  hash,
  depth: 0,
  maxCalls,
  maxSpendMicros,
});

describe('chainMeteringOf', () => {
  it('names a chain whose DRs all have a ceiling, or none has, and nothing else', () => {
    const [a, b] = [fakeHash('a'), fakeHash('b')];
    expect(chainMeteringOf([a, b], [limit(a, 5), limit(b, null, 1_000)])).toBe('all');
    expect(chainMeteringOf([a, b], [limit(a, null), limit(b, null)])).toBe('none');
    expect(chainMeteringOf([a, b], [limit(a, 5), limit(b, null)])).toBeUndefined();
    // Limits that do not cover the chain say nothing.
    expect(chainMeteringOf([a, b], [limit(a, 5)])).toBeUndefined();
    expect(chainMeteringOf([a, b], [limit(a, null)])).toBeUndefined();
  });

  it('agrees with the ceilings of every DR, for any chain', () => {
    const link = fc.record({ calls: fc.option(fc.nat(), { nil: null }), spend: fc.option(fc.nat(), { nil: null }), known: fc.boolean() });
    fc.assert(
      fc.property(fc.array(link, { minLength: 1, maxLength: 16 }), (links) => {
        const chain = links.map((_, i) => `sha256:${i.toString(16).padStart(64, '0')}`);
        const limits = links.flatMap((l, i) => (l.known ? [limit(chain[i]!, l.calls, l.spend)] : []));
        const metered = links.map((l) => l.calls !== null || l.spend !== null);
        const known = links.every((l) => l.known);
        const expected = !known ? undefined : metered.every(Boolean) ? 'all' : metered.some(Boolean) ? undefined : 'none';
        expect(chainMeteringOf(chain, limits)).toBe(expected);
      }),
    );
  });
});

describe.each(drivers)('the verify statement with a metering hint ($name)', ({ open }) => {
  let store: Store;
  let drop: () => Promise<void>;
  let tenantId: string;
  let caller: VerifyCaller;
  let metered: Delegation[];
  let unmetered: Delegation[];
  let mixed: Delegation[];

  beforeAll(async () => {
    ({ store, drop } = await open());
    caller = await seedVerifyCaller(store, 'metering', 'did:key:zMeteringRoot');
    tenantId = caller.tenantId;
    const chainOf = async (...ceilings: (number | null)[]): Promise<Delegation[]> => {
      const chain: Delegation[] = [];
      for (const maxCalls of ceilings) chain.push(await seedDelegation(store.db, tenantId, chain.at(-1), { maxCalls }));
      return chain;
    };
    metered = await chainOf(100, 50, 10);
    unmetered = await chainOf(null, null);
    mixed = await chainOf(100, null);
  });
  afterAll(() => drop());

  const allow = (chain: readonly string[], mt?: ChainMetering): BatchItem => allowItem(caller, chain, mt === undefined ? {} : { mt });
  const decide = async (...items: BatchItem[]) => (await decideBatch(store, items)) as { o: string; h?: string }[];
  const callsUsed = async (chain: readonly Delegation[]): Promise<number[]> => {
    const found = await store.query('select hash, calls_used from delegations where hash = any($1::text[])', [chain.map((d) => d.hash)]);
    return chain.map((d) => Number(found.find((r) => r['hash'] === d.hash)!['calls_used']));
  };
  const stored = async (items: readonly BatchItem[]): Promise<number> => {
    const jtis = items.map((i) => (i.k === 'a' ? i.jti : ''));
    const [row] = await store.query('select count(*)::int as n from invocations where jti = any($1::text[])', [jtis]);
    return Number(row!['n']);
  };
  const hashes = (chain: readonly Delegation[]) => chain.map((d) => d.hash);

  it('decides as without a hint when the hint is right: all metered counts every DR, none metered counts nothing', async () => {
    const before = await callsUsed(metered);
    const items = [allow(hashes(metered), 'all'), allow(hashes(unmetered), 'none'), allow(hashes(mixed))];
    expect((await decide(...items)).map((a) => a.o)).toEqual(['ALLOWED', 'ALLOWED', 'ALLOWED']);
    expect(await callsUsed(metered)).toEqual(before.map((n) => n + 1));
    expect(await callsUsed(unmetered)).toEqual([0, 0]);
    expect(await stored(items)).toBe(3);
    // Alone, the item takes its own locks: the same answers.
    for (const [chain, mt] of [
      [metered, 'all'],
      [unmetered, 'none'],
    ] as const)
      expect((await decide(allow(hashes(chain), mt)))[0]!.o).toBe('ALLOWED');
  });

  it('still refuses a chain at its ceiling with the hint', async () => {
    const leaf = metered.at(-1)!;
    const left = 10 - (await callsUsed([leaf]))[0]!;
    for (let i = 0; i < left; i++) expect((await decide(allow(hashes(metered), 'all')))[0]!.o).toBe('ALLOWED');
    expect(await decide(allow(hashes(metered), 'all'))).toMatchObject([{ o: 'CALLS_EXHAUSTED', h: leaf.hash }]);
  });

  it('answers BUNDLE_INCOMPLETE for a DR that is not stored, whatever the hint', async () => {
    const missing = fakeHash();
    for (const mt of ['all', 'none'] as const)
      expect(await decide(allow([...hashes(unmetered), missing], mt))).toMatchObject([{ o: 'BUNDLE_INCOMPLETE', h: missing }]);
  });

  for (const [name, chain, mt] of [
    ['"all" on a chain with an unmetered DR', () => mixed, 'all'],
    ['"none" on a chain with a metered DR', () => mixed, 'none'],
    ['"none" on an all-metered chain', () => metered, 'none'],
    ['"all" on an unmetered chain', () => unmetered, 'all'],
  ] as const) {
    it(`a wrong hint is an error that writes nothing: ${name}`, async () => {
      const before = await callsUsed(chain());
      const wrong = allow(hashes(chain()), mt);
      const batch = [allow(hashes(metered.slice(0, 2)), 'all'), wrong];
      await expect(decide(...batch)).rejects.toThrow(/metering .* disagrees with its stored DRs/);
      await expect(decide(wrong)).rejects.toThrow(/disagrees/);
      expect(await callsUsed(chain())).toEqual(before);
      expect(await stored(batch)).toBe(0);
    });
  }
});
