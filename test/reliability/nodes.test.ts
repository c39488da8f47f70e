/**
 * Many nodes (issue 5): three real service processes on one PostgreSQL
 * database, verifies spread round-robin across them. Nothing that decides an
 * allow may live in one node's memory, so:
 * - shared ceilings hold exactly: `max_calls` = k allows exactly k, whichever
 *   node took which request, and the stored counters equal the stored
 *   invocations on every DR;
 * - the same invocation sent to every node at once is allowed exactly once;
 * - a revocation on node 1 denies on nodes 2 and 3 as soon as it returns,
 *   including under load: no allow is committed after the revocation;
 * - an API key revoked on node 1 is refused by nodes 2 and 3 at once, though
 *   they had it cached.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type FreshDatabase } from '../setup/db.js';
import {
  auditDatabase,
  checkClientView,
  codeOf,
  grantRoot,
  grantSub,
  killAll,
  nodeConfig,
  preSign,
  registerDelegations,
  report,
  request,
  runBounded,
  setupTenant,
  startNode,
  verify,
  withSql,
  type Reply,
  type ServiceNode,
  type Tenant,
} from './support.js';

let database: FreshDatabase | undefined;
let nodes: ServiceNode[] = [];
let tenant: Tenant;
let dbUrl: string;
let adminKey: string;

beforeAll(async () => {
  const started = performance.now();
  database = await createDatabase();
  dbUrl = database.url;
  const cfg = nodeConfig(dbUrl, { pool: 8 });
  // Started together: they migrate the same fresh database at the same time.
  const outcomes = await Promise.allSettled(['node1', 'node2', 'node3'].map((name) => startNode(name, cfg)));
  nodes = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : [])); // afterAll kills these
  const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
  if (failed) throw failed.reason;
  adminKey = cfg.adminKey;
  tenant = await setupTenant(nodes[0]!.url, cfg.adminKey, 'reliability-nodes');
  console.log(
    `[reliability] nodes: 3 service processes ready (ports ${nodes.map((n) => n.port).join(', ')}) in ${Math.round(performance.now() - started)} ms`,
  );
}, 60_000);

afterAll(async () => {
  await killAll(nodes);
  await database?.drop();
}, 30_000);

const nodeFor = (i: number) => nodes[i % nodes.length]!;

// No node may die along the way (none of these scenarios is a crash).
afterEach(() => {
  const dead = nodes.filter((n) => !n.alive());
  if (dead.length > 0) throw new Error(dead.map((n) => `${n.name} died (${JSON.stringify(n.exit())}):\n${n.output(12)}`).join('\n'));
});

describe('shared ceilings across three nodes', () => {
  // [N requests, k = max_calls on the root and on the middle DR, sibling leaves]
  for (const [n, k, leaves] of [
    [90, 17, 3],
    [120, 60, 6],
    [45, 1, 3],
    [36, 50, 4], // the ceiling is above demand: every request is allowed
  ] as const) {
    it(`N=${n} verifies round-robin over 3 nodes, root and middle max_calls=${k}, ${leaves} leaves: exactly ${Math.min(n, k)} allowed`, async () => {
      const root = grantRoot(tenant, { max_calls: k });
      const mid = grantSub(root, { max_calls: k });
      const leafs = Array.from({ length: leaves }, () => grantSub(mid, { max_calls: k }));
      await registerDelegations(nodes[0]!.url, tenant, [root.dr, mid.dr, ...leafs.map((l) => l.dr)]);
      const signed = preSign(leafs, n, `ceil${k}`);

      const t0 = performance.now();
      const replies = await Promise.all(signed.map((s, i) => verify(nodeFor(i).url, tenant, s.bundle)));
      const ms = performance.now() - t0;
      const perNode = nodes.map((_, j) => replies.filter((r, i) => i % nodes.length === j && r.status === 200).length);
      const t = report(`nodes N=${n} k=${k} leaves=${leaves}`, replies, ms, { allowed_per_node: perNode });

      expect(
        replies.filter((r) => r.status !== 200 && r.status !== 403).map((r) => `${r.status} ${r.error ?? JSON.stringify(r.body)}`),
      ).toEqual([]);
      expect(t.allowed).toBe(Math.min(n, k));
      expect(Object.keys(t.deniedBy).filter((c) => c !== 'CALLS_EXHAUSTED')).toEqual([]);

      const audit = await auditDatabase(dbUrl, tenant.id);
      const mine = new Set<string>([root.dr.hash, mid.dr.hash, ...leafs.map((l) => l.dr.hash)]);
      const rows = audit.counters.filter((c) => mine.has(c.hash));
      expect(rows).toHaveLength(2 + leaves);
      expect(rows.filter((r) => r.callsUsed !== r.stored)).toEqual([]);
      expect(rows.find((r) => r.hash === root.dr.hash)!.callsUsed).toBe(Math.min(n, k));
      expect(rows.find((r) => r.hash === mid.dr.hash)!.callsUsed).toBe(Math.min(n, k));
      const view = checkClientView(
        audit,
        signed.map((s, i) => ({ jti: s.jti, reply: replies[i]! })),
      );
      expect(view).toEqual({ allowedNotStored: [], allowedWithoutReceipt: [], deniedButStored: [] });
    }, 30_000);
  }

  it('leaf ceilings below a shared root ceiling: each leaf within its own, the root exactly full', async () => {
    // Root 12; leaf A at most 3, leaf B at most 4, leaf C unbounded below the root:
    // C alone has enough demand to fill the root, so exactly 12 are allowed.
    const root = grantRoot(tenant, { max_calls: 12 });
    const a = grantSub(root, { max_calls: 3 });
    const b = grantSub(root, { max_calls: 4 });
    const c = grantSub(root, { max_calls: 12 });
    await registerDelegations(nodes[1]!.url, tenant, [root.dr, a.dr, b.dr, c.dr]);
    const signed = preSign([a, b, c], 90, 'leafcap');
    const t0 = performance.now();
    const replies = await Promise.all(signed.map((s, i) => verify(nodeFor(i).url, tenant, s.bundle)));
    const allowedVia = [0, 1, 2].map((leaf) => replies.filter((r, i) => signed[i]!.leaf === leaf && r.status === 200).length);
    const t = report('nodes leaf caps 3/4/12 under root 12', replies, performance.now() - t0, { allowed_per_leaf: allowedVia });
    expect(t.allowed + t.denied).toBe(90);
    expect(t.allowed).toBe(12);
    expect(allowedVia[0]).toBeLessThanOrEqual(3);
    expect(allowedVia[1]).toBeLessThanOrEqual(4);
    const audit = await auditDatabase(dbUrl, tenant.id);
    const rows = audit.counters.filter((r) => [root, a, b, c].some((h) => h.dr.hash === r.hash));
    expect(rows.filter((r) => r.callsUsed !== r.stored)).toEqual([]);
    expect(rows.find((r) => r.hash === root.dr.hash)!.callsUsed).toBe(12);
  }, 30_000);
});

describe('replay across nodes', () => {
  it('the same invocation sent to every node at once is counted exactly once; the other copies are its retries (5 x 24)', async () => {
    const root = grantRoot(tenant, { max_calls: 1000 });
    const leaf = grantSub(root, { max_calls: 1000 });
    await registerDelegations(nodes[2]!.url, tenant, [root.dr, leaf.dr]);
    const signed = preSign([leaf], 5, 'replay');
    const copies = 24;
    const sends = signed.flatMap((s) => Array.from({ length: copies }, (_, c) => ({ s, node: nodeFor(c) })));
    const t0 = performance.now();
    const replies = await Promise.all(sends.map(({ s, node }) => verify(node.url, tenant, s.bundle)));
    const t = report('nodes replay 5x24 over 3 nodes', replies, performance.now() - t0);

    for (const s of signed) {
      const mine = replies.filter((_, i) => sends[i]!.s === s);
      // One key sends every copy: one fresh allow, and every other copy is answered as its retry.
      expect(mine.filter((r) => r.status === 200 && r.body.retry === false)).toHaveLength(1);
      expect(mine.filter((r) => r.status === 200 && r.body.retry === true)).toHaveLength(copies - 1);
      expect(new Set(mine.map((r) => r.body?.service_receipt?.id)).size).toBe(1);
    }
    expect(t.allowed).toBe(5 * copies);
    const audit = await auditDatabase(dbUrl, tenant.id);
    expect(audit.counters.find((r) => r.hash === root.dr.hash)).toMatchObject({ callsUsed: 5, stored: 5 });
    expect(audit.counters.find((r) => r.hash === leaf.dr.hash)).toMatchObject({ callsUsed: 5, stored: 5 });
    for (const s of signed) expect(audit.allowReceipts.get(s.jti)).toHaveLength(1);
  }, 30_000);
});

describe('revocation across nodes', () => {
  it('a revocation on node 1 is denied on nodes 2 and 3 immediately after it returns; the sibling subtree is not', async () => {
    // root -> mid1 -> {leafA, leafB}; root -> mid2 -> leafC
    const root = grantRoot(tenant, { max_calls: 1000 });
    const mid1 = grantSub(root, { max_calls: 1000 });
    const mid2 = grantSub(root, { max_calls: 1000 });
    const leafA = grantSub(mid1, { max_calls: 1000 });
    const leafB = grantSub(mid1, { max_calls: 1000 });
    const leafC = grantSub(mid2, { max_calls: 1000 });
    await registerDelegations(nodes[0]!.url, tenant, [root.dr, mid1.dr, mid2.dr, leafA.dr, leafB.dr, leafC.dr]);

    // Warm every node: each has verified (and cached the signatures of) every chain.
    const warm = preSign([leafA, leafB, leafC], 9, 'warm');
    const warmed = await Promise.all(warm.map((s, i) => verify(nodes[Math.floor(i / 3)]!.url, tenant, s.bundle)));
    expect(warmed.map((r) => (r.status === 200 ? 200 : `${r.status} ${r.error ?? JSON.stringify(r.body)}`))).toEqual(Array(9).fill(200));

    const after = preSign([leafA, leafB, leafC], 9, 'after');
    const rev = await request(nodes[0]!.url, 'POST', `/v1/delegations/${mid1.dr.hash}/revoke`, {
      key: tenant.keys.issue,
      json: { confirm: true, reason: 'reliability: cross-node revocation' },
    });
    expect(rev.status, JSON.stringify(rev.body)).toBe(200);
    // No pause: straight to the other nodes.
    const byNode = await Promise.all(
      [1, 2, 0].map((j) =>
        Promise.all(after.filter((_, i) => i % 3 === j).map((s) => verify(nodes[j]!.url, tenant, s.bundle).then((r) => ({ s, r })))),
      ),
    );
    const results = byNode.flat();
    const gapMs = Math.round(Math.min(...results.map(({ r }) => r.sentAt)) - rev.doneAt);
    report(
      'nodes revocation (mid1 revoked on node1, checked on nodes 2,3,1)',
      results.map((x) => x.r),
      Math.max(...results.map((x) => x.r.doneAt)) - rev.doneAt,
      {
        first_check_after_ms: gapMs,
      },
    );
    for (const { s, r } of results) {
      if (s.leaf === 2) expect(r.status, `sibling leafC ${JSON.stringify(r.body)}`).toBe(200);
      else {
        expect(r.status).toBe(403);
        expect(codeOf(r)).toBe('RECEIPT_REVOKED');
      }
    }
  }, 30_000);

  it('revoking under concurrent load on all nodes: every request sent after it returns is denied, and no allow commits after it', async () => {
    // A hot counted root: every call queues on its row lock.
    const root = grantRoot(tenant, { max_calls: 100_000 });
    const leaf = grantSub(root, { max_calls: 100_000 });
    await registerDelegations(nodes[0]!.url, tenant, [root.dr, leaf.dr]);
    const total = 600;
    const signed = preSign([leaf], total, 'revload');
    const replies = new Array<Reply>(total);
    let revokedAt = Number.POSITIVE_INFINITY; // performance.now() when the revoke response arrived
    let storedAtRevoke = -1;
    let revokeReply: Reply | undefined;

    const t0 = performance.now();
    let sent = 0;
    const load = runBounded(signed, 24, async (s, i) => {
      sent++;
      replies[i] = await verify(nodeFor(i).url, tenant, s.bundle);
      return replies[i]!;
    });
    const revoke = (async () => {
      // Revoke the root once the load is well under way.
      while (sent < total / 3) await new Promise((r) => setTimeout(r, 5));
      revokeReply = await request(nodes[0]!.url, 'POST', `/v1/delegations/${root.dr.hash}/revoke`, {
        key: tenant.keys.issue,
        json: { confirm: true, reason: 'reliability: revoke under load' },
      });
      revokedAt = revokeReply.doneAt;
      // What is committed now is everything the revocation may have let through.
      storedAtRevoke = await withSql(dbUrl, async (sql) => {
        const [row] = await sql<
          { n: number }[]
        >`select count(*)::int as n from invocations where tenant_id = ${tenant.id} and leaf_hash = ${leaf.dr.hash}`;
        return row!.n;
      });
    })();
    await Promise.all([load, revoke]);
    const ms = performance.now() - t0;
    expect(revokeReply?.status, JSON.stringify(revokeReply?.body)).toBe(200);

    const audit = await auditDatabase(dbUrl, tenant.id);
    const storedFinal = audit.counters.find((r) => r.hash === leaf.dr.hash)!.stored;
    const sentAfter = replies.filter((r) => r.sentAt >= revokedAt);
    const allowedAnsweredAfter = replies.filter((r) => r.status === 200 && r.doneAt > revokedAt);
    const t = report('nodes revoke under load (24 in flight over 3 nodes)', replies, ms, {
      stored_when_revoke_returned: storedAtRevoke,
      stored_final: storedFinal,
      committed_after_revoke: storedFinal - storedAtRevoke,
      sent_after_revoke: sentAfter.length,
      allowed_answered_after_revoke: allowedAnsweredAfter.length,
    });
    expect(
      replies
        .filter((r) => r.status !== 200 && r.status !== 403)
        .map((r) => `${r.status} ${r.error ?? JSON.stringify(r.body)}`)
        .slice(0, 5),
    ).toEqual([]);
    expect(nodes.filter((n) => !n.alive()).map((n) => `${n.name} died (${JSON.stringify(n.exit())}):\n${n.output(12)}`)).toEqual([]);
    // Every request sent after the revocation returned is denied, on every node.
    expect(sentAfter.length).toBeGreaterThan(0);
    expect(sentAfter.filter((r) => !(r.status === 403 && codeOf(r) === 'RECEIPT_REVOKED')).map((r) => `${r.status} ${codeOf(r)}`)).toEqual(
      [],
    );
    // Counting stays exact.
    expect(audit.counters.find((r) => r.hash === root.dr.hash)).toMatchObject({ callsUsed: storedFinal, stored: storedFinal });
    expect(t.allowed).toBe(storedFinal);
    // "Denied from that moment": nothing is allowed (committed) after the revocation committed and
    // returned. The count above ran after the revoke's commit, so any invocation it missed committed
    // later: a counting transaction that read the chain unrevoked before the revoke committed (a plain
    // read, no row lock) and committed after it, e.g. after queueing on the hot root's row lock.
    expect(storedFinal - storedAtRevoke, 'invocations committed after the revocation had committed and returned').toBe(0);
    // And the record says so: every call allowed through the root was created before its revoked_at,
    // both on the database's clock (a mark from a node's clock in whole seconds came up to a second early).
    const allowedAfterMark = await withSql(dbUrl, async (sql) => {
      // revoked_at as the API and the signed receipt show it, to the millisecond.
      const [row] = await sql<{ n: number; marked: boolean }[]>`
        select count(*) filter (where i.created_at >= date_trunc('milliseconds', d.revoked_at))::int as n,
               bool_and(d.revoked_at is not null) as marked
          from invocations i join delegations d on d.tenant_id = i.tenant_id and d.hash = ${root.dr.hash}
         where i.tenant_id = ${tenant.id} and i.leaf_hash = ${leaf.dr.hash}`;
      return row!;
    });
    expect(allowedAfterMark).toEqual({ n: 0, marked: true });
  }, 45_000);
});

describe('API key revocation across nodes', () => {
  it('a verify key revoked on node 1 is refused at once by nodes 2 and 3, which had it cached', async () => {
    const k = await request(nodes[0]!.url, 'POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
      key: adminKey,
      json: { scopes: ['verify'], name: 'revoked-across-nodes' },
    });
    expect(k.status).toBe(201);
    const keyed: Tenant = { ...tenant, keys: { ...tenant.keys, verify: k.body.key as string } };
    const root = grantRoot(tenant, { max_calls: 100 });
    await registerDelegations(nodes[0]!.url, tenant, [root.dr]);
    const [warm1, warm2, afterAllow, afterDeny] = [
      preSign([root], 1, 'kw1')[0]!,
      preSign([root], 1, 'kw2')[0]!,
      preSign([root], 1, 'ka')[0]!,
      preSign([root], 1, 'kd')[0]!,
    ];
    // Nodes 2 and 3 authenticate the key once, so it sits in their caches.
    expect((await verify(nodes[1]!.url, keyed, warm1.bundle)).status).toBe(200);
    expect((await verify(nodes[2]!.url, keyed, warm2.bundle)).status).toBe(200);

    const revoked = await request(nodes[0]!.url, 'DELETE', `/v1/admin/api-keys/${k.body.id}`, { key: adminKey });
    expect(revoked.status).toBe(204);

    // An allow path and a deny path (an invocation from a stranger's chain would be block A-F).
    const allowPath = await verify(nodes[1]!.url, keyed, afterAllow.bundle);
    expect(allowPath.status).toBe(401);
    const stale = { ...afterDeny.bundle, invocation: `${afterDeny.bundle.invocation.slice(0, -4)}AAAA` };
    const denyPath = await verify(nodes[2]!.url, keyed, stale);
    expect(denyPath.status).toBe(401);
    const audit = await auditDatabase(dbUrl, tenant.id);
    expect(audit.storedJtis.has(afterAllow.jti)).toBe(false);
    expect(audit.counters.find((c) => c.hash === root.dr.hash)).toMatchObject({ callsUsed: 2, stored: 2 });
    // The tenant's other key still works on the same nodes.
    expect((await verify(nodes[1]!.url, tenant, preSign([root], 1, 'ok')[0]!.bundle)).status).toBe(200);
  }, 30_000);
});
