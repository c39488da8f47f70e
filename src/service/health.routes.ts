/** Liveness, readiness (the database answers) and Prometheus metrics. */
import { Hono } from 'hono';
import { metrics } from './metrics.js';
import type { AppEnv, ServiceDeps } from './types.js';

export function healthRoutes(deps: ServiceDeps): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.get('/healthz', (c) => c.json({ status: 'ok' }));
  r.get('/readyz', async (c) => {
    try {
      await deps.store.ping();
      return c.json({ status: 'ready', database: deps.store.kind });
    } catch {
      return c.json({ status: 'unready', database: deps.store.kind }, 503);
    }
  });
  r.get('/metrics', (c) => c.text(metrics.render(), 200, { 'Content-Type': 'text/plain; version=0.0.4' }));
  return r;
}
