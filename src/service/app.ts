/**
 * The Hono application: middleware, one router per resource, and the one
 * error mapper. Handlers stay thin; decisions live in their own functions.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { Context, MiddlewareHandler } from 'hono';
import { DOCUMENT_CONFIG, registerDocumentComponents } from '../api/document.js';
import { isWellFormedString } from '../protocol/jcs.js';
import { requestId } from 'hono/request-id';
import { BatonError } from '../protocol/errors.js';
import { answeredOutsideOf, errorCodeOf, errorEnvelope, handleError, noteErrorCode, readByRoute } from './http.js';
import { adminRoutes } from './admin.routes.js';
import { apiKeyLifecycleRoutes } from './api-keys.handlers.js';
import { delegationRoutes } from './delegations.routes.js';
import { healthRoutes } from './health.routes.js';
import { keyRoutes } from './keys.routes.js';
import { serviceReceiptRoutes } from './service-receipts.routes.js';
import { logRoutes } from './log.handlers.js';
import { verifyRoutes } from './verify.routes.js';
import { invocationRoutes } from './invocations.routes.js';
import { revokeRoutes } from './revoke.routes.js';
import { docsRoutes, type OpenApiDocument } from './docs.routes.js';
import { newRouter } from './router.js';
import { toolRoutes } from './tools.handlers.js';
import { approvalRoutes } from './approvals.handlers.js';
import { explainRoutes } from './explain.handlers.js';
import { metrics } from './metrics.js';
import { CommitGate, UploadClock, uploadTooSlow, withinDeadline, withinDeadlineOr, type LateBy } from './deadline.js';
import { literalPathsOtherRoutesMatch, methodsServingPath } from './method-not-allowed.js';
import { refuseUndeclaredBody, refuseUndeclaredQuery } from './undeclared-input.js';
import type { AppEnv, ServiceDeps } from './types.js';
import { verifyDrsRoute, verifyDryRunRoute, verifyRoute } from '../api/verify.js';
import { explainRoute } from '../api/explain.js';

/** The verify routes race their own deadline (verify.handlers.ts). */
const VERIFY_PATHS: ReadonlySet<string> = new Set([verifyRoute.path, verifyDryRunRoute.path, verifyDrsRoute.path]);

/**
 * Path parameters and query values become database text; PostgreSQL cannot
 * store U+0000 and no identifier Baton issues contains a control character,
 * so such URLs are refused up front rather than failing deep in a query.
 */
const refuseControlCharactersInUrl: MiddlewareHandler<AppEnv> = async (c, next) => {
  const url = c.req.url;
  let decoded: string;
  try {
    decoded = decodeURIComponent(url);
  } catch {
    throw new BatonError('INVALID_REQUEST', {
      message: 'The URL is not validly percent-encoded.',
      suggestion: 'Percent-encode the path and query as UTF-8; a lone % or an encoded byte that is not UTF-8 is refused.',
    });
  }
  if (/[\u0000-\u001f\u007f]/.test(decoded) || !isWellFormedString(decoded)) {
    throw new BatonError('INVALID_REQUEST', {
      message: 'The URL contains a control character or an invalid character encoding.',
      suggestion: 'Identifiers in paths and queries are printable; check the hash, id or DID you sent.',
    });
  }
  await next();
};

/**
 * The OpenAPI document of everything the app serves: generated from the routes
 * it declares, including sub-apps mounted with app.route(...).
 */
export function apiDocument(app: OpenAPIHono<AppEnv>): OpenApiDocument {
  return withRequestWideAnswers(app.getOpenAPI31Document(DOCUMENT_CONFIG) as unknown as OpenApiDocument);
}

/** What the 503 of an operation that takes a body adds: the body budget's refusal (body.ts), after which nothing ran. */
const SERVICE_BUSY_ANSWER =
  "Or Baton was receiving as many request body bytes at once as it holds (`BATON_MAX_BODY_BUFFER_BYTES`; requests without a key hold half of it at most, and one tenant's requests an eighth), and stopped reading this body and closed the connection (`SERVICE_BUSY`): nothing ran, so nothing was changed or counted. Send it again after the number of seconds in `Retry-After`.";

/**
 * What every operation answers whatever its route declares, put in each operation so that a
 * client or a validator reading one sees it, not only the conventions' prose: the `X-Request-Id`
 * header on every response, and a `400` for a URL Baton cannot read (refuseControlCharactersInUrl)
 * or, on an operation that takes a key, a query it does not list (refuseUndeclaredQuery), and on a
 * write that declares no body, a body (refuseUndeclaredBody); on an operation that takes a body,
 * its `503` names `SERVICE_BUSY` too (the body budget), with its `Retry-After` header.
 */
function withRequestWideAnswers(doc: OpenApiDocument): OpenApiDocument {
  const requestId = { $ref: '#/components/headers/RequestId' };
  const retryAfter = { $ref: '#/components/headers/RetryAfter' };
  for (const operations of Object.values(doc.paths)) {
    for (const [method, operation] of Object.entries(operations)) {
      const responses = operation.responses;
      // A new object, not the declared one changed: routes may share one (and the document is built per request).
      const unavailable = responses['503'];
      if (operation.requestBody !== undefined && (unavailable === undefined || !('$ref' in unavailable))) {
        const said = unavailable?.description;
        responses['503'] = {
          content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } },
          ...unavailable,
          description: said === undefined ? SERVICE_BUSY_ANSWER.replace(/^Or Baton/, 'Baton') : `${said} ${SERVICE_BUSY_ANSWER}`,
          headers: { ...unavailable?.headers, 'Retry-After': retryAfter },
        };
      }
      if (responses['400'] === undefined) {
        const keyless = operation.security !== undefined && operation.security.length === 0;
        const bodyless = method !== 'get' && method !== 'head' && operation.requestBody === undefined;
        responses['400'] = {
          description: keyless
            ? 'The URL is not validly percent-encoded, or holds a control character (`INVALID_REQUEST`).'
            : `The URL is not validly percent-encoded or holds a control character, or the query holds a parameter this operation does not list${bodyless ? ', or the request has a body, which this operation does not take' : ''} (\`INVALID_REQUEST\`).`,
          content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } },
        };
      }
      for (const response of Object.values(responses)) {
        if (!('$ref' in response)) response.headers = { ...response.headers, 'X-Request-Id': requestId };
      }
    }
  }
  doc.components = {
    ...doc.components,
    headers: {
      ...doc.components?.headers,
      RequestId: {
        description:
          "The request's id: the caller's own `X-Request-Id` when it sent a valid one (up to 64 letters, digits, `_`, `-` or `=`), otherwise one Baton generated. Equal to `request_id` in an error body; give it to the operator when reporting a problem.",
        schema: { type: 'string', maxLength: 64 },
      },
      RetryAfter: {
        description:
          'On a `503 SERVICE_BUSY`: the seconds to wait before sending the request again (RFC 9110 10.2.3). A `503 STORAGE_UNAVAILABLE` carries none.',
        schema: { type: 'integer', minimum: 0 },
      },
    },
  };
  return doc;
}

export function createApp(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = newRouter();
  registerDocumentComponents(app);

  app.use('*', requestId({ headerName: 'X-Request-Id', limitLength: 64 }));
  app.use('*', refuseControlCharactersInUrl);
  app.use('*', async (c, next) => {
    const started = performance.now();
    const done = metrics.startRequest();
    // Served by @hono/node-server: a request timeout or a parser error cutting the body short is
    // answered outside the app (answerUnreadRequest), and told here, in this request's one line.
    const outgoing = (c.env as { outgoing?: object } | undefined)?.outgoing;
    if (outgoing !== undefined) readByRoute(outgoing, c.get('requestId'));
    await next(); // Hono's onError has already turned a thrown error into c.res here
    const ms = performance.now() - started;
    const outside = outgoing === undefined ? undefined : answeredOutsideOf(outgoing);
    const status = outside?.status ?? c.res.status;
    // The error's code, so that a busy 503 (SERVICE_BUSY) is told from a storage one: errors only.
    const code = outside?.code ?? (status >= 400 ? errorCodeOf(c) : undefined);
    done(c.req.method, c.req.routePath, status, ms / 1000);
    deps.log.info('request', {
      request_id: c.get('requestId'),
      method: c.req.method,
      path: pathForLog(c.req.path),
      status,
      ...(code !== undefined ? { code } : {}),
      ...(outside !== undefined ? { reason: outside.reason } : {}),
      ms: Math.round(ms * 10) / 10,
    });
  });

  // A path a route names literally answers only its own methods: GET /v1/delegations/issue would
  // otherwise reach GET /v1/delegations/{hash} and be refused as a malformed hash (400).
  const methodsServing = methodsServingPath(app.routes);
  const methodNotAllowed = (c: Context<AppEnv>, allowed: readonly string[]) => {
    c.header('Allow', allowed.join(', '));
    noteErrorCode(c, 'METHOD_NOT_ALLOWED');
    return c.json(
      errorEnvelope(
        new BatonError('METHOD_NOT_ALLOWED', {
          message: `${c.req.path} does not answer ${c.req.method}; it answers ${allowed.join(', ')}.`,
          details: { allow: allowed },
        }),
        c.get('requestId'),
      ),
      405,
    );
  };
  const shadowedPaths = literalPathsOtherRoutesMatch(app.routes, methodsServing);
  app.use('*', async (c, next) => {
    const allowed = shadowedPaths().get(c.req.path);
    if (allowed !== undefined && !allowed.includes(c.req.method)) return methodNotAllowed(c, allowed);
    return next();
  });

  // After the request log and metrics, so a refused query is logged and counted as other refusals.
  app.use('*', refuseUndeclaredQuery(app));
  app.use('*', refuseUndeclaredBody(app));

  app.use('*', async (c, next) => {
    const arrived = Date.now();
    const { verifyDeadlineMs, writeDeadlineMs } = deps.config;
    const deadline = new Date(arrived + verifyDeadlineMs);
    c.set('deadline', deadline);
    // The time the body takes to arrive is the client's: every deadline moves on by it, by at most
    // its own length, so an answer still comes within twice it (a client timing out in between
    // would not learn whether its change was made).
    const upload: UploadClock = new UploadClock(() => c.set('deadline', upload.moved(deadline, verifyDeadlineMs)));
    c.set('upload', upload);
    // A read (and POST /v1/explain, which only reads) changes nothing, so it stops waiting for a database that does not answer at the
    // deadline. A write gets longer (BATON_WRITE_DEADLINE_MS), and then stops waiting too rather
    // than hang with its client for as long as a partition lasts. Its work goes on, and its
    // commits pass the request's CommitGate, which the 503 closes: the 503 can say that nothing
    // was changed unless a commit had already gone through. A verify's own, shorter deadline
    // answers first. /metrics bounds its own waits (the backlog read, the workers' answers) and
    // says so in its answer.
    const reads = c.req.method === 'GET' || c.req.method === 'HEAD' || (c.req.method === 'POST' && c.req.path === explainRoute.path);
    if (reads && c.req.path !== '/metrics') {
      await withinDeadline(
        next(),
        c.get('deadline'),
        `The database did not answer within ${verifyDeadlineMs} ms, so Baton could not read what was asked; nothing was changed. Retry shortly.`,
        undefined,
        { upload: { clock: upload, capMs: verifyDeadlineMs } },
      );
      return;
    }
    if (VERIFY_PATHS.has(c.req.path)) return next(); // its own deadline, and no second timer on the hot path
    const gate = new CommitGate();
    c.set('commitGate', gate);
    const refuseLateWrite = (late: LateBy) => {
      const waited = `The database did not answer within ${writeDeadlineMs} ms, so Baton stopped waiting for it.`;
      // A body slower than the deadline is the client's doing, unless a commit already went through.
      const uploadMs = gate.letThrough ? undefined : late.uploadMs;
      const committed = gate.abandon(uploadMs !== undefined ? '408 (its body took too long to arrive)' : '503 (the database was too slow)');
      if (uploadMs !== undefined) return uploadTooSlow(uploadMs, 'the change was not applied, and will not be');
      return committed
        ? new BatonError('STORAGE_UNAVAILABLE', {
            message: `${waited} A commit of this change had already been sent, so it may be applied in part or whole.`,
            suggestion:
              'Read it back (the GET of what you changed) once the service answers again, and send it again only if it is not there.',
          })
        : new BatonError('STORAGE_UNAVAILABLE', {
            message: `${waited} The change was not applied, and will not be when the database answers again.`,
            suggestion: 'Send it again once the service answers (GET /readyz tells when the database is back).',
          });
    };
    await withinDeadlineOr(next(), new Date(arrived + writeDeadlineMs), refuseLateWrite, {
      upload: { clock: upload, capMs: writeDeadlineMs },
    });
  });

  app.route('/', healthRoutes(deps));
  app.route(
    '/',
    docsRoutes(() => apiDocument(app)),
  );
  app.route('/', keyRoutes(deps));
  app.route('/', adminRoutes(deps));
  app.route('/', apiKeyLifecycleRoutes(deps));
  app.route('/', delegationRoutes(deps));
  app.route('/', verifyRoutes(deps));
  app.route('/', invocationRoutes(deps));
  app.route('/', revokeRoutes(deps));
  app.route('/', serviceReceiptRoutes(deps));
  app.route('/', logRoutes(deps));
  app.route('/', toolRoutes(deps));
  app.route('/', approvalRoutes(deps));
  app.route('/', explainRoutes(deps));

  app.notFound((c) => {
    const allowed = methodsServing(c.req.path);
    if (allowed.length > 0) return methodNotAllowed(c, allowed);
    // No route ends in "/"; say so when the path without it is a route.
    const withoutSlash = c.req.path.replace(/\/+$/, '');
    const servedWithout = withoutSlash !== c.req.path && withoutSlash !== '' ? methodsServing(withoutSlash) : [];
    noteErrorCode(c, 'NOT_FOUND');
    return c.json(
      errorEnvelope(
        new BatonError('NOT_FOUND', {
          message: `No route matches ${c.req.method} ${c.req.path}.`,
          suggestion:
            servedWithout.length > 0
              ? `Routes do not end in "/": ${withoutSlash} answers ${servedWithout.join(', ')}.`
              : 'See openapi.yaml or GET /docs for the routes Baton serves.',
        }),
        c.get('requestId'),
      ),
      404,
    );
  });
  app.onError((err, c) => handleError(err, c, deps.log));
  return app;
}

/**
 * The document as the checked-in openapi.yaml holds it. Declaring routes needs
 * no dependency (handlers reach deps only per request), so the app is built
 * with none: any access would throw here rather than pass unnoticed.
 */
export function generatedApiDocument(): OpenApiDocument {
  const noDeps = new Proxy({} as ServiceDeps, {
    get(_, prop) {
      throw new Error(`declaring routes must not need deps.${String(prop)}`);
    },
  });
  return apiDocument(createApp(noDeps));
}

/** Longest request path logged whole: a path may be tens of kilobytes, and each request logs it. */
const MAX_LOGGED_PATH = 1024;

/** The path as the request log shows it: whole up to MAX_LOGGED_PATH characters, cut and marked past it. */
function pathForLog(path: string): string {
  return path.length <= MAX_LOGGED_PATH ? path : `${path.slice(0, MAX_LOGGED_PATH)}… (${path.length} characters)`;
}
