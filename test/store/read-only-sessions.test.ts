/**
 * Sessions that began while the database was read-only keep that default for their whole life.
 * With the driver's default session lifetime a node refused every write (every verify a 503) for
 * 30 to 60 minutes after the database could write again; the store's sessions now last about a
 * minute (SESSION_LIFETIME_SECONDS in src/store/db.ts), here a second and a half so that the test
 * is short. Real PostgreSQL: PGlite has no such setting to change.
 */
import postgres from 'postgres';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../../src/store/db.js';
import { freshDatabase } from '../setup/db.js';

let fresh: Awaited<ReturnType<typeof freshDatabase>>;
let store: Store;
let admin: postgres.Sql;
let databaseName: string;

beforeAll(async () => {
  fresh = await freshDatabase({ max: 1 });
  store = await openStore({ databaseUrl: fresh.url, max: 2, migrate: false, sessionLifetimeSeconds: () => LIFETIME_SECONDS });
  admin = postgres(fresh.url, { max: 1, onnotice: () => {} });
  [{ name: databaseName }] = (await admin`select current_database() as name`) as unknown as [{ name: string }];
});
afterAll(async () => {
  await admin?.unsafe(`alter database "${databaseName}" reset default_transaction_read_only`).catch(() => {});
  await store?.close();
  await admin?.end({ timeout: 1 });
  await fresh?.drop();
});

const LIFETIME_SECONDS = 1.5;
let written = 0;
/** A write through the hot path's pool, or through drizzle's: its SQLSTATE, or 'ok'. */
async function write(through: 'hot' | 'drizzle'): Promise<string> {
  const id = `ten_ro_${++written}_${Date.now()}`;
  try {
    if (through === 'hot') await store.query(`insert into tenants (id, name) values ($1, 'read-only probe')`, [id]);
    else await store.db.execute(sql`insert into tenants (id, name) values (${id}, 'read-only probe')`);
    return 'ok';
  } catch (e) {
    // drizzle wraps the driver's error (its cause holds the SQLSTATE)
    const { code, cause } = e as { code?: unknown; cause?: { code?: unknown } };
    return String(code ?? cause?.code);
  }
}

/** What the store's readiness check (for /readyz) says: 'ready', or why not. */
async function readiness(): Promise<string> {
  return store.ping().then(
    () => 'ready',
    (e: unknown) => (e instanceof Error ? e.message : String(e)),
  );
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Writes through both pools every 100 ms for `ms`: what each answered. */
async function writeFor(ms: number, until?: (answers: string[]) => boolean): Promise<string[]> {
  const answers: string[] = [];
  for (const end = Date.now() + ms; Date.now() < end && !until?.(answers);) {
    answers.push(`hot:${await write('hot')}`, `drizzle:${await write('drizzle')}`);
    await pause(100);
  }
  return answers;
}

describe('a database that was read-only for a while', () => {
  it('is written to through both pools soon after it can be, and not while it cannot', async () => {
    expect([await write('hot'), await write('drizzle')]).toEqual(['ok', 'ok']);
    expect(await readiness()).toBe('ready');
    await admin.unsafe(`alter database "${databaseName}" set default_transaction_read_only = on`);
    // The store's sessions end (a restart, a failover): the driver opens new ones, read-only now.
    await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${databaseName} and pid <> pg_backend_pid()`;

    // Longer than a session lives: new sessions are read-only too while the database is.
    const during = await writeFor(2_000 * LIFETIME_SECONDS);
    expect(during, 'writes refused as read-only while the database is').toContain('hot:25006');
    expect(during).toContain('drizzle:25006');
    expect(during.filter((answer) => answer.endsWith(':ok'))).toEqual([]);
    // A node whose every write is refused is not ready, though the database answers `select 1`.
    expect(await readiness()).toMatch(/read-only/);

    await admin.unsafe(`alter database "${databaseName}" reset default_transaction_read_only`);
    const after = await writeFor(15_000, (answers) => answers.slice(-2).join() === 'hot:ok,drizzle:ok');
    // With the driver's default lifetime every write here was 25006 (for 30 to 60 minutes).
    expect(after.slice(-2), after.join(' ')).toEqual(['hot:ok', 'drizzle:ok']);
    // And it keeps writing: once every session that began read-only has lived its time, every write goes through.
    await pause(1_000 * LIFETIME_SECONDS);
    const later = await writeFor(1_000 * LIFETIME_SECONDS);
    expect(later.filter((answer) => !answer.endsWith(':ok'))).toEqual([]);
    expect(await readiness()).toBe('ready');
  }, 60_000);

  it("is not ready while either pool's sessions are read-only, each pool told apart", async () => {
    // Sessions that outlive the test: the read-only ones stay so until the test ends them.
    const other = await openStore({ databaseUrl: fresh.url, max: 2, migrate: false, sessionLifetimeSeconds: () => 600 });
    try {
      const readinessOf = () =>
        other.ping().then(
          () => 'ready',
          (e: unknown) => (e instanceof Error ? e.message : String(e)),
        );
      await admin.unsafe(`alter database "${databaseName}" set default_transaction_read_only = on`);
      // The requests' pool: its first session begins read-only, and no verify has run yet.
      expect(await readinessOf()).toMatch(/session is read-only/);
      const hotWrite = () =>
        other.query(`insert into tenants (id, name) values ($1, 'read-only probe')`, [`ten_ro_hot_${++written}_${Date.now()}`]).then(
          () => 'ok',
          (e: { code?: unknown }) => String(e.code),
        );
      expect(await hotWrite()).toBe('25006');
      await admin.unsafe(`alter database "${databaseName}" reset default_transaction_read_only`);
      // The requests' read-only session ends (the one that last asked for transaction_read_only).
      await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${databaseName} and pid <> pg_backend_pid() and query like ${'%transaction_read_only%'}`;
      await pause(200);
      // The requests' pool now writes; the verifies' session is still read-only, and readiness is
      // told by its last statement, never by a query queued behind the verifies.
      expect(await hotWrite()).toBe('25006');
      expect(await readinessOf()).toMatch(/verifies were refused as read-only/);
      // A statement there that writes nothing goes through on a read-only session too (the database
      // clock the verifies read each minute; a verify the statement refuses early, KEY_REVOKED or
      // UNTRUSTED_ROOT): it says nothing of writes.
      await other.query('select 1', []);
      const item = { k: 'a', t: 'ten_none', key: 'key_none', root: 'did:key:none', chain: ['h'], jti: 'j', hash: 'h', tool: 't', est: 0 };
      const [refused] = await other.query(`select baton_verify_batch(now() + interval '5 seconds', $1::text::jsonb) as r`, [
        JSON.stringify([item]),
      ]);
      expect(refused?.['r']).toEqual([{ o: 'KEY_REVOKED' }]);
      expect(await readinessOf()).toMatch(/verifies were refused as read-only/);
      await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${databaseName} and pid <> pg_backend_pid()`;
      // No verify comes (a load balancer sends none to a node that is not ready): readiness itself
      // asks the verifies' pool again and finds it writable. A terminated session's next query
      // fails (57P01), then the driver opens a writable one.
      const untilReady: string[] = [];
      for (const end = Date.now() + 5_000; Date.now() < end && untilReady.at(-1) !== 'ready';) {
        untilReady.push(await readinessOf());
        await pause(50);
      }
      expect(untilReady.at(-1), untilReady.join(' | ')).toBe('ready');
      expect(await hotWrite()).toBe('ok');
      expect(await readinessOf()).toBe('ready');

      // Readiness never waits behind the verifies' statements (a slow database would turn every node unready).
      let verifiesDone = false;
      const sleepOnVerifiesPool = async (): Promise<unknown> =>
        // A session terminated above fails its next query (57P01, admin shutdown); the driver then opens another.
        other
          .query('select pg_sleep(3)', [])
          .catch((e: { code?: unknown }) => (e.code === '57P01' ? sleepOnVerifiesPool() : Promise.reject(e)));
      const busy = Promise.all([sleepOnVerifiesPool(), sleepOnVerifiesPool()]).then(() => (verifiesDone = true));
      await pause(100);
      expect(await readinessOf()).toBe('ready');
      expect(verifiesDone, 'readiness answered only after the statements on the verifies pool').toBe(false);
      await busy;
    } finally {
      await admin.unsafe(`alter database "${databaseName}" reset default_transaction_read_only`);
      await other.close();
    }
  }, 60_000);
});
