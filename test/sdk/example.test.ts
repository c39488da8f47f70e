/** The SDK usage example (README-sized), run as written against the real service, imported as the package. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLiveService, type LiveService } from './live-service.js';

let live: LiveService;
beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => {
  await live?.close();
});

describe('SDK example', () => {
  it('agent A delegates to sub-agent B, B invokes, the tool server verifies and reports', async () => {
    const BATON_URL = live.baseUrl;
    const operator = live.tenant.root; // a root key the tenant trusts
    const { verify: VERIFY_KEY, report: REPORT_KEY } = live.tenant.keys;

    // ---- the example ----
    const { BatonClient, generateKeyPair, createRootDelegation, createSubDelegation, createInvocation, makeBundle } = await import('baton');
    const agentA = generateKeyPair(),
      agentB = generateKeyPair();
    const root = createRootDelegation({
      issuer: operator,
      audience: agentA.did,
      policy: { allowed_tools: ['search', 'fetch'], max_calls: 100, max_cost_usd: 1 },
    });
    const sub = createSubDelegation({
      parent: root,
      issuer: agentA,
      audience: agentB.did,
      policy: { allowed_tools: ['search'], max_calls: 10, max_cost_usd: 0.1 },
    }); // throws POLICY_ESCALATION if wider
    await new BatonClient({ baseUrl: BATON_URL }).submit([root, sub]); // signatures are the proof: no key needed
    const args = { tool: 'search', query: 'weather', estimated_cost_usd: 0.02, pii_access: false, write_access: false };
    const call = createInvocation({ chain: [root, sub], invoker: agentB, args, toolServer: 'mcp://search' });
    const bundle = makeBundle(call, [root, sub], 'reference'); // B sends this with the tool call

    // tool server:
    const baton = new BatonClient({ baseUrl: BATON_URL, apiKey: VERIFY_KEY, timeoutMs: 2000 });
    const decision = await baton.verify(bundle, { body: args, requireBinding: true }); // a deny is returned, not thrown
    if (!decision.valid) throw new Error(`${decision.error.code}: ${decision.error.suggestion}`);
    await baton.reportActual(decision.invocation_id, { cost_usd: 0.015, source: 'api-usage' }, { apiKey: REPORT_KEY });
    // ---- end ----

    expect(decision.counters.map((c) => c.calls_used)).toEqual([1, 1]);
    const audit = new BatonClient({ baseUrl: BATON_URL, apiKey: live.tenant.keys.audit });
    expect((await audit.getDelegation(root.hash)).usage).toMatchObject({ declared_usd: 0.02, metered_usd: 0.015 });
  });
});
