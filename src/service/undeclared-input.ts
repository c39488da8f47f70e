/**
 * Input a route does not declare is refused, not ignored.
 *
 * A query on a route that declares none: `?dry_run=true` on a revoke, an API key's revocation or a
 * tenant's creation would otherwise do the real, irreversible thing, and a misspelled parameter
 * would go unapplied without a word. Routes that declare a query read it strictly themselves
 * (parseQuery), or ignore what they do not know on purpose (DRS's /verify). Public reads (no key:
 * health, JWKS, the document) ignore one, as a probe with parameters or a cache-busting fetcher
 * expects; they change nothing and take no option.
 *
 * A body on a write that declares none (the two DELETEs): `{"dry_run": true}` sent to remove a
 * trusted root or revoke an API key would otherwise be dropped unread and the removal done. Judged
 * from the headers, before the key is read: nothing of the body is read.
 *
 * Which routes declare what is read from the contract (src/api), so a new route is covered as it is
 * declared (its Hono path must be its document path, `{x}` as `:x`: the tile route, the one other,
 * refuses a query itself).
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { Context, MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';
import { BatonError } from '../protocol/errors.js';
import type { AppEnv } from './types.js';
import { verifyDrsRoute } from '../api/verify.js';

interface DeclaredRoute {
  readonly method: string;
  readonly path: string;
  readonly request?: { readonly query?: unknown; readonly body?: unknown };
  readonly security?: readonly unknown[];
}

function declaredRoutes(app: OpenAPIHono<AppEnv>): DeclaredRoute[] {
  return app.openAPIRegistry.definitions.flatMap((d) => (d.type === 'route' ? [d.route as DeclaredRoute] : []));
}

/** The declared route's key as Hono matches it. */
const keyOf = (r: DeclaredRoute) => routeKey(r.method, r.path.replace(/\{([^}]+)\}/g, ':$1'));

/** The key of the route Hono matched for this request, if any. */
function matchedRouteKey(c: Context<AppEnv>): { readonly key: string; readonly path: string } | undefined {
  const route = matchedRoutes(c).at(-1);
  return route === undefined ? undefined : { key: routeKey(route.method, route.path), path: route.path.replace(/:([^/{]+)/g, '{$1}') };
}

/** A GET that asks for no key (security: [] declared; a route that declares none inherits the document's). */
const publicRead = (r: DeclaredRoute) => r.method.toLowerCase() === 'get' && r.security !== undefined && r.security.length === 0;

/** `METHOD path` as Hono matches it (`/v1/delegations/:hash`), from the OpenAPI form (`{hash}`). */
function routeKey(method: string, honoPath: string): string {
  return `${method.toUpperCase()} ${honoPath}`;
}

/** A `name=value` pair of the query with no name (`?=1`, `&=x`): Hono's parser drops it without a word. */
const hasNamelessParameter = (query: string): boolean => query.split('&').some((pair) => pair.startsWith('='));

/** Call with the app whose routes are all declared; the tables are built at the first request. */
export function refuseUndeclaredQuery(app: OpenAPIHono<AppEnv>): MiddlewareHandler<AppEnv> {
  let tables: { readonly takesNone: ReadonlySet<string>; readonly readsStrictly: ReadonlySet<string> } | undefined;
  const build = () => {
    const routes = declaredRoutes(app);
    const key = keyOf;
    return {
      takesNone: new Set(routes.filter((r) => r.request?.query === undefined && !publicRead(r)).map(key)),
      // Routes that read a query they declare, strictly: all but the public reads and DRS's /verify.
      readsStrictly: new Set(
        routes.filter((r) => r.request?.query !== undefined && !publicRead(r) && r.path !== verifyDrsRoute.path).map(key),
      ),
    };
  };
  return async (c, next) => {
    const url = c.req.url;
    const q = url.indexOf('?');
    if (q === -1 || q === url.length - 1) return next();
    const route = matchedRouteKey(c);
    tables ??= build();
    const routeAt = route?.key;
    if (routeAt !== undefined && tables.readsStrictly.has(routeAt) && hasNamelessParameter(url.slice(q + 1).split('#')[0]!)) {
      throw new BatonError('INVALID_REQUEST', {
        message: 'The query holds a parameter with no name (such as "?=1"); Baton refuses it rather than ignore it.',
        suggestion: 'Send only the query parameters this operation lists, each as name=value (see GET /docs).',
        details: { parameter: '' },
      });
    }
    if (route !== undefined && tables.takesNone.has(route.key)) {
      throw new BatonError('INVALID_REQUEST', {
        message: `${c.req.method} ${route.path} takes no query parameters; Baton refuses them rather than ignore them.`,
        suggestion: 'Send the request without a query: options of this route go in its JSON body or its path (see GET /docs).',
        details: { parameters: Object.keys(c.req.queries()) },
      });
    }
    return next();
  };
}

/**
 * Whether the request announces a body: a Content-Length above 0, or any Transfer-Encoding (chunked,
 * even if it then sends none: a client that frames a body meant to send one). Read from the headers
 * alone, so a caller with no key makes the service read nothing.
 */
function announcesBody(c: Context<AppEnv>): boolean {
  const length = c.req.header('content-length');
  if (c.req.header('transfer-encoding') !== undefined || (length !== undefined && !/^\s*0+\s*$/.test(length))) return true;
  // Served by @hono/node-server, the headers are what the client sent; a Request built in process
  // (app.request, a test) carries its body without them.
  return (c.env as { incoming?: unknown } | undefined)?.incoming === undefined && c.req.raw.body !== null;
}

/**
 * Call with the app whose routes are all declared; the table is built at the first request. Judged by
 * the headers before the key is read, as an undeclared query is, and before any byte of the body is:
 * reading a body of up to BATON_MAX_BODY_BYTES for a caller with no key would be work an admin route
 * otherwise never does for one. Only methods some such route answers are looked at.
 */
export function refuseUndeclaredBody(app: OpenAPIHono<AppEnv>): MiddlewareHandler<AppEnv> {
  let table: { readonly takesNone: ReadonlySet<string>; readonly methods: ReadonlySet<string> } | undefined;
  const writes = (r: DeclaredRoute) => r.method.toLowerCase() !== 'get' && r.method.toLowerCase() !== 'head';
  return async (c, next) => {
    table ??= (() => {
      const routes = declaredRoutes(app).filter((r) => writes(r) && r.request?.body === undefined);
      return { takesNone: new Set(routes.map(keyOf)), methods: new Set(routes.map((r) => r.method.toUpperCase())) };
    })();
    if (!table.methods.has(c.req.method) || !announcesBody(c)) return next();
    const route = matchedRouteKey(c);
    if (route !== undefined && table.takesNone.has(route.key)) {
      throw new BatonError('INVALID_REQUEST', {
        message: `${c.req.method} ${route.path} takes no request body; Baton refuses one rather than ignore it, and did nothing.`,
        suggestion:
          'Send the request without a body (no Content-Length above 0, no Transfer-Encoding): this operation takes everything it needs from its path (see GET /docs).',
      });
    }
    return next();
  };
}
