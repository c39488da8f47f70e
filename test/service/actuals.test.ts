/**
 * POST /v1/invocations/{jti}/actuals on real PostgreSQL: provenance rules,
 * idempotency and 409, reserved spend, usage rollups against hand-computed
 * sums, the calibration flag, and max_spend_usd enforced through /v1/verify.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { count, eq } from 'drizzle-orm';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import { actuals, serviceReceipts } from '../../src/store/schema/index.js';
import { verifyServiceReceipt } from '../../src/service/signer.js';
import { setupTenant, startTestService, type CallResult, type TestService, type TestTenant } from '../support/service.js';
import { T0, TOOL_SERVER } from '../support/fixtures.js';
import { tool } from '../support/tools.js';

let svc: TestService;
let tenant: TestTenant;

const base: Policy = { allowed_tools: ['web_search'], max_cost_usd: 10 };

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

interface Chain {
  readonly drs: SignedDelegation[];
  readonly holders: KeyPair[]; // holders[i] = aud of drs[i]
  /** The tenant it is stored in, whose verify key calls through it. */
  readonly on: TestTenant;
}

/** A stored chain with one policy per DR, root first. */
async function chainWith(policies: Policy[], on: TestTenant = tenant): Promise<Chain> {
  const holders = policies.map(() => generateKeyPair());
  const drs: SignedDelegation[] = [];
  policies.forEach((policy, i) => {
    drs.push(
      i === 0
        ? createRootDelegation({ issuer: on.root, audience: holders[0]!.did, policy, iat: T0, nbf: T0 - 100, exp: T0 + 3600 })
        : createSubDelegation({ parent: drs[i - 1]!, issuer: holders[i - 1]!, audience: holders[i]!.did, policy, iat: T0 }),
    );
  });
  const r = await svc.call('POST', '/v1/delegations', { json: { receipts: drs.map((d) => d.jws) } });
  if (r.status !== 201) throw new Error(`submit: ${r.status} ${JSON.stringify(r.body)}`);
  return { drs, holders, on };
}

/** A sub-DR of chain.drs[at] for a new holder, stored. */
async function branch(chain: Chain, at: number, policy: Policy): Promise<Chain> {
  const holder = generateKeyPair();
  const dr = createSubDelegation({ parent: chain.drs[at]!, issuer: chain.holders[at]!, audience: holder.did, policy, iat: T0 });
  const r = await svc.call('POST', '/v1/delegations', { json: { receipt: dr.jws } });
  if (r.status !== 201) throw new Error(`branch: ${r.status} ${JSON.stringify(r.body)}`);
  return { drs: [...chain.drs.slice(0, at + 1), dr], holders: [...chain.holders.slice(0, at + 1), holder], on: chain.on };
}

let seq = 0;
/** Verifies an invocation through the first `depth` DRs of the chain. */
async function verify(
  chain: Chain,
  estimate: number,
  opts: { depth?: number; tool?: string; key?: string } = {},
): Promise<{ jti: string; res: CallResult }> {
  const depth = opts.depth ?? chain.drs.length;
  const drs = chain.drs.slice(0, depth);
  const jti = `inv:actuals-${++seq}`;
  const invocation = createInvocation({
    chain: drs,
    invoker: chain.holders[depth - 1]!,
    args: { tool: opts.tool ?? 'web_search', estimated_cost_usd: estimate, pii_access: false, write_access: false },
    toolServer: TOOL_SERVER,
    iat: T0,
    jti,
  });
  const res = await svc.call('POST', '/v1/verify', { key: opts.key ?? chain.on.keys.verify, json: makeBundle(invocation, drs) });
  return { jti, res };
}

async function allowed(chain: Chain, estimate: number, depth?: number): Promise<string> {
  const { jti, res } = await verify(chain, estimate, depth === undefined ? {} : { depth });
  if (res.status !== 200) throw new Error(`verify: ${res.status} ${JSON.stringify(res.body)}`);
  return jti;
}

const report = (jti: string, json: unknown, key = tenant.keys.report) => svc.call('POST', `/v1/invocations/${jti}/actuals`, { key, json });

async function usage(dr: SignedDelegation, on: TestTenant = tenant) {
  const r = await svc.call('GET', `/v1/delegations/${dr.hash}`, { key: on.keys.audit });
  expect(r.status).toBe(200);
  return r.body.usage;
}

async function stored(): Promise<[number, number]> {
  const [a] = await svc.store.db.select({ n: count() }).from(actuals);
  const [r] = await svc.store.db.select({ n: count() }).from(serviceReceipts).where(eq(serviceReceipts.kind, 'actual.recorded'));
  return [a!.n, r!.n];
}

const usd = (micros: number) => micros / 1_000_000;

describe('provenance and input rules', () => {
  let jti: string;
  beforeAll(async () => {
    jti = await allowed(await chainWith([base]), 0.5);
  });

  it('refuses an actual without a source: 400, and the message says provenance is required', async () => {
    const before = await stored();
    const r = await report(jti, { cost_usd: 0.3 });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('INVALID_REQUEST');
    expect(r.body.error.message).toContain('source');
    expect(r.body.error.message).toContain('provenance');
    expect(await stored()).toEqual(before);
  });

  it('refuses every malformed body with 400, storing nothing', async () => {
    const before = await stored();
    const bodies: [unknown, string][] = [
      [{ cost_usd: 0.3, source: 'guess' }, 'source'],
      [{ cost_usd: 0.3, source: null }, 'source'],
      [{ source: 'harness-reported' }, 'cost_usd'],
      [{ source: 'api-usage', cost_usd: null }, 'cost_usd'],
      [{ source: 'manual-meter', cost_usd: -0.01 }, 'cost_usd'],
      [{ source: 'manual-meter', cost_usd: '0.3' }, 'cost_usd'],
      [{ source: 'harness-reported', cost_usd: 0.3, unavailable_reason: 'why' }, 'unavailable_reason'],
      [{ source: 'unavailable' }, 'unavailable_reason'],
      [{ source: 'unavailable', unavailable_reason: '   ' }, 'unavailable_reason'],
      [{ source: 'unavailable', unavailable_reason: '\u200b' }, 'unavailable_reason'],
      [{ source: 'unavailable', unavailable_reason: ' - ' }, 'unavailable_reason'],
      [{ source: 'unavailable', unavailable_reason: 'meter down', cost_usd: 0 }, 'cost_usd'],
      [{ source: 'unavailable', unavailable_reason: 'x'.repeat(501) }, 'unavailable_reason'],
      [{ source: 'api-usage', cost_usd: 0.3, tokens_in: -1 }, 'tokens_in'],
      [{ source: 'api-usage', cost_usd: 0.3, tokens_out: 1.5 }, 'tokens_out'],
      [{ source: 'api-usage', cost_usd: 0.3, tokens_in: 2 ** 53 }, 'tokens_in'],
      [{ source: 'api-usage', cost_usd: 0.3, extra: 1 }, 'extra'],
      [[], '(body)'],
    ];
    for (const [json, field] of bodies) {
      const r = await report(jti, json);
      expect(r.status, JSON.stringify(json).slice(0, 80)).toBe(400);
      expect(r.body.error.code).toBe('INVALID_REQUEST');
      expect(JSON.stringify(r.body.error.details ?? r.body.error.message), JSON.stringify(json).slice(0, 80)).toContain(field);
    }
    const unsafe = await report(jti, { source: 'api-usage', cost_usd: 0.3, tokens_in: 2 ** 53 });
    expect(JSON.stringify(unsafe.body.error)).toContain('at most 2^53 - 1');
    const huge = await report(jti, { source: 'api-usage', cost_usd: 1e10 });
    expect(huge.status).toBe(400);
    expect(huge.body.error.code).toBe('NUMBER_OUT_OF_RANGE');
    const notJson = await svc.call('POST', `/v1/invocations/${jti}/actuals`, {
      key: tenant.keys.report,
      body: '{"source":"api-usage","cost_usd":1e400}',
      headers: { 'content-type': 'application/json' },
    });
    expect(notJson.status).toBe(400);
    expect(await stored()).toEqual(before);
  });

  it('404 for an unknown jti, a denied-only jti and another tenant’s invocation; 403 for other scopes; 401 without a key', async () => {
    const before = await stored();
    const body = { source: 'api-usage', cost_usd: 0.1 };
    expect((await report('inv:never-seen', body)).status).toBe(404);

    const chain = await chainWith([base]);
    const denied = await verify(chain, 0.5, { tool: 'delete_db' });
    expect(denied.res.status).toBe(403);
    const d = await report(denied.jti, body);
    expect(d.status).toBe(404);
    expect(d.body.error.code).toBe('NOT_FOUND');

    const other = await setupTenant(svc, 'other-reporter');
    expect((await report(jti, body, other.keys.report)).status).toBe(404);

    for (const key of [tenant.keys.verify, tenant.keys.audit, tenant.keys.issue, svc.adminKey]) {
      const r = await report(jti, body, key);
      expect(r.status).toBe(403);
      expect(r.body.error.code).toBe('FORBIDDEN');
    }
    expect((await svc.call('POST', `/v1/invocations/${jti}/actuals`, { json: body })).status).toBe(401);
    expect(await stored()).toEqual(before);
  });

  it("a report-only key bound to a tool server reports only that server's calls: another server's key cannot settle them first", async () => {
    const bound = (toolServer: string) =>
      svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
        key: svc.adminKey,
        json: { scopes: ['report'], tool_server: toolServer, name: `reporter for ${toolServer}` },
      });
    const elsewhere = await bound('mcp://billing.example');
    expect(elsewhere.status, JSON.stringify(elsewhere.body)).toBe(201);
    const own = await bound(TOOL_SERVER);
    expect(own.status).toBe(201);
    const call = await allowed(await chainWith([base]), 0.5);
    const before = await stored();
    // Answered exactly as an unknown jti: the key learns nothing of which jtis exist elsewhere.
    const wrong = await report(call, { source: 'api-usage', cost_usd: 0 }, elsewhere.body.key as string);
    expect(wrong.status).toBe(404);
    expect(wrong.body.error.code).toBe('NOT_FOUND');
    expect(await stored()).toEqual(before);
    expect((await report(call, { source: 'api-usage', cost_usd: 0.4 }, own.body.key as string)).status).toBe(201);
  });
});

describe('recording an actual', () => {
  it('201 with the record, cost rounded up to the micro-dollar, and a signed service receipt; reserved spend swaps estimate for cost', async () => {
    const chain = await chainWith([
      { ...base, max_spend_usd: 100 },
      { ...base, max_spend_usd: 50 },
    ]);
    const jti = await allowed(chain, 0.5);
    expect((await usage(chain.drs[0]!)).spend_reserved_usd).toBe(0.5);

    const r = await report(jti, { cost_usd: 0.1234561, tokens_in: 1200, tokens_out: 340, source: 'api-usage' });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({
      jti,
      cost_usd: 0.123457,
      tokens_in: 1200,
      tokens_out: 340,
      source: 'api-usage',
      unavailable_reason: null,
      declared_usd: 0.5,
    });
    const keys = (await svc.call('GET', '/v1/keys')).body.keys.map((k: { kid: string; public_key: string }) => ({
      kid: k.kid,
      publicKey: Uint8Array.from(Buffer.from(k.public_key, 'base64url')),
    }));
    const check = verifyServiceReceipt(r.body.service_receipt.jws, keys);
    expect(check.valid).toBe(true);
    expect(check.payload).toMatchObject({ baton_receipt: 'actual.recorded', subject: jti, tenant: tenant.id });
    expect((check.payload as { data: Record<string, unknown> }).data).toMatchObject({
      source: 'api-usage',
      cost_micros: 123457,
      estimated_micros: 500000,
    });

    // Both budgeted DRs of the chain now reserve the metered cost instead of the estimate.
    for (const dr of chain.drs) expect((await usage(dr)).spend_reserved_usd).toBe(0.123457);
  });

  it('the same body again is 200 with the stored record and service receipt, even spelled differently; a different body is 409', async () => {
    const chain = await chainWith([{ ...base, max_spend_usd: 100 }]);
    const jti = await allowed(chain, 0.5);
    const first = await report(jti, { source: 'harness-reported', cost_usd: 0.2, tokens_in: 10 });
    expect(first.status).toBe(201);
    const before = await stored();

    const same = await report(jti, { source: 'harness-reported', cost_usd: 0.2, tokens_in: 10 });
    expect(same.status).toBe(200);
    expect(same.body).toEqual(first.body);
    // Key order, explicit nulls and the spelling of the amount do not change the normalized body.
    const respelled = await svc.call('POST', `/v1/invocations/${jti}/actuals`, {
      key: tenant.keys.report,
      body: '{"tokens_out":null,"tokens_in":10,"cost_usd":0.20000000,"source":"harness-reported"}',
      headers: { 'content-type': 'application/json' },
    });
    expect(respelled.status).toBe(200);
    expect(respelled.body.service_receipt.id).toBe(first.body.service_receipt.id);

    for (const json of [
      { source: 'harness-reported', cost_usd: 0.21, tokens_in: 10 },
      { source: 'harness-reported', cost_usd: 0.2 },
      { source: 'api-usage', cost_usd: 0.2, tokens_in: 10 },
      { source: 'unavailable', unavailable_reason: 'changed my mind' },
    ]) {
      const r = await report(jti, json);
      expect(r.status).toBe(409);
      expect(r.body.error.code).toBe('CONFLICT');
      expect(r.body.error.details.stored).toMatchObject({ cost_usd: 0.2, source: 'harness-reported' });
    }
    expect(await stored()).toEqual(before);
    expect((await usage(chain.drs[0]!)).spend_reserved_usd).toBe(0.2);
  });

  it('concurrent identical reports record one actual and adjust reserved spend once', async () => {
    const chain = await chainWith([{ ...base, max_spend_usd: 100 }]);
    const jti = await allowed(chain, 0.5);
    const results = await Promise.all(Array.from({ length: 6 }, () => report(jti, { source: 'manual-meter', cost_usd: 0.05 })));
    expect(results.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 200, 201]);
    expect(new Set(results.map((r) => r.body.service_receipt.id)).size).toBe(1);
    expect((await usage(chain.drs[0]!)).spend_reserved_usd).toBe(0.05);
  });

  it("'unavailable' needs a reason and no cost; metered spend is unchanged and the estimate stays reserved", async () => {
    const chain = await chainWith([{ ...base, max_spend_usd: 100 }]);
    const jti = await allowed(chain, 0.4);
    const r = await report(jti, { source: 'unavailable', unavailable_reason: '  provider returned no usage  ', tokens_in: 5 });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({
      cost_usd: null,
      source: 'unavailable',
      unavailable_reason: 'provider returned no usage',
      tokens_in: 5,
      tokens_out: null,
      declared_usd: 0.4,
    });
    const u = await usage(chain.drs[0]!);
    expect(u).toMatchObject({
      calls_used: 1,
      declared_usd: 0.4,
      metered_usd: 0,
      metered_invocations: 0,
      calibration: null,
      spend_reserved_usd: 0.4,
    });
  });

  it('an actual past the budget is still recorded (a metered cost is a fact), and the budget then denies', async () => {
    const chain = await chainWith([{ ...base, max_cost_usd: 1, max_spend_usd: 1 }]);
    const jti = await allowed(chain, 0.2);
    const r = await report(jti, { source: 'api-usage', cost_usd: 3 });
    expect(r.status).toBe(201);
    expect((await usage(chain.drs[0]!)).spend_reserved_usd).toBe(3);
    const next = await verify(chain, 0);
    expect(next.res.status).toBe(403);
    expect(next.res.body.error.code).toBe('BUDGET_EXHAUSTED');
  });
});

describe('usage rollups', () => {
  it('equal hand-computed sums over each DR subtree', async () => {
    // root -> mid -> leafA, and mid -> leafB; invocations through each level.
    const main = await chainWith([base, base, base]);
    const sibling = await branch(main, 1, base);
    const [root, mid, leafA] = main.drs as [SignedDelegation, SignedDelegation, SignedDelegation];
    const leafB = sibling.drs[2]!;

    // [depth or chain, estimate µ$, actual µ$ or null, source]
    const plan: { via: Chain; depth: number; est: number; cost: number | null }[] = [
      { via: main, depth: 3, est: 500_000, cost: 400_000 },
      { via: main, depth: 3, est: 250_000, cost: 300_000 },
      { via: main, depth: 3, est: 300_000, cost: null },
      { via: sibling, depth: 3, est: 100_000, cost: 150_000 },
      { via: sibling, depth: 3, est: 700_000, cost: null },
      { via: main, depth: 2, est: 200_000, cost: 50_000 },
      { via: main, depth: 1, est: 1_000_000, cost: 999_999 },
      { via: main, depth: 1, est: 0, cost: 10_000 },
    ];
    const done: { dr_chain: string[]; est: number; cost: number | null }[] = [];
    for (const p of plan) {
      const jti = await allowed(p.via, usd(p.est), p.depth);
      if (p.cost !== null) expect((await report(jti, { source: 'harness-reported', cost_usd: usd(p.cost) })).status).toBe(201);
      done.push({ dr_chain: p.via.drs.slice(0, p.depth).map((d) => d.hash), est: p.est, cost: p.cost });
    }

    for (const dr of [root, mid, leafA, leafB]) {
      const through = done.filter((d) => d.dr_chain.includes(dr.hash));
      const metered = through.filter((d) => d.cost !== null);
      const meteredMicros = metered.reduce((s, d) => s + d.cost!, 0);
      const declaredOfMetered = metered.reduce((s, d) => s + d.est, 0);
      const expected = {
        calls_used: through.length,
        max_calls: null,
        declared_usd: usd(through.reduce((s, d) => s + d.est, 0)),
        metered_usd: usd(meteredMicros),
        metered_invocations: metered.length,
        unmetered_invocations: through.length - metered.length,
        calibration: declaredOfMetered > 0 ? Math.round((meteredMicros / declaredOfMetered) * 1e4) / 1e4 : null,
      };
      expect(await usage(dr), dr === root ? 'root' : dr === mid ? 'mid' : dr === leafA ? 'leafA' : 'leafB').toMatchObject(expected);
    }
    // Spot-check the arithmetic by hand for the root: 8 calls.
    expect(await usage(root)).toMatchObject({
      calls_used: 8,
      declared_usd: 3.05,
      metered_usd: 1.909999,
      metered_invocations: 6,
      unmetered_invocations: 2,
    });
  });

  it('flags a DR whose metered spend runs above 1.2 times its estimates over at least 3 metered invocations (the default thresholds)', async () => {
    const over = await chainWith([base]);
    for (let i = 0; i < 3; i++) {
      const jti = await allowed(over, 0.1);
      expect((await report(jti, { source: 'api-usage', cost_usd: 0.2 })).status).toBe(201);
      const u = await usage(over.drs[0]!);
      expect(u.calibration).toBe(2);
      expect(u.calibration_flag).toBe(i < 2 ? null : 'metered_above_declared');
    }

    const under = await chainWith([base]);
    for (let i = 0; i < 4; i++) {
      const jti = await allowed(under, 0.5);
      expect((await report(jti, { source: 'api-usage', cost_usd: 0.25 })).status).toBe(201);
    }
    expect(await usage(under.drs[0]!)).toMatchObject({ metered_invocations: 4, calibration: 0.5, calibration_flag: null });
  });

  it('the flag weighs the sums, not a share of calls: one large overrun flags, every call a little over does not', async () => {
    const spiky = await chainWith([base]);
    for (const cost of [0.1, 0.1, 0.1, 2]) {
      const jti = await allowed(spiky, 0.1);
      expect((await report(jti, { source: 'api-usage', cost_usd: cost })).status).toBe(201);
    }
    expect(await usage(spiky.drs[0]!)).toMatchObject({ calibration: 5.75, calibration_flag: 'metered_above_declared' });

    // Every call 15% over its estimate: 1.15 times declared, under 1.2.
    const steady = await chainWith([base]);
    for (let i = 0; i < 4; i++) {
      const jti = await allowed(steady, 0.1);
      expect((await report(jti, { source: 'api-usage', cost_usd: 0.115 })).status).toBe(201);
    }
    expect(await usage(steady.drs[0]!)).toMatchObject({ calibration: 1.15, calibration_flag: null });
  });

  it("an 'unavailable' actual leaves the invocation unmetered and is counted as unavailable", async () => {
    const c = await chainWith([base]);
    const a = await allowed(c, 0.3);
    await allowed(c, 0.3);
    expect((await report(a, { source: 'unavailable', unavailable_reason: 'provider returned no usage' })).status).toBe(201);
    expect(await usage(c.drs[0]!)).toMatchObject({
      calls_used: 2,
      metered_invocations: 0,
      unmetered_invocations: 2,
      unavailable_invocations: 1,
    });
  });
});

/**
 * The usage view's calibration_flag is the tool gate's cost_calibration condition, with the tenant's
 * thresholds: what an auditor reads on GET /v1/delegations/{hash} predicts the next verify.
 */
describe('calibration_flag predicts the tool gate', () => {
  const SEARCH = tool('web_search', { action_type: 'web:search' });

  /** A tenant of its own with a tool document: the default rules (cost-calibration requires approval). */
  async function gatedTenant(name: string, costCalibration?: { ratio_above: number; min_metered_invocations: number }) {
    const t = await setupTenant(svc, name);
    const published = await svc.call('POST', `/v1/admin/tenants/${t.id}/tools`, {
      key: svc.adminKey,
      json: { base_version: 0, strict: true, tools: [SEARCH], ...(costCalibration ? { cost_calibration: costCalibration } : {}) },
    });
    expect(published.status, JSON.stringify(published.body)).toBe(201);
    return t;
  }

  /** A one-DR chain in `on` with one allowed call per cost, each estimated at `estimate` and metered at that cost. */
  async function metered(on: TestTenant, estimate: number, costs: number[]): Promise<Chain> {
    const c = await chainWith([base], on);
    for (const cost of costs) {
      const jti = await allowed(c, estimate);
      expect((await report(jti, { source: 'api-usage', cost_usd: cost }, on.keys.report)).status).toBe(201);
    }
    return c;
  }

  /** The next call through the chain: allowed, or held for a human by the cost-calibration rule. */
  async function next(c: Chain): Promise<'allowed' | 'cost-calibration'> {
    const { res } = await verify(c, 0.1);
    if (res.status === 200) return 'allowed';
    expect(res.status, JSON.stringify(res.body)).toBe(403);
    expect(res.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(res.body.approval).toMatchObject({ status: 'pending', rule: 'cost-calibration' });
    return 'cost-calibration';
  }

  let gated: TestTenant;
  beforeAll(async () => {
    gated = await gatedTenant('calibration-default');
  });

  it('every call a little over (1.15x, chain A): no flag, and the next verify is allowed', async () => {
    const a = await metered(gated, 0.1, [0.115, 0.115, 0.115]);
    expect(await usage(a.drs[0]!, gated)).toMatchObject({ metered_invocations: 3, calibration: 1.15, calibration_flag: null });
    expect(await next(a)).toBe('allowed');
  });

  it('one large overrun (1.0, 0.1, 0.1 against 0.1 each, chain B): flagged, and the next verify needs approval', async () => {
    const b = await metered(gated, 0.1, [1, 0.1, 0.1]);
    expect(await usage(b.drs[0]!, gated)).toMatchObject({
      metered_invocations: 3,
      calibration: 4,
      calibration_flag: 'metered_above_declared',
    });
    expect(await next(b)).toBe('cost-calibration');
  });

  it('exactly ratio_above times declared is not above it; below min_metered_invocations nothing is flagged', async () => {
    const atRatio = await metered(gated, 0.1, [0.12, 0.12, 0.12]);
    expect(await usage(atRatio.drs[0]!, gated)).toMatchObject({ calibration: 1.2, calibration_flag: null });
    expect(await next(atRatio)).toBe('allowed');

    const few = await metered(gated, 0.1, [1, 1]);
    expect(await usage(few.drs[0]!, gated)).toMatchObject({ metered_invocations: 2, calibration: 10, calibration_flag: null });
    expect(await next(few)).toBe('allowed');
  });

  it('metered cost against nothing declared: calibration null (no ratio), yet flagged as the gate flags it', async () => {
    const free = await metered(gated, 0, [0.01, 0.01, 0.01]);
    expect(await usage(free.drs[0]!, gated)).toMatchObject({
      declared_usd: 0,
      metered_usd: 0.03,
      metered_invocations: 3,
      calibration: null,
      calibration_flag: 'metered_above_declared',
    });
    expect(await next(free)).toBe('cost-calibration');
  });

  it("a delegation above the metered calls is flagged with them: the flag covers its subtree, as the gate's does", async () => {
    const parent = await chainWith([base, base], gated);
    for (const cost of [1, 0.1, 0.1]) {
      const jti = await allowed(parent, 0.1); // through both records
      expect((await report(jti, { source: 'api-usage', cost_usd: cost }, gated.keys.report)).status).toBe(201);
    }
    const sibling = await branch(parent, 0, base); // nothing metered through it, but its chain holds the root
    expect((await usage(parent.drs[0]!, gated)).calibration_flag).toBe('metered_above_declared');
    expect((await usage(sibling.drs[1]!, gated)).calibration_flag).toBeNull();
    expect(await next(sibling)).toBe('cost-calibration');
  });

  it("uses the tenant's cost_calibration setting, as the gate does", async () => {
    const eager = await gatedTenant('calibration-eager', { ratio_above: 1.5, min_metered_invocations: 2 });
    const two = await metered(eager, 0.1, [0.25, 0.1]); // 1.75x over 2 metered calls: enough here
    expect(await usage(two.drs[0]!, eager)).toMatchObject({
      metered_invocations: 2,
      calibration: 1.75,
      calibration_flag: 'metered_above_declared',
    });
    expect(await next(two)).toBe('cost-calibration');

    const lax = await gatedTenant('calibration-lax', { ratio_above: 2, min_metered_invocations: 3 });
    const steady = await metered(lax, 0.1, [0.15, 0.15, 0.15]); // 1.5x: flagged under the defaults, not under 2
    expect(await usage(steady.drs[0]!, lax)).toMatchObject({ calibration: 1.5, calibration_flag: null });
    expect(await next(steady)).toBe('allowed');
  });
});

describe('max_spend_usd through /v1/verify', () => {
  it('denies BUDGET_EXHAUSTED when metered plus pending estimates would pass it; an actual below its estimate frees room', async () => {
    const chain = await chainWith([{ ...base, max_cost_usd: 1, max_spend_usd: 1 }]);
    const first = await allowed(chain, 0.4);
    const second = await allowed(chain, 0.4);
    const third = await verify(chain, 0.4);
    expect(third.res.status).toBe(403);
    expect(third.res.body.error.code).toBe('BUDGET_EXHAUSTED');
    expect(third.res.body.violations[0]).toMatchObject({
      code: 'BUDGET_EXHAUSTED',
      dr_hash: chain.drs[0]!.hash,
      field: 'policy.max_spend_usd',
    });
    expect((await usage(chain.drs[0]!)).spend_reserved_usd).toBe(0.8);

    expect((await report(first, { source: 'api-usage', cost_usd: 0.1 })).status).toBe(201);
    expect((await usage(chain.drs[0]!)).spend_reserved_usd).toBe(0.5);
    await allowed(chain, 0.4); // 0.1 + 0.4 + 0.4 = 0.9 fits
    const over = await verify(chain, 0.4); // 1.3 does not
    expect(over.res.body.error.code).toBe('BUDGET_EXHAUSTED');

    // 'unavailable' keeps the estimate reserved: no room freed.
    expect((await report(second, { source: 'unavailable', unavailable_reason: 'no meter' })).status).toBe(201);
    expect((await verify(chain, 0.2)).res.body.error.code).toBe('BUDGET_EXHAUSTED');
    await allowed(chain, 0.1); // exactly 1.0 fits
    expect((await usage(chain.drs[0]!)).spend_reserved_usd).toBe(1);
  });

  it('a budget on a parent is shared by sibling sub-delegations', async () => {
    const parent = await chainWith([{ ...base, max_cost_usd: 1, max_spend_usd: 1 }]);
    const left = await branch(parent, 0, { ...base, max_cost_usd: 1, max_spend_usd: 1 });
    const right = await branch(parent, 0, { ...base, max_cost_usd: 1, max_spend_usd: 1 });
    const l1 = await allowed(left, 0.4);
    await allowed(right, 0.4);
    const denied = await verify(left, 0.4);
    expect(denied.res.body.error.code).toBe('BUDGET_EXHAUSTED');
    expect(denied.res.body.violations[0].dr_hash).toBe(parent.drs[0]!.hash);
    expect((await report(l1, { source: 'api-usage', cost_usd: 0 })).status).toBe(201);
    await allowed(right, 0.4); // 0 + 0.4 + 0.4
    expect((await usage(parent.drs[0]!)).spend_reserved_usd).toBe(0.8);
    expect((await usage(left.drs[1]!)).spend_reserved_usd).toBe(0);
    expect((await usage(right.drs[1]!)).spend_reserved_usd).toBe(0.8);
  });
});
