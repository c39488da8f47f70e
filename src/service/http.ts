/**
 * The one place errors become HTTP. Every refusal leaves in the same
 * envelope: {error:{code, message, suggestion, details?}, request_id}.
 */
import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { BatonError, ERROR_TABLE, errorBody, type ErrorEnvelope } from '../protocol/errors.js';
import { errorForLog, isStorageUnavailable } from '../store/errors.js';
import { httpStatusOf } from './error-status.js';
import type { AppEnv } from './types.js';
import type { Logger } from './log.js';

export function toBatonError(err: unknown): BatonError {
  if (err instanceof BatonError) return err;
  if (isStorageUnavailable(err)) return new BatonError('STORAGE_UNAVAILABLE');
  if (err instanceof HTTPException) {
    if (err.status === 413) return new BatonError('PAYLOAD_TOO_LARGE');
    // Any other refusal of the request by a library (hono's 415, say) is the caller's to fix, not a 500.
    if (err.status >= 400 && err.status < 500)
      return new BatonError('INVALID_REQUEST', { message: err.message || ERROR_TABLE.INVALID_REQUEST.message });
  }
  return new BatonError('INTERNAL');
}

export function errorEnvelope(e: BatonError, requestId: string): ErrorEnvelope {
  return { error: errorBody(e), request_id: requestId };
}

export function handleError(err: unknown, c: Context<AppEnv>, log: Logger): Response {
  const e = toBatonError(err);
  const status = httpStatusOf(e);
  const requestId = c.get('requestId') ?? 'unknown';
  if (status >= 500) {
    log.error(e.code === 'STORAGE_UNAVAILABLE' ? 'storage unavailable' : 'unhandled error', {
      request_id: requestId,
      ...errorForLog(err, e.code === 'INTERNAL'),
    });
  }
  return c.json(errorEnvelope(e, requestId), status);
}
