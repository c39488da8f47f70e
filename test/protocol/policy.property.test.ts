/**
 * Properties of attenuation and evaluation, over small shared vocabularies so
 * that overlapping lists, equal ceilings, nested resource patterns and args
 * that some policies allow actually occur. Children are mostly derived from
 * their parent (kept, narrowed, or replaced at random), so a good share of
 * hops are accepted; counters assert that the interesting cases happened.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { resourceCovered } from '../../src/protocol/resource.js';
import {
  checkAttenuation,
  effectiveLimits,
  evaluateArgs,
  namesByPrefix,
  parsePolicy,
  restriction,
  type Policy,
} from '../../src/protocol/policy.js';

const TOOLS = ['web_search', 'file_read', 'summarise', 'delete_db'] as const;
const CLASSES = ['public', 'internal', 'secret'] as const;
const PATTERNS = [
  'mcp://tools/*',
  'mcp://tools/a/*',
  'mcp://tools/a/x/*',
  'mcp://tools/a',
  'mcp://tools/a/x',
  'mcp://tools/a/',
  'mcp://tools/b/*',
  'mcp://tools/ab',
  'MCP://TOOLS/a/*', // same set as mcp://tools/a/*, different spelling
  'https://h:443/p/*',
] as const;
const URIS = [
  'mcp://tools/a',
  'mcp://tools/a/x',
  'mcp://tools/a/x/y',
  'mcp://tools/a/',
  'mcp://tools/a/y',
  'mcp://tools/ab',
  'mcp://tools/b/z',
  'mcp://TOOLS/a/x',
  'https://h/p/q',
  'mcp://tools/a/../admin',
  'mcp://tools/a/%2e%2e/admin',
  'mcp://tools/a/x/..%2Fy',
] as const;
const AMOUNTS = [0, 1e-7, 0.1, 0.2, 0.1 + 0.2, 0.3, 0.5, 1, 5, 10, 10.0000001, 10.000001] as const;

type Args = Record<string, unknown>;

/** Drops undefined values, as JSON would. */
function compact<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

function listOf<T extends string>(vocab: readonly T[]): fc.Arbitrary<string[] | undefined> {
  return fc.oneof(
    { arbitrary: fc.constant(undefined), weight: 2 },
    { arbitrary: fc.constant<string[]>(['*']), weight: 1 },
    { arbitrary: fc.uniqueArray(fc.constantFrom(...vocab), { maxLength: vocab.length }), weight: 4 },
  );
}

const amount = fc.option(fc.constantFrom(...AMOUNTS), { nil: undefined });
const count = (max: number): fc.Arbitrary<number | undefined> => fc.option(fc.integer({ min: 0, max }), { nil: undefined });
const flag = fc.option(fc.boolean(), { nil: undefined });

const policyArb: fc.Arbitrary<Policy> = fc
  .record({
    allowed_tools: listOf(TOOLS),
    max_cost_usd: amount,
    pii_access: flag,
    write_access: flag,
    max_calls: count(5),
    allowed_resources: listOf(PATTERNS),
    allowed_data_classes: listOf(CLASSES),
    max_spend_usd: amount,
    max_depth: count(4),
  })
  .map((p) => parsePolicy(compact(p)));

/** Keep the parent's value, narrow it, or pick one at random (which may widen). */
function derive<T>(
  current: T | undefined,
  narrower: fc.Arbitrary<T | undefined>,
  random: fc.Arbitrary<T | undefined>,
): fc.Arbitrary<T | undefined> {
  return fc.oneof({ arbitrary: fc.constant(current), weight: 5 }, { arbitrary: narrower, weight: 9 }, { arbitrary: random, weight: 1 });
}

function narrowList<T extends string>(current: string[] | undefined, vocab: readonly T[]): fc.Arbitrary<string[] | undefined> {
  const base = restriction(current) ?? vocab;
  return derive(current, fc.subarray([...base]), listOf(vocab));
}

function narrowAmount(current: number | undefined): fc.Arbitrary<number | undefined> {
  const smaller = AMOUNTS.filter((a) => current === undefined || a <= current);
  return derive(current, fc.constantFrom(...smaller), amount);
}

function narrowCount(current: number | undefined, max: number, step: number): fc.Arbitrary<number | undefined> {
  const top = current === undefined ? max : current - step;
  return derive(current, top < 0 ? fc.constant(0) : fc.integer({ min: 0, max: top }), count(max));
}

function narrowFlag(current: boolean | undefined): fc.Arbitrary<boolean | undefined> {
  return derive(current, current === true ? fc.boolean() : fc.constant(false), flag);
}

function childOf(parent: Policy): fc.Arbitrary<Policy> {
  return fc
    .record({
      allowed_tools: narrowList(parent.allowed_tools, TOOLS),
      max_cost_usd: narrowAmount(parent.max_cost_usd),
      pii_access: narrowFlag(parent.pii_access),
      write_access: narrowFlag(parent.write_access),
      max_calls: narrowCount(parent.max_calls, 5, 0),
      allowed_resources: narrowList(parent.allowed_resources, PATTERNS),
      allowed_data_classes: narrowList(parent.allowed_data_classes, CLASSES),
      max_spend_usd: narrowAmount(parent.max_spend_usd),
      max_depth: narrowCount(parent.max_depth, 4, 1),
    })
    .map((p) => parsePolicy(compact(p)));
}

/** A root and up to three derived hops. */
const chainArb: fc.Arbitrary<Policy[]> = fc.integer({ min: 1, max: 4 }).chain((length) => {
  let arb: fc.Arbitrary<Policy[]> = policyArb.map((p) => [p]);
  for (let i = 1; i < length; i++) {
    arb = arb.chain((chain) => childOf(chain[chain.length - 1] ?? {}).map((c) => [...chain, c]));
  }
  return arb;
});

// Args lean towards plausible values so that restricted policies often allow them.
const argsArb: fc.Arbitrary<Args> = fc
  .record({
    tool: fc.oneof(
      { arbitrary: fc.constantFrom(...TOOLS), weight: 8 },
      { arbitrary: fc.constantFrom(undefined, 42, 'WEB_SEARCH'), weight: 1 },
    ),
    estimated_cost_usd: fc.oneof(
      { arbitrary: fc.constantFrom(...AMOUNTS), weight: 8 },
      { arbitrary: fc.constantFrom(undefined, -1, Number.NaN, Number.POSITIVE_INFINITY, '0.1', null, 2e9), weight: 1 },
    ),
    pii_access: fc.oneof(
      { arbitrary: fc.constant(false), weight: 6 },
      { arbitrary: fc.constantFrom(true, undefined, 'false', 0), weight: 1 },
    ),
    write_access: fc.oneof(
      { arbitrary: fc.constant(false), weight: 6 },
      { arbitrary: fc.constantFrom(true, undefined, 'false', 0), weight: 1 },
    ),
    resource_uri: fc.oneof({ arbitrary: fc.constantFrom(...URIS), weight: 8 }, { arbitrary: fc.constantFrom(undefined, 7, ''), weight: 1 }),
    data_class: fc.oneof({ arbitrary: fc.constantFrom(...CLASSES), weight: 8 }, { arbitrary: fc.constantFrom(undefined, 1), weight: 1 }),
  })
  .map((a) => compact(a));

/** Args aimed at what a policy allows (so that allowed cases are common), or any args. */
function argsFor(policy: Policy): fc.Arbitrary<Args> {
  const pick = <T>(candidates: readonly T[], fallback: readonly T[]): fc.Arbitrary<T> =>
    fc.constantFrom(...(candidates.length > 0 ? candidates : fallback));
  const tools = restriction(policy.allowed_tools) ?? TOOLS;
  const classes = restriction(policy.allowed_data_classes) ?? CLASSES;
  const patterns = restriction(policy.allowed_resources);
  const uris = patterns === undefined ? URIS : URIS.filter((u) => patterns.some((p) => resourceCovered(p, u)));
  const cap = policy.max_cost_usd;
  const costs = AMOUNTS.filter((a) => cap === undefined || a <= cap);
  const aimed = fc
    .record({
      tool: pick(tools, TOOLS),
      estimated_cost_usd: pick(costs, AMOUNTS),
      pii_access: policy.pii_access === true ? fc.constantFrom(true, false, undefined) : fc.constant(false),
      write_access: policy.write_access === true ? fc.constantFrom(true, false, undefined) : fc.constant(false),
      resource_uri: pick(uris, URIS),
      data_class: pick(classes, CLASSES),
    })
    .map((a) => compact(a));
  return fc.oneof({ arbitrary: aimed, weight: 3 }, { arbitrary: argsArb, weight: 1 });
}

const allows = (policy: Policy, args: Args): boolean => evaluateArgs(policy, args).length === 0;
const accepts = (parent: Policy, child: Policy): boolean => checkAttenuation(parent, child).length === 0;

/** EffectiveLimits read back as a policy (it is one, field for field). */
function effectivePolicy(chain: readonly Policy[]): Policy {
  return parsePolicy(compact({ ...effectiveLimits(chain) }));
}

const RUNS = 4000;

describe('attenuation soundness', () => {
  it('an accepted child never permits args its parent denies', () => {
    let accepted = 0;
    let acceptedAndAllowed = 0;
    let allowedUnderResourceAndCostLimits = 0;
    fc.assert(
      fc.property(
        policyArb.chain((parent) =>
          fc
            .oneof({ arbitrary: childOf(parent), weight: 4 }, { arbitrary: policyArb, weight: 1 })
            .chain((child) => fc.tuple(fc.constant(parent), fc.constant(child), argsFor(child))),
        ),
        ([parent, child, args]) => {
          if (!accepts(parent, child)) return;
          accepted++;
          if (!allows(child, args)) return;
          acceptedAndAllowed++;
          if (restriction(parent.allowed_resources)?.length && parent.max_cost_usd !== undefined) allowedUnderResourceAndCostLimits++;
          expect(evaluateArgs(parent, args)).toEqual([]);
        },
      ),
      { numRuns: RUNS },
    );
    // The implication must have been exercised, not vacuously true.
    expect(accepted).toBeGreaterThan(RUNS * 0.2);
    expect(acceptedAndAllowed).toBeGreaterThan(RUNS * 0.05);
    expect(allowedUnderResourceAndCostLimits).toBeGreaterThan(RUNS * 0.01);
  });

  it('a rejected child is rejected for a reason the parent states', () => {
    fc.assert(
      fc.property(policyArb, policyArb, (parent, child) => {
        for (const v of checkAttenuation(parent, child)) {
          const key = v.field.replace(/^policy\./, '') as keyof Policy;
          // Only a parent restriction can be escalated: a restricted list, a set ceiling, or a flag not granted.
          const p = parent[key];
          const restricts = Array.isArray(p)
            ? restriction(p) !== undefined
            : key === 'pii_access' || key === 'write_access'
              ? p !== true
              : p !== undefined;
          expect(restricts).toBe(true);
          expect(v.code).toBe('POLICY_ESCALATION');
          expect(typeof v.message).toBe('string');
        }
      }),
      { numRuns: RUNS },
    );
  });
});

describe('attenuation as an order', () => {
  it('is reflexive, except that max_depth must drop at every hop', () => {
    fc.assert(
      fc.property(policyArb, (p) => {
        const violations = checkAttenuation(p, p);
        if (p.max_depth === undefined) {
          expect(violations).toEqual([]);
        } else {
          expect(violations.map((v) => v.field)).toEqual(['policy.max_depth']);
          // Without max_depth the rest of the policy attenuates to itself.
          const { max_depth: _depth, ...rest } = p;
          expect(checkAttenuation(rest, rest)).toEqual([]);
          if (p.max_depth > 0) expect(checkAttenuation(p, { ...p, max_depth: p.max_depth - 1 })).toEqual([]);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('is transitive', () => {
    let chains = 0;
    fc.assert(
      fc.property(
        policyArb.chain((a) => childOf(a).chain((b) => childOf(b).map((c) => [a, b, c] as const))),
        ([a, b, c]) => {
          if (!accepts(a, b) || !accepts(b, c)) return;
          chains++;
          expect(checkAttenuation(a, c)).toEqual([]);
        },
      ),
      { numRuns: RUNS },
    );
    expect(chains).toBeGreaterThan(RUNS * 0.07);
  });
});

describe('chains', () => {
  it("namesByPrefix gives each prefix's effective allowed_tools: the names every restricting list of it holds", () => {
    // Written apart from src (which computes effectiveLimits' lists with namesByPrefix): the first
    // restricting list's names, in its order, kept when every other restricting list holds them.
    const reference = (prefix: readonly Policy[]): string[] | undefined => {
      const [first, ...others] = prefix.map((p) => restriction(p.allowed_tools)).filter((l) => l !== undefined);
      return first === undefined ? undefined : [...new Set(first)].filter((n) => others.every((o) => o.includes(n)));
    };
    fc.assert(
      fc.property(fc.array(policyArb, { minLength: 1, maxLength: 6 }), (chain) => {
        const byPrefix = namesByPrefix(chain.map((p) => p.allowed_tools));
        expect(byPrefix).toEqual(chain.map((_, i) => reference(chain.slice(0, i + 1))));
        expect(byPrefix.at(-1)).toEqual(effectiveLimits(chain).allowed_tools);
      }),
      { numRuns: RUNS },
    );
  });

  it('a chain allows args iff every member does, and effectiveLimits says the same', () => {
    let allowedChains = 0;
    let deniedByOneMemberOnly = 0;
    fc.assert(
      fc.property(
        chainArb.chain((chain) => fc.tuple(fc.constant(chain), argsFor(chain[chain.length - 1] ?? {}))),
        ([chain, args]) => {
          const perMember = chain.map((p) => allows(p, args));
          const chainAllows = perMember.every(Boolean);
          const allViolations = chain.flatMap((p) => evaluateArgs(p, args));
          expect(allViolations.length === 0).toBe(chainAllows);
          // The effective limits are never more permissive than any member, nor less than all of them.
          expect(allows(effectivePolicy(chain), args)).toBe(chainAllows);
          if (chainAllows) allowedChains++;
          if (perMember.filter((x) => !x).length === 1 && chain.length > 1) deniedByOneMemberOnly++;
        },
      ),
      { numRuns: RUNS },
    );
    expect(allowedChains).toBeGreaterThan(RUNS * 0.1);
    expect(deniedByOneMemberOnly).toBeGreaterThan(RUNS * 0.04);
  });

  it('in a validly attenuated chain, effective limits read from the last list are those of every list', () => {
    let valid = 0;
    let restricted = 0;
    fc.assert(
      fc.property(chainArb, (chain) => {
        if (!chain.every((p, i) => i === 0 || accepts(chain[i - 1] ?? {}, p))) return;
        valid++;
        const attenuated = effectiveLimits(chain, { attenuated: true });
        expect(attenuated).toEqual(effectiveLimits(chain));
        if ((attenuated.allowed_resources?.length ?? 0) > 0) restricted++;
      }),
      { numRuns: RUNS },
    );
    expect(valid).toBeGreaterThan(RUNS * 0.08);
    expect(restricted).toBeGreaterThan(RUNS * 0.03);
  });

  it('in a validly attenuated chain, the leaf allowing means every DR allows', () => {
    let valid = 0;
    let leafAllows = 0;
    fc.assert(
      fc.property(
        chainArb.chain((chain) => fc.tuple(fc.constant(chain), argsFor(chain[chain.length - 1] ?? {}))),
        ([chain, args]) => {
          const hopsOk = chain.every((p, i) => i === 0 || accepts(chain[i - 1] ?? {}, p));
          if (!hopsOk || chain.length < 2) return;
          valid++;
          const leaf = chain[chain.length - 1] ?? {};
          if (!allows(leaf, args)) return;
          leafAllows++;
          for (const p of chain) expect(evaluateArgs(p, args)).toEqual([]);
        },
      ),
      { numRuns: RUNS },
    );
    expect(valid).toBeGreaterThan(RUNS * 0.08);
    expect(leafAllows).toBeGreaterThan(RUNS * 0.02);
  });

  it('effective limits attenuate from every member', () => {
    fc.assert(
      fc.property(chainArb, (chain) => {
        const effective = effectivePolicy(chain);
        for (const p of chain) {
          // max_depth counts down along the chain, so compare everything else.
          const { max_depth: _a, ...parent } = p;
          const { max_depth: _b, ...child } = effective;
          expect(checkAttenuation(parent, child)).toEqual([]);
        }
      }),
      { numRuns: RUNS / 4 },
    );
  });
});
