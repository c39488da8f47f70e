/**
 * npm run bench:profile [-- --seconds N --inflight N --cpu-prof]
 *
 * CPU cost of one allowed /v1/verify, for finding where it goes: the service
 * and PostgreSQL CPU per verify (from /proc, stable on a shared machine,
 * unlike verifies/s), and with --cpu-prof a V8 CPU profile of the service
 * written to .bench-profile/ (open it in Chrome DevTools). fsync off: this
 * measures CPU, not durability.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findPgBin, freePort, startPgCluster, type PgCluster } from '../test/setup/pg-cluster.js';
import { liveChildren, startChild } from './lib/child.js';
import { independentChains, presignAll, registerChains, setupTenant } from './lib/chains.js';
import { percentile, runLoad } from './lib/load.js';
import { childrenOf, postgresPids, startCpuSample } from './lib/proc.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const seconds = arg('seconds', 5);
const inflight = arg('inflight', 32);
const depth = arg('depth', 2);
const profile = process.argv.includes('--cpu-prof');
/** Count instructions with perf stat (stable on a loaded machine, unlike time). */
const usePerf = process.argv.includes('--perf');

/** User and kernel instructions retired by `pids` over the next `s` seconds (perf stat). */
function instructions(pids: readonly number[], s: number): Promise<{ user: number; kernel: number }> {
  return new Promise((resolve, reject) => {
    const p = spawn('perf', ['stat', '-x', ',', '-e', 'instructions:u,instructions:k', '-p', pids.join(','), '--', 'sleep', String(s)], {
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

let pg: PgCluster | undefined;
let dataDir: string | undefined;
async function cleanup(): Promise<void> {
  for (const c of liveChildren()) await c.stop().catch(() => {});
  await pg?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
}

async function main(): Promise<void> {
  const bin = findPgBin();
  if (!bin) throw new Error('no PostgreSQL server binaries found');
  pg = await startPgCluster(bin, { durable: false });
  const port = await freePort();
  dataDir = mkdtempSync(join(tmpdir(), 'baton-prof-'));
  const adminKey = `prof-admin-${randomBytes(16).toString('hex')}`;
  const profDir = join(ROOT, '.bench-profile');
  if (profile) mkdirSync(profDir, { recursive: true });
  const service = await startChild({
    name: 'baton service',
    script: 'src/main.ts',
    cwd: ROOT,
    port,
    readyPath: '/readyz',
    nodeArgs: profile ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : [],
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
    },
  });
  const tenant = await setupTenant(service.url, adminKey, 'prof');
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${tenant.verifyKey}` };
  const chains = independentChains(tenant.operator, inflight, depth);
  await registerChains(service.url, chains);
  const { bodies } = presignAll(chains, Math.ceil((2000 * (seconds + 1)) / inflight) + 50);
  const load = (b: Buffer[][], s: number) =>
    runLoad({ url: service.url, path: '/v1/verify', headers, bodies: b, seconds: s, client: 'http' });
  await load(
    bodies.map((x) => x.slice(0, 30)),
    1,
  );
  const cpu = startCpuSample({
    service: () => [service.pid, ...childrenOf(service.pid)],
    postgres: () => postgresPids(join(pg!.dir, 'data')),
  });
  const counting = usePerf
    ? {
        service: instructions([service.pid, ...childrenOf(service.pid)], seconds),
        postgres: instructions(postgresPids(join(pg.dir, 'data')), seconds),
      }
    : undefined;
  const r = await load(
    bodies.map((x) => x.slice(30)),
    seconds,
  );
  const sample = cpu();
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
    `${inflight} in flight, depth ${depth}: ${Math.round(rps)} verifies/s (${r.ok}/${r.requests} ok${r.firstError ? `, first error ${r.firstError}` : ''}), p50 ${percentile(r.latencies, 0.5).toFixed(2)} ms, p99 ${percentile(r.latencies, 0.99).toFixed(2)} ms\n` +
      `CPU per verify: service ${us('service')} us, PostgreSQL ${us('postgres')} us; machine busy ${sample.machineBusy.toFixed(2)} cores\n`,
  );
  await service.stop();
  if (profile) process.stdout.write(`profile written to ${profDir}\n`);
}

main()
  .then(cleanup)
  .catch(async (e: unknown) => {
    process.stderr.write(`bench:profile failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    await cleanup();
    process.exit(1);
  });
