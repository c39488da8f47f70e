import { TransactionRollbackError, and, eq, isNull, lt, or, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db, Store } from '../../src/store/db.js';
import { rows } from '../../src/store/rows.js';
import { actuals, apiKeys, delegations, invocations, serviceKeys, type Delegation } from '../../src/store/schema/index.js';
import { dbFailure, fakeHash, seedDelegation, seedServiceKey, seedTenant } from '../support/fixtures.js';
import { drivers } from '../setup/drivers.js';

/** The counting step's shape: increment only while under the ceiling, never read-then-write. */
function takeCall(db: Db, dr: Delegation) {
  return db
    .update(delegations)
    .set({ callsUsed: sql`${delegations.callsUsed} + 1` })
    .where(
      and(
        eq(delegations.tenantId, dr.tenantId),
        eq(delegations.hash, dr.hash),
        or(isNull(delegations.maxCalls), lt(delegations.callsUsed, delegations.maxCalls)),
      ),
    )
    .returning({ callsUsed: delegations.callsUsed });
}

describe.each(drivers)('schema constraints ($name)', ({ open }) => {
  let store: Store;
  let drop: () => Promise<void>;
  let tenantId: string;
  let otherTenant: string;
  let root: Delegation;

  beforeAll(async () => {
    ({ store, drop } = await open());
    tenantId = await seedTenant(store.db, 'acme');
    otherTenant = await seedTenant(store.db, 'globex');
    root = await seedDelegation(store.db, tenantId, undefined, { maxCalls: 2, maxSpendMicros: 5_000_000 });
  });
  afterAll(() => drop());

  it('maps bigint columns to numbers on this driver', () => {
    expect(root).toMatchObject({ maxCalls: 2, callsUsed: 0, maxSpendMicros: 5_000_000, nbf: 1_700_000_000 });
    expect(root.createdAt).toBeInstanceOf(Date);
  });

  it('holds calls_used <= max_calls: the conditional update stops at the ceiling, a blind one is refused', async () => {
    expect(await takeCall(store.db, root)).toEqual([{ callsUsed: 1 }]);
    expect(await takeCall(store.db, root)).toEqual([{ callsUsed: 2 }]);
    expect(await takeCall(store.db, root)).toEqual([]);
    const blind = store.db
      .update(delegations)
      .set({ callsUsed: sql`${delegations.callsUsed} + 1` })
      .where(eq(delegations.hash, root.hash));
    expect(await dbFailure(blind)).toMatchObject({ code: '23514', constraint: 'delegations_calls_within_max' });
    const [row] = await store.db.select().from(delegations).where(eq(delegations.hash, root.hash));
    expect(row?.callsUsed).toBe(2);
  });

  it('holds unique (tenant_id, iss, jti) for delegations: per issuer, per tenant', async () => {
    const again = seedDelegation(store.db, tenantId, undefined, { jti: root.jti, hash: fakeHash('other') });
    expect(await dbFailure(again)).toMatchObject({ code: '23505', constraint: 'delegations_tenant_iss_jti_uq' });
    // Another issuer's DR may use the same jti.
    await expect(seedDelegation(store.db, tenantId, undefined, { jti: root.jti, iss: 'did:key:zOtherIssuer' })).resolves.toBeDefined();
    // Another tenant may hold a DR with the same jti.
    await expect(seedDelegation(store.db, otherTenant, undefined, { jti: root.jti })).resolves.toBeDefined();
  });

  it('refuses a sub-DR whose parent is not stored for the same tenant', async () => {
    const orphan = seedDelegation(store.db, otherTenant, root);
    expect(await dbFailure(orphan)).toMatchObject({ code: '23503', constraint: 'delegations_parent_fk' });
    const child = await seedDelegation(store.db, tenantId, root);
    expect(child).toMatchObject({ depth: 1, ancestors: [root.hash], rootHash: root.hash, parentHash: root.hash });
  });

  it('refuses a DR whose depth, parent and ancestors disagree', async () => {
    const p = seedDelegation(store.db, tenantId, undefined, { depth: 1 });
    expect(await dbFailure(p)).toMatchObject({ code: '23514', constraint: 'delegations_shape' });
  });

  it('refuses a DR whose hash is not sha256: and 64 lowercase hex digits', async () => {
    const p = seedDelegation(store.db, tenantId, undefined, { hash: `sha256:${'A'.repeat(64)}` });
    expect(await dbFailure(p)).toMatchObject({ code: '23514', constraint: 'delegations_hash_format' });
  });

  it('checks the shape again when an UPDATE sets a column of it, and stores nothing', async () => {
    const child = await seedDelegation(store.db, tenantId, root);
    const badHash = store.db.update(delegations).set({ hash: 'sha256:xyz' }).where(eq(delegations.hash, child.hash));
    expect(await dbFailure(badHash)).toMatchObject({ code: '23514', constraint: 'delegations_hash_format' });
    const noAncestors = store.db
      .update(delegations)
      .set({ ancestors: sql`'{}'::text[]` })
      .where(eq(delegations.hash, child.hash));
    expect(await dbFailure(noAncestors)).toMatchObject({ code: '23514', constraint: 'delegations_shape' });
    const orphanDepth = store.db.update(delegations).set({ depth: 0 }).where(eq(delegations.hash, child.hash));
    expect(await dbFailure(orphanDepth)).toMatchObject({ code: '23514', constraint: 'delegations_shape' });
    const [row] = await store.db.select().from(delegations).where(eq(delegations.hash, child.hash));
    expect(row).toMatchObject({ depth: 1, ancestors: [root.hash], parentHash: root.hash });
  });

  // PostgreSQL evaluates every CHECK constraint of a table on every UPDATE of a row, so a
  // CHECK on delegations runs for each metered link of every allowed verify (0015).
  it('keeps CHECK constraints of delegations to the columns a counter update sets', async () => {
    const found = await rows<{ name: string; columns: string }>(
      store.db,
      sql`select c.conname::text as name, string_agg(a.attname::text, ',' order by a.attname) as columns
            from pg_constraint c
            join pg_attribute a on a.attrelid = c.conrelid and a.attnum = any (c.conkey)
           where c.conrelid = 'delegations'::regclass and c.contype = 'c'
           group by c.conname order by c.conname`,
    );
    const counters = new Set(['calls_used', 'max_calls', 'spend_reserved_micros', 'max_spend_micros']);
    expect(found.map((c) => c.name)).toEqual(['delegations_calls_nonneg', 'delegations_calls_within_max', 'delegations_spend_nonneg']);
    for (const c of found)
      expect(
        c.columns.split(',').filter((col) => !counters.has(col)),
        c.name,
      ).toEqual([]);
  });

  it('makes a replayed invocation jti a unique violation, and actuals follow their provenance rules', async () => {
    const inv = {
      tenantId,
      jti: 'inv:1',
      hash: fakeHash('inv1'),
      jws: 'a.b.c',
      leafHash: root.hash,
      drChain: [root.hash],
      tool: 'search',
      estimatedMicros: 250_000,
      callerKeyId: 'key_x',
    };
    await store.db.insert(invocations).values(inv);
    expect(await dbFailure(store.db.insert(invocations).values(inv))).toMatchObject({
      code: '23505',
      constraint: 'invocations_tenant_id_jti_pk',
    });

    const base = { tenantId, jti: 'inv:1', bodyHash: 'h' };
    const refusals = [
      [{ ...base, source: 'unavailable' as const, costMicros: null }, 'actuals_unavailable_has_reason'],
      [{ ...base, source: 'unavailable' as const, unavailableReason: '  ' }, 'actuals_unavailable_has_reason'],
      [{ ...base, source: 'unavailable' as const, unavailableReason: 'no meter', costMicros: 1 }, 'actuals_cost_iff_available'],
      [{ ...base, source: 'api-usage' as const }, 'actuals_cost_iff_available'],
      [{ ...base, source: 'api-usage' as const, costMicros: -1 }, 'actuals_nonneg'],
      [{ ...base, source: 'guess' as 'api-usage', costMicros: 1 }, 'actuals_source_known'],
    ] as const;
    for (const [values, constraint] of refusals) {
      expect(await dbFailure(store.db.insert(actuals).values(values)), constraint).toMatchObject({ code: '23514', constraint });
    }
    const noInvocation = store.db.insert(actuals).values({ ...base, jti: 'inv:none', source: 'manual-meter', costMicros: 1 });
    expect(await dbFailure(noInvocation)).toMatchObject({ code: '23503', constraint: 'actuals_invocation_fk' });

    await store.db.insert(actuals).values({ ...base, source: 'api-usage', costMicros: 300_000, tokensIn: 10 });
    const second = store.db.insert(actuals).values({ ...base, source: 'api-usage', costMicros: 300_000 });
    expect(await dbFailure(second)).toMatchObject({ code: '23505', constraint: 'actuals_tenant_id_jti_pk' });
  });

  it('keeps api key scopes known, and tenantless keys admin-only', async () => {
    const key = (over: Partial<typeof apiKeys.$inferInsert>) =>
      store.db.insert(apiKeys).values({ id: `key_${Math.random()}`, secretHash: fakeHash(), scopes: ['verify'], ...over });
    await key({ tenantId, scopes: ['verify', 'report'] });
    await key({ tenantId: null, scopes: ['admin'] });
    expect(await dbFailure(key({ tenantId: null }))).toMatchObject({ constraint: 'api_keys_tenant_or_admin' });
    expect(await dbFailure(key({ tenantId, scopes: ['root' as 'admin'] }))).toMatchObject({ constraint: 'api_keys_scopes_known' });
    expect(await dbFailure(key({ tenantId, scopes: [] }))).toMatchObject({ constraint: 'api_keys_scopes_nonempty' });
  });

  it('allows one active service key at a time', async () => {
    const first = await seedServiceKey(store.db);
    expect(await dbFailure(seedServiceKey(store.db))).toMatchObject({ code: '23505', constraint: 'service_keys_one_active_uq' });
    await store.db.update(serviceKeys).set({ retiredAt: new Date() }).where(eq(serviceKeys.kid, first));
    await expect(seedServiceKey(store.db)).resolves.toBeTypeOf('string');
  });

  it('rolls a whole transaction back, on either driver, when one DR of the chain is at its ceiling', async () => {
    const parent = await seedDelegation(store.db, tenantId, undefined, { maxCalls: 1 });
    const leaf = await seedDelegation(store.db, tenantId, parent, { maxCalls: 5 });
    const attempt = (jti: string) =>
      store.db
        .transaction(async (tx) => {
          await tx.insert(invocations).values({
            tenantId,
            jti,
            hash: fakeHash(jti),
            jws: 'a.b.c',
            leafHash: leaf.hash,
            drChain: [parent.hash, leaf.hash],
            callerKeyId: 'key_x',
          });
          for (const dr of [parent, leaf]) {
            if ((await takeCall(tx, dr)).length === 0) tx.rollback();
          }
          return 'allowed' as const;
        })
        .catch((err: unknown) => {
          if (err instanceof TransactionRollbackError) return 'denied' as const;
          throw err;
        });
    expect(await attempt('inv:tx1')).toBe('allowed');
    expect(await attempt('inv:tx2')).toBe('denied');
    const stored = await store.db.select({ jti: invocations.jti }).from(invocations).where(eq(invocations.leafHash, leaf.hash));
    expect(stored).toEqual([{ jti: 'inv:tx1' }]);
    const used = await store.db.select({ used: delegations.callsUsed }).from(delegations).where(eq(delegations.hash, leaf.hash));
    expect(used).toEqual([{ used: 1 }]);
  });
});
