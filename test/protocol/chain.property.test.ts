/**
 * Properties of whole-chain verification:
 * - it never allows what any DR in the chain denies (conjunction), and does
 *   allow when every DR permits and every hop narrows (no spurious denies);
 * - reordering, dropping or re-signing any record is denied.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { verifyChain } from '../../src/protocol/chain.js';
import { checkAttenuation, evaluateArgs, type Policy } from '../../src/protocol/policy.js';
import { signJws } from '../../src/protocol/jws.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, makeBundle } from '../../src/sdk/records.js';
import { buildChain, ARGS, T0 } from '../support/fixtures.js';

const TOOLS = ['web_search', 'file_read', 'delete_db'];

const policyArb: fc.Arbitrary<Policy> = fc.record(
  {
    allowed_tools: fc.oneof(fc.constant<string[]>(['*']), fc.subarray(TOOLS, { minLength: 1 })),
    max_cost_usd: fc.constantFrom<number>(1, 5, 10),
    pii_access: fc.boolean(),
    write_access: fc.boolean(),
    max_calls: fc.constantFrom<number>(1, 10, 100),
  },
  { requiredKeys: [] },
);

const argsArb = fc.record(
  {
    tool: fc.constantFrom(...TOOLS),
    estimated_cost_usd: fc.constantFrom(0, 0.5, 3, 7, 12),
    pii_access: fc.boolean(),
    write_access: fc.boolean(),
  },
  { requiredKeys: ['tool'] },
);

describe('verifyChain properties', () => {
  it('allows exactly when every hop narrows and every DR permits the args', () => {
    let allowed = 0;
    fc.assert(
      fc.property(fc.array(policyArb, { minLength: 1, maxLength: 4 }), argsArb, (policies, args) => {
        const chain = buildChain(policies);
        const decision = verifyChain(chain.invoke(args).bundle, { now: T0 + 1, trustedRoots: [chain.keys[0]!.did] });
        const everyDrPermits = policies.every((p) => evaluateArgs(p, args).length === 0);
        const everyHopNarrows = policies.every((p, i) => i === 0 || checkAttenuation(policies[i - 1]!, p).length === 0);
        if (decision.valid) allowed++;
        expect(decision.valid).toBe(everyDrPermits && everyHopNarrows);
      }),
      { numRuns: 300 },
    );
    // The property is only meaningful if allows actually occur.
    expect(allowed).toBeGreaterThan(5);
  });

  it('denies any reordering, dropping or re-signing of a record', () => {
    const policies: Policy[] = [
      { allowed_tools: ['*'], max_cost_usd: 10 },
      { allowed_tools: ['web_search'], max_cost_usd: 5 },
      { allowed_tools: ['web_search'], max_cost_usd: 1 },
    ];
    const chain = buildChain(policies);
    const { bundle, invocation } = chain.invoke();
    const root = chain.keys[0]!.did;
    expect(verifyChain(bundle, { now: T0 + 1, trustedRoots: [root] }).valid).toBe(true);

    const mutation = fc.oneof(
      fc.record({ kind: fc.constant('swap' as const), i: fc.nat(2), j: fc.nat(2) }).filter((m) => m.i !== m.j),
      fc.record({ kind: fc.constant('drop' as const), i: fc.nat(2), resignInvocation: fc.boolean() }),
      fc.record({ kind: fc.constant('resign-other-key' as const), i: fc.nat(2) }),
      fc.record({ kind: fc.constant('resign-widened' as const), i: fc.nat(2) }),
      fc.record({ kind: fc.constant('resign-invocation-other-key' as const) }),
    );
    fc.assert(
      fc.property(mutation, (m) => {
        const receipts = [...bundle.receipts];
        let inv = bundle.invocation;
        switch (m.kind) {
          case 'swap':
            [receipts[m.i], receipts[m.j]] = [receipts[m.j]!, receipts[m.i]!];
            break;
          case 'drop': {
            receipts.splice(m.i, 1);
            if (m.resignInvocation) {
              const kept = chain.drs.filter((_, k) => k !== m.i);
              inv = createInvocation({ chain: kept, invoker: chain.invoker, args: ARGS, toolServer: 't', iat: T0 }).jws;
            }
            break;
          }
          case 'resign-other-key':
            receipts[m.i] = signJws(chain.drs[m.i]!.payload, generateKeyPair().seed);
            break;
          case 'resign-widened': {
            const dr = chain.drs[m.i]!;
            receipts[m.i] = signJws({ ...dr.payload, policy: { ...dr.payload.policy, max_cost_usd: 1000 } }, chain.keys[m.i]!.seed);
            break;
          }
          case 'resign-invocation-other-key':
            inv = signJws(invocation.payload, generateKeyPair().seed);
            break;
        }
        const decision = verifyChain({ ...bundle, invocation: inv, receipts }, { now: T0 + 1, trustedRoots: [root] });
        expect(decision.valid).toBe(false);
      }),
      { numRuns: 200 },
    );
    receiptsUnchanged(
      bundle.receipts,
      chain.drs.map((d) => d.jws),
    );
  });

  it('the same bundle by value and by reference gets the same verdict', () => {
    fc.assert(
      fc.property(fc.array(policyArb, { minLength: 1, maxLength: 3 }), argsArb, (policies, args) => {
        const chain = buildChain(policies);
        const { invocation } = chain.invoke(args);
        const store = new Map(chain.drs.map((d) => [d.hash as string, d.jws]));
        const opts = { now: T0 + 1, trustedRoots: [chain.keys[0]!.did], resolveDelegation: (h: string) => store.get(h) };
        const byValue = verifyChain(makeBundle(invocation, chain.drs), opts);
        const byRef = verifyChain(makeBundle(invocation, chain.drs, 'reference'), opts);
        expect(byRef.valid).toBe(byValue.valid);
      }),
      { numRuns: 100 },
    );
  });
});

function receiptsUnchanged(a: readonly string[], b: readonly string[]): void {
  expect(a).toEqual(b);
}
