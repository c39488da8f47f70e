/**
 * VerifyBatcher's routing of a failed batch's error, against a scripted query function: which
 * answer each waiting verify gets when a batch it shared fails. (The batches' SQL, their counting
 * and their exactness are proven on real PostgreSQL in test/reliability/group-commit.test.ts.)
 */
import { describe, expect, it } from 'vitest';
import type { RawQuery } from '../../src/store/db.js';
import { VerifyBatcher, type BatchItem } from '../../src/store/verify-batch.js';

const denial = (subj: string): BatchItem => ({
  k: 'd',
  t: 'ten_x',
  key: 'key_x',
  jti: null,
  ih: null,
  code: 'POLICY_VIOLATION',
  block: 'D',
  chain: [],
  v: [],
  subj,
  rjws: `jws-of-${subj}`,
  rkid: 'svc_x',
});

/**
 * A database whose batches holding the item `poison` fail with an error of that item's own (at
 * `failAt`, a Date.now() time, as an insert deep in a slow statement would), and which answers every
 * other batch at once.
 */
function scriptedDatabase(poison: string, failAt: number): { query: RawQuery; batches: string[][] } {
  const batches: string[][] = [];
  const query: RawQuery = async (text, params) => {
    if (!text.includes('baton_verify_batch')) return [{ ms: Date.now() }]; // the database clock reading
    const items = JSON.parse(params[1] as string) as { subj: string }[];
    batches.push(items.map((i) => i.subj));
    if (items.some((i) => i.subj === poison)) {
      await new Promise((r) => setTimeout(r, Math.max(0, failAt - Date.now())));
      throw Object.assign(new Error('index row size 8064 exceeds btree version 4 maximum 2704'), { code: '54000' });
    }
    return [{ r: items.map((_, i) => ({ o: 'DENIED', rid: i + 1 })) }];
  };
  return { query, batches };
}

describe('VerifyBatcher, when a batch fails', () => {
  it("answers a verify whose deadline passed meanwhile with its own deadline (57014), never with another item's error", async () => {
    // `due` has a second to be sent (ample on a loaded machine); the batch fails just after its deadline.
    const soon = new Date(Date.now() + 1_000);
    const { query, batches } = scriptedDatabase('poison', soon.getTime() + 100);
    const batcher = new VerifyBatcher(query, { maxInFlight: 1 });
    const later = new Date(Date.now() + 5_000);
    const outcome = (p: Promise<unknown>) =>
      p.then(
        (a) => ({ answer: a }),
        (e: unknown) => ({ code: (e as { code?: string }).code, message: (e as Error).message }),
      );
    const [due, poisoned, waiting] = await Promise.all([
      outcome(batcher.run(denial('due'), soon)),
      outcome(batcher.run(denial('poison'), later)),
      outcome(batcher.run(denial('waiting'), later)),
    ]);
    expect(batches[0]).toEqual(['due', 'poison', 'waiting']);
    // The batch failed after `due`'s deadline: a 503 for its own deadline, not the poison's 54000 (a 500).
    expect(due).toMatchObject({ code: '57014' });
    expect(poisoned).toMatchObject({ code: '54000' });
    expect(waiting).toEqual({ answer: { o: 'DENIED', rid: 1 } });
    // `due` was never sent again: past its deadline, nothing may commit it.
    expect(batches.slice(1).sort()).toEqual([['poison'], ['waiting']]);
  });
});
