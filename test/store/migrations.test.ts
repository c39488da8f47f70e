import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/db.js';
import { findMigrationsFolder, migratePostgresUrl, redactUrl, type MigrationPlan } from '../../src/store/migrate.js';
import { rows } from '../../src/store/rows.js';
import { tenants } from '../../src/store/schema/index.js';
import { createDatabase, freshPglite } from '../setup/db.js';

const TABLES = [
  'actuals',
  'api_keys',
  'approvals',
  'custodial_keys',
  'delegations',
  'denials',
  'dr_cost_calibration',
  'grant_approvals',
  'invocations',
  'log_checkpoints',
  'log_cosignatures',
  'log_hashes',
  'log_leaves',
  'log_name',
  'log_pending',
  'receipts',
  'service_keys',
  'tenants',
  'tool_catalogs',
  'tool_rate_windows',
  'trusted_roots',
];
const journal = JSON.parse(readFileSync(join(findMigrationsFolder(), 'meta', '_journal.json'), 'utf8')) as {
  entries: { tag: string; when: number }[];
};
/** A migration a newer build applied: later than every entry of this build's journal. */
const fromANewerBuild = sql`insert into drizzle.__drizzle_migrations (hash, created_at) values ('newer', ${
  Math.max(...journal.entries.map((e) => e.when)) + 1_000_000
})`;
const plans = () => {
  const seen: MigrationPlan[] = [];
  return { seen, onMigrations: (plan: MigrationPlan) => void seen.push(plan) };
};

/** A plain client on `url`, which neither opens a store nor migrates. */
const openStoreUnmigrated = (url: string) => postgres(url, { max: 1, onnotice: () => {} });

const listTables = sql`select table_name::text as name from information_schema.tables
  where table_schema = 'public' order by 1`;
const appliedCount = sql`select count(*)::int as n from drizzle.__drizzle_migrations`;

describe('migrations', () => {
  it('resolve the migrations folder from the package, not the CWD', () => {
    const cwd = process.cwd();
    try {
      process.chdir('/');
      expect(findMigrationsFolder()).toMatch(/\/migrations$/);
    } finally {
      process.chdir(cwd);
    }
  });

  describe('on real PostgreSQL', () => {
    const cleanup: (() => Promise<void>)[] = [];
    afterAll(async () => {
      for (const f of cleanup.reverse()) await f();
    });

    it('create every table and record every journal entry, and re-opening is a no-op', async () => {
      const database = await createDatabase();
      cleanup.push(database.drop);
      const told = plans();
      const first = await openStore({ databaseUrl: database.url, max: 2, onMigrations: told.onMigrations });
      cleanup.push(first.close);
      // Told before applying: every journal entry, in order, and nothing unknown.
      expect(told.seen).toEqual([{ pending: journal.entries.map((e) => e.tag), unknown: 0 }]);
      expect(first.kind).toBe('postgres');
      await first.ping();
      expect((await rows<{ name: string }>(first.db, listTables)).map((r) => r.name)).toEqual(TABLES);
      expect((await rows<{ n: number }>(first.db, appliedCount))[0]?.n).toBe(journal.entries.length);

      await first.db.insert(tenants).values({ id: 'ten_keep', name: 'kept' });
      await first.db.execute(fromANewerBuild);
      const again = plans();
      const second = await openStore({ databaseUrl: database.url, max: 2, onMigrations: again.onMigrations });
      cleanup.push(second.close);
      expect((await rows<{ n: number }>(second.db, appliedCount))[0]?.n).toBe(journal.entries.length + 1);
      expect(await second.db.select().from(tenants)).toHaveLength(1);
      // Nothing to apply, and the newer build's migration is told (the start warns of a rollback).
      expect(again.seen).toEqual([{ pending: [], unknown: 1 }]);
    });
  });

  describe('a database migrated off this line of history (drizzle would skip what it lacks)', () => {
    /** The journal entry a database "lacks": one in the middle, dated before others it holds (migrated off this line). */
    const lacked = journal.entries[5]!;
    /** As a development build leaves it: one of this journal's migrations missing, and one of its own dated among them. */
    const forget = sql`with gone as (delete from drizzle.__drizzle_migrations where created_at = ${lacked.when})
      insert into drizzle.__drizzle_migrations (hash, created_at) values ('dev-branch', ${Math.floor((lacked.when + journal.entries[6]!.when) / 2)})`;

    it('on PostgreSQL: refused before anything is applied, naming what it lacks and what to do', async () => {
      const database = await createDatabase();
      try {
        const first = await openStore({ databaseUrl: database.url, max: 1 });
        await first.db.execute(forget);
        await first.close();
        const err = await failureOf(openStore({ databaseUrl: database.url, max: 1 }));
        expect(err?.message).toContain(`lacks 1 of this build's migrations (${lacked.tag})`);
        expect(err?.message).toMatch(/Nothing was applied\. Run it with the build that migrated it, or start on a new database/);
        const after = await openStoreUnmigrated(database.url);
        try {
          expect((await after.unsafe('select count(*)::int as n from drizzle.__drizzle_migrations'))[0]?.['n']).toBe(
            journal.entries.length,
          );
        } finally {
          await after.end();
        }
      } finally {
        await database.drop();
      }
    });

    it('also when the unknown migration is dated after all of ours (drizzle-kit dates a branch one when it is generated)', async () => {
      const database = await createDatabase();
      try {
        const first = await openStore({ databaseUrl: database.url, max: 1 });
        const newest = Math.max(...journal.entries.map((e) => e.when));
        await first.db.execute(sql`with gone as (delete from drizzle.__drizzle_migrations where created_at = ${lacked.when})
          insert into drizzle.__drizzle_migrations (hash, created_at) values ('dev-branch', ${newest + 86_400_000})`);
        await first.close();
        const err = await failureOf(openStore({ databaseUrl: database.url, max: 1 }));
        expect(err?.message).toContain(`lacks 1 of this build's migrations (${lacked.tag})`);
      } finally {
        await database.drop();
      }
    });

    it("a database main's own history made (0004 and 0005 added dated before 0006, which shipped first) is caught up, in journal order", async () => {
      // The journal of 8a1883f on main's first-parent history: 0000-0003 and 0006; the files are today's.
      const early = mkdtempSync(join(tmpdir(), 'baton-early-journal-'));
      try {
        const folder = findMigrationsFolder();
        mkdirSync(join(early, 'meta'));
        const kept = journal.entries.filter((e) => /^(0000|0001|0002|0003|0006)_/.test(e.tag));
        expect(kept).toHaveLength(5);
        writeFileSync(join(early, 'meta', '_journal.json'), JSON.stringify({ ...journal, entries: kept }));
        for (const e of kept) copyFileSync(join(folder, `${e.tag}.sql`), join(early, `${e.tag}.sql`));
        const database = await createDatabase();
        try {
          await migratePostgresUrl(database.url, early);
          const told = plans();
          const store = await openStore({ databaseUrl: database.url, max: 1, onMigrations: told.onMigrations });
          try {
            const lacked = journal.entries.filter((e) => !kept.includes(e)).map((e) => e.tag);
            expect(told.seen).toEqual([{ pending: lacked, unknown: 0 }]);
            expect(lacked.slice(0, 2)).toEqual([expect.stringMatching(/^0004_/), expect.stringMatching(/^0005_/)]);
            expect((await rows<{ name: string }>(store.db, listTables)).map((r) => r.name)).toEqual(TABLES);
            expect((await rows<{ n: number }>(store.db, appliedCount))[0]?.n).toBe(journal.entries.length);
          } finally {
            await store.close();
          }
          // Opened again: nothing left to apply.
          const again = plans();
          const reopened = await openStore({ databaseUrl: database.url, max: 1, onMigrations: again.onMigrations });
          await reopened.close();
          expect(again.seen).toEqual([{ pending: [], unknown: 0 }]);
        } finally {
          await database.drop();
        }
      } finally {
        rmSync(early, { recursive: true, force: true });
      }
    });

    it('a landed migration is never edited: each file hashes as when it landed (drizzle applies one once)', () => {
      // A new migration is added to test/store/fixtures/landed-migrations.json with its SHA-256 when it lands;
      // a change of a landed one goes in a new migration instead (see 0040 for why).
      const landed = JSON.parse(readFileSync(join(import.meta.dirname, 'fixtures', 'landed-migrations.json'), 'utf8')) as Record<
        string,
        string
      >;
      const folder = findMigrationsFolder();
      for (const [tag, hash] of Object.entries(landed)) {
        expect(
          createHash('sha256')
            .update(readFileSync(join(folder, `${tag}.sql`)))
            .digest('hex'),
          tag,
        ).toBe(hash);
      }
      expect(
        journal.entries.map((e) => e.tag).filter((tag) => !(tag in landed)),
        'journal entries not yet in landed-migrations.json',
      ).toEqual([]);
    });

    it('journal dates only grow with the index, so no later migration is dated before one already shipped', () => {
      const whens = journal.entries.map((e) => e.when);
      // 0004 and 0005 are the one exception, caught up on (above); every migration after them is dated after all before it.
      const after0006 = journal.entries.findIndex((e) => e.tag.startsWith('0006_'));
      for (let i = after0006 + 1; i < whens.length; i++)
        expect(whens[i], journal.entries[i]!.tag).toBeGreaterThan(Math.max(...whens.slice(0, i)));
      expect(new Set(whens).size).toBe(whens.length);
    });

    it('on PGlite: the same', async () => {
      const { dataDir, store, drop } = await freshPglite();
      try {
        await store.db.execute(forget);
        await store.close();
        const err = await failureOf(openStore({ dataDir }));
        expect(err?.message).toContain(`lacks 1 of this build's migrations (${lacked.tag})`);
      } finally {
        await drop();
      }
    });
  });

  describe('on PGlite', () => {
    it('create every table, persist in the data folder, and re-open without re-applying', async () => {
      const { dataDir, store, drop } = await freshPglite();
      let reopened: Awaited<ReturnType<typeof openStore>> | undefined;
      try {
        expect(store.kind).toBe('pglite');
        await store.ping();
        expect((await rows<{ name: string }>(store.db, listTables)).map((r) => r.name)).toEqual(TABLES);
        await store.db.insert(tenants).values({ id: 'ten_keep', name: 'kept' });
        await store.db.execute(fromANewerBuild);
        await store.close();

        const told = plans();
        reopened = await openStore({ dataDir, onMigrations: told.onMigrations });
        expect(told.seen).toEqual([{ pending: [], unknown: 1 }]);
        await reopened.db.execute(sql`delete from drizzle.__drizzle_migrations where hash = 'newer'`);
        expect((await rows<{ n: number }>(reopened.db, appliedCount))[0]?.n).toBe(journal.entries.length);
        expect((await reopened.db.select().from(tenants)).map((t) => t.id)).toEqual(['ten_keep']);
      } finally {
        await reopened?.close();
        await drop(); // closing the already-closed store is a no-op
      }
    });
  });

  it('refuse to open with neither a URL nor a data folder', async () => {
    await expect(openStore({})).rejects.toThrow(/databaseUrl.*dataDir/);
  });

  /** A host on a local port that takes connections and then does `handle` with each. */
  async function fakeHost(handle: (socket: Socket) => void): Promise<{ port: number; close: () => Promise<void> }> {
    const sockets = new Set<Socket>();
    const host = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
      handle(socket);
    });
    await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
    return {
      port: (host.address() as AddressInfo).port,
      close: async () => {
        for (const s of sockets) s.destroy();
        await new Promise((resolve) => host.close(resolve));
      },
    };
  }
  const failureOf = (p: Promise<unknown>) =>
    p.then(
      () => undefined,
      (e: unknown) => e as Error,
    );

  it('give up on a host that takes each connection and closes it (postgres.js would try again for ever), the password hidden', async () => {
    const host = await fakeHost((socket) => socket.destroy());
    const started = performance.now();
    try {
      const err = await failureOf(
        migratePostgresUrl(`postgres://baton@127.0.0.1:${host.port}/x?password=S3cretQ`, findMigrationsFolder(), 300),
      );
      expect(err?.message).toMatch(
        /no answer within 0\.3 s: the host takes connections but does not answer as PostgreSQL\. Check that DATABASE_URL/,
      );
      expect(err?.message).toContain(`127.0.0.1:${host.port}/x?password=***`);
      expect(err?.message).not.toContain('S3cretQ');
      expect(performance.now() - started).toBeLessThan(10_000);
    } finally {
      await host.close();
    }
  });

  it('a host that takes the connection and stays silent: the connect timeout, said as what to check', { timeout: 20_000 }, async () => {
    const host = await fakeHost(() => {});
    try {
      const err = await failureOf(migratePostgresUrl(`postgres://baton@127.0.0.1:${host.port}/x`));
      expect(err?.message).toMatch(/no answer within 5 s \(CONNECT_TIMEOUT\)\. Check that DATABASE_URL names a running PostgreSQL server/);
    } finally {
      await host.close();
    }
  });

  it.each([
    ['postgres://u:secret@h:5432/db', 'postgres://u:***@h:5432/db'],
    ['postgres://u:p%40ss@h/db?sslmode=require&password=S3cret', 'postgres://u:***@h/db?sslmode=require&password=***'],
    ['postgres://h/db?PassWord=x&application_name=a', 'postgres://h/db?PassWord=***&application_name=a'],
    ['postgresql://u:s@ss@h/db', 'postgresql://u:***@h/db'],
    ['postgres://u@h/db', 'postgres://u@h/db'],
  ])('redact %s in messages', (url, shown) => {
    expect(redactUrl(url)).toBe(shown);
  });
});
