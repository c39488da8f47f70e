// bench:profile reads the group-commit histograms from the service's own
// /metrics exposition; these tests feed the parser what prom-client renders.
import { describe, expect, it } from 'vitest';
import { gcPausesDelta, groupCommitDelta, parseEventLoopDelay, parseGcPauses, parseGroupCommit } from '../../bench/lib/metrics.js';
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

  it("reads the garbage collector's pauses by kind, and what changed between two readings", () => {
    const before = parseGcPauses(
      [
        '# TYPE nodejs_gc_duration_seconds histogram',
        'nodejs_gc_duration_seconds_bucket{le="0.001",kind="minor"} 3',
        'nodejs_gc_duration_seconds_sum{kind="minor"} 0.012',
        'nodejs_gc_duration_seconds_count{kind="minor"} 4',
        'nodejs_gc_duration_seconds_sum{kind="major"} 0.02',
        'nodejs_gc_duration_seconds_count{kind="major"} 1',
      ].join('\n'),
    );
    expect(before).toEqual({ count: { minor: 4, major: 1 }, seconds: { minor: 0.012, major: 0.02 } });
    const after = parseGcPauses(
      'nodejs_gc_duration_seconds_sum{kind="minor"} 0.042\nnodejs_gc_duration_seconds_count{kind="minor"} 10\nnodejs_gc_duration_seconds_sum{kind="major"} 0.02\nnodejs_gc_duration_seconds_count{kind="major"} 1\n',
    );
    const delta = gcPausesDelta(before, after);
    expect(delta.count).toEqual({ minor: 6, major: 0 });
    expect(delta.seconds['minor']).toBeCloseTo(0.03, 9);
  });

  it('finds the GC histogram under the name prom-client gives it, once a collection ran', async () => {
    // Allocate enough that a scavenge must have run (prom-client hears of it asynchronously).
    const garbage: string[][] = [];
    for (let i = 0; i < 50; i++) garbage.push(Array.from({ length: 4_000 }, (_, j) => `x${i}-${j}`));
    await new Promise((r) => setTimeout(r, 50));
    const gc = parseGcPauses(await metrics.render());
    expect(Object.values(gc.count).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    expect(garbage).toHaveLength(50);
  });
});
