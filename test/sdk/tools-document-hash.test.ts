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

/** The recomputed hash, or the refusal's message. */
function hashOrRefusal(answer: Parameters<typeof toolDocumentHashes>[0], opts?: Parameters<typeof toolDocumentHashes>[1]): string {
  try {
    return toolDocumentHashes(answer, opts).hash;
  } catch (e) {
    return `refused: ${(e as Error).message}`;
  }
}

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
        // Refused (a calibration shown as the defaults that is not them) or hashed otherwise.
        expect(hashOrRefusal(edited), `v${version}`).not.toBe(full.hash);
      }
      const retooled = toolDocumentHashes({ ...full, tools: [{ ...full.tools[0], rate_limit_per_minute: 31 }, full.tools[1]] });
      expect([retooled.hash === full.hash, retooled.catalog_hash === full.catalog_hash]).toEqual([false, false]);
    }
  });

  it('refuses what the hash cannot cover: a calibration shown as the defaults that is not them, an answer without the flag, a contradicted webhook guess, an unknown tool member', async () => {
    const t = await setupTenant(svc, 'document-hash-refusals');
    for (const [i, over] of [{}, { webhook_url: WEBHOOK }].entries()) {
      const r = await svc.call('POST', `/v1/admin/tenants/${t.id}/tools`, {
        key: svc.adminKey,
        json: { base_version: i, strict: true, tools, rules, ...over },
      });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
    }
    const plain = (await svc.call('GET', '/v1/tools/versions/1', { key: t.keys.audit })).body;
    const masked = (await svc.call('GET', '/v1/tools/versions/2', { key: t.keys.audit })).body;
    const asAdmin = (await svc.call('GET', `/v1/admin/tenants/${t.id}/tools`, { key: svc.adminKey })).body;
    expect([plain.cost_calibration_default, plain.cost_calibration]).toEqual([true, DEFAULT_COST_CALIBRATION]);
    expect(toolDocumentHashes(plain).hash).toBe(plain.hash);

    // The calibration flagging reads is not hashed when default: edited, it would still "recompute".
    for (const cost_calibration of [
      { ratio_above: 1000, min_metered_invocations: 1_000_000 },
      { ...DEFAULT_COST_CALIBRATION, extra: 1 },
      { ratio_above: DEFAULT_COST_CALIBRATION.ratio_above },
    ])
      expect(() => toolDocumentHashes({ ...plain, cost_calibration })).toThrow(
        /says cost_calibration_default but shows .* not this SDK's defaults/,
      );

    // An older server's answer, without the flag: refused, not a mismatch reported for an honest answer.
    const { cost_calibration_default: _flag, ...older } = plain;
    expect(() => toolDocumentHashes(older)).toThrow(/no cost_calibration_default/);

    // A guess must be what the answer shows, whole or masked.
    expect(() => toolDocumentHashes(plain, { webhook_url: WEBHOOK })).toThrow(/shows webhook_url null/);
    expect(() => toolDocumentHashes(masked, { webhook_url: WEBHOOK.replace('https:', 'http:') })).toThrow(
      /pass a guess the answer shows masked \(http:\/\/…\)/,
    );
    expect(() => toolDocumentHashes(asAdmin, { webhook_url: `${WEBHOOK}x` })).toThrow(/cannot be/);
    expect(() => toolDocumentHashes(masked, { webhook_url: 'not a url' })).toThrow(/is not a URL/);
    expect(toolDocumentHashes(masked, { webhook_url: WEBHOOK }).hash).toBe(masked.hash);
    expect(toolDocumentHashes(asAdmin, { webhook_url: WEBHOOK }).hash).toBe(asAdmin.hash);

    // A member no declaration has is dropped by the canonical form: refused rather than passed.
    const extra = { ...plain, tools: [{ ...plain.tools[0], requires_human: true }, plain.tools[1]] };
    expect(() => toolDocumentHashes(extra)).toThrow(/tools\[0\] has member requires_human/);
  });
});
