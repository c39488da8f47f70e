/**
 * Migration 0013's tuning of the verify statement, checked on both drivers.
 *
 * Counter updates stay on their page (HOT: no new index entries). Every allow
 * updates calls_used on each metered DR of its chain; with full pages each
 * such update moved the row and added entries to every delegations index,
 * up to one per ancestor in the ancestors GIN index. The table keeps free
 * space on its pages for these updates.
 *
 * The verify statement's queries run with generic plans: they look rows up by
 * key, and re-planning them for every call cost PostgreSQL about a fifth of
 * its CPU per verify.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import type { Delegation } from '../../src/store/schema/index.js';
import { seedDelegation, seedTenant } from '../support/fixtures.js';
import { drivers } from '../setup/drivers.js';

/** The heap page a row version lives on. */
async function pageOf(store: Store, hash: string): Promise<number> {
  const rows = await store.query(`select (ctid::text::point)[0]::int as page from delegations where hash = $1`, [hash]);
  return Number(rows[0]!['page']);
}

describe.each(drivers)('delegations counter updates ($name)', ({ open }) => {
  let store: Store;
  let drop: () => Promise<void>;
  const rows: Delegation[] = [];

  beforeAll(async () => {
    ({ store, drop } = await open());
    const tenantId = await seedTenant(store.db, 'acme');
    // DR-sized rows (a JWS of about 700 bytes, an ancestors list) until the first page is full.
    let parent: Delegation | undefined;
    for (let i = 0; i < 24; i++) {
      parent = await seedDelegation(store.db, tenantId, parent, {
        jws: `${'h'.repeat(40)}.${'p'.repeat(600)}.${'s'.repeat(86)}`,
        maxCalls: 1000,
      });
      rows.push(parent);
    }
  });
  afterAll(() => drop());

  it('an update of calls_used on a filled page keeps the row on that page', async () => {
    const firstPage = [];
    for (const r of rows) if ((await pageOf(store, r.hash)) === 0) firstPage.push(r);
    expect(firstPage.length).toBeGreaterThan(1);
    const row = firstPage[firstPage.length - 1]!;
    await store.db.execute(sql`update delegations set calls_used = calls_used + 1 where hash = ${row.hash}`);
    expect(await pageOf(store, row.hash)).toBe(0);
  });

  it('baton_verify_batch runs its queries with generic plans', async () => {
    const rows = await store.query(
      `select array_to_string(proconfig, ',') as config from pg_proc where proname = 'baton_verify_batch'`,
      [],
    );
    expect(rows).toHaveLength(1);
    expect(String(rows[0]!['config'])).toContain('plan_cache_mode=force_generic_plan');
  });
});
