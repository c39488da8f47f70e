/** POST /v1/explain judges held grants and reads the catalog as verify and dry-run do, on real PostgreSQL. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import type { ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { buildChain } from '../support/fixtures.js';
import { createTenantKey, setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { secondNodeApp } from '../support/nodes.js';
import { tool } from '../support/tools.js';

let svc: TestService;

beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

const DECLARED = { estimated_cost_usd: 0.01, pii_access: false, write_access: false };
const untrusted = tool('u', { untrusted_content: true, action_type: 'web:fetch' });
const harmless = tool('u', { action_type: 'web:fetch' });
const privateData = tool('p', { private_data_access: true, action_type: 'crm:read' });
const external = tool('e', { type: 'external', action_type: 'net:send' });

async function publish(t: TestTenant, base: number, tools: ToolDeclaration[]) {
  const r = await svc.call('POST', `/v1/admin/tenants/${t.id}/tools`, {
    key: svc.adminKey,
    json: { base_version: base, strict: true, tools, rules: [] },
  });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
}

/** Explain, dry-run and verify of one call, as the tenant's verify key sends them. */
async function judge(t: TestTenant, c: ReturnType<typeof buildChain>, args: Record<string, unknown>) {
  const call = { ...DECLARED, ...args };
  const explained = await svc.call('POST', '/v1/explain', { key: t.keys.verify, json: { dr_chain: c.drs.map((d) => d.hash), args: call } });
  expect(explained.status, JSON.stringify(explained.body)).toBe(200);
  const dryRun = await svc.call('POST', '/v1/verify/dry-run', { key: t.keys.verify, json: c.invoke(call, { iat: svc.clock.now }).bundle });
  const verified = await svc.call('POST', '/v1/verify', { key: t.keys.verify, json: c.invoke(call, { iat: svc.clock.now }).bundle });
  return { explained: explained.body, dryRun, verified };
}

describe('explain and held grants', () => {
  it('a hold judged when the delegation was stored stands in explain, as in verify, after a catalog that lifts the trifecta', async () => {
    const t = await setupTenant(svc, 'explain-held-grant');
    await publish(t, 0, [untrusted, privateData, external]);
    const c = buildChain([{ allowed_tools: ['u', 'p', 'e'], pii_access: true, max_cost_usd: 1 }], { keys: [t.root, generateKeyPair()] });
    const stored = await svc.call('POST', '/v1/delegations', { key: t.keys.issue, json: { receipts: c.drs.map((d) => d.jws) } });
    expect(stored.body.delegations[0].status).toBe('held');
    // Version 2 makes u harmless: the reach is no trifecta now, but the hold was judged under version 1.
    await publish(t, 1, [harmless, privateData, external]);
    const pending = await judge(t, c, { tool: 'u' });
    expect(pending.verified.body.error?.code).toBe('GRANT_PENDING_APPROVAL');
    expect(pending.dryRun.body.error?.code).toBe('GRANT_PENDING_APPROVAL');
    expect(pending.explained.decision).toBe('deny');
    expect(pending.explained.catalog_version).toBe(2);
    expect(pending.explained.grants[0].detected).toBe(false);
    expect(pending.explained.violations).toMatchObject([
      { code: 'GRANT_PENDING_APPROVAL', dr_index: 0, dr_hash: c.drs[0]!.hash, field: 'status', required: 'approved', actual: 'pending' },
    ]);
    expect(pending.explained.violations[0].message).toContain('under tool catalog version 1: Its tools combine all three risks');
    // Verify and dry-run say it the same way: judged when stored, under version 1, not of today's catalog.
    for (const answer of [pending.verified, pending.dryRun]) {
      expect(answer.body.violations[0].message).toContain('held when it was stored, under tool catalog version 1');
      expect(answer.body.violations[0].message).toContain('whatever a newer catalog says');
    }

    // Rejected is final, in explain as in verify.
    const approver = await createTenantKey(svc, t.id, ['approve'], 'approver');
    const triple = { actor: 'bob', confirm: true, reason: 'Not with the web in reach.' };
    expect((await svc.call('POST', `/v1/grants/${c.drs[0]!.hash}/reject`, { key: approver, json: triple })).status).toBe(200);
    const rejected = await judge(t, c, { tool: 'u' });
    expect(rejected.verified.body.violations[0]).toMatchObject({ code: 'GRANT_PENDING_APPROVAL', actual: 'rejected' });
    expect(rejected.verified.body.violations[0].message).toMatch(
      /rejected delegation .* for good \(held when it was stored, under tool catalog version 1/,
    );
    expect(rejected.explained.violations).toMatchObject([{ code: 'GRANT_PENDING_APPROVAL', actual: 'rejected' }]);
    expect(rejected.explained.violations[0].message).toMatch(/rejected DR #0 \(the root\) for good/);
  });

  it('a delegation stored without a hold is not held in explain, as in verify, after a catalog that makes its reach a trifecta', async () => {
    const t = await setupTenant(svc, 'explain-unheld');
    await publish(t, 0, [harmless, privateData, external]);
    const c = buildChain([{ allowed_tools: ['u', 'p', 'e'], pii_access: true, max_cost_usd: 1 }], { keys: [t.root, generateKeyPair()] });
    const stored = await svc.call('POST', '/v1/delegations', { key: t.keys.issue, json: { receipts: c.drs.map((d) => d.jws) } });
    expect(stored.body.delegations[0].status).toBe('active');
    await publish(t, 1, [untrusted, privateData, external]);
    const got = await judge(t, c, { tool: 'p', pii_access: true });
    expect(got.verified.status, JSON.stringify(got.verified.body)).toBe(200);
    expect(got.dryRun.status, JSON.stringify(got.dryRun.body)).toBe(200);
    expect(got.explained.grants[0].detected).toBe(true);
    expect(got.explained).toMatchObject({ decision: 'allow', violations: [] });
  });
});

describe('explain on another node', () => {
  it('reads the current catalog, not the node cache a publish elsewhere left behind', async () => {
    const t = await setupTenant(svc, 'explain-fresh-catalog');
    await publish(t, 0, [tool('lookup')]);
    const c = buildChain([{ allowed_tools: ['lookup'], max_cost_usd: 1 }], { keys: [t.root, generateKeyPair()] });
    await svc.call('POST', '/v1/delegations', { key: t.keys.issue, json: { receipts: c.drs.map((d) => d.jws) } });
    const explain = async () =>
      (
        await svc.call('POST', '/v1/explain', {
          key: t.keys.verify,
          json: { dr_chain: c.drs.map((d) => d.hash), args: { ...DECLARED, tool: 'lookup' } },
        })
      ).body;
    // This node reads (and caches) version 1; the next version is published on another node.
    expect(await explain()).toMatchObject({ decision: 'allow', catalog_version: 1 });
    const other = await secondNodeApp(svc);
    try {
      const r = await other.app.request(`/v1/admin/tenants/${t.id}/tools`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${svc.adminKey}` },
        body: JSON.stringify({
          base_version: 1,
          strict: true,
          tools: [tool('lookup')],
          rules: [{ id: 'no-lookups', when: {}, decision: 'deny' }],
        }),
      });
      expect(r.status).toBe(201);
    } finally {
      await other.close();
    }
    const after = await explain();
    expect(after).toMatchObject({ decision: 'deny', catalog_version: 2 });
    expect(after.violations.map((v: { code: string }) => v.code)).toEqual(['RULE_DENIED']);
  });
});
