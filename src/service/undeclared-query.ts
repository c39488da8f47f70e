/**
 * A query on a route that declares none is refused, not ignored: `?dry_run=true` on a revoke, an
 * API key's revocation or a tenant's creation would otherwise do the real, irreversible thing, and
 * a misspelled parameter would go unapplied without a word. Routes that declare a query read it
 * strictly themselves (parseQuery), or ignore what they do not know on purpose (DRS's /verify).
 *
 * Which routes declare one is read from the contract (src/api), so a new route is covered as it is
 * declared (its Hono path must be its document path, `{x}` as `:x`: the tile route, the one other,
 * refuses a query itself). Public reads (no key: health, JWKS, the document) ignore one, as a probe
 * with parameters or a cache-busting fetcher expects; they change nothing and take no option.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';
import { BatonError } from '../protocol/errors.js';
import type { AppEnv } from './types.js';

interface DeclaredRoute {
  readonly method: string;
  readonly path: string;
  readonly request?: { readonly query?: unknown };
  readonly security?: readonly unknown[];
}

/** A GET that asks for no key (security: [] declared; a route that declares none inherits the document's). */
const publicRead = (r: DeclaredRoute) => r.method.toLowerCase() === 'get' && r.security !== undefined && r.security.length === 0;

/** `METHOD path` as Hono matches it (`/v1/delegations/:hash`), from the OpenAPI form (`{hash}`). */
function routeKey(method: string, honoPath: string): string {
  return `${method.toUpperCase()} ${honoPath}`;
}

/** Call with the app whose routes are all declared; the table is built at the first request. */
export function refuseUndeclaredQuery(app: OpenAPIHono<AppEnv>): MiddlewareHandler<AppEnv> {
  let takesNone: ReadonlySet<string> | undefined;
  const table = () => {
    const routes = app.openAPIRegistry.definitions.flatMap((d) => (d.type === 'route' ? [d.route as DeclaredRoute] : []));
    return new Set(
      routes
        .filter((r) => r.request?.query === undefined && !publicRead(r))
        .map((r) => routeKey(r.method, r.path.replace(/\{([^}]+)\}/g, ':$1'))),
    );
  };
  return async (c, next) => {
    const url = c.req.url;
    const q = url.indexOf('?');
    if (q === -1 || q === url.length - 1) return next();
    const route = matchedRoutes(c).at(-1);
    takesNone ??= table();
    if (route !== undefined && takesNone.has(routeKey(route.method, route.path))) {
      throw new BatonError('INVALID_REQUEST', {
        message: `${c.req.method} ${route.path.replace(/:([^/{]+)/g, '{$1}')} takes no query parameters; Baton refuses them rather than ignore them.`,
        suggestion: 'Send the request without a query: options of this route go in its JSON body or its path (see GET /docs).',
        details: { parameters: Object.keys(c.req.queries()) },
      });
    }
    return next();
  };
}
