/**
 * Audit reads on real PostgreSQL: GET /v1/invocations/{jti} (allowed,
 * denied only, replayed), tenant isolation, and the keyset-paged
 * GET /v1/delegations/{hash}/invocations over a DR's subtree.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq, inArray } from 'drizzle-orm';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import { invocations } from '../../src/store/schema/index.js';
import { verifyServiceReceipt } from '../../src/service/signer.js';
import { setupTenant, startTestService, storeTwoLeaves, verifyInvocation, type TestService, type TestTenant } from '../support/service.js';

let svc: TestService;
let tenant: TestTenant;
let other: TestTenant;

const policy = { allowed_tools: ['web_search'], max_cost_usd: 10 };

// R -> A (root); A -> B (leafA); A -> C (leafB)
const A = generateKeyPair(),
  B = generateKeyPair(),
  C = generateKeyPair();
let root: SignedDelegation, leafA: SignedDelegation, leafB: SignedDelegation;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  other = await setupTenant(svc, 'other');
  ({ root, leafA, leafB } = await storeTwoLeaves(svc, tenant, policy, A, B, C));
});
afterAll(async () => svc?.close());

const verify = (chain: SignedDelegation[], invoker: KeyPair, args: Record<string, unknown> = {}, jti?: string) =>
  verifyInvocation(svc, tenant.keys.verify, chain, invoker, args, jti);

async function serviceKeys() {
  return (await svc.call('GET', '/v1/keys')).body.keys.map((k: { kid: string; public_key: string }) => ({
    kid: k.kid,
    publicKey: Uint8Array.from(Buffer.from(k.public_key, 'base64url')),
  }));
}

describe('GET /v1/invocations/{jti}', () => {
  it('an allowed invocation: record, JWS, chain, declared estimate and its invocation.allowed service receipt; then its actual', async () => {
    const { jti, invocation, res } = await verify([root, leafA], B);
    expect(res.status).toBe(200);
    const r = await svc.call('GET', `/v1/invocations/${jti}`, { key: tenant.keys.audit });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      jti,
      decision: 'allowed',
      hash: invocation.hash,
      jws: invocation.jws,
      dr_chain: [root.hash, leafA.hash],
      leaf: leafA.hash,
      tool: 'web_search',
      declared_usd: 0.25,
      actual: null,
      denials: [],
    });
    expect(new Date(r.body.created_at).toString()).not.toBe('Invalid Date');
    expect(r.body.service_receipt.id).toBe(res.body.service_receipt.id);
    const check = verifyServiceReceipt(r.body.service_receipt.jws, await serviceKeys());
    expect(check.valid).toBe(true);
    expect(check.payload).toMatchObject({ baton_receipt: 'invocation.allowed', subject: jti });

    const a = await svc.call('POST', `/v1/invocations/${jti}/actuals`, {
      key: tenant.keys.report,
      json: { source: 'api-usage', cost_usd: 0.3, tokens_out: 12 },
    });
    expect(a.status).toBe(201);
    const after = await svc.call('GET', `/v1/invocations/${jti}`, { key: tenant.keys.audit });
    expect(after.body.actual).toMatchObject({
      cost_usd: 0.3,
      tokens_in: null,
      tokens_out: 12,
      source: 'api-usage',
      unavailable_reason: null,
    });
    expect(after.body.actual.service_receipt.id).toBe(a.body.service_receipt.id);
  });

  it('a jti that was only denied: decision denied, with every recorded denial', async () => {
    const first = await verify([root, leafA], B, { tool: 'delete_db' });
    expect(first.res.status).toBe(403);
    const second = await verify([root, leafA], B, { tool: 'delete_db', estimated_cost_usd: 50 }, first.jti);
    expect(second.res.status).toBe(403);
    const r = await svc.call('GET', `/v1/invocations/${first.jti}`, { key: tenant.keys.audit });
    expect(r.status).toBe(200);
    expect(r.body.decision).toBe('denied');
    expect(r.body.jws).toBeUndefined();
    expect(r.body.denials).toHaveLength(2);
    expect(r.body.denials[0]).toMatchObject({ code: 'POLICY_VIOLATION', block: 'D', dr_chain: [root.hash, leafA.hash] });
    expect(r.body.denials[0].violations.some((v: { field: string }) => v.field === 'args.tool')).toBe(true);
    expect(r.body.denials[1].violations.some((v: { field: string }) => v.field === 'args.estimated_cost_usd')).toBe(true);
  });

  it('a replayed jti stays allowed and lists the replay denial', async () => {
    const { jti, invocation } = await verify([root, leafA], B);
    // The same key re-sending gets its original decision back (a retry); another caller is a replay.
    const other = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
      key: svc.adminKey,
      json: { scopes: ['verify'], name: 'second tool server' },
    });
    expect(other.status).toBe(201);
    const replay = await svc.call('POST', '/v1/verify', { key: other.body.key, json: makeBundle(invocation, [root, leafA]) });
    expect(replay.body.error.code).toBe('REPLAY_DETECTED');
    const r = await svc.call('GET', `/v1/invocations/${jti}`, { key: tenant.keys.audit });
    expect(r.body.decision).toBe('allowed');
    expect(r.body.denials.map((d: { code: string }) => d.code)).toEqual(['REPLAY_DETECTED']);
  });

  it('is readable with audit, report, verify and issue keys; not admin (403) or without a key (401)', async () => {
    const { jti } = await verify([root, leafB], C);
    for (const key of Object.values(tenant.keys)) expect((await svc.call('GET', `/v1/invocations/${jti}`, { key })).status).toBe(200);
    expect((await svc.call('GET', `/v1/invocations/${jti}`, { key: svc.adminKey })).status).toBe(403);
    expect((await svc.call('GET', `/v1/invocations/${jti}`)).status).toBe(401);
  });

  it('404 for an unknown jti, and for another tenant (allowed or denied), without leaking anything', async () => {
    expect((await svc.call('GET', '/v1/invocations/inv:nothing-here', { key: tenant.keys.audit })).status).toBe(404);
    const allowed = await verify([root, leafA], B);
    const denied = await verify([root, leafA], B, { tool: 'delete_db' });
    for (const jti of [allowed.jti, denied.jti]) {
      const r = await svc.call('GET', `/v1/invocations/${jti}`, { key: other.keys.audit });
      expect(r.status).toBe(404);
      expect(r.body.error.code).toBe('NOT_FOUND');
      expect(JSON.stringify(r.body)).not.toContain(root.hash);
    }
    expect((await svc.call('GET', `/v1/invocations/${'x'.repeat(161)}`, { key: tenant.keys.audit })).status).toBe(400);
  });
});

describe('GET /v1/delegations/{hash}/invocations', () => {
  const made: { jti: string; leaf: string }[] = [];
  let fresh: { root: SignedDelegation; leafA: SignedDelegation; leafB: SignedDelegation; A: KeyPair; B: KeyPair; C: KeyPair };

  beforeAll(async () => {
    // A tree of its own, so earlier tests' invocations do not count.
    const [a, b, c] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
    const { root: r0, leafA: la, leafB: lb } = await storeTwoLeaves(svc, tenant, policy, a, b, c);
    fresh = { root: r0, leafA: la, leafB: lb, A: a, B: b, C: c };
    const paths: [SignedDelegation[], KeyPair][] = [
      ...Array.from({ length: 7 }, (): [SignedDelegation[], KeyPair] => [[r0, la], b]),
      ...Array.from({ length: 3 }, (): [SignedDelegation[], KeyPair] => [[r0, lb], c]),
      ...Array.from({ length: 2 }, (): [SignedDelegation[], KeyPair] => [[r0], a]),
    ];
    // Visit the 12 paths in an interleaved order (5 is coprime with 12), so pages mix leaves.
    for (let i = 0; i < paths.length; i++) {
      const [chain, invoker] = paths[(i * 5) % paths.length]!;
      const { jti, res } = await verify(chain, invoker);
      expect(res.status).toBe(200);
      made.push({ jti, leaf: chain[chain.length - 1]!.hash });
    }
    // A denial is not an invocation.
    expect((await verify([r0, la], b, { tool: 'delete_db' })).res.status).toBe(403);
  });

  interface InvocationItem {
    jti: string;
    created_at: string;
    jws?: string;
    service_receipt: { jws: string };
    [k: string]: unknown;
  }

  async function pageAll(
    hash: string,
    limit: number,
    key = tenant.keys.audit,
  ): Promise<{ jtis: string[]; pages: number; items: InvocationItem[] }> {
    const jtis: string[] = [];
    const items: InvocationItem[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const q: string = `?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const r = await svc.call('GET', `/v1/delegations/${hash}/invocations${q}`, { key });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.invocations.length).toBeLessThanOrEqual(limit);
      jtis.push(...r.body.invocations.map((i: { jti: string }) => i.jti));
      items.push(...r.body.invocations);
      cursor = r.body.next_cursor;
      pages++;
      if (pages > 100) throw new Error('paging does not end');
    } while (cursor);
    return { jtis, pages, items };
  }

  it('lists the whole subtree newest first, in pages that neither skip nor repeat', async () => {
    const all = await pageAll(fresh.root.hash, 5);
    expect(all.pages).toBe(3);
    expect(all.jtis).toEqual(made.map((m) => m.jti).reverse());
    expect(all.items[0]).toMatchObject({ decision: 'allowed', declared_usd: 0.25, actual: null });
    expect(all.items[0]?.jws).toBeUndefined();
    expect(all.items[0]?.service_receipt.jws).toBeTruthy();
    const times = all.items.map((i) => Date.parse(i.created_at));
    expect([...times].sort((x, y) => y - x)).toEqual(times);

    const underA = await pageAll(fresh.leafA.hash, 50);
    expect(underA.pages).toBe(1);
    expect(underA.jtis).toEqual(
      made
        .filter((m) => m.leaf === fresh.leafA.hash)
        .map((m) => m.jti)
        .reverse(),
    );
    expect(underA.jtis).toHaveLength(7);
    expect((await pageAll(fresh.leafB.hash, 1)).jtis).toHaveLength(3);
  });

  it('the default page is 50 and next_cursor is null on the last page', async () => {
    const r = await svc.call('GET', `/v1/delegations/${fresh.root.hash}/invocations`, { key: tenant.keys.report });
    expect(r.status).toBe(200);
    expect(r.body.invocations).toHaveLength(12);
    expect(r.body.next_cursor).toBeNull();
  });

  it('breaks created_at ties by jti, so equal timestamps still page exactly once', async () => {
    const jtis = made.filter((m) => m.leaf === fresh.leafA.hash).map((m) => m.jti);
    await svc.store.db
      .update(invocations)
      .set({ createdAt: new Date('2030-01-01T00:00:00.123Z') })
      .where(and(eq(invocations.tenantId, tenant.id), inArray(invocations.jti, jtis)));
    const page = await pageAll(fresh.leafA.hash, 2);
    expect(page.pages).toBe(4);
    expect(page.jtis).toEqual([...jtis].sort().reverse());
  });

  it('shows actuals on listed invocations', async () => {
    const jti = made.find((m) => m.leaf === fresh.leafB.hash)!.jti;
    expect(
      (
        await svc.call('POST', `/v1/invocations/${jti}/actuals`, {
          key: tenant.keys.report,
          json: { source: 'manual-meter', cost_usd: 1.5 },
        })
      ).status,
    ).toBe(201);
    const list = await pageAll(fresh.leafB.hash, 10);
    expect(list.items.find((i) => i.jti === jti)?.actual).toMatchObject({ cost_usd: 1.5, source: 'manual-meter' });
  });

  it('refuses bad queries with 400; unknown or foreign hashes are 404', async () => {
    const path = `/v1/delegations/${fresh.root.hash}/invocations`;
    for (const q of [
      '?limit=0',
      '?limit=201',
      '?limit=abc',
      '?limit=-1',
      '?limit=1.5',
      '?cursor=!!!',
      '?cursor=bm9wZQ',
      '?cursor=WyJ4IiwieSJd',
      '?limit=5&limit=6',
      '?page=2',
    ]) {
      const r = await svc.call('GET', `${path}${q}`, { key: tenant.keys.audit });
      expect(r.status, q).toBe(400);
      expect(r.body.error.code).toBe('INVALID_REQUEST');
    }
    expect((await svc.call('GET', `${path}?limit=200`, { key: tenant.keys.audit })).status).toBe(200);
    expect((await svc.call('GET', `/v1/delegations/sha256:${'9'.repeat(64)}/invocations`, { key: tenant.keys.audit })).status).toBe(404);
    expect((await svc.call('GET', '/v1/delegations/sha256:zz/invocations', { key: tenant.keys.audit })).status).toBe(400);
    const foreign = await svc.call('GET', path, { key: other.keys.audit });
    expect(foreign.status).toBe(404);
    expect(JSON.stringify(foreign.body)).not.toContain('inv:');
    expect((await svc.call('GET', path)).status).toBe(401);
  });
});

describe('read scopes', () => {
  it('every read route names the same required scopes, in the same order', async () => {
    const hash = `sha256:${'0'.repeat(64)}`;
    const answers = await Promise.all(
      [`/v1/delegations/${hash}`, `/v1/delegations/${hash}/invocations`, '/v1/invocations/inv:none'].map((path) =>
        svc.call('GET', path, { key: svc.adminKey }),
      ),
    );
    for (const res of answers) expect(res.status).toBe(403);
    const lists = answers.map((res) => res.body.error.details.required_scopes);
    expect(lists[0]).toEqual(['issue', 'verify', 'report', 'audit']);
    expect(lists[1]).toEqual(lists[0]);
    expect(lists[2]).toEqual(lists[0]);
  });
});
