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
 *
 * Those generic plans are made once per connection, often while the tables
 * are small, and then kept (migration 0014). They must find rows by primary
 * key whatever the tables held when they were made: a plan that took another
 * index leading with tenant_id read every row of the tenant on every verify.
 *
 * The records a verify writes (invocation, service receipt, denial) are
 * stored inline up to a page (migration 0016).
 */
import { randomBytes } from 'node:crypto';
import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import { rows } from '../../src/store/rows.js';
import { denials, invocations, serviceReceipts, type Delegation } from '../../src/store/schema/index.js';
import { fakeHash, seedDelegation, seedServiceKey, seedTenant } from '../support/fixtures.js';
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
    expect(String(rows[0]!['config'])).toContain('enable_seqscan=off');
  });
});

describe.each(drivers)('generic plans of the verify lookups on fresh tables ($name)', ({ open }) => {
  let store: Store;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    ({ store, drop } = await open());
  });
  afterAll(() => drop());

  /** The generic plan of `text` (parameters $1…), as the verify statement would make it now. */
  async function genericPlan(text: string, types: string, args: string): Promise<string> {
    return store.db.transaction(async (tx) => {
      await tx.execute(sql.raw(`set local plan_cache_mode = force_generic_plan`));
      await tx.execute(sql.raw(`set local enable_seqscan = off`));
      await tx.execute(sql.raw(`prepare lookup(${types}) as ${text}`));
      try {
        const lines = await rows<{ 'QUERY PLAN': string }>(tx, sql.raw(`explain (costs off) execute lookup(${args})`));
        return lines.map((l) => l['QUERY PLAN']).join('\n');
      } finally {
        await tx.execute(sql.raw(`deallocate lookup`));
      }
    });
  }

  it('the replay check reads invocations by its primary key', async () => {
    const plan = await genericPlan(
      'select hash, caller_key_id from invocations where tenant_id = $1 and jti = $2',
      'text, text',
      `'t', 'j'`,
    );
    expect(plan).toContain('invocations_tenant_id_jti_pk');
  });

  it("the chain's links are locked through the delegations primary key", async () => {
    const plan = await genericPlan(
      'select hash, calls_used from delegations where tenant_id = $1 and hash = any ($2) and max_calls is not null order by depth, hash for no key update',
      'text, text[]',
      `'t', array['h']`,
    );
    expect(plan).toContain('delegations_tenant_id_hash_pk');
  });

  it("a retry finds the original allow's service receipt by its subject", async () => {
    const plan = await genericPlan(
      `select id, kid, jws from receipts where tenant_id = $1 and subject = $2 and kind = 'invocation.allowed' order by id limit 1`,
      'text, text',
      `'t', 'j'`,
    );
    expect(plan).toContain('receipts_subject_idx');
  });

  it('no secondary btree index of invocations or delegations leads with tenant_id unless partial', async () => {
    const found = await store.query(
      `select c.relname as index from pg_index i
         join pg_class c on c.oid = i.indexrelid
         join pg_class t on t.oid = i.indrelid
         join pg_am am on am.oid = c.relam
         join pg_attribute a on a.attrelid = t.oid and a.attnum = i.indkey[0]
        where t.relname in ('invocations', 'delegations') and not i.indisprimary
          and am.amname = 'btree' and a.attname = 'tenant_id' and i.indpred is null`,
      [],
    );
    expect(found.map((r) => r['index'])).toEqual([]);
  });
});

/** Bytes of the TOAST relation of `table` (0 while no value of it was moved out). */
async function toastBytes(store: Store, table: string): Promise<number> {
  const [row] = await store.query(`select pg_relation_size(reltoastrelid)::int as bytes from pg_class where oid = $1::regclass`, [table]);
  return Number(row!['bytes']);
}

/** Text that does not compress, like base64 and hex: pglz cannot shrink it. */
const incompressible = (bytes: number) =>
  randomBytes(Math.ceil((bytes * 3) / 4))
    .toString('base64url')
    .slice(0, bytes);

// Migration 0016: a row of a few KB (an invocation or a receipt through a deep chain) used to be
// compressed in vain and moved to the TOAST relation on every verify: a second insert each.
describe.each(drivers)('records a verify writes, stored inline ($name)', ({ open }) => {
  let store: Store;
  let drop: () => Promise<void>;
  let tenantId: string;
  let kid: string;
  let leaf: Delegation;

  beforeAll(async () => {
    ({ store, drop } = await open());
    tenantId = await seedTenant(store.db, 'acme');
    kid = await seedServiceKey(store.db);
    leaf = await seedDelegation(store.db, tenantId);
  });
  afterAll(() => drop());

  const write = async (jwsBytes: number, n: number) => {
    const chain = [...Array.from({ length: 15 }, (_, i) => fakeHash(`link-${n}-${i}`)), leaf.hash];
    const jws = incompressible(jwsBytes);
    await store.db.insert(invocations).values({
      tenantId,
      jti: `inv:${n}`,
      hash: fakeHash(`inv-${n}`),
      jws,
      leafHash: chain[15]!,
      drChain: chain,
      tool: 'search',
      estimatedMicros: 0,
      callerKeyId: 'key_x',
    });
    await store.db.insert(serviceReceipts).values({ tenantId, kind: 'invocation.allowed', subject: `inv:${n}`, jws, kid });
    await store.db
      .insert(denials)
      .values({ tenantId, jti: `inv:${n}`, code: 'CALLS_EXHAUSTED', block: 'G', drChain: chain, callerKeyId: 'key_x' });
  };

  it('a 4 KB invocation and its service receipt leave the TOAST relations empty', async () => {
    await write(4_000, 1);
    for (const table of ['invocations', 'receipts', 'denials']) expect(await toastBytes(store, table), table).toBe(0);
  });

  it('a row larger than a page is still moved out, and reads back whole', async () => {
    await write(20_000, 2);
    expect(await toastBytes(store, 'invocations')).toBeGreaterThan(0);
    expect(await toastBytes(store, 'receipts')).toBeGreaterThan(0);
    const [inv] = await store.db.select().from(invocations).where(eq(invocations.jti, 'inv:2'));
    expect(inv?.jws.length).toBe(20_000);
  });
});
