import { createHash, randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeBase64url } from '../../src/protocol/base64url.js';
import { BatonError } from '../../src/protocol/errors.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { verifyServiceReceipt } from '../../src/service/signer.js';
import type { Db } from '../../src/store/db.js';
import { newId } from '../../src/store/ids.js';
import type { ApiKeyScope } from '../../src/protocol/lists.js';
import { apiKeys, serviceReceipts } from '../../src/store/schema/index.js';
import { seedTenant } from '../support/fixtures.js';
import { startTestService, type TestService } from '../support/service.js';

/** A tenant API key row written directly (secret: 'bt_' + base64url(32 bytes), stored as sha256 hex). */
async function seedApiKey(db: Db, tenantId: string, scopes: ApiKeyScope[]): Promise<string> {
  const secret = `bt_${randomBytes(32).toString('base64url')}`;
  const secretHash = createHash('sha256').update(secret, 'utf8').digest('hex');
  await db.insert(apiKeys).values({ id: newId('key'), tenantId, secretHash, scopes });
  return secret;
}

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(() => svc.close());

async function published() {
  const res = await svc.call('GET', '/v1/keys');
  return res.body.keys.map((k: { kid: string; public_key: string }) => ({ kid: k.kid, publicKey: decodeBase64url(k.public_key, 'pk') }));
}

describe('recordServiceReceipt', () => {
  it('signs and stores a receipt the published keys verify', async () => {
    const db = svc.store.db;
    const tenantId = await seedTenant(db);
    const signer = svc.deps.signer;
    const r = await recordServiceReceipt(db, signer, {
      tenantId,
      kind: 'invocation.allowed',
      subject: 'inv:1',
      data: { dr_hash: 'sha256:ab', calls: [1, 2] },
      now: svc.clock.now,
    });
    expect(r.kid).toBe(signer.kid);
    const [row] = await db.select().from(serviceReceipts).where(eq(serviceReceipts.id, r.id));
    expect(row).toMatchObject({ tenantId, kind: 'invocation.allowed', subject: 'inv:1', jws: r.jws, kid: signer.kid });
    const v = verifyServiceReceipt(r.jws, await published());
    expect(v.valid).toBe(true);
    expect(v.payload).toEqual({
      iss: signer.did,
      kid: signer.kid,
      baton_receipt: 'invocation.allowed',
      tenant: tenantId,
      subject: 'inv:1',
      iat: svc.clock.now,
      jti: expect.stringMatching(/^rcpt:[0-9a-f]{32}$/),
      data: { dr_hash: 'sha256:ab', calls: [1, 2] },
    });
  });

  it('gives every receipt its own jti', async () => {
    const tenantId = await seedTenant(svc.store.db);
    const input = { tenantId, kind: 'actual.recorded' as const, subject: 'inv:2', data: {}, now: svc.clock.now };
    const a = await recordServiceReceipt(svc.store.db, svc.deps.signer, input);
    const b = await recordServiceReceipt(svc.store.db, svc.deps.signer, input);
    const jti = (jws: string) =>
      verifyServiceReceipt(jws, [{ kid: svc.deps.signer.kid, publicKey: svc.deps.signer.publicKey }]).payload?.['jti'];
    expect(jti(a.jws)).not.toBe(jti(b.jws));
    expect(b.id).toBeGreaterThan(a.id);
  });

  it('leaves nothing when the surrounding transaction rolls back, and one receipt when it commits', async () => {
    const db = svc.store.db;
    const tenantId = await seedTenant(db);
    const input = { tenantId, kind: 'delegation.accepted' as const, subject: 'sha256:cd', data: {}, now: svc.clock.now };
    await expect(
      db.transaction(async (tx) => {
        const r = await recordServiceReceipt(tx, svc.deps.signer, input);
        expect(r.id).toBeGreaterThan(0);
        throw new Error('the action failed');
      }),
    ).rejects.toThrow('the action failed');
    await expect(
      db.transaction(async (tx) => {
        await recordServiceReceipt(tx, svc.deps.signer, input);
        tx.rollback();
      }),
    ).rejects.toThrow();
    expect(await db.select().from(serviceReceipts).where(eq(serviceReceipts.tenantId, tenantId))).toHaveLength(0);

    await db.transaction(async (tx) => {
      await recordServiceReceipt(tx, svc.deps.signer, input);
    });
    expect(await db.select().from(serviceReceipts).where(eq(serviceReceipts.tenantId, tenantId))).toHaveLength(1);
  });

  it('drops undefined-valued properties from data (as JSON does), at any depth', async () => {
    const tenantId = await seedTenant(svc.store.db);
    const r = await recordServiceReceipt(svc.store.db, svc.deps.signer, {
      tenantId,
      kind: 'invocation.denied',
      subject: 'inv:u',
      data: { code: 'X', block: undefined, nested: { a: 1, b: undefined }, list: [{ c: undefined }] },
      now: svc.clock.now,
    });
    const v = verifyServiceReceipt(r.jws, [{ kid: svc.deps.signer.kid, publicKey: svc.deps.signer.publicKey }]);
    expect(v.payload?.['data']).toEqual({ code: 'X', nested: { a: 1 }, list: [{}] });
  });

  it('refuses data that is not canonical JSON as an internal error, storing nothing', async () => {
    const db = svc.store.db;
    const tenantId = await seedTenant(db);
    for (const data of [{ a: Number.NaN }, { a: new Date() }, { a: [undefined] }, { a: 2n }]) {
      const err = await recordServiceReceipt(db, svc.deps.signer, {
        tenantId,
        kind: 'invocation.denied',
        subject: 'inv:x',
        data,
        now: svc.clock.now,
      }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BatonError);
      expect((err as BatonError).code).toBe('INTERNAL');
    }
    const err = await recordServiceReceipt(db, svc.deps.signer, {
      tenantId,
      kind: 'invocation.denied',
      subject: 'inv:x',
      data: {},
      now: 1.5,
    }).catch((e: unknown) => e);
    expect((err as BatonError).code).toBe('INTERNAL');
    expect(await db.select().from(serviceReceipts).where(eq(serviceReceipts.tenantId, tenantId))).toHaveLength(0);
  });
});

describe('GET /v1/service-receipts', () => {
  let tenantA: string;
  let tenantB: string;
  let auditA: string;
  let auditB: string;
  let verifyA: string;
  let idsA: number[];

  beforeAll(async () => {
    const db = svc.store.db;
    tenantA = await seedTenant(db, 'a');
    tenantB = await seedTenant(db, 'b');
    auditA = await seedApiKey(db, tenantA, ['audit']);
    auditB = await seedApiKey(db, tenantB, ['audit', 'verify']);
    verifyA = await seedApiKey(db, tenantA, ['verify', 'issue', 'report']);
    idsA = [];
    for (let i = 0; i < 7; i++) {
      const a = await recordServiceReceipt(db, svc.deps.signer, {
        tenantId: tenantA,
        kind: 'invocation.allowed',
        subject: `inv:a${i}`,
        data: { i },
        now: svc.clock.now,
      });
      idsA.push(a.id);
      // Interleave the other tenant's rows so ids are not contiguous.
      await recordServiceReceipt(db, svc.deps.signer, {
        tenantId: tenantB,
        kind: 'invocation.denied',
        subject: `inv:b${i}`,
        data: { i },
        now: svc.clock.now,
      });
    }
  });

  it("pages through the tenant's receipts with after, limit and next_after", async () => {
    const p1 = await svc.call('GET', '/v1/service-receipts?limit=3', { key: auditA });
    expect(p1.status).toBe(200);
    expect(p1.body.service_receipts.map((r: { id: number }) => r.id)).toEqual(idsA.slice(0, 3));
    expect(p1.body.next_after).toBe(idsA[2]);
    expect(p1.body.service_receipts[0]).toEqual({
      id: idsA[0],
      kind: 'invocation.allowed',
      subject: 'inv:a0',
      kid: svc.deps.signer.kid,
      jws: expect.any(String),
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT.*Z$/),
    });
    const p2 = await svc.call('GET', `/v1/service-receipts?after=${p1.body.next_after}&limit=3`, { key: auditA });
    expect(p2.body.service_receipts.map((r: { id: number }) => r.id)).toEqual(idsA.slice(3, 6));
    expect(p2.body.next_after).toBe(idsA[5]);
    const p3 = await svc.call('GET', `/v1/service-receipts?after=${p2.body.next_after}&limit=3`, { key: auditA });
    expect(p3.body.service_receipts.map((r: { id: number }) => r.id)).toEqual(idsA.slice(6));
    expect(p3.body.next_after).toBeNull();
    const exact = await svc.call('GET', `/v1/service-receipts?after=${idsA[3]}&limit=3`, { key: auditA });
    expect(exact.body.service_receipts).toHaveLength(3);
    expect(exact.body.next_after).toBeNull();
    const past = await svc.call('GET', `/v1/service-receipts?after=${idsA[6]}`, { key: auditA });
    expect(past.body).toEqual({ service_receipts: [], next_after: null });

    // Every receipt served verifies against the published keys.
    const keys = await published();
    for (const r of [...p1.body.service_receipts, ...p2.body.service_receipts, ...p3.body.service_receipts]) {
      expect(verifyServiceReceipt(r.jws, keys)).toMatchObject({
        valid: true,
        payload: { tenant: tenantA, subject: r.subject, baton_receipt: r.kind },
      });
    }
  });

  it('defaults to after=0 and limit=100, and accepts limit=500', async () => {
    const all = await svc.call('GET', '/v1/service-receipts', { key: auditA });
    expect(all.status).toBe(200);
    expect(all.body.service_receipts.map((r: { id: number }) => r.id)).toEqual(idsA);
    expect(all.body.next_after).toBeNull();
    const big = await svc.call('GET', '/v1/service-receipts?after=0&limit=500', { key: auditA });
    expect(big.body.service_receipts).toHaveLength(7);

    const db = svc.store.db;
    const tenantC = await seedTenant(db, 'c');
    const auditC = await seedApiKey(db, tenantC, ['audit']);
    for (let i = 0; i < 101; i++) {
      await recordServiceReceipt(db, svc.deps.signer, {
        tenantId: tenantC,
        kind: 'actual.recorded',
        subject: `inv:c${i}`,
        data: {},
        now: svc.clock.now,
      });
    }
    const first = await svc.call('GET', '/v1/service-receipts', { key: auditC });
    expect(first.body.service_receipts).toHaveLength(100);
    expect(first.body.next_after).toBe(first.body.service_receipts[99].id);
    const rest = await svc.call('GET', `/v1/service-receipts?after=${first.body.next_after}`, { key: auditC });
    expect(rest.body.service_receipts).toHaveLength(1);
    expect(rest.body.next_after).toBeNull();
  });

  it("never shows one tenant another tenant's receipts", async () => {
    const b = await svc.call('GET', '/v1/service-receipts?limit=500', { key: auditB });
    expect(b.status).toBe(200);
    expect(b.body.service_receipts).toHaveLength(7);
    for (const r of b.body.service_receipts) {
      expect(r.subject).toMatch(/^inv:b/);
      expect(idsA).not.toContain(r.id);
    }
    // Paging from one of A's ids does not reveal A's rows either.
    const fromA = await svc.call('GET', `/v1/service-receipts?after=${idsA[0]}`, { key: auditB });
    for (const r of fromA.body.service_receipts) expect(r.subject).toMatch(/^inv:b/);
  });

  it('refuses invalid queries with 400 INVALID_REQUEST', async () => {
    const bad = [
      'limit=0',
      'limit=501',
      'limit=-1',
      'limit=abc',
      'limit=1.5',
      'limit=',
      'limit=010',
      'after=-1',
      'after=01',
      'after=1e3',
      'after=x',
      'after=99999999999999999999',
      'after= 1',
      'limit=2&limit=3',
      'after=1&after=1',
      'afer=3',
      'cursor=1',
    ];
    for (const q of bad) {
      const res = await svc.call('GET', `/v1/service-receipts?${q}`, { key: auditA });
      expect(res.status, q).toBe(400);
      expect(res.body.error.code, q).toBe('INVALID_REQUEST');
      expect(res.body.request_id).toEqual(expect.any(String));
    }
  });

  it('needs a key: 401 without one or with a bad one', async () => {
    for (const key of [undefined, 'nope', `bt_${randomBytes(32).toString('base64url')}`]) {
      const res = await svc.call('GET', '/v1/service-receipts', key === undefined ? {} : { key });
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe('UNAUTHORIZED');
    }
  });

  it('needs the audit scope: 403 for other tenant keys and for the admin key', async () => {
    const res = await svc.call('GET', '/v1/service-receipts', { key: verifyA });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('FORBIDDEN');
    const admin = await svc.call('GET', '/v1/service-receipts', { key: svc.adminKey });
    expect(admin.status).toBe(403);
    expect(admin.body.error.code).toBe('FORBIDDEN');
  });

  it('checks the key before the query: 401 beats 400', async () => {
    const res = await svc.call('GET', '/v1/service-receipts?limit=0');
    expect(res.status).toBe(401);
  });

  it('filters by kind, subject and time, combined, paging by id under the filters; bad filters are 400', async () => {
    const db = svc.store.db;
    const hash = `sha256:${'c'.repeat(64)}`;
    const extra: number[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await recordServiceReceipt(db, svc.deps.signer, {
        tenantId: tenantA,
        kind: i % 2 === 0 ? 'delegation.accepted' : 'delegation.revoked',
        subject: hash,
        data: { i },
        now: svc.clock.now,
      });
      extra.push(r.id);
    }
    // Another tenant's receipt about the same subject never shows.
    await recordServiceReceipt(db, svc.deps.signer, {
      tenantId: tenantB,
      kind: 'delegation.accepted',
      subject: hash,
      data: {},
      now: svc.clock.now,
    });
    const ids = async (query: string, key = auditA) => {
      const out: number[] = [];
      let after = 0;
      for (;;) {
        const r = await svc.call('GET', `/v1/service-receipts?${query}&limit=1&after=${after}`, { key });
        expect(r.status, query).toBe(200);
        out.push(...r.body.service_receipts.map((x: { id: number }) => x.id));
        if (r.body.next_after === null) return out;
        after = r.body.next_after;
      }
    };
    expect(await ids('kind=invocation.allowed')).toEqual(idsA);
    expect(await ids(`subject=${hash}`)).toEqual(extra);
    expect(await ids(`subject=${hash}&kind=delegation.revoked`)).toEqual([extra[1], extra[3]]);
    expect(await ids('subject=inv:a3')).toEqual([idsA[3]]);
    expect(await ids('subject=inv:b3')).toEqual([]);
    expect(await ids(`subject=${hash}`, auditB)).toHaveLength(1);

    const all = (await svc.call('GET', '/v1/service-receipts?limit=500', { key: auditA })).body.service_receipts as {
      id: number;
      created_at: string;
    }[];
    const at = (id: number) => all.find((r) => r.id === id)!.created_at;
    // created_at has microseconds, the answer milliseconds: since at a receipt's millisecond includes it, until excludes it,
    // and every receipt signed in those milliseconds with it (how many share one depends on the machine's speed).
    const [since, until] = [at(extra[0]!), at(extra[3]!)];
    const window = all.filter((r) => r.created_at >= since && r.created_at < until).map((r) => r.id);
    if (since !== until) {
      expect(await ids(`since=${since}&until=${until}&subject=${hash}`)).toEqual(window.filter((id) => extra.includes(id)));
    }
    expect(await ids(`since=${at(extra[0]!)}&subject=${hash}`)).toEqual(extra);
    expect(await ids('until=2000-01-01T00:00:00Z')).toEqual([]);

    for (const q of [
      'kind=nope',
      'kind=',
      'subject=',
      'subject=a%20b',
      'since=2026-01-01',
      'until=tomorrow',
      'since=24h&until=1h',
      'since=24h&until=2026-01-01T00:00:00Z',
      'since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z',
      'kind=invocation.allowed&kind=actual.recorded',
      // Well-formed, but outside the years the database holds: a 400, never the database's 500.
      'since=0000-01-01T00:00:00Z',
      `until=${encodeURIComponent('0001-01-01T00:30:00+01:00')}`,
      'since=9999-12-31T23:59:59-23:59',
    ]) {
      const res = await svc.call('GET', `/v1/service-receipts?${q}`, { key: auditA });
      expect(res.status, q).toBe(400);
      expect(res.body.error.code, q).toBe('INVALID_REQUEST');
    }
  });
});
