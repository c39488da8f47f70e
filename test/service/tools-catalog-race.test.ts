/**
 * A catalog publish racing a delegation being stored, made deterministic with table and row locks held
 * from another connection: the record is judged under the version current when it commits, whichever
 * of the two reaches the database first; and a submission waiting on a row lock stops neither a publish
 * nor the tenant's other submissions. On real PostgreSQL.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { generateKeyPair } from '../../src/sdk/keys.js';
import type { ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { buildChain } from '../support/fixtures.js';
import { setupTenant, startTestService, type CallResult, type TestService, type TestTenant } from '../support/service.js';
import { tool } from '../support/tools.js';

let svc: TestService;

beforeAll(async () => {
  svc = await startTestService({ pool: 10 });
});
afterAll(async () => svc?.close());

const DECLARED = { estimated_cost_usd: 0.01, pii_access: false, write_access: false };
const harmless = tool('u', { action_type: 'web:fetch' });
const untrusted = tool('u', { untrusted_content: true, action_type: 'web:fetch' });
const privateData = tool('p', { private_data_access: true, action_type: 'crm:read' });
const external = tool('e', { type: 'external', action_type: 'net:send' });

function publish(t: TestTenant, base: number, tools: ToolDeclaration[]): Promise<CallResult> {
  return svc.call('POST', `/v1/admin/tenants/${t.id}/tools`, {
    key: svc.adminKey,
    json: { base_version: base, strict: true, tools, rules: [] },
  });
}

/**
 * Holds `LOCK TABLE <table>` on a connection of its own until `release()`: whoever writes the table
 * waits there, inside its transaction, holding whatever it took before.
 */
async function holdTableLock(table: 'delegations' | 'tool_catalogs' | 'receipts') {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let locked!: () => void;
  const taken = new Promise<void>((resolve) => (locked = resolve));
  const done = svc.store.db.transaction(async (tx) => {
    await tx.execute(sql.raw(`LOCK TABLE ${table} IN SHARE ROW EXCLUSIVE MODE`));
    locked();
    await released;
  });
  await taken;
  return {
    release: async () => {
      release();
      await done;
    },
  };
}

/** Waits (at most `ms`) until `query` counts at least `n` rows; false when it never does. */
async function until(query: ReturnType<typeof sql>, n: number, ms = 5_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const rows = (await svc.store.db.execute(query)) as unknown as { n: number | string }[];
    if (Number(rows[0]!.n) >= n) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return false;
}

const waitingOn = (table: string) => sql`select count(*) as n from pg_locks where not granted and relation = ${table}::regclass`;
const waitingOnAdvisory = sql`select count(*) as n from pg_locks where not granted and locktype = 'advisory'`;

/** `p`'s value when it settles within `ms`, else undefined (it goes on). */
async function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  return Promise.race([p, new Promise<undefined>((r) => setTimeout(() => r(undefined), ms))]);
}

function settled<T>(p: Promise<T>): () => boolean {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  return () => done;
}

async function verify(t: TestTenant, c: ReturnType<typeof buildChain>, args: Record<string, unknown>) {
  return svc.call('POST', '/v1/verify', { key: t.keys.verify, json: c.invoke({ ...DECLARED, ...args }, { iat: svc.clock.now }).bundle });
}

describe('a catalog publish racing a delegation being stored', () => {
  it('a submission storing when a publish commits first is judged under the new version, and held', async () => {
    const t = await setupTenant(svc, 'race-publish-first');
    expect((await publish(t, 0, [harmless, privateData, external])).status).toBe(201);
    const c = buildChain([{ allowed_tools: ['u', 'p', 'e'], pii_access: true, max_cost_usd: 1 }], { keys: [t.root, generateKeyPair()] });
    // The publish of version 2 stops inside its transaction, at its insert, uncommitted (reads go on).
    const catalogs = await holdTableLock('tool_catalogs');
    let submitted: Promise<CallResult> | undefined;
    let published: Promise<CallResult> | undefined;
    try {
      published = publish(t, 1, [untrusted, privateData, external]);
      expect(await until(waitingOn('tool_catalogs'), 1)).toBe(true);
      // The submission reads version 1 (2 is not committed), then must wait for the publish to commit
      // (fixed); unfixed, it commits meanwhile, judged under version 1.
      submitted = svc.call('POST', '/v1/delegations', { key: t.keys.issue, json: { receipts: c.drs.map((d) => d.jws) } });
      await until(waitingOnAdvisory, 1, 2_000);
    } finally {
      await catalogs.release();
    }
    expect((await published).status).toBe(201);
    const stored = await submitted;
    expect(stored.status, JSON.stringify(stored.body)).toBe(201);
    expect(stored.body.delegations[0].status).toBe('held');
    const grants = await svc.call('GET', '/v1/grants', { key: t.keys.audit });
    expect(grants.body.grants).toMatchObject([{ dr_hash: c.drs[0]!.hash, status: 'pending', catalog_version: 2 }]);
    expect((await verify(t, c, { tool: 'p', pii_access: true })).body.error?.code).toBe('GRANT_PENDING_APPROVAL');
  });

  it('a publish waits for a submission already judging, which is judged under the version current when it commits', async () => {
    const t = await setupTenant(svc, 'race-submission-first');
    expect((await publish(t, 0, [harmless, privateData, external])).status).toBe(201);
    const c = buildChain([{ allowed_tools: ['u', 'p', 'e'], pii_access: true, max_cost_usd: 1 }], { keys: [t.root, generateKeyPair()] });
    // The submission stops inside its transaction, at its first service receipt: its record inserted,
    // the catalog lock taken, uncommitted.
    const table = await holdTableLock('receipts');
    let submitted: Promise<CallResult> | undefined;
    let published: Promise<CallResult> | undefined;
    let publishedWhileStoring = true;
    try {
      submitted = svc.call('POST', '/v1/delegations', { key: t.keys.issue, json: { receipts: c.drs.map((d) => d.jws) } });
      expect(await until(waitingOn('receipts'), 1)).toBe(true);
      published = publish(t, 1, [untrusted, privateData, external]);
      const isPublished = settled(published);
      // The publish waits for the submission (fixed); unfixed, it commits version 2 meanwhile.
      expect(await until(waitingOnAdvisory, 1, 2_000)).toBe(true);
      await new Promise((r) => setTimeout(r, 100));
      publishedWhileStoring = isPublished();
    } finally {
      await table.release();
    }
    const stored = await submitted;
    expect((await published).status).toBe(201);
    expect(publishedWhileStoring).toBe(false);
    // Stored while version 1, under which its reach is no trifecta, was current: not held, as verify agrees.
    expect(stored.status, JSON.stringify(stored.body)).toBe(201);
    expect(stored.body.delegations[0].status).toBe('active');
    expect((await svc.call('GET', '/v1/grants', { key: t.keys.audit })).body.grants).toEqual([]);
  });

  it("a submission waiting on a row lock holds no catalog lock: a publish and the tenant's other submissions commit meanwhile", async () => {
    const t = await setupTenant(svc, 'race-row-lock');
    expect((await publish(t, 0, [harmless, privateData, external])).status).toBe(201);
    const c = buildChain(
      [
        { allowed_tools: ['u', 'p', 'e'], pii_access: true, max_cost_usd: 1 },
        { allowed_tools: ['u', 'p', 'e'], pii_access: true, max_cost_usd: 1 },
      ],
      { keys: [t.root, generateKeyPair(), generateKeyPair()] },
    );
    expect((await svc.call('POST', '/v1/delegations', { key: t.keys.issue, json: { receipts: [c.drs[0]!.jws] } })).status).toBe(201);
    // A revocation of the stored root in progress, as another connection: its row lock, held.
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const taken = new Promise<void>((resolve) => (locked = resolve));
    const rowLock = svc.store.db.transaction(async (tx) => {
      await tx.execute(sql`select 1 from delegations where hash = ${c.drs[0]!.hash} for update`);
      locked();
      await released;
    });
    await taken;
    let child: Promise<CallResult> | undefined;
    let published: Promise<CallResult> | undefined;
    let otherSubmitted: Promise<CallResult> | undefined;
    let publishedWhileWaiting: CallResult | undefined;
    let otherWhileWaiting: CallResult | undefined;
    try {
      // The child locks its stored parent (FOR KEY SHARE) and waits on the revocation's lock.
      child = svc.call('POST', '/v1/delegations', { key: t.keys.issue, json: { receipts: [c.drs[1]!.jws] } });
      const waitingOnRow = sql`select count(*) as n from pg_locks where not granted and locktype in ('tuple', 'transactionid')`;
      expect(await until(waitingOnRow, 1)).toBe(true);
      // Fixed, the publish commits at once; unfixed, it waits for the child's catalog lock (and
      // everything below queues behind it) until the row lock is released.
      published = publish(t, 1, [untrusted, privateData, external]);
      publishedWhileWaiting = await within(published, 5_000);
      // Another submission of the tenant, unrelated to the waiting one, commits meanwhile.
      const other = buildChain([{ allowed_tools: ['u'], max_cost_usd: 1 }], { keys: [t.root, generateKeyPair()] });
      otherSubmitted = svc.call('POST', '/v1/delegations', { key: t.keys.issue, json: { receipts: [other.drs[0]!.jws] } });
      otherWhileWaiting = await within(otherSubmitted, 5_000);
    } finally {
      release();
      await rowLock;
    }
    // Both answered while the row lock was still held (unfixed, only after its release).
    expect(publishedWhileWaiting?.status).toBe(201);
    expect(otherWhileWaiting?.status).toBe(201);
    expect((await published)?.status).toBe(201);
    expect((await otherSubmitted)?.status).toBe(201);
    // The child commits after the publish: judged under version 2, under which its reach is a trifecta.
    const stored = await child!;
    expect(stored.status, JSON.stringify(stored.body)).toBe(201);
    expect(stored.body.delegations[0].status).toBe('held');
    const grants = await svc.call('GET', '/v1/grants', { key: t.keys.audit });
    expect(grants.body.grants).toMatchObject([{ dr_hash: c.drs[1]!.hash, status: 'pending', catalog_version: 2 }]);
  });
});
