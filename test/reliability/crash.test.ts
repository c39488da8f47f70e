/**
 * Crash (issue 5): `kill -9` of a service process in the middle of a load,
 * then a restart. Whatever the dead process was doing, the database must
 * hold a consistent story:
 * - every counter equals the invocations stored through its DR (and a shared
 *   ceiling is still reached exactly, never passed);
 * - every 200 the client saw has its invocation row and its signed
 *   'invocation.allowed' receipt (the allow is sent only after commit);
 * - no deny consumed anything; a request whose answer was lost, sent again,
 *   is either allowed now or answered as a retry (its original allow)
 *   because it was committed;
 * - every committed (counted) invocation has its receipt: "a committed action
 *   always has one" (src/service/receipts.ts), even when the process died
 *   between the two.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import postgres from 'postgres';
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
  runBounded,
  setupTenant,
  sleep,
  startNode,
  verify,
  type NodeConfig,
  type Reply,
  type ServiceNode,
  type Tenant,
} from './support.js';

let database: FreshDatabase | undefined;
let cfg: NodeConfig;
let nodeA: ServiceNode | undefined;
let nodeB: ServiceNode | undefined;
/** Every process started, restarts included, so afterAll kills all of them. */
const spawned: ServiceNode[] = [];
let tenant: Tenant;
let dbUrl: string;

beforeAll(async () => {
  database = await createDatabase();
  dbUrl = database.url;
  cfg = nodeConfig(dbUrl, { pool: 8 });
  const [a, b] = await Promise.allSettled([startNode('nodeA', cfg), startNode('nodeB', cfg)]);
  if (a.status === 'fulfilled') spawned.push((nodeA = a.value));
  if (b.status === 'fulfilled') spawned.push((nodeB = b.value));
  if (a.status === 'rejected') throw a.reason;
  if (b.status === 'rejected') throw b.reason;
  tenant = await setupTenant(nodeA!.url, cfg.adminKey, 'reliability-crash');
}, 60_000);

afterAll(async () => {
  await killAll(spawned);
  await database?.drop();
}, 30_000);

async function restartB(): Promise<number> {
  const t0 = performance.now();
  const b = await startNode('nodeB', cfg, { port: nodeB!.port });
  spawned.push((nodeB = b));
  return performance.now() - t0;
}

describe('kill -9 of a service process under load', () => {
  it('after a restart, counters equal stored invocations, every 200 has its invocation and service receipt, and the ceiling is exact', async () => {
    // root max 300 -> 4 leaves of max 100 each: demand (4 x 150) exceeds both.
    const ROOT_MAX = 300;
    const root = grantRoot(tenant, { max_calls: ROOT_MAX });
    const leaves = Array.from({ length: 4 }, () => grantSub(root, { max_calls: 100 }));
    await registerDelegations(nodeA!.url, tenant, [root.dr, ...leaves.map((l) => l.dr)]);
    const total = 600;
    const signed = preSign(leaves, total, 'crash');
    const targets = signed.map((_, i) => (i % 2 === 0 ? 'A' : 'B'));
    const replies = new Array<Reply>(total);

    let done = 0;
    let killedAt = 0;
    let restartMs = 0;
    let victim: ServiceNode | undefined;
    const t0 = performance.now();
    const load = runBounded(signed, 16, async (s, i) => {
      const node = targets[i] === 'A' ? nodeA! : nodeB!;
      replies[i] = await verify(node.url, tenant, s.bundle, 8_000);
      done++;
      return replies[i]!;
    });
    const chaos = (async () => {
      while (done < total / 4) await sleep(2);
      victim = nodeB!;
      killedAt = performance.now();
      const exit = await victim.kill9();
      expect(exit?.signal).toBe('SIGKILL');
      restartMs = await restartB(); // the load keeps running on A meanwhile
    })();
    await Promise.all([load, chaos]);
    const loadMs = performance.now() - t0;
    report('crash load (16 in flight, A+B, B killed at 25%)', replies, loadMs, {
      killed_after_ms: Math.round(killedAt - t0),
      restart_ms: Math.round(restartMs),
      lost_answers: replies.filter((r) => r.status === 0).length,
      in_flight_on_B_at_kill: replies.filter((r, i) => targets[i] === 'B' && r.sentAt < killedAt && r.doneAt >= killedAt).length,
    });
    expect(
      replies.filter((r) => r.status !== 200 && r.status !== 403 && r.status !== 0).map((r) => `${r.status} ${JSON.stringify(r.body)}`),
    ).toEqual([]);

    // Answers lost with the process are sent again (to the restarted node): a
    // committed one must come back as a retry of its allow, an uncommitted one is decided now.
    const lost = signed.map((s, i) => ({ s, i })).filter(({ i }) => replies[i]!.status === 0);
    const resent = await runBounded(lost, 8, ({ s }) => verify(nodeB!.url, tenant, s.bundle));
    const finalReplies = replies.slice();
    lost.forEach(({ i }, j) => (finalReplies[i] = resent[j]!));
    const retried = lost.filter((_, j) => resent[j]!.status === 200 && resent[j]!.body?.retry === true).map(({ s }) => s.jti);
    report('crash resend of lost answers', resent, 0, { retried: retried.length });
    // The same key sends them again: never REPLAY_DETECTED.
    expect(resent.filter((r) => codeOf(r) === 'REPLAY_DETECTED').length).toBe(0);
    expect(
      resent.filter((r) => r.status !== 200 && r.status !== 403).map((r) => `${r.status} ${r.error ?? JSON.stringify(r.body)}`),
    ).toEqual([]);

    const audit = await auditDatabase(dbUrl, tenant.id);
    const mine = new Set<string>([root.dr.hash, ...leaves.map((l) => l.dr.hash)]);
    const rows = audit.counters.filter((c) => mine.has(c.hash));
    const storedHere = signed.filter((s) => audit.storedJtis.has(s.jti)).length;
    console.log(
      `[reliability] crash audit: stored=${storedHere} root_calls_used=${rows.find((r) => r.hash === root.dr.hash)!.callsUsed} ` +
        `client_200=${finalReplies.filter((r) => r.status === 200).length} committed_but_answer_lost=${retried.length} ` +
        `invocations_without_receipt=${audit.invocationsWithoutReceipt.length} receipts_without_invocation=${audit.receiptsWithoutInvocation.length}`,
    );
    // Counters exact, ceiling reached exactly (demand exceeds it), never passed.
    expect(rows.filter((r) => r.callsUsed !== r.stored)).toEqual([]);
    expect(rows.find((r) => r.hash === root.dr.hash)).toMatchObject({ callsUsed: ROOT_MAX, stored: ROOT_MAX });
    // What the client saw, against what is stored.
    const view = checkClientView(
      audit,
      signed.map((s, i) => ({ jti: s.jti, reply: finalReplies[i]! })),
    );
    expect(view).toEqual({ allowedNotStored: [], allowedWithoutReceipt: [], deniedButStored: [] });
    // Retries are committed invocations whose answer was lost; every stored one was answered 200 in the end.
    for (const jti of retried) expect(audit.storedJtis.has(jti)).toBe(true);
    expect(finalReplies.filter((r) => r.status === 200).length).toBe(storedHere);
    // Nothing counted without its receipt, no receipt without its invocation.
    expect(audit.receiptsWithoutInvocation).toEqual([]);
    expect(audit.invocationsWithoutReceipt, 'counted invocations with no invocation.allowed receipt').toEqual([]);
    expect(nodeA!.alive(), `nodeA (never killed) is still up: ${JSON.stringify(nodeA!.exit())}`).toBe(true);
  }, 60_000);

  it('a process killed between committing an allow and writing its service receipt leaves no counted invocation without a service receipt', async () => {
    // The window between the counting transaction's COMMIT and the receipt
    // INSERT is one round trip; hold it open by locking the receipts table
    // (SHARE mode blocks INSERT, nothing else the verify path does), kill -9
    // the process inside it, and end its orphaned statements as a dead
    // process would never have sent them. Correct code has no such window:
    // the receipt is in the counting transaction, so nothing commits here.
    // (Caught the bug before 6c6bd1e moved the receipt into the transaction.)
    // One chain per invocation, so the K transactions share no row and each
    // reaches the receipt INSERT however the counting transaction orders its locks.
    const K = 4;
    // Group commit: a process sends at most 2 statements at once (the others queue in it), each
    // carrying one or more of the K verifies, and verifies read in one turn of its event loop go
    // in one statement: the K may arrive as one statement or as two. The window is open once one
    // is blocked at the receipt insert; a second gets a moment to join it.
    const STATEMENTS = Math.min(K, 2);
    /** A blocked statement gives up at the verify deadline (5 s, its lock_timeout too): kill well before. */
    const BLOCKED_WITHIN_MS = 4_000;
    const SECOND_STATEMENT_MS = 500;
    const chains = Array.from({ length: K }, () => {
      const root = grantRoot(tenant, { max_calls: 100 });
      return { root, leaf: grantSub(root, { max_calls: 100 }) };
    });
    await registerDelegations(
      nodeA!.url,
      tenant,
      chains.flatMap((c) => [c.root.dr, c.leaf.dr]),
    );
    const signed = chains.flatMap((c, i) => preSign([c.leaf], 1, `window${i}`));
    const jtis = signed.map((s) => s.jti);
    // nodeB answers once before the window opens (a chain of its own), so the window's time goes to
    // the receipts lock, not to a process the test before has just restarted.
    const warmRoot = grantRoot(tenant, { max_calls: 100 });
    const warmLeaf = grantSub(warmRoot, { max_calls: 100 });
    await registerDelegations(nodeA!.url, tenant, [warmRoot.dr, warmLeaf.dr]);
    const warmed = await verify(nodeB!.url, tenant, preSign([warmLeaf], 1, 'window-warm-up')[0]!.bundle, 15_000);
    expect(warmed.status, `nodeB answers before the window opens: ${warmed.status} ${warmed.error ?? JSON.stringify(warmed.body)}`).toBe(
      200,
    );
    const watcher = postgres(dbUrl, { max: 1, connect_timeout: 5, onnotice: () => {} });
    const locker = postgres(dbUrl, { max: 1, connect_timeout: 5, onnotice: () => {} });
    let pending: Promise<Reply[]> | undefined;
    let committedBeforeKill = -1;
    let waiting = 0;
    try {
      await locker.begin(async (tx) => {
        await tx`lock table receipts in share mode`;
        const answered: Reply[] = [];
        pending = Promise.all(
          signed.map(async (s) => {
            const reply = await verify(nodeB!.url, tenant, s.bundle, 15_000);
            answered.push(reply);
            return reply;
          }),
        );
        const blockedStatements = async () => {
          const [row] = await watcher<{ n: number }[]>`
            select count(*)::int as n from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock'
               and (query ilike '%receipts%' or query ilike '%baton_verify%')`;
          return row!.n;
        };
        const deadline = performance.now() + BLOCKED_WITHIN_MS;
        while ((waiting = await blockedStatements()) < 1 && performance.now() < deadline) await sleep(20);
        const joinBy = performance.now() + SECOND_STATEMENT_MS;
        while (waiting >= 1 && waiting < STATEMENTS && performance.now() < joinBy) {
          await sleep(20);
          waiting = Math.max(waiting, await blockedStatements());
        }
        if (waiting < 1) {
          const activity = await watcher`
            select state, wait_event_type, wait_event, left(query, 60) as query from pg_stat_activity
             where datname = current_database() and pid <> pg_backend_pid()`;
          const seen = answered.map((r) => `${r.status} after ${Math.round(r.ms)} ms: ${r.error ?? JSON.stringify(r.body)}`);
          expect.fail(
            `no verify statement blocked on the receipts lock within ${BLOCKED_WITHIN_MS} ms; nodeB alive: ${nodeB!.alive()}; ` +
              `answers so far: ${JSON.stringify(seen)}; sessions: ${JSON.stringify(activity)}`,
          );
        }
        const [c] = await watcher<
          { n: number }[]
        >`select count(*)::int as n from invocations where tenant_id = ${tenant.id} and jti = any(${jtis})`;
        committedBeforeKill = c!.n;
        const exit = await nodeB!.kill9();
        expect(exit?.signal).toBe('SIGKILL');
        // The dead process's statements end with it.
        await watcher`
          select pg_terminate_backend(pid) from pg_stat_activity
           where datname = current_database() and wait_event_type = 'Lock' and query ilike '%receipts%'`;
      });
    } finally {
      await watcher.end({ timeout: 5 });
      await locker.end({ timeout: 5 });
    }
    const replies = await pending!;
    const restartMs = await restartB();
    const audit = await auditDatabase(dbUrl, tenant.id);
    const resent = await Promise.all(signed.map((s) => verify(nodeB!.url, tenant, s.bundle)));
    const withoutReceipt = jtis.filter((j) => audit.storedJtis.has(j) && !audit.allowReceipts.has(j));
    report('crash inside the commit->receipt window', replies, 0, {
      blocked_on_receipt_insert: waiting,
      committed_before_kill: committedBeforeKill,
      restart_ms: Math.round(restartMs),
      stored_without_receipt: withoutReceipt.length,
      resent: resent.map((r) => (r.status === 200 ? 200 : codeOf(r))).join(','),
    });
    if (withoutReceipt.length > 0) {
      console.log(
        `[reliability] BUG: counted invocations without an 'invocation.allowed' receipt after kill -9: ${withoutReceipt.join(', ')}`,
      );
    }
    expect(replies.filter((r) => r.status === 200)).toEqual([]); // nobody was told "allowed"
    const mine = new Set<string>(chains.flatMap((c) => [c.root.dr.hash, c.leaf.dr.hash]));
    const rows = audit.counters.filter((r) => mine.has(r.hash));
    expect(rows).toHaveLength(2 * K);
    expect(rows.filter((r) => r.callsUsed !== r.stored)).toEqual([]);
    expect(withoutReceipt, 'counted invocations with no invocation.allowed receipt').toEqual([]);
  }, 45_000);
});
