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

/** Built once from the app's routes, after they are all registered. */
export function methodsServingPath(routes: readonly RouterRoute[]): (path: string) => string[] {
  let table: RoutePattern[] | undefined;
  return (path) => {
    table ??= routes.filter((r) => r.method !== 'ALL').map((r) => ({ method: r.method.toUpperCase(), pattern: patternOf(r.path) }));
    const methods = new Set(table.filter((r) => r.pattern.test(path)).map((r) => r.method));
    // Hono answers HEAD with the GET route.
    if (methods.has('GET')) methods.add('HEAD');
    return [...methods].sort();
  };
}
