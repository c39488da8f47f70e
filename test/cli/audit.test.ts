/**
 * `baton audit` over real HTTP: a clean log passes; a receipt deleted behind the service is reported (exit 1);
 * a checkpoint that does not open is named, with a hint when it is another tenant's.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { signCheckpoint } from '../../src/service/log-tree.js';
import { silentLogger } from '../../src/service/log.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { auditLog } from '../../src/sdk/audit.js';
import { createTenantKey, setupTenant } from '../support/service.js';
import { closedPortUrl, startLiveService, startSilentServer, type LiveService } from '../sdk/live-service.js';
import { run, tempDir, witnessCosigned } from './helpers.js';

let live: LiveService;
let A: string[];
const ids: number[] = [];

beforeAll(async () => {
  live = await startLiveService();
  A = ['--server', live.baseUrl, '--api-key', live.tenant.keys.audit];
  for (let i = 0; i < 40; i++) {
    const r = await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
      tenantId: live.tenant.id,
      kind: 'invocation.denied',
      subject: `inv:${i}`,
      data: { i },
      now: live.svc.clock.now,
    });
    ids.push(r.id);
  }
  await integrateOnce({ store: live.svc.store, signer: live.svc.deps.signer, log: silentLogger, logName: live.svc.deps.config.tlogName });
});
afterAll(async () => {
  await live?.close();
});

/**
 * An HTTP proxy in front of the live service: `rewrite` may answer a path itself (a hostile or broken
 * log); everything else is forwarded as it is.
 */
async function startProxy(
  rewrite: (path: string) => Promise<{ status?: number; body: string | Uint8Array; type?: string } | undefined>,
): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      const path = req.url ?? '/';
      const own = await rewrite(new URL(path, 'http://proxy').pathname);
      if (own !== undefined) {
        res.writeHead(own.status ?? 200, { 'content-type': own.type ?? 'text/plain; charset=utf-8' });
        res.end(typeof own.body === 'string' ? own.body : Buffer.from(own.body));
        return;
      }
      const upstream = await fetch(`${live.baseUrl}${path}`, { headers: { authorization: req.headers.authorization ?? '' } });
      res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/octet-stream' });
      res.end(Buffer.from(await upstream.arrayBuffer()));
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return {
    url: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * What a log rolled back to `size` leaves answers for a consistency proof past it: Baton's own 404,
 * its size in details. Anyone in the path can forge it, so it is no evidence: a genuine older note
 * served as the latest is a stale view (a cache ignoring no-cache) when the larger's tiles hold it.
 */
const rolledBackTo = (size: number) => ({
  status: 404,
  type: 'application/json',
  body: JSON.stringify({ error: { code: 'NOT_FOUND', message: `The log has ${size} leaves.`, details: { tree_size: size } } }),
});

/** A checkpoint of `size` leaves the tenant's log signed over another history: a rollback no tile holds. */
async function forgedNote(key: string, size: number): Promise<string> {
  const info = (await (await fetch(`${live.baseUrl}/v1/log`, { headers: { authorization: `Bearer ${key}` } })).json()) as {
    origin: string;
  };
  return signCheckpoint(live.svc.deps.signer, info.origin, size, new Uint8Array(randomBytes(32)));
}

/** A tenant of its own on the live service, with `n` denials logged. */
async function loggedTenant(name: string, n: number) {
  const t = await setupTenant(live.svc, name);
  await addReceipts(t.id, n);
  return t;
}

async function addReceipts(tenantId: string, n: number) {
  for (let i = 0; i < n; i++)
    await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
      tenantId,
      kind: 'invocation.denied',
      subject: `inv:${tenantId}:${i}:${Math.random()}`,
      data: { i },
      now: live.svc.clock.now,
    });
  await integrateOnce({ store: live.svc.store, signer: live.svc.deps.signer, log: silentLogger, logName: live.svc.deps.config.tlogName });
}

describe('baton audit', () => {
  it('--help explains what is checked', async () => {
    const r = await run(['audit', '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/recomputes the Merkle root/);
    expect(r.out).toMatch(/re-verifies every decision's delegation chain/);
    expect((await run(['help'])).out + (await run(['--help'])).out).toMatch(/audit/);
  });

  it('passes on an intact log, with progress, pinned trust and a saved checkpoint', async () => {
    const dir = tempDir();
    const res = await fetch(`${live.baseUrl}/v1/log`, { headers: { authorization: `Bearer ${live.tenant.keys.audit}` } });
    const info = (await res.json()) as { origin: string; verifier_keys: string[] };
    writeFileSync(join(dir, 'trust.json'), JSON.stringify({ origin: info.origin, logKeys: info.verifier_keys }));
    const r = await run(['audit', ...A, '--trust', join(dir, 'trust.json'), '--save-checkpoint', join(dir, 'cp.txt')]);
    expect(r.code, r.out + r.err).toBe(0);
    expect(r.out).toMatch(/^OK: log .*, 40 entries/);
    expect(r.err).toMatch(/audit: 40\/40 entries checked/);
    expect(r.out).toMatch(/decisions checked +40/);
    expect(r.out).toMatch(/not checked +revocation, call counters and spend budgets/);
    expect(r.out).toMatch(/decision roots not checked for trust; pin them with --root/);
    expect(readFileSync(join(dir, 'cp.txt'), 'utf8')).toContain('\n40\n');
    // A saved GET /v1/log answer pins the same keys, as it is.
    writeFileSync(join(dir, 'log.json'), JSON.stringify(info));
    const saved = await run(['audit', ...A, '--quiet', '--trust', join(dir, 'log.json')]);
    expect(saved.code, saved.out + saved.err).toBe(0);
    expect(saved.out).not.toMatch(/log keys taken from the service/);
  });

  it('uses the saved context like every other online command: the current one, --context or $BATON_CONTEXT', async () => {
    const env = { XDG_CONFIG_HOME: tempDir() };
    const add = async (...argv: string[]) => expect((await run(['context', 'add', ...argv], env)).code).toBe(0);
    await add('aud', '--server', live.baseUrl, '--key', live.tenant.keys.audit);
    // The current context: no flags at all.
    const current = await run(['audit', '--quiet'], env);
    expect(current.code, current.out + current.err).toBe(0);
    expect(current.out).toMatch(/^OK: log .*, 40 entries/);
    // Another context made current (a server where nothing listens): --context and $BATON_CONTEXT pick "aud".
    await add('down', '--server', await closedPortUrl(), '--key', 'bt_elsewhere', '--use');
    expect((await run(['audit', '--quiet', '--context', 'aud'], env)).code).toBe(0);
    expect((await run(['audit', '--quiet'], { ...env, BATON_CONTEXT: 'aud' })).code).toBe(0);
    const down = await run(['audit', '--quiet'], env);
    expect(down.code).toBe(3);
    expect(down.err).toMatch(/FAILED: baton audit: NETWORK_ERROR/);
    // --api-key replaces the context's key, as for every command.
    const wrongKey = await run(['audit', '--quiet', '--context', 'aud', '--api-key', 'bt_wrong'], env);
    expect(wrongKey.err).toMatch(/UNAUTHORIZED \[HTTP 401\]/);
    const unknown = await run(['audit', '--context', 'nope'], env);
    expect(unknown.code).toBe(2);
    expect(unknown.err).toMatch(/no context named "nope"/);
    await add('nokey', '--server', live.baseUrl);
    const noKey = await run(['audit', '--context', 'nokey'], env);
    expect(noKey.code).toBe(2);
    expect(noKey.err).toMatch(/give --api-key .*context "nokey" has no key/);
  });

  it('a refused key is a refusal (exit 1) naming the audit scope, not unusable input', async () => {
    const unknown = await run(['audit', '--server', live.baseUrl, '--api-key', 'bt_wrong']);
    expect(unknown.code).toBe(1);
    expect(unknown.err).toMatch(/^REFUSED: baton audit: UNAUTHORIZED \[HTTP 401\]/);
    expect(unknown.err).toMatch(/audit scope/);
    expect(unknown.err).not.toMatch(/INVALID_REQUEST|nothing was signed or sent/);
    expect(unknown.out).toBe('');

    const verifyOnly = await run(['audit', '--server', live.baseUrl, '--api-key', live.tenant.keys.verify]);
    expect(verifyOnly.code).toBe(1);
    expect(verifyOnly.err).toMatch(/^REFUSED: baton audit: FORBIDDEN \[HTTP 403\]/);
    expect(verifyOnly.err).toMatch(/scopes: audit/);
    expect(verifyOnly.err).toMatch(/Request id: /);

    const json = await run(['audit', '--server', live.baseUrl, '--api-key', live.tenant.keys.verify, '--json']);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.out)).toMatchObject({ error: { code: 'FORBIDDEN', details: { required_scopes: ['audit'] } }, status: 403 });

    // Revoked while it audits is the same refusal: the log, tiles and entry bundles all need the key.
    const key = await createTenantKey(live.svc, live.tenant.id, ['audit'], 'revoked');
    const keys = await live.svc.call('GET', `/v1/admin/tenants/${live.tenant.id}/api-keys`, { key: live.svc.adminKey });
    const id = (keys.body.api_keys as { id: string; name: string | null }[]).find((k) => k.name === 'revoked')!.id;
    expect((await live.svc.call('DELETE', `/v1/admin/api-keys/${id}`, { key: live.svc.adminKey })).status).toBeLessThan(300);
    const revoked = await run(['audit', '--server', live.baseUrl, '--api-key', key]);
    expect(revoked.code).toBe(1);
    expect(revoked.err).toMatch(/UNAUTHORIZED \[HTTP 401\]/);
  });

  it("a checkpoint that does not open is named (current or --previous), with a hint when it is another tenant's log", async () => {
    const dir = tempDir();
    const other = await setupTenant(live.svc, 'other');
    await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
      tenantId: other.id,
      kind: 'invocation.denied',
      subject: 'inv:other',
      data: {},
      now: live.svc.clock.now,
    });
    await integrateOnce({ store: live.svc.store, signer: live.svc.deps.signer, log: silentLogger, logName: live.svc.deps.config.tlogName });
    const read = async (path: string, key: string) =>
      (await fetch(`${live.baseUrl}${path}`, { headers: { authorization: `Bearer ${key}` } })).text();
    const [mine, theirs] = [
      JSON.parse(await read('/v1/log', live.tenant.keys.audit)),
      JSON.parse(await read('/v1/log', other.keys.audit)),
    ] as {
      origin: string;
    }[];
    writeFileSync(join(dir, 'theirs.txt'), await read('/v1/log/checkpoint', other.keys.audit));
    writeFileSync(join(dir, 'their-keys.json'), await read('/v1/log', other.keys.audit));

    const previous = await run(['audit', ...A, '--quiet', '--previous', join(dir, 'theirs.txt')]);
    expect(previous.code, previous.out + previous.err).toBe(1);
    expect(previous.err).toMatch(/^REFUSED: baton audit: NOTE_NOT_VERIFIED/);
    expect(previous.err).toMatch(
      /The earlier checkpoint given to compare with \(previousCheckpoint; baton audit --previous\) is refused: No trusted key signed the note/,
    );
    expect(previous.err).toContain(
      `That note names the log ${theirs!.origin}, not ${mine!.origin}: likely a checkpoint of another tenant's log`,
    );
    expect(previous.err).not.toMatch(/nothing was signed or sent/);
    expect(previous.err).toMatch(/Found by this audit/);

    const pinned = await run(['audit', ...A, '--quiet', '--trust', join(dir, 'their-keys.json')]);
    expect(pinned.code, pinned.out + pinned.err).toBe(1);
    expect(pinned.err).toMatch(/The log's current checkpoint \(GET \/v1\/log\/checkpoint\) is refused: No trusted key signed the note/);
    expect(pinned.err).toContain(`the pinned log keys (trust; baton audit --trust), of ${theirs!.origin}`);
    expect(pinned.err).toContain(`the log ${mine!.origin}, and the pinned keys are for ${theirs!.origin}: another tenant's log`);
    expect(pinned.err).not.toMatch(/nothing was signed or sent/);
    const json = await run(['audit', ...A, '--json', '--trust', join(dir, 'their-keys.json')]);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.out)).toMatchObject({
      error: { code: 'NOTE_NOT_VERIFIED', message: expect.stringMatching(/current checkpoint/), details: { checkpoint: 'current' } },
    });
  });

  it('reports a service receipt deleted by a superuser behind the service (exit 1)', async () => {
    const su = postgres(live.svc.url, { max: 1, onnotice: () => {} });
    try {
      await su.begin(async (tx) => {
        await tx`set local session_replication_role = replica`;
        await tx`delete from receipts where id = ${ids[7]!}`;
      });
    } finally {
      await su.end();
    }
    const r = await run(['audit', ...A, '--json']);
    expect(r.code).toBe(1);
    const report = JSON.parse(r.out);
    expect(report.ok).toBe(false);
    expect(report.findings).toContainEqual(expect.objectContaining({ kind: 'missing', index: 7 }));
    const text = await run(['audit', ...A, '--quiet']);
    expect(text.out).toMatch(/missing +entry 7/);
    expect(text.err).toBe('');
  });

  it('a service that is down or never answers: NETWORK_ERROR or TIMEOUT with what to do, exit 3 (not 1, findings)', async () => {
    const url = await closedPortUrl();
    const down = await run(['audit', '--server', url, '--api-key', 'bt_x']);
    expect(down.code).toBe(3);
    expect(down.err).toMatch(/^FAILED: baton audit: NETWORK_ERROR/);
    expect(down.err).toContain(url);
    expect(down.err).toMatch(/ECONNREFUSED/);
    expect(down.err).toMatch(/What to do:\n {2}- .*baton serve/);
    expect(down.err).not.toMatch(/TypeError|fetch failed|\n\s+at /);
    const json = await run(['audit', '--server', url, '--api-key', 'bt_x', '--json']);
    expect(json.code).toBe(3);
    expect(JSON.parse(json.out)).toMatchObject({ error: { code: 'NETWORK_ERROR', suggestion: expect.any(String) } });

    const silent = await startSilentServer();
    try {
      const started = Date.now();
      const slow = await run(['audit', '--server', silent.url, '--api-key', 'bt_x', '--timeout', '200']);
      expect(slow.code).toBe(3);
      expect(slow.err).toMatch(/^FAILED: baton audit: TIMEOUT/);
      expect(slow.err).toMatch(/within 200 ms/);
      expect(slow.err).toMatch(/--timeout/);
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      await silent.close();
    }
  });

  it('keeps the --save-checkpoint baseline when the log serves a rollback, and prints both notes', async () => {
    const dir = tempDir();
    const cp = join(dir, 'cp.txt');
    const t = await loggedTenant('h1', 5);
    const key = t.keys.audit;
    const first = await run(['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--save-checkpoint', cp]);
    expect(first.code, first.out + first.err).toBe(0);
    await addReceipts(t.id, 7);
    const grown = await run(['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--previous', cp, '--save-checkpoint', cp]);
    expect(grown.code, grown.out + grown.err).toBe(0);
    expect(readFileSync(cp, 'utf8')).toContain('\n12\n');
    const baseline = readFileSync(cp, 'utf8');
    // The genuinely signed checkpoint of size 5, served as the latest.
    const old = await (await fetch(`${live.baseUrl}/v1/log/checkpoints/5`, { headers: { authorization: `Bearer ${key}` } })).text();
    // Behind a cache that serves it, the honest log proves 5 a prefix of 12: a stale view, exit 3, no rollback.
    const cached = await startProxy(async (path) => (path === '/v1/log/checkpoint' ? { body: old } : undefined));
    try {
      const stale = await run(['audit', '--server', cached.url, '--api-key', key, '--quiet', '--previous', cp, '--save-checkpoint', cp]);
      expect(stale.code, stale.out + stale.err).toBe(3);
      expect(stale.err).toMatch(
        /served a stale view: the log served its checkpoint of 5 leaves after the one of 12 leaves, which extends it/,
      );
      expect(stale.out + stale.err).not.toMatch(/rollback/);
      expect(readFileSync(cp, 'utf8')).toBe(baseline);
    } finally {
      await cached.close();
    }
    // A log that rolled back to 5 leaves of another history: the tiles of 12 rebuild the baseline
    // and do not hold it, whatever the proof answer says.
    const rolledBack = await forgedNote(key, 5);
    const proxy = await startProxy(async (path) =>
      path === '/v1/log/checkpoint' ? { body: rolledBack } : path === '/v1/log/consistency' ? rolledBackTo(5) : undefined,
    );
    try {
      const rolled = await run(['audit', '--server', proxy.url, '--api-key', key, '--quiet', '--previous', cp, '--save-checkpoint', cp]);
      expect(rolled.code, rolled.out + rolled.err).toBe(1);
      expect(rolled.out).toMatch(/rollback +log: the log shrank from 12 to 5 leaves, and not to a prefix/);
      expect(readFileSync(cp, 'utf8')).toBe(baseline);
      expect(rolled.err).toMatch(/cp\.txt was not written, so the baseline it holds is kept: the audit found rollback/);
      // Both signed notes, in the text output too.
      expect(rolled.out).toContain(`--- the earlier note, of 12 leaves (evidence)\n${baseline.trimEnd()}`);
      expect(rolled.out).toContain(`--- the note served, of 5 leaves (evidence)\n${rolledBack.trimEnd()}`);
    } finally {
      await proxy.close();
    }
    // The next run still compares with the kept baseline.
    const next = await run(['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--previous', cp, '--save-checkpoint', cp]);
    expect(next.code, next.out + next.err).toBe(0);
    // --tree-size audits the checkpoint of that size, which the latest must extend; --previous larger is no rollback.
    const sized = await run(['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--tree-size', '5', '--previous', cp]);
    expect(sized.code, sized.out + sized.err).toBe(0);
    expect(sized.out).toMatch(/^OK: log .*, 5 entries \(the checkpoint of that size; the latest is of 12\)/);
    expect(sized.out).toMatch(/service receipts +12 \(7 after the checkpoint/);
    const never = await run(['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--tree-size', '6']);
    expect(never.code).toBe(1);
    expect(never.err).toMatch(/no checkpoint of size 6/);
    expect((await run(['audit', '--server', live.baseUrl, '--api-key', key, '--tree-size', '0'])).code).toBe(2);
  });

  it("a malformed tile or checkpoint served by the log is a finding (exit 1) naming it, not the user's unusable input", async () => {
    const t = await loggedTenant('h2', 5);
    const key = t.keys.audit;
    const A2 = ['--server', '', '--api-key', key, '--quiet'];
    const real = async (path: string) =>
      new Uint8Array(await (await fetch(`${live.baseUrl}${path}`, { headers: { authorization: `Bearer ${key}` } })).arrayBuffer());
    const note = new TextDecoder().decode(await real('/v1/log/checkpoint'));
    const cases: { name: string; rewrite: (path: string) => Promise<{ body: string | Uint8Array } | undefined>; expect: RegExp }[] = [
      {
        name: 'a level-0 tile cut by one byte',
        rewrite: async (path) => (path === '/v1/log/tile/0/000.p/5' ? { body: (await real(path)).slice(0, -1) } : undefined),
        expect: /malformed +GET \/v1\/log\/tile\/0\/000\.p\/5: the log served a level-0 tile that cannot be read \(MALFORMED_TILE/,
      },
      {
        name: 'a checkpoint with a carriage return',
        rewrite: async (path) => (path === '/v1/log/checkpoint' ? { body: note.replace('\n', '\r\n') } : undefined),
        expect: /malformed +GET \/v1\/log\/checkpoint: the log served a checkpoint that cannot be read \(MALFORMED_NOTE/,
      },
      {
        name: 'a checkpoint with a 300 KB signature line',
        rewrite: async (path) =>
          path === '/v1/log/checkpoint' ? { body: `${note}\u2014 other.example ${Buffer.alloc(300_000).toString('base64')}\n` } : undefined,
        expect: /malformed +GET \/v1\/log\/checkpoint: the log served a checkpoint that cannot be read \(MALFORMED_NOTE/,
      },
    ];
    for (const c of cases) {
      const proxy = await startProxy(c.rewrite);
      try {
        A2[1] = proxy.url;
        const r = await run(['audit', ...A2]);
        expect(r.code, `${c.name}: ${r.out}${r.err}`).toBe(1);
        expect(r.out, c.name).toMatch(c.expect);
        expect(r.err, c.name).not.toMatch(/UNUSABLE INPUT|INVALID_REQUEST/);
        const json = await run(['audit', ...A2, '--json']);
        expect(json.code, c.name).toBe(1);
        expect(JSON.parse(json.out).findings[0]).toMatchObject({ kind: 'malformed', source: expect.stringMatching(/^GET \/v1\/log\//) });
      } finally {
        await proxy.close();
      }
    }
    // The tile's entries are still checked, and the root recomputed from the entry bundle.
    const proxy = await startProxy(cases[0]!.rewrite);
    try {
      const r = await run(['audit', '--server', proxy.url, '--api-key', key, '--json']);
      const report = JSON.parse(r.out);
      expect(report.entriesChecked).toBe(5);
      expect(report.findings.map((f: { kind: string }) => f.kind)).toEqual(['malformed']);
      expect(report.findings[0].detail).toMatch(/root recomputed, from the entry bundle/);
    } finally {
      await proxy.close();
    }
    // The user's own unreadable --previous is still unusable input (exit 2).
    const dir = tempDir();
    writeFileSync(join(dir, 'bad.txt'), note.replace('\n', '\r\n'));
    const own = await run(['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--previous', join(dir, 'bad.txt')]);
    expect(own.code, own.out + own.err).toBe(2);
  });

  it('--tree-size with --save-checkpoint saves the latest checkpoint, so a later rollback below it is still caught', async () => {
    const dir = tempDir();
    const cp = join(dir, 'cp.txt');
    const t = await loggedTenant('rv-h1', 5);
    const key = t.keys.audit;
    await addReceipts(t.id, 7);
    expect((await run(['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--save-checkpoint', cp])).code).toBe(0);
    const sized = await run([
      'audit',
      '--server',
      live.baseUrl,
      '--api-key',
      key,
      '--quiet',
      '--tree-size',
      '5',
      '--previous',
      cp,
      '--save-checkpoint',
      cp,
    ]);
    expect(sized.code, sized.out + sized.err).toBe(0);
    // The baseline is the latest (12), which extends the checkpoint audited: not the smaller one.
    expect(readFileSync(cp, 'utf8')).toContain('\n12\n');
    const rolledBack = await forgedNote(key, 5);
    const proxy = await startProxy(async (path) =>
      path === '/v1/log/checkpoint' ? { body: rolledBack } : path === '/v1/log/consistency' ? rolledBackTo(5) : undefined,
    );
    try {
      const rolled = await run(['audit', '--server', proxy.url, '--api-key', key, '--quiet', '--previous', cp]);
      expect(rolled.code, rolled.out + rolled.err).toBe(1);
      expect(rolled.out).toMatch(/rollback +log: the log shrank from 12 to 5/);
    } finally {
      await proxy.close();
    }
    // A first run with findings has no baseline to keep, and says only that nothing was written.
    const fresh = join(dir, 'fresh.txt');
    const proxied = await startProxy(async (path) =>
      path === '/v1/log/checkpoint' ? { body: rolledBack.replace('\n', '\r\n') } : undefined,
    );
    try {
      const r = await run(['audit', '--server', proxied.url, '--api-key', key, '--quiet', '--save-checkpoint', fresh]);
      expect(r.code).toBe(1);
      expect(r.err).toContain(`note: ${fresh} was not written: the audit found malformed.`);
      expect(existsSync(fresh)).toBe(false);
    } finally {
      await proxied.close();
    }
  });

  it("a busy proxy on the consistency proof is no split view; a refusal of the audit's own request or a bad key served is the service's fault", async () => {
    const dir = tempDir();
    const cp = join(dir, 'cp.txt');
    const t = await loggedTenant('rv-m1', 3);
    const key = t.keys.audit;
    expect((await run(['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--save-checkpoint', cp])).code).toBe(0);
    await addReceipts(t.id, 2);
    for (const status of [429, 408]) {
      // Busy on the proof and on the tile of 5 that would make it unnecessary.
      const busy = await startProxy(async (path) =>
        path === '/v1/log/consistency' || path === '/v1/log/tile/0/000.p/5'
          ? { status, type: 'application/json', body: '{"error":{"code":"RATE_LIMITED","message":"Slow down."}}' }
          : undefined,
      );
      try {
        const r = await run(['audit', '--server', busy.url, '--api-key', key, '--quiet', '--previous', cp]);
        expect(r.out + r.err, String(status)).not.toMatch(/split-view|keep both notes/);
        expect(r.code, String(status)).not.toBe(0);
      } finally {
        await busy.close();
      }
    }
    // A 400 to a tile request the audit built itself: the service's (or a proxy's) doing, exit 3, not unusable input.
    const refusing = await startProxy(async (path) =>
      path.startsWith('/v1/log/tile/')
        ? { status: 400, type: 'application/json', body: '{"error":{"code":"INVALID_REQUEST","message":"no"}}' }
        : undefined,
    );
    try {
      const r = await run(['audit', '--server', refusing.url, '--api-key', key, '--quiet']);
      expect(r.code, r.out + r.err).toBe(3);
      expect(r.err).toMatch(/UNEXPECTED_RESPONSE/);
      expect(r.err).toMatch(/refused a request the audit made itself/);
      expect(r.err).not.toMatch(/UNUSABLE INPUT/);
    } finally {
      await refusing.close();
    }
    // A service key the service publishes unreadably: a finding, not the user's input.
    const badKey = await startProxy(async (path) =>
      path === '/v1/keys'
        ? {
            type: 'application/json',
            body: JSON.stringify({ keys: [{ kid: 'k1', public_key: 'abcde', did: 'did:key:zX', alg: 'EdDSA' }] }),
          }
        : undefined,
    );
    try {
      const r = await run(['audit', '--server', badKey.url, '--api-key', key, '--quiet']);
      expect(r.code, r.out + r.err).toBe(1);
      expect(r.out).toMatch(/malformed +GET \/v1\/keys: the log served a service key that cannot be read/);
    } finally {
      await badKey.close();
    }
  });

  it('a proof answer is no split view, whoever words it: the tiles judge the pair, and without them it is a failed read', async () => {
    const dir = tempDir();
    const cp = join(dir, 'cp.txt');
    const t = await loggedTenant('rv-g1', 3);
    const key = t.keys.audit;
    expect((await run(['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--save-checkpoint', cp])).code).toBe(0);
    await addReceipts(t.id, 2);
    const baseline = readFileSync(cp, 'utf8');
    const answers = [
      { status: 404, type: 'text/html', body: '<html>Not Found</html>' },
      { status: 400, type: 'text/html', body: '<html>Bad Request</html>' },
      { status: 422, type: 'application/json', body: '{"detail":"Unprocessable Entity"}' },
      // Baton's own envelope, forged in front of the honest log.
      rolledBackTo(2),
    ];
    for (const answer of answers) {
      // In front of the honest log, its tiles of 5 rebuild its root and hold 3: no proof is asked.
      const proxy = await startProxy(async (path) => (path === '/v1/log/consistency' ? answer : undefined));
      try {
        const r = await run(['audit', '--server', proxy.url, '--api-key', key, '--quiet', '--previous', cp]);
        expect(r.code, `${answer.status}: ${r.out}${r.err}`).toBe(0);
      } finally {
        await proxy.close();
      }
      // With the tile of 5 failing too: nothing found, a read failed (the service failing), never a fork.
      const blind = await startProxy(async (path) =>
        path === '/v1/log/consistency'
          ? answer
          : path === '/v1/log/tile/0/000.p/5'
            ? { status: 503, type: 'application/json', body: '{"error":{"code":"STORAGE_UNAVAILABLE","message":"Down."}}' }
            : undefined,
      );
      try {
        const r = await run(['audit', '--server', blind.url, '--api-key', key, '--quiet', '--previous', cp, '--save-checkpoint', cp]);
        expect(r.code, `${answer.status}: ${r.out}${r.err}`).toBe(3);
        expect(r.out + r.err, String(answer.status)).not.toMatch(/split-view|keep both notes|evidence/);
        expect(readFileSync(cp, 'utf8')).toBe(baseline);
      } finally {
        await blind.close();
      }
    }
    // Baton's own refusal between two notes it signed, with no tiles to judge them (the log signed 7
    // leaves it does not have: the live service says it has 5): a failed read, beside the tile of 7
    // it does not serve (a finding of its own), never a split view.
    const forged7 = await forgedNote(key, 7);
    const refusing = await startProxy(async (path) => (path === '/v1/log/checkpoint' ? { body: forged7 } : undefined));
    try {
      const r = await run(['audit', '--server', refusing.url, '--api-key', key, '--quiet', '--previous', cp, '--save-checkpoint', cp]);
      expect(r.code, r.out + r.err).toBe(1);
      expect(r.out).toMatch(/^FINDINGS, AUDIT INCOMPLETE/);
      expect(r.out).toMatch(/malformed +GET \/v1\/log\/tile\/0\/000\.p\/7/);
      expect(r.out).toMatch(
        /incomplete +GET \/v1\/log\/consistency\?from=3&to=7: HTTP 404 NOT_FOUND: The log has 5 leaves.*a proof answer alone is no evidence/,
      );
      expect(r.out + r.err).not.toMatch(/split-view|\(evidence\)/);
      expect(readFileSync(cp, 'utf8')).toBe(baseline);
    } finally {
      await refusing.close();
    }
  });

  it('--tree-size: an audited checkpoint the log signed that its latest tree does not hold is a split view, both notes printed', async () => {
    const t = await loggedTenant('rv-g2', 3);
    const key = t.keys.audit;
    await addReceipts(t.id, 2);
    const origin = (
      (await (await fetch(`${live.baseUrl}/v1/log`, { headers: { authorization: `Bearer ${key}` } })).json()) as { origin: string }
    ).origin;
    const forged = signCheckpoint(live.svc.deps.signer, origin, 3, new Uint8Array(randomBytes(32)));
    const proxy = await startProxy(async (path) =>
      path === '/v1/log/checkpoints/3'
        ? { body: forged }
        : path === '/v1/log/consistency'
          ? { status: 503, type: 'application/json', body: '{"error":{"code":"STORAGE_UNAVAILABLE","message":"Down."}}' }
          : undefined,
    );
    try {
      const r = await run(['audit', '--server', proxy.url, '--api-key', key, '--quiet', '--tree-size', '3']);
      expect(r.code, r.out + r.err).toBe(1);
      // The latest's tiles judged the pair: the failing proof was never asked.
      expect(r.out).toMatch(/^FINDINGS: /);
      expect(r.out).toMatch(/split-view +log: checkpoints of sizes 3 and 5 do not agree \(not-consistent\)/);
      expect(r.out).toContain(`--- the earlier note, of 3 leaves (evidence)\n${forged.trimEnd()}`);
      expect(r.out).toMatch(/--- the note served, of 5 leaves \(evidence\)/);
    } finally {
      await proxy.close();
    }
  });

  it("--tenant pins whose log it is: another tenant's log passed off with the same service key is refused; unpinned, the output says so", async () => {
    const dir = tempDir();
    const mine = await loggedTenant('pin-mine', 2);
    const theirs = await loggedTenant('pin-theirs', 3);
    const keysFile = join(dir, 'keys.json');
    writeFileSync(keysFile, await (await fetch(`${live.baseUrl}/v1/keys`)).text());
    // A proxy that answers every request with the other tenant's key: its whole log, consistently.
    const swap = createServer((req: IncomingMessage, res: ServerResponse) => {
      void (async () => {
        const upstream = await fetch(`${live.baseUrl}${req.url ?? '/'}`, { headers: { authorization: `Bearer ${theirs.keys.audit}` } });
        res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/octet-stream' });
        res.end(Buffer.from(await upstream.arrayBuffer()));
      })();
    });
    await new Promise<void>((resolve) => swap.listen(0, '127.0.0.1', resolve));
    const address = swap.address();
    const swapUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    try {
      const base = ['audit', '--server', swapUrl, '--api-key', mine.keys.audit, '--quiet', '--keys', keysFile];
      // --keys alone: every tenant's log verifies under the service key, so the log is the service's word, and said to be.
      const unpinned = await run(base);
      expect(unpinned.code, unpinned.out + unpinned.err).toBe(0);
      expect(unpinned.out).toMatch(
        new RegExp(
          `note +which log this is \\(.*/baton/${theirs.id}\\) taken from the service audited; pin it with --tenant <id> or --trust`,
        ),
      );
      expect(JSON.parse((await run([...base, '--json'])).out)).toMatchObject({ ok: true, trustedOnFirstUse: false, originPinned: false });

      const pinned = await run([...base, '--tenant', mine.id]);
      expect(pinned.code, pinned.out + pinned.err).toBe(1);
      expect(pinned.err).toMatch(/^REFUSED: baton audit: NOTE_NOT_VERIFIED/);
      expect(pinned.err).toContain(`/baton/${theirs.id} (GET /v1/log), not the log of tenant ${mine.id}`);
      expect(pinned.out).not.toMatch(/^OK/m);
    } finally {
      await new Promise<void>((resolve) => swap.close(() => resolve()));
    }
    // Its own log passes under --tenant, with nothing more to note.
    const own = await run([
      'audit',
      '--server',
      live.baseUrl,
      '--api-key',
      mine.keys.audit,
      '--quiet',
      '--keys',
      keysFile,
      '--tenant',
      mine.id,
    ]);
    expect(own.code, own.out + own.err).toBe(0);
    expect(own.out).toMatch(/^OK: log .*, 2 entries/);
    expect(own.out).not.toMatch(/which log this is/);
    // --tenant pins the tenant, not the log's name: another log of this tenant under the same key
    // (one recorded before a rename) would pass too, so the output says where the name came from.
    expect(own.out).toMatch(
      new RegExp(
        `note +the log's name \\(.*/baton/${mine.id}\\) taken from the service audited, its tenant pinned by --tenant; pin the whole log with --trust`,
      ),
    );
    const ownArgs = ['audit', '--server', live.baseUrl, '--api-key', mine.keys.audit, '--keys', keysFile, '--tenant', mine.id, '--json'];
    expect(JSON.parse((await run(ownArgs)).out)).toMatchObject({ ok: true, originPinned: true, logNamePinned: false });
    const info = await (await fetch(`${live.baseUrl}/v1/log`, { headers: { authorization: `Bearer ${mine.keys.audit}` } })).text();
    writeFileSync(join(dir, 'my-log.json'), info);
    const whole = await run([...ownArgs.slice(0, -1), '--trust', join(dir, 'my-log.json')]);
    expect(whole.code, whole.out + whole.err).toBe(0);
    expect(whole.out).not.toMatch(/note +(which log this is|the log's name)/);
    // A pinned trust of another tenant's log than --tenant is the caller's mistake, refused before any request.
    const theirInfo = await (await fetch(`${live.baseUrl}/v1/log`, { headers: { authorization: `Bearer ${theirs.keys.audit}` } })).text();
    writeFileSync(join(dir, 'their-log.json'), theirInfo);
    const mixed = await run([
      'audit',
      '--server',
      await closedPortUrl(),
      '--api-key',
      mine.keys.audit,
      '--trust',
      join(dir, 'their-log.json'),
      '--tenant',
      mine.id,
    ]);
    expect(mixed.code).toBe(2);
    expect(mixed.err).toContain(`is not the log of tenant ${mine.id}`);
  });

  it('--tree-size with --save-checkpoint under a witness quorum: the saved latest (not yet cosigned) opens as the next --previous', async () => {
    const dir = tempDir();
    const cp = join(dir, 'cp.txt');
    const t = await loggedTenant('w-quorum', 4);
    const key = t.keys.audit;
    const read = async (path: string) => (await fetch(`${live.baseUrl}${path}`, { headers: { authorization: `Bearer ${key}` } })).text();
    // A witness cosigns the checkpoint of 4; the log then grows to 6, past what it cosigned.
    const { witnessKey, cosigned } = witnessCosigned(await read('/v1/log/checkpoint'), live.svc.clock.now);
    const sent = await live.svc.call('POST', '/v1/log/cosignatures', { key, json: { witness_key: witnessKey, checkpoint: cosigned } });
    expect(sent.status).toBe(201);
    await addReceipts(t.id, 2);
    const info = JSON.parse(await read('/v1/log')) as { origin: string; verifier_keys: string[] };
    const trust = join(dir, 'trust.json');
    writeFileSync(
      trust,
      JSON.stringify({ origin: info.origin, logKeys: info.verifier_keys, witnesses: [witnessKey], requiredCosignatures: 1 }),
    );
    const A3 = ['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--trust', trust, '--tree-size', '4'];
    const first = await run([...A3, '--save-checkpoint', cp]);
    expect(first.code, first.out + first.err).toBe(0);
    expect(readFileSync(cp, 'utf8')).toContain('\n6\n');
    const next = await run([...A3, '--previous', cp]);
    expect(next.code, next.out + next.err).toBe(0);
    expect(next.out).toMatch(/^OK: log .*, 4 entries/);
  });

  it('a rollback found before a later read fails is still exit 1 with both notes and the notes; nothing proven is exit 3', async () => {
    const dir = tempDir();
    const cp = join(dir, 'cp.txt');
    const t = await loggedTenant('inc-1', 5);
    const key = t.keys.audit;
    const old = await (await fetch(`${live.baseUrl}/v1/log/checkpoint`, { headers: { authorization: `Bearer ${key}` } })).text();
    await addReceipts(t.id, 3);
    expect((await run(['audit', '--server', live.baseUrl, '--api-key', key, '--quiet', '--save-checkpoint', cp])).code).toBe(0);
    const baseline = readFileSync(cp, 'utf8');
    const down = {
      status: 503,
      type: 'application/json',
      body: '{"error":{"code":"STORAGE_UNAVAILABLE","message":"The database is not answering."}}',
    };
    // The log rolled back to 5 leaves of another history, then fails the listing: the rollback is
    // proven by the notes and the tiles of 8, which do not hold it (the tiles of 5 it serves, the
    // genuine ones, do not rebuild it either: a root-mismatch).
    let served = await forgedNote(key, 5);
    const rolledBack = served;
    const proxy = await startProxy(async (path) =>
      path === '/v1/log/checkpoint'
        ? { body: served }
        : path === '/v1/log/consistency'
          ? rolledBackTo(5)
          : path === '/v1/service-receipts'
            ? down
            : undefined,
    );
    try {
      const args = ['audit', '--server', proxy.url, '--api-key', key, '--quiet', '--previous', cp];
      const r = await run([...args, '--save-checkpoint', cp]);
      expect(r.code, r.out + r.err).toBe(1);
      expect(r.out).toMatch(/^FINDINGS, AUDIT INCOMPLETE: log .*, 5 entries/);
      expect(r.out).toMatch(/rollback +log: the log shrank from 8 to 5/);
      expect(r.out).toMatch(
        /incomplete +GET \/v1\/service-receipts\?after=0&limit=500: HTTP 503 STORAGE_UNAVAILABLE: The database is not answering\. Not checked: GET \/v1\/service-receipts to its end/,
      );
      expect(r.out).toMatch(/note +log keys taken from the service audited/);
      expect(r.out).toContain(`--- the earlier note, of 8 leaves (evidence)\n${baseline.trimEnd()}`);
      expect(r.out).toContain(`--- the note served, of 5 leaves (evidence)\n${rolledBack.trimEnd()}`);
      expect(r.err).not.toMatch(/FAILED|UNAVAILABLE/);
      expect(r.err).toMatch(/the audit found rollback, root-mismatch, and could not finish/);
      expect(readFileSync(cp, 'utf8')).toBe(baseline);
      const json = await run([...args, '--json']);
      expect(json.code, json.out + json.err).toBe(1);
      const report = JSON.parse(json.out);
      expect(report).toMatchObject({ ok: false, checkpointRead: true, treeSize: 5, trustedOnFirstUse: true, serviceKeysPinned: false });
      expect(report.findings.map((f: { kind: string }) => f.kind)).toEqual(['rollback', 'root-mismatch']);
      expect(report.findings[0].finding.older.note).toBe(baseline);
      expect(report.incomplete).toEqual([
        expect.objectContaining({ source: 'GET /v1/service-receipts?after=0&limit=500', status: 503, code: 'STORAGE_UNAVAILABLE' }),
      ]);
      // The genuine older note served, without --previous: nothing is proven, the failure is the
      // service's, exit 3, as before.
      served = old;
      const plain = await run(['audit', '--server', proxy.url, '--api-key', key, '--quiet']);
      expect(plain.code, plain.out + plain.err).toBe(3);
      expect(plain.err).toMatch(/^FAILED: baton audit: STORAGE_UNAVAILABLE/);
    } finally {
      await proxy.close();
    }
  });

  it('a level-0 tile the checkpoint commits to answered 404 is a finding (exit 1), not a refusal', async () => {
    const t = await loggedTenant('inc-2', 4);
    const key = t.keys.audit;
    const proxy = await startProxy(async (path) =>
      path === '/v1/log/tile/0/000.p/4'
        ? {
            status: 404,
            type: 'application/json',
            body: '{"error":{"code":"NOT_FOUND","message":"The log does not reach this tile yet."}}',
          }
        : undefined,
    );
    try {
      const r = await run(['audit', '--server', proxy.url, '--api-key', key, '--quiet']);
      expect(r.code, r.out + r.err).toBe(1);
      expect(r.out).toMatch(
        /malformed +GET \/v1\/log\/tile\/0\/000\.p\/4: the log does not serve a level-0 tile that its checkpoint commits to \(HTTP 404 NOT_FOUND\)/,
      );
      expect(r.err).toBe('');
    } finally {
      await proxy.close();
    }
  });

  it('says the service keys came from the service audited whenever --keys is not given, --trust or not', async () => {
    const dir = tempDir();
    // A tenant of its own: an earlier test removed a receipt of the shared one behind the service.
    const key = (await loggedTenant('inc-3', 3)).keys.audit;
    const A = ['--server', live.baseUrl, '--api-key', key];
    const get = async (path: string) => (await fetch(`${live.baseUrl}${path}`, { headers: { authorization: `Bearer ${key}` } })).text();
    writeFileSync(join(dir, 'log.json'), await get('/v1/log'));
    writeFileSync(join(dir, 'keys.json'), await get('/v1/keys'));
    const serviceNote =
      /note +service keys taken from the service audited \(GET \/v1\/keys\): receipt signatures were checked against them; pin them with --keys/;
    const trusted = await run(['audit', ...A, '--quiet', '--trust', join(dir, 'log.json')]);
    expect(trusted.code, trusted.out + trusted.err).toBe(0);
    expect(trusted.out).toMatch(serviceNote);
    expect(trusted.out).not.toMatch(/log keys taken from the service/);
    expect(JSON.parse((await run(['audit', ...A, '--json', '--trust', join(dir, 'log.json')])).out)).toMatchObject({
      trustedOnFirstUse: false,
      serviceKeysPinned: false,
    });
    const both = await run(['audit', ...A, '--quiet', '--trust', join(dir, 'log.json'), '--keys', join(dir, 'keys.json')]);
    expect(both.code, both.out + both.err).toBe(0);
    expect(both.out).not.toMatch(/keys taken from the service/);
    const keysOnly = await run(['audit', ...A, '--quiet', '--keys', join(dir, 'keys.json')]);
    expect(keysOnly.code, keysOnly.out + keysOnly.err).toBe(0);
    expect(keysOnly.out).not.toMatch(/keys taken from the service/);
    const neither = await run(['audit', ...A, '--quiet']);
    expect(neither.out).toMatch(serviceNote);
    expect(neither.out).toMatch(/note +log keys taken from the service audited \(GET \/v1\/log\); pin them with --trust or --keys/);
    expect((await run(['audit', '--help'])).out).toMatch(
      /default: GET \/v1\/keys of the service audited, even with\s+--trust, and the output says so/,
    );
  });

  it('the SDK refuses an empty tenantId before any request (as the CLI refuses --tenant "")', async () => {
    const refused = auditLog({ baseUrl: await closedPortUrl(), apiKey: 'bt_some_audit_key', tenantId: '' });
    await expect(refused).rejects.toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringContaining('tenantId is empty') as unknown,
    });
  });

  it('needs an API key', async () => {
    const r = await run(['audit', '--server', live.baseUrl]);
    expect(r.code).toBe(2);
  });
});
