/**
 * Group commit of /v1/verify: verifies arriving together are decided in one
 * transaction (src/store/verify-batch.ts, baton_verify_batch). Over real
 * sockets on a real PostgreSQL pool, allows, ceiling refusals, policy
 * denials and replays are sent at once so they share batches; every outcome
 * must be what one-at-a-time evaluation allows, and what is stored must
 * match the answers exactly. Then, on both drivers, the batcher itself: an
 * item that fails never fails the items batched with it, and an item whose
 * deadline passed while queued is never sent.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, count, eq, inArray, sql } from 'drizzle-orm';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import { delegations, denials, invocations, serviceReceipts } from '../../src/store/schema/index.js';
import {
  observeVerifyBatches,
  VerifyBatcher,
  verifyBatcherOf,
  type BatchItem,
  type BatchObservation,
  VERIFY_STATEMENTS_IN_FLIGHT,
} from '../../src/store/verify-batch.js';
import { rows } from '../../src/store/rows.js';
import { listenOnSocket, setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { T0, ARGS } from '../support/fixtures.js';

const POLICY = { allowed_tools: ['web_search'], max_calls: 1000 };

describe('group commit over real sockets (PostgreSQL)', () => {
  let svc: TestService;
  let tenant: TestTenant;
  let server: Awaited<ReturnType<typeof listenOnSocket>> | undefined;
  let baseUrl: string;
  let otherVerifyKey: string;

  beforeAll(async () => {
    svc = await startTestService({ pool: 12 });
    tenant = await setupTenant(svc);
    const k = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
      key: svc.adminKey,
      json: { scopes: ['verify'], name: 'second verifier' },
    });
    expect(k.status).toBe(201);
    otherVerifyKey = k.body.key as string;
    server = await listenOnSocket(svc);
    baseUrl = server.url;
  });
  afterAll(async () => {
    await server?.close();
    await svc?.close();
  });

  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests inspect arbitrary JSON
  async function verify(body: unknown, key = tenant.keys.verify): Promise<{ status: number; body: any }> {
    const res = await fetch(`${baseUrl}/v1/verify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: await res.json() };
  }

  async function register(drs: readonly SignedDelegation[]): Promise<void> {
    for (const dr of drs) {
      const r = await fetch(`${baseUrl}/v1/delegations`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ receipt: dr.jws }),
      });
      expect(r.status).toBe(201);
    }
  }

  /** A counted root with `leaves` sibling leaves, each allowing far more than the root. */
  async function rootWithLeaves(maxCalls: number, leaves: number) {
    const agent = generateKeyPair();
    const root = createRootDelegation({
      issuer: tenant.root,
      audience: agent.did,
      policy: { ...POLICY, max_calls: maxCalls },
      iat: T0,
      nbf: T0 - 10,
    });
    const siblings = Array.from({ length: leaves }, () => {
      const holder = generateKeyPair();
      // Each leaf alone may use the whole ceiling: only the shared root stops them jointly.
      const policy = { ...POLICY, max_calls: maxCalls };
      return { holder, dr: createSubDelegation({ parent: root, issuer: agent, audience: holder.did, policy, iat: T0 }) };
    });
    await register([root, ...siblings.map((s) => s.dr)]);
    return { root, siblings };
  }

  for (const [rounds, k] of [
    [1, 5],
    [3, 12],
  ] as const) {
    it(`${rounds} x (N=48 mixed verifies, root max_calls=${k}): outcomes exact, every allow stored with its service receipt, no denial consumed anything`, async () => {
      const counted = await rootWithLeaves(k, 4);
      const open = await rootWithLeaves(1_000_000, 2);
      const before = verifyBatcherOf(svc.store.query).stats();
      const sent: { jti: string; kind: 'counted' | 'policy' | 'replayed'; key: string; status: number; body: any }[] = []; // eslint-disable-line @typescript-eslint/no-explicit-any
      for (let round = 0; round < rounds; round++) {
        const jobs: { jti: string; kind: 'counted' | 'policy' | 'replayed'; key: string; bundle: unknown }[] = [];
        for (let i = 0; i < 24; i++) {
          const s = counted.siblings[i % counted.siblings.length]!;
          const inv = createInvocation({ chain: [counted.root, s.dr], invoker: s.holder, args: ARGS, toolServer: 'mcp://t', iat: T0 });
          jobs.push({
            jti: inv.payload.jti,
            kind: 'counted',
            key: tenant.keys.verify,
            bundle: makeBundle(inv, [counted.root, s.dr], 'reference'),
          });
        }
        for (let i = 0; i < 12; i++) {
          // Refused by policy (block D) under the same counted root: must not consume a call.
          const s = counted.siblings[i % counted.siblings.length]!;
          const args = { ...ARGS, tool: 'delete_db' };
          const inv = createInvocation({ chain: [counted.root, s.dr], invoker: s.holder, args, toolServer: 'mcp://t', iat: T0 });
          jobs.push({
            jti: inv.payload.jti,
            kind: 'policy',
            key: tenant.keys.verify,
            bundle: makeBundle(inv, [counted.root, s.dr], 'reference'),
          });
        }
        for (let i = 0; i < 4; i++) {
          // One invocation sent twice by one key and once by another, all at once.
          const s = open.siblings[i % open.siblings.length]!;
          const inv = createInvocation({ chain: [open.root, s.dr], invoker: s.holder, args: ARGS, toolServer: 'mcp://t', iat: T0 });
          const bundle = makeBundle(inv, [open.root, s.dr], 'reference');
          const jti = inv.payload.jti;
          jobs.push({ jti, kind: 'replayed', key: tenant.keys.verify, bundle }, { jti, kind: 'replayed', key: tenant.keys.verify, bundle });
          jobs.push({ jti, kind: 'replayed', key: otherVerifyKey, bundle });
        }
        const answers = await Promise.all(jobs.map((j) => verify(j.bundle, j.key)));
        jobs.forEach((j, i) => sent.push({ jti: j.jti, kind: j.kind, key: j.key, ...answers[i]! }));
      }
      const after = verifyBatcherOf(svc.store.query).stats();
      // Batches formed: fewer statements than items.
      expect(after.items - before.items).toBeGreaterThan(after.batches - before.batches);

      const ofKind = (kind: string) => sent.filter((s) => s.kind === kind);
      expect(sent.every((s) => s.status === 200 || s.status === 403)).toBe(true);
      const countedAllowed = ofKind('counted').filter((s) => s.status === 200);
      expect(countedAllowed).toHaveLength(k);
      expect(countedAllowed.every((s) => s.body.retry === false)).toBe(true);
      expect(
        new Set(
          ofKind('counted')
            .filter((s) => s.status === 403)
            .map((s) => s.body.error.code),
        ),
      ).toEqual(new Set(['CALLS_EXHAUSTED']));
      expect(ofKind('policy').every((s) => s.status === 403 && s.body.error.code !== 'CALLS_EXHAUSTED')).toBe(true);

      // Replays: exactly one fresh allow per invocation; the same key's copy is its retry, the other key's is a replay.
      const byJti = new Map<string, typeof sent>();
      for (const s of ofKind('replayed')) byJti.set(s.jti, [...(byJti.get(s.jti) ?? []), s]);
      for (const copies of byJti.values()) {
        const fresh = copies.filter((c) => c.status === 200 && c.body.retry === false);
        expect(fresh).toHaveLength(1);
        for (const c of copies) {
          if (c.key === fresh[0]!.key)
            expect(c.status === 200 && c.body.service_receipt.id === fresh[0]!.body.service_receipt.id).toBe(true);
          else expect([c.status, c.body.error?.code]).toEqual([403, 'REPLAY_DETECTED']);
        }
      }

      const db = svc.store.db;
      const counterOf = async (hash: string) =>
        (
          await db
            .select()
            .from(delegations)
            .where(and(eq(delegations.tenantId, tenant.id), eq(delegations.hash, hash)))
        )[0]!.callsUsed;
      const storedThrough = async (hash: string) =>
        (
          await db
            .select({ n: count() })
            .from(invocations)
            .where(and(eq(invocations.tenantId, tenant.id), sql`${invocations.drChain} @> array[${hash}]::text[]`))
        )[0]!.n;
      expect(await counterOf(counted.root.hash)).toBe(k);
      expect(await storedThrough(counted.root.hash)).toBe(k);
      for (const s of counted.siblings) expect(await counterOf(s.dr.hash)).toBe(await storedThrough(s.dr.hash));
      for (const s of open.siblings) expect(await counterOf(s.dr.hash)).toBe(await storedThrough(s.dr.hash));

      // Every fresh allow is stored with its receipt; no refused invocation was stored (a replayed jti is stored once, by its allow).
      const fresh = sent.filter((s) => s.status === 200 && s.body.retry === false);
      const jtis = [...new Set(sent.map((s) => s.jti))];
      const stored = await db
        .select({ jti: invocations.jti })
        .from(invocations)
        .where(and(eq(invocations.tenantId, tenant.id), inArray(invocations.jti, jtis)));
      expect(new Set(stored.map((r) => r.jti))).toEqual(new Set(fresh.map((s) => s.jti)));
      expect(stored).toHaveLength(fresh.length);
      const allowReceipts = await db
        .select({ id: serviceReceipts.id, subject: serviceReceipts.subject })
        .from(serviceReceipts)
        .where(
          and(
            eq(serviceReceipts.tenantId, tenant.id),
            eq(serviceReceipts.kind, 'invocation.allowed'),
            inArray(serviceReceipts.subject, jtis),
          ),
        );
      expect(new Map(allowReceipts.map((r) => [r.subject, Number(r.id)]))).toEqual(
        new Map(fresh.map((s) => [s.jti, Number(s.body.service_receipt.id)])),
      );

      // Every refusal is recorded once, with its receipt.
      const refused = sent.filter((s) => s.status === 403);
      const [recorded] = await db
        .select({ n: count() })
        .from(denials)
        .where(and(eq(denials.tenantId, tenant.id), inArray(denials.jti, jtis)));
      expect(recorded!.n).toBe(refused.length);
      const [deniedReceipts] = await db
        .select({ n: count() })
        .from(serviceReceipts)
        .where(
          and(
            eq(serviceReceipts.tenantId, tenant.id),
            eq(serviceReceipts.kind, 'invocation.denied'),
            inArray(serviceReceipts.subject, jtis),
          ),
        );
      expect(deniedReceipts!.n).toBe(refused.length);
    }, 60_000);
  }

  it('verify statements run on connections of their own, never on more backends than the batcher runs statements at once', async () => {
    const { root, siblings } = await rootWithLeaves(1_000_000, 4);
    const bundles = Array.from({ length: 48 }, (_, i) => {
      const s = siblings[i % siblings.length]!;
      const inv = createInvocation({ chain: [root, s.dr], invoker: s.holder, args: ARGS, toolServer: 'mcp://t', iat: T0 });
      return makeBundle(inv, [root, s.dr], 'reference');
    });
    // Verifies and other reads at once, in rounds: the pool opens several connections for the
    // reads, and a pool that also carried the verify statements would hand them out in turn.
    for (let round = 0; round < 4; round++) {
      const reads = Array.from({ length: 8 }, () =>
        fetch(`${baseUrl}/v1/delegations/${root.hash}`, { headers: { authorization: `Bearer ${tenant.keys.audit}` } }).then(
          (r) => r.status,
        ),
      );
      const answers = await Promise.all(bundles.slice(round * 12, round * 12 + 12).map((b) => verify(b)));
      expect(answers.map((a) => a.status)).toEqual(Array(12).fill(200));
      expect(await Promise.all(reads)).toEqual(Array(8).fill(200));
    }
    const backends = (
      await rows<{ verifying: boolean }>(
        svc.store.db,
        sql`select query like 'select baton_verify_batch(%' as verifying from pg_stat_activity where datname = current_database() and backend_type = 'client backend' and pid <> pg_backend_pid()`,
      )
    ).map((r) => r.verifying);
    expect(backends.length).toBeGreaterThan(VERIFY_STATEMENTS_IN_FLIGHT); // the pool did open more
    const verifying = backends.filter(Boolean).length;
    expect(verifying).toBeGreaterThan(0);
    expect(verifying).toBeLessThanOrEqual(VERIFY_STATEMENTS_IN_FLIGHT);
  }, 60_000);
});

describe.each(['postgres', 'pglite'] as const)('the batcher (%s)', (driver) => {
  let svc: TestService;
  let tenant: TestTenant;
  let keyId: string;
  let kid: string;

  beforeAll(async () => {
    svc = await startTestService({ driver });
    tenant = await setupTenant(svc);
    const keys = await svc.call('GET', `/v1/admin/tenants/${tenant.id}/api-keys`, { key: svc.adminKey });
    const [serviceKey] = await svc.store.query('select kid from service_keys limit 1', []);
    kid = serviceKey!['kid'] as string;
    keyId = (keys.body.api_keys ?? keys.body.keys ?? keys.body).find((k: { scopes: string[] }) => k.scopes.includes('verify')).id;
  });
  afterAll(async () => {
    await svc?.close();
  });

  const denial = (subject: string, code: string | null): BatchItem => ({
    k: 'd',
    t: tenant.id,
    key: keyId,
    jti: subject,
    ih: null,
    code: code as string,
    block: 'D',
    chain: [],
    v: [],
    subj: subject,
    rjws: `jws-of-${subject}`,
    rkid: kid,
  });
  const later = () => new Date(Date.now() + 5_000);
  const recordedSubjects = async (subjects: string[]) =>
    (
      await svc.store.db
        .select({ subject: serviceReceipts.subject })
        .from(serviceReceipts)
        .where(and(eq(serviceReceipts.tenantId, tenant.id), inArray(serviceReceipts.subject, subjects)))
    ).map((r) => r.subject);

  it('an item that fails does not fail the items batched with it; it alone is refused', async () => {
    // Queued in one turn of the event loop, the four leave as one batch, which fails; each then runs alone.
    const batcher = new VerifyBatcher(svc.store.query, { maxInFlight: 1 });
    const subjects = ['gc-first', 'gc-good-1', 'gc-bad', 'gc-good-2'];
    const seen: BatchObservation[] = [];
    const stopObserving = observeVerifyBatches((b) => seen.push(b));
    const settled = await Promise.allSettled([
      batcher.run(denial('gc-first', 'POLICY_VIOLATION'), later()),
      batcher.run(denial('gc-good-1', 'POLICY_VIOLATION'), later()),
      batcher.run(denial('gc-bad', null), later()), // denials.code is NOT NULL
      batcher.run(denial('gc-good-2', 'POLICY_VIOLATION'), later()),
    ]);
    stopObserving();
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
    expect(batcher.stats()).toMatchObject({ batches: 5, items: 8, alone: 4 });
    // What the metrics see: the failed statement of four, then each item's own statement (one fails again).
    expect(seen[0]).toMatchObject({ items: 4, failed: true });
    expect(
      seen
        .slice(1)
        .map((b) => [b.items, b.failed])
        .sort(),
    ).toEqual([
      [1, false],
      [1, false],
      [1, false],
      [1, true],
    ]);
    for (const b of seen) expect(b.seconds).toBeGreaterThan(0);
    expect((await recordedSubjects(subjects)).sort()).toEqual(['gc-first', 'gc-good-1', 'gc-good-2']);
  });

  it('an observer that throws changes no outcome: the committed batch is not re-run', async () => {
    const batcher = new VerifyBatcher(svc.store.query, { maxInFlight: 1 });
    const stopObserving = observeVerifyBatches(() => {
      throw new Error('observer bug');
    });
    const warned = new Promise<string>((resolve) => process.once('warning', (w) => resolve(w.message)));
    try {
      const answers = await Promise.all(['gc-obs-1', 'gc-obs-2'].map((s) => batcher.run(denial(s, 'POLICY_VIOLATION'), later())));
      expect(answers.map((a) => a.o)).toEqual(['DENIED', 'DENIED']);
    } finally {
      stopObserving();
    }
    expect(batcher.stats()).toMatchObject({ batches: 1, items: 2, alone: 0 });
    expect(await warned).toContain('observer bug');
    expect((await recordedSubjects(['gc-obs-1', 'gc-obs-2'])).sort()).toEqual(['gc-obs-1', 'gc-obs-2']);
  });

  it('items queued in one turn of the event loop leave as one batch, though a second batch could run', async () => {
    const batcher = new VerifyBatcher(svc.store.query, { maxInFlight: 2 });
    const subjects = ['gc-turn-1', 'gc-turn-2', 'gc-turn-3'];
    const answers = await Promise.all(subjects.map((s) => batcher.run(denial(s, 'POLICY_VIOLATION'), later())));
    expect(answers.map((a) => a.o)).toEqual(['DENIED', 'DENIED', 'DENIED']);
    expect(batcher.stats()).toMatchObject({ batches: 1, items: 3, alone: 0 });
    // The next turn's item is a batch of its own: nothing waits for a timer or for company.
    await expect(batcher.run(denial('gc-turn-4', 'POLICY_VIOLATION'), later())).resolves.toMatchObject({ o: 'DENIED' });
    expect(batcher.stats()).toMatchObject({ batches: 2, items: 4 });
    expect((await recordedSubjects([...subjects, 'gc-turn-4'])).sort()).toEqual([...subjects, 'gc-turn-4']);
  });

  it('an item whose deadline passed while it queued is refused and never sent', async () => {
    const batcher = new VerifyBatcher(svc.store.query, { maxInFlight: 1 });
    const first = batcher.run(denial('gc-dl-first', 'POLICY_VIOLATION'), later());
    const late = batcher.run(denial('gc-dl-late', 'POLICY_VIOLATION'), new Date(Date.now() - 1)).then(
      () => 'committed',
      (e: unknown) => e,
    );
    await expect(first).resolves.toMatchObject({ o: 'DENIED' });
    expect(await late).toMatchObject({ code: '57014' });
    expect(batcher.stats()).toMatchObject({ batches: 1, items: 1 });
    expect(await recordedSubjects(['gc-dl-first', 'gc-dl-late'])).toEqual(['gc-dl-first']);
  });
});
