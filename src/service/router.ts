/**
 * Routers are OpenAPIHono apps, so every route they declare lands in the
 * generated document, including sub-apps mounted with app.route(...).
 *
 * `serve` declares a route from its contract (src/api) and runs handlers that
 * read the request themselves: bodies go through the strict reader (body.ts)
 * and the route's runtime schema, once, so the verify hot path parses its body
 * a single time and no response is re-validated at runtime.
 *
 * Routes registered with `app.openapi(...)` instead are validated by
 * @hono/zod-openapi; the default hook turns a failed validation into the same
 * INVALID_REQUEST envelope as everywhere else.
 */
import { OpenAPIHono, type RouteConfig } from '@hono/zod-openapi';
import type { Hook } from '@hono/zod-openapi';
import type { Handler, MiddlewareHandler } from 'hono';
import type { z } from 'zod';
import { refusalOf } from '../protocol/records.js';
import type { AppEnv } from './types.js';

const rejectInvalid: Hook<unknown, AppEnv, string, unknown> = (result) => {
  if (result.success) return;
  // In the same words as every other refusal of a request (a missing parameter "is required", not
  // zod's "Invalid input: expected string, received undefined").
  // @hono/zod-validator passes the value it validated as `data` (zod-openapi's Hook type omits it).
  const value = (result as { data?: unknown }).data;
  throw refusalOf(result.error as z.ZodError, value, result.target === 'param' ? 'path' : result.target, 'INVALID_REQUEST');
};

export function newRouter(): OpenAPIHono<AppEnv> {
  return new OpenAPIHono<AppEnv>({ defaultHook: rejectInvalid });
}

export function serve<P extends string>(
  router: OpenAPIHono<AppEnv>,
  route: RouteConfig & { getRoutingPath(): P },
  ...handlers: [...MiddlewareHandler<AppEnv, NoInfer<P>>[], Handler<AppEnv, NoInfer<P>>]
): void {
  router.openAPIRegistry.registerPath(route);
  router.on(route.method.toUpperCase(), route.getRoutingPath(), ...(handlers as [Handler<AppEnv, P>]));
}
