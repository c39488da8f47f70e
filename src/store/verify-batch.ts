/**
 * Group commit of the verify hot path: the statements of verifies that arrive
 * together run as ONE call of baton_verify_batch (migration
 * 0004_verify_group_commit): one round trip, one transaction, one WAL flush
 * for the whole batch. The SQL function explains the lock order and why one
 * item's refusal or failure never changes another's outcome.
 *
 * Batching needs no timer. A verify queues, and the queue leaves as one batch
 * at the end of the event loop's current turn (setImmediate) while fewer than
 * `maxInFlight` batches are running, or as soon as a running batch comes back.
 * The end of the turn matters under load: requests arrive in bursts (the
 * answers of one batch release their clients together), and a node handles a
 * burst in one turn. Sent at once, the first verify of each burst left alone
 * and held a batch slot for a whole round trip while the rest queued behind
 * it: about two thirds of all batches were single verifies (`bench:profile`,
 * 32 in flight). A lone verify still waits for nothing but the end of its own
 * turn. Items whose deadline has passed while queued are refused (57014, a
 * 503) and never sent; a batch's deadline is its earliest item's.
 */
import type { RawQuery } from './db.js';

/** What the SQL item functions answer (jsonb). */
export interface ItemAnswer {
  readonly o: string;
  readonly [field: string]: unknown;
}

/** One allow to decide, or one refusal to store: the JSON shape baton_verify_batch reads. */
export type BatchItem =
  | {
      readonly k: 'a';
      readonly t: string;
      readonly key: string;
      readonly root: string;
      readonly chain: readonly string[];
      readonly jti: string;
      readonly hash: string;
      readonly jws: string;
      readonly tool: string | null;
      readonly est: number;
      /** Null when a refusal was predicted (deny): then an allow answers UNPREDICTED and writes nothing. */
      readonly rjws: string | null;
      readonly rkid: string;
      /** A predicted block-G refusal, stored by the same statement when it happens (see 0004). */
      readonly deny?: { readonly code: string; readonly h: string; readonly v: unknown; readonly rjws: string; readonly rkid: string };
      /** The tool gate's inputs (baton_tool_gate, 0005); absent when the tenant has no catalog. */
      readonly gate?: Readonly<Record<string, unknown>>;
      /** Every DR of the chain metered, or none (0017): the statement skips the lock pass that would find no rows. Absent when mixed. */
      readonly mt?: ChainMetering;
    }
  | {
      readonly k: 'd';
      readonly t: string;
      readonly key: string;
      readonly jti: string | null;
      readonly ih: string | null;
      readonly code: string;
      readonly block: string | null;
      readonly chain: readonly string[];
      readonly v: unknown;
      readonly subj: string;
      readonly rjws: string;
      readonly rkid: string;
    };

/** Whether every DR of a chain has a ceiling to count against (max_calls or max_spend), or none has. */
export type ChainMetering = 'all' | 'none';

interface Pending {
  readonly item: BatchItem;
  readonly deadline: number;
  readonly resolve: (a: ItemAnswer) => void;
  readonly reject: (e: unknown) => void;
}

// The items travel as JSON text: a driver given a jsonb parameter would JSON-encode the text again.
const BATCH_SQL = 'select baton_verify_batch($1, $2::text::jsonb) as r';
const DATABASE_CLOCK_SQL = 'select (extract(epoch from clock_timestamp()) * 1000)::float8 as ms';

/**
 * The database clock against this process's, so a deadline set on this clock is sent on the
 * database's: the statement compares it with clock_timestamp() (and derives its lock_timeout from
 * it). Sent as it was, a service clock 6 s ahead let statements commit seconds after the client got
 * its 503, and one 5 s behind made every verify a 503 at once. Read before the first statement and
 * again every minute, as a lower bound (see #read); a slow round trip (a database pausing) teaches
 * nothing and leaves the last reading.
 */
export class DatabaseClockOffset {
  static readonly REFRESH_MS = 60_000;
  /** After a failed or slow reading, the next is tried this much later (not by every batch). */
  static readonly RETRY_MS = 1_000;
  static readonly MAX_ROUND_TRIP_MS = 250;
  /** A change this large between the host's clock and the monotonic one is a step: read again at once. */
  static readonly STEP_MS = 100;
  /**
   * The database's clock at performance.now() = 0: kept against the monotonic clock, so a step of
   * the host's clock after a reading (NTP, a VM resumed) moves the offset with the deadlines it converts.
   */
  #databaseAtMonotonicZero = Date.now() - performance.now();
  /** The host's clock at performance.now() = 0, as of the last reading: a step shows as a change. */
  #hostAtMonotonicZero = this.#databaseAtMonotonicZero;
  /** When the last reading was taken (performance.now()); -Infinity until one is. */
  #readAt = -Infinity;
  #nextTryAt = -Infinity;
  #reading: Promise<void> | undefined;
  /** Batches wait for the reading under way: the first one, or one a step of the host clock started. */
  #waitForReading = true;

  constructor(
    private readonly query: RawQuery,
    private readonly maxRoundTripMs = DatabaseClockOffset.MAX_ROUND_TRIP_MS,
  ) {}

  /** Milliseconds to add to a time on this process's clock to name the same moment on the database's. */
  get offsetMs(): number {
    return this.#databaseAtMonotonicZero + performance.now() - Date.now();
  }

  /**
   * Starts a reading when the last is a minute old, or at once when the host's clock stepped since
   * (which cannot tell an NTP correction, after which the offset follows the step, from a host
   * resumed after a suspend, which the monotonic clock does not count and after which it does not).
   * Returns the reading under way for a batch to wait on until the first is taken, and while one a
   * step started is under way; otherwise nothing (no batch waits, not even a microtask). When a
   * reading fails or is slow (the database down or pausing), the batches of the next second go with
   * the offset they have.
   */
  fresh(): Promise<void> | undefined {
    const now = performance.now();
    const stepped = Math.abs(Date.now() - now - this.#hostAtMonotonicZero) > DatabaseClockOffset.STEP_MS;
    if (this.#reading === undefined && now >= this.#nextTryAt && (stepped || now - this.#readAt >= DatabaseClockOffset.REFRESH_MS)) {
      this.#waitForReading = stepped || this.#readAt === -Infinity;
      this.#reading = this.#read().finally(() => (this.#reading = undefined));
    }
    return this.#waitForReading ? this.#reading : undefined;
  }

  async #read(): Promise<void> {
    try {
      // The round trip on the monotonic clock: a step of the host's during a reading must not make a slow one look fast.
      const sent = performance.now();
      const [row] = await this.query(DATABASE_CLOCK_SQL, []);
      const back = Date.now();
      const ms = Number(row?.['ms']);
      if (Number.isFinite(ms) && performance.now() - sent <= this.maxRoundTripMs) {
        // The database read its clock between sent and back: taken as read at `back`, the offset is
        // never later than the true one, so a deadline sent is at worst early by the round trip (a
        // needless 503), never late (a commit after the client's 503).
        this.#readAt = performance.now();
        this.#databaseAtMonotonicZero = ms - this.#readAt;
        this.#hostAtMonotonicZero = back - this.#readAt;
        return;
      }
    } catch {
      // The batch that follows meets the same failure and answers for it; the last reading stands.
    }
    this.#nextTryAt = performance.now() + DatabaseClockOffset.RETRY_MS;
  }
}

/** An error carrying a SQLSTATE, read by isStorageUnavailable and the error mapper like a driver error. */
class ItemError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** One batch statement as this node saw it (the metrics read these: items per statement, round trip). */
export interface BatchObservation {
  readonly items: number;
  /** From sending the statement to reading its answer, including any time the answer waited for this node's event loop. */
  readonly seconds: number;
  /** The statement failed (no answers): its items were re-run alone or refused. */
  readonly failed: boolean;
}

type BatchObserver = (b: BatchObservation) => void;
const observers = new Set<BatchObserver>();

/** Calls `observer` after every batch statement of this process; returns the function that stops it. */
export function observeVerifyBatches(observer: BatchObserver): () => void {
  observers.add(observer);
  return () => observers.delete(observer);
}

/**
 * Batch statements one process runs at once by default: while one commits, the next executes, and
 * new verifies queue into the one after. The store gives them as many connections of their own.
 */
export const VERIFY_STATEMENTS_IN_FLIGHT = 2;

export interface BatcherOptions {
  /** Batches running at once (default VERIFY_STATEMENTS_IN_FLIGHT): while they run, new verifies queue into the next. */
  readonly maxInFlight?: number;
  /** Items per batch at most (default 32): bounds how many DRs one statement locks and how long it holds them. */
  readonly maxBatch?: number;
}

export class VerifyBatcher {
  readonly #query: RawQuery;
  readonly #clock: DatabaseClockOffset;
  readonly #maxInFlight: number;
  readonly #maxBatch: number;
  #queue: Pending[] = [];
  #inFlight = 0;
  /** A pump is due at the end of this turn of the event loop (see above). */
  #pumpScheduled = false;
  readonly #stats = { batches: 0, items: 0 };
  #alone = 0;

  constructor(query: RawQuery, opts: BatcherOptions = {}) {
    this.#query = query;
    this.#clock = new DatabaseClockOffset(query);
    this.#maxInFlight = opts.maxInFlight ?? VERIFY_STATEMENTS_IN_FLIGHT;
    this.#maxBatch = opts.maxBatch ?? 32;
  }

  /** Decides (or stores) one item with whatever else is waiting; past `deadline` it is never committed. */
  run(item: BatchItem, deadline: Date): Promise<ItemAnswer> {
    return new Promise<ItemAnswer>((resolve, reject) => {
      this.#queue.push({ item, deadline: deadline.getTime(), resolve, reject });
      if (!this.#pumpScheduled) {
        this.#pumpScheduled = true;
        setImmediate(() => {
          this.#pumpScheduled = false;
          this.#pump();
        });
      }
    });
  }

  #pump(): void {
    while (this.#inFlight < this.#maxInFlight && this.#queue.length > 0) {
      const now = Date.now();
      const batch: Pending[] = [];
      while (batch.length < this.#maxBatch && this.#queue.length > 0) {
        const p = this.#queue.shift()!;
        if (p.deadline <= now) p.reject(new ItemError('57014', 'verify deadline passed while queued for the database'));
        else batch.push(p);
      }
      if (batch.length === 0) continue;
      this.#inFlight++;
      void this.#send(batch).finally(() => {
        this.#inFlight--;
        this.#pump();
      });
    }
  }

  async #send(batch: readonly Pending[]): Promise<void> {
    try {
      const answers = await this.#decide(batch);
      batch.forEach((p, i) => p.resolve(answers[i]!));
    } catch (err) {
      // The batch committed nothing. Alone, each item fails or succeeds on its own,
      // so one item's error (a bug, a bad value) never becomes another request's 503.
      if (batch.length === 1) {
        batch[0]!.reject(err);
        return;
      }
      this.#alone += batch.length;
      await Promise.all(
        batch.map(async (p) => {
          // Refused for its own deadline, as if still queued: the batch's error may be another
          // item's (a bug, a bad value), and must not become this request's answer.
          if (p.deadline <= Date.now())
            return p.reject(new ItemError('57014', 'verify deadline passed while its failed batch was retried'));
          try {
            const [answer] = await this.#decide([p]);
            p.resolve(answer!);
          } catch (e) {
            p.reject(e);
          }
        }),
      );
    }
  }

  async #decide(batch: readonly Pending[]): Promise<ItemAnswer[]> {
    let earliest = batch[0]!.deadline;
    for (const p of batch) if (p.deadline < earliest) earliest = p.deadline;
    this.#stats.batches++;
    this.#stats.items += batch.length;
    const clockReading = this.#clock.fresh();
    if (clockReading !== undefined) await clockReading;
    const sent = performance.now();
    let failed = true;
    try {
      const deadline = new Date(earliest + this.#clock.offsetMs).toISOString();
      const [row] = await this.#query(BATCH_SQL, [deadline, JSON.stringify(batch.map((p) => p.item))]);
      const raw = row?.['r'];
      const answers = (typeof raw === 'string' ? JSON.parse(raw) : raw) as ItemAnswer[] | null | undefined;
      if (!Array.isArray(answers) || answers.length !== batch.length)
        throw new Error('baton_verify_batch answered the wrong number of items');
      failed = false;
      return answers;
    } finally {
      if (observers.size > 0) {
        const seen: BatchObservation = { items: batch.length, seconds: (performance.now() - sent) / 1000, failed };
        for (const observe of observers) {
          // An observer's failure must not turn a committed batch into a failed one (its items would be re-run).
          try {
            observe(seen);
          } catch (err) {
            process.emitWarning(`a verify batch observer failed: ${err instanceof Error ? err.message : String(err)}`);
          }
        }
      }
    }
  }

  /** Statements sent and items decided so far (items per batch is the group-commit factor), and items re-run alone after a failed batch. */
  stats(): { batches: number; items: number; alone: number } {
    return { ...this.#stats, alone: this.#alone };
  }
}

const batchers = new WeakMap<RawQuery, VerifyBatcher>();

/** The batcher of one store (keyed by its query function): every verify of the process shares it. */
export function verifyBatcherOf(query: RawQuery): VerifyBatcher {
  let b = batchers.get(query);
  if (!b) {
    b = new VerifyBatcher(query);
    batchers.set(query, b);
  }
  return b;
}
