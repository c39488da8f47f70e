/**
 * The longest lists a policy may hold, down the deepest chain: every check stays linear in what was
 * signed. Compared pairwise (each entry with each other, parsing both every time), 16 records of 256
 * nested prefixes held the service's one thread for 12 s on a keyless submission and 80 s on a
 * verify (an outside probe), every other request waiting. The timeout below is a bound on that
 * hang, not a speed measurement (bench/ measures speed): the work here takes well under a second.
 */
import { describe, expect, it } from 'vitest';
import {
  checkAttenuation,
  effectiveLimits,
  evaluateArgs,
  MAX_LIST_ITEMS,
  MAX_POLICY_DEPTH,
  parsePolicy,
} from '../../src/protocol/policy.js';

/** Hop k (from 1) lists 255 sibling prefixes and one, `z/*`, that the next hop's entries all sit under. */
function nestedLists(depth: number): { allowed_resources: string[] }[] {
  return Array.from({ length: depth }, (_, k) => {
    const base = `mcp://h/${'z/'.repeat(k)}`;
    return { allowed_resources: [...Array.from({ length: MAX_LIST_ITEMS - 1 }, (_, i) => `${base}a${i}/*`), `${base}z/*`] };
  });
}

/** Lets the test's timer fire between steps, as it cannot while one step holds the thread. */
const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('allow-lists at their longest, down the deepest chain', () => {
  it('attenuation, effective limits and a call are decided without holding the thread', async () => {
    const policies = [parsePolicy({}), ...nestedLists(MAX_POLICY_DEPTH - 1).map((p) => parsePolicy(p))];
    for (let k = 1; k < policies.length; k++) {
      expect(checkAttenuation(policies[k - 1]!, policies[k]!)).toEqual([]);
      await turn();
    }
    // Every earlier list covers the leaf's entries, and none of those covers another.
    expect(effectiveLimits(policies).allowed_resources).toEqual(policies.at(-1)!.allowed_resources);
    await turn();
    const deep = `mcp://h/${'z/'.repeat(MAX_POLICY_DEPTH - 1)}x`;
    const call = { tool: 'read', pii_access: false, write_access: false, resource_uri: deep };
    for (const policy of policies) expect(evaluateArgs(policy, call)).toEqual([]);
    await turn();
    // And the same lists still refuse what they do not cover: a sibling of the leaf's `z/*`, and a widened child.
    const beside = `mcp://h/${'z/'.repeat(MAX_POLICY_DEPTH - 2)}b/x`;
    expect(evaluateArgs(policies.at(-1)!, { ...call, resource_uri: beside })).toHaveLength(1);
    const widened = parsePolicy({ allowed_resources: [...policies.at(-1)!.allowed_resources!.slice(1), 'mcp://h/*'] });
    expect(checkAttenuation(policies.at(-1)!, widened)).toHaveLength(1);
  }, 20_000);
});
