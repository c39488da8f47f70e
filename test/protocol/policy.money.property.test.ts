/**
 * Properties of the money rules of a policy: estimates fail closed under any
 * cost ceiling or budget, and attenuation orders ceilings as exact decimals.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { compareUsd, MAX_INVOCATION_USD, MAX_USD } from '../../src/protocol/money.js';
import { checkAttenuation, evaluateArgs, evaluateEstimate, parsePolicy, type Policy } from '../../src/protocol/policy.js';

const ok = { pii_access: false, write_access: false };
const FIELD = 'args.estimated_cost_usd';

/** Amounts a policy accepts: small, large, exponent forms, sub-micro fractions. */
const amount = fc.oneof(
  fc.double({ min: 0, max: MAX_USD, noNaN: true }),
  fc.double({ min: 0, max: 1e-5, noNaN: true }),
  fc.integer({ min: 0, max: 1_000_000_000 }).map((m) => m / 1_000_000),
  fc.constantFrom(0, 5e-324, 1e-7, 0.3, 0.3000001, 0.30000049, 0.1 + 0.2, MAX_USD),
);

/** Policies setting max_cost_usd, max_spend_usd or both. */
const costedPolicy: fc.Arbitrary<Policy> = fc
  .record({ cost: fc.option(amount, { nil: undefined }), spend: fc.option(amount, { nil: undefined }) })
  .filter(({ cost, spend }) => cost !== undefined || spend !== undefined)
  .map(({ cost, spend }) =>
    parsePolicy({ ...(cost !== undefined ? { max_cost_usd: cost } : {}), ...(spend !== undefined ? { max_spend_usd: spend } : {}) }),
  );

/** Anything that is not a usable estimate. */
const unusable = fc.oneof(
  fc.constantFrom(undefined, null, true, false, '', '0.01', Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0.01),
  fc.double({ max: -Number.MIN_VALUE, noNaN: true }),
  fc.double({ min: MAX_INVOCATION_USD, noNaN: true, noDefaultInfinity: true }).filter((n) => n > MAX_INVOCATION_USD),
  fc.string(),
  fc.array(fc.double()),
  fc.object(),
);

describe('estimates under cost ceilings and budgets', () => {
  it('a missing or unusable estimate is always a violation naming the field', () => {
    fc.assert(
      fc.property(costedPolicy, unusable, (policy, estimate) => {
        const args = estimate === undefined ? ok : { ...ok, estimated_cost_usd: estimate };
        const fields = evaluateArgs(policy, args).map((v) => v.field);
        expect(fields).toContain(FIELD);
      }),
      { numRuns: 3000 },
    );
  });

  it('a present unusable estimate is a violation even under an empty policy (chain-wide check)', () => {
    fc.assert(
      fc.property(
        unusable.filter((e) => e !== undefined),
        (estimate) => {
          expect(evaluateEstimate({ ...ok, estimated_cost_usd: estimate }).map((v) => v.field)).toEqual([FIELD]);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('under max_spend_usd alone every usable estimate passes (the budget itself is checked when counting)', () => {
    fc.assert(
      fc.property(amount, fc.double({ min: 0, max: MAX_INVOCATION_USD, noNaN: true }), (budget, estimate) => {
        expect(evaluateArgs(parsePolicy({ max_spend_usd: budget }), { ...ok, estimated_cost_usd: estimate })).toEqual([]);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('attenuation of ceilings as exact decimals', () => {
  it('a child ceiling is accepted iff it is at most the parent one as a decimal', () => {
    fc.assert(
      fc.property(amount, amount, fc.constantFrom('max_cost_usd', 'max_spend_usd'), (parentCap, childCap, field) => {
        const violations = checkAttenuation(parsePolicy({ [field]: parentCap }), parsePolicy({ [field]: childCap }));
        const wider = compareUsd(childCap, parentCap) > 0;
        expect(violations.map((v) => v.field)).toEqual(wider ? [`policy.${field}`] : []);
        // The oracle: a finite double's shortest form names exactly that double.
        expect(wider).toBe(childCap > parentCap);
      }),
      { numRuns: 4000 },
    );
  });

  it('a child wider only below a micro-dollar is refused', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 999_999_999_999 }), fc.integer({ min: 1, max: 999 }), (micros, extra) => {
        const parentCap = micros / 1_000_000;
        const childCap = Number(`${parentCap.toFixed(6)}${String(extra).padStart(3, '0')}`);
        if (childCap === parentCap || childCap > MAX_USD) return;
        const violations = checkAttenuation(parsePolicy({ max_spend_usd: parentCap }), parsePolicy({ max_spend_usd: childCap }));
        expect(violations.map((v) => v.field)).toEqual(['policy.max_spend_usd']);
      }),
      { numRuns: 3000 },
    );
  });
});
