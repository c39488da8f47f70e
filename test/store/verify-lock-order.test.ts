/**
 * Two verify statements never deadlock (migration 0036): besides the chains' DRs, every row an item
 * may wait on (its jti, a named approval, a rate-limited tool's window) is keyed and locked in one
 * order before any row. Each case runs two batches at once that name the same two of those in
 * opposite orders, with padding between so each holds the first while it reaches the second: under
 * item order they deadlocked in most rounds (40P01, after deadlock_timeout). Real PostgreSQL, one
 * connection per batch.
 */
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decideApprovalRow, expireApprovals, listApprovals } from '../../src/store/approvals.js';
import type { Store } from '../../src/store/db.js';
import type { BatchItem } from '../../src/store/verify-batch.js';
import { freshDatabase } from '../setup/db.js';
import { seedDelegation } from '../support/fixtures.js';
import { allowItem, decideBatch, seedVerifyCaller, type AllowItem, type VerifyCaller } from '../support/verify-statement.js';

const ROUNDS = 4;
const PADDING = 25;

let db: Awaited<ReturnType<typeof freshDatabase>>;
let store: Store;
let caller: VerifyCaller;

beforeAll(async () => {
  db = await freshDatabase({ max: 4 });
  store = db.store;
  caller = await seedVerifyCaller(store, 'lock-order', 'did:key:zLockOrder');
  // A catalog at version 1, which the gates below name.
  await store.query(`insert into tool_catalogs (tenant_id, version, document, hash, created_by) values ($1, 1, '{}', 'h', 'test')`, [
    caller.tenantId,
  ]);
});
afterAll(async () => db?.drop());

/** An unmetered root of the caller's: its chain is locked FOR SHARE only, so nothing else orders the batches. */
async function unmeteredRoot(): Promise<string> {
  return (await seedDelegation(store.db, caller.tenantId, undefined, { iss: caller.rootDid })).hash;
}

/**
 * A gate for `tool` (catalog v1): rate-limited far above what the test sends, or naming `approval`
 * (and then not rate-limited, so the tool's window orders nothing).
 */
function gated(item: AllowItem, tool: string, approval?: string): AllowItem {
  const limit = approval === undefined ? { rl: 1_000_000 } : {};
  return {
    ...item,
    tool,
    gate: { v: 1, n: Math.floor(Date.now() / 1000), t: tool, ...limit, a: approval ?? null, b: `binding-of-${item.jti}`, cc: null },
  } as AllowItem;
}

/** A pending approval of the caller's through `root`, expiring `ttl` seconds from now (in the past when negative). */
async function approval(root: string, ttl = 600): Promise<string> {
  const id = `apr_${randomBytes(16).toString('hex')}`;
  const now = Math.floor(Date.now() / 1000);
  await store.query(
    `insert into approvals (tenant_id, id, binding, status, requested_by, invocation_jti, dr_chain, tool_server, catalog_version, rule, explanation, created_at, expires_at)
     values ($1, $2, $3, 'pending', 'did:key:zAgent', $4, $5, 'mcp://t', 1, 'test', 'test', $6, $7)`,
    [caller.tenantId, id, `binding-${id}`, `inv-${id}`, [root], now - 1_000, now + ttl],
  );
  return id;
}

/** A session of its own that holds what `lock` locks until `release` is called. */
async function holding(lock: (tx: postgres.TransactionSql) => Promise<unknown>): Promise<{ release(): Promise<void> }> {
  const sql = postgres(db.url, { max: 1, onnotice: () => {} });
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let locked!: () => void;
  const isLocked = new Promise<void>((resolve) => (locked = resolve));
  const done = sql.begin(async (tx) => {
    await lock(tx);
    locked();
    await released;
  });
  await isLocked;
  return {
    release: async () => {
      release();
      await done;
      await sql.end({ timeout: 1 });
    },
  };
}

/**
 * Decides `item` alone with a deadline 1 s away while `first` holds one lock until 800 ms and
 * `second` another for longer: the statement must be refused at its deadline (55P03 or 57014), its
 * second wait bounded by what the first left, so well before a second whole deadline (1.8 s).
 */
async function expectRefusedAtItsDeadline(
  item: BatchItem,
  first: { release(): Promise<void> },
  second: { release(): Promise<void> },
): Promise<void> {
  const started = Date.now();
  const deadline = new Date(started + 1_000).toISOString();
  const deciding = store.query('select baton_verify_batch($1, $2::text::jsonb) as r', [deadline, JSON.stringify([item])]).then(
    () => 'decided',
    (e: { code?: string }) => e.code,
  );
  setTimeout(() => void first.release(), 800);
  try {
    expect(['55P03', '57014']).toContain(await deciding);
    expect(Date.now() - started).toBeLessThan(1_500);
  } finally {
    await second.release();
  }
}

/** Runs two batches at once, ROUNDS times; any error (a deadlock is 40P01) fails the test. */
async function neverDeadlock(pair: () => Promise<[BatchItem[], BatchItem[]]>): Promise<void> {
  for (let round = 0; round < ROUNDS; round++) {
    const [a, b] = await pair();
    const settled = await Promise.allSettled([decideBatch(store, a), decideBatch(store, b)]);
    const errors = settled.flatMap((s) =>
      s.status === 'rejected' ? [`${(s.reason as { code?: string }).code}: ${String(s.reason)}`] : [],
    );
    expect(errors, `round ${round}`).toEqual([]);
  }
}

describe('verify statements never deadlock', () => {
  it('on the same two jtis in opposite orders (a tenant sending one set of invocations to two nodes)', async () => {
    const root = await unmeteredRoot();
    await neverDeadlock(async () => {
      const x = allowItem(caller, [root], { mt: 'none' });
      const y = allowItem(caller, [root], { mt: 'none' });
      const pad = () => Array.from({ length: PADDING }, () => allowItem(caller, [root], { mt: 'none' }));
      return [
        [x, ...pad(), y],
        [y, ...pad(), x],
      ];
    });
    // Each jti stored once: the second of each pair saw the first committed.
    const [row] = await store.query(`select count(*)::int as n, count(distinct jti)::int as d from invocations where tenant_id = $1`, [
      caller.tenantId,
    ]);
    expect(row!['n']).toBe(row!['d']);
  });

  it('on two rate-limited tools in opposite orders (honest traffic on two such tools)', async () => {
    const [r1, r2] = [await unmeteredRoot(), await unmeteredRoot()];
    await neverDeadlock(async () => {
      const item = (root: string, tool: string) => gated(allowItem(caller, [root], { mt: 'none' }), tool);
      const pad = (root: string) => Array.from({ length: PADDING }, () => item(root, 'pad'));
      return [
        [item(r1, 'search'), ...pad(r1), item(r1, 'fetch')],
        [item(r2, 'fetch'), ...pad(r2), item(r2, 'search')],
      ];
    });
    const [row] = await store.query(
      `select coalesce(sum(calls), 0)::int as calls from tool_rate_windows where tenant_id = $1 and tool <> 'pad'`,
      [caller.tenantId],
    );
    expect(row!['calls']).toBe(ROUNDS * 4);
  });

  it('on two named approvals in opposite orders (any call may name any approval id)', async () => {
    const root = await unmeteredRoot();
    await neverDeadlock(async () => {
      const [p1, p2] = [await approval(root), await approval(root)];
      const item = (tool: string, named: string) => gated(allowItem(caller, [root], { mt: 'none' }), tool, named);
      const pad = () => Array.from({ length: PADDING }, () => allowItem(caller, [root], { mt: 'none' }));
      return [
        [item('search', p1), ...pad(), item('search', p2)],
        [item('search', p2), ...pad(), item('search', p1)],
      ];
    });
  });

  it("with the tenant's approval expiry sweep: the sweep skips an approval a verify holds (it locked its rows in index order)", async () => {
    const root = await unmeteredRoot();
    const [held, free] = [await approval(root, -60), await approval(root, -60)];
    // A verify statement holding `held`, as a batch spending or refusing it does until its commit.
    const verify = await holding((tx) => tx`select 1 from approvals where tenant_id = ${caller.tenantId} and id = ${held} for update`);
    try {
      const swept = await Promise.race([
        expireApprovals(store.db, caller.tenantId, Math.floor(Date.now() / 1000)),
        new Promise<'waited'>((resolve) => setTimeout(() => resolve('waited'), 3_000)),
      ]);
      expect(swept, 'the sweep waited on the held approval').not.toBe('waited');
      expect((swept as { id: string }[]).map((r) => r.id)).toContain(free);
      expect((swept as { id: string }[]).map((r) => r.id)).not.toContain(held);
      // Still pending in the table while the verify holds it, it is listed as expired all the same.
      const now = Math.floor(Date.now() / 1000);
      const ids = async (status: 'pending' | 'expired') =>
        ((await listApprovals(store.db, caller.tenantId, status, undefined, 1_000, now)) ?? []).map((r) => r.id);
      expect(await ids('pending')).not.toContain(held);
      expect(await ids('expired')).toEqual(expect.arrayContaining([held, free]));
    } finally {
      await verify.release();
    }
  });

  it('each lock wait is bounded by what is left of the deadline, not by the whole of it again', async () => {
    const root = await seedDelegation(store.db, caller.tenantId, undefined, { iss: caller.rootDid, maxCalls: 100 });
    const item = allowItem(caller, [root.hash], { mt: 'all' });
    // Another statement holds the item's jti key until 800 ms, and its DR for longer.
    const key = await holding(
      (tx) => tx`select pg_advisory_xact_lock(hashtextextended(${`baton:verify:jti:${caller.tenantId}:${item.jti}`}, 0))`,
    );
    const dr = await holding((tx) => tx`select 1 from delegations where tenant_id = ${caller.tenantId} and hash = ${root.hash} for update`);
    // Refused at its deadline, 1 s (55P03 or 57014), not after a second full wait on the DR (about 1.8 s).
    await expectRefusedAtItsDeadline(item, key, dr);
  });

  it('a lone item naming an approval: its wait on the approval is bounded by what its chain left (0038)', async () => {
    const root = await seedDelegation(store.db, caller.tenantId, undefined, { iss: caller.rootDid, maxCalls: 100 });
    const named = await approval(root.hash);
    const item = gated(allowItem(caller, [root.hash], { mt: 'all' }), 'search', named);
    // An actuals report holds the item's DR until 800 ms; a decision holds the approval for longer.
    const dr = await holding((tx) => tx`select 1 from delegations where tenant_id = ${caller.tenantId} and hash = ${root.hash} for update`);
    const decision = await holding((tx) => tx`select 1 from approvals where tenant_id = ${caller.tenantId} and id = ${named} for update`);
    // Refused at its deadline, not after a second wait of a whole deadline on the approval (about 1.8 s).
    await expectRefusedAtItsDeadline(item, dr, decision);
  });
});

describe("an approval's deadline is judged after the waits, which are counted", () => {
  /** An approval of the caller's through `root`, `status` as given, whose deadline is `deadline` (node seconds). */
  async function expiringAt(root: string, status: 'pending' | 'approved', deadline: number): Promise<{ id: string; binding: string }> {
    const id = `apr_${randomBytes(16).toString('hex')}`;
    const binding = `binding-${id}`;
    const decided = status === 'approved' ? ['key_other', 'alice', 'ok', deadline - 50] : [null, null, null, null];
    await store.query(
      `insert into approvals (tenant_id, id, binding, status, requested_by, invocation_jti, dr_chain, tool_server, catalog_version, rule, explanation, created_at, expires_at, decided_by, actor, reason, decided_at)
       values ($1, $2, $3, $4, 'did:key:zAgent', $5, $6, 'mcp://t', 1, 'test', 'test', $7, $8, $9, $10, $11, $12)`,
      [caller.tenantId, id, binding, status, `inv-${id}`, [root], deadline - 1_000, deadline, ...decided],
    );
    return { id, binding };
  }
  /** Holds the approval's row for 2.5 s, as a verify spending it or a decision does. */
  const heldFor2500ms = async (id: string) => {
    const held = await holding((tx) => tx`select 1 from approvals where tenant_id = ${caller.tenantId} and id = ${id} for update`);
    setTimeout(() => void held.release(), 2_500);
  };

  it('a verify that waited past the deadline of the approval it names does not spend it', async () => {
    const root = await unmeteredRoot();
    // The node's clock says one second is left when the call is queued; the row is held for 2.5.
    const n = Math.floor(Date.now() / 1000);
    const { id, binding } = await expiringAt(root, 'approved', n + 1);
    await heldFor2500ms(id);
    const item = allowItem(caller, [root], { mt: 'none' });
    const [answer] = await decideBatch(store, [{ ...item, gate: { v: 1, n, t: 'search', a: id, b: binding, cc: null } } as AllowItem]);
    expect(answer).toMatchObject({ o: 'APPROVAL_EXPIRED' });
    const [row] = await store.query(`select status from approvals where tenant_id = $1 and id = $2`, [caller.tenantId, id]);
    expect(row!['status']).toBe('approved');
  });

  it('a decision that waited past the deadline does not approve it', async () => {
    const root = await unmeteredRoot();
    const now = Math.floor(Date.now() / 1000);
    const { id } = await expiringAt(root, 'pending', now + 1);
    await heldFor2500ms(id);
    const decided = await store.db.transaction((tx) =>
      decideApprovalRow(tx as never, caller.tenantId, id, 'approved', {
        decidedBy: 'key_decider',
        decider: ['key_decider'],
        actor: 'bob',
        reason: 'late',
        now,
      }),
    );
    expect(decided).toBeUndefined();
  });
});
