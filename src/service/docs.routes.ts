/** STUB: routes for this resource are being implemented. */
import { Hono } from 'hono';
import type { AppEnv, ServiceDeps } from './types.js';

export function docsRoutes(_deps: ServiceDeps): Hono<AppEnv> {
  return new Hono<AppEnv>();
}
