/**
 * npm run bench:verify [-- --quick | --seconds N | --rounds N | --warmup N | --bulk N | --workers N | --fsync-off | --source]
 *
 * POST /v1/verify end to end (the service as its own process, a throwaway
 * PostgreSQL 15 with its default durability: fsync and synchronous_commit
 * on), beside a pgbench ceiling measured in turns with it on the same server:
 * the same durable work as one allowed verify (insert the invocation, two
 * conditional counter updates, insert a service receipt). Prints the issue's goals
 * as ratios. This machine is shared and noisy: read the ratios, not the
 * absolute rates. See bench/README.md.
 *
 * Environment (flags win): BENCH_SECONDS (8; 2 with --quick), BENCH_ROUNDS (4;
 * 2 with --quick), BENCH_WARMUP
 * (20; 3 with --quick), BENCH_BULK
 * (1000000; 100000 with --quick), BENCH_WORKERS (1), BENCH_POOL (32),
 * BATON_PG_BIN, BENCH_SOURCE=1 (as --source: the service from src/ through
 * tsx instead of the compiled server npm start runs).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { findPgBin, freePort, HOW_TO_FIX, startPgCluster, type PgCluster } from './lib/pg-cluster.js';
import { serviceEntry, startChild, type Child } from './lib/child.js';
import { stopOnExit } from './lib/cleanup.js';
import {
  BENCH_ARGS,
  BENCH_POLICY,
  independentChains,
  presign,
  registerChains,
  setupTenant,
  siblingChains,
  type Chain,
  type Tenant,
} from './lib/chains.js';
import { BODY_MARGIN, bodiesPerWorker, clientFromEnv, percentile, runLoad, warmUpMeasuringRate, type LoadResult } from './lib/load.js';
import { childrenOf, joinCpuSamples, startCpuSample, type CpuSample } from './lib/proc.js';
import { closedLoopTailFloor, cpuBoundRatio, meanOf } from './lib/floors.js';
import { joinPgbenchRuns, preparePgbench, runPgbench, type PgbenchResult } from './lib/pgbench.js';
import { bulkLoadDelegations, delegationCount, settleDatabase, waitForLogDrained } from './lib/sql.js';

/** The load generator's client (BENCH_CLIENT, default raw sockets: see lib/load.ts). */
const CLIENT = clientFromEnv();

/**
 * Verifies per second the warm-up's first bodies are signed for. Each warm-up round then signs for
 * the rate the round before it measured, and every phase for the warm-up's fastest (with a margin,
 * see `bodiesPerWorker`): a fixed rate ran dry on faster machines and ended phases early.
 */
const START_RATE = num('rate', 'BENCH_RATE', 1600);
/**
 * One closed-loop worker waits for a durable commit per request, so it cannot outrun pgbench's
 * single client by much: twice its rate (or this floor) bounds one worker's bodies.
 */
const WORKER_RATE_FLOOR = 600;
/** DRs bulk-loaded into the small side of the stored-DR comparison (the large side gets `--bulk`). */
const SMALL_STORE = 1_000;
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

function flag(name: string): string | undefined {
  const argv = process.argv.slice(2);
  const i = argv.findIndex((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (i < 0) return undefined;
  const a = argv[i]!;
  return a.includes('=') ? a.slice(a.indexOf('=') + 1) : (argv[i + 1] ?? '');
}
const quick = process.argv.includes('--quick');
function num(name: string, env: string, fallback: number): number {
  const raw = flag(name) ?? process.env[env];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${env} / --${name} must be a positive number, got "${raw}"`);
  return n;
}
const CFG = {
  seconds: num('seconds', 'BENCH_SECONDS', quick ? 2 : 8),
  /**
   * Seconds of load before the first measured phase. V8 goes on compiling the service's hot code
   * with its optimizing compiler for about 10 s of load (its code log: ~40 functions a second at
   * first, one a second after 30 s), on helper threads that take CPU from the phases.
   */
  warmup: num('warmup', 'BENCH_WARMUP', quick ? 3 : 20),
  /**
   * Slices each phase of the compared group, and each side of a ceiling, is cut into, the phases
   * taking turns (see `compared` and `ceilingTurns`).
   * This machine's speed moved by a third from one minute to the next: phases compared with each
   * other must share the same minutes.
   */
  rounds: Math.round(num('rounds', 'BENCH_ROUNDS', quick ? 2 : 4)),
  bulk: num('bulk', 'BENCH_BULK', quick ? 100_000 : 1_000_000),
  workers: num('workers', 'BENCH_WORKERS', 1),
  pool: num('pool', 'BENCH_POOL', 32),
  durable: !process.argv.includes('--fsync-off'),
};

const out = (line = '') => process.stdout.write(`${line}\n`);
const log = (line: string) => process.stderr.write(`[bench] ${line}\n`);
const f0 = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '-');
const f2 = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : '-');

let pg: PgCluster | undefined;
let sql: postgres.Sql | undefined;
let dataDir: string | undefined;

const cleanup = stopOnExit(() => ({ pg, sql, dataDir }), log);

interface Phase {
  readonly name: string;
  readonly result: LoadResult;
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  readonly cpu: CpuSample;
  /** Requests per second of each slice, in order, when the phase ran as turns of a compared group. */
  readonly sliceRps?: readonly number[];
}

/** A phase's load, signed and warmed up, measured later in one run or in slices. */
interface Prepared {
  readonly name: string;
  readonly target: Target;
  readonly bodies: readonly (readonly Buffer[])[];
  /** Each worker's next unused body: slices continue where the last one stopped. */
  readonly cursors: number[];
  readonly okStatus: number;
}

/** Where a phase's load goes: a service, the API key it sends, the processes whose CPU is its. */
interface Target {
  readonly child: Child;
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly pids: () => number[];
}

interface Slice {
  readonly result: LoadResult;
  readonly cpu: CpuSample;
}

/** Several slices as one phase: counts added, latencies merged, CPU weighted by slice length. */
function joinSlices(name: string, slices: readonly Slice[]): Phase {
  const sum = (f: (s: Slice) => number) => slices.reduce((n, s) => n + f(s), 0);
  const seconds = sum((s) => s.result.seconds);
  const statuses: Record<number, number> = {};
  for (const s of slices) for (const [k, v] of Object.entries(s.result.statuses)) statuses[Number(k)] = (statuses[Number(k)] ?? 0) + v;
  const latencies = Float64Array.from(slices.flatMap((s) => Array.from(s.result.latencies))).sort();
  const result: LoadResult = {
    requests: sum((s) => s.result.requests),
    ok: sum((s) => s.result.ok),
    statuses,
    firstError: slices.find((s) => s.result.firstError !== undefined)?.result.firstError,
    seconds,
    latencies,
    clientCpuUs: sum((s) => s.result.clientCpuUs),
    exhausted: slices.some((s) => s.result.exhausted),
  };
  return {
    name,
    result,
    rps: result.ok / seconds,
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    cpu: joinCpuSamples(slices.map((s) => s.cpu)),
    sliceRps: slices.length > 1 ? slices.map((s) => s.result.ok / s.result.seconds) : undefined,
  };
}

async function main(): Promise<void> {
  const started = performance.now();
  const [l1, l5, l15] = loadavg().map((x) => x.toFixed(2));
  out(
    `bench:verify  node ${process.version}, ${cpus().length} cores (${cpus()[0]?.model.trim() ?? '?'}), load average before start ${l1} ${l5} ${l15}`,
  );
  const bin = findPgBin();
  if (!bin) {
    out(HOW_TO_FIX);
    throw new Error('no PostgreSQL server binaries found');
  }
  pg = await startPgCluster({ binDir: bin, durable: CFG.durable });
  sql = postgres(pg.url, { max: 4, onnotice: () => {} });
  const [v] = await sql<{ v: string }[]>`select current_setting('server_version') as v`;
  const settings = await sql<{ name: string; setting: string }[]>`
    select name, setting from pg_settings where name in ('fsync','synchronous_commit','full_page_writes') order by name`;
  out(
    `  PostgreSQL ${v!.v} on 127.0.0.1: ${settings.map((s) => `${s.name}=${s.setting}`).join(', ')}${CFG.durable ? ' (durable, as in production)' : ' (NOT durable: --fsync-off)'}`,
  );

  dataDir = mkdtempSync(join(tmpdir(), 'baton-bench-'));
  const adminKey = `bench-admin-${randomBytes(16).toString('hex')}`;
  const masterKey = randomBytes(32).toString('hex');
  const entry = serviceEntry(ROOT, out);
  /** A service process on `databaseUrl`, with a tenant, a trusted root and a verify API key. */
  const startService = async (name: string, databaseUrl: string, tenantName: string): Promise<Target & { tenant: Tenant }> => {
    const port = await freePort();
    const ownDir = join(dataDir!, tenantName);
    mkdirSync(ownDir);
    const child = await startChild({
      name,
      script: entry.script,
      cwd: ROOT,
      port,
      readyPath: '/readyz',
      env: {
        PORT: String(port),
        HOST: '127.0.0.1',
        DATABASE_URL: databaseUrl,
        BATON_ADMIN_KEY: adminKey,
        BATON_MASTER_KEY: masterKey,
        BATON_DB_POOL: String(CFG.pool),
        BATON_WORKERS: String(CFG.workers),
        BATON_LOG_LEVEL: 'warn',
        BATON_INVOCATION_MAX_AGE: '900',
        BATON_DATA_DIR: ownDir,
      },
    });
    const tenant = await setupTenant(child.url, adminKey, tenantName);
    return {
      child,
      url: child.url,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${tenant.verifyKey}` },
      pids: () => [child.pid, ...childrenOf(child.pid)],
      tenant,
    };
  };
  const main = await startService('baton service', pg.url, 'bench');
  out(
    `  service: ${entry.label}, BATON_WORKERS=${CFG.workers}, BATON_DB_POOL=${CFG.pool} (per worker); ${CFG.seconds}s per phase; load generator: ${CLIENT === 'raw' ? 'raw sockets' : CLIENT} keep-alive, closed loop, pre-signed bodies`,
  );
  const { tenant, headers } = main;
  /** Runs that ended early because a worker used up its pre-signed bodies (see the NOTE at the end). */
  const ranDry = new Set<string>();
  const noteDry = (name: string, r: LoadResult): void => {
    if (r.exhausted) ranDry.add(name);
  };
  const pgPids = () => pg!.pids();

  /** Verifies/s the bodies of a phase are signed for; the warm-up raises it to what it measured. */
  let rate = START_RATE;
  let workerCap = WORKER_RATE_FLOOR;
  /** A phase's bodies signed (never during a measurement) and every connection warmed up on them. */
  const prepare = async (
    name: string,
    chains: readonly Chain[],
    args?: Record<string, unknown>,
    okStatus = 200,
    target: Target = main,
  ): Promise<Prepared> => {
    const perWorker = bodiesPerWorker(rate, chains.length, CFG.seconds, workerCap);
    log(`${name}: signing ${chains.length} x ${perWorker}`);
    const b = chains.map((c) => presign(c, perWorker, args));
    // Warm-up: caches and prepared statements of every connection; the measurement starts after these.
    const warm = 20;
    await runLoad({
      url: target.url,
      path: '/v1/verify',
      headers: target.headers,
      bodies: b.map((x) => x.slice(0, warm)),
      seconds: 0.5,
      client: CLIENT,
      okStatus,
    });
    return { name, target, bodies: b, cursors: b.map(() => warm), okStatus };
  };
  const measure = async (p: Prepared, seconds: number): Promise<Slice> => {
    const cpu = startCpuSample({ service: p.target.pids, postgres: pgPids });
    const result = await runLoad({
      url: p.target.url,
      path: '/v1/verify',
      headers: p.target.headers,
      bodies: p.bodies,
      cursors: p.cursors,
      seconds,
      client: CLIENT,
      okStatus: p.okStatus,
    });
    const sample = cpu();
    if (result.ok !== result.requests) log(`${p.name}: ${result.requests - result.ok} unexpected answers, first: ${result.firstError}`);
    noteDry(p.name, result);
    return { result, cpu: sample };
  };
  /** One closed-loop phase: one chain per worker, CPU sampled. */
  const phase = async (name: string, chains: readonly Chain[], args?: Record<string, unknown>, okStatus = 200): Promise<Phase> => {
    await drainLog(name);
    const p = await prepare(name, chains, args, okStatus);
    log(`${name}: measuring`);
    return joinSlices(name, [await measure(p, CFG.seconds)]);
  };
  /**
   * Sides whose ratios are goals, measured in turns: each runs `rounds` slices of
   * seconds/rounds, every round in the reverse order of the one before (A B C, C B A, ...), so a
   * machine that speeds up or slows down during the group weighs on every side alike. Answers
   * each side's slices, in order.
   */
  const inTurns = async <T>(label: string, sides: readonly ((seconds: number) => Promise<T>)[]): Promise<T[][]> => {
    const slice = CFG.seconds / CFG.rounds;
    const slices = sides.map((): T[] => []);
    for (let r = 0; r < CFG.rounds; r++) {
      const order = sides.map((_, i) => i);
      if (r % 2 === 1) order.reverse();
      log(`${label}: round ${r + 1} of ${CFG.rounds} (${sides.length} slices of ${f2(slice)} s)`);
      for (const i of order) slices[i]!.push(await sides[i]!(slice));
    }
    return slices;
  };
  /** Phases compared with each other, in turns. */
  const compared = async (preps: readonly Prepared[]): Promise<Phase[]> => {
    const slices = await inTurns(
      'compared phases',
      preps.map((p) => (seconds: number) => measure(p, seconds)),
    );
    return preps.map((p, i) => joinSlices(p.name, slices[i]!));
  };

  // The chains of the phases on the main service.
  const two32 = independentChains(tenant.operator, 32, 2);
  const sib32 = siblingChains(tenant.operator, 32, 2);
  const d1 = independentChains(tenant.operator, 32, 1);
  const d16 = independentChains(tenant.operator, 32, 16);
  const exhausted = independentChains(tenant.operator, 32, 2, { ...BENCH_POLICY, max_calls: 0 });
  for (const set of [two32, sib32, d1, d16, exhausted]) await registerChains(main.url, set);

  // pgbench: the same durable work; clients on their own chains.
  const probe = presign(two32[0]!, 1)[0]!;
  const probeRes = await fetch(`${main.url}/v1/verify`, { method: 'POST', headers, body: probe });
  const probeBody = (await probeRes.json()) as { service_receipt: { jws: string; kid: string } };
  const script = await preparePgbench(
    sql,
    pg.dir,
    {
      tenantId: tenant.id,
      keyId: tenant.verifyKeyId,
      kid: probeBody.service_receipt.kid,
      invocationBytes: (JSON.parse(probe.toString('utf8')) as { invocation: string }).invocation.length,
      serviceReceiptBytes: probeBody.service_receipt.jws.length,
    },
    64,
  );
  const pgb = async (clients: number, seconds: number) => runPgbench(bin, pg!.url, script, clients, seconds);
  // pgbench's service receipts join the log like a verify's: the next phases must not pay for them.
  // Nor must a phase pay for the receipts of the one before it: the integrator logs them in rounds
  // (every 250 ms), so a few hundred are still queued when a phase ends.
  /** Waits for the log to take every pending service receipt; says so unless `quiet` and it took under a second. */
  const drainLog = async (before?: string, quiet = false) => {
    const t0 = performance.now();
    const pending = await waitForLogDrained(sql!, 300_000, (n) => log(`waiting for the log integrator: ${f0(n)} service receipts pending`));
    if (pending > 0 && !(quiet && performance.now() - t0 < 1000))
      log(
        `${before ?? 'log'}: ${f0(pending)} service receipts were still waiting for the log (${f2((performance.now() - t0) / 1000)} s to drain)`,
      );
  };
  // pgbench's single client, briefly, only to size one closed-loop worker's bodies (workerCap).
  log('pgbench, 1 client for 1 s: sizing the 1-in-flight bodies');
  workerCap = Math.max(WORKER_RATE_FLOOR, 2 * (await pgb(1, 1)).tps);
  await drainLog();
  // The first phase must not pay for warming up: V8 compiling the service's code, every pool
  // connection compiling the verify functions and making its plans.
  log(`warming up (${CFG.warmup} s, not measured)`);
  const warmup = await warmUpMeasuringRate({
    seconds: CFG.warmup,
    startRps: START_RATE,
    workers: two32.length,
    sign: (perWorker) => two32.map((c) => presign(c, perWorker)),
    run: (bodies, seconds) => runLoad({ url: main.url, path: '/v1/verify', headers, bodies, seconds, client: CLIENT }),
  });
  rate = Math.max(START_RATE, warmup.rps);
  log(`warm-up: up to ${f0(warmup.rps)} verifies/s over ${warmup.rounds.length} rounds; phases signed for ${f0(BODY_MARGIN * rate)}/s`);
  await drainLog();

  const phases: Phase[] = [];
  // The 32-in-flight phases compared with each other, in turns. The allows of two32 go first: the
  // block-D denials below send through the same chains, which must not run out of calls first.
  const group = [
    await prepare('2-hop independent, 32 in flight', two32),
    await prepare('2-hop siblings of one counted root, 32', sib32),
    await prepare('depth 1, 32', d1),
    await prepare('depth 16, 32', d16),
    await prepare('deny, block D (tool not allowed), 32', two32, { ...BENCH_ARGS, tool: 'delete_db' }, 403),
    await prepare('deny, block G (CALLS_EXHAUSTED), 32', exhausted, BENCH_ARGS, 403),
  ];
  const [a32, s32, c1, c16, denyD, denyG] = (await compared(group)) as [Phase, Phase, Phase, Phase, Phase, Phase];
  phases.push(a32, s32, c1, c16, denyD, denyG);

  /**
   * The ceilings: pgbench and /v1/verify at the same concurrency take turns, as the compared phases
   * do (`rounds` slices each, every round in the reverse order of the one before), the log drained
   * before every slice so neither side pays for the other's service receipts. Run at the start and
   * the end of the bench instead (until stop 30), pgbench's two 32-client runs read 3,638 and 2,612
   * tx/s in one run: a ratio against their mean moved with whatever the minutes between did.
   */
  const ceilingTurns = async (clients: number, chains: readonly Chain[]): Promise<{ verify: Phase; pgbench: PgbenchResult[] }> => {
    await drainLog();
    const p = await prepare(`2-hop independent, ${clients}, turns with pgbench`, chains);
    // Each slice starts with the log drained, so neither side pays for the other's service receipts.
    const [pgbench, verify] = (await inTurns<PgbenchResult | Slice>(p.name, [
      async (seconds) => {
        await drainLog(`${p.name}, before pgbench`, true);
        return pgb(clients, seconds);
      },
      async (seconds) => {
        await drainLog(`${p.name}, before the verifies`, true);
        return measure(p, seconds);
      },
    ])) as [PgbenchResult[], Slice[]];
    return { verify: joinSlices(p.name, verify), pgbench };
  };
  const turns32 = await ceilingTurns(32, two32);
  const turns8 = await ceilingTurns(8, two32.slice(0, 8));
  const turns1 = await ceilingTurns(1, two32.slice(0, 1));
  const [v32, a8, a1] = [turns32.verify, turns8.verify, turns1.verify];
  const [pgb32, pgb8, pgb1] = [joinPgbenchRuns(turns32.pgbench), joinPgbenchRuns(turns8.pgbench), joinPgbenchRuns(turns1.pgbench)];
  phases.push(v32, a8, a1);

  // Allows of 16 workers alone, then beside 16 workers flooding denials.
  const alone16 = await phase('2-hop allows, 16 in flight', two32.slice(0, 16));
  const floodBodies = exhausted.slice(0, 16).map((c) => presign(c, bodiesPerWorker(rate, 16, CFG.seconds, workerCap), BENCH_ARGS));
  const allowBodies = two32.slice(0, 16).map((c) => presign(c, bodiesPerWorker(rate, 16, CFG.seconds, workerCap)));
  const [mixAllow, mixDeny] = await Promise.all([
    runLoad({ url: main.url, path: '/v1/verify', headers, bodies: allowBodies, seconds: CFG.seconds, client: CLIENT }),
    runLoad({ url: main.url, path: '/v1/verify', headers, bodies: floodBodies, seconds: CFG.seconds, client: CLIENT, okStatus: 403 }),
  ]);
  noteDry('allows beside denials', mixAllow);
  noteDry('denials beside allows', mixDeny);
  const mixAllowRps = mixAllow.ok / mixAllow.seconds;
  const mixDenyRps = mixDeny.ok / mixDeny.seconds;

  // 10^3 vs 10^6 stored DRs, in turns like the group above: the same machine minutes for both
  // sides. One database cannot hold both sizes at once, so each side gets a database of its own
  // in the same cluster (its shared buffers, WAL and disk) and a service of its own, started,
  // loaded, warmed up and settled alike; only the number of DRs differs. The main service stops
  // first: its pool and log integrator are no part of this comparison.
  await main.child.stop();
  const stores: { target: Target; db: postgres.Sql; stored: number; bulkSeconds: number; chains: Chain[] }[] = [];
  /** Every client opened here, ended on the way out (a failure mid-setup included). */
  const clients: postgres.Sql[] = [];
  try {
    for (const [side, bulk] of [
      ['small', SMALL_STORE],
      ['large', CFG.bulk],
    ] as const) {
      const databaseUrl = await pg.createDatabase(`bench_${side}`);
      const db = postgres(databaseUrl, { max: 2, onnotice: () => {} });
      clients.push(db);
      const target = await startService(`baton service (${side} store)`, databaseUrl, `stored-${side}`);
      log(`${side} store: bulk-loading ${f0(bulk)} DRs`);
      const bulkSeconds = await bulkLoadDelegations(db, target.tenant.id, 10_000_000, bulk, 2);
      const chains = independentChains(target.tenant.operator, 32, 2);
      await registerChains(target.url, chains);
      stores.push({ target, db, stored: await delegationCount(db, target.tenant.id), bulkSeconds, chains });
    }
    // Both fresh processes compile their hot code before either is measured (see CFG.warmup).
    log(`stored-DR services: warming up both at once (${CFG.warmup} s, not measured)`);
    const warmBodies = (chains: readonly Chain[]) =>
      chains.slice(0, 16).map((c) => presign(c, bodiesPerWorker(rate / 2, 16, CFG.warmup, workerCap)));
    await Promise.all(
      stores.map(({ target, chains }) =>
        runLoad({
          url: target.url,
          path: '/v1/verify',
          headers: target.headers,
          bodies: warmBodies(chains),
          seconds: CFG.warmup,
          client: CLIENT,
        }),
      ),
    );
    for (const { db } of stores) {
      await waitForLogDrained(db, 300_000);
      await settleDatabase(db);
    }
  } catch (e) {
    await Promise.all(clients.map((db) => db.end({ timeout: 2 }).catch(() => {})));
    throw e;
  }
  const [smallStore, largeStore] = stores as [(typeof stores)[0], (typeof stores)[0]];
  const [before, after] = (await compared([
    await prepare(`2-hop fresh chains, 32, ${f0(smallStore.stored)} DRs stored`, smallStore.chains, undefined, 200, smallStore.target),
    await prepare(`2-hop fresh chains, 32, ${f0(largeStore.stored)} DRs stored`, largeStore.chains, undefined, 200, largeStore.target),
  ])) as [Phase, Phase];
  await Promise.all(clients.map((db) => db.end({ timeout: 2 })));
  const small = smallStore.stored;
  const big = largeStore.stored;
  const bulkS = largeStore.bulkSeconds;
  phases.push(alone16, before, after);

  out();
  /** "min-max" of a phase's or a ceiling's slices. */
  const range = (values: readonly number[], f: (n: number) => string) => `${f(Math.min(...values))}-${f(Math.max(...values))}`;
  const sliceRange = (values: readonly number[], f: (n: number) => string) => (values.length > 1 ? ` (slices: ${range(values, f)})` : '');
  const pgbenchMachineUs = (r: PgbenchResult) => (r.machineBusy / r.tps) * 1e6;
  out(
    `== pgbench, the same durable work (insert invocation, 2 conditional counter updates, insert service receipt), -M prepared, in turns with the verifies at the same concurrency ==`,
  );
  out(
    `  32 clients: ${f0(pgb32.tps)} tx/s${sliceRange(
      turns32.pgbench.map((r) => r.tps),
      f0,
    )}, machine CPU ${f0(pgbenchMachineUs(pgb32))} us/tx;  1 client: latency ${f2(pgb1.latencyMs)} ms${sliceRange(
      turns1.pgbench.map((r) => r.latencyMs),
      f2,
    )}`,
  );
  out(
    `  8 clients: p50 ${f2(pgb8.p50Ms)} ms, p99 ${f2(pgb8.p99Ms)} ms${sliceRange(
      turns8.pgbench.map((r) => r.p99Ms),
      f2,
    )}`,
  );
  out(
    `  cores stolen by the host (steal time) during the runs, 32 / 8 / 1 clients: ${[pgb32, pgb8, pgb1].map((r) => f2(r.machineSteal)).join(', ')}`,
  );
  out();
  out('== POST /v1/verify phases ==');
  out(
    '  phase                                          req/s   p50 ms  p99 ms  answers  svc cores  pg cores  svc us/req  pg us/req  gen us/req  steal',
  );
  for (const p of phases) {
    const us = (cores: number | undefined) => ((cores ?? 0) * 1e6) / p.rps;
    out(
      `  ${p.name.padEnd(45)} ${f0(p.rps).padStart(6)} ${f2(p.p50).padStart(8)} ${f2(p.p99).padStart(7)} ${`${p.result.ok}/${p.result.requests}`.padStart(8)} ${f2(p.cpu.cores['service'] ?? 0).padStart(10)} ${f2(p.cpu.cores['postgres'] ?? 0).padStart(9)} ${f0(us(p.cpu.cores['service'])).padStart(11)} ${f0(us(p.cpu.cores['postgres'])).padStart(10)} ${f0(p.result.clientCpuUs / Math.max(1, p.result.requests)).padStart(11)} ${f2(p.cpu.machineSteal).padStart(6)}`,
    );
  }
  out(
    `  allows at 16 in flight beside 16 in flight of CALLS_EXHAUSTED denials: ${f0(mixAllowRps)} req/s (alone: ${f0(alone16.rps)}), the denials ${f0(mixDenyRps)} req/s`,
  );
  if (ranDry.size > 0)
    out(
      `  NOTE: ran out of pre-signed bodies and ended early (the warm-up measured a slower rate than these phases ran; raise --rate): ${[...ranDry].join('; ')}`,
    );
  out(`  bulk load of ${f0(CFG.bulk)} DRs took ${f0(bulkS)} s${CFG.bulk < 1_000_000 ? '  (NOTE: below 10^6: --quick or --bulk)' : ''}`);
  out();
  out('== Goals (issue 10) ==');
  const row = (what: string, value: string, goal: string, met: boolean) =>
    out(`  ${what.padEnd(58)} ${value.padStart(10)}   goal ${goal.padEnd(8)} ${met ? 'met' : 'NOT met'}`);
  const thr = v32.rps / pgb32.tps;
  row('32 in flight: verifies/s / pgbench 32-client tx/s (turns)', f2(thr), '>= 0.6', thr >= 0.6);
  // Absolute, as the issue sets it; pgbench's p99 at 8 clients is this machine's floor for it.
  row(`8 in flight: p99 ms (pgbench, 8 clients: ${f2(pgb8.p99Ms)})`, f2(a8.p99), '<= 10', a8.p99 <= 10);
  const lat = a1.p50 / pgb1.latencyMs;
  row('1 in flight: p50 / pgbench 1-client latency (turns)', f2(lat), '<= 1.5', lat <= 1.5);
  const sib = s32.rps / a32.rps;
  row('siblings under one counted root / independent chains (turns)', f2(sib), '>= 0.8', sib >= 0.8);
  const deep = c16.rps / c1.rps;
  row('depth 16 / depth 1 (turns)', f2(deep), '>= 0.7', deep >= 0.7);
  const bulk = after.rps / before.rps;
  row(`${f0(big)} / ${f0(small)} stored DRs`, f2(bulk), '0.9-1.1', bulk >= 0.9 && bulk <= 1.1);
  const usOf = (p: Phase, g: string) => ((p.cpu.cores[g] ?? 0) * 1e6) / p.rps;
  // A denial against the allows it took turns with: the same chains' shape, the same minutes.
  const denyCost = (p: Phase) => (usOf(p, 'service') + usOf(p, 'postgres')) / (usOf(a32, 'service') + usOf(a32, 'postgres'));
  row('deny, block D: CPU per request / allow (turns)', f2(denyCost(denyD)), '<= 1', denyCost(denyD) <= 1);
  row('deny, block G (CALLS_EXHAUSTED): CPU / allow (turns)', f2(denyCost(denyG)), '<= 1', denyCost(denyG) <= 1);
  // The flood holds half the in-flight slots, so a fair share is about half the allows' rate
  // alone; allows starved behind denials (a lock, a queue the denials jump) fall well below.
  const flood = mixAllowRps / alone16.rps;
  row('allows/s beside a denial flood / allows/s alone (16+16)', f2(flood), '>= 0.4', flood >= 0.4);
  const allowUs = (g: string) => (usOf(a32, g) + usOf(v32, g)) / 2;
  out(
    `  CPU per verify at 32 in flight (means of 2): service ${f0(allowUs('service'))} us (runs: ${f0(usOf(a32, 'service'))}, ${f0(usOf(v32, 'service'))}), PostgreSQL ${f0(allowUs('postgres'))} us (runs: ${f0(usOf(a32, 'postgres'))}, ${f0(usOf(v32, 'postgres'))})`,
  );
  // How much the machine moved while the compared phases took turns: a ratio far inside this
  // spread says less than its digits suggest.
  const spread = (p: Phase) => (p.sliceRps ? range(p.sliceRps, f0) : '-');
  out(
    `  req/s per slice in the compared phases (${CFG.rounds} rounds): ${[a32, s32, c1, c16, denyD, denyG].map((p) => `${p.name.split(',')[0]!.replace('2-hop ', '')} ${spread(p)}`).join('; ')}; ${f0(small)} stored DRs ${spread(before)}; ${f0(big)} stored ${spread(after)}; beside pgbench, 32 in flight ${spread(v32)}`,
  );
  out(
    `  machine busy during the 32-in-flight phase: ${f2(a32.cpu.machineBusy)} of ${cpus().length} cores (and ${f2(a32.cpu.machineSteal)} taken by the host)`,
  );
  // Where the ratio goes: the whole machine's CPU for one verify against one pgbench transaction.
  const machineUs = (p: Phase) => (p.cpu.machineBusy / p.rps) * 1e6;
  out(
    `  machine CPU per verify at 32 in flight: ${f0((machineUs(a32) + machineUs(v32)) / 2)} us (service, PostgreSQL, load generator, anything else); per pgbench transaction: ${f0(pgbenchMachineUs(pgb32))} us`,
  );
  // Whether a goal missed here is the machine's or the verify's: bounds from the CPU per verify
  // each phase cost (bench/lib/floors.ts), printed beside the goals they explain.
  out();
  out(`== What ${cpus().length} cores allow at the CPU per verify measured (Little's law, every core busy) ==`);
  const tail = closedLoopTailFloor(8, machineUs(a8), cpus().length, { meanMs: meanOf(a8.result.latencies), p99Ms: a8.p99 }, 10);
  out(
    `  8 in flight: ${f0(machineUs(a8))} us of machine CPU per verify allow a mean of at least ${f2(tail.meanFloorMs)} ms (measured ${f2(meanOf(a8.result.latencies))}); at this phase's p99 / mean (${f2(tail.tailShape)}) that is a p99 of at least ${f2(tail.p99FloorMs)} ms. A p99 of 10 ms at that shape needs at most ${f0(tail.usPerRequestForGoal)} us per verify (pgbench: ${f0(pgbenchMachineUs(pgb32))} us per transaction at 32 clients)`,
  );
  const depthBound = cpuBoundRatio(machineUs(c1), machineUs(c16), 0.7);
  out(
    `  depth: machine CPU per verify ${f0(machineUs(c1))} us at depth 1, ${f0(machineUs(c16))} us at depth 16: ${f2(depthBound.ratio)} when the machine is the limit; 0.7 needs depth 16 at ${f0(depthBound.slowUsForGoal)} us or less`,
  );
  out();
  out(`wall time ${f0((performance.now() - started) / 1000)} s`);
}

main()
  .then(cleanup)
  .catch(async (e: unknown) => {
    const cause = e instanceof Error && e.cause !== undefined ? `\ncause: ${String((e.cause as Error).stack ?? e.cause)}` : '';
    process.stderr.write(`bench:verify failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}${cause}\n`);
    await cleanup();
    process.exit(1);
  });
