/**
 * The Hono application: middleware, one router per resource, and the one
 * error mapper. Handlers stay thin; decisions live in their own functions.
 */
import { Hono, type MiddlewareHandler } from 'hono';
import { isWellFormedString } from '../protocol/jcs.js';
import { requestId } from 'hono/request-id';
import { BatonError } from '../protocol/errors.js';
import { errorEnvelope, handleError } from './http.js';
import { adminRoutes } from './admin.routes.js';
import { apiKeyLifecycleRoutes } from './api-keys.handlers.js';
import { delegationRoutes } from './delegations.routes.js';
import { healthRoutes } from './health.routes.js';
import { keyRoutes } from './keys.routes.js';
import { receiptRoutes } from './receipts.routes.js';
import { verifyRoutes } from './verify.routes.js';
import { invocationRoutes } from './invocations.routes.js';
import { revokeRoutes } from './revoke.routes.js';
import { docsRoutes } from './docs.routes.js';
import { metrics } from './metrics.js';
import type { AppEnv, ServiceDeps } from './types.js';

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

export function createApp(deps: ServiceDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.use('*', requestId({ headerName: 'X-Request-Id', limitLength: 64 }));
  app.use('*', refuseControlCharactersInUrl);
  app.use('*', async (c, next) => {
    const started = performance.now();
    const done = metrics.startRequest();
    await next(); // Hono's onError has already turned a thrown error into c.res here
    const ms = performance.now() - started;
    done(c.req.method, c.req.routePath, c.res.status, ms / 1000);
    deps.log.info('request', {
      request_id: c.get('requestId'),
      method: c.req.method,
      path: c.req.path,
      status: c.res.status,
      ms: Math.round(ms * 10) / 10,
    });
  });

  app.route('/', healthRoutes(deps));
  app.route('/', docsRoutes(deps));
  app.route('/', keyRoutes(deps));
  app.route('/', adminRoutes(deps));
  app.route('/', apiKeyLifecycleRoutes(deps));
  app.route('/', delegationRoutes(deps));
  app.route('/', verifyRoutes(deps));
  app.route('/', invocationRoutes(deps));
  app.route('/', revokeRoutes(deps));
  app.route('/', receiptRoutes(deps));

  app.notFound((c) =>
    c.json(
      errorEnvelope(
        new BatonError('NOT_FOUND', {
          message: `No route matches ${c.req.method} ${c.req.path}.`,
          suggestion: 'See openapi.yaml or GET /docs for the routes Baton serves.',
        }),
        c.get('requestId'),
      ),
      404,
    ),
  );
  app.onError((err, c) => handleError(err, c, deps.log));
  return app;
}
