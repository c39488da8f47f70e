import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import { PG_RAISE_EXCEPTION } from '../../src/store/errors.js';
import { serviceReceipts } from '../../src/store/schema/index.js';
import { dbFailure, seedServiceKey, seedTenant } from '../support/fixtures.js';
import { drivers } from '../setup/drivers.js';

describe.each(drivers)('service receipts (table receipts) are append-only ($name)', ({ open }) => {
  let store: Store;
  let drop: () => Promise<void>;
  let tenantId: string;
  let kid: string;

  beforeAll(async () => {
    ({ store, drop } = await open());
    tenantId = await seedTenant(store.db);
    kid = await seedServiceKey(store.db);
    await store.db.insert(serviceReceipts).values([
      { tenantId, kind: 'delegation.accepted', subject: 'sha256:aa', jws: 'a.b.c', kid },
      { tenantId, kind: 'invocation.allowed', subject: 'inv:1', jws: 'd.e.f', kid },
    ]);
  });
  afterAll(() => drop());

  const refusal = (op: string) => ({ code: PG_RAISE_EXCEPTION, message: `receipts are append-only: ${op} refused` });

  it('refuses UPDATE', async () => {
    const err = await dbFailure(store.db.update(serviceReceipts).set({ jws: 'forged' }).where(eq(serviceReceipts.tenantId, tenantId)));
    expect(err).toMatchObject(refusal('UPDATE'));
  });

  it('refuses an UPDATE that matches no row too', async () => {
    const err = await dbFailure(store.db.update(serviceReceipts).set({ jws: 'x' }).where(eq(serviceReceipts.subject, 'nothing')));
    expect(err).toMatchObject(refusal('UPDATE'));
  });

  it('refuses DELETE', async () => {
    const err = await dbFailure(store.db.delete(serviceReceipts).where(eq(serviceReceipts.tenantId, tenantId)));
    expect(err).toMatchObject(refusal('DELETE'));
  });

  it('refuses TRUNCATE', async () => {
    const err = await dbFailure(store.db.execute(sql`truncate receipts`));
    expect(err).toMatchObject(refusal('TRUNCATE'));
  });

  it('still accepts INSERT, and nothing was changed', async () => {
    await store.db.insert(serviceReceipts).values({ tenantId, kind: 'actual.recorded', subject: 'inv:1', jws: 'g.h.i', kid });
    const all = await store.db.select().from(serviceReceipts).orderBy(serviceReceipts.id);
    expect(all.map((r) => r.jws)).toEqual(['a.b.c', 'd.e.f', 'g.h.i']);
    expect(all.map((r) => r.id)).toEqual([...all.map((r) => r.id)].sort((a, b) => a - b));
  });

  it('refuses an unknown kind', async () => {
    // @ts-expect-error kind is typed too
    const p = store.db.insert(serviceReceipts).values({ tenantId, kind: 'made.up', subject: 's', jws: 'j', kid });
    expect(await dbFailure(p)).toMatchObject({ code: '23514', constraint: 'receipts_kind_known' });
  });
});
