/**
 * baton_verify_decisions_total counts decisions: a dry run decides nothing (it counts no call,
 * records no denial, spends no approval), so none of its answers moves it, allow or deny, in
 * whichever block it refuses. baton_http_requests_total still shows the dry runs, by route.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import { TOOL_SERVER, T0 } from '../support/fixtures.js';
import { setupTenant, startTestService, storeTwoLeaves, type TestService, type TestTenant } from '../support/service.js';

let svc: TestService;
let tenant: TestTenant;
let seq = 0;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

/** Every sample of the decisions counter and of the dry-run route's request counter, as `labels → value`. */
async function scrape(): Promise<Map<string, number>> {
  const text = await (await svc.app.request('/metrics', { headers: { authorization: `Bearer ${svc.adminKey}` } })).text();
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^(baton_verify_decisions_total\{[^}]*\}|baton_http_requests_total\{[^}]*\}) (\S+)$/gm)) {
    out.set(m[1]!, Number(m[2]));
  }
  return out;
}

/** The samples that moved between two scrapes, with how much. */
function moved(before: Map<string, number>, after: Map<string, number>, family: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of after) if (k.startsWith(family) && v !== (before.get(k) ?? 0)) out[k] = v - (before.get(k) ?? 0);
  return out;
}

function verify(path: '/v1/verify' | '/v1/verify/dry-run', chain: SignedDelegation[], invoker: KeyPair, tool = 'web_search', jti?: string) {
  const invocation = createInvocation({
    chain,
    invoker,
    args: { tool, estimated_cost_usd: 0.25, pii_access: false, write_access: false },
    toolServer: TOOL_SERVER,
    iat: T0,
    jti: jti ?? `inv:dry-${++seq}`,
  });
  return svc.call('POST', path, { key: tenant.keys.verify, json: makeBundle(invocation, chain) });
}

describe('baton_verify_decisions_total and dry runs', () => {
  it('no dry-run answer is counted as a decision (allow, retry, deny in blocks A-F and G); real decisions are', async () => {
    const [A, B, C] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
    const { root, leafA } = await storeTwoLeaves(svc, tenant, { allowed_tools: ['web_search'], max_calls: 2 }, A, B, C);
    const chain = [root, leafA];

    const before = await scrape();
    const dry = [
      await verify('/v1/verify/dry-run', chain, B), // allow
      await verify('/v1/verify/dry-run', chain, B), // allow
      await verify('/v1/verify/dry-run', chain, B, 'delete_db'), // deny, block D
      await verify('/v1/verify/dry-run', chain, generateKeyPair()), // deny, block B (unverified claims)
    ];
    expect(dry.map((r) => r.status)).toEqual([200, 200, 403, 403]);
    const afterDry = await scrape();
    expect(moved(before, afterDry, 'baton_verify_decisions_total')).toEqual({});
    expect(moved(before, afterDry, 'baton_http_requests_total')).toMatchObject({
      'baton_http_requests_total{method="POST",route="/v1/verify/dry-run",status="200"}': 2,
      'baton_http_requests_total{method="POST",route="/v1/verify/dry-run",status="403"}': 2,
    });

    // Real decisions are counted: two allows use up max_calls, the third is CALLS_EXHAUSTED.
    const first = await verify('/v1/verify', chain, B, 'web_search', 'inv:dry-counted');
    const real = [first, await verify('/v1/verify', chain, B), await verify('/v1/verify', chain, B)];
    expect(real.map((r) => r.status)).toEqual([200, 200, 403]);
    const afterReal = await scrape();
    expect(moved(afterDry, afterReal, 'baton_verify_decisions_total')).toEqual({
      'baton_verify_decisions_total{outcome="allow",code="ALLOWED"}': 2,
      'baton_verify_decisions_total{outcome="deny",code="CALLS_EXHAUSTED"}': 1,
    });

    // Dry runs once the ceiling is reached (block G) and of an invocation already allowed (a retry): not counted.
    const late = [
      await verify('/v1/verify/dry-run', chain, B),
      await verify('/v1/verify/dry-run', chain, B),
      await verify('/v1/verify/dry-run', chain, B, 'web_search', 'inv:dry-counted'),
    ];
    expect(late.map((r) => [r.status, r.body.error?.code ?? r.body.retry])).toEqual([
      [403, 'CALLS_EXHAUSTED'],
      [403, 'CALLS_EXHAUSTED'],
      [200, true],
    ]);
    expect(moved(afterReal, await scrape(), 'baton_verify_decisions_total')).toEqual({});
  });

  it("the counter's help says dry runs are not counted", async () => {
    const text = await (await svc.app.request('/metrics', { headers: { authorization: `Bearer ${svc.adminKey}` } })).text();
    expect(text).toMatch(/^# HELP baton_verify_decisions_total .*dry run/m);
  });
});
