/**
 * When the integrator runs its rounds: soon while leaves are waiting (at
 * once behind a backlog, else a short gap after the previous round started),
 * the interval only when idle. The interval used to come between every two
 * rounds, which under load put a whole interval into every leaf's lag; then
 * rounds ran back to back, each paying its fixed cost for a few leaves.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rootOf } from '../../src/protocol/merkle.js';
import {
  BUSY_ROUND_GAP_MS,
  INTEGRATION_BATCH,
  integrateOnce,
  startIntegrator,
  type EdgeCache,
  type IntegrationRound,
  type IntegratorDeps,
} from '../../src/service/log-integrator.js';
import { startIntegratorThread, type IntegratorThreadData } from '../../src/service/log-integrator-thread.js';
import { logOrigin, signCheckpoint } from '../../src/service/log-tree.js';
import { silentLogger, type Logger } from '../../src/service/log.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { claimPending, countPending, hashesAt, latestCheckpoint, preferIndexes } from '../../src/store/log.js';
import { rows } from '../../src/store/rows.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';

let svc: TestService;
let tenant: TestTenant;
let deps: IntegratorDeps;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  deps = { store: svc.store, signer: svc.deps.signer, log: silentLogger, logName: svc.deps.config.tlogName };
});
afterAll(async () => {
  await svc?.close();
});

const record = (i: number) =>
  recordServiceReceipt(svc.store.db, svc.deps.signer, {
    tenantId: tenant.id,
    kind: 'invocation.denied',
    subject: `inv:${i}`,
    data: { i },
    now: svc.clock.now,
  });

async function until(what: string, done: () => Promise<boolean>, withinMs: number): Promise<number> {
  const start = performance.now();
  while (!(await done())) {
    if (performance.now() - start > withinMs) throw new Error(`${what}: not within ${withinMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return performance.now() - start;
}

describe('startIntegrator', () => {
  it('integrates leaves left pending at start at once, not one interval later', async () => {
    for (let i = 0; i < 3; i++) await record(i);
    const integrator = startIntegrator(deps, 60_000);
    try {
      await until('pending leaves integrated', async () => (await countPending(svc.store.db)) === 0, 5_000);
    } finally {
      await integrator.stop();
    }
  });

  it('runs the next round at once after a full round, soon after one that found leaves; waits the interval only when idle', async () => {
    const calls: number[] = [];
    const script: number[] = [INTEGRATION_BATCH, 4, 1, 0];
    const round = async (): Promise<IntegrationRound> => {
      calls.push(performance.now());
      return { locked: true, leaves: script.shift() ?? 0, tenants: 1 };
    };
    const integrator = startIntegrator(deps, 60_000, round);
    try {
      await until('four rounds', async () => calls.length >= 4, 2_000);
      // The idle fourth round schedules the next one an interval away.
      await new Promise((r) => setTimeout(r, 300));
      expect(calls).toHaveLength(4);
      // A round with leaves but not full: the next starts no sooner than the busy gap after it started.
      // (Timers may fire a millisecond early.)
      expect(calls[2]! - calls[1]!).toBeGreaterThanOrEqual(BUSY_ROUND_GAP_MS - 2);
      expect(calls[3]! - calls[2]!).toBeGreaterThanOrEqual(BUSY_ROUND_GAP_MS - 2);
    } finally {
      await integrator.stop();
    }
  });

  it('a failing round is retried with a growing wait, warned about once (not per retry), and its recovery is logged', async () => {
    const calls: number[] = [];
    const lines: { level: string; msg: string; fields?: Record<string, unknown> }[] = [];
    const at = (level: string) => (msg: string, fields?: Record<string, unknown>) =>
      void lines.push({ level, msg, ...(fields ? { fields } : {}) });
    const log = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
    const round = async (): Promise<IntegrationRound> => {
      calls.push(performance.now());
      if (calls.length <= 4) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
      return { locked: true, leaves: 0, tenants: 0 };
    };
    const integrator = startIntegrator({ ...deps, log }, 10, round);
    try {
      await until('five rounds', async () => calls.length >= 5, 5_000);
    } finally {
      await integrator.stop();
    }
    const gaps = calls.slice(1, 5).map((t, i) => t - calls[i]!);
    // 10, 20, 40, 80 ms (timers may fire a millisecond early).
    gaps.forEach((gap, i) => expect(gap, `retry ${i + 1}`).toBeGreaterThanOrEqual(10 * 2 ** i - 2));
    expect(lines.filter((l) => l.level === 'warn').map((l) => l.fields?.['failed_rounds'])).toEqual([1]);
    expect(lines.find((l) => l.level === 'warn')?.fields?.['error']).toBe('Error: connect ECONNREFUSED 127.0.0.1:5432');
    expect(lines.filter((l) => l.level === 'info')).toEqual([
      { level: 'info', msg: 'log integration recovered', fields: { failed_rounds: 4 } },
    ]);
  });

  it('reuses its tree edges across rounds only while the log is still the tree they belong to', async () => {
    const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
    const mine: EdgeCache = new Map();
    const otherNode: EdgeCache = new Map();
    let n = 1000;
    // 7 rounds of 120 leaves cross tile boundaries; every third round another node integrates.
    for (let r = 0; r < 7; r++) {
      for (let i = 0; i < 120; i++) await record(n++);
      expect((await integrateOnce(deps, 5000, r % 3 === 2 ? otherNode : mine)).leaves).toBe(120);
      const head = (await latestCheckpoint(svc.store.db, tenant.id))!;
      const leaves = await hashesAt(svc.store.db, tenant.id, 0, 0, head.treeSize);
      expect(leaves).toHaveLength(head.treeSize);
      expect(hex(head.rootHash), `round ${r}`).toBe(hex(rootOf(leaves)));
    }
    expect(mine.get(tenant.id)?.size).toBe((await latestCheckpoint(svc.store.db, tenant.id))!.treeSize);
  });

  it('claims pending leaves reading only their own service receipts, without a sequential scan', async () => {
    // The planner sizes the claim by its LIMIT; for that many rows it read every service receipt.
    for (let i = 0; i < 40; i++) await record(3000 + i);
    try {
      const { claimed, scans } = await svc.store.db.transaction(async (tx) => {
        // This backend's counts not yet reported (earlier transactions too): compare before and after.
        const counts = () =>
          rows<{ relname: string; seq_scan: number; idx_tup_fetch: number }>(
            tx,
            sql`select relname, seq_scan::int, idx_tup_fetch::int from pg_stat_xact_user_tables
                 where relname in ('receipts', 'log_pending') order by relname`,
          );
        await preferIndexes(tx);
        const before = await counts();
        const claim = await claimPending(tx, INTEGRATION_BATCH);
        const after = await counts();
        expect(claim.locked).toBe(true);
        const scans = after.map((a, i) => ({
          relname: a.relname,
          seq: a.seq_scan - before[i]!.seq_scan,
          fetched: a.idx_tup_fetch - before[i]!.idx_tup_fetch,
        }));
        return { claimed: claim.locked ? claim.pending.length : 0, scans };
      });
      expect(claimed).toBeGreaterThanOrEqual(40);
      expect(scans.map((t) => [t.relname, t.seq])).toEqual([
        ['log_pending', 0],
        ['receipts', 0],
      ]);
      // Every service receipt of the test file is stored by now: a plan reading them all would fetch far more.
      expect(scans.find((t) => t.relname === 'receipts')!.fetched).toBe(claimed);
    } finally {
      await integrateOnce(deps);
    }
  });
});

describe('startIntegratorThread', () => {
  const threadData = (over: Partial<IntegratorThreadData> = {}): IntegratorThreadData => ({
    databaseUrl: svc.url,
    masterKey: svc.deps.masterKey,
    kid: svc.deps.signer.kid,
    logName: deps.logName,
    intervalMs: 50,
    ...over,
  });
  /** A logger that keeps `level msg` lines. */
  const capture = (): { log: Logger; lines: string[] } => {
    const lines: string[] = [];
    const at = (level: string) => (msg: string) => void lines.push(`${level} ${msg}`);
    return { lines, log: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
  };
  // Generous: a thread loads its own modules, which on a loaded machine takes seconds.
  const STARTUP_MS = 30_000;

  it('integrates on its own connection and signs with the process key; after stop nothing is integrated', async () => {
    for (let i = 0; i < 3; i++) await record(5000 + i);
    const { log, lines } = capture();
    const thread = startIntegratorThread(threadData(), log);
    let stopped = false;
    try {
      await until('pending leaves integrated by the thread', async () => (await countPending(svc.store.db)) === 0, STARTUP_MS);
      await thread.stop();
      stopped = true;
      const head = (await latestCheckpoint(svc.store.db, tenant.id))!;
      // Ed25519 is deterministic: the same note as this process signs, so the same key.
      expect(head.note).toBe(signCheckpoint(svc.deps.signer, logOrigin(deps.logName, tenant.id), head.treeSize, head.rootHash));
      await record(5003);
      await new Promise((r) => setTimeout(r, 300));
      expect(await countPending(svc.store.db)).toBe(1);
      expect(lines).toEqual([]);
    } finally {
      if (!stopped) await thread.stop();
      await integrateOnce(deps);
    }
  }, 60_000);

  /** Runs a thread until it has logged `line` `times` times, stops it, and returns every line it logged. */
  async function runUntilLogged(data: IntegratorThreadData, line: string, times: number): Promise<string[]> {
    const { log, lines } = capture();
    const thread = startIntegratorThread(data, log);
    try {
      await until(`${times} x "${line}"`, async () => lines.filter((l) => l === line).length >= times, STARTUP_MS);
    } finally {
      await thread.stop();
    }
    return lines;
  }

  it('retries a start it cannot complete, logging through the main thread, and stops while waiting', async () => {
    const retry = 'warn the log integrator could not load its signing key; retrying';
    const lines = await runUntilLogged(threadData({ kid: 'svc_0000000000000000' }), retry, 2);
    expect(lines.filter((l) => l !== retry)).toEqual([]);
  }, 60_000);

  it('replaces a thread that dies', async () => {
    // No database URL: the thread's start throws, outside any retry.
    const lines = await runUntilLogged(threadData({ databaseUrl: '' }), 'warn the log integrator thread exited; starting another', 2);
    expect(lines).toContain('error the log integrator thread failed');
  }, 60_000);
});
