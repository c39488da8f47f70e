/** `baton serve` through the real bin: starts on a real PostgreSQL, answers, stops cleanly on SIGTERM. */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { decodeMasterKey, loadConfig } from '../../src/config.js';
import { BatonClient } from '../../src/sdk/client.js';
import { createDatabase } from '../setup/db.js';
import { BIN, buildPackages, run, runBin, runPackaged, waitForListening, waitForListeningLine } from './helpers.js';

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');

/** Every environment variable src/config.ts reads: its EnvSchema's keys and its env['...'] reads. */
function configVariables(): string[] {
  const source = read('src/config.ts');
  const schema = /const EnvSchema = z\.object\(\{\n([\s\S]*?)\n\}\);/.exec(source)?.[1];
  if (schema === undefined) throw new Error('src/config.ts: EnvSchema not found');
  const names = new Set([
    ...[...schema.matchAll(/^ {2}([A-Z][A-Z0-9_]*):/gm)].map((m) => m[1]!),
    ...[...source.matchAll(/env\[['"]([A-Z][A-Z0-9_]*)['"]\]/g)].map((m) => m[1]!),
  ]);
  return [...names].sort();
}

/** The lines of a help text that document a variable: an entry of the Environment list, or a flag's line naming it. */
function documents(help: string, name: string): boolean {
  return new RegExp(`^ {2}${name} |^ {2}--\\S+ .*\\b${name}\\b`, 'm').test(help);
}

describe('baton serve --help and the configuration it documents', () => {
  it('lists every variable src/config.ts reads, each as an entry or beside its flag', async () => {
    const names = configVariables();
    expect(names).toEqual(expect.arrayContaining(['PORT', 'DATABASE_URL', 'BATON_MASTER_KEY', 'BATON_REQUEST_TIMEOUT_MS'])); // the whole schema
    const r = await run(['serve', '--help']);
    expect(r.code).toBe(0);
    expect(names.filter((n) => !documents(r.out, n))).toEqual([]);
  });

  it('gives the bearer tokens the form the code accepts: 24 to 512 printable ASCII characters, no spaces', async () => {
    const help = (await run(['serve', '--help'])).out;
    expect(help).toMatch(/^ {2}BATON_ADMIN_KEY +the admin API key: 24 to 512 printable ASCII\n +characters, no spaces/m);
    expect(help).toMatch(/\(24 to\n +512 printable ASCII characters, no spaces;/);
    // What the help says is what the check takes: 24 to 512 pass; 23, 513 or a space do not.
    for (const good of ['k'.repeat(24), '~'.repeat(512)]) expect(loadConfig({ BATON_ADMIN_KEY: good }).adminKey).toBe(good);
    for (const bad of ['k'.repeat(23), `${'k'.repeat(24)} x`, 'k'.repeat(513)])
      expect(() => loadConfig({ BATON_ADMIN_KEY: bad })).toThrow(
        /BATON_ADMIN_KEY must be 24 to 512 printable ASCII characters without spaces/,
      );
  });

  it('gives the master key the formats the code accepts: 64 hex digits or base64 of 32 bytes', async () => {
    const key = randomBytes(32);
    expect(decodeMasterKey(key.toString('hex'))).not.toBeNull();
    expect(decodeMasterKey(key.toString('base64'))).not.toBeNull();
    expect(decodeMasterKey(key.toString('base64url'))).not.toBeNull();
    expect(decodeMasterKey(Buffer.alloc(32).toString('hex'))).toBeNull();
    const entry = /^ {2}BATON_MASTER_KEY +(.*)$/m.exec((await run(['serve', '--help'])).out)?.[1];
    expect(entry).toMatch(/32 random bytes as 64 hex digits or base64/);
    expect(read('README.md')).toMatch(
      /^\| `BATON_MASTER_KEY` \|.*32 random bytes \(64 hex digits, or base64 of either alphabet: 43 characters, or 44 ending in `=`; nothing looser, never all zero\)/m,
    );
  });

  it("an invalid value's message points to places that list every variable, and they do", async () => {
    let message = '';
    try {
      loadConfig({ BATON_MAX_BODY_BYTES: '12' });
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toContain('BATON_MAX_BODY_BYTES must be a whole number');
    expect(message).toContain('"baton serve --help" lists every variable');
    expect(message).toContain('the README\'s "Configuration" section');
    // The repository's README: a Configuration section with a row per variable.
    const section = /\n## Configuration\n([\s\S]*?)\n## /.exec(read('README.md'))?.[1] ?? '';
    expect(configVariables().filter((n) => !section.includes(`\`${n}\``))).toEqual([]);
  });

  it('the installed server package has them too: its README has a Configuration section pointing to serve --help', async () => {
    await buildPackages();
    const readme = readFileSync(new URL('../../dist/packages/server/README.md', import.meta.url), 'utf8');
    expect(readme).toMatch(/^## Configuration\n[\s\S]*baton serve --help` lists\nevery variable/m);
    const r = await runPackaged(['serve', '--help']);
    expect(r.code, r.err).toBe(0);
    expect(configVariables().filter((n) => !documents(r.out, n))).toEqual([]);
  }, 660_000);
});

describe('baton serve', () => {
  it.each([1, 2])(
    'runs the service (%i worker process(es)) until SIGTERM, then exits 0; says once where it listens',
    async (workers) => {
      const db = await createDatabase();
      const adminKey = `serve-admin-${randomBytes(16).toString('hex')}`;
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env))
        if (v !== undefined && !k.startsWith('BATON_') && k !== 'DATABASE_URL' && k !== 'PORT') env[k] = v;
      const args = [BIN, 'serve', '--port', '0', '--host', '127.0.0.1', '--database-url', db.url, '--workers', String(workers)];
      const child = spawn(process.execPath, args, {
        env: { ...env, BATON_ADMIN_KEY: adminKey, BATON_MASTER_KEY: randomBytes(32).toString('hex'), BATON_LOG_LEVEL: 'error' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
      try {
        const { url, database } = await waitForListeningLine(child, 60_000);
        expect(database).toBe('postgres');
        const client = new BatonClient({ baseUrl: url, apiKey: adminKey });
        expect(await client.ready()).toEqual({ status: 'ready' });
        expect(await client.admin.createTenant('served')).toMatchObject({ name: 'served' });
        // Every worker listens on the one port; the line that names it comes once.
        expect(output.match(/Baton is listening on/g), output).toHaveLength(1);
        if (workers > 1) expect(output).toContain(`(database: postgres, ${workers} workers)`);
        const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
        child.kill('SIGTERM');
        expect(await exited).toBe(0);
      } finally {
        if (child.exitCode === null) child.kill('SIGKILL');
        await db.drop();
      }
    },
    90_000,
  );

  it('invalid configuration is a usage error (exit 2) naming the setting as the user gave it: flag or variable', async () => {
    const r = await runBin(['serve', '--port', '99999']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--port must be a whole number from 0 to 65535/);
    expect(r.err).not.toMatch(/\bPORT must/);
    expect(r.err).toContain('"baton serve --help" lists every variable');
    const url = await runBin(['serve', '--database-url', 'mysql://x']);
    expect(url.code).toBe(2);
    expect(url.err).toMatch(/--database-url must start with postgres/);
    // A typed value that spells a variable's name is quoted as typed.
    const spelled = await runBin(['serve', '--port', '99999', '--workers', 'PORT']);
    expect(spelled.code).toBe(2);
    expect(spelled.err).toMatch(/--workers must be a whole number .*got "PORT"/);
    expect(spelled.err).toMatch(/--port must be a whole number/);
    // A quote inside a value is quoted as JSON, so the flags after it are still named as flags.
    const quoted = await runBin(['serve', '--port', 'a"', '--workers', 'zz']);
    expect(quoted.code).toBe(2);
    expect(quoted.err).toMatch(/--port must be a whole number .*got "a\\""/);
    expect(quoted.err).toMatch(/--workers must be a whole number .*got "zz"/);
    const fromEnv = await runBin(['serve'], { PORT: '99999' });
    expect(fromEnv.code).toBe(2);
    expect(fromEnv.err).toMatch(/\bPORT must be a whole number from 0 to 65535/);
    // A variable not read is named as set, and what it may mean as a variable, beside a flag's refusal.
    const unread = await runBin(['serve', '--port', 'abc'], { BATON_PORT: '9000' });
    expect(unread.code).toBe(2);
    expect(unread.err).toMatch(/--port must be a whole number/);
    expect(unread.err).toContain("BATON_PORT is set but is no setting of Baton's: it is ignored (did you mean PORT?)");
  }, 90_000);
});

describe('npm start', () => {
  // npm start builds dist/packages first when the sources changed (tens of seconds
  // on a loaded machine), hence the long wait for the listening line.
  // npm runs the script through sh; without `exec` the service was orphaned when
  // npm got SIGTERM (a container stop, a process manager) and kept serving.
  it('stops the service when npm itself gets SIGTERM', async () => {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env))
      if (v !== undefined && !k.startsWith('BATON_') && !k.startsWith('npm_') && k !== 'DATABASE_URL' && k !== 'PORT') env[k] = v;
    const npm = spawn('npm', ['start', '--silent'], {
      cwd: new URL('../..', import.meta.url).pathname,
      env: {
        ...env,
        PORT: '0',
        BATON_DATA_DIR: 'memory://',
        BATON_ADMIN_KEY: `start-admin-${randomBytes(16).toString('hex')}`,
        BATON_MASTER_KEY: randomBytes(32).toString('hex'),
        BATON_LOG_LEVEL: 'error',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const url = await waitForListening(npm, 200_000);
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
      const exited = new Promise<void>((resolve) => npm.on('exit', () => resolve()));
      npm.kill('SIGTERM');
      await exited;
      // The service must be gone too: nothing answers on its port any more.
      let stillServing = true;
      for (let i = 0; i < 50 && stillServing; i++) {
        stillServing = await fetch(`${url}/healthz`).then(
          () => true,
          () => false,
        );
        if (stillServing) await new Promise((r) => setTimeout(r, 200));
      }
      expect(stillServing, 'the service outlived npm').toBe(false);
    } finally {
      if (npm.exitCode === null) npm.kill('SIGKILL');
    }
  }, 240_000);
});
