/**
 * A throwaway PostgreSQL cluster: initdb into a temp dir, start it on a free
 * loopback port, stop and start it again on the same port and data, delete it.
 * The one cluster helper of the repository: the test suite's globalSetup
 * (test/setup/postgres.ts), the reliability tests that stop PostgreSQL under
 * load, and the benchmarks all start their server here. It lives under bench/
 * because the benchmarks may not import test code; the tests may import it.
 */
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import postgres from 'postgres';
import { postgresPids } from './proc.js';

const run = promisify(execFile);

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

// PostgreSQL refuses to run as root; as root its programs run as `postgres`.
const asRoot = userInfo().uid === 0;
function pgCommand(bin: string, args: string[]): [string, string[]] {
  return asRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
}

export interface PgClusterOptions {
  /** Directory holding initdb and pg_ctl; default findPgBin(). */
  readonly binDir?: string;
  /**
   * PostgreSQL's default durability (fsync, full_page_writes and
   * synchronous_commit on), for benchmarks. Off by default: tests trade it
   * for speed, since they keep no data they care about.
   */
  readonly durable?: boolean;
  /** More server settings, each `name=value` (passed as -c). */
  readonly settings?: readonly string[];
  /**
   * synchronous_commit alone (default: `durable`). A test that kills
   * PostgreSQL must not lose commits it acknowledged; with fsync off the OS
   * still holds written WAL, as the OS does not crash.
   */
  readonly synchronousCommit?: boolean;
  /** Default 300: parallel test files each hold a small pool. */
  readonly maxConnections?: number;
}

export interface PgCluster {
  /** Superuser URL of the 'postgres' database. */
  readonly url: string;
  readonly port: number;
  readonly dir: string;
  readonly dataDir: string;
  /** pg_ctl stop, keeping the data; resolves with how long it took (ms). */
  stop(mode?: 'immediate' | 'fast'): Promise<number>;
  /** pg_ctl start on the same port and data; resolves with how long it took (ms). */
  start(): Promise<number>;
  /** CREATE DATABASE on it; returns the new database's URL. */
  createDatabase(prefix?: string): Promise<string>;
  /** The postmaster and every process it started (to pause them all, or to count their CPU). */
  pids(): number[];
  /** Stops it (if running) and deletes its directory. Never throws. */
  destroy(): Promise<void>;
  /** The same, synchronously, for process 'exit' handlers where nothing async runs. */
  destroySync(): void;
}

/** initdb + pg_ctl start of a throwaway cluster on a free loopback port. */
/**
 * `-c name=value` for pg_ctl's -o, which reaches the postgres command line through a shell: the
 * setting is single-quoted, so a value with spaces or quotes (log_line_prefix='%m [%p] ') stays
 * one argument.
 */
export function settingOption(setting: string): string {
  return `-c '${setting.replaceAll("'", `'\\''`)}'`;
}

export async function startPgCluster(opts: PgClusterOptions = {}): Promise<PgCluster> {
  const binDir = opts.binDir ?? findPgBin();
  if (!binDir) throw new Error(`No PostgreSQL server binaries.\n${HOW_TO_FIX}`);
  const dir = mkdtempSync(join(tmpdir(), 'baton-pg-'));
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
  }
  const dataDir = join(dir, 'data');
  const log = join(dir, 'server.log');
  const pgCtl = join(binDir, 'pg_ctl');
  const tail = () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-20).join('\n') : '(no log)');
  const ctl = async (args: string[]): Promise<number> => {
    const [cmd, a] = pgCommand(pgCtl, args);
    const started = performance.now();
    await run(cmd, a, { timeout: 70_000 });
    return performance.now() - started;
  };
  const durable = opts.durable ?? false;
  const settings = [
    ...(durable ? [] : ['-c fsync=off', '-c full_page_writes=off']),
    `-c synchronous_commit=${(opts.synchronousCommit ?? durable) ? 'on' : 'off'}`,
    `-c max_connections=${opts.maxConnections ?? 300}`,
    ...(opts.settings ?? []).map(settingOption),
  ];
  let port = 0;
  const start = () =>
    ctl(['start', '-D', dataDir, '-l', log, '-w', '-t', '60', '-o', [`-p ${port}`, '-h 127.0.0.1', `-k ${dir}`, ...settings].join(' ')]);
  const stop = (mode: 'immediate' | 'fast' = 'immediate') => ctl(['stop', '-D', dataDir, '-m', mode, '-w', '-t', '60']);
  const destroy = async () => {
    await stop().catch(() => 0); // not running
    rmSync(dir, { recursive: true, force: true });
  };
  const destroySync = () => {
    try {
      const [cmd, args] = pgCommand(pgCtl, ['stop', '-D', dataDir, '-m', 'immediate', '-w']);
      execFileSync(cmd, args, { stdio: 'ignore', timeout: 20_000 });
    } catch {
      // not running
    }
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    const [initCmd, initArgs] = pgCommand(join(binDir, 'initdb'), [
      '-D',
      dataDir,
      '-U',
      'postgres',
      '--auth=trust',
      '--encoding=UTF8',
      '--no-locale',
      '--no-sync',
    ]);
    await run(initCmd, initArgs, { timeout: 60_000 });
    let lastError: unknown;
    for (let attempt = 0; attempt < 3 && port === 0; attempt++) {
      port = await freePort();
      try {
        await start();
      } catch (err) {
        lastError = err; // most likely someone took the port between bind and start
        port = 0;
      }
    }
    if (port === 0) throw new Error(`could not start PostgreSQL from ${binDir}: ${String(lastError)}\n--- server log ---\n${tail()}`);
  } catch (err) {
    await destroy();
    throw err;
  }
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  return {
    url,
    port,
    dir,
    dataDir,
    stop,
    start: async () => {
      try {
        return await start();
      } catch (err) {
        throw new Error(`pg_ctl start failed: ${String(err)}\n${tail()}`);
      }
    },
    createDatabase: async (prefix = 'baton') => {
      const name = `${prefix}_${randomBytes(6).toString('hex')}`;
      const sql = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => {} });
      try {
        await sql.unsafe(`create database "${name}"`);
      } finally {
        await sql.end({ timeout: 5 });
      }
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    pids: () => postgresPids(dataDir),
    destroy,
    destroySync,
  };
}
