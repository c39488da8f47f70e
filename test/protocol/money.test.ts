import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { BatonError } from '../../src/protocol/errors.js';
import { MAX_MICROS, MAX_USD, addMicros, asMicros, microsToUsd, sumMicros, usdToMicros, type Micros } from '../../src/protocol/money.js';

function codeOf(f: () => unknown): string | undefined {
  try {
    f();
  } catch (e) {
    return e instanceof BatonError ? e.code : 'not a BatonError';
  }
  return undefined;
}

describe('usdToMicros', () => {
  it('converts exact decimals without float error', () => {
    expect(usdToMicros(0.5, 'floor')).toBe(500_000);
    expect(usdToMicros(10, 'ceil')).toBe(10_000_000);
    expect(usdToMicros(0.1, 'ceil')).toBe(100_000);
    expect(usdToMicros(0.2, 'floor')).toBe(200_000);
    expect(usdToMicros(1.1, 'ceil')).toBe(1_100_000); // 1.1 * 1e6 is 1100000.0000000002 as floats
    expect(usdToMicros(0.000001, 'floor')).toBe(1);
    expect(usdToMicros(123.456789, 'ceil')).toBe(123_456_789);
    expect(usdToMicros(MAX_USD, 'floor')).toBe(MAX_MICROS);
  });

  it('sums 0.1 + 0.2 exactly in micros, and rounds the float sum fail-closed', () => {
    expect(addMicros(usdToMicros(0.1, 'ceil'), usdToMicros(0.2, 'ceil'))).toBe(300_000);
    // 0.1 + 0.2 === 0.30000000000000004 as a double: ceilings floor it, estimates ceil it.
    expect(usdToMicros(0.1 + 0.2, 'floor')).toBe(300_000);
    expect(usdToMicros(0.1 + 0.2, 'ceil')).toBe(300_001);
  });

  it('handles exponent forms and sub-micro amounts', () => {
    expect(usdToMicros(1e-7, 'floor')).toBe(0);
    expect(usdToMicros(1e-7, 'ceil')).toBe(1);
    expect(usdToMicros(1.5e-7, 'ceil')).toBe(1);
    expect(usdToMicros(5e-324, 'floor')).toBe(0);
    expect(usdToMicros(5e-324, 'ceil')).toBe(1);
    expect(usdToMicros(1e-6, 'floor')).toBe(1);
    expect(usdToMicros(2.5e-6, 'floor')).toBe(2);
    expect(usdToMicros(2.5e-6, 'ceil')).toBe(3);
    expect(usdToMicros(1e8, 'floor')).toBe(1e14);
  });

  it('treats -0 as 0', () => {
    expect(usdToMicros(-0, 'floor')).toBe(0);
    expect(Object.is(usdToMicros(-0, 'ceil'), 0)).toBe(true);
  });

  it.each([Number.NaN, -1, -1e-9, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, MAX_USD + 0.000001, MAX_USD * 2, 1e21])(
    'refuses %s with NUMBER_OUT_OF_RANGE',
    (usd) => {
      expect(codeOf(() => usdToMicros(usd, 'floor'))).toBe('NUMBER_OUT_OF_RANGE');
      expect(codeOf(() => usdToMicros(usd, 'ceil'))).toBe('NUMBER_OUT_OF_RANGE');
    },
  );

  it('refuses non-numbers at runtime', () => {
    expect(codeOf(() => usdToMicros('1' as unknown as number, 'floor'))).toBe('NUMBER_OUT_OF_RANGE');
  });

  it('property: floor <= ceil <= floor + 1, equal exactly when the amount is a whole micro', () => {
    fc.assert(
      fc.property(fc.double({ min: 0, max: MAX_USD, noNaN: true }), (usd) => {
        const lo = usdToMicros(usd, 'floor');
        const hi = usdToMicros(usd, 'ceil');
        expect(lo).toBeLessThanOrEqual(hi);
        expect(hi).toBeLessThanOrEqual(lo + 1);
        expect(Number.isSafeInteger(lo) && Number.isSafeInteger(hi)).toBe(true);
        // The amount lies between lo and hi micros (division rounds monotonically, so doubles keep the order).
        expect(lo / 1e6).toBeLessThanOrEqual(usd);
        expect(hi / 1e6).toBeGreaterThanOrEqual(usd);
      }),
      { numRuns: 2000 },
    );
  });

  it('property: amounts with at most 6 decimals convert exactly and round-trip', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: MAX_USD * 1_000_000 }), (m) => {
        // Build the decimal text first, so the double is the one a JSON parser yields.
        const text = `${Math.floor(m / 1_000_000)}.${String(m % 1_000_000).padStart(6, '0')}`;
        const usd = Number(text);
        expect(usdToMicros(usd, 'floor')).toBe(m);
        expect(usdToMicros(usd, 'ceil')).toBe(m);
        expect(microsToUsd(m as Micros)).toBe(usd);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('micros arithmetic', () => {
  it('adds exactly and refuses to leave the safe-integer range', () => {
    expect(addMicros(asMicros(1), asMicros(2))).toBe(3);
    expect(sumMicros([asMicros(100_000), asMicros(200_000), asMicros(700_000)])).toBe(1_000_000);
    expect(sumMicros([])).toBe(0);
    expect(codeOf(() => addMicros(asMicros(Number.MAX_SAFE_INTEGER), asMicros(1)))).toBe('NUMBER_OUT_OF_RANGE');
  });

  it('asMicros refuses fractions, negatives and non-finite values', () => {
    for (const bad of [0.5, -1, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
      expect(codeOf(() => asMicros(bad))).toBe('NUMBER_OUT_OF_RANGE');
    }
    expect(Object.is(asMicros(-0), 0)).toBe(true);
  });

  it('microsToUsd is the display form', () => {
    expect(microsToUsd(asMicros(500_000))).toBe(0.5);
    expect(microsToUsd(asMicros(1))).toBe(0.000001);
    expect(microsToUsd(MAX_MICROS)).toBe(MAX_USD);
  });
});
