import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { DEFAULT_TOOL_SETTINGS, type TenantToolSettings } from '../../src/protocol/approval-rules.js';
import { ERROR_TABLE } from '../../src/protocol/errors.js';
import { explain, type ExplainInput } from '../../src/protocol/explain.js';
import { evaluateArgs, type Policy } from '../../src/protocol/policy.js';
import { asMicros } from '../../src/protocol/money.js';
import type { Catalog } from '../../src/protocol/tool-catalog.js';
import { tool } from '../support/tools.js';

const APPROVER = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK';

const catalog: Catalog = {
  version: 4,
  tools: [
    tool('wipe_workspace', { type: 'write', blast_radius: 'organizational', action_type: 'workspace:delete' }),
    tool('fetch_page', { type: 'external', untrusted_content: true, external_communication: true, action_type: 'web:fetch' }),
    tool('read_inbox', { private_data_access: true, tags: ['pii'], action_type: 'mail:read' }),
    tool('send_mail', { type: 'external', action_type: 'mail:send' }),
    tool('summarise'),
    tool('paid_lookup', { cost_per_invocation_usd: 2, action_type: 'data:lookup' }),
  ],
};

/** A grant held when its DR was stored, under an older catalog. */
const held = {
  dr_hash: `sha256:${'ab'.repeat(32)}`,
  status: 'pending',
  explanation: 'Its tools combine all three risks (…).',
  catalog_version: 3,
} as const;

/** A strict tenant: in a non-strict one every unrestricted DR reaches "any undeclared tool", a trifecta. */
const settings: TenantToolSettings = { ...DEFAULT_TOOL_SETTINGS, strict: true, approvers: [APPROVER] };

function run({
  settings: own = settings,
  ...over
}: Partial<Omit<ExplainInput, 'tools'>> & Pick<ExplainInput, 'args' | 'policies'> & { settings?: TenantToolSettings }) {
  return explain({ tools: { catalog, settings: own }, ...over });
}

const quiet = { pii_access: false, write_access: false };

describe('explain', () => {
  it('allows a call that meets every condition, saying nothing', () => {
    const result = run({ args: { tool: 'summarise', ...quiet }, policies: [{ allowed_tools: ['summarise'] }, {}] });
    expect(result).toMatchObject({ decision: 'allow', violations: [], catalog_version: 4, rule: { source: 'default' } });
  });

  it('names the missing grant per DR and the approval gate with its approvers', () => {
    const result = run({
      args: { tool: 'wipe_workspace', ...quiet },
      policies: [{ write_access: true, allowed_tools: ['wipe_workspace', 'summarise'] }, { allowed_tools: ['wipe_workspace'] }],
    });
    expect(result.decision).toBe('deny');
    expect(result.violations).toEqual([
      expect.objectContaining({
        code: 'POLICY_VIOLATION',
        dr_index: 1,
        field: 'policy.write_access',
        required: true,
        actual: null,
        remediation: expect.stringMatching(/^grant write_access in DR #1 /),
      }),
      expect.objectContaining({
        code: 'APPROVAL_REQUIRED',
        field: 'rules[1]',
        remediation: `request approval; approvers: holders of an API key with the approve scope, or ${APPROVER}`,
      }),
    ]);
    expect(result.rule).toMatchObject({ rule: { index: 1, id: 'organizational-blast-radius' } });
  });

  it('says require_approval when the gate is the only unmet condition', () => {
    const result = run({
      args: { tool: 'wipe_workspace', ...quiet },
      policies: [{ write_access: true, allowed_tools: ['wipe_workspace'] }],
    });
    expect(result.decision).toBe('require_approval');
    expect(result.violations.map((v) => v.code)).toEqual(['APPROVAL_REQUIRED']);
  });

  it('lists every unmet condition at once: args, catalog, trifecta grant and rule', () => {
    const strictDeny: TenantToolSettings = {
      ...settings,
      strict: true,
      rules: [{ id: 'no-lookups', when: { action_type: ['data:*'] }, decision: 'deny' }],
    };
    const policies: Policy[] = [{}, { max_cost_usd: 1, allowed_tools: ['fetch_page', 'read_inbox', 'send_mail', 'paid_lookup'] }];
    const result = run({ settings: strictDeny, args: { tool: 'paid_lookup', estimated_cost_usd: 1.5, write_access: true }, policies });
    expect(result.decision).toBe('deny');
    const got = result.violations.map((v) => `${v.code}@${v.dr_index ?? '-'}:${v.field}`);
    expect(got).toEqual([
      'POLICY_VIOLATION@0:args.pii_access',
      'POLICY_VIOLATION@0:args.write_access',
      'POLICY_VIOLATION@1:args.estimated_cost_usd',
      'POLICY_VIOLATION@1:args.pii_access',
      'POLICY_VIOLATION@1:args.write_access',
      'POLICY_VIOLATION@1:policy.max_cost_usd',
      'GRANT_PENDING_APPROVAL@0:policy.allowed_tools',
      'GRANT_PENDING_APPROVAL@1:policy.allowed_tools',
      'RULE_DENIED@-:rules[0]',
    ]);
    const byField = (f: string, i?: number) => result.violations.find((v) => v.field === f && (i === undefined || v.dr_index === i))!;
    expect(byField('args.pii_access', 0).remediation).toBe(
      'set args.pii_access to false, or grant pii_access in DR #0 (the root) (re-issue it with the grant; every delegation above it must grant it too)',
    );
    expect(byField('args.estimated_cost_usd').remediation).toMatch(/^lower args.estimated_cost_usd to at most max_cost_usd of DR #1/);
    expect(byField('policy.max_cost_usd').remediation).toMatch(/^raise max_cost_usd in DR #1 to at least 2 /);
    expect(byField('policy.allowed_tools', 1).message).toBe(
      'The tools DR #1 allows combine all three risks (untrusted content from "fetch_page"; private data from "read_inbox"; external communication from "fetch_page", "send_mail").',
    );
    expect(byField('rules[0]').remediation).toBe('call a different tool, or ask the tenant admin to change rule #0 (no-lookups)');
    expect(result.estimate_usd).toBe(2);
    expect(result.estimate_raised).toBe(true);
  });

  it('drops a pending-grant condition once a human approved that DR', () => {
    const policies: Policy[] = [{ allowed_tools: ['fetch_page', 'read_inbox'] }];
    const args = { tool: 'read_inbox', ...quiet, pii_access: true };
    const withPii: Policy[] = [{ ...policies[0], pii_access: true }];
    expect(run({ args, policies: withPii }).violations.map((v) => v.code)).toEqual(['GRANT_PENDING_APPROVAL']);
    const approved = { ...held, status: 'approved' as const };
    expect(run({ args, policies: withPii, context: { stored_grants: [approved] } })).toMatchObject({ decision: 'allow', violations: [] });
  });

  it('judges holds by the stored grants, as the verify statement does, whatever the current catalog says', () => {
    const args = { tool: 'summarise', ...quiet };
    // Not a trifecta under this catalog, but held when stored under an older one: still held.
    const harmless: Policy[] = [{ allowed_tools: ['summarise'] }, { allowed_tools: ['summarise'] }];
    const pending = run({ args, policies: harmless, context: { stored_grants: [null, held] } });
    expect(pending.decision).toBe('deny');
    expect(pending.grants.map((g) => g.detected)).toEqual([false, false]);
    expect(pending.violations).toEqual([
      {
        code: 'GRANT_PENDING_APPROVAL',
        dr_index: 1,
        dr_hash: held.dr_hash,
        field: 'status',
        required: 'approved',
        actual: 'pending',
        message:
          'DR #1 is held for a human (judged when it was stored, under tool catalog version 3: Its tools combine all three risks (…).); the hold stands until an approver decides, whatever a newer catalog says.',
        remediation:
          'have an approver approve DR #1 (GET /v1/grants), or re-issue it with allowed_tools that leave out every source of one of the three risks',
      },
    ]);
    const rejected = run({ args, policies: harmless, context: { stored_grants: [{ ...held, status: 'rejected' }, null] } });
    expect(rejected.violations.map((v) => [v.code, v.dr_index, v.actual])).toEqual([['GRANT_PENDING_APPROVAL', 0, 'rejected']]);
    expect(rejected.violations[0]!.message).toMatch(
      /^An approver rejected DR #0 \(the root\) for good \(it was held when it was stored, under tool catalog version 3:/,
    );
    expect(rejected.violations[0]!.remediation).toMatch(/^issue a new delegation in place of DR #0/);
    // A trifecta under this catalog that was stored without a grant is not held: verify lets it through.
    const trifecta: Policy[] = [{ allowed_tools: ['fetch_page', 'read_inbox', 'send_mail'], pii_access: true }];
    const unheld = run({
      args: { tool: 'read_inbox', ...quiet, pii_access: true },
      policies: trifecta,
      context: { stored_grants: [null] },
    });
    expect(unheld.grants[0]!.detected).toBe(true);
    expect(unheld.violations.map((v) => v.code)).not.toContain('GRANT_PENDING_APPROVAL');
  });

  it('gates the exfiltration leg of a trifecta chain through the default rules', () => {
    const policies: Policy[] = [{ allowed_tools: ['fetch_page', 'read_inbox', 'send_mail'], pii_access: true }];
    const context = { stored_grants: [{ ...held, status: 'approved' as const }] };
    const send = run({ args: { tool: 'send_mail', ...quiet }, policies, context });
    expect(send).toMatchObject({
      decision: 'require_approval',
      rule: { rule: { id: 'trifecta-external' } },
      chain_trifecta: { detected: true },
    });
    expect(run({ args: { tool: 'read_inbox', ...quiet, pii_access: true }, policies, context }).decision).toBe('allow');
  });

  it('passes NEAR_LIMIT and cost calibration to the rules', () => {
    const base = { args: { tool: 'summarise', ...quiet }, policies: [{}] as Policy[] };
    expect(run({ ...base, context: { near_limit: true } }).rule).toMatchObject({ rule: { id: 'near-limit' } });
    expect(run({ ...base, context: { cost_calibration: true } }).rule).toMatchObject({ rule: { id: 'cost-calibration' } });
  });

  it('in a non-strict tenant, an unrestricted DR waits for a human: any undeclared tool is in its reach', () => {
    const lax = { ...settings, strict: false };
    const result = run({ settings: lax, args: { tool: 'summarise', ...quiet }, policies: [{}, { allowed_tools: ['summarise'] }] });
    expect(result.violations).toEqual([
      expect.objectContaining({ code: 'GRANT_PENDING_APPROVAL', dr_index: 0, message: expect.stringContaining('any undeclared tool') }),
    ]);
    expect(run({ settings: lax, args: { tool: 'summarise', ...quiet }, policies: [{ allowed_tools: ['summarise'] }] }).decision).toBe(
      'allow',
    );
  });

  it("lists what stands in the chain's way now, each with a remediation, and denies", () => {
    const ok = { time: 'valid', nbf: 0, exp: null, revoked: false, calls: null, spend: null } as const;
    const standing = {
      now: 10,
      root_trusted: false,
      delegations: [
        { ...ok, calls: { used: 3, max: 3 }, spend: { reserved: asMicros(900_000), max: asMicros(1_000_000) } },
        { ...ok, time: 'RECEIPT_EXPIRED', exp: 5, revoked: true, calls: { used: 2, max: 3 } },
      ],
    } as const;
    const args = { tool: 'summarise', estimated_cost_usd: 0.2, ...quiet };
    const policies: Policy[] = [{ allowed_tools: ['summarise'] }, { allowed_tools: ['summarise'] }];
    const result = run({ args, policies, context: { standing } });
    expect(result.decision).toBe('deny');
    expect(result.violations.map((v) => `${v.code}@${v.dr_index}`)).toEqual([
      'UNTRUSTED_ROOT@0',
      'CALLS_EXHAUSTED@0',
      'BUDGET_EXHAUSTED@0',
      'RECEIPT_EXPIRED@1',
      'RECEIPT_REVOKED@1',
    ]);
    for (const v of result.violations) expect(v.remediation).not.toBe(ERROR_TABLE[v.code].suggestion);
    // The same standing without a tool document, and a call that fits the budget: only the rest.
    const fits = explain({ args: { ...args, estimated_cost_usd: 0.1 }, policies, tools: null, context: { standing } });
    expect(fits.violations.map((v) => v.code)).toEqual(['UNTRUSTED_ROOT', 'CALLS_EXHAUSTED', 'RECEIPT_EXPIRED', 'RECEIPT_REVOKED']);
    expect(run({ args, policies, context: { standing: { now: 10, root_trusted: true, delegations: [ok, ok] } } }).decision).toBe('allow');
  });

  it('tells a strict tenant to declare the tool, and a look-alike to use the exact name', () => {
    const undeclared = run({ args: { tool: 'shell', ...quiet }, policies: [{}] });
    expect(undeclared.violations[0]).toMatchObject({
      code: 'TOOL_UNDECLARED',
      remediation: 'declare the tool in the tenant tool catalog, or call a declared tool',
    });
    const lookalike = run({ args: { tool: 'Summarise', ...quiet }, policies: [{}] });
    expect(lookalike.violations[0]).toMatchObject({ code: 'TOOL_UNDECLARED', remediation: 'call "summarise" by its exact declared name' });
  });
});

describe('explain (properties)', () => {
  const names = [...catalog.tools.map((t) => t.name), 'undeclared_tool'];
  const policyArb: fc.Arbitrary<Policy> = fc
    .record(
      {
        allowed_tools: fc.oneof(fc.constant(['*']), fc.uniqueArray(fc.constantFrom(...names), { maxLength: 4 })),
        max_cost_usd: fc.constantFrom(0, 1, 5),
        pii_access: fc.boolean(),
        write_access: fc.boolean(),
      },
      { requiredKeys: [] },
    )
    .map((p) => p as Policy);
  const argsArb = fc.record(
    {
      tool: fc.constantFrom(...names),
      estimated_cost_usd: fc.oneof(fc.constantFrom(0, 0.5, 3), fc.constant('cheap')),
      pii_access: fc.oneof(fc.boolean(), fc.constant('no')),
      write_access: fc.boolean(),
    },
    { requiredKeys: [] },
  );
  const contextArb = fc.record({
    near_limit: fc.boolean(),
    cost_calibration: fc.boolean(),
    stored_grants: fc.array(fc.option(fc.constantFrom('pending', 'approved', 'rejected').map((status) => ({ ...held, status }))), {
      maxLength: 3,
    }),
  });
  const input = fc.record({
    args: argsArb,
    policies: fc.array(policyArb, { minLength: 1, maxLength: 3 }),
    context: contextArb,
    strict: fc.boolean(),
  });

  it('reports exactly what evaluateArgs reports for the args, every condition has a remediation, and the decision follows', () => {
    fc.assert(
      fc.property(input, ({ args, policies, context, strict }) => {
        const result = explain({ args, policies, tools: { catalog, settings: { ...settings, strict } }, context });
        const fromArgs = policies.flatMap((p, i) => evaluateArgs(p, args).map((v) => ({ ...v, dr_index: i })));
        expect(
          result.violations
            .filter((v) => v.field.startsWith('args.') && v.code === 'POLICY_VIOLATION')
            .map(({ remediation: _, ...v }) => v),
        ).toEqual(fromArgs);
        for (const v of result.violations) {
          expect(v.remediation.length).toBeGreaterThan(10);
          expect(v.remediation).not.toBe(ERROR_TABLE.INTERNAL.suggestion);
        }
        const blocking = result.violations.some((v) => v.code !== 'APPROVAL_REQUIRED');
        expect(result.decision).toBe(blocking ? 'deny' : result.rule.decision === 'require_approval' ? 'require_approval' : 'allow');
      }),
      { numRuns: 500 },
    );
  });

  it('without a tool document only the policies decide, as in verify: no requirement, hold or rule', () => {
    fc.assert(
      fc.property(input, ({ args, policies, context }) => {
        const result = explain({ args, policies, tools: null, context });
        const fromArgs = policies.flatMap((p, i) => evaluateArgs(p, args).map((v) => ({ ...v, dr_index: i })));
        expect(result.violations.map(({ remediation: _, ...v }) => v)).toEqual(fromArgs);
        expect(result.decision).toBe(fromArgs.length > 0 ? 'deny' : 'allow');
        expect(result.chain_trifecta.detected).toBe(false);
        expect(result.rule).toMatchObject({ decision: 'allow', source: 'default' });
      }),
      { numRuns: 300 },
    );
  });

  it('a write tool is never allowed without write_access in every DR, whatever the args say', () => {
    fc.assert(
      fc.property(input, fc.nat(2), ({ args, policies, context, strict }, drop) => {
        const without = policies.map((p, i) => (i === drop % policies.length ? { ...p, write_access: false } : p));
        const result = explain({
          args: { ...args, tool: 'wipe_workspace' },
          policies: without,
          tools: { catalog, settings: { ...settings, strict } },
          context,
        });
        expect(result.decision).toBe('deny');
        expect(result.violations).toContainEqual(
          expect.objectContaining({ field: 'policy.write_access', dr_index: drop % policies.length }),
        );
      }),
      { numRuns: 300 },
    );
  });
});
