/** Helpers for the transparency-log protocol tests. */
import { BatonError, type ErrorCode } from '../../src/protocol/errors.js';

/** The stable code a call throws, or 'ok'. Anything but a BatonError is rethrown. */
export function codeOf(run: () => unknown): ErrorCode | 'ok' {
  try {
    run();
    return 'ok';
  } catch (e) {
    if (e instanceof BatonError) return e.code;
    throw e;
  }
}
