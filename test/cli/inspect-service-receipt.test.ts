/**
 * `baton inspect` (decode without trusting) and `baton service-receipt verify`
 * (service receipts against the published keys, online or offline).
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_SERVICE_RECEIPTS } from '../../src/cli/service-receipt.js';
import { recordHash } from '../../src/protocol/hash.js';
import { BatonClient, type SubmitResult } from '../../src/sdk/client.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle } from '../../src/sdk/records.js';
import { ARGS } from '../sdk/chains.js';
import { closedPortUrl, startLiveService, type LiveService } from '../sdk/live-service.js';
import { BIN, run, tempDir } from './helpers.js';

let live: LiveService;
let dir: string;
let submitted: SubmitResult;
let chain: {
  root: ReturnType<typeof createRootDelegation>;
  sub: ReturnType<typeof createSubDelegation>;
  b: ReturnType<typeof generateKeyPair>;
};
beforeAll(async () => {
  live = await startLiveService();
  dir = tempDir();
  const a = generateKeyPair();
  const b = generateKeyPair();
  const root = createRootDelegation({ issuer: live.tenant.root, audience: a.did, policy: { allowed_tools: ['search'], max_calls: 5 } });
  const sub = createSubDelegation({ parent: root, issuer: a, audience: b.did, policy: { allowed_tools: ['search'], max_calls: 2 } });
  chain = { root, sub, b };
  submitted = await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.issue }).submit([root, sub]);
});
afterAll(async () => {
  await live?.close();
});

/** The same JWS with one payload field changed and the old signature kept. */
function tampered(jws: string, change: (p: Record<string, unknown>) => void): string {
  const [h, p, s] = jws.split('.') as [string, string, string];
  const payload = JSON.parse(Buffer.from(p, 'base64url').toString('utf8')) as Record<string, unknown>;
  change(payload);
  return `${h}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.${s}`;
}

describe('baton inspect', () => {
  it('decodes a bundle: each record with its computed hash, issuer did:key and public key, labelled UNVERIFIED', async () => {
    const inv = createInvocation({ chain: [chain.root, chain.sub], invoker: chain.b, args: ARGS, toolServer: 'mcp://search' });
    const file = join(dir, 'bundle.json');
    writeFileSync(file, JSON.stringify(makeBundle(inv, [chain.root, chain.sub], 'value')));
    const r = await run(['inspect', file]);
    expect(r.code, r.err).toBe(0);
    expect(r.out.split('\n')[0]).toMatch(/^UNVERIFIED: decoded only\. Signatures, trust, revocation and time were NOT checked\./);
    expect(r.out).toContain('[1] invocation: invocation-receipt');
    expect(r.out).toContain(`[2] receipts[0]: delegation-receipt\n  hash       ${recordHash(chain.root.jws)}`);
    expect(r.out).toContain(
      `  issuer     ${live.tenant.root.did}\n             Ed25519 public key ${Buffer.from(live.tenant.root.publicKey).toString('base64url')}`,
    );
    expect(r.out).toMatch(/^ {2}iat {8}\d{4}-\d\d-\d\dT/m);

    const json = JSON.parse((await run(['inspect', file, '--json'])).out) as { unverified: boolean; records: { hash: string }[] };
    expect(json.unverified).toBe(true);
    expect(json.records.map((x) => x.hash)).toEqual([inv.hash, recordHash(chain.root.jws), recordHash(chain.sub.jws)]);
  });

  it('decodes what it cannot trust (a forged payload) and says nothing about validity', async () => {
    const file = join(dir, 'forged.jws');
    writeFileSync(
      file,
      tampered(chain.root.jws, (p) => (p['policy'] = { allowed_tools: ['*'] })),
    );
    const r = await run(['inspect', file]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^UNVERIFIED/);
    expect(r.out).toContain('"*"');
    expect(r.out).not.toMatch(/\bVALID\b/);
  });

  it('a service receipt inside any answer is found and named by its kind', async () => {
    const file = join(dir, 'submit.json');
    writeFileSync(file, JSON.stringify(submitted));
    const r = await run(['inspect', file]);
    expect(r.out).toMatch(/delegations\[0\]\.service_receipt\.jws: service receipt \(delegation\.accepted\)/);
  });

  it('control characters from a hostile payload are escaped, never written raw', async () => {
    const file = join(dir, 'hostile.jws');
    writeFileSync(
      file,
      tampered(chain.root.jws, (p) => (p['iss'] = 'did:key:z\u001b]0;owned\u0007\u009b2J')),
    );
    const r = await run(['inspect', file]);
    expect(r.code).toBe(0);
    expect(r.out).toContain('did:key:z\\u001b]0;owned\\u0007\\u009b2J');
    expect(r.out).not.toMatch(/[\u001b\u0007\u009b]/);
  });

  it('past the first 1000 records, says how many it found and did not show', async () => {
    const file = join(dir, 'many-records.txt');
    writeFileSync(file, `${Array<string>(1001).fill(chain.root.jws).join('\n')}\n`);
    const r = await run(['inspect', file]);
    expect(r.code, r.err).toBe(0);
    const shownOnly = 'SHOWN: the first 1000 of the 1001 signed records found; the other 1 are not shown.';
    expect(r.out.split('\n')[2]).toBe(shownOnly);
    expect(r.out).not.toContain('[1001]');
    const asJson = await run(['inspect', file, '--json']);
    expect(asJson.err).toContain(`note: ${shownOnly}`);
    const json = JSON.parse(asJson.out) as { total: number; records: unknown[] };
    expect(json.total).toBe(1001);
    expect(json.records).toHaveLength(1000);
  });

  it('input without a signed record is exit 2', async () => {
    const file = join(dir, 'nothing.json');
    writeFileSync(file, '{"hello": "world"}');
    expect((await run(['inspect', file])).code).toBe(2);
    expect((await run(['inspect', join(dir, 'missing')])).code).toBe(2);
  });

  it('reads stdin with "-" (through the real bin)', async () => {
    const { code, out } = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const child = spawn(process.execPath, [BIN, 'inspect', '-'], { stdio: ['pipe', 'pipe', 'pipe'] });
      let text = '';
      child.stdout.on('data', (d: Buffer) => (text += d.toString()));
      child.on('close', (c) => resolve({ code: c, out: text }));
      child.stdin.end(`${chain.sub.jws}\n`);
    });
    expect(code).toBe(0);
    expect(out).toContain(`[1] line 1: delegation-receipt\n  hash       ${recordHash(chain.sub.jws)}`);
  }, 60_000);
});

describe('baton service-receipt verify', () => {
  it('checks the service receipts in an answer against the fetched keys, saves them, then verifies offline', async () => {
    const file = join(dir, 'answer.json');
    writeFileSync(file, JSON.stringify(submitted));
    const keysFile = join(dir, 'keys.json');
    const online = await run(['service-receipt', 'verify', file, '--server', live.baseUrl, '--save-keys', keysFile]);
    expect(online.code, online.err).toBe(0);
    expect(online.out).toMatch(/^VALID {4}.*delegations\[0\]\.service_receipt\.jws {2}delegation\.accepted sha256:/m);
    expect(online.out).toContain('2 of 2 service receipt(s) valid.');

    // Offline: nothing listens at --server, the saved keys are enough.
    const offline = await run(['service-receipt', 'verify', file, '--keys', keysFile, '--server', await closedPortUrl()]);
    expect(offline.code, offline.err).toBe(0);
    // The JWKS form works too.
    const jwks = join(dir, 'jwks.json');
    writeFileSync(jwks, JSON.stringify(await new BatonClient({ baseUrl: live.baseUrl }).jwks()));
    expect((await run(['service-receipt', 'verify', file, '--keys', jwks])).code).toBe(0);
  });

  it('a changed payload or another key is INVALID, exit 1', async () => {
    const serviceReceipt = submitted.delegations[0]!.service_receipt!.jws;
    const file = join(dir, 'bad-service-receipt.jws');
    writeFileSync(file, `${tampered(serviceReceipt, (p) => (p['subject'] = 'sha256:' + '0'.repeat(64)))}\n${serviceReceipt}\n`);
    const r = await run(['service-receipt', 'verify', file, '--server', live.baseUrl]);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/^INVALID {2}.*line 1 .*(signature|canonical)/m);
    expect(r.out).toMatch(/^VALID {4}.*line 2/m);
    expect(r.out).toContain('1 of 2 service receipt(s) valid, 1 INVALID.');

    // Keys that are not the service's: every service receipt invalid.
    const kid = submitted.delegations[0]!.service_receipt!.kid;
    const impostor = join(dir, 'impostor.json');
    writeFileSync(
      impostor,
      JSON.stringify({ keys: [{ kid, public_key: Buffer.from(generateKeyPair().publicKey).toString('base64url') }] }),
    );
    const wrong = await run(['service-receipt', 'verify', join(dir, 'answer.json'), '--keys', impostor, '--json']);
    expect(wrong.code).toBe(1);
    expect(JSON.parse(wrong.out)).toMatchObject({ valid: false, invalid: 2 });
  });

  /** A new call of `search` through the test chain, verified on /v1/verify. */
  const verifySearch = async () => {
    const inv = createInvocation({
      chain: [chain.root, chain.sub],
      invoker: chain.b,
      args: { tool: 'search', pii_access: false, write_access: false },
      toolServer: 'mcp://tools.example.com',
    });
    const res = await fetch(`${live.baseUrl}/v1/verify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${live.tenant.keys.verify}` },
      body: JSON.stringify(makeBundle(inv, [chain.root, chain.sub], 'reference')),
    });
    return { inv, res };
  };

  it('a valid receipt attached to another record, or naming another tenant than --tenant, is INVALID', async () => {
    const keysFile = join(dir, 'keys-swap.json');
    writeFileSync(keysFile, JSON.stringify(await new BatonClient({ baseUrl: live.baseUrl }).keys()));
    const [first, second] = submitted.delegations as [(typeof submitted.delegations)[number], (typeof submitted.delegations)[number]];
    // The two records' receipts swapped: each signature holds, each is about the other record.
    const swapped = {
      ...submitted,
      delegations: [
        { ...first, service_receipt: second.service_receipt },
        { ...second, service_receipt: first.service_receipt },
      ],
    };
    const file = join(dir, 'swapped.json');
    writeFileSync(file, JSON.stringify(swapped));
    const r = await run(['service-receipt', 'verify', file, '--keys', keysFile]);
    expect(r.code, r.out + r.err).toBe(1);
    expect(r.out).toMatch(
      new RegExp(`^INVALID .*signed, but about ${second.hash}, not (.* or )?${first.hash}( or .*)? it is attached to`, 'm'),
    );
    expect(r.out).toContain('0 of 2 service receipt(s) valid, 2 INVALID.');

    const intact = join(dir, 'intact.json');
    writeFileSync(intact, JSON.stringify(submitted));
    expect((await run(['service-receipt', 'verify', intact, '--keys', keysFile, '--tenant', live.tenant.id])).code).toBe(0);
    // A page of GET /v1/invocations: each allow's receipt is about the call's jti, beside its hash.
    const { inv, res: allowed } = await verifySearch();
    expect(allowed.status).toBe(200);
    const page = await fetch(`${live.baseUrl}/v1/invocations`, { headers: { authorization: `Bearer ${live.tenant.keys.audit}` } });
    const pageFile = join(dir, 'invocations.json');
    writeFileSync(pageFile, await page.text());
    const listed = await run(['service-receipt', 'verify', pageFile, '--keys', keysFile]);
    expect(listed.code, listed.out + listed.err).toBe(0);
    expect(listed.out).toMatch(new RegExp(`^VALID .*invocation\\.allowed ${inv.payload.jti}`, 'm'));

    const otherTenant = await run(['service-receipt', 'verify', intact, '--keys', keysFile, '--tenant', 'ten_someone_else']);
    expect(otherTenant.code).toBe(1);
    expect(otherTenant.out).toMatch(new RegExp(`signed, but for tenant ${live.tenant.id}, not ten_someone_else`));
  });

  it('a verify answer whose unsigned members contradict its signed receipt is INVALID', async () => {
    const keysFile = join(dir, 'keys-answer.json');
    writeFileSync(keysFile, JSON.stringify(await new BatonClient({ baseUrl: live.baseUrl }).keys()));
    // An allow (a denial answer carries no service receipt: it is stored, GET /v1/service-receipts lists it).
    const { res } = await verifySearch();
    const allowed = (await res.json()) as Record<string, unknown> & { context: Record<string, unknown> };
    const check = async (answer: unknown) => {
      const file = join(dir, `answer-${Math.random().toString(36).slice(2)}.json`);
      writeFileSync(file, JSON.stringify(answer));
      return run(['service-receipt', 'verify', file, '--keys', keysFile]);
    };
    expect(allowed['valid']).toBe(true);
    expect((await check(allowed)).code).toBe(0);
    const edits: [string, Record<string, unknown>, RegExp][] = [
      ['valid flipped', { ...allowed, valid: false }, /signed invocation\.allowed, but the answer around it says valid: false/],
      [
        'another chain',
        { ...allowed, context: { ...allowed.context, dr_chain: ['sha256:' + '1'.repeat(64)] } },
        /signed context\.dr_chain \["sha256:[0-9a-f]{64}"(,"sha256:[0-9a-f]{64}")*\], but the answer around it says \["sha256:1{64}"\]/,
      ],
      [
        'another tool',
        { ...allowed, context: { ...allowed.context, tool: 'file_write' } },
        /signed context\.tool "search", but the answer around it says "file_write"/,
      ],
      [
        'another tool server',
        { ...allowed, context: { ...allowed.context, tool_server: 'mcp://evil' } },
        /signed context\.tool_server "[^"]+", but the answer around it says "mcp:\/\/evil"/,
      ],
      [
        'another invocation hash',
        { ...allowed, context: { ...allowed.context, invocation_hash: 'sha256:' + '2'.repeat(64) } },
        /signed context\.invocation_hash "sha256:[0-9a-f]{64}", but the answer around it says "sha256:2{64}"/,
      ],
      ['a dry run', { ...allowed, dry_run: true }, /says dry_run: true \(a dry run carries no service receipt\)/],
    ];
    for (const [what, answer, why] of edits) {
      const r = await check(answer);
      expect(r.code, `${what}: ${r.out}${r.err}`).toBe(1);
      expect(r.out, what).toMatch(why);
    }
  });

  it('every answer kind holding a receipt: real answers are VALID, and each signed member edited is INVALID', async () => {
    const keysFile = join(dir, 'keys-kinds.json');
    writeFileSync(keysFile, JSON.stringify(await new BatonClient({ baseUrl: live.baseUrl }).keys()));
    const a = generateKeyPair();
    const b = generateKeyPair();
    const root = createRootDelegation({ issuer: live.tenant.root, audience: a.did, policy: { allowed_tools: ['search'], max_calls: 9 } });
    const sub = createSubDelegation({ parent: root, issuer: a, audience: b.did, policy: { allowed_tools: ['search'], max_calls: 9 } });
    const post = async (path: string, key: string, body: unknown) => {
      const res = await fetch(`${live.baseUrl}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify(body),
      });
      return (await res.json()) as Record<string, unknown>;
    };
    const get = async (path: string) =>
      (await (await fetch(`${live.baseUrl}${path}`, { headers: { authorization: `Bearer ${live.tenant.keys.audit}` } })).json()) as Record<
        string,
        unknown
      >;
    const submission = await post('/v1/delegations', live.tenant.keys.issue, { receipts: [root.jws, sub.jws] });
    const args = { tool: 'search', pii_access: false, write_access: false };
    const inv = createInvocation({ chain: [root, sub], invoker: b, args, toolServer: 'mcp://tools.example.com' });
    const allowed = await post('/v1/verify', live.tenant.keys.verify, makeBundle(inv, [root, sub], 'reference'));
    const jti = inv.payload.jti;
    const actual = await post(`/v1/invocations/${encodeURIComponent(jti)}/actuals`, live.tenant.keys.report, {
      cost_usd: 0.25,
      source: 'api-usage',
    });
    const read = await get(`/v1/invocations/${encodeURIComponent(jti)}`);
    const listed = await get(`/v1/invocations?dr=${encodeURIComponent(sub.hash)}`);
    const revoked = await post(`/v1/delegations/${sub.hash}/revoke`, live.tenant.keys.issue, { confirm: true, reason: 'done' });
    const verifyFile = async (answer: unknown) => {
      const file = join(dir, `kinds-${Math.random().toString(36).slice(2)}.json`);
      writeFileSync(file, JSON.stringify(answer));
      return run(['service-receipt', 'verify', file, '--keys', keysFile]);
    };
    for (const [what, answer] of Object.entries({ submission, allowed, actual, read, listed, revoked })) {
      const r = await verifyFile(answer);
      expect(r.code, `${what}: ${r.out}${r.err}`).toBe(0);
    }
    const items = listed['invocations'] as Record<string, unknown>[];
    const item = items[0]!;
    const otherActual = { ...(item['actual'] as object), service_receipt: allowed['service_receipt'] };
    const context = allowed['context'] as Record<string, unknown>;
    const delegations = submission['delegations'] as Record<string, unknown>[];
    const edits: [string, unknown, RegExp][] = [
      ['valid as a string', { ...allowed, valid: 'true', context: { ...context, tool_server: 'mcp://evil' } }, /says valid: "true"/],
      [
        'valid left out',
        { ...allowed, valid: undefined, context: { ...context, tool_server: 'mcp://evil' } },
        /shows none of valid, decision/,
      ],
      ['a number for the call', { ...allowed, invocation_id: 1 }, /non-string invocation_id/],
      ['dry_run as a string', { ...allowed, dry_run: 'true' }, /says dry_run: "true"/],
      [
        'another jti in the context',
        { ...allowed, context: { ...context, invocation_jti: 'inv:other' } },
        /signed context\.invocation_jti/,
      ],
      ['a listed call: another tool', { ...listed, invocations: [{ ...item, tool: 'delete_everything' }] }, /signed tool "search"/],
      ['a listed call: another caller', { ...listed, invocations: [{ ...item, caller_key_id: 'key_x' }] }, /signed caller_key_id/],
      ['a listed call: denied', { ...listed, invocations: [{ ...item, decision: 'denied' }] }, /says decision: "denied"/],
      [
        'a nested actual: the allow swapped in',
        { ...listed, invocations: [{ ...item, actual: otherActual }] },
        /signed invocation\.allowed, but it is where an answer with source holds its actual\.recorded receipt/,
      ],
      ['an actual: another cost', { ...actual, cost_usd: 0.01 }, /signed cost_usd 0\.25, but the answer around it says 0\.01/],
      [
        'an actual without its source, the allow swapped in',
        { ...actual, source: undefined, cost_usd: 0.000001, service_receipt: allowed['service_receipt'] },
        /signed invocation\.allowed, but it is where an answer with cost_usd holds its actual\.recorded receipt/,
      ],
      [
        'an actual passing as an invocation, the allow swapped in',
        { ...actual, source: undefined, decision: 'allowed', cost_usd: 0.000001, service_receipt: allowed['service_receipt'] },
        /signed invocation\.allowed, but it is where an answer with cost_usd holds its actual\.recorded receipt/,
      ],
      [
        'a listed call: another estimate',
        { ...listed, invocations: [{ ...item, declared_usd: 5 }] },
        /signed declared_usd 0, but the answer around it says 5/,
      ],
      ['a listed call: another hash', { ...listed, invocations: [{ ...item, hash: 'sha256:' + '3'.repeat(64) }] }, /signed hash/],
      ['a revocation: another tenant', { ...revoked, tenant_id: 'ten_other' }, /says tenant_id "ten_other"/],
      ['a revocation: another reason', { ...revoked, reason: 'never' }, /signed reason "done"/],
      [
        'a submission: another depth',
        { ...submission, delegations: [delegations[0], { ...delegations[1], depth: 0 }] },
        /signed depth 1, but the answer around it says 0/,
      ],
    ];
    for (const [what, answer, why] of edits) {
      const r = await verifyFile(answer);
      expect(r.code, `${what}: ${r.out}${r.err}`).toBe(1);
      expect(r.out, what).toMatch(why);
    }
  });

  it("--fetch checks the tenant's service receipts from GET /v1/service-receipts", async () => {
    const r = await run(['service-receipt', 'verify', '--fetch', '--server', live.baseUrl, '--api-key', live.tenant.keys.audit, '--json']);
    expect(r.code, r.err).toBe(0);
    const out = JSON.parse(r.out) as { valid: boolean; checked: number; note?: string };
    expect(out.valid).toBe(true);
    expect(out.checked).toBeGreaterThanOrEqual(2);
    // Receipts and keys both from the service checked: said, with how to pin the keys.
    const tofu = `the keys came from the service being checked (${live.baseUrl}/v1/keys)`;
    expect(out.note).toContain(tofu);
    expect(out.note).toContain('pin the keys with --keys <file> (saved with --save-keys from a source you trust)');
    const text = await run(['service-receipt', 'verify', '--fetch', '--server', live.baseUrl, '--api-key', live.tenant.keys.audit]);
    expect(text.code, text.err).toBe(0);
    expect(text.err).toContain(`note: ${tofu}`);
    expect(text.out).not.toContain('note:');

    // With pinned keys there is nothing to say.
    const keysFile = join(dir, 'pinned-keys.json');
    writeFileSync(keysFile, JSON.stringify(await new BatonClient({ baseUrl: live.baseUrl }).keys()));
    const pinned = await run([
      'service-receipt',
      'verify',
      '--fetch',
      '--keys',
      keysFile,
      '--server',
      live.baseUrl,
      '--api-key',
      live.tenant.keys.audit,
      '--json',
    ]);
    expect(pinned.code, pinned.err).toBe(0);
    expect(JSON.parse(pinned.out)).not.toHaveProperty('note');
    expect(pinned.err).not.toContain('note:');
  });

  it('--fetch past --limit says more follow and the --after to go on from, in text and --json; --all checks every one', async () => {
    const A = ['service-receipt', 'verify', '--fetch', '--server', live.baseUrl, '--api-key', live.tenant.keys.audit];
    const all = JSON.parse((await run([...A, '--all', '--json'])).out) as {
      checked: number;
      next_after: number | null;
      results: unknown[];
    };
    expect(all.checked).toBeGreaterThanOrEqual(2);
    expect(all.next_after).toBeNull();

    const first = await run([...A, '--limit', '1']);
    expect(first.code, first.err).toBe(0);
    const id = Number(/VALID {4}service receipt #(\d+) /.exec(first.out)?.[1]);
    expect(first.out).toContain('1 of 1 service receipt(s) valid; more follow, not checked.');
    expect(first.out).toContain(
      `more: service receipts after #${id} were not checked (--limit 1): baton service-receipt verify --fetch --after ${id}`,
    );
    const json = JSON.parse((await run([...A, '--limit', '1', '--json'])).out) as { checked: number; next_after: number | null };
    expect(json).toMatchObject({ valid: true, checked: 1, next_after: id });

    // Going on from there checks the rest; the last page says nothing more follows.
    const rest = JSON.parse((await run([...A, '--after', String(id), '--json'])).out) as { checked: number; next_after: number | null };
    expect(rest).toMatchObject({ checked: all.checked - 1, next_after: null });
    expect((await run([...A])).out).not.toContain('more:');
    expect((await run([...A, '--all', '--limit', '5'])).code).toBe(2);
  });

  it('--fetch without an API key is refused before any request, naming the route that needs the audit key', async () => {
    // Nothing listens at --server: a request would be exit 3, so exit 2 shows nothing was sent.
    const r = await run(['service-receipt', 'verify', '--fetch', '--server', await closedPortUrl()]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('--fetch reads GET /v1/service-receipts, which needs an API key with the audit scope');
    expect(r.err).toMatch(/pass --api-key <key>, set BATON_API_KEY, or use a context/);
    expect(r.err).not.toContain('fetching');

    // The key from the environment counts; the progress lines say which request needs it.
    const env = await run(['service-receipt', 'verify', '--fetch', '--server', live.baseUrl], { BATON_API_KEY: live.tenant.keys.audit });
    expect(env.code, env.err).toBe(0);
    expect(env.err).toContain(`${live.baseUrl}/v1/keys (public, no API key needed)`);
    expect(env.err).toContain(`fetching service receipts from ${live.baseUrl}/v1/service-receipts (audit key)`);
  });

  it('checks every service receipt of a file: a forgery past the first 1000 records is INVALID', async () => {
    const keysFile = join(dir, 'keys-many.json');
    writeFileSync(keysFile, JSON.stringify(await new BatonClient({ baseUrl: live.baseUrl }).keys()));
    const serviceReceipt = submitted.delegations[0]!.service_receipt!.jws;
    const forged = tampered(serviceReceipt, (p) => (p['subject'] = 'sha256:' + '0'.repeat(64)));
    const lines = (records: readonly string[]) => `${records.join('\n')}\n`;

    const afterReceipts = join(dir, 'many-receipts.txt');
    writeFileSync(afterReceipts, lines([...Array<string>(1000).fill(serviceReceipt), forged]));
    const r = await run(['service-receipt', 'verify', afterReceipts, '--keys', keysFile]);
    expect(r.code, r.err).toBe(1);
    expect(r.out).toMatch(/^INVALID {2}.*line 1001 /m);
    expect(r.out).toContain('1000 of 1001 service receipt(s) valid, 1 INVALID.');

    // DRS records ahead of it do not count towards any limit: the service receipt is still found.
    const afterRecords = join(dir, 'many-records-one-receipt.txt');
    writeFileSync(afterRecords, lines([...Array<string>(1000).fill(chain.root.jws), forged]));
    const behind = await run(['service-receipt', 'verify', afterRecords, '--keys', keysFile, '--json']);
    expect(behind.code, behind.err).toBe(1);
    expect(JSON.parse(behind.out)).toMatchObject({ valid: false, checked: 1, invalid: 1 });

    // Past the limit, the whole file is refused, never checked in part.
    const tooMany = join(dir, 'too-many-receipts.txt');
    writeFileSync(tooMany, lines(Array<string>(MAX_SERVICE_RECEIPTS + 1).fill(serviceReceipt)));
    const refused = await run(['service-receipt', 'verify', tooMany, '--keys', keysFile]);
    expect(refused.code).toBe(2);
    expect(refused.err).toContain(
      `holds ${MAX_SERVICE_RECEIPTS + 1} service receipts, more than the ${MAX_SERVICE_RECEIPTS} checked from one input; none was checked. Split it`,
    );
    expect(refused.out).not.toContain('VALID');
  });

  it('every string where an answer carries a receipt is checked: one that cannot be read is INVALID, never skipped', async () => {
    const keysFile = join(dir, 'keys-unreadable.json');
    writeFileSync(keysFile, JSON.stringify(await new BatonClient({ baseUrl: live.baseUrl }).keys()));
    const genuine = submitted.delegations[1]!.service_receipt!.jws;
    const [header, payload, signature] = genuine.split('.') as [string, string, string];
    const kid = submitted.delegations[1]!.service_receipt!.kid;
    const noAlg = `${Buffer.from(JSON.stringify({ kid })).toString('base64url')}.${payload}.${signature}`;
    const padded = Buffer.from(JSON.stringify({ pad: 'x'.repeat(1024 * 1024) })).toString('base64url');
    const tooLong = `${header}.${padded}.${signature}`;
    const withReceipt = (jws: string, extra: Record<string, unknown> = {}) => ({
      ...submitted,
      ...extra,
      delegations: [submitted.delegations[0], { ...submitted.delegations[1], service_receipt: { kid, jws } }],
    });
    const cases: [string, unknown, RegExp][] = [
      ['no alg', withReceipt(noAlg), /^INVALID {2}.*delegations\[1\]\.service_receipt\.jws {2}not a readable compact JWS$/m],
      [
        'a leading space',
        withReceipt(` ${genuine}`),
        /^INVALID {2}.*delegations\[1\]\.service_receipt\.jws {2}not a readable compact JWS$/m,
      ],
      [
        'a bare string',
        { hash: submitted.delegations[1]!.hash, service_receipt: `${genuine}\n` },
        /^INVALID {2}.*: service_receipt {2}not a readable/m,
      ],
      [
        'over 1 MiB',
        withReceipt(tooLong),
        /^INVALID {2}.*delegations\[1\]\.service_receipt\.jws {2}not a compact JWS string of acceptable length/m,
      ],
      // Not in a receipt's place, but shaped like one and naming a kid: found whatever its length.
      [
        'over 1 MiB elsewhere',
        withReceipt(genuine, { note: tooLong }),
        /^INVALID {2}.*: note {2}not a compact JWS string of acceptable length/m,
      ],
    ];
    for (const [what, answer, why] of cases) {
      const file = join(dir, 'unreadable-receipt.json');
      writeFileSync(file, JSON.stringify(answer));
      const r = await run(['service-receipt', 'verify', file, '--keys', keysFile]);
      expect(r.code, `${what}: ${r.out}${r.err}`).toBe(1);
      expect(r.out, what).toMatch(why);
      expect(r.out, what).toMatch(/ service receipt\(s\) valid, 1 INVALID\.$/m);
    }
  });

  it('the base64url bundle form is checked as its JSON is (a swapped receipt is INVALID); a byte-order mark is read past', async () => {
    const keysFile = join(dir, 'keys-forms.json');
    writeFileSync(keysFile, JSON.stringify(await new BatonClient({ baseUrl: live.baseUrl }).keys()));
    const [first, second] = submitted.delegations as [(typeof submitted.delegations)[number], (typeof submitted.delegations)[number]];
    const swapped = { hash: first.hash, service_receipt: second.service_receipt };
    const encoded = join(dir, 'swapped.b64');
    writeFileSync(encoded, Buffer.from(JSON.stringify(swapped)).toString('base64url'));
    const r = await run(['service-receipt', 'verify', encoded, '--keys', keysFile]);
    expect(r.code, r.out + r.err).toBe(1);
    expect(r.out).toMatch(new RegExp(`^INVALID {2}.*: service_receipt\\.jws {2}signed, but about ${second.hash}, not ${first.hash}`, 'm'));

    const withMark = join(dir, 'bom.json');
    writeFileSync(withMark, `\ufeff${JSON.stringify(submitted)}`);
    const marked = await run(['service-receipt', 'verify', withMark, '--keys', keysFile]);
    expect(marked.code, marked.out + marked.err).toBe(0);
    expect(marked.out).toContain('2 of 2 service receipt(s) valid.');
  });

  it('a file with DRS records but no service receipt, or no input, is exit 2', async () => {
    const file = join(dir, 'chain-only.json');
    writeFileSync(file, JSON.stringify({ receipts: [chain.root.jws] }));
    const r = await run(['service-receipt', 'verify', file, '--server', live.baseUrl]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('no service receipt');
    expect((await run(['service-receipt', 'verify'])).code).toBe(2);
    expect((await run(['service-receipt', 'verfy'])).err).toContain('did you mean "baton service-receipt verify"?');
    expect(readFileSync(file, 'utf8')).toContain(chain.root.jws);
  });
});
