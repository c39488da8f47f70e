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
    () => new BatonError('STORAGE_UNAVAILABLE', suggestion === undefined ? { message } : { message, suggestion }),
    opts,
  );
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
}

/** `work`, or the error `refusal` makes once `deadline` passes first (made then, so it can say what happened by that moment). */
export async function withinDeadlineOr<T>(
  work: Promise<T>,
  deadline: Date,
  refusal: () => BatonError,
  opts: DeadlineOptions = {},
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let lastLook: NodeJS.Immediate | undefined;
  const late = new Promise<never>((_, reject) => {
    const refuse = () => reject(refusal());
    // setImmediate runs after the event loop's poll phase, so every answer already received is read (and its promises settled) first.
    const onDeadline = opts.lastLook ? () => (lastLook = setImmediate(refuse)) : refuse;
    timer = setTimeout(onDeadline, Math.max(0, deadline.getTime() - Date.now()));
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
    clearImmediate(lastLook);
    work.catch(() => {}); // settles after the deadline answered: nobody waits for it any more
  }
}

/**
 * Stands between a write request's work and its commits. The write deadline answers 503 while the
 * work may still be waiting for the database; the work goes on when the database answers again,
 * and each of its commits asks the gate first (`beforeCommit`, last thing inside a transaction).
 * Once the 503 is out (`abandon`), the gate throws, so the transaction rolls back instead of
 * applying a change its client was told failed. `abandon` says whether a commit had already been
 * let through, and so whether the 503 may say that nothing was changed.
 */
export class CommitGate {
  #abandoned = false;
  #letThrough = false;

  /** Throws once the request was answered 503; otherwise notes that a commit is on its way. */
  beforeCommit(): void {
    if (this.#abandoned) {
      throw new BatonError('STORAGE_UNAVAILABLE', {
        message: 'This request was already answered 503 (the database was too slow), so its change was rolled back.',
      });
    }
    this.#letThrough = true;
  }

  /** No commit passes from now on. True when one already did, so the change may be applied in part or whole. */
  abandon(): boolean {
    this.#abandoned = true;
    return this.#letThrough;
  }
}
