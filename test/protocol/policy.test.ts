import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { BatonError, type Violation } from '../../src/protocol/errors.js';
import { MAX_INVOCATION_USD, MAX_USD } from '../../src/protocol/money.js';
import { PolicySchema, checkAttenuation, effectiveLimits, evaluateArgs, parsePolicy, type Policy } from '../../src/protocol/policy.js';

interface AttenuationVector {
  id: string;
  parent: unknown;
  child: unknown;
  expected_keyword?: string;
}

function loadVectors(name: 'pass' | 'fail'): AttenuationVector[] {
  const url = new URL(`../vectors/drs-conformance/policy/${name}.json`, import.meta.url);
  const suite = JSON.parse(readFileSync(url, 'utf8')) as { vectors: AttenuationVector[] };
  return suite.vectors;
}

function fields(violations: readonly Violation[]): string[] {
  return violations.map((v) => v.field);
}

function parseError(raw: unknown): BatonError {
  try {
    parsePolicy(raw);
  } catch (e) {
    if (e instanceof BatonError) return e;
    throw e;
  }
  throw new Error(`expected ${JSON.stringify(raw)} to be refused`);
}

describe('DRS conformance: policy attenuation vectors', () => {
  const pass = loadVectors('pass');
  const fail = loadVectors('fail');

  it('has the vectors', () => {
    expect(pass.length).toBeGreaterThanOrEqual(8);
    expect(fail.length).toBeGreaterThanOrEqual(10);
  });

  it.each(pass.map((v) => [v.id, v] as const))('%s passes', (_id, v) => {
    expect(checkAttenuation(parsePolicy(v.parent), parsePolicy(v.child))).toEqual([]);
  });

  it.each(fail.map((v) => [v.id, v] as const))('%s fails on its keyword', (_id, v) => {
    const violations = checkAttenuation(parsePolicy(v.parent), parsePolicy(v.child));
    expect(violations.length).toBeGreaterThanOrEqual(1);
    expect(violations.every((x) => x.code === 'POLICY_ESCALATION')).toBe(true);
    expect(violations.some((x) => x.field.includes(v.expected_keyword ?? '\u0000'))).toBe(true);
  });
});

describe('DRS full-chain fixture args', () => {
  const url = new URL('../vectors/drs-conformance/receipts/full-chain-bundle.json', import.meta.url);
  const fixture = JSON.parse(readFileSync(url, 'utf8')) as { bundle: { invocation: string; receipts: string[] } };
  const payload = (jws: string): Record<string, unknown> => {
    const part = jws.split('.')[1] ?? '';
    return JSON.parse(Buffer.from(part, 'base64url').toString('utf8')) as Record<string, unknown>;
  };

  it('denies the fixture, naming exactly pii_access and write_access, for every DR', () => {
    const args = payload(fixture.bundle.invocation).args as Record<string, unknown>;
    expect(args).toMatchObject({ tool: 'web_search', estimated_cost_usd: 0.5 });
    const policies = fixture.bundle.receipts.map((r) => parsePolicy(payload(r).policy));
    expect(policies.length).toBeGreaterThan(0);
    for (const policy of policies) {
      const violations = evaluateArgs(policy, args);
      expect(fields(violations)).toEqual(['args.pii_access', 'args.write_access']);
      expect(violations.every((v) => v.code === 'POLICY_VIOLATION')).toBe(true);
    }
  });

  it('matches the literal policy from DESIGN', () => {
    const policy = parsePolicy({ allowed_tools: ['web_search', 'file_read'], max_cost_usd: 10, pii_access: false, write_access: false });
    const violations = evaluateArgs(policy, { tool: 'web_search', query: 'DRS specification', estimated_cost_usd: 0.5 });
    expect(fields(violations)).toEqual(['args.pii_access', 'args.write_access']);
    for (const v of violations) {
      expect(v.dr_index).toBeUndefined();
      expect(v.message).toMatch(/^[A-Za-z].*\.$/);
    }
    expect(evaluateArgs(policy, { tool: 'web_search', estimated_cost_usd: 0.5, pii_access: false, write_access: false })).toEqual([]);
  });
});

describe('attenuation of a policy changed in place', () => {
  it('judges the list as it is now, not as it was when first checked (checkAttenuation is public in the SDK)', () => {
    const parent = parsePolicy({ allowed_resources: ['mcp://h/a/*', 'mcp://h/admin/*'] });
    const child = parsePolicy({ allowed_resources: ['mcp://h/admin/x'] });
    expect(checkAttenuation(parent, child)).toEqual([]);
    parent.allowed_resources!.pop();
    expect(fields(checkAttenuation(parent, child))).toEqual(['policy.allowed_resources']);
    expect(evaluateArgs(parent, { tool: 't', pii_access: false, write_access: false, resource_uri: 'mcp://h/admin/x' })).toHaveLength(1);
  });
});

describe('PolicySchema / parsePolicy', () => {
  it('refuses an invisible character in a name saying what it is, in a sentence with one period', () => {
    for (const name of ['crm\u00adexport', 'crm\u200bexport']) {
      expect(parseError({ allowed_tools: [name] }).message).toBe(
        'The policy is not a valid DRS 4.0 policy: policy.allowed_tools.0: Names cannot contain control, format or invisible characters (such as a soft hyphen or a zero-width space).',
      );
    }
    expect(parseError({ allowed_tools: ['web_*'] }).message).toMatch(/globs are not supported\.$/);
  });

  it('accepts every field at its limits', () => {
    const full: Policy = {
      allowed_tools: ['web_search'],
      max_cost_usd: 1_000_000_000,
      pii_access: true,
      write_access: false,
      max_calls: Number.MAX_SAFE_INTEGER,
      allowed_resources: ['mcp://tools/a/*', 'mcp://tools/b'],
      allowed_data_classes: ['public'],
      max_spend_usd: 0,
      max_depth: 16,
    };
    expect(parsePolicy(full)).toEqual(full);
    expect(parsePolicy({})).toEqual({});
    expect(parsePolicy({ allowed_tools: [] })).toEqual({ allowed_tools: [] });
    expect(parsePolicy({ allowed_tools: ['*'], allowed_resources: ['*'], allowed_data_classes: ['*'] })).toBeTruthy();
    expect(PolicySchema.safeParse({ max_cost_usd: 0.000001 }).success).toBe(true);
  });

  it.each([
    [{ unknown_constraint: true }, 'policy'],
    [{ allowed_tool: ['x'] }, 'policy'],
    [JSON.parse('{"__proto__":{"pii_access":true}}'), 'policy'],
    [{ max_cost_usd: -1 }, 'policy.max_cost_usd'],
    [{ max_cost_usd: '10' }, 'policy.max_cost_usd'],
    [{ max_cost_usd: Number.POSITIVE_INFINITY }, 'policy.max_cost_usd'],
    [{ max_cost_usd: Number.NaN }, 'policy.max_cost_usd'],
    [{ max_cost_usd: 1_000_000_001 }, 'policy.max_cost_usd'],
    [{ max_spend_usd: -0.01 }, 'policy.max_spend_usd'],
    [{ max_calls: 1.5 }, 'policy.max_calls'],
    [{ max_calls: -1 }, 'policy.max_calls'],
    [{ max_calls: 2 ** 53 }, 'policy.max_calls'],
    [{ max_depth: 17 }, 'policy.max_depth'],
    [{ max_depth: -1 }, 'policy.max_depth'],
    [{ pii_access: 'false' }, 'policy.pii_access'],
    [{ write_access: 0 }, 'policy.write_access'],
    [{ allowed_tools: 'web_search' }, 'policy.allowed_tools'],
    [{ allowed_tools: [''] }, 'policy.allowed_tools.0'],
    [{ allowed_tools: ['x'.repeat(257)] }, 'policy.allowed_tools.0'],
    [{ allowed_tools: ['web_*'] }, 'policy.allowed_tools.0'],
    [{ allowed_tools: ['a\nb'] }, 'policy.allowed_tools.0'],
    [{ allowed_tools: ['*', 'web_search'] }, 'policy.allowed_tools'],
    [{ allowed_tools: Array.from({ length: 257 }, (_, i) => `t${i}`) }, 'policy.allowed_tools'],
    [{ allowed_resources: ['mcp://tools/a/../admin'] }, 'policy.allowed_resources.0'],
    [{ allowed_resources: ['tools/a'] }, 'policy.allowed_resources.0'],
    [{ allowed_resources: ['mcp://tools/a*'] }, 'policy.allowed_resources.0'],
    [{ allowed_resources: ['mcp://*'] }, 'policy.allowed_resources.0'],
    [{ allowed_data_classes: [1] }, 'policy.allowed_data_classes.0'],
    [{ allowed_data_classes: ['*', 'public'] }, 'policy.allowed_data_classes'],
    [null, 'policy'],
    [[], 'policy'],
    ['{}', 'policy'],
  ])('refuses %j at %s', (raw, path) => {
    const e = parseError(raw);
    expect(e.code).toBe('INVALID_FIELD');
    const issues = (e.details?.issues ?? []) as { path: string }[];
    expect(issues.map((i) => i.path)).toContain(path);
    expect(e.message).toMatch(/^The policy is not a valid DRS 4\.0 policy: .*\.$/);
  });

  it('names the field it was given', () => {
    const e = (() => {
      try {
        parsePolicy({ max_depth: 99 }, 'receipts[1].policy');
      } catch (err) {
        return err as BatonError;
      }
      throw new Error('not refused');
    })();
    expect(e.details).toMatchObject({ field: 'receipts[1].policy' });
    expect((e.details?.issues as { path: string }[])[0]?.path).toBe('receipts[1].policy.max_depth');
  });

  it('lists every issue, not only the first', () => {
    const e = parseError({ max_depth: 99, max_calls: -1, extra: 1 });
    expect((e.details?.issues as unknown[]).length).toBe(3);
  });
});

describe('checkAttenuation', () => {
  const att = (parent: unknown, child: unknown): Violation[] => checkAttenuation(parsePolicy(parent), parsePolicy(child));

  it('lets an unrestricted or absent parent list be anything', () => {
    expect(att({}, { allowed_tools: ['*'] })).toEqual([]);
    expect(att({ allowed_tools: ['*'] }, {})).toEqual([]);
    expect(att({ allowed_tools: ['*'] }, { allowed_tools: ['*'] })).toEqual([]);
    expect(att({ allowed_resources: ['*'] }, { allowed_resources: ['mcp://x/*'] })).toEqual([]);
  });

  it('allows narrowing a list to empty (nothing allowed)', () => {
    expect(att({ allowed_tools: ['a'] }, { allowed_tools: [] })).toEqual([]);
  });

  it('reports the uncovered entries of a list', () => {
    const [v, ...rest] = att({ allowed_tools: ['web_search'] }, { allowed_tools: ['web_search', 'delete_db', 'drop'] });
    expect(rest).toEqual([]);
    expect(v).toMatchObject({
      code: 'POLICY_ESCALATION',
      field: 'policy.allowed_tools',
      required: ['web_search'],
      actual: ['delete_db', 'drop'],
    });
    expect(v?.message).toBe(
      'The child\'s allowed_tools grants ["delete_db","drop"], which the parent\'s allowed_tools ["web_search"] does not cover.',
    );
  });

  it('checks resources by pattern coverage', () => {
    expect(att({ allowed_resources: ['mcp://tools/a/*'] }, { allowed_resources: ['mcp://tools/a/x', 'mcp://tools/a/y/*'] })).toEqual([]);
    expect(fields(att({ allowed_resources: ['mcp://tools/a/*'] }, { allowed_resources: ['mcp://tools/a'] }))).toEqual([
      'policy.allowed_resources',
    ]);
    expect(fields(att({ allowed_resources: ['mcp://tools/a/*'] }, { allowed_resources: ['mcp://tools/ab/*'] }))).toEqual([
      'policy.allowed_resources',
    ]);
    expect(fields(att({ allowed_resources: ['mcp://tools/a'] }, { allowed_resources: ['*'] }))).toEqual(['policy.allowed_resources']);
    expect(fields(att({ allowed_resources: ['mcp://tools/a'] }, {}))).toEqual(['policy.allowed_resources']);
  });

  it('compares money ceilings exactly as the signed decimals, not after rounding to micros', () => {
    // Each child floors to the parent's micros, yet claims more than it: refused.
    for (const wider of [0.1 + 0.2, 0.3000001, 0.30000049, 0.300000999]) {
      expect(fields(att({ max_cost_usd: 0.3 }, { max_cost_usd: wider }))).toEqual(['policy.max_cost_usd']);
      expect(fields(att({ max_spend_usd: 0.3 }, { max_spend_usd: wider }))).toEqual(['policy.max_spend_usd']);
    }
    expect(fields(att({ max_cost_usd: 10 }, { max_cost_usd: 10.0000001 }))).toEqual(['policy.max_cost_usd']);
    expect(fields(att({ max_cost_usd: 10 }, { max_cost_usd: 10.000001 }))).toEqual(['policy.max_cost_usd']);
    expect(fields(att({ max_cost_usd: 0 }, { max_cost_usd: 5e-324 }))).toEqual(['policy.max_cost_usd']);
    expect(fields(att({ max_spend_usd: 1e-7 }, { max_spend_usd: 1.1e-7 }))).toEqual(['policy.max_spend_usd']);
    // Equal or narrower, in any notation, is accepted.
    expect(att({ max_cost_usd: 0.3 }, { max_cost_usd: 0.3 })).toEqual([]);
    expect(att({ max_cost_usd: 0.3 }, { max_cost_usd: 0.29999999 })).toEqual([]);
    expect(att({ max_cost_usd: 1e-6 }, { max_cost_usd: 9.99e-7 })).toEqual([]);
    expect(att({ max_cost_usd: 1e-7 }, { max_cost_usd: 5e-324 })).toEqual([]);
    expect(fields(att({ max_spend_usd: 5 }, { max_spend_usd: 6 }))).toEqual(['policy.max_spend_usd']);
    expect(fields(att({ max_spend_usd: 5 }, {}))).toEqual(['policy.max_spend_usd']);
    expect(att({ max_spend_usd: 5 }, { max_spend_usd: 0 })).toEqual([]);
  });

  it('requires max_depth to drop strictly', () => {
    expect(att({ max_depth: 3 }, { max_depth: 2 })).toEqual([]);
    expect(att({ max_depth: 3 }, { max_depth: 0 })).toEqual([]);
    expect(att({}, { max_depth: 16 })).toEqual([]);
    const same = att({ max_depth: 3 }, { max_depth: 3 });
    expect(same).toMatchObject([{ field: 'policy.max_depth', required: 2, actual: 3 }]);
    expect(fields(att({ max_depth: 3 }, {}))).toEqual(['policy.max_depth']);
    const none = att({ max_depth: 0 }, { max_depth: 0 });
    expect(fields(none)).toEqual(['policy.max_depth']);
    expect(none[0]?.message).toBe('The parent sets max_depth to 0, which allows no further delegation.');
    expect(fields(att({ max_depth: 0 }, {}))).toEqual(['policy.max_depth']);
  });

  it('treats absent pii/write in the parent as false', () => {
    expect(fields(att({}, { pii_access: true, write_access: true }))).toEqual(['policy.pii_access', 'policy.write_access']);
    expect(att({ pii_access: true }, { pii_access: true })).toEqual([]);
    expect(att({ pii_access: true }, {})).toEqual([]);
    expect(att({ write_access: true }, { write_access: false })).toEqual([]);
  });

  it('returns every violation at once', () => {
    const parent = {
      allowed_tools: ['a'],
      max_cost_usd: 1,
      max_calls: 5,
      allowed_resources: ['mcp://t/a/*'],
      allowed_data_classes: ['public'],
      max_spend_usd: 1,
      max_depth: 1,
    };
    const child = {
      allowed_tools: ['b'],
      max_cost_usd: 2,
      pii_access: true,
      write_access: true,
      max_calls: 6,
      allowed_resources: ['mcp://t/b'],
      allowed_data_classes: ['secret'],
      max_spend_usd: 2,
      max_depth: 1,
    };
    const violations = att(parent, child);
    expect(fields(violations).sort()).toEqual(
      [
        'allowed_data_classes',
        'allowed_resources',
        'allowed_tools',
        'max_calls',
        'max_cost_usd',
        'max_depth',
        'max_spend_usd',
        'pii_access',
        'write_access',
      ].map((f) => `policy.${f}`),
    );
    for (const v of violations) {
      expect(v.code).toBe('POLICY_ESCALATION');
      expect(v.message).toMatch(/^The (child|parent)\b.*\.$/);
      expect(v.dr_index).toBeUndefined();
      expect(v.dr_hash).toBeUndefined();
    }
    // Plain data: survives JSON.
    expect(JSON.parse(JSON.stringify(violations))).toEqual(violations);
  });
});

describe('evaluateArgs', () => {
  const ok = { pii_access: false, write_access: false };

  it('allows anything under an empty policy except declared pii/write', () => {
    expect(evaluateArgs({}, ok)).toEqual([]);
    expect(evaluateArgs({}, { ...ok, tool: 42, estimated_cost_usd: 'lots' })).toEqual([]); // unconstrained args are not checked
    expect(fields(evaluateArgs({}, {}))).toEqual(['args.pii_access', 'args.write_access']);
    expect(fields(evaluateArgs({}, { pii_access: true, write_access: true }))).toEqual(['args.pii_access', 'args.write_access']);
  });

  it('checks the tool', () => {
    const p = parsePolicy({ allowed_tools: ['web_search'] });
    expect(evaluateArgs(p, { ...ok, tool: 'web_search' })).toEqual([]);
    const [v] = evaluateArgs(p, { ...ok, tool: 'delete_db' });
    expect(v).toEqual({
      code: 'POLICY_VIOLATION',
      field: 'args.tool',
      required: ['web_search'],
      actual: 'delete_db',
      message: 'Tool "delete_db" is not in allowed_tools ["web_search"] of this delegation.',
    });
    expect(fields(evaluateArgs(p, ok))).toEqual(['args.tool']);
    expect(fields(evaluateArgs(p, { ...ok, tool: ['web_search'] }))).toEqual(['args.tool']);
    expect(fields(evaluateArgs(parsePolicy({ allowed_tools: [] }), { ...ok, tool: 'web_search' }))).toEqual(['args.tool']);
    expect(evaluateArgs(parsePolicy({ allowed_tools: ['*'] }), { ...ok, tool: 'anything' })).toEqual([]);
  });

  it('ignores inherited properties', () => {
    const p = parsePolicy({ allowed_tools: ['web_search'], pii_access: false });
    const inherited = Object.create({ tool: 'web_search', pii_access: false, write_access: false }) as Record<string, unknown>;
    expect(fields(evaluateArgs(p, inherited))).toEqual(['args.tool', 'args.pii_access', 'args.write_access']);
  });

  it('checks the estimated cost exactly', () => {
    const p = parsePolicy({ max_cost_usd: 0.3 });
    expect(evaluateArgs(p, { ...ok, estimated_cost_usd: 0.3 })).toEqual([]);
    expect(evaluateArgs(p, { ...ok, estimated_cost_usd: 0 })).toEqual([]);
    expect(evaluateArgs(p, { ...ok, estimated_cost_usd: -0 })).toEqual([]);
    // 0.1 + 0.2 is 0.30000000000000004: the estimate rounds up to 300001 micros.
    expect(fields(evaluateArgs(p, { ...ok, estimated_cost_usd: 0.1 + 0.2 }))).toEqual(['args.estimated_cost_usd']);
    expect(fields(evaluateArgs(p, { ...ok, estimated_cost_usd: 0.3000001 }))).toEqual(['args.estimated_cost_usd']);
    for (const bad of [undefined, null, '0.1', Number.NaN, Number.POSITIVE_INFINITY, -0.01, 1e10, true, [0.1]]) {
      const violations = evaluateArgs(p, { ...ok, estimated_cost_usd: bad });
      expect(fields(violations)).toEqual(['args.estimated_cost_usd']);
      expect(JSON.parse(JSON.stringify(violations))).toEqual(violations);
    }
    expect(evaluateArgs(parsePolicy({ max_cost_usd: 0 }), { ...ok, estimated_cost_usd: 1e-7 })).toHaveLength(1);
  });

  it('fails closed on the estimate under a max_spend_usd budget alone', () => {
    const budget = parsePolicy({ max_spend_usd: 0.05 });
    expect(evaluateArgs(budget, { ...ok, estimated_cost_usd: 0.01 })).toEqual([]);
    expect(evaluateArgs(budget, { ...ok, estimated_cost_usd: 0 })).toEqual([]);
    expect(evaluateArgs(budget, { ...ok, estimated_cost_usd: MAX_INVOCATION_USD })).toEqual([]); // the budget itself is block G's
    const unusable = [
      undefined,
      null,
      '0.01',
      '',
      Number.NaN,
      Number.NEGATIVE_INFINITY,
      -0.01,
      -1e-7,
      MAX_INVOCATION_USD * 1.0000001,
      1e9,
      false,
      {},
    ];
    for (const bad of unusable) {
      const violations = evaluateArgs(budget, { ...ok, estimated_cost_usd: bad });
      expect(violations).toMatchObject([{ code: 'POLICY_VIOLATION', field: 'args.estimated_cost_usd' }]);
      expect(violations[0]?.message).toContain('estimated_cost_usd');
    }
    const [missing] = evaluateArgs(budget, ok);
    expect(missing?.message).toContain('max_spend_usd budget of 0.05');
  });

  it('refuses an estimate above the per-invocation maximum even under a higher max_cost_usd', () => {
    const p = parsePolicy({ max_cost_usd: MAX_USD });
    expect(evaluateArgs(p, { ...ok, estimated_cost_usd: MAX_INVOCATION_USD })).toEqual([]);
    expect(fields(evaluateArgs(p, { ...ok, estimated_cost_usd: MAX_INVOCATION_USD + 0.01 }))).toEqual(['args.estimated_cost_usd']);
  });

  it('requires pii/write to be declared false unless granted', () => {
    const grantsPii = parsePolicy({ pii_access: true });
    expect(evaluateArgs(grantsPii, { write_access: false })).toEqual([]);
    expect(evaluateArgs(grantsPii, { pii_access: true, write_access: false })).toEqual([]);
    expect(evaluateArgs(grantsPii, { pii_access: false, write_access: false })).toEqual([]);
    expect(fields(evaluateArgs(grantsPii, { pii_access: 'yes', write_access: false }))).toEqual(['args.pii_access']);
    expect(fields(evaluateArgs(grantsPii, { pii_access: true }))).toEqual(['args.write_access']);
    expect(fields(evaluateArgs({}, { pii_access: 0, write_access: 'false' }))).toEqual(['args.pii_access', 'args.write_access']);
    const [v] = evaluateArgs({ write_access: true }, { pii_access: true, write_access: true });
    expect(v?.message).toBe('The invocation asks for PII access (args.pii_access is true), which this delegation does not grant.');
  });

  it('checks the resource URI, refusing traversal as a violation', () => {
    const p = parsePolicy({ allowed_resources: ['mcp://tools/a/*'] });
    expect(evaluateArgs(p, { ...ok, resource_uri: 'mcp://tools/a/x' })).toEqual([]);
    expect(evaluateArgs(p, { ...ok, resource_uri: 'MCP://TOOLS/a/x/y' })).toEqual([]);
    for (const bad of [
      undefined,
      7,
      'mcp://tools/a',
      'mcp://tools/ab',
      'mcp://tools/a/../admin',
      'mcp://tools/a/%2e%2e/admin',
      'not a uri',
    ]) {
      const violations = evaluateArgs(p, { ...ok, resource_uri: bad });
      expect(fields(violations)).toEqual(['args.resource_uri']);
      expect(violations[0]?.message).toMatch(/\.$/);
    }
    const [traversal] = evaluateArgs(p, { ...ok, resource_uri: 'mcp://tools/a/../admin' });
    expect(traversal?.message).toContain('dot segment');
  });

  it('checks the data class', () => {
    const p = parsePolicy({ allowed_data_classes: ['public', 'internal'] });
    expect(evaluateArgs(p, { ...ok, data_class: 'internal' })).toEqual([]);
    expect(fields(evaluateArgs(p, { ...ok, data_class: 'secret' }))).toEqual(['args.data_class']);
    expect(fields(evaluateArgs(p, ok))).toEqual(['args.data_class']);
    expect(fields(evaluateArgs(p, { ...ok, data_class: { name: 'public' } }))).toEqual(['args.data_class']);
  });

  it('returns every violation at once', () => {
    const p = parsePolicy({ allowed_tools: ['a'], max_cost_usd: 1, allowed_resources: ['mcp://t/*'], allowed_data_classes: ['public'] });
    expect(fields(evaluateArgs(p, {}))).toEqual([
      'args.tool',
      'args.estimated_cost_usd',
      'args.pii_access',
      'args.write_access',
      'args.resource_uri',
      'args.data_class',
    ]);
  });

  it('clips huge values it echoes', () => {
    const huge = 'x'.repeat(100_000);
    const [v] = evaluateArgs(parsePolicy({ allowed_tools: ['a'] }), { ...ok, tool: huge });
    expect(String(v?.actual).length).toBeLessThan(300);
    expect((v?.message ?? '').length).toBeLessThan(300);
    expect(v?.message).toMatch(/^Tool "x+…" is not in allowed_tools \["a"\] of this delegation\.$/);
  });
});

describe('effectiveLimits', () => {
  it('has fail-closed defaults', () => {
    expect(effectiveLimits([])).toEqual({ pii_access: false, write_access: false });
    expect(effectiveLimits([{}])).toEqual({ pii_access: false, write_access: false });
  });

  it('takes the tightest of each', () => {
    const chain = [
      {
        allowed_tools: ['a', 'b', 'c'],
        max_cost_usd: 10,
        pii_access: true,
        write_access: true,
        max_calls: 100,
        max_spend_usd: 50,
        max_depth: 5,
        allowed_data_classes: ['*'],
      },
      {
        allowed_tools: ['*'],
        max_cost_usd: 5.0000009,
        pii_access: true,
        write_access: false,
        max_calls: 10,
        max_depth: 4,
        allowed_resources: ['mcp://t/*'],
      },
      {
        allowed_tools: ['c', 'b'],
        max_cost_usd: 7,
        pii_access: true,
        max_calls: 20,
        max_spend_usd: 60,
        max_depth: 1,
        allowed_resources: ['mcp://t/a/*', 'mcp://u/x'],
        allowed_data_classes: ['public'],
      },
    ].map((p) => parsePolicy(p));
    expect(effectiveLimits(chain)).toEqual({
      allowed_tools: ['b', 'c'],
      max_cost_usd: 5,
      pii_access: true,
      write_access: false,
      max_calls: 10,
      max_spend_usd: 50,
      max_depth: 1,
      allowed_resources: ['mcp://t/a/*'],
      allowed_data_classes: ['public'],
    });
  });

  it('counts max_depth down the chain', () => {
    expect(effectiveLimits([{ max_depth: 5 }, {}, {}]).max_depth).toBe(3);
    expect(effectiveLimits([{ max_depth: 1 }, {}, {}]).max_depth).toBe(0);
  });

  it('keeps an empty intersection as "nothing allowed"', () => {
    expect(effectiveLimits([{ allowed_tools: ['a'] }, { allowed_tools: ['b'] }]).allowed_tools).toEqual([]);
    expect(effectiveLimits([{ allowed_resources: ['mcp://t/a/*'] }, { allowed_resources: ['mcp://t/a'] }]).allowed_resources).toEqual([]);
  });
});
