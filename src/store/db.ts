// Database selection: postgres.js against a real server when a URL is given,
// otherwise embedded PGlite in a data folder. Both are drizzle PgDatabases over
// one schema, so one body of query code runs on either.
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { lockDataFolder, type DataFolderLockOptions } from './data-folder-lock.js';
import { migratePgliteDb, migratePostgresUrl, type MigrationPlanListener } from './migrate.js';
import * as schema from './schema/index.js';
import { VERIFY_STATEMENTS_IN_FLIGHT } from './verify-batch.js';
import { errorText } from './errors.js';

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

/** Asked just before a commit; throws to roll the transaction back instead (the service's CommitGate). */
export interface CommitCheck {
  beforeCommit(): void;
}

/**
 * `db.transaction(fn)`, asking `gate` after `fn` and before the commit: a write request answered
 * 503 while its work waited for the database rolls back when the database answers. With no gate
 * (work no request waits for), it commits as `db.transaction` does.
 */
export async function transactionBehind<T>(db: Db, gate: CommitCheck | undefined, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return db.transaction(async (tx) => {
    const result = await fn(tx);
    gate?.beforeCommit();
    return result;
  });
}

export interface Store {
  db: Db;
  kind: 'postgres' | 'pglite';
  /** The hot path's statements (see RawQuery). */
  query: RawQuery;
  /**
   * Throws when the database cannot take this node's writes (for /readyz): it does not answer, or
   * the sessions the node's requests and verifies run on are read-only.
   */
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
  /** PGlite on disk: how the data folder's lock reports a wait, and a lock lost while held (./data-folder-lock.ts). */
  lock?: DataFolderLockOptions;
  /**
   * PGlite: told once, with what to do, when the embedded database stopped for good (see
   * guardAgainstAbort); every statement fails at once from then on. Without it (the default) the
   * message goes to stderr and the process ends (exit code 1), as a lost lock ends it, so that a
   * supervisor starts it again.
   */
  onStopped?: (message: string) => void;
  /** Told what the start is about to apply, before it applies it (not called when `migrate` is false). */
  onMigrations?: MigrationPlanListener;
  /** PostgreSQL: how long a session serves before the driver replaces it (default SESSION_LIFETIME_SECONDS). */
  sessionLifetimeSeconds?: () => number;
}

/**
 * A session takes the database's and role's settings (ALTER DATABASE ... SET) once, when it begins:
 * sessions a pool opened while the database was read-only (a primary set read-only, a standby
 * during a failover) refused every write (25006, a 503) after it could write again, for as long as
 * the driver kept them, 30 to 60 minutes by default (an outside probe). The driver now replaces
 * each session after about a minute, each at its own time, letting it finish what it runs first.
 * Closing one chosen session, or whole pools, from outside the driver did not hold up in review.
 */
export const SESSION_LIFETIME_SECONDS = (): number => 45 + Math.random() * 30;

/**
 * A session that answers but refuses writes (a primary set `default_transaction_read_only`, a
 * standby after a failover the node's address still points at) fails every verify with a 503: a
 * node on one is not ready, though `select 1` answers.
 */
const WRITABLE_SESSION_QUERY = "select current_setting('transaction_read_only') as read_only";

/** SQLSTATE read_only_sql_transaction: a write in a read-only session. */
const READ_ONLY_SQLSTATE = '25006';

function assertWritableSession(rows: readonly Record<string, unknown>[], what = 'the database session is read-only'): void {
  if (rows[0]?.read_only !== 'off') throw new Error(`${what}: writes would be refused`);
}

/** Opens the store and applies pending migrations before returning it. */
export async function openStore(opts: OpenStoreOptions): Promise<Store> {
  if (opts.databaseUrl)
    return openPostgres(opts.databaseUrl, opts.max ?? 10, opts.migrate === false ? null : opts.migrationsFolder, {
      onMigrations: opts.onMigrations,
      sessionLifetimeSeconds: opts.sessionLifetimeSeconds ?? SESSION_LIFETIME_SECONDS,
    });
  if (opts.dataDir) return openPglite(opts.dataDir, opts.migrationsFolder, opts.lock, opts.onStopped, opts.onMigrations);
  throw new Error('openStore: give databaseUrl (PostgreSQL) or dataDir (embedded PGlite)');
}

/** `migrationsFolder` null: do not migrate. */
async function openPostgres(
  databaseUrl: string,
  max: number,
  migrationsFolder: string | null | undefined,
  { onMigrations, sessionLifetimeSeconds }: { onMigrations?: MigrationPlanListener; sessionLifetimeSeconds: () => number },
): Promise<Store> {
  if (migrationsFolder !== null) await migratePostgresUrl(databaseUrl, migrationsFolder, undefined, onMigrations);
  const options = {
    connect_timeout: 5,
    // A function, asked once per connection so that they end at different times, as the driver's own
    // default is (its types say only number).
    max_lifetime: sessionLifetimeSeconds as unknown as number,
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
  /**
   * Whether a statement on `hot` was refused as read-only, and readiness has not found its session
   * writable since. A statement that goes through does not clear it: a verify the statement refuses
   * early (KEY_REVOKED, UNTRUSTED_ROOT) or the clock read writes nothing, and goes through on a
   * read-only session too.
   */
  let verifiesReadOnly = false;
  const db = drizzlePostgres({ client, schema });
  return {
    db,
    kind: 'postgres',
    query: async (text, params) => {
      try {
        return await hot.unsafe(text, params as postgres.ParameterOrJSON<never>[], { prepare: true });
      } catch (err) {
        if ((err as { code?: unknown }).code === READ_ONLY_SQLSTATE) verifiesReadOnly = true;
        throw err;
      }
    },
    // Every other request runs on `client`: one of its sessions is asked. The verifies' own pool is
    // not queried until one of its statements is refused as read-only (a query there waits behind
    // their statements, which a slow database holds for seconds: every node would turn unready at
    // once). From then it is asked until a session answers writable: a node out of its load
    // balancer's rotation gets no verifies that could tell it so.
    ping: async () => {
      if (verifiesReadOnly) {
        assertWritableSession(await hot.unsafe(WRITABLE_SESSION_QUERY), 'verifies were refused as read-only');
        verifiesReadOnly = false;
      }
      assertWritableSession(await client.unsafe(WRITABLE_SESSION_QUERY));
    },
    close: once(async () => {
      // Every request is answered by now: a query still running is one a hung database holds past
      // its deadline, and waiting longer would only eat the stop's 10 s (server.ts).
      await Promise.all([client.end({ timeout: 2 }), hot.end({ timeout: 2 })]);
    }),
  };
}

/**
 * Written once a start has opened and migrated the folder's database: from then on the folder holds
 * one. PostgreSQL's own files cannot say so: PGlite copies a new cluster into the folder in no
 * set order (global/pg_control long before PG_VERSION), so a first start cut short leaves some of
 * them, which PGlite then creates again.
 */
export const DATABASE_MARKER_FILE = 'baton-database';

/**
 * Whether a cluster's folder holds a relation created after initdb (a file numbered from 16384,
 * PostgreSQL's first normal object id, in base/<database>/): a folder an earlier build migrated,
 * before it wrote the marker. A new cluster, whole or copied in part, has none.
 */
export function holdsTablesOfItsOwn(dataDir: string): boolean {
  try {
    return readdirSync(join(dataDir, 'base')).some((database) =>
      readdirSync(join(dataDir, 'base', database)).some((file) => /^\d+$/.test(file) && Number(file) >= 16_384),
    );
  } catch {
    return false; // no base/ (or not readable): PGlite judges the rest
  }
}
const DATABASE_MARKER_TEXT =
  "This folder holds Baton's embedded database (PGlite). Keep every file in it: without PG_VERSION, PGlite would create an empty database over it, so Baton refuses to start.\n";

async function openPglite(
  dataDir: string,
  migrationsFolder?: string,
  lock?: DataFolderLockOptions,
  onStopped: (message: string) => void = endProcess,
  onMigrations?: MigrationPlanListener,
): Promise<Store> {
  const onDisk = !dataDir.includes('://');
  // Owner only: PGlite's own files are world-writable (see restrictDataFolder in server.ts).
  if (onDisk) mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const unlock = onDisk ? lockDataFolder(dataDir, lock) : () => {};
  // PGlite alone would create a new, empty database over a cluster that lost its PG_VERSION: every
  // tenant, counter and used jti gone without a word (an outside probe). A folder a start has
  // migrated (its marker) without PG_VERSION is damaged.
  const lostVersion =
    onDisk && !existsSync(join(dataDir, 'PG_VERSION')) && (existsSync(join(dataDir, DATABASE_MARKER_FILE)) || holdsTablesOfItsOwn(dataDir));
  let client: PGlite;
  try {
    if (lostVersion) throw new Error(`it holds a database whose PG_VERSION file is missing`);
    client = await PGlite.create(dataDir);
  } catch (err) {
    unlock();
    // PGlite says only that it "failed to initialize properly": name the folder and the way out. The
    // cause is told in the message, not attached as well: a failed start prints both (twice, then).
    const why = errorText(err);
    throw new Error(
      `the embedded database in ${dataDir} could not be opened (${why}). Check that the folder is readable and writable and the disk has room. If it is damaged or not a Baton data folder, restore it from a backup, or move it aside and start again (a new folder starts empty), or set BATON_DATA_DIR (baton serve --data-dir) to another folder.`,
    );
  }
  const stopped = guardAgainstAbort(client, dataDir, (message) => {
    unlock(); // the aborted instance writes nothing more: the next start need not take the lock over
    onStopped(message);
  });
  try {
    const db = drizzlePglite({ client, schema });
    await migratePgliteDb(db, migrationsFolder, onMigrations);
    if (onDisk && !existsSync(join(dataDir, DATABASE_MARKER_FILE)))
      writeFileSync(join(dataDir, DATABASE_MARKER_FILE), DATABASE_MARKER_TEXT, { mode: 0o600 });
    return {
      db,
      kind: 'pglite',
      query: async (text, params) => (await client.query<Record<string, unknown>>(text, [...params])).rows,
      ping: async () => {
        assertWritableSession((await client.query<Record<string, unknown>>(WRITABLE_SESSION_QUERY)).rows);
      },
      close: once(async () => {
        try {
          // Closing runs statements in the aborted instance too: give the folder back without them.
          if (!stopped()) await client.close();
        } finally {
          unlock();
        }
      }),
    };
  } catch (err) {
    // The migration's error is the one to tell, and the folder is given back even if closing fails too.
    if (!stopped()) await client.close().catch(() => {});
    unlock();
    throw err;
  }
}

/**
 * A PANIC in PGlite's PostgreSQL (the disk filled while it wrote its WAL: "could not write to file
 * pg_wal/xlogtemp…: No space left on device") aborts its WebAssembly instance. PGlite swallows the
 * abort, hands that statement's error back, and runs the next statement in the aborted instance,
 * which spins in it for good: the event loop blocked, /healthz unanswered, a CPU busy, nothing
 * logged, even once space is freed (an outside probe). So from the abort on, every statement fails
 * at once with a storage error (57P02, as PostgreSQL's own backends are told after a crash: a 503,
 * never an allow), and `onStopped` is told once. What was committed is safe on disk: the next start
 * recovers it from the WAL. Returns whether the database has stopped.
 */
function guardAgainstAbort(client: PGlite, dataDir: string, onStopped: (message: string) => void): () => boolean {
  let aborted = false;
  let panic: unknown; // the error PostgreSQL sent as it aborted, for the message
  let stopped: Error | undefined;
  const stoppedError = (): Error => {
    if (stopped) return stopped;
    const why = panic instanceof Error ? `PostgreSQL aborted: ${panic.message}` : 'PostgreSQL aborted';
    stopped = Object.assign(
      new Error(
        `the embedded database in ${dataDir} cannot go on in this process (${why}): its committed data is safe on disk. Free space on the disk the data folder is on (or check that disk), then start Baton again.`,
        { cause: panic },
      ),
      { code: '57P02' },
    );
    return stopped;
  };
  // Emscripten calls Module.onAbort as the instance aborts, inside the statement that aborted it.
  const mod = client.Module as unknown as { onAbort?: (what: unknown) => void };
  const priorOnAbort = mod.onAbort;
  mod.onAbort = (what) => {
    if (!aborted) {
      aborted = true;
      // Once the statement's own error (the PANIC) has been handed back.
      setImmediate(() => onStopped(stoppedError().message));
    }
    priorOnAbort?.(what);
  };
  // Every statement PGlite runs (query, exec, transaction, close) enters PostgreSQL here.
  const runSync = client.execProtocolRawSync.bind(client);
  client.execProtocolRawSync = (message) => {
    if (aborted) throw stoppedError();
    try {
      return runSync(message);
    } catch (err) {
      // An abort PGlite let through (a RuntimeError, after onAbort) is a storage failure too, not a
      // query's error. A trap that bypasses abort() (unreachable, out of bounds) PGlite swallows
      // inside its own loop before it reaches here: that one this guard does not see.
      if (!aborted) throw err;
      panic ??= err;
      throw stoppedError();
    }
  };
  const stream = client.execProtocolStream.bind(client);
  client.execProtocolStream = async (message, options) => {
    try {
      return await stream(message, options);
    } catch (err) {
      if (aborted) panic ??= err;
      throw err;
    }
  };
  return () => aborted;
}

/** The default onStopped: the database cannot answer again in this process, so a new one must start. */
function endProcess(message: string): void {
  process.stderr.write(`baton: ${message}\n`);
  process.exit(1);
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | undefined;
  return () => (done ??= fn());
}
