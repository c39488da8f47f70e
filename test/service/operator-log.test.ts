/**
 * What an operator reads in the log of the actions that change who may do what: a tool catalog
 * published and a delegation revoked are logged as an API key's creation is, naming tenant and actor.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Logger } from '../../src/service/log.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { setupTenant, startTestService, storeTwoLeaves, type TestService, type TestTenant } from '../support/service.js';
import { tool } from '../support/tools.js';

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
      json: { base_version: 0, strict: false, tools: [tool('docs_lookup'), tool('web_search')] },
    });
    expect(r.status).toBe(201);
    expect(logged('tool catalog published')).toEqual([{ tenant_id: tenant.id, version: 1, tools: 2, key_id: 'admin:env' }]);
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
});
