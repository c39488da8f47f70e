import { BatonError } from '../protocol/errors.js';

// Drizzle wraps driver errors in DrizzleQueryError; the SQLSTATE and the
// constraint name live on the cause, under different names per driver
// (postgres.js: constraint_name, PGlite: constraint). This reads either.

export interface PgErrorInfo {
  code: string; // SQLSTATE, e.g. '23505'
  constraint?: string;
  message: string;
}

export const PG_UNIQUE_VIOLATION = '23505';
export const PG_CHECK_VIOLATION = '23514';
export const PG_FOREIGN_KEY_VIOLATION = '23503';
export const PG_RAISE_EXCEPTION = 'P0001';

export function pgError(err: unknown): PgErrorInfo | undefined {
  for (let e: unknown = err, depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    const o = e as { code?: unknown; constraint_name?: unknown; constraint?: unknown; message?: unknown; cause?: unknown };
    if (typeof o.code === 'string' && /^[0-9A-Z]{5}$/.test(o.code)) {
      const constraint = o.constraint_name ?? o.constraint;
      return {
        code: o.code,
        ...(typeof constraint === 'string' ? { constraint } : {}),
        message: String(o.message ?? ''),
      };
    }
    e = o.cause;
  }
  return undefined;
}

/**
 * Runs a write that names a tenant. A foreign-key violation there means the
 * tenant does not exist (it was never created, or was deleted meanwhile):
 * NOT_FOUND, worded like every other unknown tenant.
 */
export async function inExistingTenant<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (err) {
    if (pgError(err)?.code === PG_FOREIGN_KEY_VIOLATION) throw new BatonError('NOT_FOUND', { message: UNKNOWN_TENANT });
    throw err;
  }
}

export const UNKNOWN_TENANT = 'No tenant has this id.';

export function isUniqueViolation(err: unknown, constraint?: string): boolean {
  const p = pgError(err);
  return p?.code === PG_UNIQUE_VIOLATION && (constraint === undefined || p.constraint === constraint);
}

export function isCheckViolation(err: unknown, constraint?: string): boolean {
  const p = pgError(err);
  return p?.code === PG_CHECK_VIOLATION && (constraint === undefined || p.constraint === constraint);
}

// Connection-level failures (postgres.js puts these on err.code; Node's net errors too).
const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'EAI_AGAIN',
  'CONNECT_TIMEOUT',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
]);

/** True when the database refused a statement for its deadline: 57014 (its own check, or a statement timeout) or 55P03 (a lock wait ended). */
export function isDeadlineRefusal(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (code === '57014' || code === '55P03') return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * True when an error means the database could not answer now (down, restarting,
 * out of connections, timed out, contention the caller may retry), so the
 * service answers 503, never an allow; false for errors in the query itself.
 * SQLSTATE classes: 08 connection, 53 insufficient resources, 57P01-03 shutdown,
 * 57014 statement timeout, 55P03 lock timeout, 40001/40P01 retryable contention,
 * 25006 a read-only transaction (a standby, or a primary set read-only: a failover
 * under way), 58000/58030 system and I/O errors.
 */
export function isStorageUnavailable(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    const o = e as { code?: unknown; message?: unknown; cause?: unknown };
    if (typeof o.code === 'string') {
      const c = o.code;
      if (UNAVAILABLE_CODES.has(c)) return true;
      if (c.startsWith('08') || c.startsWith('53') || c.startsWith('57P')) return true;
      if (c === '58000' || c === '58030') return true; // system and I/O errors, not 58P01-02 (a missing file: configuration)
      if (c === '57014' || c === '55P03' || c === '40001' || c === '40P01' || c === '25006') return true;
    }
    if (typeof o.message === 'string' && /PGlite is closed/i.test(o.message)) return true;
    e = o.cause;
  }
  return false;
}

/**
 * An error as a log line may show it: never a query's parameters. Drizzle's DrizzleQueryError puts
 * every parameter in its message (`Failed query: … params: …`), among them API key hashes, DIDs and
 * a call's arguments; the log says which query failed and why (the driver's cause: ECONNREFUSED, a
 * SQLSTATE), and keeps the stack's frames without that message.
 */
export function errorForLog(err: unknown, withStack = false): { error: string; cause?: string; stack?: string } {
  if (!(err instanceof Error)) return { error: errorText(err) }; // an object thrown: not "[object Object]"
  const query = (err as { query?: unknown }).query;
  const redacted = typeof query === 'string' && 'params' in err;
  const error = redacted ? `Failed query: ${query}` : `${err.name}: ${err.message}`;
  const cause = (err as { cause?: unknown }).cause;
  const causeCode = (cause as { code?: unknown } | undefined)?.code;
  const causeText =
    cause instanceof Error
      ? `${cause.name}: ${cause.message}${typeof causeCode === 'string' ? ` (${causeCode})` : ''}`
      : cause === undefined
        ? undefined
        : errorText(cause); // PGlite's file-system errors are no Error: String() said "[object Object]"
  const frames = withStack ? (err.stack ?? '').split('\n').filter((line) => /^\s+at /.test(line)) : [];
  return {
    error,
    ...(causeText === undefined ? {} : { cause: causeText }),
    ...(frames.length > 0 ? { stack: [error, ...frames].join('\n') } : {}),
  };
}

/**
 * The errors PGlite's file system throws (Emscripten's ErrnoError: no message, not an Error, a WASI
 * errno) that a start can meet, as text that says what to do; a disk filling on the first start
 * printed "[object Object]".
 */
const EMBEDDED_FS_ERRNO: Readonly<Record<number, string>> = {
  2: 'permission denied (EACCES): let the user running Baton write the data folder',
  19: 'disk quota exceeded (EDQUOT): free space where the data folder is, or set BATON_DATA_DIR to a folder with room',
  29: 'an input/output error (EIO): check the disk the data folder is on',
  44: 'a file or folder is missing (ENOENT): check that the data folder exists and was not removed while Baton ran',
  51: 'no space left on the device (ENOSPC): free space where the data folder is, or set BATON_DATA_DIR to a folder with room',
  63: 'operation not permitted (EPERM): let the user running Baton write the data folder',
  69: 'the file system is read-only (EROFS): set BATON_DATA_DIR to a writable folder',
};

function embeddedFsErrorText(err: unknown): string | undefined {
  if (err === null || typeof err !== 'object') return undefined;
  const { name, errno } = err as { name?: unknown; errno?: unknown };
  if (name !== 'ErrnoError' || typeof errno !== 'number') return undefined;
  return `the embedded database could not use its data folder: ${EMBEDDED_FS_ERRNO[errno] ?? `file system error number ${errno} (WASI)`}`;
}

/** errorForLog as one line of text, for a message printed rather than logged (a failed start). */
export function errorText(err: unknown): string {
  if (!(err instanceof Error)) {
    const fs = embeddedFsErrorText(err);
    if (fs !== undefined) return fs;
    // Something thrown that is no Error: what it is and the names of its fields, not "[object
    // Object]"; not their values, which may hold a secret (a connection string, say).
    if (err !== null && typeof err === 'object') {
      const keys = Object.keys(err).slice(0, 20);
      const kind = (err as object).constructor?.name ?? 'Object';
      return keys.length > 0 ? `a thrown ${kind} with the fields ${keys.join(', ')}` : `a thrown ${kind}`;
    }
    return String(err);
  }
  const { error, cause } = errorForLog(err);
  // A message of Baton's own already says what failed; only a driver's needs its cause beside it.
  const own = error.startsWith(`${err.name}: `) ? error.slice(err.name.length + 2) : error;
  return cause === undefined ? own : `${own} (${cause})`;
}
