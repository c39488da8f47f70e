/** STUB: invocation routes (actuals, reads) are being implemented. */
import { Hono } from 'hono';
import type { AppEnv, ServiceDeps } from './types.js';

export function invocationRoutes(_deps: ServiceDeps): Hono<AppEnv> {
  return new Hono<AppEnv>();
}
