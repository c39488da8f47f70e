/**
 * An auditor recomputes a served tool document version's hash with the SDK (toolDocumentHashes), from
 * the admin key's answer whole or a tenant key's with a guessed webhook URL, against a real service.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toolDocumentHashes } from '../../src/sdk/index.js';
import { DEFAULT_COST_CALIBRATION } from '../../src/protocol/approval-rules.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { tool } from '../support/tools.js';

let svc: TestService;
let tenant: TestTenant;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc, 'document-hash');
});
afterAll(async () => svc?.close());

const WEBHOOK = 'https://hooks.example.com/services/T000/B000/secret';
const tools = [
  tool('search', { tags: ['secrets', 'pii'], rate_limit_per_minute: 30, cost_per_invocation_usd: 0.25 }),
  tool('mail', { type: 'external', action_type: 'mail:send' }),
];
const rules = [{ id: 'mail', description: 'Mail needs a human.', when: { action_type: ['mail:*'] }, decision: 'require_approval' }];

describe('toolDocumentHashes', () => {
  it("recomputes each version's hash and catalog_hash from what GET /v1/tools/versions/{n} serves, and no edited answer's", async () => {
    const published = [
      {},
      // The defaults, published: served byte-identical to the version above, yet hashed with them.
      { cost_calibration: DEFAULT_COST_CALIBRATION },
      { webhook_url: WEBHOOK },
      { webhook_url: WEBHOOK, cost_calibration: { ratio_above: 2, min_metered_invocations: 5 } },
    ];
    for (const [i, over] of published.entries()) {
      const r = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
        key: svc.adminKey,
        json: { base_version: i, strict: i % 2 === 0, tools, rules, approvers: [tenant.root.did], ...over },
      });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
    }
    const [first, second] = await Promise.all(
      [1, 2].map(async (v) => (await svc.call('GET', `/v1/tools/versions/${v}`, { key: tenant.keys.audit })).body),
    );
    expect(first.cost_calibration).toEqual(second.cost_calibration);
    expect([first.cost_calibration_default, second.cost_calibration_default]).toEqual([true, false]);
    expect(first.hash).not.toBe(second.hash);

    for (const [i, over] of published.entries()) {
      const version = i + 1;
      const asAdmin = (await svc.call('GET', `/v1/admin/tenants/${tenant.id}/tools`, { key: svc.adminKey })).body;
      const asTenant = (await svc.call('GET', `/v1/tools/versions/${version}`, { key: tenant.keys.audit })).body;
      expect(asTenant.cost_calibration_default, `v${version}`).toBe(over.cost_calibration === undefined);
      const served = { hash: asTenant.hash, catalog_hash: asTenant.catalog_hash };
      if (over.webhook_url === undefined) {
        expect(toolDocumentHashes(asTenant), `v${version}`).toEqual(served);
      } else {
        // A tenant key sees the scheme only: the hash checks a guess of the URL, and cannot be recomputed without one.
        expect(asTenant.webhook_url).toBe('https://…');
        expect(() => toolDocumentHashes(asTenant)).toThrow(/pass the URL you believe is set as webhook_url/);
        expect(toolDocumentHashes(asTenant, { webhook_url: WEBHOOK }), `v${version}`).toEqual(served);
        expect(toolDocumentHashes(asTenant, { webhook_url: `${WEBHOOK}x` }).hash).not.toBe(served.hash);
      }
      if (version === published.length) {
        // The admin key's answer holds everything.
        expect(asAdmin.webhook_url).toBe(WEBHOOK);
        expect(toolDocumentHashes(asAdmin)).toEqual({ hash: asAdmin.hash, catalog_hash: asAdmin.catalog_hash });
      }
      // Any edit of what the hash covers shows.
      const full = over.webhook_url === undefined ? asTenant : { ...asTenant, webhook_url: WEBHOOK };
      for (const edited of [
        { ...full, strict: !full.strict },
        { ...full, cost_calibration_default: !full.cost_calibration_default },
        { ...full, cost_calibration: { ...full.cost_calibration, ratio_above: full.cost_calibration.ratio_above + 1 } },
        { ...full, approvers: [] },
        { ...full, rules: [{ ...rules[0], decision: 'allow' }] },
        { ...full, webhook_url: over.webhook_url === undefined ? WEBHOOK : null },
      ]) {
        // Changing the calibration a version did not publish changes nothing the hash covers.
        if (full.cost_calibration_default && edited.cost_calibration !== full.cost_calibration) continue;
        expect(toolDocumentHashes(edited).hash, `v${version}`).not.toBe(full.hash);
      }
      const retooled = toolDocumentHashes({ ...full, tools: [{ ...full.tools[0], rate_limit_per_minute: 31 }, full.tools[1]] });
      expect([retooled.hash === full.hash, retooled.catalog_hash === full.catalog_hash]).toEqual([false, false]);
    }
  });
});
