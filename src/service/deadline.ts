/**
 * How long a request waits for the database. A paused or partitioned database
 * otherwise leaves a request waiting for as long as the pool does (forever on
 * an open connection), and clients pile up. Every request gets a deadline when
 * it arrives (BATON_VERIFY_DEADLINE_MS); the API key lookup, every read and
 * the verify race it, and a wait past it is answered 503 STORAGE_UNAVAILABLE.
 * The work itself is abandoned, not cancelled: a read changes nothing, and the
 * verify's statement refuses to commit after the same deadline.
 */
import { BatonError } from '../protocol/errors.js';

/** `work`, or STORAGE_UNAVAILABLE with `message` once `deadline` passes first. */
export async function withinDeadline<T>(work: Promise<T>, deadline: Date, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new BatonError('STORAGE_UNAVAILABLE', { message })), Math.max(0, deadline.getTime() - Date.now()));
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
    work.catch(() => {}); // settles after the deadline answered: nobody waits for it any more
  }
}
