/** `baton tools show` prints every setting that decides a call; `baton tools --help` names every publish field. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { tool } from '../support/tools.js';
import { run } from './helpers.js';

let live: LiveService;
let S: string[];
beforeAll(async () => {
  live = await startLiveService();
  S = ['--server', live.baseUrl];
});
afterAll(async () => live?.close());

const WEBHOOK = 'https://hooks.example.com/services/T000/B000/secret';

describe('baton tools show', () => {
  it('prints cost floors, rate limits, approvers, the webhook and cost calibration, long lines cut', async () => {
    const approver = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK';
    // Enough rules that their line is longer than a terminal is shown.
    const rules = Array.from({ length: 200 }, (_, i) => ({ id: `rule-${i}-${'x'.repeat(40)}`, when: {}, decision: 'allow' }));
    const first = {
      base_version: 0,
      strict: true,
      tools: [tool('paid_search', { cost_per_invocation_usd: 0.25, rate_limit_per_minute: 30 }), tool('plain')],
      rules,
      approvers: [approver],
      webhook_url: WEBHOOK,
    };
    const pub = await run(['tools', 'publish', JSON.stringify(first), '--tenant', live.tenant.id, ...S, '--api-key', live.svc.adminKey]);
    expect(pub.code, pub.err).toBe(0);
    const show = await run(['tools', 'show', ...S, '--api-key', live.tenant.keys.verify]);
    expect(show.code, show.err).toBe(0);
    const lines = show.out.trimEnd().split('\n');
    expect(lines.find((l) => l.startsWith('  paid_search'))).toBe('  paid_search  read  read  docs:read  cost 0.25 USD/call  30 calls/min');
    expect(lines.find((l) => l.startsWith('  plain'))).toBe('  plain  read  read  docs:read');
    expect(lines).toContain(`  approvers: ${approver}`);
    // A tenant key is shown the webhook's scheme only; the admin key the whole URL.
    expect(lines).toContain('  webhook: https://…');
    expect(lines).toContain('  cost calibration: flagged above 1.2x the declared cost, over at least 3 metered invocations (the default)');
    const rulesLine = lines.find((l) => l.startsWith('  rules: '))!;
    expect(rulesLine).toMatch(/\.\.\. \(\d+ more characters\)$/);
    expect(rulesLine.length).toBeLessThan(4_100);
    const asAdmin = await run(['tools', 'show', '--tenant', live.tenant.id, ...S, '--api-key', live.svc.adminKey]);
    expect(asAdmin.out).toContain(`  webhook: ${WEBHOOK}\n`);

    const second = {
      base_version: 1,
      strict: false,
      tools: [tool('plain')],
      cost_calibration: { ratio_above: 2, min_metered_invocations: 5 },
    };
    expect(
      (await run(['tools', 'publish', JSON.stringify(second), '--tenant', live.tenant.id, ...S, '--api-key', live.svc.adminKey])).code,
    ).toBe(0);
    const again = await run(['tools', 'show', ...S, '--api-key', live.tenant.keys.verify]);
    expect(again.out).toContain('  approvers: (none: API keys with the approve scope only)\n');
    expect(again.out).toContain('  webhook: (none)\n');
    expect(again.out).toContain('  cost calibration: flagged above 2x the declared cost, over at least 5 metered invocations\n');
  });

  it('--help names every publish field', async () => {
    const help = await run(['tools', '--help']);
    expect(help.code).toBe(0);
    for (const field of [
      'base_version',
      'strict',
      'tools',
      'rules?',
      'default_decision?',
      'approvers?',
      'webhook_url?',
      'cost_calibration?',
    ])
      expect(help.out).toContain(field);
  });
});
