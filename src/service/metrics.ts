/**
 * Prometheus metrics, on prom-client: it keeps the exposition format, the
 * process and Node.js runtime metrics and, later, cluster aggregation right,
 * which a hand-rolled registry got wrong once (latency in milliseconds).
 * Every duration is in seconds and every size in bytes, as Prometheus names
 * them; each node keeps its own. Under BATON_WORKERS a node is several
 * processes behind one port: whichever worker takes the scrape asks the
 * supervisor for every worker's metrics, summed (prom-client's cluster
 * aggregation), so a scrape never shows one worker's counters and the next
 * another's (Prometheus read that as counter resets).
 */
import { shownToCaller } from './http.js';
import cluster, { type Worker } from 'node:cluster';
import { AggregatorRegistry, Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { BatonError } from '../protocol/errors.js';
import { bodyBudget, type BodyCaller } from './body.js';
import { observeVerifyBatches, type BatchObservation } from '../store/verify-batch.js';
import { batonVersionInfo } from '../version.js';

/** Request latency buckets, in seconds: 0.5 ms to 5 s (a verify's deadline). */
const LATENCY_BUCKETS_SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/**
 * How often the event loop delay is sampled (prom-client's default). Its
 * nodejs_eventloop_lag_* gauges include this interval: an idle loop reads 10 ms.
 */
export const EVENT_LOOP_SAMPLING_MS = 10;

/** The transparency log's backlog, as the backlog gauges read it. */
export interface LogBacklog {
  readonly receipts: number;
  readonly oldestAgeSeconds: number;
}

/** A scrape waits this long for the backlog read; a read this recent serves the next gauge (or scrape). */
const BACKLOG_READ_DEADLINE_MS = 2_000;
const BACKLOG_READ_REUSE_MS = 1_000;

/**
 * Set by Baton's own supervisor in the workers it forks. A process forked by another cluster host
 * (PM2, say) is a cluster worker too, but nothing there answers a request for the node's metrics:
 * it serves its own.
 */
export const SUPERVISED_WORKER_ENV = 'BATON_SUPERVISED_WORKER';
const supervised = (): boolean => cluster.isWorker && process.env[SUPERVISED_WORKER_ENV] === '1';

/** A worker's request for the whole node's metrics, and the supervisor's answer (IPC messages). */
const CLUSTER_METRICS_REQUEST = 'baton:cluster-metrics-request';
const CLUSTER_METRICS_ANSWER = 'baton:cluster-metrics-answer';
/** Longer than the supervisor's wait for each worker, so its answer (with those that answered) comes first. */
const CLUSTER_METRICS_WAIT_MS = 6_000;

/** Verifies per group-commit statement: 1 up to the batcher's 32. */
const BATCH_ITEM_BUCKETS = [1, 2, 4, 8, 16, 32];

class BatonMetrics {
  readonly registry = new Registry();

  private readonly requests = new Counter({
    name: 'baton_http_requests_total',
    help: 'HTTP requests answered, by method, route and status. A request no route could read (a Host that is no host name, a backslash in the path, one Node\'s parser refused) is counted under route "(unreadable)", method "unknown" when it was not read.',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [this.registry],
  });

  private readonly latency = new Histogram({
    name: 'baton_http_request_duration_seconds',
    help: 'Time from receiving a request to answering it, in seconds, by method and route.',
    labelNames: ['method', 'route'] as const,
    buckets: LATENCY_BUCKETS_SECONDS,
    registers: [this.registry],
  });

  private readonly inFlight = new Gauge({
    name: 'baton_http_requests_in_flight',
    help: 'HTTP requests being handled now.',
    registers: [this.registry],
  });

  private readonly decisions = new Counter({
    name: 'baton_verify_decisions_total',
    help: 'Verify decisions, by outcome (allow or deny) and code. A dry run decides nothing and is not counted here (baton_http_requests_total counts its requests, route /v1/verify/dry-run).',
    labelNames: ['outcome', 'code'] as const,
    registers: [this.registry],
  });

  private readonly batchItems = new Histogram({
    name: 'baton_verify_batch_items',
    help: 'Verifies decided by one group-commit statement (its sum over its count is the group-commit factor), by outcome (ok, or error when the statement failed and its verifies were re-run alone).',
    labelNames: ['outcome'] as const,
    buckets: BATCH_ITEM_BUCKETS,
    registers: [this.registry],
  });

  private readonly batchLatency = new Histogram({
    name: 'baton_verify_batch_duration_seconds',
    help: "Round trip of one group-commit statement as this node saw it, in seconds: from sending it to reading its answer, including time the answer waited for the node's event loop, by outcome.",
    labelNames: ['outcome'] as const,
    buckets: LATENCY_BUCKETS_SECONDS,
    registers: [this.registry],
  });

  private readonly bodyBytesHeld = new Gauge({
    name: 'baton_body_budget_held_bytes',
    help: 'Request body bytes held now while they arrive (BATON_MAX_BODY_BUFFER_BYTES bounds them), by caller: keyed (a valid API key) or keyless. Under BATON_WORKERS, the workers together.',
    labelNames: ['caller'] as const,
    registers: [this.registry],
    collect: () => {
      this.bodyBytesHeld.set({ caller: 'keyed' }, bodyBudget.held - bodyBudget.heldKeyless);
      this.bodyBytesHeld.set({ caller: 'keyless' }, bodyBudget.heldKeyless);
    },
  });

  private readonly bodyBudgetLimit = new Gauge({
    name: 'baton_body_budget_limit_bytes',
    help: 'The most request body bytes held at once while they arrive, by caller: keyed requests may use the whole of BATON_MAX_BODY_BUFFER_BYTES, keyless ones half of it. Under BATON_WORKERS, the workers together.',
    labelNames: ['caller'] as const,
    registers: [this.registry],
    collect: () => {
      this.bodyBudgetLimit.set({ caller: 'keyed' }, bodyBudget.limit);
      this.bodyBudgetLimit.set({ caller: 'keyless' }, bodyBudget.keylessLimit);
    },
  });

  private readonly bodyBudgetRefusals = new Counter({
    name: 'baton_body_budget_refusals_total',
    help: 'Requests refused 503 SERVICE_BUSY because the request body bytes held while they arrive would have passed their budget (BATON_MAX_BODY_BUFFER_BYTES, or its keyless half), by caller: keyed or keyless.',
    labelNames: ['caller'] as const,
    registers: [this.registry],
  });

  private readonly poolSize = new Gauge({
    name: 'baton_db_pool_max_connections',
    help: "Connections the database pool may open (1 for embedded PGlite); under BATON_WORKERS, the workers' pools together.",
    labelNames: ['driver'] as const,
    registers: [this.registry],
  });

  /** Reads the log's backlog from the database (set by createServiceDeps); none, and the gauges stay unset. */
  private readLogBacklog: (() => Promise<LogBacklog>) | undefined;
  /** One read serves both gauges of a scrape. */
  private backlogRead: { at: number; read: Promise<LogBacklog | undefined> } | undefined;

  private readonly logPendingReceipts = new Gauge({
    name: 'baton_tlog_pending_receipts',
    // Every worker reads the same database: one value, not their sum.
    aggregator: 'max',
    help: "Service receipts committed but not yet in their tenant's transparency log, across tenants (read from the database at each scrape, so every node shows the same; NaN when it cannot be read). A value that keeps growing means no node integrates: BATON_TLOG_INTERVAL_MS is 0 everywhere, or the rounds fail.",
    registers: [this.registry],
    collect: async () => {
      const b = await this.logBacklog();
      this.logPendingReceipts.set(b === undefined ? Number.NaN : b.receipts);
    },
  });

  private readonly logOldestPendingAge = new Gauge({
    name: 'baton_tlog_oldest_pending_age_seconds',
    aggregator: 'max',
    help: 'How long the oldest service receipt not yet in a log has waited, in seconds (0 when none waits; NaN when it cannot be read): the log lag an auditor sees.',
    registers: [this.registry],
    collect: async () => {
      const b = await this.logBacklog();
      this.logOldestPendingAge.set(b === undefined ? Number.NaN : b.oldestAgeSeconds);
    },
  });

  constructor() {
    const info = batonVersionInfo();
    new Gauge({
      name: 'baton_build_info',
      help: 'Always 1; the labels say which Baton and Node.js versions run.',
      labelNames: ['version', 'node_version'] as const,
      aggregator: 'first',
      registers: [this.registry],
    }).set({ version: info.version, node_version: process.versions.node }, 1);
    // process_* (CPU seconds, resident bytes, open fds, start time) and nodejs_* (event loop lag, heap, GC).
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLING_MS });
    // prom-client names these three gauges *_total, which Prometheus reserves for
    // counters (promtool flags them); the per-type gauges without the suffix stay.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) {
      this.registry.removeSingleMetric(name);
    }
    // Both callers from the start, so a rate over the refusals has a series before the first one.
    for (const caller of ['keyed', 'keyless'] as const) this.bodyBudgetRefusals.inc({ caller }, 0);
    observeVerifyBatches((b) => this.observeBatch(b));
    if (supervised()) answerSupervisorRequests(this.registry);
  }

  private observeBatch(b: BatchObservation): void {
    const labels = { outcome: b.failed ? 'error' : 'ok' };
    this.batchItems.observe(labels, b.items);
    this.batchLatency.observe(labels, b.seconds);
  }

  /** Call when a request starts; the returned function records its end. */
  startRequest(): (method: string, route: string, status: number, seconds: number) => void {
    this.inFlight.inc();
    return (method, route, status, seconds) => {
      this.inFlight.dec();
      this.requests.inc({ method, route, status: String(status) });
      this.latency.observe({ method, route }, seconds);
    };
  }

  /**
   * A request answered outside the app (one no route could read: see UNREADABLE_ROUTE in http.ts):
   * counted in baton_http_requests_total only, as it has no latency the app measured.
   */
  countRequest(method: string, route: string, status: number): void {
    this.requests.inc({ method, route, status: String(status) });
  }

  /** A body refused 503 SERVICE_BUSY for want of room in the body budget (body.ts). */
  countBodyBudgetRefusal(caller: BodyCaller): void {
    this.bodyBudgetRefusals.inc({ caller });
  }

  observeDecision(outcome: 'allow' | 'deny', code: string): void {
    this.decisions.inc({ outcome, code });
  }

  /** Where the log backlog gauges read from (the node's store). */
  observeLogBacklog(read: () => Promise<LogBacklog>): void {
    this.readLogBacklog = read;
    this.backlogRead = undefined;
  }

  private logBacklog(): Promise<LogBacklog | undefined> {
    const read = this.readLogBacklog;
    if (read === undefined) return Promise.resolve(undefined);
    const now = performance.now();
    if (this.backlogRead === undefined || now - this.backlogRead.at > BACKLOG_READ_REUSE_MS) {
      // A database that does not answer leaves the gauges NaN; the scrape is not held past the deadline.
      const deadline = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), BACKLOG_READ_DEADLINE_MS).unref());
      this.backlogRead = { at: now, read: Promise.race([read().catch(() => undefined), deadline]) };
    }
    return this.backlogRead.read;
  }

  observePool(driver: 'postgres' | 'pglite', maxConnections: number): void {
    this.poolSize.set({ driver }, maxConnections);
  }

  /** This process's metrics, or under BATON_WORKERS every worker's, summed by the supervisor. */
  render(): Promise<string> {
    return supervised() ? askSupervisorForMetrics() : this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** One registry per process: the process and runtime metrics are process-wide. */
export const metrics = new BatonMetrics();

interface ClusterMetricsAnswer {
  readonly type: typeof CLUSTER_METRICS_ANSWER;
  readonly id: number;
  readonly text?: string;
  readonly error?: string;
}

/** The supervisor's request for one worker's own metrics, and the worker's answer (prom-client's JSON form). */
const WORKER_METRICS_REQUEST = 'baton:worker-metrics-request';
const WORKER_METRICS_ANSWER = 'baton:worker-metrics-answer';
interface WorkerMetricsAnswer {
  readonly type: typeof WORKER_METRICS_ANSWER;
  readonly id: number;
  readonly metrics?: Awaited<ReturnType<Registry['getMetricsAsJSON']>>;
}
/** How long the supervisor waits for each worker's own metrics; one that is late is left out, and counted as such. */
const WORKER_METRICS_WAIT_MS = 3_000;

const isMessageOf = <T extends { type: string }>(type: T['type'], m: unknown): m is T =>
  typeof m === 'object' && m !== null && (m as { type?: unknown }).type === type;

/**
 * In the supervisor of BATON_WORKERS, before it forks: answers a worker's request for the whole
 * node's metrics by asking every worker that listens for its own and aggregating them (counters and
 * histograms summed; each gauge as it declares). A worker still starting is not asked
 * (baton_workers_listening says how many were); when one that listens does not answer in time,
 * the scrape fails rather than show a partial sum.
 *
 * A worker that exits takes its counts with it, and a sum that goes down reads to Prometheus as a
 * reset, after which it counts every other worker's total again. So the counters and histograms
 * each worker showed in its last scrape are kept when it exits, and added to every later sum: the
 * node's counters never go down (only what an exited worker counted after its last scrape is lost).
 * Its gauges are not kept: they were its own state.
 */
export function serveClusterMetrics(listening: () => readonly Worker[]): void {
  let asked = 0;
  const pending = new Map<number, (answer: WorkerMetricsAnswer) => void>();
  type WorkerMetrics = NonNullable<WorkerMetricsAnswer['metrics']>;
  /** Each live worker's newest answer that a scrape served (`asked` orders answers of concurrent scrapes). */
  const lastScraped = new Map<number, { readonly asked: number; readonly metrics: WorkerMetrics }>();
  let exitedCounts: WorkerMetrics[] = [];
  cluster.on('exit', (worker) => {
    const last = lastScraped.get(worker.id);
    lastScraped.delete(worker.id);
    // prom-client's types call `type` an enum; at run time it is the name ('counter', 'gauge', ...).
    if (last !== undefined)
      exitedCounts.push(last.metrics.filter((m) => ['counter', 'histogram'].includes(String(m.type))) as WorkerMetrics);
  });
  /**
   * The exited workers' counts, folded into one set at a scrape so that a node whose workers are
   * replaced often keeps one. One fold at a time; a scrape meanwhile sums the sets as they are.
   */
  let folding = false;
  const exitedSum = async (): Promise<WorkerMetrics[]> => {
    const sets = [...exitedCounts];
    if (folding || sets.length <= 1) return sets;
    folding = true;
    try {
      const folded = (await AggregatorRegistry.aggregate(sets).getMetricsAsJSON()) as WorkerMetrics;
      exitedCounts = [folded, ...exitedCounts.slice(sets.length)]; // those that exited meanwhile were appended
      return [folded];
    } finally {
      folding = false;
    }
  };
  cluster.on('message', (worker, message: unknown) => {
    if (isMessageOf<WorkerMetricsAnswer>(WORKER_METRICS_ANSWER, message)) {
      pending.get(message.id)?.(message);
      return;
    }
    if (!isMessageOf<{ type: typeof CLUSTER_METRICS_REQUEST; id: number }>(CLUSTER_METRICS_REQUEST, message)) return;
    // Not filtered by isConnected(): a worker whose channel has closed but whose exit is not yet seen
    // would be left out while its counts are not yet kept (a dip). Asked, it fails the scrape (a gap).
    const workers = listening().filter((w) => !w.isDead());
    const ownMetrics = (w: Worker) =>
      new Promise<{ asked: number; metrics: WorkerMetrics } | undefined>((resolve) => {
        const id = ++asked;
        const settle = (metrics: WorkerMetricsAnswer['metrics']) => {
          clearTimeout(timer);
          pending.delete(id);
          w.off('exit', gone);
          resolve(metrics === undefined ? undefined : { asked: id, metrics });
        };
        // A worker that exits meanwhile answers nothing: no need to wait out the timer.
        const gone = () => settle(undefined);
        const timer = setTimeout(gone, WORKER_METRICS_WAIT_MS);
        pending.set(id, (a) => settle(a.metrics));
        w.once('exit', gone);
        // With a callback, a send to a worker that has just died fails here (EPIPE) instead of as an
        // 'error' event nobody listens for, which would end the supervisor and every worker with it.
        w.send({ type: WORKER_METRICS_REQUEST, id }, (err) => {
          if (err) gone();
        });
      });
    void (async () => {
      let answer: Omit<ClusterMetricsAnswer, 'type' | 'id'>;
      try {
        const answers = await Promise.all(workers.map(ownMetrics));
        const missing = answers.filter((m) => m === undefined).length;
        // A sum without a worker is lower than the last one: Prometheus reads that as a counter
        // reset and counts the rest again. No answer leaves a gap in the series instead.
        if (missing > 0) throw new Error(`${missing} of ${workers.length} workers gave no metrics (late, exited, or failing)`);
        // A worker that exited after it answered had its previous answer kept when it exited: this
        // one is left out, or it would count twice now and be gone from the next sum.
        const live = workers.flatMap((w, i) => (w.isDead() ? [] : [{ id: w.id, answer: answers[i]! }]));
        for (const { id, answer: a } of live) if ((lastScraped.get(id)?.asked ?? 0) < a.asked) lastScraped.set(id, a);
        const summed = await AggregatorRegistry.aggregate([...live.map((l) => l.answer.metrics), ...(await exitedSum())]).metrics();
        answer = { text: summed + workersSummed(live.length) };
      } catch (e) {
        answer = { error: e instanceof Error ? e.message : String(e) };
      }
      // A worker gone meanwhile asked for nothing: its send's failure is no error.
      if (worker.isConnected()) worker.send({ type: CLUSTER_METRICS_ANSWER, id: message.id, ...answer }, () => {});
    })();
  });
}

function workersSummed(listening: number): string {
  return (
    '# HELP baton_workers_listening Worker processes of this node that listen, whose metrics this scrape sums.\n' +
    '# TYPE baton_workers_listening gauge\n' +
    `baton_workers_listening ${listening}\n`
  );
}

/** In a worker: answers the supervisor's requests for this worker's own metrics. */
function answerSupervisorRequests(registry: Registry): void {
  process.on('message', (m: unknown) => {
    if (!isMessageOf<{ type: typeof WORKER_METRICS_REQUEST; id: number }>(WORKER_METRICS_REQUEST, m)) return;
    const reply = (metrics?: WorkerMetricsAnswer['metrics']) =>
      process.send?.({ type: WORKER_METRICS_ANSWER, id: m.id, ...(metrics ? { metrics } : {}) });
    registry.getMetricsAsJSON().then(reply, () => reply());
  });
}

/** The scrape fails (and Prometheus keeps a gap) rather than show a sum without some worker's counters. */
function gatheringFailed(why: string): BatonError {
  return shownToCaller(
    new BatonError('INTERNAL', { message: `The node's metrics could not be gathered from every worker: ${why}. Scrape again.` }),
  );
}

const awaitingSupervisor = new Map<number, { resolve: (text: string) => void; reject: (e: Error) => void }>();
let supervisorRequests = 0;

function askSupervisorForMetrics(): Promise<string> {
  if (supervisorRequests === 0) {
    process.on('message', (m: unknown) => {
      if (!isMessageOf<ClusterMetricsAnswer>(CLUSTER_METRICS_ANSWER, m)) return;
      const waiting = awaitingSupervisor.get(m.id);
      awaitingSupervisor.delete(m.id);
      if (m.text !== undefined) waiting?.resolve(m.text);
      else waiting?.reject(gatheringFailed(m.error ?? 'no answer'));
    });
  }
  const id = ++supervisorRequests;
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      awaitingSupervisor.delete(id);
      reject(gatheringFailed(`the supervisor did not answer within ${CLUSTER_METRICS_WAIT_MS} ms`));
    }, CLUSTER_METRICS_WAIT_MS);
    const settle =
      <T>(f: (v: T) => void) =>
      (v: T) => {
        clearTimeout(timer);
        f(v);
      };
    awaitingSupervisor.set(id, { resolve: settle(resolve), reject: settle(reject) });
    process.send!({ type: CLUSTER_METRICS_REQUEST, id });
  });
}
