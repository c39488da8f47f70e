/**
 * The whole story with the CLI against the real service: keygen -> delegate
 * a root (the tenant's trusted root key) -> submit -> delegate a narrower
 * sub-delegation -> invoke -> verify (SDK client, as a tool server would) ->
 * report the metered cost -> `baton chain` shows the tree and the spend.
 * Once in-process, once through the real bin (bin/baton.mjs).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient, type VerifyResult } from '../../src/sdk/client.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { writeKeyFile } from '../sdk/chains.js';
import { run, runBin, tempDir, type RunResult } from './helpers.js';

let live: LiveService;
beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => {
  await live?.close();
});

const ok = (r: RunResult, what: string): RunResult => {
  expect(r.code, `${what}\nstdout: ${r.out}\nstderr: ${r.err}`).toBe(0);
  return r;
};

describe('the CLI end to end', () => {
  it('in-process: keygen, delegate, submit, sub-delegate, invoke, verify, report, chain', async () => {
    const dir = tempDir();
    const f = (n: string) => join(dir, n);
    const S = ['--server', live.baseUrl];
    const operator = writeKeyFile(dir, live.tenant.root);

    const a = ok(await run(['keygen', '--out', f('a.json')]), 'keygen a').out.trim();
    const b = ok(await run(['keygen', '--out', f('b.json')]), 'keygen b').out.trim();

    // The operator roots agent A (signed locally, not yet stored), then submits it.
    ok(
      await run([
        'delegate',
        '--key',
        operator,
        '--to',
        a,
        '--tools',
        'search,fetch',
        '--max-calls',
        '10',
        '--max-cost',
        '1',
        '--out',
        f('a.chain.json'),
      ]),
      'delegate root',
    );
    const stored = ok(await run(['submit', f('a.chain.json'), ...S]), 'submit');
    expect(stored.out).toMatch(/^STORED: 1 delegation record/);

    // A tries to hand B more than it has: refused before anything is signed.
    const escalation = await run([
      'delegate',
      '--key',
      f('a.json'),
      '--to',
      b,
      '--parent',
      f('a.chain.json'),
      '--tools',
      'search,shell',
      '--max-calls',
      '3',
      '--max-cost',
      '0.5',
    ]);
    expect(escalation.code).toBe(1);
    expect(escalation.err).toMatch(/POLICY_ESCALATION.*\n.*"shell"/);

    // A narrows: search only, 3 calls, 50 cents a call.
    const sub = ok(
      await run([
        'delegate',
        '--key',
        f('a.json'),
        '--to',
        b,
        '--parent',
        f('a.chain.json'),
        '--tools',
        'search',
        '--max-calls',
        '3',
        '--max-cost',
        '0.5',
        '--out',
        f('b.chain.json'),
        '--submit',
        ...S,
      ]),
      'delegate sub',
    );
    const leaf = sub.out.split('\n')[0]!;
    expect(JSON.parse(readFileSync(f('b.chain.json'), 'utf8')).receipts).toHaveLength(2);

    // B signs a call; the tool server verifies it.
    ok(
      await run([
        'invoke',
        '--key',
        f('b.json'),
        '--chain',
        f('b.chain.json'),
        '--tool',
        'search',
        '--args',
        '{"query":"q"}',
        '--cost',
        '0.25',
        '--tool-server',
        'mcp://search',
        '--out',
        f('call.json'),
      ]),
      'invoke',
    );
    const tool = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify });
    const allowed: VerifyResult = await tool.verify(JSON.parse(readFileSync(f('call.json'), 'utf8')), {
      body: { query: 'q', tool: 'search', estimated_cost_usd: 0.25, pii_access: false, write_access: false },
      requireBinding: true,
    });
    expect(allowed).toMatchObject({
      valid: true,
      binding: 'match',
      counters: [
        { calls_used: 1, max_calls: 10 },
        { dr: leaf, calls_used: 1, max_calls: 3 },
      ],
    });
    const jti = (allowed as Extract<VerifyResult, { valid: true }>).invocation_id;

    // A tool outside B's policy: signed, then denied with the explanation.
    const outside = ok(
      await run([
        'invoke',
        '--key',
        f('b.json'),
        '--chain',
        f('b.chain.json'),
        '--tool',
        'fetch',
        '--cost',
        '0.1',
        '--tool-server',
        'mcp://search',
      ]),
      'invoke outside',
    );
    const denied = await tool.verify(JSON.parse(outside.out));
    expect(denied).toMatchObject({ valid: false, error: { code: 'POLICY_VIOLATION', block: 'D' } });

    // The tool server reports what the call really cost.
    ok(await run(['report', '--jti', jti, '--cost', '0.2', '--source', 'api-usage', ...S, '--api-key', live.tenant.keys.report]), 'report');

    // The auditor reads the tree.
    const chain = ok(await run(['chain', leaf, ...S, '--api-key', live.tenant.keys.audit]), 'chain');
    expect(chain.out).toContain('tools [search, fetch] · max_cost $1.00/call · max_calls 10');
    expect(chain.out).toMatch(/└─ sha256:\S+ {2}\[active, exp [^\]]+\] {2}did:key:\S+ -> did:key:\S+ {3}◀ this record/);
    expect(chain.out).toContain('calls   1/3 used');
    expect(chain.out).toContain('calls   1/10 used');
    expect(chain.out).toContain('spend   declared $0.25, metered $0.20 (1 metered, 0 unmetered, calibration 0.8)');
  });

  it('through the real bin, with BATON_URL / BATON_API_KEY from the environment', async () => {
    const dir = tempDir();
    const f = (n: string) => join(dir, n);
    const env = { BATON_URL: live.baseUrl };

    // A new operator key, trusted by the tenant through the admin API.
    const operator = ok(await runBin(['keygen', '--out', f('op.json'), '--json']), 'bin keygen').out;
    const opDid = JSON.parse(operator).did as string;
    await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.svc.adminKey }).admin.addRoot(live.tenant.id, opDid, 'cli operator');
    const agent = JSON.parse(ok(await runBin(['keygen', '--out', f('agent.json'), '--json']), 'bin keygen agent').out).did as string;

    const root = JSON.parse(
      ok(
        await runBin(
          [
            'delegate',
            '--key',
            f('op.json'),
            '--to',
            agent,
            '--policy',
            '{"allowed_tools":["search"],"max_calls":2}',
            '--out',
            f('chain.json'),
            '--submit',
            '--json',
          ],
          env,
        ),
        'bin delegate',
      ).out,
    );
    expect(root.submitted).toMatchObject({ created: true });
    expect(root.submitted.tenant_id).toBeUndefined(); // keyless: no tenant named

    const inv = JSON.parse(
      ok(
        await runBin(
          [
            'invoke',
            '--key',
            f('agent.json'),
            '--chain',
            f('chain.json'),
            '--tool',
            'search',
            '--tool-server',
            'mcp://search',
            '--by-reference',
            '--json',
          ],
          env,
        ),
        'bin invoke',
      ).out,
    );
    const tool = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify });
    expect(await tool.verify(inv.bundle)).toMatchObject({ valid: true, invocation_id: inv.jti });

    const report = await runBin(['report', '--jti', inv.jti, '--source', 'unavailable', '--unavailable-reason', 'flat fee', '--json'], {
      ...env,
      BATON_API_KEY: live.tenant.keys.report,
    });
    expect(JSON.parse(ok(report, 'bin report').out)).toMatchObject({ jti: inv.jti, source: 'unavailable' });

    const chain = ok(await runBin(['chain', root.hash], { ...env, BATON_API_KEY: live.tenant.keys.audit }), 'bin chain');
    expect(chain.out).toContain('calls   1/2 used');
    expect(chain.out).toContain('(1 reported unavailable)');
    expect(chain.err).toMatch(/fetching the usage of 1 record/);

    const refused = await runBin(['revoke', root.hash, '--reason', 'x'], { ...env, BATON_API_KEY: live.tenant.keys.audit });
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/FORBIDDEN/);
  }, 120_000); // each bin run starts tsx
});
