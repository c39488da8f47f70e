/**
 * Saved contexts: the file (where, mode, masked keys), which server and key
 * an online command picks, and the operator commands run through one.
 */
import { spawn } from 'node:child_process';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { BIN, run, tempDir, type RunResult } from './helpers.js';

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

/** An HTTP server that records the headers of each request and answers 503 JSON. */
async function recordingServer(): Promise<{ url: string; seen: IncomingHttpHeaders[]; close(): Promise<void> }> {
  const seen: IncomingHttpHeaders[] = [];
  const server = createServer((req, res) => {
    seen.push(req.headers);
    res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{"code":"UNAVAILABLE","message":"test"}}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return {
    url: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`,
    seen,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('baton context', () => {
  it('add saves server and key in $XDG_CONFIG_HOME/baton/contexts.json, mode 0600, and never prints the key', async () => {
    const env = { XDG_CONFIG_HOME: tempDir() };
    const key = 'bt_admin_' + 'k'.repeat(39) + 'WXYZ';
    const add = ok(await run(['context', 'add', 'prod', '--server', 'https://baton.example/', '--key', key], env), 'add');
    expect(add.out).toContain('SAVED: context "prod": https://baton.example with key bt_admin_…WXYZ (current)');
    const path = join(env.XDG_CONFIG_HOME, 'baton', 'contexts.json');
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(statSync(join(env.XDG_CONFIG_HOME, 'baton')).mode & 0o777).toBe(0o700);
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual({
      current: 'prod',
      contexts: { prod: { server: 'https://baton.example', api_key: key } },
    });

    ok(await run(['context', 'add', 'staging', '--server', 'http://127.0.0.1:9', '--key', 'bt_' + 's'.repeat(43)], env), 'add 2');
    const list = ok(await run(['context', 'list'], env), 'list');
    expect(list.out).toMatch(/^\* prod {5}https:\/\/baton\.example {2}bt_admin_…WXYZ$/m);
    expect(list.out).toMatch(/^ {2}staging {2}http:\/\/127\.0\.0\.1:9 {2}bt_…ssss$/m);
    for (const r of [add, list, await run(['context', 'list', '--json'], env)]) {
      expect(r.out + r.err).not.toContain(key);
      expect(r.out + r.err).not.toContain('s'.repeat(43));
    }

    ok(await run(['context', 'use', 'staging'], env), 'use');
    expect(JSON.parse((await run(['context', 'list', '--json'], env)).out)).toMatchObject({ current: 'staging' });
    ok(await run(['context', 'remove', 'staging'], env), 'remove');
    expect(JSON.parse((await run(['context', 'list', '--json'], env)).out)).toEqual({
      current: null,
      contexts: [{ name: 'prod', current: false, server: 'https://baton.example', key: 'bt_admin_…WXYZ' }],
    });
  });

  it('--key-stdin reads the key from stdin, so it never appears in argv (through the real bin)', async () => {
    const home = tempDir();
    const key = 'bt_admin_' + 'p'.repeat(39) + 'PIPE';
    const code = await new Promise<number | null>((resolve) => {
      const child = spawn(process.execPath, [BIN, 'context', 'add', 'piped', '--server', 'http://127.0.0.1:9', '--key-stdin'], {
        env: { ...process.env, XDG_CONFIG_HOME: home },
        stdio: ['pipe', 'ignore', 'ignore'],
      });
      child.on('close', resolve);
      child.stdin.end(`${key}\n`);
    });
    expect(code).toBe(0);
    const saved = JSON.parse(readFileSync(join(home, 'baton', 'contexts.json'), 'utf8')) as {
      contexts: Record<string, { api_key: string }>;
    };
    expect(saved.contexts['piped']?.api_key).toBe(key);
  }, 60_000);

  it('refuses bad names, bad servers and unknown contexts with exit 2; a typo gets "did you mean"', async () => {
    const env = { XDG_CONFIG_HOME: tempDir() };
    expect((await run(['context', 'add', '../evil', '--server', 'http://x'], env)).err).toMatch(/a context name is 1-64/);
    expect((await run(['context', 'add', 'a', '--server', 'ftp://x'], env)).code).toBe(2);
    expect((await run(['context', 'add', 'a'], env)).err).toContain('give --server');
    // A password in the URL is neither saved (every list would print it) nor echoed.
    for (const server of [
      'http://user:s3cret@127.0.0.1:9',
      'http:user:s3cret@127.0.0.1:9',
      'ftp://user:s3cret@x',
      'http://u:pa/s3cret@x',
    ]) {
      const withPassword = await run(['context', 'add', 'a', '--server', server, '--key', 'bt_x'], env);
      expect([withPassword.code, withPassword.out + withPassword.err].join(' '), server).toMatch(/^2 .*--server/s);
      expect(withPassword.out + withPassword.err, server).not.toContain('s3cret');
    }
    expect((await run(['context', 'list'], env)).out).not.toContain('s3cret');
  });

  it('a password in a server URL saved before add refused it, or given with --server or $BATON_URL, is never printed', async () => {
    const env = { XDG_CONFIG_HOME: tempDir() };
    mkdirSync(join(env.XDG_CONFIG_HOME, 'baton'), { recursive: true, mode: 0o700 });
    writeFileSync(
      join(env.XDG_CONFIG_HOME, 'baton', 'contexts.json'),
      JSON.stringify({ current: 'old', contexts: { old: { server: 'http://u:s3cret@127.0.0.1:9', api_key: 'bt_' + 'o'.repeat(43) } } }),
      { mode: 0o600 },
    );
    const shown = [
      await run(['context', 'list'], env),
      await run(['context', 'list', '--json'], env),
      await run(['context', 'use', 'old'], env),
      // The saved key is withheld from another server, and the refusal names both servers.
      await run(['audit', '--server', 'http://u:s3cret@127.0.0.2:9'], env),
      await run(['audit'], { ...env, BATON_URL: 'http://u:s3cret@127.0.0.2:9' }),
      await run(['audit', '--json', '--server', 'http://u:12/s3cret@127.0.0.2'], env),
    ];
    for (const r of shown) expect(r.out + r.err).not.toContain('s3cret');
    expect(shown[3]!.err).toMatch(/is saved for http:\/\/…@127\.0\.0\.1:9, so it is not sent to http:\/\/…@127\.0\.0\.2:9/);
    const use = await run(['context', 'use', 'nope'], env);
    expect(use.code).toBe(2);
    expect(use.err).toContain('no context named "nope"');
    const typo = await run(['context', 'ad', 'x'], env);
    expect(typo.code).toBe(2);
    expect(typo.err).toContain('unknown command "context ad" (did you mean "baton context add"?)');
    const opt = await run(['context', 'add', 'x', '--sever', 'http://x'], env);
    expect(opt.err).toContain('unknown option --sever (did you mean --server?)');
    const chain = await run(['chain', `sha256:${'ab'.repeat(32)}`, '--context', 'nope'], env);
    expect(chain.code).toBe(2);
    expect(chain.err).toContain('no context named "nope"');
  });

  it('a saved key goes only to its own server: $BATON_URL or --server without a context sends no saved key', async () => {
    const other = await recordingServer();
    try {
      const env = { XDG_CONFIG_HOME: tempDir() };
      ok(await run(['context', 'add', 'prod', '--server', live.baseUrl, '--key', live.svc.adminKey], env), 'add');
      await run(['tenants', 'list', '--server', other.url], env);
      await run(['tenants', 'list'], { ...env, BATON_URL: other.url });
      expect(other.seen).toHaveLength(2);
      for (const headers of other.seen) expect(headers.authorization).toBeUndefined();
    } finally {
      await other.close();
    }
  });

  it('a named context ($BATON_CONTEXT, --context) never sends its key to another --server or $BATON_URL, and says so', async () => {
    const other = await recordingServer();
    try {
      const env = { XDG_CONFIG_HOME: tempDir() };
      ok(await run(['context', 'add', 'local', '--server', live.baseUrl, '--key', live.svc.adminKey], env), 'add');
      const flag = await run(['chain', `sha256:${'ab'.repeat(32)}`, '--server', other.url], { ...env, BATON_CONTEXT: 'local' });
      const named = await run(['tenants', 'list', '--context', 'local', '--server', other.url], env);
      expect(other.seen).toHaveLength(2);
      for (const headers of other.seen) expect(headers.authorization).toBeUndefined();
      for (const r of [flag, named]) {
        expect(r.err).toContain(
          `note: the key of context "local" is saved for ${live.baseUrl}, so it is not sent to ${other.url} (--server)`,
        );
        expect(r.out + r.err).not.toContain(live.svc.adminKey);
      }
      // A --context flag outranks $BATON_API_KEY, so only --api-key is offered with it.
      expect(flag.err).toContain("give that server's key with --api-key or $BATON_API_KEY\n");
      expect(named.err).toContain("give that server's key with --api-key\n");
      // The same server, however written (a trailing slash, the host's case), gets the key.
      const same = live.baseUrl.replace('http://', 'HTTP://') + '/';
      const own = ok(await run(['tenants', 'list', '--server', same], { ...env, BATON_CONTEXT: 'local' }), 'its own server');
      expect(own.err).not.toContain('note:');
      // A key given for the other server is sent there, with no note.
      const given = await run(['tenants', 'list', '--server', other.url, '--api-key', 'bt_admin_given_for_other_server'], {
        ...env,
        BATON_CONTEXT: 'local',
      });
      expect(other.seen.at(-1)?.authorization).toBe('Bearer bt_admin_given_for_other_server');
      expect(given.err).not.toContain('note:');
    } finally {
      await other.close();
    }
  });

  it("each setting comes from its flag, else its variable, else the context: $BATON_URL beats $BATON_CONTEXT's server", async () => {
    const other = await recordingServer();
    try {
      const env = { XDG_CONFIG_HOME: tempDir() };
      ok(await run(['context', 'add', 'local', '--server', live.baseUrl, '--key', live.svc.adminKey], env), 'add');
      const byEnv = await run(['tenants', 'list'], { ...env, BATON_CONTEXT: 'local', BATON_URL: other.url });
      expect(other.seen).toHaveLength(1);
      expect(other.seen[0]?.authorization).toBeUndefined();
      expect(byEnv.code).toBe(3);
      expect(byEnv.err).toContain(`not sent to ${other.url} ($BATON_URL)`);
      // --server beats $BATON_URL; the context fills in the key for its own server.
      ok(await run(['tenants', 'list', '--server', live.baseUrl], { ...env, BATON_CONTEXT: 'local', BATON_URL: other.url }), '--server');
      expect(other.seen).toHaveLength(1);
    } finally {
      await other.close();
    }
  });

  it('a --context flag outranks $BATON_URL and $BATON_API_KEY: its server and key, unless --server or --api-key', async () => {
    const other = await recordingServer();
    const ctxServer = await recordingServer();
    try {
      const env = { XDG_CONFIG_HOME: tempDir() };
      ok(await run(['context', 'add', 'local', '--server', live.baseUrl, '--key', live.svc.adminKey], env), 'add');
      ok(await run(['context', 'add', 'nokey', '--server', ctxServer.url], env), 'add nokey');
      const ambient = { ...env, BATON_URL: other.url, BATON_API_KEY: 'bt_admin_ambient_key_for_other' };
      // The context's own server and key, whatever the variables say.
      ok(await run(['tenants', 'list', '--context', 'local'], ambient), '--context local');
      // The review's case: a key given for the flag's context goes to its server, not to $BATON_URL.
      await run(['chain', `sha256:${'ab'.repeat(32)}`, '--context', 'nokey', '--api-key', 'bt_key_given_on_the_line'], ambient);
      // A context without a key gets no key from $BATON_API_KEY either: that key is for $BATON_URL's server.
      // Said, so a variable that is set and not read is no mystery.
      const noKey = await run(['tenants', 'list', '--context', 'nokey'], ambient);
      expect(noKey.err).toContain(
        "note: a --context flag outranks the environment: $BATON_URL (--server replaces the context's server) and $BATON_API_KEY (--api-key gives a key) not read with --context nokey",
      );
      expect(other.seen).toHaveLength(0);
      expect(ctxServer.seen.map((h) => h.authorization)).toEqual(['Bearer bt_key_given_on_the_line', undefined]);
      // --server still replaces the context's server; its key is then withheld, and only --api-key can give one.
      const flagged = await run(['tenants', 'list', '--context', 'local', '--server', other.url], ambient);
      expect(other.seen.map((h) => h.authorization)).toEqual([undefined]);
      expect(flagged.err).toContain(`not sent to ${other.url} (--server); give that server's key with --api-key\n`);
    } finally {
      await other.close();
      await ctxServer.close();
    }
  });

  it("$BATON_API_KEY alone replaces the current context's key, and the context's server is kept", async () => {
    const ctxServer = await recordingServer();
    try {
      const env = { XDG_CONFIG_HOME: tempDir() };
      ok(await run(['context', 'add', 'here', '--server', ctxServer.url, '--key', 'bt_admin_saved_key_of_the_context'], env), 'add');
      const r = await run(['invocations'], { ...env, BATON_API_KEY: 'bt_key_from_the_environment' });
      expect(r.code).toBe(3);
      expect(ctxServer.seen).toHaveLength(1);
      expect(ctxServer.seen[0]?.authorization).toBe('Bearer bt_key_from_the_environment');
    } finally {
      await ctxServer.close();
    }
  });

  it('--help says the rule: flag, then variable, then context; the key only to its own server', async () => {
    const help = (await run(['tenants', 'list', '--help'])).out;
    expect(help).toContain('Server options (each from its flag, else its variable, else the context):');
    expect(help).toMatch(
      /Given as a flag,\n\s+it outranks \$BATON_URL and \$BATON_API_KEY: its server\n\s+and key are used unless --server or --api-key is given/,
    );
    expect((await run(['context', '--help'])).out).toMatch(/a --context flag outranks \$BATON_URL\nand \$BATON_API_KEY/);
    expect((await run(['--help'])).out).toMatch(
      /A --context flag outranks \$BATON_URL and \$BATON_API_KEY:\nits server and key are used unless --server or --api-key is given/,
    );
    expect(help).toMatch(/--server <url> +the Baton service \(default: \$BATON_URL, else the\n\s+context's server/);
    expect(help).toMatch(/else the context's key, which goes only to the context's\n\s+own server/);
    expect((await run(['--help'])).out).toMatch(/Each setting\ncomes from its flag, else its variable/);
  });

  it('add, use and remove take --json, like every command but serve', async () => {
    const env = { XDG_CONFIG_HOME: tempDir() };
    const key = 'bt_admin_' + 'j'.repeat(39) + 'JSON';
    const add = ok(await run(['context', 'add', 'a', '--server', 'http://127.0.0.1:9', '--key', key, '--json'], env), 'add');
    expect(JSON.parse(add.out)).toEqual({
      name: 'a',
      server: 'http://127.0.0.1:9',
      key: 'bt_admin_…JSON',
      current: true,
      file: join(env.XDG_CONFIG_HOME, 'baton', 'contexts.json'),
    });
    expect(add.out + add.err).not.toContain(key);
    ok(await run(['context', 'add', 'b', '--server', 'http://127.0.0.1:10'], env), 'add b');
    expect(JSON.parse(ok(await run(['context', 'use', 'b', '--json'], env), 'use').out)).toEqual({
      current: 'b',
      server: 'http://127.0.0.1:10',
    });
    expect(JSON.parse(ok(await run(['context', 'remove', 'b', '--json'], env), 'remove').out)).toEqual({ removed: 'b', current: null });
  });

  it('--key-stdin with nothing on stdin says stdin was empty (through the real bin)', async () => {
    const home = tempDir();
    const r = await new Promise<{ code: number | null; err: string }>((resolve) => {
      const child = spawn(process.execPath, [BIN, 'context', 'add', 'empty', '--server', 'http://127.0.0.1:9', '--key-stdin'], {
        env: { ...process.env, XDG_CONFIG_HOME: home },
        stdio: ['pipe', 'ignore', 'pipe'],
      });
      let err = '';
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      child.on('close', (code) => resolve({ code, err }));
      child.stdin.end();
    });
    expect(r.code).toBe(2);
    expect(r.err).toContain('baton context add: stdin was empty: pipe the key in');
  }, 60_000);
});

describe('operator commands through the current context', () => {
  it('tenants, trusted roots and API keys: create, list, remove, revoke', async () => {
    const env = { XDG_CONFIG_HOME: tempDir() };
    ok(await run(['context', 'add', 'live', '--server', live.baseUrl, '--key', live.svc.adminKey], env), 'context');

    const created = ok(await run(['tenants', 'create', 'globex', '--json'], env), 'tenants create');
    const tenant = (JSON.parse(created.out) as { id: string }).id;
    expect(ok(await run(['tenants', 'list'], env), 'tenants list').out).toMatch(new RegExp(`^${tenant} .* globex$`, 'm'));

    const root = generateKeyPair();
    expect(ok(await run(['roots', 'add', root.did, '--tenant', tenant, '--label', 'ops'], env), 'roots add').out).toContain(
      `TRUSTED: ${root.did} for tenant ${tenant} "ops"`,
    );
    expect(ok(await run(['roots', 'list', '--tenant', tenant], env), 'roots list').out).toContain(root.did);
    ok(await run(['roots', 'remove', root.did, '--tenant', tenant], env), 'roots remove');
    expect((await run(['roots', 'list', '--tenant', tenant], env)).out).toContain('No trusted roots');

    const key = ok(await run(['keys', 'create', '--tenant', tenant, '--scopes', 'verify,audit', '--name', 'gw'], env), 'keys create');
    const id = /CREATED: API key (key_\S+)/.exec(key.out)?.[1];
    const secret = /key {6}(bt_\S+)/.exec(key.out)?.[1];
    expect(id).toBeDefined();
    expect(secret).toMatch(/^bt_[A-Za-z0-9_-]{43}$/);
    // The new key works at once (audit scope reads receipts).
    expect((await live.svc.call('GET', '/v1/service-receipts', { key: secret! })).status).toBe(200);
    const listed = ok(await run(['keys', 'list', '--tenant', tenant], env), 'keys list').out;
    expect(listed).toMatch(new RegExp(`^${id} {2}\\[verify,audit\\] {2}active`, 'm'));
    expect(listed).not.toContain(secret);

    ok(await run(['keys', 'revoke', id!], env), 'keys revoke');
    // Every tenant scope the API takes, the CLI takes (approve included).
    const approver = ok(await run(['keys', 'create', '--tenant', tenant, '--scopes', 'approve'], env), 'keys create approve');
    expect(approver.out).toMatch(/CREATED: API key key_\S+/);
    expect((await live.svc.call('GET', '/v1/service-receipts', { key: secret! })).status).toBe(401);
    expect(ok(await run(['keys', 'list', '--tenant', tenant], env), 'keys list').out).toMatch(new RegExp(`^${id} .* revoked `, 'm'));
  });

  it('keys with an expiry, rotated without downtime: both keys work in the grace period', async () => {
    const env = { XDG_CONFIG_HOME: tempDir() };
    ok(await run(['context', 'add', 'live', '--server', live.baseUrl, '--key', live.svc.adminKey], env), 'context');
    const created = ok(
      await run(['keys', 'create', '--tenant', live.tenant.id, '--scopes', 'audit', '--expires-in', '30d', '--json'], env),
      'keys create',
    );
    const old = JSON.parse(created.out) as { id: string; key: string; expires_at: string };
    expect(Math.abs(Date.parse(old.expires_at) - (Date.now() + 30 * 86_400_000))).toBeLessThan(60_000);

    const rotated = ok(await run(['keys', 'rotate', old.id, '--grace', '10m'], env), 'keys rotate').out;
    const id = /ROTATED: \S+ -> (key_\S+)/.exec(rotated)?.[1];
    const secret = /new key {14}(bt_\S+)/.exec(rotated)?.[1];
    expect(rotated).toMatch(/old key valid until {2}\d{4}-/);
    expect(secret).toMatch(/^bt_[A-Za-z0-9_-]{43}$/);
    for (const key of [old.key, secret!]) expect((await live.svc.call('GET', '/v1/service-receipts', { key })).status).toBe(200);
    const listed = ok(await run(['keys', 'list', '--tenant', live.tenant.id], env), 'keys list').out;
    expect(listed).toMatch(new RegExp(`^${id} .* active .*replaces ${old.id}$`, 'm'));
    expect(listed).toMatch(new RegExp(`^${old.id} .* expires \\d{4}-.* last used `, 'm'));

    // The refusal names the subcommand that was refused, not only its group.
    const again = await run(['keys', 'rotate', old.id], env);
    expect(again.code).toBe(1);
    expect(again.err).toMatch(/^REFUSED: baton keys rotate: CONFLICT/);

    const bad = await run(['keys', 'rotate', old.id, '--grace', 'soon'], env);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--grace takes a duration');
  });

  it('refusals read like every other command: no admin key is 401 (exit 1), a missing flag is exit 2', async () => {
    const env = { XDG_CONFIG_HOME: tempDir() };
    ok(await run(['context', 'add', 'nokey', '--server', live.baseUrl], env), 'context');
    const r = await run(['tenants', 'list'], env);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/REFUSED: baton tenants list: UNAUTHORIZED/);
    const flag = await run(['keys', 'list'], env);
    expect(flag.code).toBe(2);
    expect(flag.err).toContain('give --tenant <id>');
    const scope = await run(['keys', 'create', '--tenant', 't', '--scopes', 'verify,admin'], env);
    expect(scope.code).toBe(2);
    expect(scope.err).toContain('unknown scope "admin"');
    expect((await run(['keys', 'rotat', 'x'], env)).err).toContain('did you mean "baton keys rotate"?');
  });

  it('every group and subcommand has a --help with a usage line', async () => {
    for (const [group, subs] of [
      ['context', ['add', 'use', 'list', 'remove']],
      ['tenants', ['create', 'list']],
      ['keys', ['create', 'list', 'revoke', 'rotate']],
      ['roots', ['add', 'list', 'remove']],
    ] as const) {
      const g = await run([group, '--help']);
      expect(g.code, group).toBe(0);
      expect(g.out, group).toMatch(new RegExp(`^Usage: baton ${group} `));
      for (const sub of subs) {
        const r = await run([group, sub, '--help']);
        expect(r.code, `${group} ${sub}`).toBe(0);
        expect(r.out, `${group} ${sub}`).toMatch(new RegExp(`^Usage: baton ${group} ${sub}`));
      }
    }
  });

  it("each subcommand's summary in its group's help is a whole sentence of its own help, not a cut-off line", async () => {
    for (const group of ['tenants', 'keys', 'roots']) {
      const listed = [...(await run([group, '--help'])).out.matchAll(/^ {2}([a-z]+) +(\S.*)$/gm)].map((m) => [m[1]!, m[2]!] as const);
      expect(listed.length, group).toBeGreaterThanOrEqual(2);
      for (const [sub, summary] of listed) {
        const help = (await run([group, sub, '--help'])).out;
        // The summary is the help's first sentence with its full stop dropped: the stop must follow it.
        expect(help, `${group} ${sub}: "${summary}"`).toMatch(new RegExp(`\\n${escapeRegExp(summary)}\\.\\n`));
      }
    }
  });
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
