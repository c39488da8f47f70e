/**
 * What an operator reads in the log of the actions that change who may do what: a tool catalog
 * published and a delegation revoked are logged as an API key's creation is, naming tenant and actor.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Logger } from '../../src/service/log.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { setupTenant, startTestService, storeTwoLeaves, type TestService, type TestTenant } from '../support/service.js';
import { tool } from '../support/tools.js';
import { buildChain, T0 } from '../support/fixtures.js';

const EXPORT = tool('crm_export', { type: 'write', blast_radius: 'organizational', action_type: 'crm:export' });

const lines: { msg: string; fields: Record<string, unknown> }[] = [];
const capture = (msg: string, fields: Record<string, unknown> = {}) => void lines.push({ msg, fields });
const log: Logger = { debug: () => {}, info: capture, warn: capture, error: capture };
let svc: TestService;
let tenant: TestTenant;

beforeAll(async () => {
  svc = await startTestService({ log });
  tenant = await setupTenant(svc);
});
afterAll(() => svc?.close());

const logged = (msg: string) => lines.filter((l) => l.msg === msg).map((l) => l.fields);

describe('the operator log', () => {
  it('a published tool catalog: tenant, version, how many tools, which key', async () => {
    const r = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
      key: svc.adminKey,
      json: { base_version: 0, strict: false, tools: [tool('docs_lookup'), tool('web_search'), EXPORT] },
    });
    expect(r.status).toBe(201);
    expect(logged('tool catalog published')).toEqual([{ tenant_id: tenant.id, version: 1, tools: 3, key_id: 'admin:env' }]);
  });

  it('a held grant and an approval decided by an approver key: tenant, subject, the status each now has, which key', async () => {
    const human = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
      key: svc.adminKey,
      json: { scopes: ['approve'], name: 'human' },
    });
    const humanKey = { key: human.body.key as string };
    const triple = { actor: 'alice@example.com', confirm: true, reason: 'Reviewed with legal.' };
    // Every tool, the export among them: the grant's reach is held for a human first.
    const c = buildChain([{ allowed_tools: ['*'], max_cost_usd: 1, write_access: true }], { keys: [tenant.root, generateKeyPair()] });
    const args = { tool: 'crm_export', estimated_cost_usd: 0.01, pii_access: false, write_access: true };
    const held = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: c.invoke(args, { iat: T0 }).bundle });
    expect(
      held.body.violations?.map((v: { code: string }) => v.code),
      JSON.stringify(held.body),
    ).toContain('GRANT_PENDING_APPROVAL');
    const grant = await svc.call('POST', `/v1/grants/${c.drs[0]!.hash}/approve`, { ...humanKey, json: triple });
    expect(grant.status, JSON.stringify(grant.body)).toBe(200);
    expect(logged('grant decided')).toEqual([
      { tenant_id: tenant.id, dr_hash: c.drs[0]!.hash, status: 'approved', decided_by: human.body.id },
    ]);

    const asked = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: c.invoke(args, { iat: T0 }).bundle });
    expect(asked.body.error?.code, JSON.stringify(asked.body)).toBe('APPROVAL_REQUIRED');
    const id = asked.body.approval.id as string;
    expect((await svc.call('POST', `/v1/approvals/${id}/reject`, { ...humanKey, json: triple })).status).toBe(200);
    expect(logged('approval decided')).toEqual([{ tenant_id: tenant.id, approval_id: id, status: 'rejected', decided_by: human.body.id }]);
  });

  it('a revocation, once per newly revoked record: tenant, hash, who, how many descendants', async () => {
    const [A, B, C] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
    const { root } = await storeTwoLeaves(svc, tenant, { allowed_tools: ['web_search'] }, A, B, C);
    for (let i = 0; i < 2; i++) {
      const r = await svc.call('POST', `/v1/delegations/${root.hash}/revoke`, {
        key: tenant.keys.issue,
        json: { confirm: true, reason: 'test' },
      });
      expect(r.status).toBe(200);
    }
    expect(logged('delegation revoked')).toEqual([
      { tenant_id: tenant.id, hash: root.hash, by: 'api_key', by_id: expect.stringMatching(/^key_/), descendants: 2 },
    ]);
  });

  it('a long request path is logged cut, with its length: each request logs its path', async () => {
    const long = `/v1/delegations/${'a'.repeat(20_000)}`;
    await svc.call('GET', long, { key: tenant.keys.audit });
    const [line] = logged('request').filter((f) => String(f['path']).startsWith('/v1/delegations/aaa'));
    expect(line?.['path']).toBe(`${long.slice(0, 1024)}… (${long.length} characters)`);
  });
});
