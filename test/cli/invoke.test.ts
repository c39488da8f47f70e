/** `baton invoke`: bundles by value and by reference, args, chains from files or by hash, refusals. */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeJws } from '../../src/protocol/jws.js';
import { BatonClient } from '../../src/sdk/client.js';
import { generateKeyPair, keyPairToFile, type KeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, createSubDelegation } from '../../src/sdk/records.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { run, tempDir } from './helpers.js';

let live: LiveService;
let dir: string;
beforeAll(async () => {
  live = await startLiveService();
  dir = tempDir();
});
afterAll(async () => {
  await live?.close();
});

function keyFile(key: KeyPair, name = `k-${key.did.slice(-8)}.json`): string {
  const file = join(dir, name);
  writeFileSync(file, JSON.stringify(keyPairToFile(key)), { mode: 0o600 });
  return file;
}

/** operator -> A -> B, stored; chain file, and each record as its own JWS file. */
async function chain() {
  const a = generateKeyPair();
  const b = generateKeyPair();
  const root = createRootDelegation({
    issuer: live.tenant.root,
    audience: a.did,
    policy: { allowed_tools: ['search'], max_cost_usd: 1, max_calls: 5 },
  });
  const sub = createSubDelegation({
    parent: root,
    issuer: a,
    audience: b.did,
    policy: { allowed_tools: ['search'], max_cost_usd: 0.5, max_calls: 2 },
  });
  await new BatonClient({ baseUrl: live.baseUrl }).submit([root, sub]);
  const chainFile = join(dir, `chain-${b.did.slice(-8)}.json`);
  writeFileSync(chainFile, JSON.stringify({ receipts: [root.jws, sub.jws] }));
  const rootFile = join(dir, `root-${b.did.slice(-8)}.jws`);
  const subFile = join(dir, `sub-${b.did.slice(-8)}.jws`);
  writeFileSync(rootFile, `${root.jws}\n`);
  writeFileSync(subFile, `${sub.jws}\n`);
  return { a, b, root, sub, chainFile, rootFile, subFile, bFile: keyFile(b) };
}

const verifier = () => new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify });

describe('baton invoke', () => {
  it('prints a bundle by value that the service allows; pii/write declared false by default', async () => {
    const c = await chain();
    const r = await run([
      'invoke',
      '--key',
      c.bFile,
      '--chain',
      c.chainFile,
      '--tool',
      'search',
      '--args',
      '{"query":"weather"}',
      '--cost',
      '0.2',
      '--tool-server',
      'mcp://search',
    ]);
    expect(r.code, r.err).toBe(0);
    const bundle = JSON.parse(r.out);
    expect(bundle).toMatchObject({ bundle_version: '4.0', receipts: [c.root.jws, c.sub.jws] });
    const inv = decodeJws(bundle.invocation, 't').payload as Record<string, unknown>;
    expect(inv).toMatchObject({
      iss: c.b.did,
      drs_type: 'invocation-receipt',
      tool_server: 'mcp://search',
      dr_chain: [c.root.hash, c.sub.hash],
      args: { tool: 'search', query: 'weather', estimated_cost_usd: 0.2, pii_access: false, write_access: false },
    });
    expect(r.err).toMatch(/signed invocation inv:/);
    expect(await verifier().verify(bundle)).toMatchObject({ valid: true, invocation_id: inv['jti'] });
  });

  it('--by-reference leaves receipts empty; JWS files given root first with repeated --chain; --out and --json', async () => {
    const c = await chain();
    const out = join(dir, 'bundle.json');
    const r = await run([
      'invoke',
      '--key',
      c.bFile,
      '--chain',
      c.rootFile,
      '--chain',
      c.subFile,
      '--tool',
      'search',
      '--cost',
      '0.1',
      '--tool-server',
      'mcp://search',
      '--by-reference',
      '--out',
      out,
      '--json',
    ]);
    expect(r.code, r.err).toBe(0);
    const j = JSON.parse(r.out);
    expect(Object.keys(j).sort()).toEqual(['bundle', 'file', 'hash', 'jti']);
    expect(j.bundle.receipts).toEqual([]);
    expect(JSON.parse(readFileSync(out, 'utf8'))).toEqual(j.bundle);
    expect(await verifier().verify(j.bundle)).toMatchObject({ valid: true, invocation_id: j.jti });
  });

  it('--chain <hash> fetches the chain from the service; the offline `baton verify` agrees', async () => {
    const c = await chain();
    const r = await run([
      'invoke',
      '--key',
      c.bFile,
      '--chain',
      c.sub.hash,
      '--tool',
      'search',
      '--cost',
      '0.1',
      '--tool-server',
      'mcp://search',
      '--server',
      live.baseUrl,
      '--api-key',
      live.tenant.keys.audit,
      '--out',
      join(dir, 'b2.json'),
    ]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/^inv:/);
    expect(r.err).not.toMatch(/warning/); // a call its chain allows signs without one
    const offline = await run(['verify', join(dir, 'b2.json'), '--trust', live.tenant.root.did]);
    expect(offline.code).toBe(0);
    expect(offline.out).toMatch(/ALLOWED: tool "search"/);
  });

  it('a call outside the policy is signed (the verifier decides) and denied with the explanation', async () => {
    const c = await chain();
    const r = await run([
      'invoke',
      '--key',
      c.bFile,
      '--chain',
      c.chainFile,
      '--tool',
      'shell',
      '--cost',
      '0.1',
      '--write',
      '--tool-server',
      'mcp://search',
    ]);
    expect(r.code).toBe(0);
    // Signed, but not silently: the chain's own rules already refuse it.
    expect(r.err).toMatch(/warning: inv:\S+ cannot pass its own chain: POLICY_VIOLATION \(.*args\.tool.*\)/);
    const decision = await verifier().verify(JSON.parse(r.out));
    expect(decision).toMatchObject({ valid: false, error: { code: 'POLICY_VIOLATION' } });
    if (decision.valid) throw new Error('unreachable');
    expect(decision.violations.map((v) => v.field)).toEqual(expect.arrayContaining(['args.tool', 'args.write_access']));
  });

  it('refuses to sign for someone who does not hold the leaf (exit 1)', async () => {
    const c = await chain();
    const r = await run(['invoke', '--key', keyFile(c.a), '--chain', c.chainFile, '--tool', 'search', '--tool-server', 'mcp://search']);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/ISSUER_AUDIENCE_GAP/);
    expect(r.err).toMatch(/only the holder of the leaf can invoke/);
  });

  it('unusable input: exit 2', async () => {
    const c = await chain();
    const base = ['invoke', '--key', c.bFile, '--chain', c.chainFile, '--tool', 'search', '--tool-server', 'mcp://search'];
    const cases: [string[], RegExp][] = [
      [['invoke', '--chain', c.chainFile, '--tool', 'search', '--tool-server', 'x'], /--key/],
      [['invoke', '--key', c.bFile, '--tool', 'search', '--tool-server', 'x'], /--chain/],
      [['invoke', '--key', c.bFile, '--chain', c.chainFile, '--tool', 'search'], /--tool-server/],
      [['invoke', '--key', c.bFile, '--chain', c.chainFile, '--tool-server', 'x'], /--tool/],
      [[...base, '--args', '[1,2]'], /JSON object/],
      [[...base, '--args', '{"tool":"other"}'], /differs from "tool" in --args/],
      [[...base, '--args', '{nope'], /not valid JSON/],
      [[...base, '--cost', 'cheap'], /--cost takes an amount/],
      [['invoke', '--key', c.bFile, '--chain', join(dir, 'none.json'), '--tool', 's', '--tool-server', 'x'], /cannot read record file/],
    ];
    for (const [argv, message] of cases) {
      const r = await run(argv);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.err, argv.join(' ')).toMatch(message);
    }
    const garbled = join(dir, 'garbled.jws');
    writeFileSync(garbled, 'aaa.bbb.ccc');
    const g = await run(['invoke', '--key', c.bFile, '--chain', garbled, '--tool', 's', '--tool-server', 'x']);
    expect(g.code).toBe(2);
    expect(g.err).toMatch(/MALFORMED_JWS|NON_CANONICAL_JSON/);
  });
});
