/** `baton invocations` and BatonClient.listDecisions/iterateDecisions against a live service: filters, paging, refusals. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/sdk/client.js';
import { createInvocation, makeBundle } from '../../src/sdk/records.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { storedChain, type StoredChain } from '../sdk/chains.js';
import { run } from './helpers.js';

let live: LiveService;
let A: string[];
let first: StoredChain;
let second: StoredChain;
const allowedJtis: string[] = [];
let deniedJti: string;

beforeAll(async () => {
  live = await startLiveService();
  A = ['--server', live.baseUrl, '--api-key', live.tenant.keys.audit];
  first = await storedChain(live);
  second = await storedChain(live);
  allowedJtis.push(await first.call(), await first.call(), await second.call());
  // A denial under the first chain: a tool its leaf does not allow.
  const inv = createInvocation({
    chain: [first.root, first.sub],
    invoker: first.b,
    args: { tool: 'fetch', estimated_cost_usd: 0.1, pii_access: false, write_access: false },
    toolServer: 'mcp://search',
  });
  const verdict = await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify }).verify(
    makeBundle(inv, [first.root, first.sub], 'reference'),
  );
  expect(verdict.valid).toBe(false);
  deniedJti = inv.payload.jti;
});
afterAll(async () => {
  await live?.close();
});

describe('baton invocations', () => {
  it('lists allowed and denied decisions, newest first; filters narrow it', async () => {
    const all = await run(['invocations', ...A]);
    expect(all.code, all.err).toBe(0);
    const lines = all.out.trim().split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]).toMatch(new RegExp(`DENIED +POLICY_VIOLATION +${deniedJti}`));
    for (const jti of allowedJtis) expect(all.out).toMatch(new RegExp(`ALLOWED +search +${jti}`));

    const sub = await run(['invocations', '--dr', second.root.hash, ...A]);
    expect(sub.out.trim().split('\n')).toEqual([expect.stringContaining(allowedJtis[2]!)]);
    const denied = await run(['invocations', '--dr', first.sub.hash, '--outcome', 'denied', '--json', ...A]);
    expect(JSON.parse(denied.out).invocations.map((i: { jti: string }) => i.jti)).toEqual([deniedJti]);
    const recent = await run(['invocations', '--since', '1h', '--code', 'POLICY_VIOLATION', ...A]);
    expect(recent.out.trim().split('\n')).toHaveLength(1);
    const future = await run(['invocations', '--since', '2100-01-01T00:00:00Z', ...A]);
    expect(future.out).toBe('');
    expect(future.err).toMatch(/no decisions match/);
  });

  it('pages with --limit and --cursor, or all at once with --all: the same decisions', async () => {
    const whole = JSON.parse((await run(['invocations', '--json', ...A])).out).invocations;
    const paged = JSON.parse((await run(['invocations', '--limit', '1', '--all', '--json', ...A])).out).invocations;
    expect(paged).toEqual(whole);
    const page = await run(['invocations', '--limit', '3', ...A]);
    const cursor = /--cursor (\S+)/.exec(page.err)?.[1];
    expect(cursor).toBeDefined();
    const rest = await run(['invocations', '--limit', '3', '--cursor', cursor!, ...A]);
    expect([...page.out.trim().split('\n'), ...rest.out.trim().split('\n')]).toHaveLength(4);
  });

  it('bad flags exit 2 before any request; the service refuses a contradiction (exit 2) and a key without audit (exit 1)', async () => {
    for (const argv of [
      ['--outcome', 'maybe'],
      ['--since', 'yesterday'],
      ['--since', '2026-01-01'],
      ['--dr', 'sha256:nope'],
      ['--limit', '0'],
    ]) {
      const r = await run(['invocations', ...argv, ...A]);
      expect(r.code, argv.join(' ')).toBe(2);
    }
    const contradiction = await run(['invocations', '--tool', 'search', '--outcome', 'denied', ...A]);
    expect(contradiction.code).toBe(2);
    expect(contradiction.err).toMatch(/INVALID_REQUEST/);
    const wrongKey = await run(['invocations', '--server', live.baseUrl, '--api-key', live.tenant.keys.verify]);
    expect(wrongKey.code).toBe(1);
    expect(wrongKey.err).toMatch(/FORBIDDEN/);
  });

  it('BatonClient.iterateDecisions walks every page under the filters', async () => {
    const client = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit });
    const seen: string[] = [];
    for await (const d of client.iterateDecisions({ outcome: 'allowed', limit: 1, since: new Date(Date.now() - 3600_000) }))
      seen.push(d.jti!);
    expect(seen.sort()).toEqual([...allowedJtis].sort());
  });
});
