/** `baton check`: a dry run on the service with the full explanation; nothing is consumed. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/sdk/client.js';
import { createInvocation, makeBundle } from '../../src/sdk/records.js';
import { ARGS, storedChain } from '../sdk/chains.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { run, tempDir } from './helpers.js';

let live: LiveService;
beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => {
  await live?.close();
});

async function bundleFile(args: Record<string, unknown>) {
  const c = await storedChain(live, undefined, { allowed_tools: ['search'], max_calls: 1, max_cost_usd: 1 });
  const inv = createInvocation({ chain: [c.root, c.sub], invoker: c.b, args, toolServer: 'mcp://search' });
  const bundle = makeBundle(inv, [c.root, c.sub], 'reference');
  const file = join(tempDir(), 'bundle.json');
  writeFileSync(file, JSON.stringify(bundle));
  return { file, bundle, chain: c };
}

describe('baton check', () => {
  it('would allow: exit 0, the explanation, and nothing counted (the real verify still allows the last call)', async () => {
    const { file, bundle, chain } = await bundleFile(ARGS);
    const S = ['--server', live.baseUrl, '--api-key', live.tenant.keys.verify];
    for (let i = 0; i < 2; i++) {
      const r = await run(['check', file, ...S]);
      expect(r.code, r.err).toBe(0);
      expect(r.out).toMatch(/^WOULD BE ALLOWED: tool "search" on mcp:\/\/search/);
      expect(r.out).toContain('0 of 1 calls used (before this call)');
      // The warning counts this call, and says so: not a contradiction of the counter above it.
      expect(r.out).toMatch(/warning +1 of 1 calls used under sha256:[0-9a-f]+, counting this call\./);
      expect(r.out).toContain('Dry run: nothing was counted or stored.');
    }
    const real = await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify }).verify(bundle);
    expect(real.valid).toBe(true);
    // The same invocation checked again: already allowed, and the answer says what a re-send does.
    const again = await run(['check', file, ...S]);
    expect(again.code, again.err).toBe(0);
    expect(again.out).toMatch(/^ALREADY ALLOWED/);
    expect(again.out).not.toContain('WOULD BE ALLOWED');
    expect(again.out).toMatch(/Already allowed: this invocation was allowed before/);
    expect(again.out).toContain('refuse it as REPLAY_DETECTED');
    expect(again.out).toContain('1 of 1 calls used\n');
    // Now the one call is used: a check of the next invocation says so.
    const next = createInvocation({ chain: [chain.root, chain.sub], invoker: chain.b, args: ARGS, toolServer: 'mcp://search' });
    writeFileSync(file, JSON.stringify(makeBundle(next, [chain.root, chain.sub], 'reference')));
    const after = await run(['check', file, ...S, '--json']);
    expect(after.code).toBe(1);
    expect(JSON.parse(after.out)).toMatchObject({ valid: false, error: { code: 'CALLS_EXHAUSTED' } });
  });

  it('would deny: exit 1 with every unmet condition and what to do', async () => {
    const { file } = await bundleFile({ ...ARGS, tool: 'fetch' });
    const r = await run(['check', file, '--server', live.baseUrl, '--api-key', live.tenant.keys.verify]);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/^WOULD BE DENIED: POLICY_VIOLATION/);
    expect(r.out).toMatch(
      /Unmet conditions \(\d+\):\n {2}1\. POLICY_VIOLATION at receipts\[1\], args\.tool: required \["search"\], got fetch/,
    );
    expect(r.out).toContain('What to do:');
  });

  it('a binding check compares --body with the signed args', async () => {
    const { file } = await bundleFile(ARGS);
    const S = ['--server', live.baseUrl, '--api-key', live.tenant.keys.verify];
    const bad = await run(['check', file, ...S, '--require-binding', '--body', '{"tool":"search","q":"other"}']);
    expect(bad.code).toBe(1);
    expect(bad.out).toMatch(/WOULD BE DENIED: BINDING_MISMATCH/);
    expect((await run(['check', file, ...S, '--require-binding'])).err).toContain('--require-binding needs --body');
  });

  it('unusable input is exit 2; no key is a refusal (exit 1)', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'chain.json'), JSON.stringify({ receipts: ['a.b.c'] }));
    expect((await run(['check', join(dir, 'chain.json'), '--server', live.baseUrl])).code).toBe(2);
    expect((await run(['check', join(dir, 'missing.json')])).code).toBe(2);
    const { file } = await bundleFile(ARGS);
    const r = await run(['check', file, '--server', live.baseUrl]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/REFUSED: baton check: UNAUTHORIZED/);
  });
});
