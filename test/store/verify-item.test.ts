/**
 * The verify item's decision over a stored chain (migration 0018 folds the
 * chain in SQL and counts it by row address), on both drivers, against a
 * model written from the rules: a revoked DR refuses first; then the first
 * DR, by depth, past a ceiling (its calls before its spend); otherwise the
 * call is allowed and counted once against every ceiling, and the answer's
 * state is each DR's counters after it. Every case is decided alone (the item
 * takes its own locks) and in a batch beside another allow (the batch takes
 * them), which must not change it.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import { chainMeteringOf } from '../../src/store/runtime.js';
import type { BatchItem } from '../../src/store/verify-batch.js';
import type { Delegation } from '../../src/store/schema/index.js';
import { seedDelegation } from '../support/fixtures.js';
import { allowItem, decideBatch, seedVerifyCaller, type VerifyCaller } from '../support/verify-statement.js';
import { drivers } from '../setup/drivers.js';

interface Link {
  readonly maxCalls: number | null;
  readonly callsUsed: number;
  readonly maxSpend: number | null;
  readonly spend: number;
  readonly revoked: boolean;
}

const link: fc.Arbitrary<Link> = fc
  .record({
    maxCalls: fc.option(fc.integer({ min: 0, max: 3 }), { freq: 2 }),
    usedFraction: fc.double({ min: 0, max: 1, noNaN: true }),
    maxSpend: fc.option(fc.integer({ min: 0, max: 5_000 }), { freq: 2 }),
    spend: fc.integer({ min: 0, max: 6_000 }),
    revoked: fc.integer({ min: 0, max: 5 }).map((n) => n === 0),
  })
  .map(({ maxCalls, usedFraction, maxSpend, spend, revoked }) => ({
    maxCalls,
    // calls_used never passes max_calls (a CHECK constraint); spend may pass its budget (metered actuals).
    callsUsed: maxCalls === null ? Math.round(usedFraction * 5) : Math.round(usedFraction * maxCalls),
    maxSpend,
    spend,
    revoked,
  }));

type Expected =
  | { o: 'RECEIPT_REVOKED'; h: string }
  | { o: 'CALLS_EXHAUSTED' | 'BUDGET_EXHAUSTED'; h: string; c: number; sp: number }
  | { o: 'ALLOWED'; after: { calls: number; spend: number }[] };

/** The rules, over the chain root first. */
function expected(chain: readonly Delegation[], links: readonly Link[], estimate: number): Expected {
  const metered = (l: Link) => l.maxCalls !== null || l.maxSpend !== null;
  // The unmetered DRs are read (and locked) before the metered ones, each in depth order.
  const revoked = [...links.keys()].filter((i) => !metered(links[i]!)).concat([...links.keys()].filter((i) => metered(links[i]!)));
  const firstRevoked = revoked.find((i) => links[i]!.revoked);
  if (firstRevoked !== undefined) return { o: 'RECEIPT_REVOKED', h: chain[firstRevoked]!.hash };
  for (const [i, l] of links.entries()) {
    const calls = l.maxCalls !== null && l.callsUsed >= l.maxCalls;
    const spend = l.maxSpend !== null && l.spend + estimate > l.maxSpend;
    if (calls || spend) return { o: calls ? 'CALLS_EXHAUSTED' : 'BUDGET_EXHAUSTED', h: chain[i]!.hash, c: l.callsUsed, sp: l.spend };
  }
  return {
    o: 'ALLOWED',
    after: links.map((l) => ({
      calls: l.callsUsed + (l.maxCalls === null ? 0 : 1),
      spend: l.spend + (l.maxSpend === null ? 0 : estimate),
    })),
  };
}

describe.each(drivers)('the verify item over a stored chain ($name)', ({ name, open }) => {
  let store: Store;
  let drop: () => Promise<void>;
  let tenantId: string;
  let caller: VerifyCaller;
  let bystander: Delegation[];

  beforeAll(async () => {
    ({ store, drop } = await open());
    caller = await seedVerifyCaller(store, 'verify-item', 'did:key:zVerifyItemRoot');
    tenantId = caller.tenantId;
    const root = await seedDelegation(store.db, tenantId, undefined, { maxCalls: 1_000_000 });
    bystander = [root, await seedDelegation(store.db, tenantId, root, { maxCalls: 1_000_000 })];
  });
  afterAll(() => drop());

  const seedChain = async (links: readonly Link[]): Promise<Delegation[]> => {
    const chain: Delegation[] = [];
    for (const l of links)
      chain.push(
        await seedDelegation(store.db, tenantId, chain.at(-1), {
          maxCalls: l.maxCalls,
          callsUsed: l.callsUsed,
          maxSpendMicros: l.maxSpend,
          spendReservedMicros: l.spend,
          revokedAt: l.revoked ? new Date() : null,
        }),
      );
    return chain;
  };
  const allow = (chain: readonly Delegation[], links: readonly Link[] | null, estimate: number): BatchItem => {
    const hashes = chain.map((d) => d.hash);
    const metering =
      links === null
        ? 'all'
        : chainMeteringOf(
            hashes,
            chain.map((d, i) => ({ hash: d.hash, depth: i, maxCalls: links[i]!.maxCalls, maxSpendMicros: links[i]!.maxSpend })),
          );
    return allowItem(caller, hashes, { est: estimate, ...(metering === undefined ? {} : { mt: metering }) });
  };
  const decide = (...items: BatchItem[]) => decideBatch(store, items);
  const countersOf = async (chain: readonly Delegation[]): Promise<{ calls: number; spend: number }[]> => {
    const found = await store.query('select hash, calls_used, spend_reserved_micros from delegations where hash = any($1::text[])', [
      chain.map((d) => d.hash),
    ]);
    return chain.map((d) => {
      const r = found.find((x) => x['hash'] === d.hash)!;
      return { calls: Number(r['calls_used']), spend: Number(r['spend_reserved_micros']) };
    });
  };
  const storedInvocations = async (jti: string): Promise<number> =>
    Number((await store.query('select count(*)::int as n from invocations where jti = $1', [jti]))[0]!['n']);

  it('decides and counts as the rules say, alone and in a batch', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(link, { minLength: 1, maxLength: 5 }),
        fc.integer({ min: 0, max: 3_000 }),
        fc.boolean(),
        async (links, estimate, batched) => {
          const chain = await seedChain(links);
          const before = await countersOf(chain);
          const item = allow(chain, links, estimate);
          const answers = batched ? await decide(allow(bystander, null, 0), item) : await decide(item);
          if (batched) expect(answers[0]!['o']).toBe('ALLOWED');
          const answer = answers.at(-1)!;
          const want = expected(chain, links, estimate);
          if (want.o === 'ALLOWED') {
            expect(answer['o']).toBe('ALLOWED');
            const state = new Map(
              (answer['s'] as [string, number | string, number | string][]).map(([h, c, s]) => [h, [Number(c), Number(s)]]),
            );
            expect(chain.map((d) => state.get(d.hash))).toEqual(want.after.map((a) => [a.calls, a.spend]));
            expect(await countersOf(chain)).toEqual(want.after);
            expect(await storedInvocations(item.k === 'a' ? item.jti : '')).toBe(1);
          } else {
            expect(answer).toMatchObject(want);
            expect(await countersOf(chain)).toEqual(before);
            expect(await storedInvocations(item.k === 'a' ? item.jti : '')).toBe(0);
          }
        },
      ),
      { numRuns: name === 'pglite' ? 40 : 80 },
    );
  });

  it('fails the item, and stores nothing, when a counter update does not land', async () => {
    const links: Link[] = [
      { maxCalls: 10, callsUsed: 0, maxSpend: null, spend: 0, revoked: false },
      { maxCalls: 10, callsUsed: 0, maxSpend: null, spend: 0, revoked: false },
    ];
    const chain = await seedChain(links);
    // A trigger that silently skips the update of the leaf's row: the UPDATE then counts one row of two.
    await store.query(
      `create function skip_leaf_update() returns trigger language plpgsql as $$
         begin if old.hash = '${chain[1]!.hash}' then return null; end if; return new; end $$`,
      [],
    );
    await store.query(`create trigger skip_leaf_update before update on delegations for each row execute function skip_leaf_update()`, []);
    try {
      const item = allow(chain, links, 0);
      await expect(decide(item)).rejects.toThrow(/counted 1 of the 2 metered DRs/);
      await expect(decide(allow(bystander, null, 0), item)).rejects.toThrow(/counted 1 of the 2/);
      expect(await countersOf(chain)).toEqual([
        { calls: 0, spend: 0 },
        { calls: 0, spend: 0 },
      ]);
      expect(await storedInvocations(item.k === 'a' ? item.jti : '')).toBe(0);
    } finally {
      await store.query('drop trigger skip_leaf_update on delegations', []);
      await store.query('drop function skip_leaf_update()', []);
    }
  });
});
