import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { BatonError } from '../../src/protocol/errors.js';
import { canonicalCatalog, catalogHash, parseCatalog, resolveTool, riskFlagsOf, type Catalog } from '../../src/protocol/tool-catalog.js';
import { tool } from '../support/tools.js';

function refusal(raw: unknown): BatonError {
  try {
    parseCatalog(raw);
  } catch (e) {
    if (e instanceof BatonError) return e;
    throw e;
  }
  throw new Error(`expected ${JSON.stringify(raw)} to be refused`);
}

function issueFields(raw: unknown): string[] {
  const e = refusal(raw);
  expect(e.code).toBe('INVALID_FIELD');
  return (e.details?.['issues'] as { field: string }[]).map((i) => i.field);
}

describe('tool catalog: strict parse', () => {
  it('accepts a full declaration and keeps every field', () => {
    const full = tool('crm_export', {
      type: 'external',
      blast_radius: 'organizational',
      untrusted_content: true,
      private_data_access: true,
      external_communication: true,
      tags: ['pii', 'secrets'],
      action_type: 'crm:export',
      rate_limit_per_minute: 30,
      cost_per_invocation_usd: 0.25,
    });
    expect(parseCatalog({ version: 3, tools: [full] })).toEqual({ version: 3, tools: [full] });
  });

  it('requires every risk field explicitly: a forgotten flag must not read as safe', () => {
    const { untrusted_content: _u, tags: _t, ...partial } = tool('search');
    expect(issueFields({ version: 1, tools: [partial] })).toEqual(['tools.0.untrusted_content', 'tools.0.tags']);
  });

  it('lists every issue of a bad document, unknown keys each on their own', () => {
    const fields = issueFields({
      version: 0,
      tools: [tool('*'), tool('web_*'), { ...tool('ok'), risky: true, also: 1 }, tool('x', { action_type: 'Docs:Read' }), tool('OK')],
      extra: 1,
    });
    expect(fields).toEqual(
      expect.arrayContaining([
        'version',
        'tools.0.name',
        'tools.1.name',
        'tools.2.risky',
        'tools.2.also',
        'tools.3.action_type',
        'tools.4.name',
        'extra',
      ]),
    );
  });

  it.each([
    ['the wildcard', '*'],
    ['a glob', 'fs_*'],
    ['an empty name', ''],
    ['a control character', 'rm\u0000'],
    ['a bidi override', 'safe\u202eetirw'],
    ['a zero-width space', 'web\u200bsearch'],
    ['a name longer than 256', 'a'.repeat(257)],
  ])('refuses %s as a tool name', (_what, name) => {
    expect(issueFields({ version: 1, tools: [tool(name)] })).toEqual(['tools.0.name']);
  });

  it.each([
    ['the same name twice', 'search', 'search'],
    ['names differing only in case', 'search', 'Search'],
    ['a full-width look-alike', 'search', 'ｓｅａｒｃｈ'],
    ['composed and decomposed forms', 'caf\u00e9', 'cafe\u0301'],
  ])('refuses %s', (_what, a, b) => {
    expect(issueFields({ version: 1, tools: [tool(a), tool(b)] })).toEqual(['tools.1.name']);
  });

  it.each([
    ['no colon', 'docsread'],
    ['a wildcard action', 'docs:*'],
    ['upper case', 'docs:Read'],
    ['three parts', 'a:b:c'],
    ['an empty part', 'docs:'],
    ['a part starting with a digit', '1docs:read'],
  ])('refuses an action type with %s', (_what, actionType) => {
    expect(issueFields({ version: 1, tools: [tool('t', { action_type: actionType })] })).toEqual(['tools.0.action_type']);
  });

  it.each([0, -1, 1.5, 1e7, Number.NaN])('refuses rate_limit_per_minute %s', (rate) => {
    expect(issueFields({ version: 1, tools: [tool('t', { rate_limit_per_minute: rate })] })).toEqual(['tools.0.rate_limit_per_minute']);
  });

  it.each([-0.01, Number.NaN, Number.POSITIVE_INFINITY, 1e9 + 1])('refuses cost_per_invocation_usd %s', (cost) => {
    expect(issueFields({ version: 1, tools: [tool('t', { cost_per_invocation_usd: cost })] })).toEqual(['tools.0.cost_per_invocation_usd']);
  });

  it('refuses unknown or repeated tags, and unknown types and radii', () => {
    const bad = [
      { ...tool('a'), tags: ['pii', 'pii'] },
      { ...tool('b'), tags: ['medical'] },
      { ...tool('c'), type: 'admin' },
      { ...tool('d'), blast_radius: 'global' },
    ];
    expect(issueFields({ version: 1, tools: bad })).toEqual(['tools.0.tags', 'tools.1.tags.0', 'tools.2.type', 'tools.3.blast_radius']);
  });
});

describe('tool catalog: canonical form and hash', () => {
  const a = tool('alpha', { tags: ['secrets', 'pii'], cost_per_invocation_usd: 0.1 });
  const b = tool('beta', { type: 'write', rate_limit_per_minute: 5 });
  const c = tool('Zeta');

  it('sorts tools by name and tags, and keeps optional fields only when set', () => {
    const canon = canonicalCatalog({ version: 2, tools: [b, c, a] });
    expect(canon.tools.map((t) => t.name)).toEqual(['Zeta', 'alpha', 'beta']);
    expect(canon.tools[1]!.tags).toEqual(['pii', 'secrets']);
    expect(Object.keys(canon.tools[0]!)).not.toContain('cost_per_invocation_usd');
  });

  it('hashes any ordering of the same declarations the same', () => {
    const tools = [a, b, c];
    const expected = catalogHash({ version: 2, tools });
    expect(expected).toMatch(/^sha256:[0-9a-f]{64}$/);
    fc.assert(
      fc.property(
        fc.shuffledSubarray(tools, { minLength: 3, maxLength: 3 }),
        fc.shuffledSubarray(['pii', 'secrets'] as const, { minLength: 2, maxLength: 2 }),
        (order, tagOrder) => {
          const shuffled = order.map((t) => (t.name === 'alpha' ? { ...t, tags: tagOrder } : t));
          return catalogHash({ version: 2, tools: shuffled }) === expected;
        },
      ),
    );
  });

  it('changes the hash when any field or the version changes', () => {
    const base: Catalog = { version: 2, tools: [a, b] };
    const variants: Catalog[] = [
      { version: 3, tools: [a, b] },
      { version: 2, tools: [a] },
      { version: 2, tools: [a, { ...b, type: 'read' }] },
      { version: 2, tools: [a, { ...b, external_communication: true }] },
      { version: 2, tools: [{ ...a, tags: ['pii'] }, b] },
      { version: 2, tools: [{ ...a, cost_per_invocation_usd: 0.11 }, b] },
      { version: 2, tools: [a, { ...b, rate_limit_per_minute: 6 }] },
      { version: 2, tools: [a, { ...b, blast_radius: 'organizational' }] },
    ];
    const hashes = new Set([base, ...variants].map(catalogHash));
    expect(hashes.size).toBe(variants.length + 1);
  });
});

describe('tool catalog: risk flags and lookup', () => {
  it('implies external_communication for external tools and private data for any sensitivity tag', () => {
    expect([...riskFlagsOf(tool('t'))]).toEqual([]);
    expect([...riskFlagsOf(tool('t', { type: 'external' }))]).toEqual(['external_communication']);
    for (const tag of ['pii', 'pci', 'secrets'] as const) {
      expect([...riskFlagsOf(tool('t', { tags: [tag] }))]).toEqual(['private_data_access']);
    }
    expect([...riskFlagsOf(tool('t', { untrusted_content: true, private_data_access: true, external_communication: true }))]).toEqual([
      'untrusted_content',
      'private_data_access',
      'external_communication',
    ]);
  });

  it('resolves exact names, look-alikes of declared tools, and everything else as undeclared', () => {
    const catalog: Catalog = { version: 1, tools: [tool('search'), tool('caf\u00e9')] };
    expect(resolveTool(catalog, 'search')).toEqual({ kind: 'declared', tool: catalog.tools[0] });
    expect(resolveTool(catalog, 'SEARCH')).toEqual({ kind: 'confusable', name: 'SEARCH', declared: catalog.tools[0] });
    expect(resolveTool(catalog, 'cafe\u0301')).toMatchObject({ kind: 'confusable', declared: { name: 'caf\u00e9' } });
    // A server that trims or strips invisible characters would run the declared tool: refused as its look-alike.
    expect(resolveTool({ version: 1, tools: [tool('stra\u00dfe')] }, 'STRASSE')).toMatchObject({ kind: 'confusable' });
    for (const padded of ['search ', ' search', 'sea\u00adrch', 'sea\u200brch', 'sea\u034frch', 'search\t', 'sea\u200drch']) {
      expect(resolveTool(catalog, padded), JSON.stringify(padded)).toMatchObject({ kind: 'confusable', declared: catalog.tools[0] });
    }
    expect(resolveTool(catalog, 'delete_db')).toEqual({ kind: 'undeclared', name: 'delete_db' });
    expect(resolveTool(catalog, 42)).toEqual({ kind: 'undeclared' });
    expect(resolveTool(catalog, undefined)).toEqual({ kind: 'undeclared' });
  });
});
