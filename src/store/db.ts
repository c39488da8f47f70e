// Database selection: postgres.js against a real server when a URL is given,
// otherwise embedded PGlite in a data folder. Both are drizzle PgDatabases over
// one schema, so one body of query code runs on either.
import { linkSync, mkdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { migratePgliteDb, migratePostgresUrl } from './migrate.js';
import * as schema from './schema/index.js';
import { VERIFY_STATEMENTS_IN_FLIGHT } from './verify-batch.js';

export type Schema = typeof schema;

/**
 * What both drivers have in common. A transaction (`db.transaction(tx => …)`)
 * is also a Db, so helpers can take either. Raw `db.execute()` results differ
 * by driver; read them with `rows()` from ./rows.js.
 */
export type Db = PgDatabase<PgQueryResultHKT, Schema>;

/** The transaction handle passed to db.transaction's callback. */
export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

/**
 * A fixed SQL text with positional parameters, run through the driver
 * itself: prepared once per connection (postgres.js) and never built per
 * request. Rows come back with the driver's own value mapping (jsonb parsed).
 */
export type RawQuery = (text: string, params: readonly unknown[]) => Promise<Record<string, unknown>[]>;

export interface Store {
  db: Db;
  kind: 'postgres' | 'pglite';
  /** The hot path's statements (see RawQuery). */
  query: RawQuery;
  /** Throws when the database cannot answer (for /readyz). */
  ping(): Promise<void>;
  /** Idempotent: a second call (e.g. shutdown racing a test's cleanup) is a no-op. */
  close(): Promise<void>;
}

export interface OpenStoreOptions {
  /** postgres://… ⇒ postgres.js. */
  databaseUrl?: string;
  /** PGlite data folder (created if missing) when no URL; 'memory://' keeps nothing. */
  dataDir?: string;
  /** postgres.js pool size (default 10). */
  max?: number;
  /** Override for tests; default: migrations/ at the package root. */
  migrationsFolder?: string;
  /**
   * PostgreSQL only; default true. False for a second pool of a process
   * that already migrated (the log integrator's thread).
   */
  migrate?: boolean;
}

/** Opens the store and applies pending migrations before returning it. */
export async function openStore(opts: OpenStoreOptions): Promise<Store> {
  if (opts.databaseUrl) return openPostgres(opts.databaseUrl, opts.max ?? 10, opts.migrate === false ? null : opts.migrationsFolder);
  if (opts.dataDir) return openPglite(opts.dataDir, opts.migrationsFolder);
  throw new Error('openStore: give databaseUrl (PostgreSQL) or dataDir (embedded PGlite)');
}

/** `migrationsFolder` null: do not migrate. */
async function openPostgres(databaseUrl: string, max: number, migrationsFolder: string | null | undefined): Promise<Store> {
  if (migrationsFolder !== null) await migratePostgresUrl(databaseUrl, migrationsFolder);
  const options = {
    connect_timeout: 5,
    // Reconnect quickly: the driver's default backoff grows to 10-20 s, and
    // queries wait behind it, so an outage turned into hanging requests
    // instead of prompt 503s, and recovery lagged the database by as long.
    backoff: () => 0.2,
    onnotice: () => {},
  };
  const client = postgres(databaseUrl, { ...options, max });
  // The hot path's statements get connections of their own, as many as the batcher runs at once.
  // The pool hands out its idle connections in turn, so once a busy minute had opened all of
  // them, each verify ran on another backend whose plans and memory had gone cold in the CPU's
  // caches: a 1-in-flight verify took 1.3x as long after a 32-in-flight load as before it.
  const hot = postgres(databaseUrl, { ...options, max: VERIFY_STATEMENTS_IN_FLIGHT });
  const db = drizzlePostgres({ client, schema });
  return {
    db,
    kind: 'postgres',
    query: async (text, params) => hot.unsafe(text, params as postgres.ParameterOrJSON<never>[], { prepare: true }),
    ping: async () => {
      await db.execute(sql`select 1`);
    },
    close: once(async () => {
      await Promise.all([client.end({ timeout: 5 }), hot.end({ timeout: 5 })]);
    }),
  };
}

async function openPglite(dataDir: string, migrationsFolder?: string): Promise<Store> {
  const onDisk = !dataDir.includes('://');
  if (onDisk) mkdirSync(dataDir, { recursive: true });
  const unlock = onDisk ? lockDataFolder(dataDir) : () => {};
  let client: PGlite;
  try {
    client = await PGlite.create(dataDir);
  } catch (err) {
    unlock();
    throw err;
  }
  try {
    const db = drizzlePglite({ client, schema });
    await migratePgliteDb(db, migrationsFolder);
    return {
      db,
      kind: 'pglite',
      query: async (text, params) => (await client.query<Record<string, unknown>>(text, [...params])).rows,
      ping: async () => {
        await db.execute(sql`select 1`);
      },
      close: once(async () => {
        try {
          await client.close();
        } finally {
          unlock();
        }
      }),
    };
  } catch (err) {
    await client.close();
    unlock();
    throw err;
  }
}

/** The file that says which process holds an embedded data folder. */
export const DATA_FOLDER_LOCK = 'baton.pid';

/**
 * The embedded database belongs to one process: PGlite keeps no lock of its own, and a second
 * process writing the same folder would corrupt it. The holder's pid goes in a file that appears
 * whole (written aside, then linked into place, which fails if one exists), with the host's name
 * and, where the system tells it (Linux: /proc), the process's start time.
 *
 * A holder is judged only from the host that wrote it: a pid means nothing in another container
 * that shares the folder's volume, so a lock from another host is refused until a person deletes
 * it. On the same host, a pid that is gone, or that now is a process started at another time (a
 * restarted container is pid 1 again, with the same host name), is no holder. A stale lock is
 * taken over by one process at a time: removing it takes a second file, created exclusively, and
 * the lock is read again first, so two starts finding it cannot each remove the other's new lock.
 * Returns the release, which removes the file only while it is still this process's.
 */
export function lockDataFolder(dataDir: string): () => void {
  const lock = join(realpathSync(dataDir), DATA_FOLDER_LOCK);
  const guard = `${lock}.takeover`;
  const mine = holderText(process.pid, startTimeOf(process.pid), hostname());
  const deadline = Date.now() + LOCK_TAKEOVER_WAIT_MS;
  for (;;) {
    if (createWhole(lock, mine)) {
      heldHere.add(lock);
      let held = true;
      return () => {
        if (!held) return;
        held = false;
        heldHere.delete(lock);
        if (readHolder(lock)?.text === mine) rmSync(lock, { force: true });
      };
    }
    const holder = readHolder(lock);
    if (holder === undefined) continue; // removed meanwhile: try again
    if (holderIsAlive(lock, holder)) {
      throw new Error(
        `the data folder ${dataDir} is in use by process ${holder.pid}${holder.host && holder.host !== hostname() ? ` on host ${holder.host}` : ''} (another Baton?). Stop it, or use another folder (BATON_DATA_DIR, baton serve --data-dir); if no Baton runs there, delete ${lock}.`,
      );
    }
    if (Date.now() > deadline) {
      throw new Error(
        `the data folder ${dataDir} is being taken over by another process (${guard}); try again, or delete that file if none is starting.`,
      );
    }
    // Its process is gone: take it over, one process at a time.
    if (!createWhole(guard, mine)) {
      // A guard left by a process that died while taking over is old: removed once it is.
      if (ageMs(guard) > STALE_TAKEOVER_MS) rmSync(guard, { force: true });
      else sleepSync(20);
      continue;
    }
    try {
      // Only a guard holder removes the lock, so it still holds what was read unless it is gone.
      if (readHolder(lock)?.text === holder.text) rmSync(lock, { force: true });
    } finally {
      rmSync(guard, { force: true });
    }
  }
}

/** How long a start waits for another process's takeover of a stale lock before giving up. */
const LOCK_TAKEOVER_WAIT_MS = 5_000;
/** A takeover guard older than this was left by a process that died taking over. */
const STALE_TAKEOVER_MS = 10_000;
/** Locks this process holds (by real path): a file naming this pid that is not among them is a former holder's. */
const heldHere = new Set<string>();

interface Holder {
  readonly pid: number;
  readonly start: string | undefined;
  readonly host: string | undefined;
  readonly text: string;
}

function holderText(pid: number, start: string | undefined, host: string): string {
  return `${pid} ${start ?? '-'} ${host}`;
}

/** Creates `file` holding `text`, whole or not at all; false when it exists. */
function createWhole(file: string, text: string): boolean {
  const aside = `${file}.${process.pid}.${Date.now()}.tmp`;
  writeFileSync(aside, text);
  try {
    linkSync(aside, file);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  } finally {
    rmSync(aside, { force: true });
  }
}

/** The lock's holder; undefined when there is no file (any other failure to read it is thrown). */
function readHolder(lock: string): Holder | undefined {
  let text: string;
  try {
    text = readFileSync(lock, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  const [pid, start, host] = text.trim().split(/\s+/);
  const n = Number(pid);
  return {
    pid: Number.isInteger(n) && n > 0 ? n : 0,
    start: start === undefined || start === '-' ? undefined : start,
    host,
    text,
  };
}

function holderIsAlive(lock: string, holder: Holder): boolean {
  // Written by an earlier Baton (a pid alone): judged as it judged it.
  if (holder.host === undefined) return holder.pid > 0 && processIsAlive(holder.pid);
  // Another host's pid cannot be judged from here (a container sharing the volume): refused.
  if (holder.host !== hostname()) return true;
  if (holder.pid === process.pid) return heldHere.has(lock);
  if (holder.pid <= 0 || !processIsAlive(holder.pid)) return false;
  // The pid is someone's: the holder's only if it started when the holder did (where that is known).
  const start = startTimeOf(holder.pid);
  return holder.start === undefined || start === undefined || start === holder.start;
}

/** The process's start time in clock ticks since boot (Linux), or undefined where /proc does not tell. */
function startTimeOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which may hold spaces and parentheses: the 22nd field is the 20th here.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

function ageMs(file: string): number {
  try {
    return Date.now() - statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | undefined;
  return () => (done ??= fn());
}
