import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/db.js';
import { findMigrationsFolder } from '../../src/store/migrate.js';
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
  'log_pending',
  'receipts',
  'service_keys',
  'tenants',
  'tool_catalogs',
  'tool_rate_windows',
  'trusted_roots',
];
const journal = JSON.parse(readFileSync(join(findMigrationsFolder(), 'meta', '_journal.json'), 'utf8')) as {
  entries: { tag: string }[];
};

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
      const first = await openStore({ databaseUrl: database.url, max: 2 });
      cleanup.push(first.close);
      expect(first.kind).toBe('postgres');
      await first.ping();
      expect((await rows<{ name: string }>(first.db, listTables)).map((r) => r.name)).toEqual(TABLES);
      expect((await rows<{ n: number }>(first.db, appliedCount))[0]?.n).toBe(journal.entries.length);

      await first.db.insert(tenants).values({ id: 'ten_keep', name: 'kept' });
      const second = await openStore({ databaseUrl: database.url, max: 2 });
      cleanup.push(second.close);
      expect((await rows<{ n: number }>(second.db, appliedCount))[0]?.n).toBe(journal.entries.length);
      expect(await second.db.select().from(tenants)).toHaveLength(1);
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
        await store.close();

        reopened = await openStore({ dataDir });
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
});
