import { describe, expect, it } from 'vitest';
import { closedLoopMeanFloorMs, closedLoopTailFloor, cpuBoundRatio, meanOf } from '../../bench/lib/floors.js';

describe("closedLoopMeanFloorMs (Little's law at full use of the cores)", () => {
  it('is in-flight requests times CPU per request over cores', () => {
    // 8 in flight, 1,000 us each on 2 cores: at most 2,000/s, so a mean of at least 4 ms.
    expect(closedLoopMeanFloorMs(8, 1000, 2)).toBeCloseTo(4);
    expect(closedLoopMeanFloorMs(1, 500, 1)).toBeCloseTo(0.5);
  });

  it('falls as cores are added and rises with CPU per request', () => {
    expect(closedLoopMeanFloorMs(8, 1000, 4)).toBeLessThan(closedLoopMeanFloorMs(8, 1000, 2));
    expect(closedLoopMeanFloorMs(8, 1200, 2)).toBeGreaterThan(closedLoopMeanFloorMs(8, 1000, 2));
  });
});

describe('closedLoopTailFloor (the p99 at that floor, if the tail keeps its shape)', () => {
  it('scales the mean floor by the measured p99 / mean', () => {
    const f = closedLoopTailFloor(8, 1000, 2, { meanMs: 6, p99Ms: 18 }, 10);
    expect(f.meanFloorMs).toBeCloseTo(4);
    expect(f.tailShape).toBeCloseTo(3);
    expect(f.p99FloorMs).toBeCloseTo(12);
  });

  it('names the CPU per request at which the goal would be just reachable', () => {
    const f = closedLoopTailFloor(8, 1000, 2, { meanMs: 6, p99Ms: 18 }, 10);
    // p99 10 ms at shape 3 needs a mean of 3.33 ms: 8 requests per 3.33 ms on 2 cores is 833 us each.
    expect(f.usPerRequestForGoal).toBeCloseTo(833.33, 1);
    // At that CPU per request the floor is exactly the goal.
    expect(closedLoopTailFloor(8, f.usPerRequestForGoal, 2, { meanMs: 6, p99Ms: 18 }, 10).p99FloorMs).toBeCloseTo(10);
  });
});

describe('cpuBoundRatio', () => {
  it('is the inverse ratio of CPU per request, and names what the slower load would need', () => {
    const r = cpuBoundRatio(700, 1400, 0.7);
    expect(r.ratio).toBeCloseTo(0.5);
    expect(r.slowUsForGoal).toBeCloseTo(1000);
  });
});

describe('meanOf', () => {
  it('averages, and is NaN for no latencies rather than 0', () => {
    expect(meanOf(Float64Array.from([1, 2, 6]))).toBeCloseTo(3);
    expect(meanOf([])).toBeNaN();
  });
});
