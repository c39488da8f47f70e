/**
 * Which methods serve a path that no route of the request's method matched, so
 * that a wrong method is answered 405 with an Allow header instead of 404. The
 * route table is public (GET /docs), so this tells a keyless caller nothing new.
 */
import type { RouterRoute } from 'hono/types';

interface RoutePattern {
  readonly method: string;
  readonly pattern: RegExp;
}

/** Hono's path syntax (`:name`, `:name{regex}`, `*`) as one anchored RegExp. */
function patternOf(path: string): RegExp {
  const segments = path.split('/').map((segment) => {
    if (segment === '*') return '.*';
    const param = /^:[A-Za-z0-9_]+(?:\{(.+)\})?$/.exec(segment);
    if (param) return param[1] !== undefined ? `(?:${param[1]})` : '[^/]+';
    return segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  });
  // Exact, as Hono's router matches: a trailing slash is another path (404, see app.ts).
  return new RegExp(`^${segments.join('/')}$`);
}

/**
 * Built once from the app's routes, after they are all registered. A path a route names literally
 * (`/v1/delegations/issue`) is served by the methods of such routes alone, though a route with a
 * parameter there (`/v1/delegations/:hash`) matches it too: its Allow lists POST, not GET.
 */
export function methodsServingPath(routes: readonly RouterRoute[]): (path: string) => string[] {
  let table: (RoutePattern & { readonly literal: boolean })[] | undefined;
  return (path) => {
    table ??= routes
      .filter((r) => r.method !== 'ALL')
      .map((r) => ({ method: r.method.toUpperCase(), pattern: patternOf(r.path), literal: !/[:*]/.test(r.path) }));
    const matching = table.filter((r) => r.pattern.test(path));
    const literal = matching.filter((r) => r.literal);
    const methods = new Set((literal.length > 0 ? literal : matching).map((r) => r.method));
    // Hono answers HEAD with the GET route.
    if (methods.has('GET')) methods.add('HEAD');
    return [...methods].sort();
  };
}

/**
 * The paths a route names literally that a route of another method with a parameter matches too
 * (`/v1/delegations/issue`, POST, under GET `/v1/delegations/:hash`), with the methods serving them:
 * Hono would hand such a path asked with another method to the parameter's route. Built once, at
 * the first request, so that each request costs one lookup.
 */
export function literalPathsOtherRoutesMatch(
  routes: readonly RouterRoute[],
  serving: (path: string) => string[],
): () => ReadonlyMap<string, readonly string[]> {
  let shadowed: Map<string, readonly string[]> | undefined;
  return () => {
    if (shadowed) return shadowed;
    const withParams = routes.filter((r) => r.method !== 'ALL' && /[:*]/.test(r.path)).map((r) => patternOf(r.path));
    shadowed = new Map(
      routes
        .filter((r) => r.method !== 'ALL' && !/[:*]/.test(r.path) && withParams.some((p) => p.test(r.path)))
        .map((r) => [r.path, serving(r.path)]),
    );
    return shadowed;
  };
}
