/**
 * Cost calibration as a rule condition, on real PostgreSQL: a delegation is
 * flagged once the metered cost of the invocations through it runs above the
 * tenant's ratio over its declared estimates, over enough metered calls. A
 * rule `when: {cost_calibration: true}` then fires for chains through it and
 * for no other; verify (inside the statement) and explain agree.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createSubDelegation, makeBundle } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import { buildChain, T0, TOOL_SERVER, type TestChain } from '../support/fixtures.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { tool } from '../support/tools.js';

let svc: TestService;
let tenant: TestTenant;

const POLICY: Policy = { allowed_tools: ['gpu_render'], max_cost_usd: 5, max_calls: 1000 };
const ESTIMATE = 0.1;
const ARGS = { tool: 'gpu_render', estimated_cost_usd: ESTIMATE, pii_access: false, write_access: false };

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  const published = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
    key: svc.adminKey,
    json: {
      base_version: 0,
      strict: true,
      tools: [tool('gpu_render', { action_type: 'gpu:render' })],
      rules: [{ id: 'calibrate', when: { cost_calibration: true }, decision: 'require_approval' }],
      default_decision: 'allow',
      cost_calibration: { ratio_above: 1.5, min_metered_invocations: 2 },
    },
  });
  expect(published.status).toBe(201);
  expect(published.body.cost_calibration).toEqual({ ratio_above: 1.5, min_metered_invocations: 2 });
});
afterAll(async () => svc?.close());

const chain = (policies: Policy[] = [POLICY]) => buildChain(policies, { keys: [tenant.root, ...policies.map(() => generateKeyPair())] });

async function call(c: TestChain, estimate = ESTIMATE) {
  const { bundle, invocation } = c.invoke({ ...ARGS, estimated_cost_usd: estimate }, { iat: T0 });
  const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
  return { r, jti: invocation.payload.jti };
}

/** Calls allowed through the chain, each metered at `factor` times its estimate. */
async function meter(c: TestChain, n: number, factor: number) {
  for (let i = 0; i < n; i++) {
    const { r, jti } = await call(c);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const actual = await svc.call('POST', `/v1/invocations/${jti}/actuals`, {
      key: tenant.keys.report,
      json: { cost_usd: ESTIMATE * factor, tokens_in: 1, tokens_out: 1, source: 'api-usage' },
    });
    expect(actual.status, JSON.stringify(actual.body)).toBe(201);
  }
}

async function explained(c: TestChain) {
  const r = await svc.call('POST', '/v1/explain', {
    key: tenant.keys.verify,
    json: { dr_chain: c.drs.map((d) => d.hash), args: ARGS },
  });
  expect(r.status).toBe(200);
  return r.body.decision as string;
}

describe('cost_calibration', () => {
  it('fires only for chains through a delegation whose metered cost runs above the ratio over enough calls', async () => {
    const over = chain();
    const within = chain();
    const few = chain();
    await meter(over, 2, 2); // 2x over 2 metered calls: flagged
    await meter(within, 3, 1.4); // 1.4x: under the ratio
    await meter(few, 1, 5); // 5x, but a single metered call

    const flagged = (await call(over)).r;
    expect(flagged.status).toBe(403);
    expect(flagged.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(flagged.body.approval).toMatchObject({ status: 'pending', rule: 'calibrate' });
    expect(await explained(over)).toBe('require_approval');

    for (const c of [within, few]) {
      expect((await call(c)).r.status).toBe(200);
      expect(await explained(c)).toBe('allow');
    }
  });

  it('a delegation granted under a flagged one is flagged too: the flag covers every chain through it', async () => {
    const parent = chain();
    await meter(parent, 2, 2); // the parent's own calls, 2x over 2 metered calls: flagged
    const holder = parent.keys[1]!;
    const childKey = generateKeyPair();
    const child = createSubDelegation({
      parent: parent.drs[0]!,
      issuer: holder,
      audience: childKey.did,
      policy: POLICY,
      iat: T0,
      nbf: T0 - 100,
      exp: T0 + 3600,
    });
    // Nothing was ever metered through the child itself.
    const drs = [parent.drs[0]!, child];
    const invocation = createInvocation({ chain: drs, invoker: childKey, args: ARGS, toolServer: TOOL_SERVER, iat: T0 });
    const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(invocation, drs) });
    expect(r.status, JSON.stringify(r.body)).toBe(403);
    expect(r.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(r.body.approval).toMatchObject({ status: 'pending', rule: 'calibrate' });
    const explainedChild = await svc.call('POST', '/v1/explain', {
      key: tenant.keys.verify,
      json: { dr_chain: drs.map((d) => d.hash), args: ARGS },
    });
    expect(explainedChild.body.decision).toBe('require_approval');
  });

  it('the flag is read per request, never remembered: raising the ratio allows a flagged chain at once', async () => {
    const c = chain();
    await meter(c, 2, 2);
    expect((await call(c)).r.body.error?.code).toBe('APPROVAL_REQUIRED'); // the statement found it flagged
    const current = await svc.call('GET', '/v1/tools', { key: tenant.keys.audit });
    const republished = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
      key: svc.adminKey,
      json: {
        base_version: current.body.version,
        strict: true,
        tools: [tool('gpu_render', { action_type: 'gpu:render' })],
        rules: [{ id: 'calibrate', when: { cost_calibration: true }, decision: 'require_approval' }],
        default_decision: 'allow',
        cost_calibration: { ratio_above: 10, min_metered_invocations: 2 },
      },
    });
    expect(republished.status, JSON.stringify(republished.body)).toBe(201);
    const again = (await call(c)).r;
    expect(again.status, JSON.stringify(again.body)).toBe(200);
  });
});
