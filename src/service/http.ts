/**
 * The one place errors become HTTP. Every refusal leaves in the same
 * envelope: {error:{code, message, suggestion, details?}, request_id}.
 */
import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { BatonError, ERROR_TABLE, errorBody, type ErrorEnvelope } from '../protocol/errors.js';
import { errorForLog, isStorageUnavailable } from '../store/errors.js';
import { bodyBudget, type BodyCaller } from './body.js';
import { isRollbackAfterAnswer } from './deadline.js';
import { httpStatusOf } from './error-status.js';
import { metrics } from './metrics.js';
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

/** INTERNAL errors whose text and details are meant for the caller (shownToCaller). */
const callerFacing = new WeakSet<BatonError>();

/**
 * Marks an INTERNAL error whose text and details the caller needs, as documented for its route (a
 * log entry bundle that cannot be served names the entries still there, for an auditor to check one
 * by one). Every other INTERNAL error reaches the caller as the general text only.
 */
export function shownToCaller(e: BatonError): BatonError {
  callerFacing.add(e);
  return e;
}

export function errorEnvelope(e: BatonError, requestId: string): ErrorEnvelope {
  return { error: errorBody(e), request_id: requestId };
}

/** The code of each error answer a route gave, for its request line (app.ts): set only when answering an error. */
const answeredErrorCodes = new WeakMap<Context, string>();

/** Notes the code of the error `c` answers with, for its request line. */
export function noteErrorCode(c: Context, code: string): void {
  answeredErrorCodes.set(c, code);
}

/** The code of the error `c` answered with, if it answered one. */
export function errorCodeOf(c: Context): string | undefined {
  return answeredErrorCodes.get(c);
}

export function handleError(err: unknown, c: Context<AppEnv>, log: Logger): Response {
  const e = toBatonError(err);
  const status = httpStatusOf(e);
  const requestId = c.get('requestId') ?? 'unknown';
  noteErrorCode(c, e.code);
  // An INTERNAL error's own text is the operator's (a master key that does not match, a row to
  // restore from a backup): the caller, perhaps a tenant, gets the table's, unless the error was
  // made for callers (shownToCaller); the log gets it whole.
  const shown = e.code === 'INTERNAL' && !callerFacing.has(e) ? new BatonError('INTERNAL') : e;
  const operatorText = shown === e ? {} : { suggestion: e.suggestion, ...(e.details ? { details: e.details } : {}) };
  // A write rolled back after its answer went out: that answer was logged; this is no outage of its own.
  if (isRollbackAfterAnswer(err)) log.debug('rolled back after its answer', { request_id: requestId, ...errorForLog(err) });
  else if (e.code === 'STORAGE_UNAVAILABLE') logStorageUnavailable(log, err, { request_id: requestId, ...errorForLog(err) });
  // A body refused for the process's body budget is load, not a fault: counted, and told at warn.
  else if (e.code === 'SERVICE_BUSY') {
    const auth = c.get('auth');
    const caller: BodyCaller = auth !== undefined ? 'keyed' : 'keyless';
    metrics.countBodyBudgetRefusal(caller);
    logServiceBusy(log, requestId, caller, auth?.tenantId);
  } else if (status >= 500)
    log.error('unhandled error', { request_id: requestId, ...errorForLog(err, e.code === 'INTERNAL'), ...operatorText });
  return c.json(errorEnvelope(shown, requestId), status);
}

/** The SQLSTATE (or driver code such as CONNECTION_CLOSED) an error or one of its causes carries. */
function sqlStateOf(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    const { code, cause } = e as { code?: unknown; cause?: unknown };
    if (typeof code === 'string') return code;
    e = cause;
  }
  return undefined;
}

/** At most one `storage unavailable` line per logger in this time; the rest are counted. */
export const STORAGE_LOG_INTERVAL_MS = 1_000;
const storageLogs = new WeakMap<
  Logger,
  { loggedAt: number; unlogged: number; requestIds: string[]; codes: Record<string, number>; timer?: NodeJS.Timeout }
>();
/** How many request ids a summary line names: enough to find a few of its 503s, not a wall of them. */
const SUMMARY_REQUEST_IDS = 5;

/**
 * While the database is down every request fails the same way: a node answering a few thousand
 * verifies a second wrote as many identical error lines, enough to fill a disk (maybe the one the
 * database waits on) and to bury everything else. The first failure in each interval is logged
 * with its cause; the others are counted and told in one line at the interval's end.
 */
function logStorageUnavailable(log: Logger, err: unknown, fields: Record<string, unknown> & { request_id: string }): void {
  const now = performance.now();
  let state = storageLogs.get(log);
  if (!state) storageLogs.set(log, (state = { loggedAt: -Infinity, unlogged: 0, requestIds: [], codes: {} }));
  if (now - state.loggedAt >= STORAGE_LOG_INTERVAL_MS) {
    state.loggedAt = now;
    log.error('storage unavailable', fields);
    return;
  }
  state.unlogged++;
  const code = sqlStateOf(err) ?? 'other';
  state.codes[code] = (state.codes[code] ?? 0) + 1;
  if (state.requestIds.length < SUMMARY_REQUEST_IDS) state.requestIds.push(fields.request_id);
  if (state.timer) return;
  const told = state;
  told.timer = setTimeout(
    () => {
      log.error(`storage unavailable: ${told.unlogged} more request(s) answered 503 in the last second, not logged one by one`, {
        requests: told.unlogged,
        request_ids: told.requestIds,
        sqlstates: told.codes,
      });
      told.unlogged = 0;
      told.requestIds = [];
      told.codes = {};
      told.timer = undefined;
    },
    Math.max(0, told.loggedAt + STORAGE_LOG_INTERVAL_MS - now),
  );
  told.timer.unref();
}

/** At most one `request body budget full` line per logger in this time; the rest are counted. */
const busyLogs = new WeakMap<
  Logger,
  { loggedAt: number; unlogged: number; requestIds: string[]; callers: Record<BodyCaller, number>; timer?: NodeJS.Timeout }
>();

/**
 * A body refused 503 SERVICE_BUSY (body.ts's budget): load, not a fault, but the operator must be
 * able to tell it from a storage 503. While bodies are refused they are refused by the hundred, so
 * as logStorageUnavailable does: the first in each interval is logged with the budget's state, and
 * the others are counted and told in one line at the interval's end. A keyed one's line names its
 * caller's tenant (null: the admin key) and what that caller holds, so a tenant whose stalled bodies
 * fill its share is found (a tenant is never a metrics label: their number is unbounded).
 */
function logServiceBusy(log: Logger, requestId: string, caller: BodyCaller, tenantId: string | null | undefined): void {
  const now = performance.now();
  let state = busyLogs.get(log);
  if (!state) busyLogs.set(log, (state = { loggedAt: -Infinity, unlogged: 0, requestIds: [], callers: { keyed: 0, keyless: 0 } }));
  if (now - state.loggedAt >= STORAGE_LOG_INTERVAL_MS) {
    state.loggedAt = now;
    log.warn('request body budget full: a body was refused 503 SERVICE_BUSY (BATON_MAX_BODY_BUFFER_BYTES)', {
      request_id: requestId,
      caller,
      held_bytes: bodyBudget.held,
      keyless_held_bytes: bodyBudget.heldKeyless,
      limit_bytes: bodyBudget.limit,
      keyless_limit_bytes: bodyBudget.keylessLimit,
      ...(tenantId !== undefined
        ? { tenant_id: tenantId, tenant_held_bytes: bodyBudget.heldBy(tenantId), tenant_limit_bytes: bodyBudget.callerLimit }
        : {}),
    });
    return;
  }
  state.unlogged++;
  state.callers[caller]++;
  if (state.requestIds.length < SUMMARY_REQUEST_IDS) state.requestIds.push(requestId);
  if (state.timer) return;
  const told = state;
  told.timer = setTimeout(
    () => {
      log.warn(
        `request body budget full: ${told.unlogged} more body(ies) refused 503 SERVICE_BUSY in the last second, not logged one by one`,
        {
          requests: told.unlogged,
          request_ids: told.requestIds,
          callers: told.callers,
        },
      );
      told.unlogged = 0;
      told.requestIds = [];
      told.callers = { keyed: 0, keyless: 0 };
      told.timer = undefined;
    },
    Math.max(0, told.loggedAt + STORAGE_LOG_INTERVAL_MS - now),
  );
  told.timer.unref();
}

/** @hono/node-server's reasons, in Baton's words; another (a newer version's) gets the general one. */
const UNBUILDABLE_REASONS: Readonly<Record<string, string>> = {
  'Missing host header': 'it has no Host header',
  'Invalid host header': 'its Host header is not a host name (with an optional port)',
  'Backslash in request path': 'its path contains a backslash',
};

/**
 * What @hono/node-server parsed but could not make a Request of (no Host header, a Host that is no
 * host name, a backslash in the path, a target such as `*` that is not a path): answered in the
 * envelope with `connection: close`, as answerUnreadRequest answers what Node's parser refuses.
 * Nothing ran. Anything else reaching node-server's error handler escaped the app's error mapper
 * (which catches every error a route throws): a 500 in the envelope, logged.
 */
export function answerUnbuildableRequest(err: unknown, log: Logger): Response {
  const requestId = randomUUID();
  const unbuildable = err instanceof Error && err.name === 'RequestError';
  const reason = unbuildable ? (UNBUILDABLE_REASONS[err.message] ?? 'its target is not a path Baton serves') : undefined;
  const e =
    reason !== undefined
      ? new BatonError('INVALID_REQUEST', {
          message: `Baton cannot read this request: ${reason}.`,
          suggestion: 'Send an HTTP/1.1 request with a Host header and a target that is a path starting with "/" (see GET /docs).',
        })
      : new BatonError('INTERNAL');
  if (!unbuildable) log.error('unhandled error', { request_id: requestId, ...errorForLog(err, true) });
  // node-server's error handler is given the error alone: the method is not known here.
  recordUnreadableRequest(log, {
    requestId,
    method: undefined,
    status: httpStatusOf(e),
    code: e.code,
    reason: reason ?? 'unhandled error',
  });
  return new Response(JSON.stringify(errorEnvelope(e, requestId)), {
    status: httpStatusOf(e),
    headers: { 'content-type': 'application/json', 'x-request-id': requestId, connection: 'close' },
  });
}

/** An HTTP/1.1 request with no Host header, which RFC 9112 has a server refuse with 400. */
export function isHostlessHttp11(req: { readonly httpVersion: string; readonly headers: { readonly host?: string | undefined } }): boolean {
  return req.httpVersion === '1.1' && (req.headers.host === undefined || req.headers.host === '');
}

/**
 * The route label (baton_http_requests_total) of a request answered before any route could read it,
 * and of its `request` log line: one fixed value, never its target or its Host, which may be
 * anything a client sent (a label per value would grow without bound, and a log line would carry it).
 */
export const UNREADABLE_ROUTE = '(unreadable)';

/**
 * The `request` line and count of a request answered outside the app (which logs and counts every
 * request a route reads): its answer carries a request_id to quote to the operator, who must find it.
 * Logged at info, as the app logs every request line whatever its status. With no logger (a caller
 * wired without one), it is counted only.
 */
export function recordUnreadableRequest(
  log: Logger | undefined,
  r: { requestId: string; method: string | undefined; status: number; code: string; reason: string },
): void {
  metrics.countRequest(r.method ?? 'unknown', UNREADABLE_ROUTE, r.status);
  log?.info('request', {
    request_id: r.requestId,
    method: r.method ?? null,
    path: null,
    route: UNREADABLE_ROUTE,
    status: r.status,
    code: r.code,
    reason: r.reason,
  });
}

/** The 400 for a request without Host, in the envelope, closing the connection; nothing ran. */
export function answerHostless(
  res: {
    writeHead(status: number, headers: Record<string, string | number>): unknown;
    end(body: string): unknown;
    /** Node's own field: the request this answers (its method is one Node's parser knows). */
    readonly req?: { readonly method?: string | undefined };
  },
  log?: Logger,
): void {
  const requestId = randomUUID();
  recordUnreadableRequest(log, {
    requestId,
    method: res.req?.method,
    status: 400,
    code: 'INVALID_REQUEST',
    reason: 'it has no Host header',
  });
  const body = JSON.stringify(
    errorEnvelope(
      new BatonError('INVALID_REQUEST', {
        message: 'Baton cannot read this request: it is HTTP/1.1 with no Host header.',
        suggestion: 'Send a Host header naming this service, as HTTP/1.1 requires.',
      }),
      requestId,
    ),
  );
  res.writeHead(400, {
    'content-type': 'application/json',
    'x-request-id': requestId,
    'content-length': Buffer.byteLength(body),
    connection: 'close',
  });
  res.end(body);
}

/** What Node's HTTP parser reports of a request it could not read, and the socket it came on. */
export interface UnreadRequestSocket {
  readonly writable: boolean;
  /**
   * The answer attached to this connection, if any (Node's own field): Node attaches it once a
   * request's headers are read, and detaches it when the answer is finished.
   */
  readonly _httpMessage?: { readonly headersSent?: boolean; readonly req?: { readonly complete?: boolean } } | null;
  end(data: string, done: () => void): unknown;
  destroy(): unknown;
}

/**
 * Node refuses some requests before Baton sees them: a request line or header it cannot parse, headers
 * past the limit, a request not in within the timeouts. Its own answer is a bare status line; this one
 * is Baton's envelope with a stable code, at the status Node would have chosen, and closes the
 * connection as Node's does (what follows on it cannot be framed). Nothing was read, so nothing is done.
 */
export function answerUnreadRequest(err: Error & { code?: string }, socket: UnreadRequestSocket, log?: Logger): void {
  // Answered only what the parser or the timeouts refused (a socket error is a client gone), and only
  // when no request read in full is still being answered on this connection (a pipelined client):
  // written then, this answer would read as that request's, and its "nothing was done" as a lie. A
  // request whose own body failed is not read in full, so it gets the answer, as Node's would.
  const refusal = err.code?.startsWith('HPE_') === true || err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
  if (!refusal || !socket.writable || answeringRequestRead(socket)) {
    socket.destroy();
    return;
  }
  const e =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? new BatonError('HEADERS_TOO_LARGE')
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? new BatonError('REQUEST_TIMEOUT')
        : err.code === 'HPE_CHUNK_EXTENSIONS_OVERFLOW'
          ? new BatonError('PAYLOAD_TOO_LARGE', {
              message: 'A chunk of the request body carries more extension bytes than Baton reads.',
              suggestion: 'Send the body without chunk extensions (or with Content-Length instead of chunked encoding).',
            })
          : new BatonError('INVALID_REQUEST', {
              message: `The request is not HTTP/1.1 that Baton can read${err.code?.startsWith('HPE_') ? ` (${err.code})` : ''}.`,
              suggestion:
                'Send one well-formed HTTP/1.1 request: a request line, headers, and a body framed by Content-Length or chunked encoding (not both).',
            });
  // A request a route is reading (its body cut short by the timeout or the parser): answered with the
  // route's request id, and logged and counted once, by the route's own line, as what was answered.
  const reading = socket._httpMessage as RouteReading | null | undefined;
  const routeRequestId = reading?.[ROUTE_REQUEST_ID];
  const requestId = answerAndClose(socket, e, routeRequestId);
  // The parser's code (HPE_*) or the timeout's: a fixed set, never the bytes it could not read.
  const answered = { status: httpStatusOf(e), code: e.code, reason: err.code ?? 'unknown' };
  if (reading != null && routeRequestId !== undefined) reading[ANSWERED_OUTSIDE] = answered;
  else recordUnreadableRequest(log, { requestId, method: undefined, ...answered });
}

/** What answerUnreadRequest answered for a request a route was reading (the client got that answer, not the route's). */
export interface AnsweredOutside {
  readonly status: number;
  readonly code: string;
  readonly reason: string;
}

/**
 * A request a route is reading is found by its answer (Node's ServerResponse, which Node attaches to
 * the socket), which carries the request id its line carries, and what answerUnreadRequest answered
 * for it if the request timeout or the parser cut it short. Kept on the answer itself, under symbols
 * no one else reads: set for every request, so it allocates nothing (a WeakMap entry and an object
 * per request cost the verify hot path about a microsecond).
 */
const ROUTE_REQUEST_ID = Symbol('baton.routeRequestId');
const ANSWERED_OUTSIDE = Symbol('baton.answeredOutside');
interface RouteReading {
  [ROUTE_REQUEST_ID]?: string;
  [ANSWERED_OUTSIDE]?: AnsweredOutside;
}

/** Registers the request answered by `outgoing` as read by a route (app.ts, for its request line). */
export function readByRoute(outgoing: object, requestId: string): void {
  (outgoing as RouteReading)[ROUTE_REQUEST_ID] = requestId;
}

/** What answerUnreadRequest answered for the request a route read, answered by `outgoing`, if it answered it. */
export function answeredOutsideOf(outgoing: object): AnsweredOutside | undefined {
  return (outgoing as RouteReading)[ANSWERED_OUTSIDE];
}

/**
 * A CONNECT request (the server's 'connect' event): with no listener Node closed the connection
 * without a word. Baton is not a proxy: it answers in its envelope, as any request it cannot
 * serve, and closes the connection (its bytes after the head are the tunnel's, never read).
 */
export function answerConnect(_req: unknown, socket: UnreadRequestSocket): void {
  // Pipelined behind a request still being answered, the refusal would read as that answer.
  if (!socket.writable || answeringRequestRead(socket)) {
    socket.destroy();
    return;
  }
  const requestId = answerAndClose(
    socket,
    new BatonError('INVALID_REQUEST', {
      message: 'Baton does not serve CONNECT: it is not a proxy.',
      suggestion: "Send the request to Baton's own routes (GET /docs lists them), with a path as its target.",
    }),
  );
  // Counted only: Node calls this with (request, socket, head), so it is given no logger.
  recordUnreadableRequest(undefined, { requestId, method: 'CONNECT', status: 400, code: 'INVALID_REQUEST', reason: 'CONNECT' });
}

/** Whether a request read in full is still being answered on this connection (Node attaches its answer to the socket). */
function answeringRequestRead(socket: UnreadRequestSocket): boolean {
  const attached = socket._httpMessage;
  return attached != null && (attached.headersSent === true || attached.req?.complete !== false);
}

/** Writes `e` in the envelope as a whole HTTP/1.1 answer, outside any route, then closes the connection; returns its request id. */
function answerAndClose(socket: UnreadRequestSocket, e: BatonError, requestId: string = randomUUID()): string {
  const status = httpStatusOf(e);
  const body = JSON.stringify(errorEnvelope(e, requestId));
  // Closed once written, not only ended: the server's sockets allow half-open connections, and one
  // whose client never closes would otherwise stay open (and hold up a graceful stop).
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json\r\nx-request-id: ${requestId}\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    () => socket.destroy(),
  );
  return requestId;
}
