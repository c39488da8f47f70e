import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { BatonError } from '../../src/protocol/errors.js';
import {
  MAX_EXACT_MICROS,
  MAX_INVOCATION_MICROS,
  MAX_INVOCATION_USD,
  MAX_MICROS,
  MAX_USD,
  addMicros,
  asMicros,
  compareUsd,
  invocationAmountProblem,
  microsToUsd,
  saturatingMicros,
  sumMicros,
  usdToMicros,
  type Micros,
} from '../../src/protocol/money.js';

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

describe('compareUsd: exact decimal order of signed amounts', () => {
  it('orders values that round to the same micros', () => {
    expect(compareUsd(0.3000001, 0.3)).toBe(1);
    expect(compareUsd(0.30000049, 0.3)).toBe(1);
    expect(compareUsd(0.1 + 0.2, 0.3)).toBe(1);
    expect(compareUsd(0.3, 0.3)).toBe(0);
    expect(compareUsd(-0, 0)).toBe(0);
    expect(compareUsd(5e-324, 0)).toBe(1);
    expect(compareUsd(1e-7, 1.1e-7)).toBe(-1);
    expect(compareUsd(MAX_USD, 999_999_999.999999)).toBe(1);
  });

  it('refuses what is not an amount', () => {
    for (const bad of [Number.NaN, -1, Number.POSITIVE_INFINITY, MAX_USD * 2])
      expect(codeOf(() => compareUsd(bad, 1))).toBe('NUMBER_OUT_OF_RANGE');
  });

  it('agrees with the exact rational value of the doubles (property)', () => {
    // A finite double is an exact binary fraction; its shortest decimal form
    // names the same double, so comparing the doubles themselves is the oracle.
    const amount = fc.double({ min: 0, max: MAX_USD, noNaN: true });
    fc.assert(
      fc.property(amount, amount, (a, b) => {
        expect(compareUsd(a, b)).toBe(a < b ? -1 : a > b ? 1 : 0);
      }),
      { numRuns: 2000 },
    );
  });

  it('orders amounts that floor to the same micros (property)', () => {
    const micros = fc.integer({ min: 0, max: 999_999_999 });
    const subMicro = fc.integer({ min: 1, max: 999 });
    fc.assert(
      fc.property(micros, subMicro, (m, extra) => {
        const base = m / 1_000_000;
        const wider = Number(`${base.toFixed(6)}${String(extra).padStart(3, '0')}`);
        if (wider === base) return; // not representable as a distinct double
        expect(usdToMicros(wider, 'floor')).toBe(usdToMicros(base, 'floor'));
        expect(compareUsd(wider, base)).toBe(1);
        expect(compareUsd(base, wider)).toBe(-1);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('saturatingMicros', () => {
  it('reads sums exactly up to 2^53 - 1 micros and clamps above', () => {
    expect(saturatingMicros('0')).toEqual({ micros: 0, saturated: false });
    expect(saturatingMicros('9007199254740990')).toEqual({ micros: MAX_EXACT_MICROS - 1, saturated: false });
    expect(saturatingMicros('9007199254740991')).toEqual({ micros: MAX_EXACT_MICROS, saturated: true });
    expect(saturatingMicros('9007199254740992')).toEqual({ micros: MAX_EXACT_MICROS, saturated: true });
    expect(saturatingMicros(10n ** 30n)).toEqual({ micros: MAX_EXACT_MICROS, saturated: true });
    expect(saturatingMicros(2 ** 60)).toEqual({ micros: MAX_EXACT_MICROS, saturated: true });
    expect(microsToUsd(saturatingMicros('99999999999999999999').micros)).toBe(MAX_EXACT_MICROS / 1_000_000);
    for (const bad of ['-1', 'abc', '1.5', Number.NaN]) expect(codeOf(() => saturatingMicros(bad))).toBe('NUMBER_OUT_OF_RANGE');
  });

  it('the per-invocation maximum is far below MAX_USD and a counter plus one amount stays far below bigint', () => {
    expect(MAX_INVOCATION_MICROS).toBe(MAX_INVOCATION_USD * 1_000_000);
    expect(MAX_INVOCATION_USD * 1000).toBe(MAX_USD);
    expect(BigInt(MAX_EXACT_MICROS) + BigInt(MAX_INVOCATION_MICROS)).toBeLessThan(2n ** 63n - 1n);
    expect(invocationAmountProblem(MAX_INVOCATION_USD)).toBeUndefined();
    expect(invocationAmountProblem(MAX_INVOCATION_USD + 1e-6)).toContain('maximum');
    expect(invocationAmountProblem('1')).toBe('is not a number');
    expect(invocationAmountProblem(null)).toBe('is not a number');
    expect(invocationAmountProblem(-1e-9)).toBe('is negative');
    expect(invocationAmountProblem(Number.NaN)).toBe('is not a finite number');
  });
});
