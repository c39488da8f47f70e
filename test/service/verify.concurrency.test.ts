/**
 * Counting under real concurrency: N verifies of distinct invocations, sent
 * at once over real HTTP sockets to a real server on a real PostgreSQL pool,
 * through sibling leaves of one root with max_calls = k. Exactly k may be
 * allowed, and the stored counters must equal the stored invocations.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, count, eq, sql } from 'drizzle-orm';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle } from '../../src/sdk/records.js';
import { delegations, invocations } from '../../src/store/schema/index.js';
import { listenOnSocket, setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { T0, ARGS } from '../support/fixtures.js';

let svc: TestService;
let tenant: TestTenant;
let server: Awaited<ReturnType<typeof listenOnSocket>> | undefined;
let baseUrl: string;

beforeAll(async () => {
  svc = await startTestService({ pool: 12 });
  tenant = await setupTenant(svc);
  server = await listenOnSocket(svc);
  baseUrl = server.url;
});
afterAll(async () => {
  await server?.close();
  await svc?.close();
});

async function post(body: unknown): Promise<number> {
  return (await postForAnswer(body)).status;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests inspect arbitrary JSON
async function postForAnswer(body: unknown, key = tenant.keys.verify, query = ''): Promise<{ status: number; body: any }> {
  const res = await fetch(`${baseUrl}/v1/verify${query}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

describe('concurrent verifies against a shared root ceiling', () => {
  for (const [n, k, leaves] of [
    [40, 7, 4],
    [60, 25, 6],
    [30, 1, 3],
    [24, 30, 3], // ceiling above demand: everything is allowed
  ] as const) {
    it(`N=${n} concurrent verifies, root max_calls=${k}, ${leaves} sibling leaves: exactly min(N,k) allowed`, async () => {
      const operator = tenant.root;
      const agent = generateKeyPair();
      const root = createRootDelegation({ issuer: operator, audience: agent.did, policy: { max_calls: k }, iat: T0, nbf: T0 - 10 });
      const siblings = Array.from({ length: leaves }, () => {
        const holder = generateKeyPair();
        // Each sibling alone may use up to k: only the shared root can stop them jointly.
        const dr = createSubDelegation({ parent: root, issuer: agent, audience: holder.did, policy: { max_calls: k }, iat: T0 });
        return { holder, dr };
      });
      const stored = await fetch(`${baseUrl}/v1/delegations`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ receipts: [root.jws] }),
      });
      expect(stored.status).toBe(201);
      for (const s of siblings) {
        const r = await fetch(`${baseUrl}/v1/delegations`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ receipt: s.dr.jws }),
        });
        expect(r.status).toBe(201);
      }
      // Pre-sign everything so the client is not the bottleneck.
      const bundles = Array.from({ length: n }, (_, i) => {
        const s = siblings[i % leaves]!;
        const inv = createInvocation({ chain: [root, s.dr], invoker: s.holder, args: ARGS, toolServer: 'mcp://t', iat: T0 });
        return makeBundle(inv, [root, s.dr], 'reference');
      });
      const statuses = await Promise.all(bundles.map(post));
      const allowed = statuses.filter((s) => s === 200).length;
      expect(statuses.every((s) => s === 200 || s === 403)).toBe(true);
      expect(allowed).toBe(Math.min(n, k));

      const db = svc.store.db;
      const [rootRow] = await db
        .select()
        .from(delegations)
        .where(and(eq(delegations.tenantId, tenant.id), eq(delegations.hash, root.hash)));
      const [stored_] = await db
        .select({ n: count() })
        .from(invocations)
        .where(and(eq(invocations.tenantId, tenant.id), sql`${invocations.drChain} @> array[${root.hash}]::text[]`));
      expect(rootRow!.callsUsed).toBe(allowed);
      expect(stored_!.n).toBe(allowed);
      for (const s of siblings) {
        const [leafRow] = await db
          .select()
          .from(delegations)
          .where(and(eq(delegations.tenantId, tenant.id), eq(delegations.hash, s.dr.hash)));
        const [perLeaf] = await db
          .select({ n: count() })
          .from(invocations)
          .where(and(eq(invocations.tenantId, tenant.id), eq(invocations.leafHash, s.dr.hash)));
        expect(leafRow!.callsUsed).toBe(perLeaf!.n);
      }
    });
  }

  it('the same invocation sent concurrently is counted exactly once; the other copies are retries of that allow', async () => {
    const agent = generateKeyPair();
    const root = createRootDelegation({ issuer: tenant.root, audience: agent.did, policy: { max_calls: 100 }, iat: T0, nbf: T0 - 10 });
    const inv = createInvocation({ chain: [root], invoker: agent, args: ARGS, toolServer: 'mcp://t', iat: T0 });
    const bundle = makeBundle(inv, [root]);
    expect((await postForAnswer(bundle, tenant.keys.verify, '/dry-run')).status).toBe(200); // not stored by a dry run
    const first = await fetch(`${baseUrl}/v1/delegations`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ receipt: root.jws }),
    });
    expect(first.status).toBe(201);
    const answers = await Promise.all(Array.from({ length: 20 }, () => postForAnswer(bundle)));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    const fresh = answers.filter((a) => a.body.retry === false);
    expect(fresh).toHaveLength(1);
    // Every copy carries the one receipt of the one allow.
    expect(new Set(answers.map((a) => a.body.service_receipt.id))).toEqual(new Set([fresh[0]!.body.service_receipt.id]));
    const [row] = await svc.store.db.select().from(delegations).where(eq(delegations.hash, root.hash));
    expect(row!.callsUsed).toBe(1);
  });
});
