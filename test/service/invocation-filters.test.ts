/**
 * GET /v1/invocations on real PostgreSQL: the auditor's list of verify
 * decisions (allowed invocations and denials) filtered by DR subtree, tool,
 * outcome, denial code and time, alone and combined; keyset paging under
 * filters that never skips or repeats a row (also across equal timestamps and
 * rows arriving between pages); no row of another tenant, even one whose
 * chain holds the very same DR; and bad filters refused with 400.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, createSubDelegation, type SignedDelegation } from '../../src/sdk/records.js';
import { T0 } from '../support/fixtures.js';
import {
  setupTenant,
  startTestService,
  storeTwoLeaves,
  verifyInvocation,
  type CallResult,
  type TestService,
  type TestTenant,
} from '../support/service.js';

let svc: TestService;
let tenant: TestTenant;
let other: TestTenant;

const policy = { allowed_tools: ['web_search', 'fetch'], max_cost_usd: 1 };

// root: R -> A; leafA: A -> B; leafB: A -> C. The other tenant: R' -> A -> B.
const A = generateKeyPair(),
  B = generateKeyPair(),
  C = generateKeyPair();
let root: SignedDelegation, leafA: SignedDelegation, leafB: SignedDelegation;
let otherRoot: SignedDelegation, otherLeaf: SignedDelegation;

interface Item {
  decision: 'allowed' | 'denied';
  violations?: { code: string }[];
  jti: string | null;
  tool?: string | null;
  code?: string;
  dr_chain: string[];
  created_at: string;
  denial_id?: number;
}

const verify = (t: TestTenant, chain: SignedDelegation[], invoker: KeyPair, args: Record<string, unknown>, jti?: string) =>
  verifyInvocation(svc, t.keys.verify, chain, invoker, args, jti);

const list = (query: string, key = tenant.keys.audit): Promise<CallResult> => svc.call('GET', `/v1/invocations${query}`, { key });

/** Every page of `query` with page size `limit`, checking each page's shape. */
async function allPages(query: string, limit: number, key = tenant.keys.audit): Promise<Item[]> {
  const out: Item[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 200; pages++) {
    const sep = query === '' ? '?' : '&';
    const r = await list(`${query}${sep}limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`, key);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.invocations.length).toBeLessThanOrEqual(limit);
    out.push(...r.body.invocations);
    cursor = r.body.next_cursor;
    if (cursor === null) return out;
    expect(r.body.invocations.length).toBe(limit);
  }
  throw new Error('paging did not end');
}

const idOf = (i: Item) => (i.decision === 'allowed' ? `a:${i.jti}` : `d:${i.denial_id}`);
const ids = (items: Item[]) => items.map(idOf);

let everything: Item[];
const codes = new Set<string>();

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  other = await setupTenant(svc, 'other');
  ({ root, leafA, leafB } = await storeTwoLeaves(svc, tenant, policy, A, B, C));
  // The other tenant's own chain (a root DID is trusted by one tenant only), held by the same agents.
  otherRoot = createRootDelegation({ issuer: other.root, audience: A.did, policy, iat: T0, nbf: T0 - 100, exp: T0 + 3600 });
  otherLeaf = createSubDelegation({ parent: otherRoot, issuer: A, audience: B.did, policy, iat: T0 });
  const stored = await svc.call('POST', '/v1/delegations', { key: other.keys.issue, json: { receipts: [otherRoot.jws, otherLeaf.jws] } });
  expect(stored.status).toBe(201);

  const allowed = async (t: TestTenant, chain: SignedDelegation[], invoker: KeyPair, args: Record<string, unknown> = {}) => {
    const r = await verify(t, chain, invoker, args);
    expect(r.res.status, JSON.stringify(r.res.body)).toBe(200);
    return r.jti;
  };
  const denied = async (chain: SignedDelegation[], invoker: KeyPair, args: Record<string, unknown>, jti?: string) => {
    const r = await verify(tenant, chain, invoker, args, jti);
    expect(r.res.status, JSON.stringify(r.res.body)).toBe(403);
    codes.add(r.res.body.error.code);
    for (const v of (r.res.body.error.details?.violations ?? []) as { code: string }[]) codes.add(v.code);
  };
  const replayed = await allowed(tenant, [root, leafA], B);
  await allowed(tenant, [root, leafA], B);
  await allowed(tenant, [root, leafA], B, { tool: 'fetch' });
  await allowed(tenant, [root, leafA], B, { tool: 'fetch' });
  await allowed(tenant, [root, leafB], C);
  await allowed(tenant, [root, leafB], C, { tool: 'fetch' });
  await denied([root, leafA], B, { tool: 'delete_everything' });
  await denied([root, leafB], C, { estimated_cost_usd: 5 });
  await denied([root, leafA], B, { estimated_cost_usd: 0.3 }, replayed); // another invocation under a used jti
  // The other tenant's decisions through the same DRs.
  await allowed(other, [otherRoot, otherLeaf], B);
  await allowed(other, [otherRoot, otherLeaf], B, { tool: 'fetch' });
  const otherDenied = await verify(other, [otherRoot, otherLeaf], B, { tool: 'delete_everything' });
  expect(otherDenied.res.status).toBe(403);

  everything = await allPages('', 200);
});
afterAll(async () => svc?.close());

describe('GET /v1/invocations', () => {
  it('lists every allowed invocation and denial of the tenant, newest first, and nothing of the other tenant', async () => {
    expect(everything.filter((i) => i.decision === 'allowed')).toHaveLength(6);
    expect(everything.filter((i) => i.decision === 'denied')).toHaveLength(3);
    expect([...codes].sort()).toEqual(['POLICY_VIOLATION', 'REPLAY_DETECTED']);
    const times = everything.map((i) => Date.parse(i.created_at));
    expect([...times].sort((a, b) => b - a)).toEqual(times);
    const theirs = await allPages('', 200, other.keys.audit);
    expect(theirs).toHaveLength(3);
    expect(ids(theirs).filter((id) => ids(everything).includes(id) && id.startsWith('d:'))).toEqual([]);
    for (const i of theirs.filter((t) => t.decision === 'allowed')) expect(ids(everything)).not.toContain(idOf(i));
  });

  it('each filter alone', async () => {
    const check = async (query: string, expected: (i: Item) => boolean, count: number) => {
      const got = await allPages(query, 200);
      expect(ids(got), query).toEqual(ids(everything.filter(expected)));
      expect(got, query).toHaveLength(count);
    };
    await check(`?dr=${leafA.hash}`, (i) => i.dr_chain.includes(leafA.hash), 6);
    await check(`?dr=${leafB.hash}`, (i) => i.dr_chain.includes(leafB.hash), 3);
    await check(`?dr=${root.hash}`, () => true, 9);
    await check('?tool=fetch', (i) => i.tool === 'fetch', 3);
    await check('?tool=web_search', (i) => i.tool === 'web_search', 3);
    await check('?tool=nothing_like_it', () => false, 0);
    await check('?outcome=allowed', (i) => i.decision === 'allowed', 6);
    await check('?outcome=denied', (i) => i.decision === 'denied', 3);
    const hasCode = (code: string) => (i: Item) => i.code === code || (i.violations ?? []).some((v) => v.code === code);
    for (const code of codes) {
      const count = everything.filter(hasCode(code)).length;
      expect(count, code).toBeGreaterThan(0);
      await check(`?code=${code}`, hasCode(code), count);
    }
    await check('?code=POLICY_VIOLATION', hasCode('POLICY_VIOLATION'), 2);
    await check('?code=REPLAY_DETECTED', hasCode('REPLAY_DETECTED'), 1);
    // A DR of no decision: an empty page, not an error.
    await check(`?dr=sha256:${'a'.repeat(64)}`, () => false, 0);
  });

  it('filters combined', async () => {
    const check = async (query: string, expected: (i: Item) => boolean, count: number) => {
      const got = await allPages(query, 200);
      expect(ids(got), query).toEqual(ids(everything.filter(expected)));
      expect(got, query).toHaveLength(count);
    };
    await check(`?dr=${leafA.hash}&outcome=denied`, (i) => i.dr_chain.includes(leafA.hash) && i.decision === 'denied', 2);
    await check(`?dr=${leafB.hash}&tool=fetch`, (i) => i.dr_chain.includes(leafB.hash) && i.tool === 'fetch', 1);
    await check(`?dr=${leafA.hash}&tool=fetch&outcome=allowed`, (i) => i.dr_chain.includes(leafA.hash) && i.tool === 'fetch', 2);
    await check(
      `?dr=${leafB.hash}&code=POLICY_VIOLATION&outcome=denied`,
      (i) => i.dr_chain.includes(leafB.hash) && i.code === 'POLICY_VIOLATION',
      1,
    );
    await check(`?dr=${leafB.hash}&code=REPLAY_DETECTED`, () => false, 0);
  });

  it('the time range: since inclusive, until exclusive, on the microsecond, combined with the other filters', async () => {
    // Spread the decisions over known instants: the i-th newest at T - i minutes.
    const base = Date.parse('2026-06-01T12:00:00.000Z');
    const at = (i: number) => new Date(base - i * 60_000).toISOString();
    for (const [i, item] of everything.entries()) {
      if (item.decision === 'allowed') {
        await svc.store.db.execute(
          sql`update invocations set created_at = ${at(i)}::timestamptz where tenant_id = ${tenant.id} and jti = ${item.jti}`,
        );
      } else {
        await svc.store.db.execute(sql`update denials set created_at = ${at(i)}::timestamptz where id = ${item.denial_id}`);
      }
    }
    const spread = await allPages('', 200);
    expect(ids(spread)).toEqual(ids(everything)); // same order as before
    const since = at(6);
    const until = at(2);
    const window = spread.slice(3, 7); // at(3) .. at(6): until is exclusive, since inclusive
    expect(ids(await allPages(`?since=${since}&until=${until}`, 200))).toEqual(ids(window));
    expect(ids(await allPages(`?since=${since}`, 200))).toEqual(ids(spread.slice(0, 7)));
    expect(ids(await allPages(`?until=${until}`, 200))).toEqual(ids(spread.slice(3)));
    // An offset zone names the same instant.
    const offset = new Date(Date.parse(since)).toISOString().replace('Z', '+00:00');
    expect(ids(await allPages(`?since=${encodeURIComponent(offset)}&until=${until}`, 200))).toEqual(ids(window));
    expect(ids(await allPages(`?since=${since}&until=${until}&outcome=allowed`, 200))).toEqual(
      ids(window.filter((i) => i.decision === 'allowed')),
    );
    everything = spread;
  });

  it('paging under every filter returns exactly the unpaged list, for every page size', async () => {
    const queries = ['', `?dr=${leafA.hash}`, '?outcome=denied', '?tool=fetch', `?dr=${root.hash}&outcome=allowed`];
    for (const q of queries) {
      const whole = await allPages(q, 200);
      for (const limit of [1, 2, 3]) expect(ids(await allPages(q, limit)), `${q} limit ${limit}`).toEqual(ids(whole));
    }
  });

  it('rows with the very same created_at (allowed and denied) are neither skipped nor repeated across pages', async () => {
    const same = '2026-06-02T00:00:00.123456Z';
    await svc.store.db.execute(sql`update invocations set created_at = ${same}::timestamptz where tenant_id = ${tenant.id}`);
    await svc.store.db.execute(sql`update denials set created_at = ${same}::timestamptz where tenant_id = ${tenant.id}`);
    const whole = await allPages('', 200);
    expect(whole).toHaveLength(9);
    expect(new Set(ids(whole)).size).toBe(9);
    for (const limit of [1, 2, 4]) expect(ids(await allPages('', limit))).toEqual(ids(whole));
    expect(ids(await allPages(`?dr=${leafA.hash}`, 1))).toEqual(ids(whole.filter((i) => i.dr_chain.includes(leafA.hash))));
  });

  it('decisions made between two pages never shift the pages that follow', async () => {
    const first = await list(`?dr=${leafA.hash}&limit=2`);
    expect(first.status).toBe(200);
    const before = await allPages(`?dr=${leafA.hash}`, 200);
    // Newer decisions arrive: an allow and a denial through leafA.
    expect((await verify(tenant, [root, leafA], B, {})).res.status).toBe(200);
    expect((await verify(tenant, [root, leafA], B, { tool: 'delete_everything' })).res.status).toBe(403);
    const rest: Item[] = [];
    let cursor: string | null = first.body.next_cursor;
    while (cursor !== null) {
      const r = await list(`?dr=${leafA.hash}&limit=2&cursor=${cursor}`);
      rest.push(...r.body.invocations);
      cursor = r.body.next_cursor;
    }
    expect(ids([...first.body.invocations, ...rest])).toEqual(ids(before));
  });

  it("the subtree filter never shows another tenant's decisions, whichever tenant's DR it names", async () => {
    const mine = await allPages(`?dr=${leafA.hash}`, 200);
    expect(mine.length).toBeGreaterThan(0);
    const theirs = await allPages(`?dr=${otherLeaf.hash}`, 200, other.keys.audit);
    expect(theirs).toHaveLength(3);
    // Each tenant naming the other's DR (whose hash it may have learnt) gets an empty page, not the rows.
    expect(await allPages(`?dr=${otherLeaf.hash}`, 200)).toEqual([]);
    expect(await allPages(`?dr=${otherRoot.hash}&outcome=denied`, 200)).toEqual([]);
    expect(await allPages(`?dr=${leafA.hash}`, 200, other.keys.audit)).toEqual([]);
    expect(await allPages(`?dr=${root.hash}&tool=fetch`, 200, other.keys.audit)).toEqual([]);
    const mineIds = new Set(ids(mine));
    for (const i of theirs) expect(mineIds.has(idOf(i))).toBe(false);
    // A cursor taken from the other tenant's list walks only this tenant's rows.
    const page = await list(`?limit=1`, other.keys.audit);
    const followed = await list(`?cursor=${page.body.next_cursor}`);
    expect(followed.status).toBe(200);
    const everyId = new Set(ids(await allPages('', 200)));
    for (const i of followed.body.invocations as Item[]) expect(everyId.has(idOf(i))).toBe(true);
  });

  it('bad filter values are 400 INVALID_REQUEST naming the parameter, with nothing listed', async () => {
    const garbage = Buffer.from(JSON.stringify(['2026-02-30T00:00:00.000000Z', 'a', 'inv:x'])).toString('base64url');
    const oldStyle = Buffer.from(JSON.stringify(['2026-02-01T00:00:00.000000Z', 'inv:x'])).toString('base64url');
    const badDenialId = Buffer.from(JSON.stringify(['2026-02-01T00:00:00.000000Z', 'd', '12'])).toString('base64url');
    const cases: [string, string][] = [
      ['?dr=sha256:nothex', 'dr'],
      [`?dr=${leafA.hash.toUpperCase()}`, 'dr'],
      ['?outcome=maybe', 'outcome'],
      ['?code=NOT_A_CODE', 'code'],
      ['?code=allowed', 'code'],
      ['?since=2026-01-01', 'since'],
      ['?since=2026-01-01T00:00:00', 'since'],
      ['?until=yesterday', 'until'],
      // A bound that fails its own parse beside one that parses (or not): a 400 naming it, never a 500.
      ['?since=24h&until=2026-01-01T00:00:00Z', 'since'],
      ['?since=2026-01-01T00:00:00Z&until=1h', 'until'],
      ['?since=24h&until=1h', 'since'],
      ['?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z', 'until'],
      ['?since=2026-01-01T00:00:00Z&until=2026-01-01T00:00:00Z', 'until'],
      // Well-formed, but outside the years the database holds (year 0, or moved there by the offset).
      ['?since=0000-01-01T00:00:00Z', 'since'],
      [`?until=${encodeURIComponent('0001-01-01T00:30:00+01:00')}`, 'until'],
      ['?since=9999-12-31T23:59:59-23:59', 'since'],
      ['?code=REPLAY_DETECTED&outcome=allowed', 'code'],
      ['?tool=fetch&outcome=denied', 'tool'],
      ['?tool=fetch&code=REPLAY_DETECTED', 'tool'],
      ['?tool=', 'tool'],
      [`?tool=${encodeURIComponent('a\u0001b')}`, 'url'],
      [`?tool=${'x'.repeat(257)}`, 'tool'],
      ['?limit=0', 'limit'],
      ['?limit=201', 'limit'],
      ['?cursor=%%%', 'url'],
      [`?cursor=${garbage}`, 'cursor'],
      [`?cursor=${oldStyle}`, 'cursor'],
      [`?cursor=${badDenialId}`, 'cursor'],
      ['?outcome=allowed&outcome=denied', 'outcome'],
      ['?surprise=1', 'surprise'],
    ];
    for (const [query, parameter] of cases) {
      const r = await list(query);
      expect(r.status, query).toBe(400);
      expect(r.body.error.code, query).toBe('INVALID_REQUEST');
      expect(r.body.invocations, query).toBeUndefined();
      // A control character or a broken %-escape is refused for the whole URL before any parameter is read.
      if (parameter !== 'url') expect(JSON.stringify(r.body.error.details), query).toContain(parameter);
    }
  });

  it('needs an audit key: other scopes 403, no key 401', async () => {
    expect((await list('', tenant.keys.verify)).status).toBe(403);
    expect((await list('', tenant.keys.issue)).status).toBe(403);
    expect((await svc.call('GET', '/v1/invocations')).status).toBe(401);
  });
});
