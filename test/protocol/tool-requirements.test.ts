import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { Violation } from '../../src/protocol/errors.js';
import { argOf, evaluateArgs, type Policy } from '../../src/protocol/policy.js';
import { resolveTool, type Catalog } from '../../src/protocol/tool-catalog.js';
import { checkToolRequirements, estimateWithFloor, requirementsOf } from '../../src/protocol/tool-requirements.js';
import { tool } from '../support/tools.js';

const catalog: Catalog = {
  version: 7,
  tools: [
    tool('update_record', { type: 'write', blast_radius: 'domain', action_type: 'crm:update' }),
    tool('read_profile', { private_data_access: true }),
    tool('card_lookup', { tags: ['pci'] }),
    tool('vault_read', { tags: ['secrets'] }),
    tool('patient_notes', { tags: ['pii'] }),
    tool('summarise'),
    tool('paid_search', { cost_per_invocation_usd: 0.5 }),
    tool('tiny_fee', { cost_per_invocation_usd: 1e-7 }),
  ],
};

type Args = Record<string, unknown>;

/** Everything verify would report for the call: policy on args per DR, then the catalog's requirements. */
function verdict(args: Args, policies: readonly Policy[], strict = false): Violation[] {
  const fromArgs = policies.flatMap((p, i) => evaluateArgs(p, args).map((v) => ({ ...v, dr_index: i })));
  return [...fromArgs, ...checkToolRequirements(resolveTool(catalog, argOf(args, 'tool')), policies, { catalog, strict })];
}

function where(vs: readonly Violation[]): string[] {
  return vs.map((v) => `${v.code}@${v.dr_index ?? '-'}:${v.field}`);
}

describe('catalog-derived write and pii requirements: the args cannot talk their way around them', () => {
  const grantsAll: Policy = { write_access: true, pii_access: true };

  it.each([
    ['claims write_access false', { tool: 'update_record', write_access: false }],
    ['says nothing about write_access', { tool: 'update_record' }],
    ['sends a non-boolean', { tool: 'update_record', write_access: 'no' }],
  ])('a write tool needs write_access in every DR when the args %s', (_what, args) => {
    const vs = verdict(args, [grantsAll, { pii_access: true }, { write_access: false }]);
    const catalogPart = vs.filter((v) => v.field === 'policy.write_access');
    expect(where(catalogPart)).toEqual(['POLICY_VIOLATION@1:policy.write_access', 'POLICY_VIOLATION@2:policy.write_access']);
    expect(catalogPart[0]).toMatchObject({ required: true, actual: null });
    expect(catalogPart[1]).toMatchObject({ required: true, actual: false });
  });

  it('without the catalog, the same lie passes policy evaluation: the catalog check is what stops it', () => {
    const args = { tool: 'update_record', write_access: false, pii_access: false };
    expect(evaluateArgs({}, args)).toEqual([]);
    expect(where(verdict(args, [{}]))).toEqual(['POLICY_VIOLATION@0:policy.write_access']);
  });

  it('a write tool is allowed when every DR grants write_access', () => {
    expect(verdict({ tool: 'update_record', write_access: false, pii_access: false }, [grantsAll, { write_access: true }])).toEqual([]);
  });

  it.each(['read_profile', 'card_lookup', 'vault_read', 'patient_notes'])(
    '%s needs pii_access in every DR whatever the args say',
    (name) => {
      for (const piiArg of [false, undefined, 0, 'false']) {
        const args: Args = { tool: name, write_access: false, ...(piiArg === undefined ? {} : { pii_access: piiArg }) };
        const catalogPart = verdict(args, [{ pii_access: true }, {}]).filter((v) => v.field === 'policy.pii_access');
        expect(where(catalogPart)).toEqual(['POLICY_VIOLATION@1:policy.pii_access']);
      }
    },
  );

  it('names why pii_access is needed', () => {
    expect(requirementsOf(catalog.tools[1]!).pii_access_because).toEqual(['private_data_access']);
    expect(requirementsOf(tool('x', { private_data_access: true, tags: ['pii', 'secrets'] })).pii_access_because).toEqual([
      'private_data_access',
      'tag pii',
      'tag secrets',
    ]);
    const [v] = checkToolRequirements(resolveTool(catalog, 'card_lookup'), [{}], { catalog, strict: false });
    expect(v?.message).toContain('tag pci');
  });

  it('a plain read tool adds nothing', () => {
    expect(checkToolRequirements(resolveTool(catalog, 'summarise'), [{}, {}], { catalog, strict: true })).toEqual([]);
  });

  it('only the tool named by the args matters: no other arg changes the catalog requirements (property)', () => {
    const names = catalog.tools.map((t) => t.name);
    const junk = fc.oneof(fc.boolean(), fc.constant(null), fc.string(), fc.double(), fc.constant(undefined));
    fc.assert(
      fc.property(
        fc.constantFrom(...names),
        fc.dictionary(
          fc.constantFrom('write_access', 'pii_access', 'estimated_cost_usd', 'type', 'blast_radius', 'private_data_access', 'tags'),
          junk,
        ),
        fc.array(
          fc.record({ write_access: fc.option(fc.boolean(), { nil: undefined }), pii_access: fc.option(fc.boolean(), { nil: undefined }) }),
          {
            minLength: 1,
            maxLength: 4,
          },
        ),
        (name, extra, rawPolicies) => {
          const policies = rawPolicies.map((p) => Object.fromEntries(Object.entries(p).filter(([, v]) => v !== undefined)) as Policy);
          const fromCatalog = (args: Args) => verdict(args, policies, true).filter((v) => v.field.startsWith('policy.'));
          const expected = fromCatalog({ tool: name });
          expect(fromCatalog({ ...extra, tool: name })).toEqual(expected);
          // ...and it is exactly the grants the declaration calls for, DR by DR.
          const needs = requirementsOf(catalog.tools.find((t) => t.name === name)!);
          const missing = policies.flatMap((p, i) => [
            ...(needs.write_access && p.write_access !== true ? [`POLICY_VIOLATION@${i}:policy.write_access`] : []),
            ...(needs.pii_access_because.length > 0 && p.pii_access !== true ? [`POLICY_VIOLATION@${i}:policy.pii_access`] : []),
          ]);
          expect(where(expected)).toEqual(missing);
        },
      ),
    );
  });
});

describe('strict tenants and look-alike names', () => {
  it('a strict tenant denies an undeclared tool with TOOL_UNDECLARED, naming the catalog version', () => {
    const [v, ...rest] = checkToolRequirements(resolveTool(catalog, 'drop_tables'), [{ write_access: true }], { catalog, strict: true });
    expect(rest).toEqual([]);
    expect(v).toMatchObject({
      code: 'TOOL_UNDECLARED',
      field: 'args.tool',
      actual: 'drop_tables',
      required: 'a tool declared in catalog version 7',
    });
  });

  it.each([undefined, 42, ['update_record']])('a strict tenant denies a call whose args.tool is %j', (toolArg) => {
    expect(where(checkToolRequirements(resolveTool(catalog, toolArg), [{}], { catalog, strict: true }))).toEqual([
      'TOOL_UNDECLARED@-:args.tool',
    ]);
  });

  it('an inherited args.tool does not count as naming a tool', () => {
    const args = Object.assign(Object.create({ tool: 'summarise' }) as Args, { pii_access: false, write_access: false });
    expect(where(verdict(args, [{}], true))).toEqual(['TOOL_UNDECLARED@-:args.tool']);
  });

  it('a non-strict tenant adds no catalog condition for an undeclared tool', () => {
    expect(checkToolRequirements(resolveTool(catalog, 'drop_tables'), [{}], { catalog, strict: false })).toEqual([]);
  });

  it.each([false, true])('a look-alike of a declared tool is refused even when strict is %s', (strict) => {
    for (const alias of ['Update_Record', 'ＵＰＤＡＴＥ_ＲＥＣＯＲＤ']) {
      const [v] = checkToolRequirements(resolveTool(catalog, alias), [{ write_access: true }], { catalog, strict });
      expect(v).toMatchObject({ code: 'TOOL_UNDECLARED', actual: alias });
      expect(v?.message).toContain('"update_record"');
    }
  });
});

describe('declared cost per invocation is the floor of the estimate', () => {
  const paid = resolveTool(catalog, 'paid_search');

  it('raises a lower or missing estimate to the floor and keeps a higher one', () => {
    expect(estimateWithFloor(0.1, paid)).toEqual({ micros: 500_000, raised: true });
    expect(estimateWithFloor(undefined, paid)).toEqual({ micros: 500_000, raised: true });
    expect(estimateWithFloor('lots', paid)).toEqual({ micros: 500_000, raised: true });
    expect(estimateWithFloor(0.5, paid)).toEqual({ micros: 500_000, raised: false });
    expect(estimateWithFloor(2, paid)).toEqual({ micros: 2_000_000, raised: false });
  });

  it('leaves the estimate alone for tools without a declared cost', () => {
    expect(estimateWithFloor(0.1, resolveTool(catalog, 'summarise'))).toEqual({ micros: 100_000, raised: false });
    expect(estimateWithFloor(undefined, resolveTool(catalog, 'not_declared'))).toEqual({ micros: undefined, raised: false });
    expect(estimateWithFloor(-1, resolveTool(catalog, 'summarise'))).toEqual({ micros: undefined, raised: false });
  });

  it('rounds the floor up, so a sub-micro cost still counts', () => {
    expect(estimateWithFloor(0, resolveTool(catalog, 'tiny_fee'))).toEqual({ micros: 1, raised: true });
    expect(where(checkToolRequirements(resolveTool(catalog, 'tiny_fee'), [{ max_cost_usd: 0 }], { catalog, strict: false }))).toEqual([
      'POLICY_VIOLATION@0:policy.max_cost_usd',
    ]);
  });

  it('denies when the floor is above a max_cost_usd, even if the args declare less', () => {
    const policies: Policy[] = [{ max_cost_usd: 10 }, { max_cost_usd: 0.5 }, { max_cost_usd: 0.4999999 }];
    const args = { tool: 'paid_search', estimated_cost_usd: 0.01, pii_access: false, write_access: false };
    const vs = verdict(args, policies);
    expect(where(vs)).toEqual(['POLICY_VIOLATION@2:policy.max_cost_usd']);
    expect(vs[0]).toMatchObject({ required: 'at least 0.5', actual: 0.4999999 });
  });
});
