/**
 * `baton delegate`: root and sub-delegations from flags or a policy file,
 * escalations refused before signing (exit 1, server-style explanation),
 * --submit, --parent by hash, usage errors.
 */
import { spawn } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeJws } from '../../src/protocol/jws.js';
import { generateKeyPair, keyPairToFile, type KeyPair } from '../../src/sdk/keys.js';
import { BatonClient } from '../../src/sdk/client.js';
import { closedPortUrl, startLiveService, startSilentServer, type LiveService } from '../sdk/live-service.js';
import { BIN, run, runBin, tempDir } from './helpers.js';

let live: LiveService;
let dir: string;
let S: string[];
beforeAll(async () => {
  live = await startLiveService();
  dir = tempDir();
  S = ['--server', live.baseUrl];
});
afterAll(async () => {
  await live?.close();
});

function keyFile(key: KeyPair, name: string): string {
  const file = join(dir, name);
  writeFileSync(file, JSON.stringify(keyPairToFile(key)), { mode: 0o600 });
  return file;
}

const payloadOf = (jws: string) => decodeJws(jws, 'test').payload as Record<string, unknown>;

/** A submitted root operator -> A, written as a chain file; returns A's key file too. */
async function rootChain(policyFlags: string[] = ['--tools', 'search,fetch', '--max-calls', '10', '--max-cost', '1']) {
  const a = generateKeyPair();
  const out = join(dir, `root-${a.did.slice(-6)}.json`);
  const r = await run([
    'delegate',
    '--key',
    keyFile(live.tenant.root, 'operator.json'),
    '--to',
    a.did,
    ...policyFlags,
    '--out',
    out,
    '--submit',
    ...S,
  ]);
  expect(r.code, r.err).toBe(0);
  return { a, aFile: keyFile(a, `a-${a.did.slice(-6)}.json`), chainFile: out, hash: r.out.split('\n')[0]!.trim() };
}

describe('baton delegate: root', () => {
  it('from flags: prints the JWS, signed by --key, with the policy and a 1 hour default lifetime', async () => {
    const op = generateKeyPair();
    const to = generateKeyPair().did;
    const r = await run([
      'delegate',
      '--key',
      keyFile(op, 'op.json'),
      '--to',
      to,
      '--tools',
      'search, fetch',
      '--max-calls',
      '5',
      '--max-cost',
      '0.25',
      '--max-spend',
      '10',
      '--max-depth',
      '2',
      '--resources',
      'mcp://docs/*',
      '--data-classes',
      'public',
      '--pii',
    ]);
    expect(r.code, r.err).toBe(0);
    const p = payloadOf(r.out.trim());
    expect(p).toMatchObject({
      iss: op.did,
      sub: op.did,
      aud: to,
      drs_type: 'delegation-receipt',
      drs_root_type: 'organisation',
      cmd: '/mcp/tools/call',
    });
    expect(p['policy']).toEqual({
      allowed_tools: ['search', 'fetch'],
      max_calls: 5,
      max_cost_usd: 0.25,
      max_spend_usd: 10,
      max_depth: 2,
      allowed_resources: ['mcp://docs/*'],
      allowed_data_classes: ['public'],
      pii_access: true,
      // Not granted, so signed as false: absent would read as unrestricted to a DRS verifier.
      write_access: false,
    });
    expect((p['exp'] as number) - (p['iat'] as number)).toBe(3600);
    expect(r.err).toMatch(/signed root delegation/);
  });

  it('--policy file and inline JSON, flags overriding; --ttl and --exp never; --json shape', async () => {
    const op = keyFile(generateKeyPair(), 'op2.json');
    const to = generateKeyPair().did;
    const policyFile = join(dir, 'policy.json');
    writeFileSync(policyFile, JSON.stringify({ allowed_tools: ['a', 'b'], max_calls: 9 }));
    const r = await run(['delegate', '--key', op, '--to', to, '--policy', policyFile, '--max-calls', '3', '--ttl', '2h', '--json']);
    expect(r.code, r.err).toBe(0);
    const j = JSON.parse(r.out);
    expect(Object.keys(j).sort()).toEqual(['chain', 'hash', 'jws', 'payload']);
    expect(j.payload.policy).toEqual({ allowed_tools: ['a', 'b'], max_calls: 3, pii_access: false, write_access: false });
    expect(j.payload.exp - j.payload.iat).toBe(7200);
    expect(j.chain).toEqual([j.jws]);
    expect(j.hash).toMatch(/^sha256:[0-9a-f]{64}$/);

    const inline = await run(['delegate', '--key', op, '--to', to, '--policy', '{}', '--exp', 'never', '--json']);
    expect(JSON.parse(inline.out).payload).toMatchObject({ policy: {}, exp: null });

    // The largest time a record may carry has no calendar date: said as the number, not a crash.
    const last = await run(['delegate', '--key', op, '--to', to, '--policy', '{}', '--exp', String(Number.MAX_SAFE_INTEGER)]);
    expect(last.code, last.err).toBe(0);
    expect(last.err).toContain(`expires ${Number.MAX_SAFE_INTEGER} (unix seconds, past any calendar date)`);

    // A lifetime, given or the default hour, runs from --nbf when that is later than now.
    const later = Math.floor(Date.now() / 1000) + 2 * 86_400;
    for (const [ttl, seconds] of [
      [[], 3600],
      [['--ttl', '2h'], 7200],
    ] as const) {
      const r2 = await run(['delegate', '--key', op, '--to', to, '--policy', '{}', '--nbf', String(later), ...ttl, '--json']);
      expect(r2.code, r2.err).toBe(0);
      expect(JSON.parse(r2.out).payload).toMatchObject({ nbf: later, exp: later + seconds });
    }
  });

  it('--submit stores it; a root the tenant does not trust is refused by the service (exit 1)', async () => {
    const { hash } = await rootChain();
    const audit = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit });
    expect((await audit.getDelegation(hash)).status).toBe('active');

    const stranger = keyFile(generateKeyPair(), 'stranger.json');
    const r = await run(['delegate', '--key', stranger, '--to', generateKeyPair().did, '--tools', 'x', '--submit', ...S]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/REFUSED: baton delegate: UNTRUSTED_ROOT \(block C\) \[HTTP 422\]/);
    expect(r.err).toMatch(/Request id: /);
  });

  it('--out that cannot be written is refused before --submit stores anything (exit 2)', async () => {
    const { aFile, chainFile, hash } = await rootChain();
    const r = await run([
      'delegate',
      '--key',
      aFile,
      '--parent',
      chainFile,
      '--to',
      generateKeyPair().did,
      '--tools',
      'search',
      '--max-calls',
      '1',
      '--max-cost',
      '1',
      '--out',
      '/nonexistent/r.json',
      '--submit',
      ...S,
    ]);
    expect(r.code, r.err).toBe(2);
    expect(r.err).toContain('baton delegate: --out: cannot write /nonexistent/r.json');
    expect(r.err).not.toMatch(/submitting|stored/);
    // Nothing below the parent: the sub-delegation was never sent.
    expect((await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit }).getTree(hash)).count).toBe(1);
  });

  it('--out - prints the chain file on stdout and the hash on stderr, writing no file named "-" (through the real bin)', async () => {
    const cwd = tempDir();
    const op = generateKeyPair();
    const r = await runBin(
      ['delegate', '--key', keyFile(op, 'o-stdout.json'), '--to', generateKeyPair().did, '--tools', 'x', '--out', '-'],
      {},
      60_000,
      cwd,
    );
    expect(r.code, r.err).toBe(0);
    const file = JSON.parse(r.out) as { receipts: string[] };
    expect(file.receipts).toHaveLength(1);
    expect(payloadOf(file.receipts[0]!)).toMatchObject({ iss: op.did });
    expect(r.err).toMatch(/wrote the chain \(1 record\(s\), root first\) to stdout; the new record is sha256:[0-9a-f]{64}/);
    expect(existsSync(join(cwd, '-'))).toBe(false);
    const both = await run(['delegate', '--key', keyFile(op, 'o-stdout.json'), '--to', op.did, '--tools', 'x', '--out', '-', '--json']);
    expect(both.code).toBe(2);
    expect(both.err).toContain('--out - prints the chain file on stdout, and --json prints its own answer there');
  }, 60_000);
});

/** A root delegation's argv, signed by the tenant's trusted root (else by `signer`), written to `out` and submitted to `server`. */
function submitRootTo(out: string, server: string, signer = live.tenant.root): string[] {
  const key = keyFile(signer, `o-${signer.did.slice(-8)}.json`);
  return ['delegate', '--key', key, '--to', generateKeyPair().did, '--tools', 'x', '--out', out, '--submit', '--server', server];
}

/** The temporary files staged for `out` and left beside it. */
const leftovers = (out: string) => readdirSync(dir).filter((f) => f.startsWith(`.${out.split('/').pop()}.`));

describe('baton delegate --out --submit: the file when the store is not known', () => {
  it('no answer (nothing listening, a timeout) or a 5xx: the chain is kept with how to send it again, exit 3', async () => {
    const silent = await startSilentServer();
    const unavailable = createServer((_req, res) =>
      res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{"code":"STORAGE_UNAVAILABLE","message":"test"}}'),
    );
    await new Promise<void>((resolve) => unavailable.listen(0, '127.0.0.1', resolve));
    const address = unavailable.address();
    const unavailableUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    try {
      for (const [what, server, extra] of [
        ['nothing listening', await closedPortUrl(), []],
        ['a timeout', silent.url, ['--timeout', '300']],
        ['503', unavailableUrl, []],
      ] as const) {
        const out = join(dir, `kept-${what.replace(/\W/g, '')}.json`);
        // A file replaced keeps the access its owner gave it.
        writeFileSync(out, 'an earlier chain', { mode: 0o600 });
        const r = await run([...submitRootTo(out, server), ...extra]);
        expect(statSync(out).mode & 0o777, what).toBe(0o600);
        expect(r.code, what).toBe(3);
        expect(r.err, what).toContain(
          `the record may be stored all the same: the chain is in ${out}; send it again with baton submit ${out}`,
        );
        expect((JSON.parse(readFileSync(out, 'utf8')) as { receipts: string[] }).receipts, what).toHaveLength(1);
        expect(leftovers(out), what).toEqual([]);
      }
      // What was kept is what a later submit stores.
      const kept = join(dir, 'kept-nothinglistening.json');
      expect((await run(['submit', kept, ...S])).code).toBe(0);
    } finally {
      await silent.close();
      await new Promise<void>((resolve) => unavailable.close(() => resolve()));
    }
  });

  it('a refusal (4xx) leaves no file: nothing was stored', async () => {
    const out = join(dir, 'refused.json');
    const r = await run(submitRootTo(out, live.baseUrl, generateKeyPair()));
    expect(r.code).toBe(1);
    expect(r.err).toContain('UNTRUSTED_ROOT');
    expect(r.err).not.toContain('may be stored');
    expect(existsSync(out)).toBe(false);
    expect(leftovers(out)).toEqual([]);
  });

  it.each(['SIGINT', 'SIGHUP'] as const)(
    '%s while the submission waits for an answer: the chain is kept, no temporary file left (through the real bin)',
    async (signal) => {
      const silent = await startSilentServer();
      const out = join(dir, `interrupted-${signal}.json`);
      try {
        const child = spawn(process.execPath, [BIN, ...submitRootTo(out, silent.url)], {
          env: { PATH: process.env['PATH'] ?? '', HOME: tempDir() },
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        let err = '';
        const ended = new Promise<NodeJS.Signals | null>((resolve) => child.on('close', (_code, signal) => resolve(signal)));
        await new Promise<void>((resolve) =>
          child.stderr.on('data', (chunk: Buffer) => {
            err += chunk.toString();
            if (err.includes('submitting')) resolve();
          }),
        );
        child.kill(signal);
        expect(await ended, err).toBe(signal);
        expect(err).toContain(`the record may be stored all the same: the chain is in ${out}`);
        expect(existsSync(out)).toBe(true);
        expect(leftovers(out)).toEqual([]);
      } finally {
        await silent.close();
      }
    },
    60_000,
  );

  it('--out naming a symbolic link writes through it, as before: the link stays, its target gets the chain', async () => {
    const op = keyFile(generateKeyPair(), 'o-link.json');
    const to = generateKeyPair().did;
    const target = join(dir, 'link-target.json');
    const dangling = join(dir, 'dangling-target.json');
    writeFileSync(target, 'old');
    symlinkSync(target, join(dir, 'link.json'));
    symlinkSync('dangling-target.json', join(dir, 'dangling-link.json'));
    for (const [link, written] of [
      [join(dir, 'link.json'), target],
      [join(dir, 'dangling-link.json'), dangling],
    ]) {
      const r = await run(['delegate', '--key', op, '--to', to, '--tools', 'x', '--out', link!]);
      expect(r.code, r.err).toBe(0);
      expect(lstatSync(link!).isSymbolicLink()).toBe(true);
      expect((JSON.parse(readFileSync(written!, 'utf8')) as { receipts: string[] }).receipts).toHaveLength(1);
    }
  });
});

describe('baton delegate: sub-delegation', () => {
  it('narrows a parent from a chain file: --out writes the chain root first; --submit stores it', async () => {
    const { aFile, chainFile } = await rootChain();
    const b = generateKeyPair();
    const out = join(dir, 'b.chain.json');
    const r = await run([
      'delegate',
      '--key',
      aFile,
      '--to',
      b.did,
      '--parent',
      chainFile,
      '--tools',
      'search',
      '--max-calls',
      '3',
      '--max-cost',
      '0.5',
      '--out',
      out,
      '--submit',
      ...S,
    ]);
    expect(r.code, r.err).toBe(0);
    const receipts = JSON.parse(readFileSync(out, 'utf8')).receipts as string[];
    expect(receipts).toHaveLength(2);
    expect(receipts[0]).toBe(JSON.parse(readFileSync(chainFile, 'utf8')).receipts[0]);
    const child = payloadOf(receipts[1]!);
    const parent = payloadOf(receipts[0]!);
    expect(child).toMatchObject({ aud: b.did, sub: parent['sub'], exp: parent['exp'], nbf: parent['nbf'] });
    expect(r.err).toMatch(/signed sub-delegation \(depth 1\)/);
    // Keyless: no status in the answer (nothing stored about a record), so none printed.
    expect(r.err).toMatch(/stored: \S+ depth 1$/m);
  });

  it('refuses an escalation before signing: exit 1, every violation, what to do, nothing stored', async () => {
    const { aFile, chainFile, hash } = await rootChain();
    const r = await run([
      'delegate',
      '--key',
      aFile,
      '--to',
      generateKeyPair().did,
      '--parent',
      chainFile,
      '--tools',
      'search,shell',
      '--max-calls',
      '20',
      '--submit',
      ...S,
    ]);
    expect(r.code).toBe(1);
    expect(r.out).toBe('');
    expect(r.err).toMatch(/^REFUSED: baton delegate: POLICY_ESCALATION \(block D\)/);
    expect(r.err).toMatch(/Unmet conditions \(3\)/);
    expect(r.err).toMatch(/policy\.allowed_tools: required \["search","fetch"\], got \["shell"\]/);
    expect(r.err).toMatch(/policy\.max_cost_usd/);
    expect(r.err).toMatch(/policy\.max_calls: required 10, got 20/);
    expect(r.err).toMatch(/What to do:\n {2}- Narrow the child policy/);
    expect(r.err).toMatch(/nothing was signed or sent/);
    expect(r.err).not.toMatch(/submitting/);
    const tree = await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit }).getTree(hash);
    expect(tree.count).toBe(1);

    const j = await run([
      'delegate',
      '--key',
      aFile,
      '--to',
      generateKeyPair().did,
      '--parent',
      chainFile,
      '--tools',
      'search',
      '--max-calls',
      '3',
      '--max-cost',
      '1',
      '--pii',
      '--json',
    ]);
    expect(j.code).toBe(1);
    expect(JSON.parse(j.out)).toMatchObject({
      error: { code: 'POLICY_ESCALATION', details: { block: 'D', violations: [{ field: 'policy.pii_access' }] } },
    });
  });

  it('refuses before signing a ceiling or budget that is wider only below a micro-dollar', async () => {
    const { aFile, chainFile } = await rootChain(['--max-cost', '0.3', '--max-spend', '0.3']);
    const child = (...policyFlags: string[]) =>
      run(['delegate', '--key', aFile, '--to', generateKeyPair().did, '--parent', chainFile, ...policyFlags]);
    for (const wider of ['0.3000001', '0.30000049']) {
      const cost = await child('--max-cost', wider, '--max-spend', '0.3', '--json');
      const spend = await child('--max-cost', '0.3', '--max-spend', wider, '--json');
      for (const [r, field] of [
        [cost, 'policy.max_cost_usd'],
        [spend, 'policy.max_spend_usd'],
      ] as const) {
        expect(r.code, r.err).toBe(1);
        expect(JSON.parse(r.out)).toMatchObject({ error: { code: 'POLICY_ESCALATION', details: { violations: [{ field }] } } });
      }
    }
    const narrower = await child('--max-cost', '0.3', '--max-spend', '0.29999999');
    expect(narrower.code, narrower.err).toBe(0);
  });

  it('refuses a hand-off not signed by the parent holder, and a child outliving its parent', async () => {
    const { chainFile } = await rootChain();
    const wrong = await run([
      'delegate',
      '--key',
      keyFile(generateKeyPair(), 'w.json'),
      '--to',
      generateKeyPair().did,
      '--parent',
      chainFile,
      '--tools',
      'search',
      '--max-calls',
      '1',
      '--max-cost',
      '1',
    ]);
    expect(wrong.code).toBe(1);
    expect(wrong.err).toMatch(/ISSUER_AUDIENCE_GAP/);
    expect(wrong.err).toMatch(/Only the holder of the parent delegation/);

    const { aFile, chainFile: c2 } = await rootChain();
    const late = await run([
      'delegate',
      '--key',
      aFile,
      '--to',
      generateKeyPair().did,
      '--parent',
      c2,
      '--tools',
      'search',
      '--max-calls',
      '1',
      '--max-cost',
      '1',
      '--ttl',
      '7d',
    ]);
    expect(late.code).toBe(1);
    expect(late.err).toMatch(/exp/);
  });

  it('--parent <hash> fetches the stored chain (with --server and a read key)', async () => {
    const { aFile, hash } = await rootChain();
    const r = await run([
      'delegate',
      '--key',
      aFile,
      '--to',
      generateKeyPair().did,
      '--parent',
      hash,
      '--tools',
      'fetch',
      '--max-calls',
      '2',
      '--max-cost',
      '0.1',
      '--json',
      ...S,
      '--api-key',
      live.tenant.keys.audit,
    ]);
    expect(r.code, r.err).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.chain).toHaveLength(2);
    expect(j.payload.prev_dr_hash).toBe(hash);
    expect(r.err).toMatch(/fetching the chain of/);
    const noKey = await run(['delegate', '--key', aFile, '--to', generateKeyPair().did, '--parent', hash, '--tools', 'fetch', ...S]);
    expect(noKey.code).toBe(1);
    expect(noKey.err).toMatch(/UNAUTHORIZED \[HTTP 401\]/);
  });
});

describe('baton delegate: unusable input (exit 2)', () => {
  it('missing flags, no policy, both --ttl and --exp, unknown policy fields, bad numbers, bad key file', async () => {
    const key = keyFile(generateKeyPair(), 'k.json');
    const to = generateKeyPair().did;
    const cases: [string[], RegExp][] = [
      [['delegate', '--to', to, '--tools', 'x'], /--key/],
      [['delegate', '--key', key, '--tools', 'x'], /--to/],
      [['delegate', '--key', key, '--to', to], /give a policy/],
      [['delegate', '--key', key, '--to', to, '--tools', 'x', '--ttl', '1h', '--exp', '5'], /--ttl or --exp/],
      [['delegate', '--key', key, '--to', to, '--policy', '{"allowed_tools":["x"],"max_money":3}'], /INVALID_FIELD/],
      [['delegate', '--key', key, '--to', to, '--max-calls', 'lots'], /--max-calls takes a whole number/],
      [['delegate', '--key', key, '--to', to, '--max-cost=-1'], /--max-cost takes an amount/],
      [['delegate', '--key', key, '--to', to, '--tools', 'x', '--ttl', 'soon'], /--ttl takes a duration/],
      [['delegate', '--key', join(dir, 'missing.json'), '--to', to, '--tools', 'x'], /cannot read key file/],
      [['delegate', '--key', key, '--to', 'did:web:example.com', '--tools', 'x'], /INVALID_FIELD|INVALID_DID/],
      // The form of a did:key but no Ed25519 key in it: refused before signing, not by the service later.
      [
        ['delegate', '--key', key, '--to', 'did:key:zBAD', '--tools', 'x', '--out', join(dir, 'bad-aud.json')],
        /aud did:key:zBAD is not a usable did:key/,
      ],
      [['delegate', '--key', key, '--to', to, '--tools', 'x', '--parent', key], /must hold signed records/],
      [['delegate', '--key', key, '--to', to, '--tools', 'x', '--parent', join(dir, 'p.json'), '--subject', to], /root delegation only/],
    ];
    for (const [argv, message] of cases) {
      const r = await run(argv);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.err, argv.join(' ')).toMatch(message);
    }
    expect(existsSync(join(dir, 'bad-aud.json'))).toBe(false);
  });
});

describe('flags that save a file for a later run', () => {
  it('refuse "-" before any work: it would be a file named "-"', async () => {
    const server = await closedPortUrl();
    for (const [args, flag] of [
      [['audit', '--server', server, '--api-key', 'k', '--save-checkpoint', '-'], '--save-checkpoint'],
      [['log', 'proof', '1', '--server', server, '--api-key', 'k', '--save', '-'], '--save'],
      [['log', 'proof', '1', '--server', server, '--api-key', 'k', '--save-trust', '-'], '--save-trust'],
      [['service-receipt', 'verify', '--fetch', '--server', server, '--api-key', 'k', '--save-keys', '-'], '--save-keys'],
    ] as const) {
      const r = await run([...args]);
      // A usage error (2), not the closed port's network error (3): nothing was sent.
      expect(r.code, r.err).toBe(2);
      expect(r.err).toContain(`${flag} writes a file for a later run to read: give its path, not "-".`);
      expect(existsSync('-')).toBe(false);
    }
  });
});
