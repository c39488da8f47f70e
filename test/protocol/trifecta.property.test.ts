/**
 * Lethal trifecta detection over random catalogs and allow-lists drawn from a
 * small vocabulary, so that declared, undeclared and repeated names, and
 * reaches with one, two or three flags, all occur. The oracle below computes
 * the flags of the reach on its own, from the declarations.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { RISK_FLAGS, TOOL_TYPES, type Catalog, type RiskFlag, type ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { describeTrifecta, detectTrifecta, type FlagSource } from '../../src/protocol/trifecta.js';
import { tool } from '../support/tools.js';

const NAMES = ['fetch_page', 'read_mail', 'send_mail', 'query_db', 'post_slack', 'summarise', 'run_shell'] as const;
const UNDECLARED = ['mystery', 'legacy_tool'] as const;

const declaration = (name: string): fc.Arbitrary<ToolDeclaration> =>
  fc
    .record({
      type: fc.constantFrom(...TOOL_TYPES),
      untrusted_content: fc.boolean(),
      private_data_access: fc.boolean(),
      external_communication: fc.boolean(),
      tags: fc.subarray(['pii', 'pci', 'secrets'] as const),
    })
    .map((fields) => tool(name, fields));

const catalogArb: fc.Arbitrary<Catalog> = fc
  .subarray([...NAMES])
  .chain((names) => fc.tuple(...names.map(declaration)))
  .map((tools) => ({ version: 1, tools }));

const allowedArb: fc.Arbitrary<string[] | undefined> = fc.oneof(
  { arbitrary: fc.constant(undefined), weight: 1 },
  { arbitrary: fc.constant<string[]>(['*']), weight: 1 },
  { arbitrary: fc.array(fc.constantFrom(...NAMES, ...UNDECLARED), { maxLength: 6 }), weight: 6 },
);

/** The oracle: each flag a declaration carries, written out from the catalog's documented meaning. */
function carries(t: ToolDeclaration, flag: RiskFlag): boolean {
  switch (flag) {
    case 'untrusted_content':
      return t.untrusted_content;
    case 'private_data_access':
      return t.private_data_access || t.tags.length > 0;
    case 'external_communication':
      return t.external_communication || t.type === 'external';
  }
}

function unionOfFlags(allowed: readonly string[] | undefined, catalog: Catalog, strict: boolean): Set<RiskFlag> {
  const unrestricted = allowed === undefined || (allowed.length === 1 && allowed[0] === '*');
  const union = new Set<RiskFlag>();
  if (unrestricted && !strict) return new Set(RISK_FLAGS); // any undeclared tool is in reach
  const names = unrestricted ? catalog.tools.map((t) => t.name) : allowed;
  for (const name of names) {
    const t = catalog.tools.find((d) => d.name === name);
    if (t === undefined) {
      if (!strict) RISK_FLAGS.forEach((f) => union.add(f));
      continue;
    }
    RISK_FLAGS.filter((f) => carries(t, f)).forEach((f) => union.add(f));
  }
  return union;
}

function sourceCarries(source: FlagSource, flag: RiskFlag, catalog: Catalog, strict: boolean): boolean {
  if (source.kind !== 'declared') return !strict;
  const t = catalog.tools.find((d) => d.name === source.tool);
  return t !== undefined && carries(t, flag);
}

describe('lethal trifecta detection (properties)', () => {
  it('detects a trifecta iff the union of the reach covers all three flags', () => {
    let detected = 0;
    let missed = 0;
    fc.assert(
      fc.property(catalogArb, allowedArb, fc.boolean(), (catalog, allowed, strict) => {
        const report = detectTrifecta(allowed, { catalog, strict });
        const expected = unionOfFlags(allowed, catalog, strict).size === 3;
        if (expected) detected++;
        else missed++;
        expect(report.detected).toBe(expected);
        for (const flag of RISK_FLAGS) {
          // Sources name exactly the contributors of each flag, and a flag is covered iff it has one.
          expect(report.sources[flag].every((s) => sourceCarries(s, flag, catalog, strict))).toBe(true);
          expect(report.sources[flag].length > 0).toBe(unionOfFlags(allowed, catalog, strict).has(flag));
        }
      }),
      { numRuns: 500 },
    );
    expect(detected).toBeGreaterThan(50);
    expect(missed).toBeGreaterThan(50);
  });

  it('adding tools to an allow-list never removes a detection', () => {
    fc.assert(
      fc.property(
        catalogArb,
        fc.array(fc.constantFrom(...NAMES, ...UNDECLARED), { maxLength: 5 }),
        fc.array(fc.constantFrom(...NAMES, ...UNDECLARED), { minLength: 1, maxLength: 3 }),
        fc.boolean(),
        (catalog, allowed, more, strict) => {
          const before = detectTrifecta(allowed, { catalog, strict }).detected;
          const after = detectTrifecta([...allowed, ...more], { catalog, strict }).detected;
          return !before || after;
        },
      ),
      { numRuns: 500 },
    );
  });

  it('adding declarations to the catalog never removes the detection of an unrestricted delegation', () => {
    fc.assert(
      fc.property(catalogArb, catalogArb, fc.constantFrom(undefined, ['*']), fc.boolean(), (small, extra, allowed, strict) => {
        const names = new Set(small.tools.map((t) => t.name));
        const bigger: Catalog = { version: 2, tools: [...small.tools, ...extra.tools.filter((t) => !names.has(t.name))] };
        return (
          !detectTrifecta(allowed, { catalog: small, strict }).detected || detectTrifecta(allowed, { catalog: bigger, strict }).detected
        );
      }),
      { numRuns: 300 },
    );
  });

  it('judges an unrestricted delegation over the whole catalog (strict) or as a trifecta (non-strict)', () => {
    fc.assert(
      fc.property(catalogArb, fc.constantFrom(undefined, ['*']), (catalog, unrestricted) => {
        const whole = detectTrifecta(
          catalog.tools.map((t) => t.name),
          { catalog, strict: true },
        );
        const strict = detectTrifecta(unrestricted, { catalog, strict: true });
        expect(strict.reach).toBe('unrestricted');
        expect(strict.detected).toBe(whole.detected);
        expect(strict.sources).toEqual(whole.sources);
        const lax = detectTrifecta(unrestricted, { catalog, strict: false });
        expect(lax.detected).toBe(true);
        for (const flag of RISK_FLAGS) expect(lax.sources[flag]).toContainEqual({ kind: 'any_undeclared' });
      }),
      { numRuns: 300 },
    );
  });
});

describe('lethal trifecta detection (examples)', () => {
  const catalog: Catalog = {
    version: 1,
    tools: [
      tool('fetch_page', { untrusted_content: true }),
      tool('read_mail', { private_data_access: true, untrusted_content: true }),
      tool('send_mail', { type: 'external' }),
      tool('lookup_customer', { tags: ['pii'] }),
      tool('summarise'),
    ],
  };

  it('names the contributors of each flag', () => {
    const report = detectTrifecta(['fetch_page', 'lookup_customer', 'send_mail', 'summarise'], { catalog, strict: true });
    expect(report.detected).toBe(true);
    expect(report.sources).toEqual({
      untrusted_content: [{ kind: 'declared', tool: 'fetch_page' }],
      private_data_access: [{ kind: 'declared', tool: 'lookup_customer' }],
      external_communication: [{ kind: 'declared', tool: 'send_mail' }],
    });
    expect(describeTrifecta(report)).toBe(
      'untrusted content from "fetch_page"; private data from "lookup_customer"; external communication from "send_mail"',
    );
  });

  it('two of three is not a trifecta', () => {
    expect(detectTrifecta(['fetch_page', 'read_mail', 'summarise'], { catalog, strict: true }).detected).toBe(false);
  });

  it('an undeclared tool counts as every flag in a non-strict tenant and as nothing in a strict one', () => {
    const lax = detectTrifecta(['summarise', 'mystery'], { catalog, strict: false });
    expect(lax.detected).toBe(true);
    expect(lax.sources.external_communication).toEqual([{ kind: 'undeclared', tool: 'mystery' }]);
    expect(detectTrifecta(['summarise', 'mystery'], { catalog, strict: true }).detected).toBe(false);
  });
});
