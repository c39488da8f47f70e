// bench:profile reads the group-commit histograms from the service's own
// /metrics exposition; these tests feed the parser what prom-client renders.
import { describe, expect, it } from 'vitest';
import { groupCommitDelta, parseEventLoopDelay, parseGroupCommit } from '../../bench/lib/metrics.js';
import { EVENT_LOOP_SAMPLING_MS, metrics } from '../../src/service/metrics.js';
import { VerifyBatcher, type BatchItem } from '../../src/store/verify-batch.js';
import type { RawQuery } from '../../src/store/db.js';

/** A stand-in database that answers every item of a batch (or fails): only the metrics are under test here. */
function batcherAnswering(fail: () => boolean): VerifyBatcher {
  const query = (async (_sql: string, params: readonly unknown[]) => {
    if (fail()) throw new Error('the database went away');
    const items = JSON.parse(String(params[1])) as unknown[];
    return [{ r: JSON.stringify(items.map(() => ({ o: 'ALLOWED' }))) }];
  }) as unknown as RawQuery;
  return new VerifyBatcher(query);
}

const item = { k: 'd' } as unknown as BatchItem;
const soon = () => new Date(Date.now() + 5_000);

describe('group commit totals from /metrics', () => {
  it('counts statements, verifies, lone statements and round trips of the statements that answered', async () => {
    const before = parseGroupCommit(await metrics.render());
    let failing = false;
    const batcher = batcherAnswering(() => failing);
    await Promise.all([batcher.run(item, soon()), batcher.run(item, soon()), batcher.run(item, soon())]); // one turn: one statement
    await batcher.run(item, soon()); // alone
    failing = true;
    await expect(batcher.run(item, soon())).rejects.toThrow('went away'); // not an answered statement
    const delta = groupCommitDelta(before, parseGroupCommit(await metrics.render()));
    expect(delta).toMatchObject({ statements: 2, items: 4, alone: 1 });
    expect(delta.seconds).toBeGreaterThan(0);
  });

  it('reads zeros from an exposition with nothing observed yet', () => {
    expect(parseGroupCommit('# TYPE baton_verify_batch_items histogram\n')).toEqual({ statements: 0, items: 0, alone: 0, seconds: 0 });
  });

  it('reads the event loop delay gauges prom-client exposes, as seconds past the sampling interval', async () => {
    const idle = EVENT_LOOP_SAMPLING_MS / 1000;
    const read = parseEventLoopDelay(
      `nodejs_eventloop_lag_mean_seconds ${idle + 0.0025}\nnodejs_eventloop_lag_p99_seconds ${idle + 0.03}\n`,
    );
    expect(read.mean).toBeCloseTo(0.0025, 9);
    expect(read.p99).toBeCloseTo(0.03, 9);
    // An idle loop's samples, a little under the interval, are no delay at all.
    expect(parseEventLoopDelay(`nodejs_eventloop_lag_mean_seconds ${idle - 0.0001}\n`).mean).toBe(0);
    // The names bench:profile reads are the ones prom-client exposes (a rename would read as 0).
    const live = await metrics.render();
    expect(live).toMatch(/^nodejs_eventloop_lag_mean_seconds \S+$/m);
    expect(live).toMatch(/^nodejs_eventloop_lag_p99_seconds \S+$/m);
  });
});
