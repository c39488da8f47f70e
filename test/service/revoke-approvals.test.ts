/**
 * A revocation and the approvals under its root, on real PostgreSQL: the revocation takes its
 * root's approvals lock before it locks the record (a verify through the record is not held up
 * while it queues), a revocation of a record already revoked takes that lock only when something
 * is left to end, the pass after the commit over approvals a verify held is bounded and never
 * fails the answer, and what it leaves is ended by the next ask that meets its root's cap.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq, sql } from 'drizzle-orm';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import type { ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { createLogger } from '../../src/service/log.js';
import { MAX_PENDING_APPROVALS_PER_ROOT } from '../../src/service/approvals.js';
import { askForApproval } from '../../src/service/tool-gate.js';
import { rows } from '../../src/store/rows.js';
import { approvals, delegations } from '../../src/store/schema/index.js';
import { T0 } from '../support/fixtures.js';
import { setupTenant, startTestService, verifyInvocation, type TestService, type TestTenant } from '../support/service.js';
import { tool } from '../support/tools.js';

const EXPORT = tool('crm_export', { type: 'write', blast_radius: 'organizational', action_type: 'crm:export' });
const ARGS = { tool: 'crm_export', estimated_cost_usd: 0.01, pii_access: false, write_access: true };
const POLICY: Policy = { allowed_tools: ['*'], max_cost_usd: 1, write_access: true };
const TOOL_SERVER = 'mcp://tools.example.com';

let svc: TestService;

beforeAll(async () => {
  svc = await startTestService({ pool: 10 });
});
afterAll(async () => svc?.close());

/** A tenant whose catalog sends crm_export to a human; without `catalog`, one with none (every call the policy allows runs). */
async function tenant(on: TestService, name: string, catalog = true): Promise<TestTenant> {
  const own = await setupTenant(on, name);
  if (catalog) {
    const published = await on.call('POST', `/v1/admin/tenants/${own.id}/tools`, {
      key: on.adminKey,
      json: { base_version: 0, strict: true, tools: [EXPORT] satisfies ToolDeclaration[] },
    });
    expect(published.status).toBe(201);
  }
  return own;
}

type Child = { holder: KeyPair; dr: SignedDelegation };

/** The root to A, and A to one child per exp: siblings under one root. */
function family(own: TestTenant, childExp: number[]): { root: SignedDelegation; children: Child[] } {
  const A = generateKeyPair();
  const window = { iat: T0, nbf: T0 - 100 };
  const root = createRootDelegation({ issuer: own.root, audience: A.did, policy: POLICY, ...window, exp: T0 + 3600 });
  const children = childExp.map((exp) => {
    const holder = generateKeyPair();
    return { holder, dr: createSubDelegation({ parent: root, issuer: A, audience: holder.did, policy: POLICY, ...window, exp }) };
  });
  return { root, children };
}

function ask(on: TestService, own: TestTenant, root: SignedDelegation, child: Child, note: string, path = '/v1/verify') {
  const chain = [root, child.dr];
  const invocation = createInvocation({
    chain,
    invoker: child.holder,
    args: { ...ARGS, note },
    toolServer: TOOL_SERVER,
    iat: on.clock.now,
  });
  return on.call('POST', path, { key: own.keys.verify, json: makeBundle(invocation, chain) });
}

/** A dry run of the same call: what the real one would answer, with nothing written. */
const dryRunAsk = (on: TestService, own: TestTenant, root: SignedDelegation, child: Child, note: string) =>
  ask(on, own, root, child, note, '/v1/verify/dry-run');

async function flood(on: TestService, own: TestTenant, root: SignedDelegation, child: Child): Promise<string[]> {
  // Ten at a time: asks under one root take its lock one after another, and fifty at once could
  // pass one verify's deadline on a busy machine.
  const asked: Awaited<ReturnType<typeof ask>>[] = [];
  for (let i = 0; i < MAX_PENDING_APPROVALS_PER_ROOT; i += 10) {
    asked.push(...(await Promise.all(Array.from({ length: 10 }, (_, j) => ask(on, own, root, child, `junk ${i + j}`)))));
  }
  const codes = asked.map((a) => a.body.error?.code as string);
  expect(
    codes.every((c) => c === 'APPROVAL_REQUIRED'),
    JSON.stringify(asked.find((a) => a.body.error?.code !== 'APPROVAL_REQUIRED')?.body),
  ).toBe(true);
  return asked.map((a) => a.body.approval.id as string);
}

const revoke = (on: TestService, own: TestTenant, hash: string) =>
  on.call('POST', `/v1/delegations/${encodeURIComponent(hash)}/revoke`, {
    key: own.keys.issue,
    json: { confirm: true, reason: 'runaway' },
  });

const statusesOf = async (on: TestService, ids: readonly string[]) =>
  (await on.store.db.select({ id: approvals.id, status: approvals.status }).from(approvals))
    .filter((r) => ids.includes(r.id))
    .map((r) => r.status);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Sessions of `on`'s database waiting for a lock of this kind (`advisory`: a root's approvals lock). */
async function waiting(on: TestService, event: string, queryLike = '%'): Promise<number[]> {
  const found = await rows<{ pid: number }>(
    on.store.db,
    sql`select pid from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and wait_event = ${event} and query like ${queryLike}`,
  );
  return found.map((r) => r.pid);
}
async function untilWaiting(on: TestService, event: string, queryLike = '%'): Promise<number[]> {
  for (let i = 0; i < 500; i++) {
    const pids = await waiting(on, event, queryLike);
    if (pids.length > 0) return pids;
    await sleep(10);
  }
  throw new Error(`no session came to wait for a ${event} lock`);
}

/**
 * A transaction of another connection holding what `take` locks until release(), or `fallbackMs`
 * at most (so a test whose subject waits for it still ends, and fails on `stillHeld`).
 */
function holding(
  on: TestService,
  take: (tx: Parameters<Parameters<TestService['store']['db']['transaction']>[0]>[0]) => Promise<unknown>,
  fallbackMs: number,
) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let ready!: () => void;
  const taken = new Promise<void>((resolve) => (ready = resolve));
  let stillHeld = true;
  const done = on.store.db.transaction(async (tx) => {
    await take(tx);
    ready();
    await Promise.race([released, sleep(fallbackMs)]);
    stillHeld = false;
  });
  return { taken, release, done, held: () => stillHeld };
}

const rootLock = (own: TestTenant, root: SignedDelegation) => (tx: { execute: TestService['store']['db']['execute'] }) =>
  tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`approvals under ${own.id} ${root.hash}`}, 0))`);

describe('a revocation queued for its root lock holds up no verify; a revocation of a revoked record takes no such lock', () => {
  it('a verify through a record being revoked, while the revocation waits for the root lock, is answered at once (the record is not locked yet)', async () => {
    const own = await tenant(svc, 'not-held-up', false);
    const { root, children } = family(own, [T0 + 3600]);
    const [B] = children as [Child];
    expect((await verifyInvocation(svc, own.keys.verify, [root, B.dr], B.holder)).res.status).toBe(200);
    // An ask under the root holding its approvals lock (as a slow one would).
    const ask = holding(svc, rootLock(own, root), 4000);
    await ask.taken;
    const revoking = revoke(svc, own, B.dr.hash);
    await untilWaiting(svc, 'advisory');
    const during = await verifyInvocation(svc, own.keys.verify, [root, B.dr], B.holder);
    expect(ask.held()).toBe(true); // answered while the revocation still waited
    expect(during.res.status, JSON.stringify(during.res.body)).toBe(200);
    ask.release();
    await ask.done;
    expect((await revoking).status).toBe(200);
    const after = await verifyInvocation(svc, own.keys.verify, [root, B.dr], B.holder);
    expect(after.res.body.error.code).toBe('RECEIPT_REVOKED');
  });

  it('revoking a revoked record again takes no root lock when nothing through it waits, and ends what a crash left when something does', async () => {
    const own = await tenant(svc, 're-revoke');
    const { root, children } = family(own, [T0 + 3600]);
    const [B] = children as [Child];
    const first = await ask(svc, own, root, B, 'first');
    expect(first.body.error.code).toBe('APPROVAL_REQUIRED');
    expect((await revoke(svc, own, B.dr.hash)).status).toBe(200);
    expect(await statusesOf(svc, [first.body.approval.id as string])).toEqual(['expired']);

    // A sibling's ask holds the root lock: the runaway's re-revocation does not queue behind it.
    const sibling = holding(svc, rootLock(own, root), 4000);
    await sibling.taken;
    const again = await revoke(svc, own, B.dr.hash);
    expect(sibling.held()).toBe(true);
    expect(again.status).toBe(200);
    expect(again.body.already_revoked).toBe(true);
    sibling.release();
    await sibling.done;

    // One left pending through it (a revocation whose node died before its pass after the commit):
    // a revocation again takes the lock and ends it.
    await svc.store.db
      .update(approvals)
      .set({ status: 'pending' })
      .where(eq(approvals.id, first.body.approval.id as string));
    expect((await revoke(svc, own, B.dr.hash)).body.already_revoked).toBe(true);
    expect(await statusesOf(svc, [first.body.approval.id as string])).toEqual(['expired']);
  });
});

describe('the pass after the commit over approvals a verify held', () => {
  it('fails without failing the answer: the revocation committed, the failure is logged', async () => {
    // A service of its own: the connection cut below makes the next requests of its pool refuse.
    const logged: Record<string, unknown>[] = [];
    const cut = await startTestService({
      pool: 5,
      log: createLogger('warn', (line) => logged.push(JSON.parse(line) as Record<string, unknown>)),
    });
    try {
      const own = await tenant(cut, 'pass-fails');
      const { root, children } = family(own, [T0 + 3600]);
      const [B] = children as [Child];
      const id = (await ask(cut, own, root, B, 'held')).body.approval.id as string;
      const verify = holding(cut, (tx) => tx.execute(sql`select 1 from approvals where id = ${id} for update`), 4000);
      await verify.taken;
      const revoking = revoke(cut, own, B.dr.hash);
      // The pass waits for the held row: its connection is cut (a failover, a restart of the database).
      const [pid] = await untilWaiting(cut, 'transactionid', '%update "approvals"%');
      await cut.store.db.execute(sql`select pg_terminate_backend(${pid!})`);
      const answered = await revoking;
      expect(verify.held()).toBe(true);
      expect(answered.status, JSON.stringify(answered.body)).toBe(200);
      expect(answered.body.already_revoked).toBe(false);
      verify.release();
      await verify.done;
      expect(await statusesOf(cut, [id])).toEqual(['pending']);
      expect(logged).toContainEqual(
        expect.objectContaining({ msg: 'approvals through a revoked delegation left pending', hash: B.dr.hash, approval_ids: [id] }),
      );
      const [row] = await cut.store.db
        .select({ revokedAt: delegations.revokedAt })
        .from(delegations)
        .where(eq(delegations.hash, B.dr.hash));
      expect(row!.revokedAt).not.toBeNull();
    } finally {
      await cut.close();
    }
  });

  it('waits for a held approval no longer than the verify deadline', async () => {
    const quick = await startTestService({ pool: 5, env: { BATON_VERIFY_DEADLINE_MS: '1000' } });
    try {
      const own = await tenant(quick, 'pass-bounded');
      const { root, children } = family(own, [T0 + 3600]);
      const [B] = children as [Child];
      const id = (await ask(quick, own, root, B, 'held')).body.approval.id as string;
      const verify = holding(quick, (tx) => tx.execute(sql`select 1 from approvals where id = ${id} for update`), 5000);
      await verify.taken;
      const started = Date.now();
      const answered = await revoke(quick, own, B.dr.hash);
      expect(verify.held()).toBe(true); // answered while the row was still held
      expect(Date.now() - started).toBeLessThan(3000);
      expect(answered.status).toBe(200);
      verify.release();
      await verify.done;
      expect(await statusesOf(quick, [id])).toEqual(['pending']);
    } finally {
      await quick.close();
    }
  });
});

describe('an ask that meets its root cap ends the approvals whose chain ended, and counts again', () => {
  it('through a record revoked by a revocation that left them pending', async () => {
    const own = await tenant(svc, 'heal-revoked');
    const { root, children } = family(own, [T0 + 3600, T0 + 3600]);
    const [B, C] = children as [Child, Child];
    const left = await flood(svc, own, root, B);
    expect((await ask(svc, own, root, C, 'before')).body.error.code).toBe('APPROVALS_PENDING_LIMIT');
    // The revocation committed; its node died before ending B's approvals.
    await svc.store.db
      .update(delegations)
      .set({ revokedAt: sql`now()` })
      .where(eq(delegations.hash, B.dr.hash));
    // A dry run answers as the ask will, and ends nothing.
    const dry = await dryRunAsk(svc, own, root, C, 'after');
    expect(dry.body.error.code, JSON.stringify(dry.body)).toBe('APPROVAL_REQUIRED');
    expect(new Set(await statusesOf(svc, left))).toEqual(new Set(['pending']));
    const sibling = await ask(svc, own, root, C, 'after');
    expect(sibling.body.error.code, JSON.stringify(sibling.body)).toBe('APPROVAL_REQUIRED');
    expect(new Set(await statusesOf(svc, left))).toEqual(new Set(['expired']));
  });

  it('through a record past its exp (approvals asked before their deadline was bounded by the chain)', async () => {
    const own = await tenant(svc, 'heal-expired');
    const soon = svc.clock.now + 60;
    const { root, children } = family(own, [soon, T0 + 3600]);
    const [B, C] = children as [Child, Child];
    const left = await flood(svc, own, root, B);
    await svc.store.db
      .update(approvals)
      .set({ expiresAt: sql`${approvals.createdAt} + 900` })
      .where(eq(approvals.tenantId, own.id));
    const at = svc.clock.now;
    try {
      svc.clock.now = soon + 1;
      const dry = await dryRunAsk(svc, own, root, C, 'after');
      expect(dry.body.error.code, JSON.stringify(dry.body)).toBe('APPROVAL_REQUIRED');
      expect(new Set(await statusesOf(svc, left))).toEqual(new Set(['pending']));
      const sibling = await ask(svc, own, root, C, 'after');
      expect(sibling.body.error.code, JSON.stringify(sibling.body)).toBe('APPROVAL_REQUIRED');
      expect(new Set(await statusesOf(svc, left))).toEqual(new Set(['expired']));
    } finally {
      svc.clock.now = at;
    }
  });
});

it('an ask refused because its chain expired meanwhile names the delegation as verify does (block E: required, actual)', async () => {
  const own = await tenant(svc, 'ended-shape');
  const exp = svc.clock.now + 60;
  const { root, children } = family(own, [exp]);
  const [B] = children as [Child];
  const first = await ask(svc, own, root, B, 'stored');
  expect(first.body.error.code).toBe('APPROVAL_REQUIRED');
  const request = {
    tenantId: own.id,
    requestedBy: B.holder.did,
    drChain: [root.hash, B.dr.hash],
    tool: 'crm_export',
    toolServer: TOOL_SERVER,
    cmd: '/mcp/tools/call',
    args: ARGS,
    catalogVersion: first.body.approval.catalog_version as number,
    rule: 'r',
    explanation: 'x',
    binding: 'sha256:ended',
    invocationJti: 'ended',
  };
  const at = svc.clock.now;
  try {
    svc.clock.now = exp + 5;
    // The verify checked the chain before its exp; its ask comes after it.
    const refused = await askForApproval(
      svc.deps,
      {
        kind: 'ask',
        catalogVersion: request.catalogVersion,
        estimatedMicros: undefined,
        request,
        required: { code: 'APPROVAL_REQUIRED', field: 'approval_id', message: 'A human decides.' },
        goWith: () => {
          throw new Error('nothing is approved here');
        },
      },
      'key_ended',
    );
    const verified = await ask(svc, own, root, B, 'late');
    const byVerify = (verified.body.violations as { code: string }[]).find((v) => v.code === 'RECEIPT_EXPIRED');
    expect(byVerify).toEqual({
      code: 'RECEIPT_EXPIRED',
      dr_index: 1,
      dr_hash: B.dr.hash,
      field: 'exp',
      required: `>= ${exp + 5}`,
      actual: exp,
    });
    expect(refused).toMatchObject({ kind: 'refuse', violations: [byVerify] });
  } finally {
    svc.clock.now = at;
  }
});
