import { describe, expect, it } from 'vitest';
import { joinPgbenchRuns, type PgbenchResult } from '../../bench/lib/pgbench.js';
import { percentile } from '../../bench/lib/load.js';

const run = (seconds: number, tps: number, latencies: number[], busy = 1, steal = 0): PgbenchResult => {
  const sorted = Float64Array.from(latencies).sort();
  return {
    clients: 8,
    seconds,
    tps,
    latencyMs: latencies.reduce((a, b) => a + b, 0) / latencies.length,
    latencies: sorted,
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    machineBusy: busy,
    machineSteal: steal,
  };
};

describe('joinPgbenchRuns (the slices of a ceiling that took turns, as one run)', () => {
  it('adds transactions and seconds rather than averaging rates', () => {
    // 1 s at 1,000 tx/s and 3 s at 2,000: 7,000 transactions in 4 s, not the mean rate 1,500.
    const joined = joinPgbenchRuns([run(1, 1000, [1]), run(3, 2000, [1])]);
    expect(joined.seconds).toBe(4);
    expect(joined.tps).toBeCloseTo(1750);
  });

  it('weighs the mean latency by transactions and the machine by seconds', () => {
    const joined = joinPgbenchRuns([run(1, 1000, [2], 1.0, 0.2), run(3, 2000, [1], 2.0, 0)]);
    // 1,000 transactions of 2 ms and 6,000 of 1 ms.
    expect(joined.latencyMs).toBeCloseTo((1000 * 2 + 6000 * 1) / 7000);
    expect(joined.machineBusy).toBeCloseTo((1.0 + 2.0 * 3) / 4);
    expect(joined.machineSteal).toBeCloseTo(0.05);
  });

  it('takes percentiles over every transaction of every slice', () => {
    const slow = Array.from({ length: 10 }, () => 50);
    const fast = Array.from({ length: 990 }, (_, i) => 1 + i / 1000);
    const joined = joinPgbenchRuns([run(1, 10, slow), run(1, 990, fast)]);
    expect(joined.latencies.length).toBe(1000);
    expect(Array.from(joined.latencies)).toEqual([...joined.latencies].sort((a, b) => a - b));
    // The 10 slow transactions are the top 1%: the p99 is the fastest-but-ten, not a slice's own p99.
    expect(joined.p99Ms).toBeCloseTo(1.989);
    expect(joined.p50Ms).toBeCloseTo(1.499);
  });

  it('refuses to join nothing', () => {
    expect(() => joinPgbenchRuns([])).toThrow(/no runs/);
  });
});
