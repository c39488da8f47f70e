/**
 * Sessions opened while the database was read-only keep that default for their whole life: without
 * the store ending them, a node refused every write (every verify a 503) for as long as its driver
 * kept those connections, 30 to 60 minutes, after the database could write again. Real PostgreSQL.
 */
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import { freshDatabase } from '../setup/db.js';

let db: Awaited<ReturnType<typeof freshDatabase>>;
let store: Store;
let admin: postgres.Sql;

beforeAll(async () => {
  db = await freshDatabase({ max: 2 });
  store = db.store;
  admin = postgres(db.url, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await admin?.end({ timeout: 1 });
  await db?.drop();
});

/** A write through the hot path's connections: its SQLSTATE, or 'ok'. */
async function write(n: number): Promise<string> {
  try {
    await store.query(`insert into tenants (id, name) values ($1, 'read-only probe')`, [`ten_ro_${n}_${Date.now()}`]);
    return 'ok';
  } catch (e) {
    return String((e as { code?: unknown }).code);
  }
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('a database that was read-only for a while', () => {
  it('takes writes again soon after it can: the sessions opened read-only are ended, not kept', async () => {
    expect(await write(0)).toBe('ok');
    const [{ name }] = (await admin`select current_database() as name`) as unknown as [{ name: string }];
    await admin.unsafe(`alter database "${name}" set default_transaction_read_only = on`);
    // The store's sessions end (a restart, a failover): the driver opens new ones, read-only now.
    await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${name} and pid <> pg_backend_pid()`;
    const during: string[] = [];
    for (let i = 1; i <= 8 && !during.includes('25006'); i++) {
      during.push(await write(i));
      await pause(100);
    }
    expect(during, 'a write refused as read-only while the database is').toContain('25006');

    await admin.unsafe(`alter database "${name}" reset default_transaction_read_only`);
    const after: string[] = [];
    for (let i = 10; i < 40 && after.at(-1) !== 'ok'; i++) {
      after.push(await write(i));
      await pause(200);
    }
    // Without the store ending its read-only sessions, every write here was 25006 (for 30-60 minutes).
    expect(after.at(-1), after.join(' ')).toBe('ok');
  });
});
