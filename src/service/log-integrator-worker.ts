/**
 * Entry of the log integrator's worker thread (./log-integrator-thread.ts):
 * one PostgreSQL connection of its own (a round is one transaction, so one
 * is all it uses), the process's signing key, and startIntegrator's rounds
 * until the main thread says stop. Log lines go to the main thread's logger.
 */
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { openStore } from '../store/db.js';
import { errorForLog } from '../store/errors.js';
import { startIntegrator } from './log-integrator.js';
import type { FromIntegratorThread, IntegratorThreadData, ToIntegratorThread } from './log-integrator-thread.js';
import type { Logger } from './log.js';
import { loadServiceSignerByKid, type ServiceSigner } from './signer.js';

if (!parentPort) throw new Error('log-integrator-worker runs only as a worker thread');
const port: MessagePort = parentPort;
const data = workerData as IntegratorThreadData;

const relay =
  (level: FromIntegratorThread['level']) =>
  (msg: string, fields?: Record<string, unknown>): void =>
    port.postMessage({ type: 'log', level, msg, ...(fields ? { fields } : {}) } satisfies FromIntegratorThread);
const log: Logger = { debug: relay('debug'), info: relay('info'), warn: relay('warn'), error: relay('error') };

// Listening from the first turn: a stop sent while the thread is still starting is not lost.
let stopping = false;
const stopRequested = new Promise<void>((resolve) =>
  port.on('message', (m: ToIntegratorThread) => {
    if (m.type === 'stop') {
      stopping = true;
      resolve();
    }
  }),
);
/** Resolves after `ms`, or at once when stop is asked. */
const pause = (ms: number) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    void stopRequested.then(() => {
      clearTimeout(timer);
      resolve();
    });
  });

async function run(): Promise<void> {
  // The main thread has migrated the database already.
  const store = await openStore({ databaseUrl: data.databaseUrl, max: 1, migrate: false });
  try {
    let signer: ServiceSigner | undefined;
    while (!signer && !stopping) {
      try {
        signer = await loadServiceSignerByKid(store.db, data.masterKey, data.kid);
      } catch (e) {
        // The database is down, say: retried like a failed round.
        log.warn('the log integrator could not load its signing key; retrying', errorForLog(e));
        await pause(data.intervalMs);
      }
    }
    if (!signer) return;
    const integrator = startIntegrator({ store, signer, log, logName: data.logName }, data.intervalMs);
    await stopRequested;
    await integrator.stop();
  } finally {
    await store.close();
    port.close(); // nothing else keeps the thread alive: it exits
  }
}

// A rejection ends the thread with an 'error' event, which the main thread logs before starting another.
await run();
