/**
 * npm run bench:profile [-- --seconds N --warmup N --inflight N --warmup-inflight N --depth N --bulk N --max-calls N --perf --perf-record --table-stats --wal --cpu-prof --statements --durable --env K=V --sql TEXT --node-arg FLAG --source]
 *
 * CPU cost of one allowed /v1/verify, for finding where it goes: the service
 * and PostgreSQL CPU per verify (from /proc, stable on a shared machine,
 * unlike verifies/s), and with --cpu-prof a V8 CPU profile of the service
 * written to .bench-profile/ (open it in Chrome DevTools). fsync off by
 * default: this measures CPU; --durable runs PostgreSQL as bench:verify does
 * (fsync and synchronous_commit on), where commits wait for the disk. The service is the compiled one npm start
 * runs (built first when stale); --source runs src/main.ts through tsx.
 */
import { spawn } from 'node:child_process';
import postgres from 'postgres';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, startPgCluster, type PgCluster } from './lib/pg-cluster.js';
import { liveChildren, serviceEntry, startChild } from './lib/child.js';
import { BENCH_POLICY, independentChains, presignAll, registerChains, setupTenant } from './lib/chains.js';
import { bodiesPerWorker, clientFromEnv, percentile, runLoad, warmUpMeasuringRate } from './lib/load.js';
import { childrenOf, startCpuSample } from './lib/proc.js';
import { gcPausesDelta, groupCommitDelta, scrapeService, type GcPauses } from './lib/metrics.js';
import { bulkLoadDelegations, settleDatabase } from './lib/sql.js';

/** The load generator's client (BENCH_CLIENT, default raw sockets: see lib/load.ts). */
const CLIENT = clientFromEnv();

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const seconds = arg('seconds', 5);
const inflight = arg('inflight', 32);
/**
 * In-flight requests of the warm-up (default --inflight). A 1-in-flight run after a long warm-up
 * at 32 measures a verify against tables as full as bench:verify's later phases find them.
 */
const warmupInflight = arg('warmup-inflight', inflight);
const depth = arg('depth', 2);
const warmupSeconds = arg('warmup', 3);
/** DRs bulk-loaded into the tenant before the load (as bench:verify's stored-DR phase does), then vacuumed and checkpointed. */
const bulk = arg('bulk', 0);
/** Every DR's max_calls: 0 makes every verify a block-G refusal (CALLS_EXHAUSTED, 403), as bench:verify's denial phase. */
const maxCalls = arg('max-calls', BENCH_POLICY.max_calls ?? 1_000_000_000);
const profile = process.argv.includes('--cpu-prof');
/** Count instructions with perf stat (stable on a loaded machine, unlike time). */
const usePerf = process.argv.includes('--perf');
/** Sample PostgreSQL's call stacks with perf record, into .bench-profile/postgres.perf.data (read it with perf report). */
const recordPostgres = process.argv.includes('--perf-record');
/** Time per SQL statement, those inside the verify functions included (pg_stat_statements, track=all). */
const statementStats = process.argv.includes('--statements');
/**
 * WAL bytes and MultiXact ids per verify (each read after a CHECKPOINT on either side of the load).
 * A row locked by several transactions at once (a foreign key's parent, FOR KEY SHARE) takes a new
 * MultiXact for every further locker: ids that run out at a rate of their own, vacuum's to reclaim.
 */
const walStats = process.argv.includes('--wal');
/**
 * Every value of a repeatable flag: `--env NAME=VALUE` (service environment), `--sql TEXT` (run
 * before the load, to try a schema change), `--node-arg FLAG` (a Node or V8 flag for the service,
 * e.g. `--node-arg --log-deopt`, which NODE_OPTIONS would refuse).
 */
const every = (name: string): string[] =>
  process.argv.flatMap((a, i) => (a === `--${name}` && i + 1 < process.argv.length ? [process.argv[i + 1]!] : []));

/** "minor 120 (85 ms), major 3 (12 ms): 2.4% of the run's main thread". */
function describeGc(gc: GcPauses, runSeconds: number): string {
  const kinds = Object.keys(gc.count).filter((k) => (gc.count[k] ?? 0) > 0);
  if (kinds.length === 0) return 'none';
  const total = kinds.reduce((s, k) => s + (gc.seconds[k] ?? 0), 0);
  const each = kinds.map((k) => `${k} ${gc.count[k]} (${Math.round(1000 * (gc.seconds[k] ?? 0))} ms)`);
  return `${each.join(', ')}: ${((100 * total) / runSeconds).toFixed(1)}% of the run`;
}

/** User and kernel instructions retired by `pids` over the next `s` seconds (perf stat). */
function instructions(pids: readonly number[], s: number): Promise<{ user: number; kernel: number }> {
  return new Promise((resolve, reject) => {
    // Only processes still alive: perf counts nothing when one of them is gone (an autovacuum worker may have ended).
    const alive = pids.filter((pid) => existsSync(`/proc/${pid}`));
    const p = spawn('perf', ['stat', '-x', ',', '-e', 'instructions:u,instructions:k', '-p', alive.join(','), '--', 'sleep', String(s)], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    p.stderr.on('data', (b: Buffer) => (err += b.toString('utf8')));
    p.on('error', reject);
    p.on('exit', () => {
      const count = (event: string) =>
        Number(
          err
            .split('\n')
            .find((l) => l.includes(event))
            ?.split(',')[0] ?? NaN,
        );
      resolve({ user: count('instructions:u'), kernel: count('instructions:k') });
    });
  });
}

/** perf record -g of `pids` over the next `s` seconds, written to `out`. */
function perfRecord(pids: readonly number[], out: string, s: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn('perf', ['record', '-q', '-e', 'cpu-clock', '-g', '-o', out, '-p', pids.join(','), '--', 'sleep', String(s)], {
      stdio: 'ignore',
    });
    p.on('error', reject);
    p.on('exit', () => resolve());
  });
}

let pg: PgCluster | undefined;
let dataDir: string | undefined;
async function cleanup(): Promise<void> {
  for (const c of liveChildren()) await c.stop().catch(() => {});
  await pg?.destroy();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
}

async function main(): Promise<void> {
  pg = await startPgCluster({
    durable: process.argv.includes('--durable'),
    // --pg NAME=VALUE: a server setting, e.g. session_preload_libraries=auto_explain.
    settings: [...(statementStats ? ['shared_preload_libraries=pg_stat_statements', 'pg_stat_statements.track=all'] : []), ...every('pg')],
  });
  const port = await freePort();
  dataDir = mkdtempSync(join(tmpdir(), 'baton-prof-'));
  const adminKey = `prof-admin-${randomBytes(16).toString('hex')}`;
  const profDir = join(ROOT, '.bench-profile');
  if (profile || recordPostgres) mkdirSync(profDir, { recursive: true });
  const entry = serviceEntry(ROOT, (line) => process.stdout.write(`${line}\n`));
  const service = await startChild({
    name: 'baton service',
    script: entry.script,
    cwd: ROOT,
    port,
    readyPath: '/readyz',
    nodeArgs: [...(profile ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : []), ...every('node-arg')],
    env: {
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: pg.url,
      BATON_ADMIN_KEY: adminKey,
      BATON_MASTER_KEY: randomBytes(32).toString('hex'),
      BATON_DB_POOL: '32',
      BATON_LOG_LEVEL: process.env['BATON_LOG_LEVEL'] ?? 'warn',
      BATON_INVOCATION_MAX_AGE: '900',
      BATON_DATA_DIR: dataDir,
      ...Object.fromEntries(every('env').map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)])),
    },
  });
  if (every('sql').length > 0) {
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
    for (const text of every('sql')) await sql.unsafe(text);
    await sql.end();
  }
  const tenant = await setupTenant(service.url, adminKey, 'prof');
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${tenant.verifyKey}` };
  const chains = independentChains(tenant.operator, Math.max(inflight, warmupInflight), depth, { ...BENCH_POLICY, max_calls: maxCalls });
  await registerChains(service.url, chains);
  if (bulk > 0) {
    const sql = postgres(pg.url, { max: 2, onnotice: () => {} });
    process.stderr.write(`[bench] bulk-loading ${bulk} DRs\n`);
    await bulkLoadDelegations(sql, tenant.id, 10_000_000, bulk, 2);
    await settleDatabase(sql);
    await sql.end();
  } else if (process.argv.includes('--settle')) {
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
    await settleDatabase(sql);
    await sql.end();
  }
  const okStatus = maxCalls === 0 ? 403 : 200;
  const load = (b: readonly (readonly Buffer[])[], s: number) =>
    runLoad({ url: service.url, path: '/v1/verify', headers, bodies: b, seconds: s, client: CLIENT, okStatus });
  // Warm up every pool connection (its plans, its compiled functions) before measuring, and learn
  // how many bodies the measurement needs: one that runs dry ends early.
  const warm = await warmUpMeasuringRate({
    seconds: warmupSeconds,
    startRps: 1000,
    workers: warmupInflight,
    sign: (perWorker) => presignAll(chains.slice(0, warmupInflight), perWorker).bodies,
    run: load,
  });
  const { bodies } = presignAll(chains.slice(0, inflight), bodiesPerWorker(warm.rps, inflight, seconds));
  // Signing left the service idle: a moment of load again, on the first of the measured bodies.
  const rewarm = 20;
  await load(
    bodies.map((x) => x.slice(0, rewarm)),
    0.5,
  );
  const statsSql = statementStats ? postgres(pg.url, { max: 1, onnotice: () => {} }) : undefined;
  if (statsSql) {
    await statsSql`create extension if not exists pg_stat_statements`;
    await statsSql`select pg_stat_statements_reset()`;
  }
  const walSql = walStats ? postgres(pg.url, { max: 1, onnotice: () => {} }) : undefined;
  const walPosition = async (q: postgres.Sql) => {
    await q`checkpoint`;
    const [row] = await q`select pg_current_wal_lsn()::text as lsn, (select next_multixact_id::text from pg_control_checkpoint()) as mxid`;
    return { lsn: String(row!['lsn']), mxid: BigInt(String(row!['mxid'])) };
  };
  const walBefore = walSql ? await walPosition(walSql) : undefined;
  const cpu = startCpuSample({
    service: () => [service.pid, ...childrenOf(service.pid)],
    postgres: () => pg!.pids(),
  });
  const counting = usePerf
    ? {
        service: instructions([service.pid, ...childrenOf(service.pid)], seconds),
        postgres: instructions(pg.pids(), seconds),
      }
    : undefined;
  const scraped = await scrapeService(service.url, adminKey);
  const recording = recordPostgres ? perfRecord(pg.pids(), join(profDir, 'postgres.perf.data'), seconds) : undefined;
  const r = await load(
    bodies.map((x) => x.slice(rewarm)),
    seconds,
  );
  const sample = cpu();
  const after = await scrapeService(service.url, adminKey);
  const batches = groupCommitDelta(scraped.batches, after.batches);
  await recording;
  if (counting) {
    const [svc, db] = [await counting.service, await counting.postgres];
    const per = (n: number) => Math.round(n / r.ok / 1000);
    process.stdout.write(
      `instructions per verify (thousands, user + kernel): service ${per(svc.user)} + ${per(svc.kernel)}, PostgreSQL ${per(db.user)} + ${per(db.kernel)}\n`,
    );
  }
  const rps = r.ok / r.seconds;
  const us = (g: string) => Math.round(((sample.cores[g] ?? 0) * 1e6) / rps);
  process.stdout.write(
    `service: ${entry.label}\n` +
      `${inflight} in flight, depth ${depth}: ${Math.round(rps)} verifies/s (${r.ok}/${r.requests} ok${r.firstError ? `, first error ${r.firstError}` : ''}${r.exhausted ? `; NOTE: ran out of bodies after ${r.seconds.toFixed(1)} s of ${seconds}` : ''}), p50 ${percentile(r.latencies, 0.5).toFixed(2)} ms, p99 ${percentile(r.latencies, 0.99).toFixed(2)} ms\n` +
      `CPU per verify: service ${us('service')} us, PostgreSQL ${us('postgres')} us, load generator ${Math.round(r.clientCpuUs / r.requests)} us; machine busy ${sample.machineBusy.toFixed(2)} cores, ${sample.machineSteal.toFixed(2)} stolen by the host\n` +
      `group commit (/metrics): ${batches.statements} statements, ${(batches.items / batches.statements).toFixed(1)} verifies each (${Math.round((100 * batches.alone) / batches.statements)}% alone), round trip ${((1000 * batches.seconds) / batches.statements).toFixed(2)} ms on average as the service saw it; its event loop ran its timers ${(1000 * after.loop.mean).toFixed(2)} ms late on average (p99 ${(1000 * after.loop.p99).toFixed(2)} ms)\n` +
      `garbage collection (/metrics): ${describeGc(gcPausesDelta(scraped.gc, after.gc), r.seconds)}\n`,
  );
  if (walSql && walBefore) {
    const after = await walPosition(walSql);
    const [row] = await walSql`select pg_wal_lsn_diff(${after.lsn}::pg_lsn, ${walBefore.lsn}::pg_lsn)::float8 as bytes`;
    process.stdout.write(
      `WAL per verify: ${Math.round(Number(row!['bytes']) / r.ok)} bytes (checkpoints included); MultiXact ids per verify: ${(Number(after.mxid - walBefore.mxid) / r.ok).toFixed(2)}\n`,
    );
    await walSql.end();
  }
  if (statsSql) {
    const [batch] = await statsSql`select calls, total_exec_time / nullif(calls, 0) as ms from pg_stat_statements
                                    where toplevel and query like 'select baton_verify_batch(%' order by calls desc limit 1`;
    if (batch)
      process.stdout.write(
        `group commit in PostgreSQL: ${Number(batch['ms']).toFixed(2)} ms of execution per statement (the rest of the round trip: the network, waiting for a core, the service's event loop)\n`,
      );
    // Microseconds of execution per verify, per statement (nested ones count inside their callers too).
    const rows = await statsSql`select round((total_exec_time * 1000 / ${r.ok})::numeric, 1) as us, calls, toplevel,
                                       regexp_replace(left(query, 110), '[[:space:]]+', ' ', 'g') as query
                                  from pg_stat_statements order by total_exec_time desc limit 25`;
    for (const row of rows)
      process.stdout.write(
        `${String(row['us']).padStart(8)} us ${String(row['calls']).padStart(7)} calls ${row['toplevel'] ? 'top ' : '    '} ${row['query']}\n`,
      );
    await statsSql.end();
  }
  await service.stop();
  if (process.argv.includes('--table-stats')) {
    // How the counter updates were written: HOT (in place on the page) or with new index entries.
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
    const rows = await sql`select relname, n_tup_ins, n_tup_upd, n_tup_hot_upd from pg_stat_user_tables
                            where relname in ('delegations', 'invocations', 'receipts') order by relname`;
    await sql.end();
    for (const t of rows)
      process.stdout.write(`${t['relname']}: ${t['n_tup_ins']} inserted, ${t['n_tup_upd']} updated (${t['n_tup_hot_upd']} HOT)\n`);
  }
  if (profile) process.stdout.write(`profile written to ${profDir}\n`);
}

main()
  .then(cleanup)
  .catch(async (e: unknown) => {
    process.stderr.write(`bench:profile failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    await cleanup();
    process.exit(1);
  });
