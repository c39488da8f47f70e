/**
 * npm run bench:tlog [-- --seconds N | --inflight N | --interval MS | --rounds N | --baseline DIR | --source]
 *
 * The transparency log under the verify hot path: the service as its own
 * process on a throwaway durable PostgreSQL 15, POST /v1/verify allowed in a
 * closed loop (`inflight` requests at once, pre-signed by-reference bodies).
 * Phases alternate between the service without its integrator
 * (BATON_TLOG_INTERVAL_MS=0: every decision still queues its leaf in the
 * same statement) and with it every `interval` ms, `rounds` times each, so
 * both see the same machine. Prints verifies/s of each and their ratio (the
 * integrator's cost), leaves integrated per second, and the lag from a
 * leaf's commit to its inclusion, p50 and p99, with the load average: the
 * machine is shared, read the ratio. Ratios are also given per round (each
 * "on" phase against the "off" phase just before it) and their median,
 * which a load swing between rounds disturbs less, and the service's CPU
 * per verify (all threads, and the main thread that answers requests).
 *
 * --baseline DIR adds a third phase to every round: the service of another
 * checkout of this repository (same schema: DIR/src/main.ts, its
 * node_modules), integrator on, to compare a change with what it replaces
 * in one run, e.g. `git archive <commit> | tar -x -C DIR` with a
 * node_modules link. The service is the compiled one npm start runs (built
 * first when stale), unless --source (BENCH_SOURCE=1) or --baseline: a
 * baseline checkout runs from its sources, so then both do, through tsx.
 *
 * Environment (flags win): BENCH_SECONDS (8), BENCH_INFLIGHT (32),
 * BENCH_TLOG_INTERVAL_MS (250), BENCH_ROUNDS (2), BENCH_RATE (400),
 * BATON_PG_BIN.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { findPgBin, freePort, HOW_TO_FIX, startPgCluster, type PgCluster } from './lib/pg-cluster.js';
import { independentChains, presignAll, registerChains, setupTenant, type Tenant } from './lib/chains.js';
import { serviceEntry, startChild, type Child } from './lib/child.js';
import { stopOnExit } from './lib/cleanup.js';
import { CLK_TCK, processTicks } from './lib/proc.js';
import { clientFromEnv, runLoad } from './lib/load.js';
import { waitForLogDrained } from './lib/sql.js';

/** The load generator's client (BENCH_CLIENT, default raw sockets: see lib/load.ts). */
const CLIENT = clientFromEnv();

const { values } = parseArgs({
  options: {
    seconds: { type: 'string' },
    inflight: { type: 'string' },
    interval: { type: 'string' },
    rounds: { type: 'string' },
    rate: { type: 'string' },
    baseline: { type: 'string' },
    // Read by serviceEntry (lib/child.ts).
    source: { type: 'boolean' },
  },
});
const num = (flag: string | undefined, env: string, fallback: number): number => {
  const n = Number(flag ?? process.env[env] ?? fallback);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${env} must be a positive number`);
  return n;
};
const seconds = num(values.seconds, 'BENCH_SECONDS', 8);
const inflight = num(values.inflight, 'BENCH_INFLIGHT', 32);
const intervalMs = num(values.interval, 'BENCH_TLOG_INTERVAL_MS', 250);
const rounds = num(values.rounds, 'BENCH_ROUNDS', 2);
const rate = num(values.rate, 'BENCH_RATE', 400);
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BASELINE = values.baseline === undefined ? undefined : resolve(values.baseline);

const log = (line: string) => process.stderr.write(`[bench] ${line}\n`);
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

function percentile(sorted: readonly number[], p: number): number {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

let pg: PgCluster | undefined;
let sql: postgres.Sql | undefined;
let dataDir: string | undefined;
const cleanup = stopOnExit(() => ({ pg, sql, dataDir }), log);

interface PhaseResult {
  readonly verifiesPerSecond: number;
  /** Commit-to-inclusion lags of the phase's leaves (ms, sorted); empty without the integrator. */
  readonly lags: number[];
  readonly leavesPerSecond: number;
  /** Leaves per round that found any (one checkpoint per such round: one tenant). */
  readonly leavesPerRound: number;
  /**
   * The service's CPU per verify during the load (ms): all its threads, and
   * its main thread (the event loop answering requests) alone. Less
   * disturbed by other processes on the machine than verifies/s.
   */
  readonly cpuMsPerVerify: { readonly all: number; readonly main: number };
}

async function main(): Promise<void> {
  const bin = findPgBin();
  if (!bin) {
    process.stderr.write(`${HOW_TO_FIX}\n`);
    process.exit(2);
  }
  const loadBefore = load();
  pg = await startPgCluster({ binDir: bin, durable: true });
  sql = postgres(pg.url, { max: 2, onnotice: () => {} });
  dataDir = mkdtempSync(join(tmpdir(), 'baton-tlog-bench-'));
  const adminKey = `bench-admin-${randomBytes(16).toString('hex')}`;
  const masterKey = randomBytes(32).toString('hex');
  const port = await freePort();

  // A baseline checkout runs from its sources (it may predate the build), so this one does too.
  const entry = BASELINE ? { script: 'src/main.ts', label: 'both from src/ through tsx (--baseline)' } : serviceEntry(ROOT, log);
  log(`service: ${entry.label}`);
  const startService = (tlogIntervalMs: number, cwd = ROOT): Promise<Child> =>
    startChild({
      name: `baton service${cwd === ROOT ? '' : ` of ${cwd}`} (integrator ${tlogIntervalMs === 0 ? 'off' : `every ${tlogIntervalMs} ms`})`,
      script: entry.script,
      cwd,
      port,
      readyPath: '/readyz',
      env: {
        PORT: String(port),
        HOST: '127.0.0.1',
        DATABASE_URL: pg!.url,
        BATON_ADMIN_KEY: adminKey,
        BATON_MASTER_KEY: masterKey,
        BATON_LOG_LEVEL: 'warn',
        BATON_INVOCATION_MAX_AGE: '3600',
        BATON_DATA_DIR: dataDir!,
        BATON_TLOG_INTERVAL_MS: String(tlogIntervalMs),
      },
    });

  let service = await startService(0);
  const tenant: Tenant = await setupTenant(service.url, adminKey, 'bench');
  const chains = independentChains(tenant.operator, inflight, 2);
  await registerChains(service.url, chains);
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${tenant.verifyKey}` };
  /** Waits until the running integrator has emptied the queue (leaves of an earlier phase). */
  const drained = () => waitForLogDrained(sql!, 120_000);

  /** `baseline`: the integrator on, in the service of the --baseline checkout. */
  const phase = async (kind: 'off' | 'on' | 'baseline'): Promise<PhaseResult> => {
    const integrator = kind !== 'off';
    await service.stop();
    service = await startService(integrator ? intervalMs : 0, kind === 'baseline' ? BASELINE : ROOT);
    if (integrator) await drained();
    const perWorker = Math.ceil((rate * seconds) / inflight) + 60;
    const { bodies } = presignAll(chains, perWorker);
    // Warm-up: caches and prepared statements of every connection.
    await runLoad({
      url: service.url,
      path: '/v1/verify',
      headers,
      bodies: bodies.map((b) => b.slice(0, 30)),
      seconds: 0.5,
      client: CLIENT,
    });
    if (integrator) await drained();
    const t = (await sql!<{ t: Date }[]>`select clock_timestamp() as t`)[0]!.t;
    const started = performance.now();
    const ticksBefore = processTicks(service.pid);
    const result = await runLoad({
      url: service.url,
      path: '/v1/verify',
      headers,
      bodies: bodies.map((b) => b.slice(30)),
      seconds,
      client: CLIENT,
    });
    const ticksAfter = processTicks(service.pid);
    const perVerify = (ticks: number) => ((ticks / CLK_TCK) * 1000) / result.ok;
    const cpuMsPerVerify = { all: perVerify(ticksAfter.all - ticksBefore.all), main: perVerify(ticksAfter.main - ticksBefore.main) };
    if (result.ok !== result.requests) log(`${result.requests - result.ok} unexpected answers, first: ${result.firstError}`);
    if (result.exhausted) log('a worker ran out of pre-signed bodies: raise --rate');
    if (!integrator)
      return { verifiesPerSecond: result.ok / result.seconds, lags: [], leavesPerSecond: NaN, leavesPerRound: NaN, cpuMsPerVerify };
    await drained();
    const elapsed = (performance.now() - started) / 1000;
    const lags = await sql!<{ ms: number }[]>`
      select (extract(epoch from (integrated_at - queued_at)) * 1000)::float8 as ms from log_leaves where queued_at >= ${t}`;
    return {
      verifiesPerSecond: result.ok / result.seconds,
      lags: lags.map((r) => Number(r.ms)).sort((a, b) => a - b),
      leavesPerSecond: lags.length / elapsed,
      leavesPerRound:
        lags.length / (await sql!<{ n: number }[]>`select count(*)::int as n from log_checkpoints where created_at >= ${t}`)[0]!.n,
      cpuMsPerVerify,
    };
  };

  const off: PhaseResult[] = [];
  const on: PhaseResult[] = [];
  const base: PhaseResult[] = [];
  for (let i = 0; i < rounds; i++) {
    log(`round ${i + 1}/${rounds}: without the integrator (load ${load()})`);
    off.push(await phase('off'));
    const withThis = async () => {
      log(`round ${i + 1}/${rounds}: with the integrator (load ${load()})`);
      on.push(await phase('on'));
    };
    const withBaseline = async () => {
      log(`round ${i + 1}/${rounds}: with the baseline's integrator (load ${load()})`);
      base.push(await phase('baseline'));
    };
    // Taking turns at going second, so a load that drifts within rounds favours neither.
    if (BASELINE && i % 2 === 1) await withBaseline();
    await withThis();
    if (BASELINE && i % 2 === 0) await withBaseline();
  }
  await service.stop();

  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const median = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  };
  const f = (n: number) => n.toFixed(1);
  const vOff = mean(off.map((p) => p.verifiesPerSecond));
  const cpu = (phases: PhaseResult[]) =>
    `${median(phases.map((p) => p.cpuMsPerVerify.all)).toFixed(3)} ms, main thread ${median(phases.map((p) => p.cpuMsPerVerify.main)).toFixed(3)} ms (medians)`;
  /** The integrator's lines for the phases `with` (this checkout's or the baseline's). */
  const report = (label: string, with_: PhaseResult[]): string[] => {
    const vOn = mean(with_.map((p) => p.verifiesPerSecond));
    const paired = with_.map((p, i) => p.verifiesPerSecond / off[i]!.verifiesPerSecond);
    const lags = with_.flatMap((p) => p.lags).sort((a, b) => a - b);
    const l = (s: string) => `  ${s.padEnd(31)}`;
    return [
      `${l(`verifies/s with ${label}`)}${f(vOn)}  (${with_.map((p) => f(p.verifiesPerSecond)).join(', ')})`,
      `${l('ratio with / without')}${(vOn / vOff).toFixed(3)} of means, ${(median(with_.map((p) => p.verifiesPerSecond)) / median(off.map((p) => p.verifiesPerSecond))).toFixed(3)} of medians  (goal >= ~1)`,
      `${l('ratio per round')}${paired.map((r) => r.toFixed(3)).join(', ')}; median ${median(paired).toFixed(3)}`,
      `${l('service CPU per verify')}${cpu(with_)}`,
      `${l('leaves integrated/s')}${f(mean(with_.map((p) => p.leavesPerSecond)))}  (${lags.length} leaves, ${f(median(with_.map((p) => p.leavesPerRound)))} per round)`,
      `${l('commit-to-inclusion lag p50')}${f(percentile(lags, 0.5))} ms`,
      `${l('commit-to-inclusion lag p99')}${f(percentile(lags, 0.99))} ms  (goal <= 1000)`,
      `${l('commit-to-inclusion lag max')}${f(lags[lags.length - 1] ?? NaN)} ms`,
    ];
  };
  process.stdout.write(
    [
      `tlog bench: POST /v1/verify (allows), ${inflight} in flight, ${seconds} s per phase, ${rounds} rounds of off/on${BASELINE ? '/baseline' : ''}, integrator every ${intervalMs} ms when idle, durable PostgreSQL`,
      `  load average                   before ${loadBefore}, after ${load()}`,
      `  verifies/s without integrator  ${f(vOff)}  (${off.map((p) => f(p.verifiesPerSecond)).join(', ')})`,
      `  service CPU per verify         ${cpu(off)}`,
      ...report('integrator', on),
      ...(BASELINE ? [`  baseline: ${BASELINE}`, ...report('its integrator', base)] : []),
    ].join('\n') + '\n',
  );
}

try {
  await main();
} finally {
  await cleanup();
}
