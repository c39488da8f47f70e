/**
 * Starts Baton: configuration, master key, store (PostgreSQL or embedded
 * PGlite), migrations, signing key, bootstrap admin key, HTTP listener.
 */
import cluster, { type Worker } from 'node:cluster';
import { randomBytes, randomUUID } from 'node:crypto';
import { chmodSync, existsSync, linkSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTcpServer, Server as NetServer } from 'node:net';
import { join } from 'node:path';
import { getRequestListener, type ServerType } from '@hono/node-server';
import { ConfigError, decodeMasterKey, DEFAULT_TLOG_NAME, loadConfig, raisedSettings, unreadSettings, type Config } from './config.js';
import { createApp } from './service/app.js';
import { BatonError } from './protocol/errors.js';
import { awaitContinue, bodyBudget, unsupportedTransferCoding } from './service/body.js';
import { httpStatusOf } from './service/error-status.js';
import {
  answerConnect,
  answerHostless,
  answerUnbuildableRequest,
  answerUnreadRequest,
  errorEnvelope,
  isHostlessHttp11,
  recordUnreadableRequest,
  type UnreadRequestSocket,
} from './service/http.js';
import { ensureAdminKey } from './service/auth.js';
import { withdrawBootstrapAdminKey } from './store/api-keys.js';
import { createServiceDeps } from './service/deps.js';
import { createLogger, flushLogs, type Logger } from './service/log.js';
import { serveClusterMetrics, SUPERVISED_WORKER_ENV } from './service/metrics.js';
import { startIntegrator, type RunningIntegrator } from './service/log-integrator.js';
import { startIntegratorThread } from './service/log-integrator-thread.js';
import { storedLogNames } from './service/log-tree.js';
import { DATABASE_MARKER_FILE, holdsTablesOfItsOwn, openStore, type Store } from './store/db.js';
import type { MigrationPlan } from './store/migrate.js';
import { DATA_FOLDER_LOCK } from './store/data-folder-lock.js';
import { errorForLog } from './store/errors.js';

/** A failed start's error as one line, without a failed query's parameters (for `baton serve`). */
export { errorText } from './store/errors.js';
import { MISSING_DRIVER_GUARD, postgresDriverGuarded } from './store/driver-guard.js';

// For a program that starts Baton itself: read the configuration from an environment (refused
// with a ConfigError saying what to fix), make the logger, then startServer(config, log).
export { ConfigError, loadConfig, type Config } from './config.js';
export { createLogger, flushLogs, type Logger, type LogLevel } from './service/log.js';

/**
 * What a caller of startServer uses of the store. Not the full Store: its
 * drizzle types would put the database drivers' declarations into every
 * consumer's type-check (@baton-drs/server's public types).
 */
export interface RunningStore {
  readonly kind: 'postgres' | 'pglite';
}

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  readonly store: RunningStore;
  close(): Promise<void>;
  /** What close() still waits for (nothing before it is called): what a forced exit names. */
  readonly closing: () => readonly StopStage[];
}

/** The steps of a stop, in order. */
export type StopStage = 'requests in flight' | 'the log integrator' | 'the database to close';

/** How long a stop may take before the process exits 1 (README, "Stopping"). */
const STOP_LIMIT_MS = 10_000;

/**
 * The embedded database's data folder, open to its owner only. PGlite writes its files
 * world-writable (0666 whatever the umask: postgresql.conf, pg_hba.conf, the catalogs that hold the
 * verify functions), so the folder is what keeps other local users from reading or changing the
 * database; PostgreSQL likewise refuses to start on a data directory open to others. A folder
 * created here is 0700. An existing one open to others is restricted (its group and others lose
 * every right; set-group-id and sticky bits stay) only when it is this process's and Baton's: empty,
 * or holding the embedded database or Baton's files. Any other (a volume another user owns, a
 * mistaken BATON_DATA_DIR such as /tmp or a home folder) is left as it is, and the log says so.
 */
export function restrictDataFolder(dataDir: string, log: Logger): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const folder = statSync(dataDir);
  const open = folder.mode & 0o077;
  if (open === 0) return;
  const entries = readdirSync(dataDir);
  const ours = process.getuid === undefined || folder.uid === process.getuid();
  const batons = entries.length === 0 || entries.some((e) => BATON_DATA_MARKERS.has(e));
  const fields = { data_dir: dataDir, mode: (folder.mode & 0o7777).toString(8) };
  if (!ours || !batons) {
    log.warn(
      `the data folder is open to other local users, who could read or change the embedded database in it; Baton leaves it as it is because ${ours ? "it holds files that are not Baton's" : 'another user owns it'}: give Baton a folder of its own (BATON_DATA_DIR), or run chmod go-rwx on it`,
      fields,
    );
    return;
  }
  const restricted = folder.mode & 0o7700;
  try {
    chmodSync(dataDir, restricted);
  } catch (e) {
    log.warn(
      `the data folder is open to other local users and could not be restricted (${(e as Error).message}): run chmod go-rwx on it`,
      fields,
    );
    return;
  }
  log.warn('restricted the data folder to its owner: other local users could read or change the embedded database in it', {
    ...fields,
    mode_now: restricted.toString(8),
  });
}

/** Names only Baton's data folder holds: PGlite's version file, the development master key, the lock, the database marker. */
const BATON_DATA_MARKERS = new Set(['PG_VERSION', 'master.key', DATA_FOLDER_LOCK, DATABASE_MARKER_FILE]);

/**
 * The master key encrypts signing keys at rest. Without BATON_MASTER_KEY a
 * dev run keeps a generated one in the data folder, and says so loudly:
 * whoever can read that folder can read the keys.
 */
export function resolveMasterKey(config: Config, log: Logger): Uint8Array {
  if (config.masterKey) return config.masterKey;
  if (config.dataDir.startsWith('memory://')) {
    // Nothing is kept, the key neither: a file for it would be a folder named "memory:" here.
    log.warn('generated a development master key held in memory only (BATON_DATA_DIR=memory:// keeps nothing)');
    return Uint8Array.from(randomBytes(32));
  }
  const file = join(config.dataDir, 'master.key');
  if (existsSync(file)) {
    const key = decodeMasterKey(readFileSync(file, 'utf8'));
    if (!key) throw new Error(`${file} does not hold a 32-byte key; restore it or set BATON_MASTER_KEY.`);
    log.warn('using the development master key from the data folder; set BATON_MASTER_KEY in production', { file });
    return key;
  }
  // A folder holding a database whose secrets the missing file sealed (marked, or migrated by a build
  // from before the marker): a new key opens none of them,
  // and written there it would stand in the way of the one restored from a backup.
  if (existsSync(join(config.dataDir, DATABASE_MARKER_FILE)) || holdsTablesOfItsOwn(config.dataDir))
    throw new Error(
      `${file} is missing, but ${config.dataDir} holds a database whose keys it sealed: restore master.key from a backup of this folder, or set BATON_MASTER_KEY to the key it held. If the folder holds nothing you need, move it aside and start again with a new one.`,
    );
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const key = randomBytes(32);
  const kept = keepKeyFileOnce(file, key);
  if (kept !== key) {
    log.warn('using the development master key another start wrote to the data folder a moment ago; set BATON_MASTER_KEY in production', {
      file,
    });
    return Uint8Array.from(kept);
  }
  log.warn('generated a development master key; set BATON_MASTER_KEY (32 bytes as 64 hex digits or base64) in production', { file });
  return Uint8Array.from(key);
}

/**
 * Writes `key` to `file` only if no file is there, whole or not at all (a temporary file linked into
 * place: link refuses an existing name), and returns the key the file then holds: `key` itself, or
 * the one another start wrote first. Two first starts on one folder both get here before either
 * takes the folder lock; the second's key written over the first's would leave the keys the first
 * sealed unopenable. On a file system without hard links (FAT, some network and FUSE mounts) the
 * file is created exclusively instead, and a reader that finds it not yet whole waits a moment.
 */
export function keepKeyFileOnce(file: string, key: Uint8Array, link: (from: string, to: string) => void = linkSync): Uint8Array {
  const text = `${Buffer.from(key).toString('hex')}\n`;
  const temporary = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(temporary, text, { mode: 0o600, flag: 'wx' });
  try {
    chmodSync(temporary, 0o600);
    link(temporary, file);
    return key;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== undefined && NO_HARD_LINKS.has(code)) {
      try {
        writeFileSync(file, text, { mode: 0o600, flag: 'wx' });
        return key;
      } catch (exclusive) {
        if ((exclusive as NodeJS.ErrnoException).code !== 'EEXIST') throw exclusive;
      }
    } else if (code !== 'EEXIST') throw err;
    return keyWrittenByAnother(file);
  } finally {
    rmSync(temporary, { force: true });
  }
}

/** What link(2) answers on a file system without hard links. */
const NO_HARD_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS', 'EXDEV']);

/**
 * The key another start wrote: read again for up to a second while it is not yet whole. Only the
 * form keepKeyFileOnce writes (64 hex digits and a newline) counts: a part of it can read as another
 * key (43 of the hex digits decode as base64 to 32 bytes), which would seal under a key not in the file.
 */
function keyWrittenByAnother(file: string): Uint8Array {
  for (let attempt = 0; ; attempt++) {
    const text = readFileSync(file, 'utf8');
    if (/^[0-9a-f]{64}\n$/.test(text)) return Uint8Array.from(Buffer.from(text.slice(0, 64), 'hex'));
    if (attempt >= 20) throw new Error(`${file} does not hold a 32-byte key; restore it or set BATON_MASTER_KEY.`);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
  }
}

/**
 * A data folder the process may not write (EACCES, EPERM, EROFS on a path in it) said with what to
 * do: the errno alone named the file but not the way out. Any other error is returned as it is.
 */
export function dataFolderRefusal(e: unknown, dataDir: string): unknown {
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  if (code !== 'EACCES' && code !== 'EPERM' && code !== 'EROFS') return e;
  const user = process.getuid === undefined ? 'this user' : `the user running Baton (uid ${process.getuid()})`;
  return new Error(
    `Baton cannot write its data folder ${dataDir} (${(e as Error).message}). Give ${user} write access to it (chown or chmod the folder${code === 'EROFS' ? ', on a file system mounted read-write' : ''}), or set BATON_DATA_DIR (baton serve --data-dir) to a folder it can write.`,
  );
}

export async function startServer(
  config: Config,
  log: Logger,
  announce: (text: string) => void = (t) => {
    flushLogs(); // the log lines before it (the migrations) come first
    process.stderr.write(t);
  },
): Promise<RunningServer> {
  if (config.databaseUrl && !(await postgresDriverGuarded())) throw new Error(MISSING_DRIVER_GUARD);
  // Workers share the supervisor's port (node:cluster), which checked it before forking them.
  if (!cluster.isWorker) await assertPortFree(config);
  let masterKey: Uint8Array;
  let store: Store;
  try {
    if (!config.databaseUrl && !config.dataDir.includes('://')) restrictDataFolder(config.dataDir, log);
    masterKey = resolveMasterKey(config, log);
    // A first start on an empty folder creates the database and applies every migration: seconds of silence otherwise.
    log.info('opening the store and applying pending migrations', {
      database: config.databaseUrl ? 'postgres' : 'pglite',
      ...(config.databaseUrl ? {} : { data_dir: config.dataDir }),
    });
    let migrating: { count: number; started: number } | undefined;
    const onMigrations = (plan: MigrationPlan) => {
      if (plan.unknown > 0) {
        log.warn(
          `this database was migrated by a newer Baton: it holds ${plan.unknown} migration(s) this build does not know, so this build serves it with older rules (approvals it opens are bound its own way). Run that version or a newer one; see "Upgrading" in the README.`,
          { unknown_migrations: plan.unknown },
        );
      }
      if (plan.pending.length === 0) return;
      migrating = { count: plan.pending.length, started: performance.now() };
      log.info(
        `applying ${plan.pending.length} migration(s): ${plan.pending[0]}${plan.pending.length > 1 ? ` to ${plan.pending.at(-1)}` : ''}`,
        {
          migrations: plan.pending.length,
        },
      );
    };
    store = await openStore(
      config.databaseUrl
        ? { databaseUrl: config.databaseUrl, max: config.dbPoolSize, onMigrations }
        : {
            dataDir: config.dataDir,
            // A lost lock ends the process from the heartbeat's own thread (data-folder-lock.ts): the
            // main thread may be too busy running queries to hear of it.
            lock: { onWait: (message) => log.warn(message) },
            onMigrations,
          },
    );
    if (migrating) log.info(`applied ${migrating.count} migration(s)`, { ms: Math.round(performance.now() - migrating.started) });
  } catch (e) {
    throw dataFolderRefusal(e, config.dataDir);
  }
  log.info('store ready', { database: store.kind, ...(store.kind === 'pglite' ? { data_dir: config.dataDir } : {}) });
  // The generated admin key is shown once, so only by a start that serves: a start that fails
  // before showing it withdraws it (nobody saw it), and the next start mints and shows another.
  let generatedAdminKey: string | null = null;
  let shown = false;
  let server: ServerType | undefined;
  let integrator: RunningIntegrator | undefined;
  try {
    const named = await storedLogNames(store.db, config.tlogName);
    if (named !== undefined && named.others.length > 0) {
      log.warn(
        `some tenants' transparency logs carry another name than "${named.current}", from a rename before Baton refused one: their next checkpoint is signed under "${named.current}", so auditors who pinned the other name must pin this one`,
        { others: named.others },
      );
    }
    if (named === undefined && config.tlogName === DEFAULT_TLOG_NAME && config.databaseUrl) {
      log.warn(
        `BATON_TLOG_NAME is not set: the transparency logs will be named "${DEFAULT_TLOG_NAME}" for good once the first checkpoint is signed; set it now to a host name you own`,
      );
    }
    const deps = await createServiceDeps({ store, config, log, masterKey });
    generatedAdminKey = await ensureAdminKey(deps);
    const app = createApp(deps);
    // One budget for the whole process, as the memory it bounds is (body.ts).
    bodyBudget.limit = config.maxBodyBufferBytes;
    bodyBudget.maxBodyBytes = config.maxBodyBytes;
    const listening: Promise<ServerType> = new Promise((resolve, reject) => {
      // node-server's serve() takes no errorHandler: its listener, on a server made here, does.
      const answer = getRequestListener(app.fetch, {
        hostname: config.host,
        // What node-server cannot make a Request of is answered in Baton's envelope, not a bare 400.
        errorHandler: (err) => answerUnbuildableRequest(err, log),
      });
      const s = createHttpServer(
        {
          headersTimeout: config.http.headersTimeoutMs,
          requestTimeout: config.http.requestTimeoutMs,
          // Node checks those two timeouts only this often (30 s by default): a 2 s headers timeout
          // answered its 408 after 8 to 28 s (an outside probe). A tenth of the headers timeout.
          connectionsCheckingInterval: connectionsCheckingIntervalMs(config.http.headersTimeoutMs),
          maxHeaderSize: MAX_HEADER_BYTES,
          // HTTP/1.1 without Host is still refused (RFC 9112), but here, in the envelope: Node's own
          // refusal is a bare 400.
          requireHostHeader: false,
        },
        (req, res) => {
          if (isHostlessHttp11(req)) return answerHostless(res, log);
          // Judged from the headers before anything runs, as Node's parser judges Content-Length
          // beside Transfer-Encoding: a body in a transfer coding Baton does not decode cannot be read.
          const transferRefusal = unsupportedTransferCoding(req.headers['transfer-encoding']);
          if (transferRefusal) return answerBeforeRouting(req, res, transferRefusal, log, 'unsupported transfer coding');
          return answer(req, res);
        },
      );
      s.listen(config.port, config.host, () => {
        s.off('error', refused);
        resolve(s);
      });
      // A port in use (or not ours to bind) is a start that failed, said plainly, not a crash.
      const refused = (e: NodeJS.ErrnoException) => reject(listenError(e, config));
      s.once('error', refused);
      // What Node's parser refuses is answered in Baton's envelope too, not as a bare status line.
      s.on('clientError', (err: Error, socket: UnreadRequestSocket) => answerUnreadRequest(err, socket, log));
      s.on('connect', answerConnect);
      // An expectation other than 100-continue: Node alone answers a bare 417 (no envelope, no
      // X-Request-Id). RFC 9110 lets a server ignore it instead, so the request is served as any other.
      s.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => s.emit('request', req, res));
      // Expect: 100-continue: with nothing listening Node sends 100 Continue at once, and a client
      // whose declared body is over BATON_MAX_BODY_BYTES sent it all to be refused 413. Refused from
      // the head here instead, before the client sends a byte of it (RFC 9110 10.1.1). Any other gets
      // 100 Continue only when a route starts reading its body (body.ts, awaitContinue): a request
      // refused from its key, path, method or query is answered without it, so its client sends no
      // body for nothing, and Node closes the connection after such an answer (the client may send
      // the body anyway, which nothing would read).
      s.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
        const declared = Number(req.headers['content-length'] ?? '0');
        if (declared > config.maxBodyBytes)
          return answerBeforeRouting(
            req,
            res,
            declaredTooLarge(declared, config.maxBodyBytes),
            log,
            'declared body over BATON_MAX_BODY_BYTES',
          );
        awaitContinue(res);
        s.emit('request', req, res);
      });
      // Not a createServer option on Node 20; read per connection, so set before the first one.
      (s as Server).keepAliveTimeout = config.http.keepAliveTimeoutMs;
    });
    server = await listening;
    const bound = server;
    // Answers not yet written when the stop begins (and any request after it) close their
    // connection: Node reads shouldKeepAlive when it writes the head.
    let closing = false;
    const unanswered = new Set<ServerResponse>();
    bound.prependListener('request', (_req: IncomingMessage, res: ServerResponse) => {
      if (closing) res.shouldKeepAlive = false;
      else {
        unanswered.add(res);
        res.once('close', () => unanswered.delete(res)); // after the answer, or when the client left
      }
    });
    const closeEachConnectionAfterItsAnswer = () => {
      closing = true;
      for (const res of unanswered) if (!res.headersSent) res.shouldKeepAlive = false;
    };
    const address = bound.address();
    const port = typeof address === 'object' && address ? address.port : config.port;
    const url = listeningUrl(config.host, port);
    log.info('listening', { url, service_kid: deps.signer.kid });
    if (config.tlogIntervalMs > 0 && config.databaseUrl) {
      // Off the event loop that answers requests, on a connection of its own.
      integrator = startIntegratorThread(
        { databaseUrl: config.databaseUrl, masterKey, kid: deps.signer.kid, logName: config.tlogName, intervalMs: config.tlogIntervalMs },
        log,
      );
    } else if (config.tlogIntervalMs > 0) {
      // PGlite is one connection in this thread's memory: another thread cannot reach it.
      integrator = startIntegrator({ store, signer: deps.signer, log, logName: config.tlogName }, config.tlogIntervalMs);
    } else {
      log.warn(
        'this node integrates no service receipts into the transparency log (BATON_TLOG_INTERVAL_MS=0): another node on this database must, or auditors find them missing; /metrics shows the backlog (baton_tlog_pending_receipts)',
      );
    }
    if (generatedAdminKey) {
      announce(
        `\n  Baton generated an admin API key. It is shown only this once; store it now:\n\n    ${generatedAdminKey}\n\n` +
          `  Use it as "Authorization: Bearer <key>" on /v1/admin routes, or set BATON_ADMIN_KEY to choose your own.\n` +
          `  Next: save it once (npx --no baton context add local --server ${url} --key-stdin), create a tenant\n` +
          `  (npx --no baton tenants create <name>), then follow the README's Quickstart; ${url}/docs lists every route.\n\n`,
      );
      shown = true;
    }
    const pending = new Set<StopStage>();
    return {
      url,
      port,
      store,
      closing: () => [...pending],
      close: async () => {
        pending.add('requests in flight');
        // Stopped beside the drain, not after it: a round stuck on a hung database and the requests
        // waiting on it would otherwise add up their waits (a verify's 5 s deadline, then the
        // thread's 3 s) against the stop's 10 s. Both end before the pool closes.
        pending.add('the log integrator');
        const integratorStopped = (integrator?.stop() ?? Promise.resolve()).finally(() => pending.delete('the log integrator'));
        // Stop accepting, let in-flight requests finish, then release the database. A keep-alive
        // connection busy at this moment would otherwise go on carrying new requests until the
        // forced exit cut them off: each answer from now on closes its connection.
        closeEachConnectionAfterItsAnswer();
        // An idle keep-alive connection's client may be sending its next request right now, and
        // one closed under it is reset unanswered (an outside probe: 3 of 271 verifies of 8 busy
        // clients at a stop). So idle connections get a moment first, in which a request is
        // answered with Connection: close; those idle all along are closed after it. http.Server's
        // own close() would close them at once, so listening stops through net.Server's.
        const closed = new Promise<void>((resolve) => NetServer.prototype.close.call(bound, () => resolve()));
        await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, IDLE_CONNECTION_CLOSE_GRACE_MS).unref())]);
        // http.Server's close now: it closes the idle connections and clears its timer of
        // connection checks (its stop of listening, done already, answers the ignored callback).
        (bound as Server).close(() => {});
        await closed;
        pending.delete('requests in flight');
        await integratorStopped; // its round commits or rolls back before the pool closes
        pending.add('the database to close');
        await store.close();
        pending.delete('the database to close');
      },
    };
  } catch (e) {
    if (generatedAdminKey && !shown) {
      // Best effort: the start's own error is the one to report.
      await withdrawBootstrapAdminKey(store.db, generatedAdminKey).catch((w: unknown) =>
        log.error('could not withdraw the generated admin key nobody saw: set BATON_ADMIN_KEY, which retires it', errorForLog(w)),
      );
    }
    if (server) {
      const unbound = server as Server;
      const closed = new Promise<void>((resolve) => unbound.close(() => resolve()));
      unbound.closeAllConnections();
      await closed;
    }
    await integrator?.stop().catch(() => {});
    await store.close();
    throw e;
  }
}

/**
 * `e` in the envelope, for a request refused from its head alone before any route runs, closing the
 * connection: the body that may follow is left unread, so nothing after it on the connection can be framed.
 */
function answerBeforeRouting(req: IncomingMessage, res: ServerResponse, e: BatonError, log: Logger, reason: string): void {
  const requestId = randomUUID();
  recordUnreadableRequest(log, {
    requestId,
    method: req.method,
    status: httpStatusOf(e),
    code: e.code,
    reason,
  });
  const body = JSON.stringify(errorEnvelope(e, requestId));
  res.writeHead(httpStatusOf(e), {
    'content-type': 'application/json',
    'x-request-id': requestId,
    'content-length': Buffer.byteLength(body),
    connection: 'close',
  });
  res.end(body);
}

/** The 413 of a request that asks for 100 Continue for a body over BATON_MAX_BODY_BYTES. */
function declaredTooLarge(declared: number, maxBodyBytes: number): BatonError {
  return new BatonError('PAYLOAD_TOO_LARGE', {
    message: `The request declares a body of ${declared} bytes, larger than the ${maxBodyBytes} bytes Baton reads (BATON_MAX_BODY_BYTES), so it was refused before the body was sent.`,
  });
}

/** How long a stopping server keeps idle keep-alive connections open for a request already on its way. */
export const IDLE_CONNECTION_CLOSE_GRACE_MS = 500;

/**
 * Request headers Node accepts (its default is 16 KiB). A DRS client may send a whole chain by
 * value in X-DRS-Bundle: 16 records (BATON_MAX_CHAIN_DEPTH's ceiling) take about 20-40 KiB there,
 * and past this limit Node refuses the request before Baton sees it (answerUnreadRequest: 431
 * HEADERS_TOO_LARGE in the envelope).
 */
export const MAX_HEADER_BYTES = 64 * 1024;

/**
 * Fails fast when the port cannot be bound, before the store is opened: a first start would
 * otherwise create the database, apply every migration and generate its keys (seconds, and files
 * left behind) only to fail at the bind. The bind itself still reports a port taken meanwhile.
 */
async function assertPortFree(config: Config): Promise<void> {
  if (config.port === 0) return;
  await new Promise<void>((resolve, reject) => {
    const probe = createTcpServer();
    probe.once('error', (e: NodeJS.ErrnoException) => reject(listenError(e, config)));
    probe.listen(config.port, config.host, () => probe.close(() => resolve()));
  });
}

function listenError(e: NodeJS.ErrnoException, config: Config): Error {
  const where = `${config.host}:${config.port}`;
  if (e.code === 'EADDRINUSE')
    return new Error(`${where} is already in use (another Baton?). Stop it, or choose another port: PORT, or baton serve --port.`);
  if (e.code === 'EACCES')
    return new Error(`not allowed to listen on ${where}: choose a port above 1023, or run with the right to bind it.`);
  if (e.code === 'EADDRNOTAVAIL') return new Error(`${config.host} is not an address of this machine: set HOST to one of its addresses.`);
  return new Error(`could not listen on ${where}: ${e.message}`);
}

/** How often Node checks the headers and request timeouts: a tenth of the headers timeout, 250 ms to 5 s. */
export function connectionsCheckingIntervalMs(headersTimeoutMs: number): number {
  return Math.min(5_000, Math.max(250, Math.floor(headersTimeoutMs / 10)));
}

/** Runs the service until SIGINT/SIGTERM, then shuts down gracefully (npm start, baton serve). */
/** The address a listening service answers at, as the start-up line names it. */
function listeningUrl(host: string, port: number): string {
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

export async function runService(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`${e.message}\n`);
      process.exit(2); // baton serve's code for a configuration it refuses
    }
    throw e;
  }
  // Under BATON_WORKERS every line says which worker wrote it (the supervisor's lines say none).
  const log = createLogger(config.logLevel, undefined, cluster.isWorker ? { worker: cluster.worker?.id, pid: process.pid } : {});
  // Once per start: by the one process, or the supervisor (its workers read the same environment).
  if (!cluster.isWorker) for (const line of [...unreadSettings(), ...raisedSettings()]) log.warn(line);
  if (config.workers > 1 && cluster.isPrimary) return runPrimary(config, log);
  const server = await startServer(config, log);
  // Under BATON_WORKERS the supervisor says it once, when every worker listens (runPrimary).
  if (!cluster.isWorker) {
    flushLogs();
    process.stderr.write(`Baton is listening on ${server.url} (database: ${server.store.kind}). Press Ctrl+C to stop.\n`);
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down', { signal });
    const force = setTimeout(() => {
      // Said, so an exit 1 after a stop is not read as a crash: what the stop was still waiting for.
      log.error(`forced exit: the stop did not finish within ${STOP_LIMIT_MS / 1000} s`, { waiting_for: server.closing() });
      flushLogs();
      process.exit(1);
    }, STOP_LIMIT_MS);
    force.unref();
    server.close().then(
      () => {
        log.info('stopped: requests in flight answered, database closed');
        process.exit(0);
      },
      (e) => {
        log.error('shutdown failed', errorForLog(e));
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

/**
 * BATON_WORKERS > 1: this process only supervises; each worker is a whole
 * service (its own pool, caches and signer) listening on the one shared port
 * (node:cluster hands out connections). Nodes are stateless, so workers are
 * just more nodes on one database. A worker that dies is replaced. One of the
 * first workers that dies before it listens stops the start (with its exit code): a
 * replacement would fail the same way. Once the service has started, a
 * replacement that cannot start (the database is down, say) is tried again
 * with a growing pause, while the other workers go on answering (503 until
 * the database is back): one crash during an outage must not stop the service.
 */
async function runPrimary(config: Config, log: Logger): Promise<void> {
  await assertPortFree(config);
  // loadConfig refused BATON_WORKERS > 1 without DATABASE_URL: the embedded database belongs to one process.
  // Resolved once here, so workers never race to generate a development key.
  const env = {
    BATON_MASTER_KEY: Buffer.from(resolveMasterKey(config, log)).toString('hex'),
    // This supervisor answers the workers' requests for the whole node's metrics (serveClusterMetrics).
    [SUPERVISED_WORKER_ENV]: '1',
  };
  let stopping = false;
  let started = 0; // of the first workers, how many listen
  let retryMs = 0; // the pause before the next replacement, after one failed to start
  const running = new Set<Worker>();
  const stopAll = () => {
    for (const w of running) w.process.kill('SIGTERM');
  };
  const fork = (initial: boolean) => {
    const worker = cluster.fork(env);
    running.add(worker);
    // A send to a worker that has just died (EPIPE) must not end the supervisor.
    worker.on('error', (e) => log.warn('a message to a worker failed', { worker: worker.id, ...errorForLog(e) }));
    let listened = false;
    worker.once('listening', (address) => {
      listened = true;
      listening.add(worker);
      retryMs = 0;
      if (!initial) return;
      started++;
      if (started === config.workers) {
        const url = listeningUrl(config.host, address.port);
        flushLogs();
        process.stderr.write(`Baton is listening on ${url} (database: postgres, ${config.workers} workers). Press Ctrl+C to stop.\n`);
      }
    });
    worker.once('exit', (code, signal) => {
      running.delete(worker);
      listening.delete(worker);
      if (stopping) {
        // A worker that did not stop cleanly makes the whole stop unclean, unless an earlier worker's
        // exit code already says why (all workers fail a start at once: the first's 3 stays). A worker
        // with its handlers never dies by SIGTERM or SIGINT: one that does had none yet (still
        // starting) when the stop came, by the supervisor's SIGTERM or Ctrl+C's SIGINT to the group.
        const stoppedBySignal = code === null && (signal === 'SIGTERM' || signal === 'SIGINT');
        if (code !== 0 && !stoppedBySignal && !process.exitCode) process.exitCode = 1;
      } else if (!listened && initial) {
        // One of the first workers: the start failed. (A replacement exists only once a worker has
        // served; counting the first workers that listen instead stopped the service when a
        // replacement failed during an outage before the last first worker had listened.)
        log.error('a worker failed to start; stopping', { worker: worker.id, pid: worker.process.pid, code, signal });
        stopping = true;
        // The worker's own exit code says why (2 a configuration refused, 3 a start that failed), as one process's would.
        process.exitCode = typeof code === 'number' && code > 0 ? code : 1;
        stopAll();
      } else if (!listened) {
        retryMs = Math.min(30_000, Math.max(1_000, retryMs * 2));
        log.error('a replacement worker failed to start; trying again', {
          worker: worker.id,
          pid: worker.process.pid,
          code,
          signal,
          retry_in_ms: retryMs,
        });
        // Not unref'd: while no worker runs, this timer is what keeps the supervisor alive.
        setTimeout(() => {
          if (!stopping) fork(false);
        }, retryMs);
      } else {
        log.warn('worker exited; starting another', { worker: worker.id, pid: worker.process.pid, code, signal });
        fork(false);
      }
      if (stopping && running.size === 0) process.exit();
    });
  };
  const listening = new Set<Worker>();
  serveClusterMetrics(() => [...listening]);
  for (let i = 0; i < config.workers; i++) fork(true);
  process.stderr.write(`Baton is starting ${config.workers} worker processes on ${config.host}:${config.port}.\n`);
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down workers', { signal });
    // Past each worker's own limit, so a worker's forced exit (and its line) comes first.
    const force = setTimeout(() => {
      log.error(`forced exit: ${running.size} worker(s) still running ${(STOP_LIMIT_MS + 2_000) / 1000} s after the stop`, {
        workers: [...running].map((w) => ({ worker: w.id, pid: w.process.pid })),
      });
      flushLogs();
      process.exit(1);
    }, STOP_LIMIT_MS + 2_000);
    force.unref();
    if (running.size === 0) process.exit();
    stopAll();
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}
