// A throwaway PostgreSQL cluster for tests: initdb into a temp dir, start it on
// a free loopback port, stop and delete it afterwards. Used by the vitest
// globalSetup when no BATON_TEST_DATABASE_URL is given.
import { execFile, execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface PgCluster {
  url: string; // superuser URL to the 'postgres' database
  port: number;
  dir: string;
  stop(): Promise<void>;
  /** For process 'exit' handlers, where nothing async runs. */
  stopSync(): void;
}

export const HOW_TO_FIX = [
  'Baton tests need a real PostgreSQL (no mocks). Either:',
  '  - point them at a server where the user may CREATE DATABASE:',
  '      BATON_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm test',
  '  - or install the PostgreSQL 15 server binaries so the tests start a throwaway cluster themselves:',
  '      apt-get update && apt-get install -y postgresql-15     (gives /usr/lib/postgresql/15/bin/initdb)',
  '    or set BATON_PG_BIN to a directory holding initdb and pg_ctl.',
].join('\n');

/** Directory with initdb + pg_ctl: $BATON_PG_BIN, else Debian's layout, newest-but-15-first. */
export function findPgBin(): string | undefined {
  const candidates: string[] = [];
  if (process.env.BATON_PG_BIN) candidates.push(process.env.BATON_PG_BIN);
  const debian = '/usr/lib/postgresql';
  if (existsSync(debian)) {
    const versions = readdirSync(debian).sort((a, b) => Number(b) - Number(a));
    candidates.push(...['15', ...versions].map((v) => join(debian, v, 'bin')));
  }
  try {
    candidates.push(execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim());
  } catch {
    // no pg_config on PATH
  }
  return candidates.find((d) => existsSync(join(d, 'initdb')) && existsSync(join(d, 'pg_ctl')));
}

/** Asks the kernel for a free port by binding port 0; the tiny reuse race is accepted. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (addr && typeof addr === 'object' ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

// PostgreSQL refuses to run as root; as root we run its programs as `postgres`.
const asRoot = userInfo().uid === 0;
function pgCommand(bin: string, args: string[]): [string, string[]] {
  return asRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
}

/** `durable`: keep PostgreSQL's default durability (fsync, synchronous_commit, full_page_writes on), for benchmarks. */
export async function startPgCluster(binDir: string, opts: { durable?: boolean } = {}): Promise<PgCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'baton-pg-'));
  if (asRoot) {
    const ids = execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim();
    const gid = execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim();
    chownSync(dir, Number(ids), Number(gid));
  }
  const data = join(dir, 'data');
  const log = join(dir, 'server.log');
  const pgCtl = join(binDir, 'pg_ctl');
  const stop = async () => {
    try {
      const [cmd, args] = pgCommand(pgCtl, ['stop', '-D', data, '-m', 'immediate', '-w']);
      await run(cmd, args);
    } catch {
      // already gone
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const stopSync = () => {
    try {
      const [cmd, args] = pgCommand(pgCtl, ['stop', '-D', data, '-m', 'immediate', '-w']);
      execFileSync(cmd, args, { stdio: 'ignore' });
    } catch {
      // already gone
    }
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    const [initCmd, initArgs] = pgCommand(join(binDir, 'initdb'), [
      '-D',
      data,
      '-U',
      'postgres',
      '--auth=trust',
      '--encoding=UTF8',
      '--no-locale',
      '--no-sync',
    ]);
    await run(initCmd, initArgs);

    // Tests cannot lose data they care about, so trade durability for speed.
    // Parallel test files each hold a small pool, hence the connection headroom.
    const serverOpts = (port: number) =>
      [
        `-p ${port}`,
        `-h 127.0.0.1`,
        `-k ${dir}`,
        ...(opts.durable ? [] : ['-c fsync=off', '-c synchronous_commit=off', '-c full_page_writes=off']),
        '-c max_connections=300',
      ].join(' ');
    let lastError: unknown;
    for (let attempt = 0; attempt < 3; attempt++) {
      const port = await freePort();
      const [cmd, args] = pgCommand(pgCtl, ['start', '-D', data, '-l', log, '-w', '-t', '60', '-o', serverOpts(port)]);
      try {
        await run(cmd, args);
        return { url: `postgres://postgres@127.0.0.1:${port}/postgres`, port, dir, stop, stopSync };
      } catch (err) {
        lastError = err; // most likely someone took the port between bind and start
      }
    }
    const tail = existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-20).join('\n') : '(no log)';
    throw new Error(`could not start PostgreSQL from ${binDir}: ${String(lastError)}\n--- server log ---\n${tail}`);
  } catch (err) {
    await stop();
    throw err;
  }
}
