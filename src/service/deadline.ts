/**
 * How long a request waits for the database. A paused or partitioned database
 * otherwise leaves a request waiting for as long as the pool does (forever on
 * an open connection), and clients pile up. Every request gets a deadline when
 * it arrives (BATON_VERIFY_DEADLINE_MS); the API key lookup, every read and
 * the verify race it, and a wait past it is answered 503 STORAGE_UNAVAILABLE.
 * The work itself is abandoned, not cancelled: a read changes nothing, and the
 * verify's statement refuses to commit after the same deadline. Other writes
 * race a longer deadline (BATON_WRITE_DEADLINE_MS), and their 503 says the
 * change may still be applied.
 */
import { BatonError } from '../protocol/errors.js';

/**
 * `work`, or STORAGE_UNAVAILABLE with `message` once `deadline` passes first (and `suggestion`,
 * where the code's own, that nothing was counted, would not be true).
 */
export async function withinDeadline<T>(work: Promise<T>, deadline: Date, message: string, suggestion?: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    const refuse = () => reject(new BatonError('STORAGE_UNAVAILABLE', suggestion === undefined ? { message } : { message, suggestion }));
    timer = setTimeout(refuse, Math.max(0, deadline.getTime() - Date.now()));
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
    work.catch(() => {}); // settles after the deadline answered: nobody waits for it any more
  }
}
