import { describe, expect, it } from 'vitest';
import { BODY_MARGIN, bodiesPerWorker, warmUpMeasuringRate, type LoadResult } from '../../bench/lib/load.js';

const result = (ok: number, seconds: number, exhausted = false): LoadResult => ({
  requests: ok,
  ok,
  statuses: { 200: ok },
  firstError: undefined,
  seconds,
  latencies: new Float64Array(0),
  clientCpuUs: 0,
  exhausted,
});

describe('bodiesPerWorker (pre-signed bodies for a closed-loop phase)', () => {
  it('signs the margin above the rate, shared by the workers', () => {
    expect(bodiesPerWorker(3000, 32, 8)).toBe(Math.ceil((BODY_MARGIN * 3000 * 8) / 32) + 50);
  });

  it('caps one worker at its own rate', () => {
    expect(bodiesPerWorker(3000, 1, 8, 1200)).toBe(1200 * 8 + 50);
  });

  it('refuses a rate it cannot size for', () => {
    expect(() => bodiesPerWorker(0, 32, 8)).toThrow(/positive/);
    expect(() => bodiesPerWorker(Number.NaN, 32, 8)).toThrow(/positive/);
  });
});

describe('warmUpMeasuringRate', () => {
  it('signs each round for the rate the round before measured, and reports the fastest', async () => {
    const signed: number[] = [];
    // A service that answers 3,000/s: the first round, signed for 1,000/s, runs dry early.
    const run = async (bodies: readonly (readonly Buffer[])[], seconds: number) => {
      const have = bodies.reduce((n, b) => n + b.length, 0);
      const wanted = 3000 * seconds;
      return have < wanted ? result(have, have / 3000, true) : result(wanted, seconds);
    };
    const warm = await warmUpMeasuringRate({
      seconds: 10,
      startRps: 1000,
      workers: 4,
      sign: (perWorker) => {
        signed.push(perWorker);
        return Array.from({ length: 4 }, () => Array.from({ length: perWorker }, () => Buffer.alloc(0)));
      },
      run,
    });
    expect(warm.rps).toBeCloseTo(3000, 5);
    expect(warm.rounds[0]!.exhausted).toBe(true);
    expect(signed[1]).toBe(bodiesPerWorker(3000, 4, 5));
    // Rounds go on until the whole warm-up ran, the short first one not counted as 5 s.
    const ran = warm.rounds.reduce((s, r) => s + r.seconds, 0);
    expect(ran).toBeGreaterThanOrEqual(10 - 1e-9);
    expect(warm.rounds.at(-1)!.exhausted).toBe(false);
  });

  it('stops with an error when nothing is answered as expected', async () => {
    await expect(
      warmUpMeasuringRate({
        seconds: 3,
        startRps: 100,
        workers: 1,
        sign: () => [[Buffer.alloc(0)]],
        run: async () => ({ ...result(0, 1), requests: 5, firstError: 'HTTP 401: unauthorized' }),
      }),
    ).rejects.toThrow(/HTTP 401/);
  });
});
