/**
 * First-match semantics of the approval rules over random rule lists and calls
 * drawn from small vocabularies, so that rules often match and often do not.
 * `holds` below is an independent oracle for one rule on a fully known call.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  ApprovalRulesSchema,
  evaluateRules,
  RULE_DECISIONS,
  type ApprovalRule,
  type RuleConditions,
  type RuleDecision,
  type RuleSubject,
} from '../../src/protocol/approval-rules.js';
import { usdToMicros, type Micros } from '../../src/protocol/money.js';
import { BLAST_RADII, RISK_FLAGS, SENSITIVITY_TAGS, TOOL_TYPES, type ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { tool } from '../support/tools.js';

const ACTIONS = ['crm:read', 'crm:update', 'payments:send', 'iam:delete', 'docs:read'] as const;
const ACTION_PATTERNS = [...ACTIONS, 'crm:*', 'payments:*', 'iam:*'] as const;
const AMOUNTS = [0, 0.1, 1, 5] as const;
const ESTIMATES = [0, 100_000, 100_001, 1_000_000, 5_000_000].map((m) => m as Micros);

const someOf = <T>(items: readonly T[]) => fc.uniqueArray(fc.constantFrom(...items), { minLength: 1, maxLength: 3 });

const declarationArb: fc.Arbitrary<ToolDeclaration> = fc
  .record({
    type: fc.constantFrom(...TOOL_TYPES),
    blast_radius: fc.constantFrom(...BLAST_RADII),
    untrusted_content: fc.boolean(),
    private_data_access: fc.boolean(),
    external_communication: fc.boolean(),
    tags: fc.subarray([...SENSITIVITY_TAGS]),
    action_type: fc.constantFrom(...ACTIONS),
  })
  .map((fields) => tool('t', fields));

const contextArb = fc.record({
  trifecta: fc.boolean(),
  near_limit: fc.boolean(),
  cost_calibration: fc.boolean(),
  estimate_micros: fc.constantFrom(...ESTIMATES),
});

const knownSubjectArb: fc.Arbitrary<RuleSubject> = fc
  .tuple(declarationArb, contextArb)
  .map(([declared, context]) => ({ tool: { kind: 'declared', tool: declared }, ...context }));

const CONDITION_KEYS = [
  'type',
  'blast_radius',
  'action_type',
  'tags',
  'flags',
  'trifecta',
  'near_limit',
  'estimate_above_usd',
  'cost_calibration',
  'undeclared',
] as const satisfies readonly (keyof RuleConditions)[];

/** Zero to two conditions per rule, so that rules often match and often do not. */
function conditionsArb(withUndeclared: boolean): fc.Arbitrary<RuleConditions> {
  const all = fc.record({
    type: someOf(TOOL_TYPES),
    blast_radius: someOf(BLAST_RADII),
    action_type: someOf(ACTION_PATTERNS),
    tags: someOf(SENSITIVITY_TAGS),
    flags: someOf(RISK_FLAGS),
    trifecta: fc.boolean(),
    near_limit: fc.boolean(),
    estimate_above_usd: fc.constantFrom(...AMOUNTS),
    cost_calibration: fc.boolean(),
    undeclared: fc.boolean(),
  });
  const keys = CONDITION_KEYS.filter((k) => withUndeclared || k !== 'undeclared');
  return fc
    .tuple(all, fc.uniqueArray(fc.constantFrom(...keys), { maxLength: 2 }))
    .map(([conditions, chosen]) => Object.fromEntries(chosen.map((k) => [k, conditions[k]])) as RuleConditions);
}

function rulesArb(withUndeclared = true, maxLength = 8): fc.Arbitrary<ApprovalRule[]> {
  return fc
    .array(fc.record({ when: conditionsArb(withUndeclared), decision: fc.constantFrom(...RULE_DECISIONS) }), { maxLength })
    .map((rules) => rules.map((r, i) => ({ id: `r${i}`, ...r })));
}

/** The oracle: does a rule match a fully known call? */
function holds(when: RuleConditions, s: RuleSubject): boolean {
  if (s.tool.kind !== 'declared' || s.estimate_micros === undefined) throw new Error('the oracle judges known calls only');
  const t = s.tool.tool;
  const flags = new Set([
    ...(t.untrusted_content ? ['untrusted_content'] : []),
    ...(t.private_data_access || t.tags.length > 0 ? ['private_data_access'] : []),
    ...(t.external_communication || t.type === 'external' ? ['external_communication'] : []),
  ]);
  const actionOk = (p: string) => (p.endsWith(':*') ? t.action_type.split(':')[0] === p.split(':')[0] : p === t.action_type);
  return (
    (when.type === undefined || when.type.includes(t.type)) &&
    (when.blast_radius === undefined || when.blast_radius.includes(t.blast_radius)) &&
    (when.action_type === undefined || when.action_type.some(actionOk)) &&
    (when.tags === undefined || when.tags.some((tag) => t.tags.includes(tag))) &&
    (when.flags === undefined || when.flags.some((f) => flags.has(f))) &&
    (when.undeclared === undefined || when.undeclared === false) &&
    (when.trifecta === undefined || when.trifecta === s.trifecta) &&
    (when.near_limit === undefined || when.near_limit === s.near_limit) &&
    (when.cost_calibration === undefined || when.cost_calibration === s.cost_calibration) &&
    (when.estimate_above_usd === undefined || s.estimate_micros > usdToMicros(when.estimate_above_usd, 'floor'))
  );
}

const STRICTNESS: Record<RuleDecision, number> = { allow: 0, require_approval: 1, deny: 2 };

describe('approval rules: first match wins (properties)', () => {
  it('the generated rule lists are valid documents', () => {
    fc.assert(fc.property(rulesArb(), (rules) => ApprovalRulesSchema.safeParse(rules).success));
  });

  it('the decision is that of the first rule that matches, or the default when none does', () => {
    let matched = 0;
    let defaulted = 0;
    fc.assert(
      fc.property(rulesArb(), fc.constantFrom(...RULE_DECISIONS), knownSubjectArb, (rules, fallback, subject) => {
        const outcome = evaluateRules(rules, fallback, subject);
        const first = rules.findIndex((r) => holds(r.when, subject));
        if (first === -1) {
          defaulted++;
          expect(outcome).toMatchObject({ source: 'default', decision: fallback });
        } else {
          matched++;
          expect(outcome).toMatchObject({
            source: 'rule',
            decision: rules[first]!.decision,
            rule: { index: first, id: `r${first}` },
            certain: true,
          });
        }
      }),
      { numRuns: 1000 },
    );
    expect(matched).toBeGreaterThan(100);
    expect(defaulted).toBeGreaterThan(100);
  });

  it('appending rules after a match never changes the outcome', () => {
    fc.assert(
      fc.property(rulesArb(), rulesArb(), fc.constantFrom(...RULE_DECISIONS), knownSubjectArb, (rules, more, fallback, subject) => {
        fc.pre(rules.some((r) => holds(r.when, subject)));
        const extended = [...rules, ...more.map((r, i) => ({ ...r, id: `extra${i}` }))];
        expect(evaluateRules(extended, fallback, subject)).toEqual(evaluateRules(rules, fallback, subject));
      }),
      { numRuns: 500 },
    );
  });

  it('no rules, or none matching, gives the default', () => {
    fc.assert(
      fc.property(rulesArb(), fc.constantFrom(...RULE_DECISIONS), knownSubjectArb, (rules, fallback, subject) => {
        expect(evaluateRules([], fallback, subject).decision).toBe(fallback);
        const missing = rules.filter((r) => !holds(r.when, subject));
        expect(evaluateRules(missing, fallback, subject)).toMatchObject({ source: 'default', decision: fallback });
      }),
      { numRuns: 500 },
    );
  });

  it('an undeclared tool without an estimate gets at least the decision of any declared tool with any estimate', () => {
    let stricterSeen = 0;
    fc.assert(
      fc.property(rulesArb(false), fc.constantFrom(...RULE_DECISIONS), knownSubjectArb, (rules, fallback, known) => {
        const unknown: RuleSubject = { ...known, tool: { kind: 'undeclared', name: 'mystery' }, estimate_micros: undefined };
        const worst = evaluateRules(rules, fallback, unknown).decision;
        const declared = evaluateRules(rules, fallback, known).decision;
        if (STRICTNESS[worst] > STRICTNESS[declared]) stricterSeen++;
        expect(STRICTNESS[worst]).toBeGreaterThanOrEqual(STRICTNESS[declared]);
      }),
      { numRuns: 1000 },
    );
    expect(stricterSeen).toBeGreaterThan(50);
  });
});
