/** `baton report`: actuals with provenance, idempotency, conflicts, validation. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/sdk/client.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { storedChain } from '../sdk/chains.js';
import { run } from './helpers.js';

let live: LiveService;
let R: string[];
beforeAll(async () => {
  live = await startLiveService();
  R = ['--server', live.baseUrl, '--api-key', live.tenant.keys.report];
});
afterAll(async () => {
  await live?.close();
});

describe('baton report', () => {
  it('records a metered cost next to the declared estimate; the same report again is fine', async () => {
    const c = await storedChain(live);
    const jti = await c.call();
    const argv = ['report', '--jti', jti, '--cost', '0.42', '--source', 'api-usage', '--tokens-in', '1200', '--tokens-out', '300', ...R];
    const r = await run(argv);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(new RegExp(`^RECORDED: actual of ${jti}`));
    expect(r.out).toMatch(/metered {5}\$0\.42 \[api-usage\]/);
    expect(r.out).toMatch(/declared {4}\$0\.50/);
    expect(r.out).toMatch(/tokens {6}1200 in, 300 out/);
    expect((await run(argv)).code).toBe(0);
    const usage = (await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit }).getDelegation(c.root.hash)).usage;
    expect(usage).toMatchObject({ metered_usd: 0.42, declared_usd: 0.5, metered_invocations: 1 });
  });

  it('--json prints the stored actual; a different second report is a conflict (exit 1)', async () => {
    const c = await storedChain(live);
    const jti = await c.call();
    const r = await run(['report', '--jti', jti, '--cost', '0.1', '--source', 'harness-reported', '--json', ...R]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({
      jti,
      cost_usd: 0.1,
      source: 'harness-reported',
      declared_usd: 0.5,
      service_receipt: { id: expect.any(Number) },
    });
    const conflict = await run(['report', '--jti', jti, '--cost', '0.2', '--source', 'harness-reported', ...R]);
    expect(conflict.code).toBe(1);
    expect(conflict.err).toMatch(/CONFLICT \[HTTP 409\]/);
    expect(conflict.err).toMatch(/one actual per invocation/);
  });

  it('source unavailable takes a reason and no cost', async () => {
    const c = await storedChain(live);
    const jti = await c.call();
    const r = await run(['report', '--jti', jti, '--source', 'unavailable', '--unavailable-reason', 'provider gives no usage', ...R]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/metered {5}unavailable \(provider gives no usage\) \[unavailable\]/);
  });

  it('refusals exit 1: an unknown invocation, a key without report scope', async () => {
    const unknown = await run(['report', '--jti', 'inv:unknown', '--cost', '1', '--source', 'manual-meter', ...R]);
    expect(unknown.code).toBe(1);
    expect(unknown.err).toMatch(/NOT_FOUND/);
    const scope = await run([
      'report',
      '--jti',
      'inv:unknown',
      '--cost',
      '1',
      '--source',
      'manual-meter',
      '--server',
      live.baseUrl,
      '--api-key',
      live.tenant.keys.audit,
    ]);
    expect(scope.code).toBe(1);
    expect(scope.err).toMatch(/FORBIDDEN/);
  });

  it('unusable input exits 2, before any request', async () => {
    const cases: [string[], RegExp][] = [
      [['report', '--cost', '1', '--source', 'api-usage'], /--jti/],
      [['report', 'inv:1', '--cost', '1', '--source', 'api-usage'], /unexpected argument "inv:1": name the invocation with --jti inv:1/],
      [['report', '--jti', 'inv:1', '--cost', '1'], /provenance/],
      [['report', '--jti', 'inv:1', '--cost', '1', '--source', 'guess'], /--source is one of/],
      [['report', '--jti', 'inv:1', '--source', 'api-usage'], /needs --cost/],
      [['report', '--jti', 'inv:1', '--source', 'unavailable', '--cost', '1'], /--cost cannot be given/],
      [['report', '--jti', 'inv:1', '--source', 'unavailable'], /needs --unavailable-reason/],
      [['report', '--jti', 'inv:1', '--source', 'api-usage', '--cost', '1', '--unavailable-reason', 'x'], /unavailable only/],
      [['report', '--jti', 'inv:1', '--source', 'api-usage', '--cost', 'NaN'], /--cost takes an amount/],
      [['report', '--jti', 'inv:1', '--source', 'api-usage', '--cost', '1', '--tokens-in', '1.5'], /--tokens-in takes a whole number/],
    ];
    for (const [argv, message] of cases) {
      const r = await run([...argv, '--server', 'http://127.0.0.1:9']); // nothing is sent
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.err, argv.join(' ')).toMatch(message);
    }
  });
});
