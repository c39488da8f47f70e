/**
 * The one place errors become HTTP. Every refusal leaves in the same
 * envelope: {error:{code, message, suggestion, details?}, request_id}.
 */
import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { BatonError, ERROR_TABLE, type ErrorCode } from '../protocol/errors.js';
import { isStorageUnavailable } from '../store/errors.js';
import type { AppEnv } from './types.js';
import type { Logger } from './log.js';

export interface ErrorEnvelope {
  error: { code: ErrorCode; message: string; suggestion: string; details?: Record<string, unknown> };
  request_id: string;
}

export function toBatonError(err: unknown): BatonError {
  if (err instanceof BatonError) return err;
  if (isStorageUnavailable(err)) return new BatonError('STORAGE_UNAVAILABLE');
  if (err instanceof HTTPException) {
    if (err.status === 413) return new BatonError('PAYLOAD_TOO_LARGE');
    if (err.status === 400) return new BatonError('INVALID_REQUEST', { message: err.message || ERROR_TABLE.INVALID_REQUEST.message });
  }
  return new BatonError('INTERNAL');
}

export function errorEnvelope(e: BatonError, requestId: string): ErrorEnvelope {
  const details: Record<string, unknown> = { ...(e.details ?? {}) };
  if (e.violations.length > 0) details['violations'] = e.violations;
  if (e.block) details['block'] = e.block;
  return {
    error: {
      code: e.code,
      message: e.message,
      suggestion: e.suggestion,
      ...(Object.keys(details).length > 0 ? { details } : {}),
    },
    request_id: requestId,
  };
}

export function handleError(err: unknown, c: Context<AppEnv>, log: Logger): Response {
  const e = toBatonError(err);
  const requestId = c.get('requestId') ?? 'unknown';
  if (e.status >= 500) {
    log.error(e.code === 'STORAGE_UNAVAILABLE' ? 'storage unavailable' : 'unhandled error', {
      request_id: requestId,
      error: err instanceof Error ? `${err.name}: ${err.message}` : String(err),
      ...(e.code === 'INTERNAL' && err instanceof Error ? { stack: err.stack } : {}),
    });
  }
  return c.json(errorEnvelope(e, requestId), e.status as 400);
}
