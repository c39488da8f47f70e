/**
 * How long a request waits for the database. A paused or partitioned database
 * otherwise leaves a request waiting for as long as the pool does (forever on
 * an open connection), and clients pile up. Every request gets a deadline when
 * it arrives (BATON_VERIFY_DEADLINE_MS); the API key lookup, every read and
 * the verify race it, and a wait past it is answered 503 STORAGE_UNAVAILABLE.
 * The work itself is abandoned, not cancelled: a read changes nothing, and the
 * verify's statements refuse to commit after a deadline earlier than the
 * request's (commitMarginMs, verify.handlers.ts). Other writes
 * race a longer deadline (BATON_WRITE_DEADLINE_MS) and pass a CommitGate
 * before each commit: once their 503 is out, the gate refuses, so the work
 * rolls back when the database answers again, and the 503 can say so.
 */
import { BatonError } from '../protocol/errors.js';

/**
 * `work`, or STORAGE_UNAVAILABLE with `message` once `deadline` passes first (and `suggestion`,
 * where the code's own, that nothing was counted, would not be true).
 */
export async function withinDeadline<T>(
  work: Promise<T>,
  deadline: Date,
  message: string,
  suggestion?: string,
  opts: DeadlineOptions = {},
): Promise<T> {
  return withinDeadlineOr(
    work,
    deadline,
    (late) =>
      late.uploadMs !== undefined
        ? uploadTooSlow(late.uploadMs, 'nothing was changed')
        : new BatonError('STORAGE_UNAVAILABLE', suggestion === undefined ? { message } : { message, suggestion }),
    opts,
  );
}

/**
 * Why a deadline passed: `uploadMs` is set when the body took longer to arrive than the deadline's
 * own length (`capMs`), so the database had less than its whole time: the client's slowness, not
 * the database's, and not to be logged or counted as a storage outage.
 */
export interface LateBy {
  readonly uploadMs?: number;
}

/** The refusal of a request whose body took longer to arrive than the time Baton waits for the database. */
export function uploadTooSlow(uploadMs: number, outcome: string): BatonError {
  return new BatonError('REQUEST_TIMEOUT', {
    message: `The request's body took ${Math.round(uploadMs)} ms to arrive, longer than Baton waits for the database, and the answer did not come in the time that was left; ${outcome}.`,
    suggestion: 'Send the body whole and at once, then send the request again.',
  });
}

export interface DeadlineOptions {
  /**
   * At the deadline, read what has already arrived before refusing: the answer may be waiting in a
   * socket. When the event loop was held up (a long collection, a throttled or paused process), its
   * timers run before it reads the sockets, so a verify the database had decided and counted in
   * time was answered 503 (an outside probe: 1-3 of 30 verifies in flight when the node stalled).
   * Not for writes: there, going on would let the work send a COMMIT the 503 must forbid (CommitGate).
   */
  readonly lastLook?: boolean;
  /**
   * The request's body upload: the time it takes is the client's, not the database's, so the
   * deadline moves on by it, by at most `capMs`. A deadline that passes while the body is still
   * arriving waits for its end (the server's request timeout ends an upload that never does).
   */
  readonly upload?: { readonly clock: UploadClock; readonly capMs: number };
}

/**
 * How long a request has spent receiving its body (body.ts starts and ends it). A slow upload was
 * answered 503 "the database did not answer", logged and counted as a storage outage, on a
 * healthy database: anyone, keyless too, could raise that alarm at will (an outside probe).
 */
export class UploadClock {
  #startedAt: number | undefined;
  #ms = 0;
  #waiting: (() => void)[] = [];

  constructor(private readonly onEnd: () => void = () => {}) {}

  start(): void {
    this.#startedAt ??= performance.now();
  }

  end(): void {
    if (this.#startedAt === undefined) return;
    this.#ms += performance.now() - this.#startedAt;
    this.#startedAt = undefined;
    this.onEnd();
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const resume of waiting) resume();
  }

  get uploading(): boolean {
    return this.#startedAt !== undefined;
  }

  /** Milliseconds spent receiving the body, the upload in progress included. */
  get ms(): number {
    return this.#ms + (this.#startedAt === undefined ? 0 : performance.now() - this.#startedAt);
  }

  /** `deadline` moved on by the upload's time, by at most `capMs`. */
  moved(deadline: Date, capMs: number): Date {
    return new Date(deadline.getTime() + Math.min(this.ms, capMs));
  }

  /** Whether the upload took longer than `capMs`: then a deadline passed is the client's doing. */
  outlasted(capMs: number): boolean {
    return this.ms > capMs;
  }

  /** Runs `resume` when the upload in progress ends. */
  whenDone(resume: () => void): void {
    this.#waiting.push(resume);
  }
}

/** `work`, or the error `refusal` makes once `deadline` passes first (made then, so it can say what happened by that moment). */
export async function withinDeadlineOr<T>(
  work: Promise<T>,
  deadline: Date,
  refusal: (late: LateBy) => BatonError,
  opts: DeadlineOptions = {},
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let lastLook: NodeJS.Immediate | undefined;
  let settled = false;
  const late = new Promise<never>((_, reject) => {
    const { upload } = opts;
    const refuse = () => reject(refusal(upload?.clock.outlasted(upload.capMs) === true ? { uploadMs: upload.clock.ms } : {}));
    // setImmediate runs after the event loop's poll phase, so every answer already received is read (and its promises settled) first.
    const onDeadline = opts.lastLook ? () => (lastLook = setImmediate(refuse)) : refuse;
    const check = () => {
      if (settled) return;
      if (upload !== undefined) {
        if (upload.clock.uploading) return upload.clock.whenDone(check);
        const left = upload.clock.moved(deadline, upload.capMs).getTime() - Date.now();
        if (left > 0) return void (timer = setTimeout(check, left));
      }
      onDeadline();
    };
    timer = setTimeout(check, Math.max(0, deadline.getTime() - Date.now()));
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    settled = true;
    clearTimeout(timer);
    clearImmediate(lastLook);
    work.catch(() => {}); // settles after the deadline answered: nobody waits for it any more
  }
}

/**
 * Stands between a write request's work and its commits. The write deadline answers (503, or 408
 * for a body too slow to arrive) while the work may still be waiting for the database; the work
 * goes on when the database answers again, and each of its commits asks the gate first
 * (`beforeCommit`, last thing inside a transaction). Once the answer is out (`abandon`), the gate
 * throws, so the transaction rolls back instead of applying a change its client was told failed.
 * `abandon` says whether a commit had already been let through, and so whether the answer may say
 * that nothing was changed.
 */
export class CommitGate {
  #answered: string | undefined;
  #letThrough = false;

  /** Throws once the request was answered; otherwise notes that a commit is on its way. */
  beforeCommit(): void {
    if (this.#answered !== undefined) {
      const rolledBack = new BatonError('STORAGE_UNAVAILABLE', {
        message: `This request was already answered ${this.#answered}, so its change was rolled back.`,
      });
      rolledBackAfterAnswer.add(rolledBack);
      throw rolledBack;
    }
    this.#letThrough = true;
  }

  /** Whether a commit was let through (the change may be applied in part or whole). */
  get letThrough(): boolean {
    return this.#letThrough;
  }

  /**
   * No commit passes from now on: the request was answered as `answered` says (its status and why,
   * for the rollback's own text). True when a commit already passed.
   */
  abandon(answered: string): boolean {
    this.#answered = answered;
    return this.#letThrough;
  }
}

const rolledBackAfterAnswer = new WeakSet<Error>();

/**
 * Whether `err` is a write's rollback after its answer went out (CommitGate). That answer was
 * logged and counted when it was made; this is no second outage, and after a 408 none at all (a
 * slow upload, logged as a storage outage, let anyone raise that alarm: a review).
 */
export function isRollbackAfterAnswer(err: unknown): boolean {
  return err instanceof Error && rolledBackAfterAnswer.has(err);
}
