/** The BatonError a call throws, for tests of refusals. */
import { BatonError } from '../../src/protocol/errors.js';

/** The BatonError `run` throws; anything else it throws is rethrown, and returning is a failure. */
export function batonErrorOf(run: () => unknown): BatonError {
  try {
    run();
  } catch (e) {
    if (e instanceof BatonError) return e;
    throw e;
  }
  throw new Error('expected a BatonError, nothing was thrown');
}
