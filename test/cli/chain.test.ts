/** `baton chain <hash>`: the tree with policies, status, calls and declared vs metered spend. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/sdk/client.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createSubDelegation } from '../../src/sdk/records.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { storedChain } from '../sdk/chains.js';
import { run, tempDir } from './helpers.js';

let live: LiveService;
let A: string[];
beforeAll(async () => {
  live = await startLiveService();
  A = ['--server', live.baseUrl, '--api-key', live.tenant.keys.audit];
});
afterAll(async () => {
  await live?.close();
});

const short = (hash: string) => `${hash.slice(0, 15)}…${hash.slice(-4)}`;

async function withSibling() {
  const c = await storedChain(live);
  const sibling = createSubDelegation({
    parent: c.root,
    issuer: c.a,
    audience: generateKeyPair().did,
    policy: { allowed_tools: ['fetch'], max_calls: 2, max_cost_usd: 0.2 },
  });
  await new BatonClient({ baseUrl: live.baseUrl }).submit(sibling);
  const jtis = [await c.call(), await c.call()];
  await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.report }).reportActual(jtis[0]!, {
    cost_usd: 0.3,
    source: 'api-usage',
  });
  return { ...c, sibling };
}

describe('baton chain', () => {
  it('prints root -> the record as a tree: policy, status, calls used/max, declared vs metered spend', async () => {
    const c = await withSibling();
    const r = await run(['chain', c.sub.hash, ...A]);
    expect(r.code, r.err).toBe(0);
    const lines = r.out.split('\n');
    expect(lines[0]).toBe(`Delegation ${short(c.sub.hash)}: 2 record(s) from the root, 0 below it`);
    const rootLine = lines.findIndex((l) => l.startsWith(`${short(c.root.hash)}  [active`));
    const subLine = lines.findIndex((l) => l.startsWith(`└─ ${short(c.sub.hash)}  [active`));
    expect(rootLine).toBeGreaterThan(0);
    expect(subLine).toBeGreaterThan(rootLine);
    expect(lines[subLine]).toMatch(/◀ this record$/);
    expect(r.out).toContain('│  policy  tools [search, fetch] · max_cost $1.00/call · max_calls 10 · pii no · write no');
    expect(r.out).toContain('│  calls   2/10 used');
    expect(r.out).toContain('│  spend   declared $1.00, metered $0.30 (1 metered, 1 unmetered, calibration 0.6)');
    expect(r.out).toContain('      policy  tools [search] · max_cost $1.00/call · max_calls 5 · pii no · write no');
    expect(r.out).toContain('      calls   2/5 used');
    expect(r.out).not.toContain(short(c.sibling.hash)); // only the path, without --whole-tree
    expect(r.err).toMatch(/fetching the chain of .*\nfetched the tree .*\nfetching the usage of 2 record\(s\)/);
  });

  it('--whole-tree shows siblings; revocation shows on the revoked record and below it', async () => {
    const c = await withSibling();
    await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.issue }).revoke(c.sub.hash, 'rotated');
    const r = await run(['chain', c.sub.hash, '--whole-tree', ...A]);
    expect(r.code, r.err).toBe(0);
    // Below the record: its own subtree (none), not the root's; the whole tree is counted apart.
    expect(r.out.split('\n')[0]).toBe(`Delegation ${short(c.sub.hash)}: 2 record(s) from the root, 0 below it, 3 in the root's whole tree`);
    expect(r.out).toMatch(new RegExp(`├─ ${short(c.sub.hash)}  \\[REVOKED\\].*◀ this record`));
    expect(r.out).toMatch(new RegExp(`└─ ${short(c.sibling.hash)}  \\[active`));
    expect(r.out).toMatch(/revoked \S+: rotated/);
    expect(r.out).toContain('calls   0/2 used');
  });

  it('--full prints whole identifiers; --json has the chain and the tree with usage everywhere', async () => {
    const c = await withSibling();
    const full = await run(['chain', c.sub.hash, '--full', ...A]);
    expect(full.out).toContain(c.sub.hash);
    expect(full.out).toContain(c.b.did);
    const r = await run(['chain', c.root.hash, '--json', ...A]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(Object.keys(j).sort()).toEqual(['chain', 'hash', 'receipts', 'root_principal', 'tree', 'tree_count', 'truncated']);
    expect(j.receipts).toEqual([c.root.jws]);
    expect(j.chain[0].usage).toMatchObject({ calls_used: 2, max_calls: 10, declared_usd: 1, metered_usd: 0.3 });
    expect(j.tree.children.map((n: { hash: string }) => n.hash).sort()).toEqual([c.sub.hash, c.sibling.hash].sort());
    expect(j.tree.children.every((n: { usage: unknown }) => n.usage !== null)).toBe(true);
    expect(j.tree_count).toBe(3);
  });

  it('refusals exit 1 (unknown record, no key); a bad hash exits 2', async () => {
    const unknown = await run(['chain', `sha256:${'f'.repeat(64)}`, ...A]);
    expect(unknown.code).toBe(1);
    expect(unknown.err).toMatch(/NOT_FOUND \[HTTP 404\]/);
    const c = await storedChain(live);
    const noKey = await run(['chain', c.sub.hash, '--server', live.baseUrl]);
    expect(noKey.code).toBe(1);
    expect(noKey.err).toMatch(/UNAUTHORIZED/);
    expect(noKey.err).toContain(
      "--api-key, $BATON_API_KEY, or a context saved for this server: a context's key is never sent to another server",
    );
    expect((await run(['chain', 'sha256:xyz', ...A])).code).toBe(2);
    expect((await run(['chain', ...A])).code).toBe(2);
  });

  it("baton verify --chain-only takes the service's chain answer as it is, and refuses it when its records say other than its receipts sign", async () => {
    const c = await storedChain(live);
    const res = await fetch(`${live.baseUrl}/v1/delegations/${c.sub.hash}/chain`, {
      headers: { authorization: `Bearer ${live.tenant.keys.audit}` },
    });
    expect(res.status).toBe(200);
    const answer = (await res.json()) as { records: { policy: Record<string, unknown> }[]; root_principal: string };
    const dir = tempDir();
    const write = (name: string, value: unknown) => {
      const file = join(dir, name);
      writeFileSync(file, JSON.stringify(value));
      return file;
    };
    const trust = ['--chain-only', '--trust', live.tenant.root.did];
    const ok = await run(['verify', write('answer.json', answer), ...trust]);
    expect(ok.code, ok.out + ok.err).toBe(0);
    expect(ok.out).toContain('VALID CHAIN: 2 delegation record(s)');

    // The readable copy says max_calls 50; the signed record says 5. A reader of the file would believe the copy.
    const edited = structuredClone(answer);
    edited.records[1]!.policy['max_calls'] = 50;
    const r = await run(['verify', write('edited.json', edited), ...trust]);
    expect(r.code, r.out + r.err).toBe(1);
    expect(r.out).toContain('NOT THAT CHAIN: records[1].policy is not what receipts[1] signs');
    expect(r.out).not.toMatch(/VALID CHAIN/);
    const json = await run(['verify', write('edited.json', edited), ...trust, '--json']);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.out)).toMatchObject({
      valid: false,
      leaf_hash: c.sub.hash,
      mismatch: 'records[1].policy is not what receipts[1] signs',
      error: { code: 'DR_CHAIN_MISMATCH' },
      violations: [],
    });
    // As the SDK's getChain refuses it (UNEXPECTED_RESPONSE), so does the CLI: the root principal too.
    const otherRoot = { ...answer, root_principal: c.a.did };
    const root = await run(['verify', write('other-root.json', otherRoot), ...trust]);
    expect(root.code, root.out + root.err).toBe(1);
    expect(root.out).toContain(`NOT THAT CHAIN: it names "${c.a.did}" as root principal`);
  });

  it('baton verify --chain-only checks what "baton chain --json" writes: its chain[] and root_principal; its tree is said unchecked', async () => {
    const c = await withSibling();
    const printed = await run(['chain', c.sub.hash, '--json', ...A]);
    expect(printed.code, printed.err).toBe(0);
    const file = JSON.parse(printed.out) as {
      chain: { policy: Record<string, unknown>; usage: unknown; revoked_reason: unknown }[];
      root_principal: string;
      tree: { policy: Record<string, unknown> };
    };
    // Beside the signed members, each chain[] entry has the service's usage and revoked_reason.
    expect(file.chain[1]!.usage).not.toBeNull();
    expect('revoked_reason' in file.chain[1]!).toBe(true);
    const dir = tempDir();
    const write = (name: string, value: unknown) => {
      const path = join(dir, name);
      writeFileSync(path, JSON.stringify(value));
      return path;
    };
    const trust = ['--chain-only', '--trust', live.tenant.root.did];
    const ok = await run(['verify', write('printed.json', file), ...trust]);
    expect(ok.code, ok.out + ok.err).toBe(0);
    expect(ok.out).toContain('VALID CHAIN: 2 delegation record(s)');
    // Its tree is the service's word, which no receipt in the file signs: said, not passed off as checked.
    expect(ok.out).toMatch(/not checked {2}the file's "tree", .*"chain\[\]\.status"/);
    const okJson = await run(['verify', write('printed.json', file), ...trust, '--json']);
    expect(JSON.parse(okJson.out)).toMatchObject({
      valid: true,
      leaf_hash: c.sub.hash,
      unchecked: expect.arrayContaining(['tree', 'chain[].status']),
    });
    // Whatever else a file claims beside the receipts is named too, not only what the service writes.
    const claims = { ...file, verified: true, chain: file.chain.map((r) => ({ ...r, approved_by: 'security' })) };
    const claimed = await run(['verify', write('claims.json', claims), ...trust, '--json']);
    expect(claimed.code, claimed.out + claimed.err).toBe(0);
    const unchecked = (JSON.parse(claimed.out) as { unchecked: string[] }).unchecked;
    expect(unchecked).toEqual(expect.arrayContaining(['verified', 'chain[].approved_by', 'tree', 'chain[].usage']));
    // And nothing the check compares is named.
    for (const checked of ['receipts', 'root_principal', 'chain', 'chain[].policy', 'chain[].jws', 'chain[].depth'])
      expect(unchecked).not.toContain(checked);

    // The printed chain says max_calls 50 where the signed record says 5.
    const edited = structuredClone(file);
    edited.chain[1]!.policy['max_calls'] = 50;
    const r = await run(['verify', write('edited-chain.json', edited), ...trust]);
    expect(r.code, r.out + r.err).toBe(1);
    expect(r.out).toContain('NOT THAT CHAIN: chain[1].policy is not what receipts[1] signs');
    expect(r.out).not.toMatch(/VALID CHAIN/);
    // Another root principal than the root's issuer.
    const otherRoot = await run(['verify', write('other-root.json', { ...file, root_principal: c.a.did }), ...trust]);
    expect(otherRoot.code, otherRoot.out + otherRoot.err).toBe(1);
    expect(otherRoot.out).toContain(`NOT THAT CHAIN: it names "${c.a.did}" as root principal`);
    // A chain[] that leaves out a record is not the chain of its receipts.
    const short = await run(['verify', write('short-chain.json', { ...file, chain: file.chain.slice(1) }), ...trust]);
    expect(short.code).toBe(1);
    expect(short.out).toContain('NOT THAT CHAIN: its chain does not list its 2 receipt(s) one for one');
  });
});
