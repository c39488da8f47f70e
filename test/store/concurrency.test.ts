// Real PostgreSQL only: PGlite has one connection, so concurrency is proven here.
import { sql } from 'drizzle-orm';
import { afterAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../../src/store/db.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { findMigrationsFolder } from '../../src/store/migrate.js';
import { rows } from '../../src/store/rows.js';
import { delegations } from '../../src/store/schema/index.js';
import { createDatabase, freshDatabase } from '../setup/db.js';
import { seedDelegation, seedTenant } from '../support/fixtures.js';

const journal = JSON.parse(readFileSync(join(findMigrationsFolder(), 'meta', '_journal.json'), 'utf8')) as { entries: unknown[] };

describe('concurrency on real PostgreSQL', () => {
  const cleanup: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const f of cleanup.reverse()) await f();
  });

  it('lets several processes open (and migrate) one fresh database at once', async () => {
    for (let round = 0; round < 3; round++) {
      const database = await createDatabase();
      cleanup.push(database.drop);
      const stores = await Promise.all(Array.from({ length: 4 }, () => openStore({ databaseUrl: database.url, max: 2 })));
      cleanup.push(...stores.map((s) => s.close));
      for (const s of stores) await s.ping();
      const [applied] = await rows<{ n: number }>(stores[0]!.db, sql`select count(*)::int as n from drizzle.__drizzle_migrations`);
      expect(applied?.n).toBe(journal.entries.length);
    }
  });

  it('lets concurrent conditional increments through exactly up to max_calls', async () => {
    const { store, drop } = await freshDatabase({ max: 10 });
    cleanup.push(drop);
    const tenantId = await seedTenant(store.db);
    const dr = await seedDelegation(store.db, tenantId, undefined, { maxCalls: 7 });
    const attempts = await Promise.all(Array.from({ length: 40 }, () => increment(store, dr.hash)));
    expect(attempts.filter(Boolean)).toHaveLength(7);
    const [row] = await store.db.select({ used: delegations.callsUsed }).from(delegations);
    expect(row?.used).toBe(7);
  });
});

async function increment(store: Store, hash: string): Promise<boolean> {
  const taken = await rows(
    store.db,
    sql`update delegations set calls_used = calls_used + 1
        where hash = ${hash} and (max_calls is null or calls_used < max_calls) returning 1 as ok`,
  );
  return taken.length === 1;
}
