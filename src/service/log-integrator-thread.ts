/**
 * The log integrator in a worker thread (node:worker_threads) with its own
 * PostgreSQL connection, so its hashing, checkpoint signing and queries do
 * not take turns of the event loop that answers verifies. The rounds, the
 * advisory lock and the interval rules are startIntegrator's, unchanged
 * (./log-integrator.ts); the thread only hosts them.
 *
 * PostgreSQL only: an embedded PGlite database is one connection inside the
 * main thread's memory, which another thread cannot open, so there the
 * integrator stays on the main thread (src/server.ts).
 */
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { RunningIntegrator } from './log-integrator.js';
import type { Logger } from './log.js';
import { errorForLog } from '../store/errors.js';

/** What the thread starts from (structured-cloned into it). */
export interface IntegratorThreadData {
  readonly databaseUrl: string;
  readonly masterKey: Uint8Array;
  /** The key this process signs with: checkpoints are signed with it too, even after a rotation. */
  readonly kid: string;
  readonly logName: string;
  readonly intervalMs: number;
}

export type ToIntegratorThread = { readonly type: 'stop' };
export type FromIntegratorThread = {
  readonly type: 'log';
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly msg: string;
  readonly fields?: Record<string, unknown>;
};

/**
 * How long stop() lets the thread finish its round and close its connection before ending it (its
 * transaction then rolls back, and the next start integrates those receipts): a round stuck on a
 * hung database must leave the stop's 10 s (server.ts) time to close the pool.
 */
const STOP_GRACE_MS = 3_000;
/** A thread that died (a bug, not a failed round: those it retries itself) is replaced after the interval, at least this. */
const MIN_RESPAWN_MS = 1_000;

// Same extension as this module: .js in the built package, .ts when run from the sources.
const ENTRY = new URL(`./log-integrator-worker${extname(fileURLToPath(import.meta.url))}`, import.meta.url);

function createWorker(workerData: IntegratorThreadData): Worker {
  if (!ENTRY.pathname.endsWith('.ts')) return new Worker(ENTRY, { workerData });
  // From the sources (tsx, vitest) the thread needs the TypeScript loader as well, registered before
  // its entry is resolved: an inherited `--import tsx` comes too late for a worker's entry on Node 20.
  const tsx = import.meta.resolve('tsx/esm/api');
  const boot = `import(${JSON.stringify(tsx)}).then((t) => { t.register(); return import(${JSON.stringify(ENTRY.href)}); });`;
  return new Worker(boot, { eval: true, workerData });
}

/**
 * Starts the integrator thread. Its log lines come through `log`. stop()
 * asks it to finish the round in flight and close its connection, and
 * resolves when the thread has exited.
 */
export function startIntegratorThread(data: IntegratorThreadData, log: Logger): RunningIntegrator {
  let stopping = false;
  let worker: Worker | undefined;
  let exited: Promise<void> = Promise.resolve();
  let respawn: NodeJS.Timeout | undefined;
  const spawn = () => {
    respawn = undefined;
    const w = createWorker(data);
    worker = w;
    w.on('message', (m: FromIntegratorThread) => {
      if (m.type === 'log') log[m.level](m.msg, m.fields);
    });
    w.on('error', (e) => log.error('the log integrator thread failed', errorForLog(e)));
    exited = new Promise((resolve) =>
      w.once('exit', (code) => {
        worker = undefined;
        if (!stopping) {
          log.warn('the log integrator thread exited; starting another', { code });
          respawn = setTimeout(spawn, Math.max(data.intervalMs, MIN_RESPAWN_MS));
        }
        resolve();
      }),
    );
  };
  spawn();
  return {
    async stop() {
      stopping = true;
      if (respawn !== undefined) clearTimeout(respawn);
      const w = worker;
      if (!w) return;
      w.postMessage({ type: 'stop' } satisfies ToIntegratorThread);
      // An upper bound only: a round stuck on a dead connection must not hold the shutdown.
      const force = setTimeout(() => {
        log.warn(
          `the log integrator's round did not end within ${STOP_GRACE_MS / 1000} s of the stop (a database that does not answer?): ended; the receipts it held are integrated at the next start`,
        );
        void w.terminate();
      }, STOP_GRACE_MS);
      await exited;
      clearTimeout(force);
    },
  };
}
