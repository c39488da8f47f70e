/**
 * npm run bench:tlog [-- --seconds N | --writers N | --interval MS]
 *
 * The transparency log under write load, on a throwaway durable PostgreSQL
 * 15: `writers` concurrent loops each insert a signed receipt per
 * transaction (the write every decision makes), first with the log trigger
 * disabled (the baseline), then with it and the integrator running every
 * `interval` ms. Reports receipts written per second in both phases (their
 * ratio is the cost of queuing a leaf), leaves integrated per second, and
 * the lag from a receipt's insert to its integration, p50 and p99.
 *
 * Environment (flags win): BENCH_SECONDS (8), BENCH_WRITERS (16),
 * BENCH_TLOG_INTERVAL_MS (250), BATON_PG_BIN.
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { sql } from 'drizzle-orm';
import { startIntegrator, integrateOnce } from '../src/service/log-integrator.js';
import { silentLogger } from '../src/service/log.js';
import { recordReceipt } from '../src/service/receipts.js';
import { loadServiceSigner } from '../src/service/signer.js';
import { openStore } from '../src/store/db.js';
import { countPending, inclusionLagsMs } from '../src/store/log.js';
import { tenants } from '../src/store/schema/index.js';
import { findPgBin, HOW_TO_FIX, startPgCluster } from '../test/setup/pg-cluster.js';

const { values } = parseArgs({
  options: { seconds: { type: 'string' }, writers: { type: 'string' }, interval: { type: 'string' } },
});
const seconds = Number(values.seconds ?? process.env['BENCH_SECONDS'] ?? 8);
const writers = Number(values.writers ?? process.env['BENCH_WRITERS'] ?? 16);
const intervalMs = Number(values.interval ?? process.env['BENCH_TLOG_INTERVAL_MS'] ?? 250);

function percentile(sorted: readonly number[], p: number): number {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const bin = findPgBin();
if (!bin) {
  process.stderr.write(`${HOW_TO_FIX}\n`);
  process.exit(2);
}
const cluster = await startPgCluster(bin, { durable: true });
process.on('exit', () => cluster.stopSync());
const store = await openStore({ databaseUrl: cluster.url, max: writers + 2 });
try {
  const signer = await loadServiceSigner(store.db, randomBytes(32), silentLogger);
  const tenantId = 'ten_bench';
  await store.db.insert(tenants).values({ id: tenantId, name: 'bench' });
  const now = Math.floor(Date.now() / 1000);

  /** Receipts written per second by `writers` closed loops for `seconds`. */
  const writePhase = async (): Promise<number> => {
    let written = 0;
    const end = performance.now() + seconds * 1000;
    await Promise.all(
      Array.from({ length: writers }, async (_, w) => {
        for (let i = 0; performance.now() < end; i++) {
          await recordReceipt(store.db, signer, { tenantId, kind: 'invocation.allowed', subject: `inv:${w}:${i}`, data: { w, i }, now });
          written++;
        }
      }),
    );
    return written / seconds;
  };

  await store.db.execute(sql`alter table receipts disable trigger receipts_queue_for_log`);
  const baseline = await writePhase();
  await store.db.execute(sql`alter table receipts enable trigger receipts_queue_for_log`);

  const since = new Date();
  const integrator = startIntegrator({ store, signer, log: silentLogger, logName: 'bench' }, intervalMs);
  const started = performance.now();
  const withLog = await writePhase();
  await integrator.stop();
  // Drain what the last ticks left, so every leaf of the phase is counted.
  while ((await countPending(store.db)) > 0) await integrateOnce({ store, signer, log: silentLogger, logName: 'bench' });
  const elapsed = (performance.now() - started) / 1000;
  const lags = (await inclusionLagsMs(store.db, since)).sort((a, b) => a - b);

  const f = (n: number) => n.toFixed(1);
  process.stdout.write(
    [
      `tlog bench: ${writers} writers, ${seconds} s per phase, integrator every ${intervalMs} ms, durable PostgreSQL`,
      `  receipts/s without the log     ${f(baseline)}`,
      `  receipts/s with the log        ${f(withLog)}  (ratio ${(withLog / baseline).toFixed(3)}, goal >= ~1)`,
      `  leaves integrated/s            ${f(lags.length / elapsed)}  (${lags.length} leaves)`,
      `  insert-to-inclusion lag p50    ${f(percentile(lags, 50))} ms`,
      `  insert-to-inclusion lag p99    ${f(percentile(lags, 99))} ms  (goal <= 1000)`,
    ].join('\n') + '\n',
  );
} finally {
  await store.close();
  await cluster.stop();
}
