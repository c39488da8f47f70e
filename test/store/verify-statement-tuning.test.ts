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
import postgres from 'postgres';
import { freshDatabase, freshPglite } from '../setup/db.js';
import type { BatchItem } from '../../src/store/verify-batch.js';
import { allowItem, decideBatch, seedVerifyCaller } from '../support/verify-statement.js';

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
    // With sequential scans priced at 10^10, a plan that still has one would be compiled by JIT on every call.
    expect(String(rows[0]!['config'])).toContain('jit=off');
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

/** A client of one connection as a store's query function: plans are made and kept per session. */
const queryOn =
  (one: postgres.Sql) =>
  async (text: string, params: readonly unknown[]): Promise<Record<string, unknown>[]> => [
    ...(await one.unsafe(text, params as postgres.ParameterOrJSON<never>[])),
  ];

/** One store and one session of it. */
const sessions = [
  {
    name: 'postgres',
    open: async () => {
      const { url, store, drop } = await freshDatabase();
      const one = postgres(url, { max: 1, onnotice: () => {} });
      return { store, query: queryOn(one), drop: async () => (await one.end({ timeout: 5 }), await drop()) };
    },
  },
  {
    name: 'pglite',
    open: async () => {
      const { store, drop } = await freshPglite();
      return { store, query: store.query, drop };
    },
  },
];

// Migration 0020: the generic plans of the verify statement are made once per session, usually
// while delegations is small, and kept. They read each chain's DRs by (tenant_id, hash) = …
// only when every probe states both key columns: a plan that read the tenant's rows and filtered
// them by hash made each verify cost what the tenant had stored.
describe.each(sessions)('a verify reads its chain by key, whatever its plans were made with ($name)', ({ open }) => {
  let store: Store;
  let query: (text: string, params: readonly unknown[]) => Promise<Record<string, unknown>[]>;
  let drop: () => Promise<void>;
  let caller: Awaited<ReturnType<typeof seedVerifyCaller>>;
  const chains: string[][] = [];

  beforeAll(async () => {
    ({ store, query, drop } = await open());
    // An ANALYZE (autovacuum's too) would have every plan of the table made again: the plans under
    // test are the ones made while the table was small. A fresh database, so nothing to restore.
    await query('alter table delegations set (autovacuum_enabled = false)', []);
    caller = await seedVerifyCaller(store, 'acme', 'did:key:zPlannedSmallRoot');
    for (let c = 0; c < 2; c++) {
      const root = await seedDelegation(store.db, caller.tenantId, undefined, { iss: caller.rootDid, maxCalls: 1000 });
      const child = await seedDelegation(store.db, caller.tenantId, root, { maxCalls: 1000 });
      const leaf = await seedDelegation(store.db, caller.tenantId, child, { maxCalls: 1000, maxSpendMicros: 10_000_000 });
      chains.push([root.hash, child.hash, leaf.hash]);
    }
  });
  afterAll(() => drop());

  const batch = () => chains.map((chain) => allowItem(caller, chain, { est: 1 }));
  const decide = (items: readonly BatchItem[]) => decideBatch({ query }, items);
  /** Shared buffers one batch touches, its nested queries included (EXPLAIN ANALYZE runs it). */
  const buffersOfBatch = async (items: readonly BatchItem[]) => {
    const lines = await query('explain (analyze, buffers, format json) select baton_verify_batch($1, $2::text::jsonb) as r', [
      new Date(Date.now() + 5_000).toISOString(),
      JSON.stringify(items),
    ]);
    const raw = Object.values(lines[0]!)[0];
    const plan = (typeof raw === 'string' ? JSON.parse(raw) : raw) as { Plan: Record<string, number> }[];
    return plan[0]!.Plan['Shared Hit Blocks']! + plan[0]!.Plan['Shared Read Blocks']!;
  };
  /**
   * The fewer of two batches' buffers: a catalog cache reset (other tests' DDL on the shared
   * server can overflow the invalidation queue) makes one batch plan again, reading the catalog.
   */
  const fewestBuffersOfBatch = async () => Math.min(await buffersOfBatch(batch()), await buffersOfBatch(batch()));

  it('touches about as many buffers with 4,000 more DRs in the tenant as before them', async () => {
    // The first batch makes the session's plans while the tenant holds 6 DRs.
    expect((await decide(batch())).map((a) => a.o)).toEqual(['ALLOWED', 'ALLOWED']);
    const small = await fewestBuffersOfBatch();

    // DR-sized roots of the same tenant: at the table's fillfactor, hundreds of pages.
    await query(
      `insert into delegations (tenant_id, hash, jws, jti, iss, sub, aud, cmd, policy, nbf, iat, root_hash, depth, ancestors, max_calls)
       select $1, h, repeat('x', 700), 'dr:many-' || g, 'did:key:zManyIssuer', 'did:key:zManyIssuer', 'did:key:zManyAudience',
              '/mcp/tools/call', '{}'::jsonb, 0, 0, h, 0, '{}'::text[], 1000
         from (select g, 'sha256:' || encode(sha256(('many:' || g)::bytea), 'hex') as h from generate_series(1, 4000) g) s`,
      [caller.tenantId],
    );
    const large = await fewestBuffersOfBatch();

    // Reading the tenant's DRs would touch every page they fill, once per lock pass and update
    // (tens of thousands of buffers). By key, each probe descends one more B-tree level now.
    const pages = Number((await query(`select pg_relation_size('delegations') / 8192 as n`, []))[0]!['n']);
    expect(pages).toBeGreaterThan(300);
    expect(large).toBeLessThan(2 * small);
    // And each verify was counted on every DR of its chain: 1 + 4 (EXPLAIN ANALYZE commits them).
    const counted = await store.query(`select calls_used from delegations where hash = any ($1)`, [chains.flat()]);
    expect(counted.map((r) => Number(r['calls_used']))).toEqual(Array(6).fill(5));
  });

  it('refuses, and writes nothing for, a chain sent leaf first', async () => {
    const item = allowItem(caller, [...chains[0]!].reverse(), { est: 1 });
    await expect(decide([item])).rejects.toThrow(/root first/);
    expect(await store.query(`select 1 from invocations where jti = $1`, [item.jti])).toEqual([]);
  });
});

/** Primary keys that lead with tenant_id, and the column each lookup must also state. */
const TENANT_KEYS: Record<string, string> = {
  delegations_tenant_id_hash_pk: 'hash',
  grant_approvals_tenant_id_dr_hash_pk: 'dr_hash',
  dr_cost_calibration_tenant_id_dr_hash_pk: 'dr_hash',
  invocations_tenant_id_jti_pk: 'jti',
};

interface PlanNode {
  readonly 'Node Type': string;
  readonly 'Relation Name'?: string;
  readonly 'Index Name'?: string;
  readonly 'Index Cond'?: string;
  readonly Plans?: readonly PlanNode[];
}

/** Each scan of `node`'s tree that reads a tenant's range of a keyed table, or all of one. */
function rangeReads(node: PlanNode, query: string): string[] {
  const found: string[] = [];
  const column = node['Index Name'] === undefined ? undefined : TENANT_KEYS[node['Index Name']];
  if (column !== undefined && !new RegExp(`\\b${column}\\b`).test(node['Index Cond'] ?? ''))
    found.push(`${node['Node Type']} on ${node['Index Name']} (${node['Index Cond'] ?? 'no condition'}) in: ${query.slice(0, 160)}`);
  if (node['Node Type'] === 'Seq Scan' && Object.keys(TENANT_KEYS).some((k) => k.startsWith(`${node['Relation Name']}_`)))
    found.push(`Seq Scan on ${node['Relation Name']} in: ${query.slice(0, 160)}`);
  for (const child of node.Plans ?? []) found.push(...rangeReads(child, query));
  return found;
}

// The class of 0014's and 0020's bugs, over every query the statement runs (auto_explain hands each
// plan, nested queries included, to the client as a NOTICE), with plans made on fresh tables: no
// lookup may read a tenant's range of a table keyed (tenant_id, …), whatever else it filters on.
describe('every lookup of the verify statement states its whole key (postgres, auto_explain)', () => {
  let store: Store;
  let one: postgres.Sql;
  let drop: () => Promise<void>;
  const notices: string[] = [];

  beforeAll(async () => {
    const db = await freshDatabase();
    store = db.store;
    one = postgres(db.url, { max: 1, onnotice: (n) => void notices.push(String(n['message'])) });
    drop = async () => (await one.end({ timeout: 5 }), await db.drop());
  });
  afterAll(() => drop());

  it('allows, refusals, the tool gate and a stored denial, alone and in one batch', async (ctx) => {
    try {
      await one`load 'auto_explain'`;
    } catch (e) {
      console.warn(`SKIPPED: auto_explain cannot be loaded on this server (${String(e)}); the buffer count above still runs`);
      ctx.skip();
    }
    const caller = await seedVerifyCaller(store, 'acme', 'did:key:zEveryLookupRoot');
    const chain = async (links: readonly Partial<Delegation>[]) => {
      let parent: Delegation | undefined;
      const hashes: string[] = [];
      for (const [i, overrides] of links.entries()) {
        parent = await seedDelegation(store.db, caller.tenantId, parent, { ...(i === 0 ? { iss: caller.rootDid } : {}), ...overrides });
        hashes.push(parent.hash);
      }
      return hashes;
    };
    const metered = await chain([{ maxCalls: 100 }, { maxCalls: 100 }, { maxCalls: 100, maxSpendMicros: 1_000_000 }]);
    const mixed = await chain([{}, { maxCalls: 100 }, {}]);
    const revoked = await chain([{ maxCalls: 100 }, { maxCalls: 100, revokedAt: new Date() }]);
    const exhausted = await chain([{ maxCalls: 100 }, { maxCalls: 0 }]);
    const gated = await chain([{ maxCalls: 100 }, { maxCalls: 100 }]);
    await store.query(
      `insert into dr_cost_calibration (tenant_id, dr_hash, metered_invocations, metered_micros, declared_micros) values ($1, $2, 1, 1, 1)`,
      [caller.tenantId, gated[1]],
    );
    const gate = { v: 0, n: Math.floor(Date.now() / 1000), t: 'web_search', rl: 1000, a: null, b: null, cc: { r: 2, m: 1 } };
    const items = (): BatchItem[] => [
      allowItem(caller, metered, { est: 1, mt: 'all' }),
      allowItem(caller, mixed, { est: 1 }),
      allowItem(caller, revoked, { est: 1, mt: 'all' }),
      allowItem(caller, exhausted, { est: 1, mt: 'all' }),
      { ...allowItem(caller, gated, { est: 1, mt: 'all' }), gate },
      {
        k: 'd',
        t: caller.tenantId,
        key: caller.keyId,
        jti: `inv-denied-${randomBytes(4).toString('hex')}`,
        ih: null,
        code: 'POLICY_VIOLATION',
        block: 'D',
        chain: metered,
        v: [],
        subj: 'denied',
        rjws: 'receipt-of-a-denial',
        rkid: caller.kid,
      },
    ];
    for (const setting of [
      'auto_explain.log_min_duration = 0',
      'auto_explain.log_nested_statements = on',
      `auto_explain.log_level = 'notice'`,
      `auto_explain.log_format = 'json'`,
    ])
      await one.unsafe(`set ${setting}`);
    const decide = async (batch: readonly BatchItem[]) => (await decideBatch({ query: queryOn(one) }, batch)).map((a) => a['o']);
    const expectedOutcomes = ['ALLOWED', 'ALLOWED', 'RECEIPT_REVOKED', 'CALLS_EXHAUSTED', 'ALLOWED', 'DENIED'];
    expect(await decide(items())).toEqual(expectedOutcomes);
    const alone = await Promise.all(items().map((item) => decide([item])));
    expect(alone.flat()).toEqual(expectedOutcomes);

    const plans = notices.flatMap((n) => {
      const at = n.indexOf('{');
      if (at < 0) return [];
      const { 'Query Text': query, Plan: plan } = JSON.parse(n.slice(at)) as { 'Query Text': string; Plan: PlanNode };
      return [{ query: query.replace(/\s+/g, ' '), plan }];
    });
    // The statement's own lookups were all seen (a lookup not logged would prove nothing).
    const seen = plans.map((p) => p.query).join('\n');
    for (const lookup of ['FROM delegations', 'FROM grant_approvals', 'FROM dr_cost_calibration', 'FROM invocations'])
      expect(seen).toContain(lookup);
    expect(plans.flatMap(({ query, plan }) => rangeReads(plan, query))).toEqual([]);
  });
});
