/**
 * Money limits through the real app on real PostgreSQL:
 * - max_spend_usd fails closed: without a usable estimate nothing is allowed or counted;
 * - an 'unavailable' actual keeps the declared estimate reserved;
 * - per-invocation maximum of estimates and actuals (deny / 400, storing nothing);
 * - audit reads answer 200 whatever the history (sums and the spend counter saturate),
 *   and a budget at its limit still denies, with the denial recorded.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, count, eq, inArray, sql } from 'drizzle-orm';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import { MAX_EXACT_MICROS, MAX_INVOCATION_MICROS, MAX_INVOCATION_USD, MAX_MICROS, MAX_USD } from '../../src/protocol/money.js';
import { actuals, delegations, denials, invocations } from '../../src/store/schema/index.js';
import { setupTenant, startTestService, type CallResult, type TestService, type TestTenant } from '../support/service.js';
import { T0, TOOL_SERVER } from '../support/fixtures.js';

let svc: TestService;
let tenant: TestTenant;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

interface Root {
  readonly dr: SignedDelegation;
  readonly holder: KeyPair;
}

async function storedRoot(policy: Policy): Promise<Root> {
  const holder = generateKeyPair();
  const dr = createRootDelegation({ issuer: tenant.root, audience: holder.did, policy, iat: T0, nbf: T0 - 100, exp: T0 + 3600 });
  const r = await svc.call('POST', '/v1/delegations', { json: { receipt: dr.jws } });
  if (r.status !== 201) throw new Error(`submit: ${r.status} ${JSON.stringify(r.body)}`);
  return { dr, holder };
}

let seq = 0;
const NO_ESTIMATE = Symbol('no estimate');

async function verify(root: Root, estimate: unknown, opts: { dryRun?: boolean } = {}): Promise<{ jti: string; res: CallResult }> {
  const jti = `inv:money-${++seq}`;
  const args: Record<string, unknown> = { tool: 'web_search', pii_access: false, write_access: false };
  if (estimate !== NO_ESTIMATE) args['estimated_cost_usd'] = estimate;
  const invocation = createInvocation({ chain: [root.dr], invoker: root.holder, args, toolServer: TOOL_SERVER, iat: T0, jti });
  const json = makeBundle(invocation, [root.dr]);
  return { jti, res: await svc.call('POST', opts.dryRun ? '/v1/verify/dry-run' : '/v1/verify', { key: tenant.keys.verify, json }) };
}

async function allowed(root: Root, estimate: number): Promise<string> {
  const { jti, res } = await verify(root, estimate);
  if (res.status !== 200) throw new Error(`verify: ${res.status} ${JSON.stringify(res.body)}`);
  return jti;
}

const report = (jti: string, json: unknown) => svc.call('POST', `/v1/invocations/${jti}/actuals`, { key: tenant.keys.report, json });

async function detail(dr: SignedDelegation) {
  const r = await svc.call('GET', `/v1/delegations/${dr.hash}`, { key: tenant.keys.audit });
  expect(r.status).toBe(200);
  return r.body;
}

async function invocationsThrough(dr: SignedDelegation): Promise<number> {
  const [r] = await svc.store.db
    .select({ n: count() })
    .from(invocations)
    .where(sql`${invocations.drChain} @> array[${dr.hash}]::text[]`);
  return r!.n;
}

async function deniedCodes(jtis: readonly string[]): Promise<string[]> {
  const found = await svc.store.db
    .select({ code: denials.code })
    .from(denials)
    .where(and(eq(denials.tenantId, tenant.id), inArray(denials.jti, [...jtis])));
  return found.map((d) => d.code);
}

function expectEstimateDenied(res: CallResult): void {
  expect(res.status).toBe(403);
  expect(res.body.error).toMatchObject({ code: 'POLICY_VIOLATION', block: 'D' });
  expect(res.body.violations.map((v: { field: string }) => v.field)).toContain('args.estimated_cost_usd');
}

describe('max_spend_usd fails closed on the estimate', () => {
  it('twenty concurrent calls without an estimate under a 0.05 budget alone are all denied, and nothing is counted', async () => {
    const root = await storedRoot({ allowed_tools: ['web_search'], max_spend_usd: 0.05 });
    const results = await Promise.all(Array.from({ length: 20 }, () => verify(root, NO_ESTIMATE)));
    for (const { res } of results) expectEstimateDenied(res);
    expect(await invocationsThrough(root.dr)).toBe(0);
    expect(await deniedCodes(results.map((r) => r.jti))).toEqual(Array(20).fill('POLICY_VIOLATION'));
    const d = await detail(root.dr);
    expect(d.usage).toMatchObject({ calls_used: 0, declared_usd: 0, spend_reserved_usd: 0 });
  });

  it('a string, null, negative, boolean, object or too-large estimate is denied too, concurrently, counting nothing', async () => {
    const root = await storedRoot({ max_spend_usd: 0.05 });
    const bad = ['0.01', '', null, -0.01, -1e-7, false, { usd: 0.01 }, [0.01], MAX_INVOCATION_USD + 1, 1e9];
    const results = await Promise.all(bad.map((estimate) => verify(root, estimate)));
    for (const { res } of results) expectEstimateDenied(res);
    expect(await invocationsThrough(root.dr)).toBe(0);
    expect((await detail(root.dr)).usage.spend_reserved_usd).toBe(0);
    // A dry run says the same, and a usable estimate is allowed.
    expectEstimateDenied((await verify(root, NO_ESTIMATE, { dryRun: true })).res);
    await allowed(root, 0.02);
    expect((await detail(root.dr)).usage.spend_reserved_usd).toBe(0.02);
  });

  it("an 'unavailable' actual keeps the declared estimate reserved, and the rollup counts it as unavailable", async () => {
    const root = await storedRoot({ max_spend_usd: 0.05 });
    const jti = await allowed(root, 0.03);
    expect((await report(jti, { source: 'unavailable', unavailable_reason: 'provider sent no usage' })).status).toBe(201);
    const d = await detail(root.dr);
    expect(d.usage).toMatchObject({ spend_reserved_usd: 0.03, metered_usd: 0, unmetered_invocations: 1, unavailable_invocations: 1 });
    const over = await verify(root, 0.03); // 0.03 still reserved + 0.03 > 0.05
    expect(over.res.status).toBe(403);
    expect(over.res.body.error.code).toBe('BUDGET_EXHAUSTED');
    await allowed(root, 0.02); // exactly 0.05
  });
});

describe('per-invocation maximum', () => {
  it(`an estimate above ${MAX_INVOCATION_USD} USD is denied naming the field, even where no DR caps cost`, async () => {
    const root = await storedRoot({ allowed_tools: ['web_search'] });
    for (const estimate of [1e9, MAX_INVOCATION_USD + 0.000001, -1, '5', null]) {
      const { jti, res } = await verify(root, estimate);
      expectEstimateDenied(res);
      expect(res.body.violations[0].message).toContain('estimated_cost_usd');
      expect(await deniedCodes([jti])).toEqual(['POLICY_VIOLATION']);
    }
    expect(await invocationsThrough(root.dr)).toBe(0);
    // Without ceilings an estimate is still optional.
    await allowed(root, MAX_INVOCATION_USD);
    expect((await verify(root, NO_ESTIMATE)).res.status).toBe(200);
  });

  it('an actual above the maximum is 400 NUMBER_OUT_OF_RANGE and stores nothing', async () => {
    const root = await storedRoot({ max_spend_usd: 10 });
    const jti = await allowed(root, 1);
    for (const cost of [1e9, MAX_INVOCATION_USD + 0.01]) {
      const r = await report(jti, { source: 'api-usage', cost_usd: cost });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('NUMBER_OUT_OF_RANGE');
      expect(r.body.error.details).toMatchObject({ field: 'cost_usd', max: MAX_INVOCATION_USD });
    }
    const [n] = await svc.store.db.select({ n: count() }).from(actuals).where(eq(actuals.jti, jti));
    expect(n!.n).toBe(0);
    expect((await detail(root.dr)).usage.spend_reserved_usd).toBe(1);
    expect((await report(jti, { source: 'api-usage', cost_usd: MAX_INVOCATION_USD })).status).toBe(201);
  });
});

describe('audit reads never break', () => {
  it('many calls and actuals at the maximum: every read answers 200 with exact sums', async () => {
    const root = await storedRoot({ allowed_tools: ['web_search'] });
    const jtis: string[] = [];
    for (let i = 0; i < 12; i++) jtis.push(await allowed(root, MAX_INVOCATION_USD));
    for (const jti of jtis) expect((await report(jti, { source: 'api-usage', cost_usd: MAX_INVOCATION_USD })).status).toBe(201);
    const d = await detail(root.dr);
    expect(d.usage).toMatchObject({
      calls_used: 12,
      declared_usd: 12 * MAX_INVOCATION_USD,
      metered_usd: 12 * MAX_INVOCATION_USD,
      calibration: 1,
      amounts_saturated: false,
    });
    expect((await svc.call('GET', `/v1/delegations/${root.dr.hash}/tree`, { key: tenant.keys.audit })).status).toBe(200);
    const list = await svc.call('GET', `/v1/delegations/${root.dr.hash}/invocations`, { key: tenant.keys.audit });
    expect(list.status).toBe(200);
    expect(list.body.invocations[0]).toMatchObject({ declared_usd: MAX_INVOCATION_USD, actual: { cost_usd: MAX_INVOCATION_USD } });
  });

  it('a history summing past 2^53 micro-dollars reads as a saturated lower bound, not an error', async () => {
    const root = await storedRoot({ allowed_tools: ['web_search'] });
    const jti = await allowed(root, MAX_INVOCATION_USD);
    expect((await report(jti, { source: 'api-usage', cost_usd: MAX_INVOCATION_USD })).status).toBe(201);
    // Ten thousand calls at the maximum would take too long through the app;
    // copy the real row to build the same history (2^53 micros is ~9,007 of them).
    const copies = 10_000;
    await svc.store.db.execute(sql`
      insert into invocations (tenant_id, jti, hash, jws, leaf_hash, dr_chain, tool, estimated_micros, caller_key_id)
      select i.tenant_id, i.jti || '-' || g, i.hash, i.jws, i.leaf_hash, i.dr_chain, i.tool, ${MAX_INVOCATION_MICROS}::bigint, i.caller_key_id
        from invocations i, generate_series(1, ${copies}) g
       where i.tenant_id = ${tenant.id} and i.jti = ${jti}`);
    await svc.store.db.execute(sql`
      insert into actuals (tenant_id, jti, cost_micros, source, body_hash)
      select a.tenant_id, a.jti || '-' || g, ${MAX_INVOCATION_MICROS}::bigint, a.source, a.body_hash
        from actuals a, generate_series(1, ${copies}) g
       where a.tenant_id = ${tenant.id} and a.jti = ${jti}`);
    const d = await detail(root.dr);
    expect(d.usage).toMatchObject({
      calls_used: copies + 1,
      declared_usd: MAX_EXACT_MICROS / 1_000_000,
      metered_usd: MAX_EXACT_MICROS / 1_000_000,
      metered_invocations: copies + 1,
      amounts_saturated: true,
    });
    expect((await svc.call('GET', `/v1/delegations/${root.dr.hash}/tree`, { key: tenant.keys.audit })).status).toBe(200);
    expect((await svc.call('GET', `/v1/delegations/${root.dr.hash}/invocations`, { key: tenant.keys.audit })).status).toBe(200);
    expect((await svc.call('GET', `/v1/invocations/${jti}`, { key: tenant.keys.audit })).status).toBe(200);
  });

  it('a budget at MAX_USD near its limit allows exactly up to it, then denies with the denial recorded', async () => {
    const root = await storedRoot({ max_spend_usd: MAX_USD });
    await allowed(root, 1);
    // A long history: all but one micro-dollar of the budget reserved.
    await svc.store.db
      .update(delegations)
      .set({ spendReservedMicros: MAX_MICROS - 1 })
      .where(and(eq(delegations.tenantId, tenant.id), eq(delegations.hash, root.dr.hash)));
    await allowed(root, 0.000001); // exactly at the limit
    const over = await verify(root, 0.000001);
    expect(over.res.status).toBe(403);
    expect(over.res.body.violations[0]).toMatchObject({ code: 'BUDGET_EXHAUSTED', required: MAX_USD, actual: MAX_USD });
    expect(await deniedCodes([over.jti])).toEqual(['BUDGET_EXHAUSTED']);
    expect((await detail(root.dr)).usage).toMatchObject({ spend_reserved_usd: MAX_USD, amounts_saturated: false });
  });

  it('actuals that push the spend counter past 2^53 saturate it; reads answer 200 and verify still denies', async () => {
    const root = await storedRoot({ max_spend_usd: MAX_USD });
    const jtis = [await allowed(root, 0), await allowed(root, 0)];
    await svc.store.db
      .update(delegations)
      .set({ spendReservedMicros: MAX_EXACT_MICROS - 10 })
      .where(and(eq(delegations.tenantId, tenant.id), eq(delegations.hash, root.dr.hash)));
    for (const jti of jtis) expect((await report(jti, { source: 'api-usage', cost_usd: MAX_INVOCATION_USD })).status).toBe(201);
    const [row] = await svc.store.db
      .select({ reserved: delegations.spendReservedMicros })
      .from(delegations)
      .where(and(eq(delegations.tenantId, tenant.id), eq(delegations.hash, root.dr.hash)));
    expect(row!.reserved).toBe(MAX_EXACT_MICROS);
    expect((await detail(root.dr)).usage).toMatchObject({ spend_reserved_usd: MAX_EXACT_MICROS / 1_000_000, amounts_saturated: true });
    const denied = await verify(root, 0);
    expect(denied.res.status).toBe(403);
    expect(denied.res.body.error.code).toBe('BUDGET_EXHAUSTED');
    expect(await deniedCodes([denied.jti])).toEqual(['BUDGET_EXHAUSTED']);
  });
});
