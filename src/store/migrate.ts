// Applies the committed SQL in migrations/ (drizzle-kit's format) at start.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator';
import type { PgliteDatabase } from 'drizzle-orm/pglite';
import postgres from 'postgres';

/**
 * Arbitrary but fixed key for pg_advisory_lock, so that nodes starting at the
 * same time on one Postgres migrate one after another instead of racing on
 * CREATE TABLE. ("baton" in ASCII, padded.)
 */
export const MIGRATION_LOCK_KEY = 0x626174_6f6e_01;

/**
 * The migrations folder, found from this file's location rather than the CWD:
 * walk up to the first directory holding migrations/meta/_journal.json. This
 * works from src/store (tsx, vitest) and from a compiled dist/ tree alike.
 */
export function findMigrationsFolder(from: string = dirname(fileURLToPath(import.meta.url))): string {
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, 'migrations');
    if (existsSync(join(candidate, 'meta', '_journal.json'))) return candidate;
    if (dirname(dir) === dir) {
      throw new Error(`Baton: no migrations/meta/_journal.json above ${from}; ship the migrations/ folder next to package.json`);
    }
  }
}

/** What a start is about to apply, told before it applies it. */
export interface MigrationPlan {
  /** The journal's migrations the database lacks, in the order they are applied (their tags). */
  readonly pending: readonly string[];
  /** Migrations the database holds that this build does not know: a newer Baton applied them. */
  readonly unknown: number;
}

/** Told the plan before anything is applied (the log says how many, first to last). */
export type MigrationPlanListener = (plan: MigrationPlan) => void;

interface JournalEntry {
  readonly tag: string;
  readonly when: number;
}

/** The plan, and the migrations to catch up on before drizzle's own run (migrationPlan). */
interface PlanRead {
  readonly plan: MigrationPlan;
  /** Journal migrations dated before the last applied one that the database lacks, in journal order. */
  readonly catchUp: readonly string[];
}

/**
 * The plan from the journal and the database's drizzle.__drizzle_migrations. Drizzle's rule applies
 * what is dated after the last applied migration, and so skips, without a word, a journal migration
 * the database lacks but dated before one it holds. Main's own history made such a database: 0004 and
 * 0005 were added dated before 0006, which had shipped before them. When every migration the
 * database holds is one of this journal's (by its date), it was migrated along this line: the ones it
 * lacks are caught up on first, in journal order (`catchUp`). When it also holds a migration this
 * journal does not know (of any date), a build off this line (a development branch) migrated it:
 * refused before anything is applied, naming what it lacks. A newer Baton's database holds all of this journal and later ones: nothing to catch up on,
 * and it is served (with the warning `unknown` brings).
 */
async function migrationPlan(folder: string, query: (text: string) => Promise<Record<string, unknown>[]>): Promise<PlanRead> {
  const journal = (JSON.parse(readFileSync(join(folder, 'meta', '_journal.json'), 'utf8')) as { entries: JournalEntry[] }).entries;
  const newest = Math.max(0, ...journal.map((e) => e.when));
  const [exists] = await query(`select to_regclass('drizzle.__drizzle_migrations') is not null as e`);
  if (exists?.['e'] !== true) return { plan: { pending: journal.map((e) => e.tag), unknown: 0 }, catchUp: [] };
  const applied = (await query(`select created_at::float8 as at from drizzle.__drizzle_migrations`)).map((r) => Number(r['at']));
  const appliedAt = new Set(applied);
  const last = Math.max(0, ...applied);
  const skipped = journal.filter((e) => e.when < last && !appliedAt.has(e.when)).map((e) => e.tag);
  // A newer Baton on this line holds all of this journal: lacking some of it and holding any migration
  // it does not know, whatever its date (drizzle-kit dates one when it is generated, so a branch's is
  // often later than all of ours), is a database migrated off this line.
  const known = new Set(journal.map((e) => e.when));
  if (skipped.length > 0 && applied.some((at) => !known.has(at))) throw new SkippedMigrationsError(skipped);
  const later = journal.filter((e) => e.when > last).map((e) => e.tag);
  return { plan: { pending: [...skipped, ...later], unknown: applied.filter((at) => at > newest).length }, catchUp: skipped };
}

/**
 * Applies the journal migrations `tags` (ones drizzle's rule would skip: migrationPlan), each in its
 * own transaction with its row in drizzle.__drizzle_migrations, as drizzle records one (the file's
 * SHA-256 and its journal date).
 */
async function catchUpOn(
  folder: string,
  tags: readonly string[],
  inTransaction: (statements: readonly string[], hash: string, createdAt: number) => Promise<void>,
): Promise<void> {
  if (tags.length === 0) return;
  const journal = (JSON.parse(readFileSync(join(folder, 'meta', '_journal.json'), 'utf8')) as { entries: JournalEntry[] }).entries;
  const files = readMigrationFiles({ migrationsFolder: folder });
  for (const tag of tags) {
    const index = journal.findIndex((e) => e.tag === tag);
    const file = files[index]!;
    await inTransaction(
      file.sql.filter((statement) => statement.trim() !== ''),
      file.hash,
      file.folderMillis,
    );
  }
}

/** A database this build cannot migrate: it lacks migrations dated before one it holds, and holds ones this build does not know (migrationPlan). */
export class SkippedMigrationsError extends Error {
  constructor(readonly skipped: readonly string[]) {
    super(
      `this database lacks ${skipped.length} of this build's migrations (${skipped.slice(0, 3).join(', ')}${skipped.length > 3 ? ', ...' : ''}), dated before migrations it already holds, and holds migrations this build does not know: a development build off this release line migrated it. Nothing was applied. Run it with the build that migrated it, or start on a new database (or a new data folder, --data-dir) and move what you need over.`,
    );
    this.name = 'SkippedMigrationsError';
  }
}

/**
 * Migrates a real Postgres over its own single connection: the advisory lock is
 * per session, and drizzle's migrator reads the applied list outside its
 * transaction, so both must happen on the connection that holds the lock.
 */
export async function migratePostgresUrl(
  databaseUrl: string,
  migrationsFolder = findMigrationsFolder(),
  firstAnswerMs = FIRST_ANSWER_TIMEOUT_MS,
  onPlan?: MigrationPlanListener,
): Promise<void> {
  const client = postgres(databaseUrl, {
    max: 1,
    connect_timeout: CONNECT_TIMEOUT_SECONDS,
    onnotice: () => {}, // "schema drizzle already exists, skipping" and the like
    // Fail the start rather than hang forever behind a stuck peer or a long lock.
    connection: { lock_timeout: 120_000 }, // ms
  });
  try {
    const db = drizzlePostgres({ client });
    await answersWithin(db.execute(sql`select 1`), firstAnswerMs, client);
    await db.execute(sql`select pg_advisory_lock(${MIGRATION_LOCK_KEY})`);
    try {
      // Read under the lock: a node that started first has applied what it applied.
      // Always read: it refuses a database migrated off this line, and finds what drizzle would skip.
      const { plan, catchUp } = await migrationPlan(migrationsFolder, async (text) => [...(await client.unsafe(text))]);
      onPlan?.(plan);
      await catchUpOn(migrationsFolder, catchUp, (statements, hash, createdAt) =>
        client.begin(async (tx) => {
          for (const statement of statements) await tx.unsafe(statement);
          await tx.unsafe('insert into drizzle.__drizzle_migrations ("hash", "created_at") values ($1, $2)', [hash, createdAt]);
        }),
      );
      await migratePostgres(db, { migrationsFolder });
    } finally {
      await db.execute(sql`select pg_advisory_unlock(${MIGRATION_LOCK_KEY})`);
    }
  } catch (err) {
    const timedOut =
      (err as { code?: unknown }).code === 'CONNECT_TIMEOUT' || (err as { cause?: { code?: unknown } }).cause?.code === 'CONNECT_TIMEOUT';
    const reason = timedOut
      ? `no answer within ${CONNECT_TIMEOUT_SECONDS} s (CONNECT_TIMEOUT). ${CHECK_THE_HOST}`
      : err instanceof Error
        ? err.cause instanceof Error
          ? err.cause.message
          : err.message
        : String(err);
    throw new Error(`Baton: cannot open and migrate PostgreSQL at ${redactUrl(databaseUrl)}: ${reason}`, { cause: err });
  } finally {
    await client.end({ timeout: 5 });
  }
}

/** Each connection attempt of the start: the TCP connect and PostgreSQL's startup exchange. */
const CONNECT_TIMEOUT_SECONDS = 5;

/**
 * How long a start waits for the database's first answer, over every attempt. connect_timeout
 * bounds one attempt, but a host that takes the connection and closes it again (a proxy in front
 * of nothing, another service on the port) makes postgres.js try again without end: the start
 * waited with no end and no output.
 */
export const FIRST_ANSWER_TIMEOUT_MS = 15_000;

const CHECK_THE_HOST =
  'Check that DATABASE_URL names a running PostgreSQL server that this machine reaches (host and port), and that no proxy or firewall holds the connection';

async function answersWithin(query: Promise<unknown>, ms: number, client: postgres.Sql): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      void client.end({ timeout: 0 });
      reject(new Error(`no answer within ${ms / 1000} s: the host takes connections but does not answer as PostgreSQL. ${CHECK_THE_HOST}`));
    }, ms);
  });
  try {
    await Promise.race([query, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Query parameters that carry a secret (postgres.js and libpq read these from the URL). */
const SECRET_PARAMS = ['password', 'sslpassword'];

/** The URL without its password (in the user part or the query string), for messages and logs. */
export function redactUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url.replace(/\/\/[^/]*@/, '//***@').replace(/([?&](?:password|sslpassword)=)[^&]*/gi, '$1***');
  }
  if (parsed.password !== '') parsed.password = '***';
  for (const name of [...parsed.searchParams.keys()]) {
    if (SECRET_PARAMS.includes(name.toLowerCase())) parsed.searchParams.set(name, '***');
  }
  return parsed.toString().replaceAll('%2A%2A%2A', '***');
}

/** PGlite is one connection in one process: nothing to race with, no lock needed. */
export async function migratePgliteDb(
  db: PgliteDatabase<Record<string, unknown>>,
  migrationsFolder = findMigrationsFolder(),
  onPlan?: MigrationPlanListener,
): Promise<void> {
  const { plan, catchUp } = await migrationPlan(
    migrationsFolder,
    async (text) => (await db.execute(sql.raw(text))).rows as Record<string, unknown>[],
  );
  onPlan?.(plan);
  await catchUpOn(migrationsFolder, catchUp, (statements, hash, createdAt) =>
    db.transaction(async (tx) => {
      for (const statement of statements) await tx.execute(sql.raw(statement));
      await tx.execute(sql`insert into drizzle.__drizzle_migrations ("hash", "created_at") values (${hash}, ${createdAt})`);
    }),
  );
  await migratePglite(db, { migrationsFolder });
}
