import { describe, expect, it } from 'vitest';
import { joinCpuSamples, type CpuSample } from '../../bench/lib/proc.js';

const sample = (seconds: number, svc: number, svcSys: number, busy: number, steal: number): CpuSample => ({
  seconds,
  cores: { service: svc },
  sysShare: { service: svcSys },
  machineBusy: busy,
  machineSteal: steal,
});

describe('joinCpuSamples (bench:verify slices as one phase)', () => {
  it('weighs each slice by its length', () => {
    const joined = joinCpuSamples([sample(1, 1.0, 0.5, 1.5, 0.0), sample(3, 0.2, 0.1, 0.5, 0.4)]);
    expect(joined.seconds).toBe(4);
    expect(joined.cores['service']).toBeCloseTo((1.0 * 1 + 0.2 * 3) / 4);
    expect(joined.machineBusy).toBeCloseTo((1.5 + 0.5 * 3) / 4);
    expect(joined.machineSteal).toBeCloseTo(0.3);
  });

  it('weighs the kernel share by the cores it is a share of', () => {
    // 0.5 core-seconds at 50% system, 0.6 at 10%: 0.31 of 1.1 core-seconds in the kernel.
    const joined = joinCpuSamples([sample(1, 0.5, 0.5, 1, 0), sample(3, 0.2, 0.1, 1, 0)]);
    expect(joined.sysShare['service']).toBeCloseTo(0.31 / 1.1);
  });

  it('gives an idle group a kernel share of 0, not NaN', () => {
    expect(joinCpuSamples([sample(2, 0, 0, 0, 0)]).sysShare['service']).toBe(0);
  });
});
