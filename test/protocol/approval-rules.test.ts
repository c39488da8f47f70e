import { describe, expect, it } from 'vitest';
import { encodeBase58btc } from '../../src/protocol/base58.js';
import { BatonError } from '../../src/protocol/errors.js';
import {
  actionTypeMatches,
  DEFAULT_APPROVAL_RULES,
  DEFAULT_TOOL_SETTINGS,
  evaluateRules,
  parseTenantToolSettings,
  type ApprovalRule,
  type RuleSubject,
} from '../../src/protocol/approval-rules.js';
import type { Micros } from '../../src/protocol/money.js';
import type { ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { tool } from '../support/tools.js';

function call(declared: ToolDeclaration | undefined, context: Partial<Omit<RuleSubject, 'tool'>> = {}): RuleSubject {
  return {
    tool: declared === undefined ? { kind: 'undeclared', name: 'mystery' } : { kind: 'declared', tool: declared },
    trifecta: false,
    near_limit: false,
    cost_calibration: false,
    estimate_micros: 0 as Micros,
    ...context,
  };
}

function settingsIssueList(raw: unknown): { field: string; message: string }[] {
  try {
    parseTenantToolSettings(raw);
  } catch (e) {
    if (!(e instanceof BatonError)) throw e;
    expect(e.code).toBe('INVALID_FIELD');
    return e.details?.['issues'] as { field: string; message: string }[];
  }
  throw new Error('expected the settings to be refused');
}

function settingsIssues(raw: unknown): string[] {
  return settingsIssueList(raw).map((i) => i.field);
}

describe('approval rules: schema', () => {
  it('accepts the default settings and rules', () => {
    expect(parseTenantToolSettings(DEFAULT_TOOL_SETTINGS)).toEqual(DEFAULT_TOOL_SETTINGS);
  });

  it('lists every problem: repeated ids, empty or unknown conditions, bad decisions and patterns', () => {
    const fields = settingsIssues({
      strict: 'yes',
      default_decision: 'maybe',
      approvers: ['alice'],
      rules: [
        { id: 'a', when: {}, decision: 'allow' },
        { id: 'a', when: { blast_radius: [] }, decision: 'deny' },
        { id: 'b', when: { colour: ['red'] }, decision: 'allow' },
        { id: 'c', when: { action_type: ['payments*', '*:send', '*', 'Payments:send'] }, decision: 'escalate' },
        { id: 'D', when: { estimate_above_usd: -1 }, decision: 'deny' },
      ],
    });
    expect(fields).toEqual(
      expect.arrayContaining([
        'strict',
        'default_decision',
        'approvers.0',
        'rules.1.id',
        'rules.1.when.blast_radius',
        'rules.2.when.colour',
        'rules.3.when.action_type.0',
        'rules.3.when.action_type.1',
        'rules.3.when.action_type.2',
        'rules.3.when.action_type.3',
        'rules.3.decision',
        'rules.4.id',
        'rules.4.when.estimate_above_usd',
      ]),
    );
  });

  it('an approver is a canonical Ed25519 did:key, listed once', () => {
    const [a, b] = [generateKeyPair().did, generateKeyPair().did];
    const settings = (approvers: unknown[]) => ({ ...DEFAULT_TOOL_SETTINGS, approvers });
    expect(parseTenantToolSettings(settings([a, b])).approvers).toEqual([a, b]);
    // The regex alone let through DIDs no key can sign for: garbage, all zero bytes, an X25519 key, a small-order point.
    const smallOrder = 'did:key:z' + encodeBase58btc(new Uint8Array([0xed, 0x01, 1, ...new Array<number>(31).fill(0)]));
    const unsignable = [
      'did:key:zzz',
      'did:key:z1111111111111111111111111111111111111111111111',
      'did:key:z6LSbysY2xFMRpGMhb7tFTLMpeuPRaqaWM1yECx2AtzE3KCc',
      smallOrder,
    ];
    const issues = settingsIssueList(settings([a, ...unsignable, b, a]));
    expect(issues.map((i) => i.field)).toEqual(['approvers.1', 'approvers.2', 'approvers.3', 'approvers.4', 'approvers.6']);
    expect(issues[0]!.message).toMatch(/^is not an Ed25519 did:key any key can sign for \(INVALID_DID\)/);
    expect(issues[3]!.message).toMatch(/^is not an Ed25519 did:key any key can sign for \(WEAK_KEY\)/);
    expect(issues[4]!.message).toBe(`repeats the approver ${JSON.stringify(a)} of approvers.0`);
    // A shape failure is reported once, by the shape.
    expect(settingsIssues(settings(['did:web:example.com']))).toEqual(['approvers.0']);
  });

  it('a rule description is plain text, as approval reasons are: it is copied into what approvers read', () => {
    const rule = (description: string) => ({ ...DEFAULT_TOOL_SETTINGS, rules: [{ id: 'a', when: {}, decision: 'allow', description }] });
    expect(parseTenantToolSettings(rule('Line one.\n\tLine two.')).rules[0]!.description).toBe('Line one.\n\tLine two.');
    for (const bad of ['x\u001b[2Jy', 'x\u202ey', 'x\u200by', 'x\u2066y', 'x\ufeffy', 'x\u0085y', 'x\u00ady', 'x\u{e0041}y']) {
      const issues = settingsIssueList(rule(bad));
      expect(issues).toEqual([
        { field: 'rules.0.description', message: 'must not contain control, bidi, zero-width or other invisible characters' },
      ]);
    }
  });
});

describe('approval rules: matching', () => {
  it('category:* matches every action of exactly that category', () => {
    expect(actionTypeMatches('payments:*', 'payments:send')).toBe(true);
    expect(actionTypeMatches('payments:*', 'payments:refund')).toBe(true);
    expect(actionTypeMatches('payments:*', 'paymentsx:send')).toBe(false);
    expect(actionTypeMatches('payments:*', 'pay:ments')).toBe(false);
    expect(actionTypeMatches('payments:send', 'payments:sender')).toBe(false);
    expect(actionTypeMatches('payments:send', 'payments:send')).toBe(true);
  });

  it('compares the estimate with the threshold in exact micros', () => {
    const rules: ApprovalRule[] = [{ id: 'big', when: { estimate_above_usd: 0.1 }, decision: 'require_approval' }];
    expect(evaluateRules(rules, 'allow', call(tool('t'), { estimate_micros: 100_000 as Micros })).decision).toBe('allow');
    expect(evaluateRules(rules, 'allow', call(tool('t'), { estimate_micros: 100_001 as Micros })).decision).toBe('require_approval');
  });

  it('reports the matched rule with index, id, description and why', () => {
    const outcome = evaluateRules(DEFAULT_APPROVAL_RULES, 'allow', call(tool('wipe', { type: 'write', blast_radius: 'organizational' })));
    expect(outcome).toEqual({
      decision: 'require_approval',
      source: 'rule',
      rule: { index: 1, id: 'organizational-blast-radius', description: 'The tool acts on the whole organisation.' },
      certain: true,
      why: ['blast radius in organizational: yes'],
    });
  });
});

describe('approval rules: the default rule set', () => {
  const rules = DEFAULT_APPROVAL_RULES;
  const decide = (subject: RuleSubject) => evaluateRules(rules, 'allow', subject);

  it('allows an ordinary declared call', () => {
    expect(decide(call(tool('search', { type: 'external', blast_radius: 'domain' })))).toMatchObject({
      decision: 'allow',
      source: 'default',
    });
  });

  it('gates organisation-wide tools, NEAR_LIMIT and cost calibration', () => {
    expect(decide(call(tool('t', { blast_radius: 'organizational' })))).toMatchObject({ rule: { id: 'organizational-blast-radius' } });
    expect(decide(call(tool('t'), { near_limit: true }))).toMatchObject({ decision: 'require_approval', rule: { id: 'near-limit' } });
    expect(decide(call(tool('t'), { cost_calibration: true }))).toMatchObject({ rule: { id: 'cost-calibration' } });
  });

  it('in a trifecta chain, gates the tools that can send data out and only those', () => {
    expect(decide(call(tool('send', { external_communication: true }), { trifecta: true }))).toMatchObject({
      decision: 'require_approval',
      rule: { id: 'trifecta-external' },
    });
    expect(decide(call(tool('send', { type: 'external' }), { trifecta: true }))).toMatchObject({ rule: { id: 'trifecta-external' } });
    expect(decide(call(tool('read'), { trifecta: true })).decision).toBe('allow');
    expect(decide(call(tool('send', { external_communication: true }), { trifecta: false })).decision).toBe('allow');
  });

  it('gates an undeclared tool, which might be organisation-wide', () => {
    expect(decide(call(undefined))).toMatchObject({ decision: 'require_approval', certain: false });
  });

  it('a top tier of action types can be put in front and is always gated', () => {
    const withTopTier: ApprovalRule[] = [
      { id: 'top-tier', when: { action_type: ['payments:*', 'iam:delete'] }, decision: 'require_approval' },
      ...rules,
    ];
    const payment = tool('pay', { action_type: 'payments:send' });
    expect(evaluateRules(withTopTier, 'allow', call(payment))).toMatchObject({ rule: { index: 0, id: 'top-tier' } });
    expect(evaluateRules(withTopTier, 'allow', call(tool('docs')))).toMatchObject({ decision: 'allow' });
  });
});

describe('approval rules: unknown facts fail closed', () => {
  it('an allow meant for read-only tools does not apply to an undeclared tool', () => {
    const rules: ApprovalRule[] = [{ id: 'reads', when: { blast_radius: ['read'] }, decision: 'allow' }];
    expect(evaluateRules(rules, 'require_approval', call(tool('t')))).toMatchObject({ decision: 'allow', rule: { id: 'reads' } });
    expect(evaluateRules(rules, 'require_approval', call(undefined))).toMatchObject({ decision: 'require_approval', source: 'default' });
  });

  it('the strictest possible match wins, not the first', () => {
    const rules: ApprovalRule[] = [
      { id: 'pii-needs-human', when: { tags: ['pii'] }, decision: 'require_approval' },
      { id: 'no-org-tools', when: { blast_radius: ['organizational'] }, decision: 'deny' },
    ];
    expect(evaluateRules(rules, 'allow', call(tool('t', { blast_radius: 'organizational' })))).toMatchObject({ decision: 'deny' });
    expect(evaluateRules(rules, 'allow', call(undefined))).toMatchObject({ decision: 'deny', rule: { index: 1 }, certain: false });
  });

  it('a certain match ends the search: later rules cannot make it stricter', () => {
    const rules: ApprovalRule[] = [
      { id: 'calm', when: { near_limit: false }, decision: 'allow' },
      { id: 'org', when: { blast_radius: ['organizational'] }, decision: 'deny' },
    ];
    expect(evaluateRules(rules, 'deny', call(undefined))).toMatchObject({ decision: 'allow', rule: { id: 'calm' }, certain: true });
  });

  it('a missing estimate might be above any threshold', () => {
    const rules: ApprovalRule[] = [{ id: 'big', when: { estimate_above_usd: 100 }, decision: 'require_approval' }];
    expect(evaluateRules(rules, 'allow', call(tool('t'), { estimate_micros: undefined })).decision).toBe('require_approval');
  });

  it('rules may single out undeclared tools explicitly', () => {
    const rules: ApprovalRule[] = [{ id: 'no-strangers', when: { undeclared: true }, decision: 'deny' }];
    expect(evaluateRules(rules, 'allow', call(undefined))).toMatchObject({ decision: 'deny', certain: true });
    expect(evaluateRules(rules, 'allow', call(tool('t'))).decision).toBe('allow');
  });
});
