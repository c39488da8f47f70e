// Per-test databases on the shared test server, and temp-dir PGlite stores.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { inject } from 'vitest';
import { openStore, type Store } from '../../src/store/db.js';

export interface FreshDatabase {
  url: string;
  drop(): Promise<void>;
}

/** CREATE DATABASE baton_test_<random> on the test server; nothing migrated yet. */
export async function createDatabase(): Promise<FreshDatabase> {
  const adminUrl = inject('pgAdminUrl');
  const name = `baton_test_${randomBytes(6).toString('hex')}`;
  await withAdmin(adminUrl, (sql) => sql.unsafe(`create database "${name}"`));
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    // WITH (FORCE) ends sessions a failed test left open (PostgreSQL 13+).
    drop: () => withAdmin(adminUrl, (sql) => sql.unsafe(`drop database if exists "${name}" with (force)`)),
  };
}

/** A migrated Store (postgres.js) on its own new database. */
export async function freshDatabase(opts: { max?: number } = {}): Promise<{ url: string; store: Store; drop(): Promise<void> }> {
  const database = await createDatabase();
  let store: Store;
  try {
    store = await openStore({ databaseUrl: database.url, max: opts.max ?? 5 });
  } catch (err) {
    await database.drop();
    throw err;
  }
  return {
    url: database.url,
    store,
    drop: async () => {
      await store.close();
      await database.drop();
    },
  };
}

/** A migrated embedded PGlite Store in a temp dir, deleted by drop(). */
export async function freshPglite(): Promise<{ dataDir: string; store: Store; drop(): Promise<void> }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'baton-pglite-'));
  let store: Store;
  try {
    store = await openStore({ dataDir });
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  return {
    dataDir,
    store,
    drop: async () => {
      await store.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

async function withAdmin(adminUrl: string, fn: (sql: postgres.Sql) => Promise<unknown>): Promise<void> {
  const sql = postgres(adminUrl, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    await fn(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}
