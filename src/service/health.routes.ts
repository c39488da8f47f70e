/** Liveness, readiness (the database answers) and Prometheus metrics. */
import { Hono } from 'hono';
import { metrics } from './metrics.js';
import type { AppEnv, ServiceDeps } from './types.js';

const READY_TIMEOUT_MS = 2000;

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

export function healthRoutes(deps: ServiceDeps): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.get('/healthz', (c) => c.json({ status: 'ok' }));
  r.get('/readyz', async (c) => {
    try {
      // A stopped database can hang a connect; readiness must answer promptly.
      await withTimeout(deps.store.ping(), READY_TIMEOUT_MS);
      return c.json({ status: 'ready', database: deps.store.kind });
    } catch {
      return c.json({ status: 'unready', database: deps.store.kind }, 503);
    }
  });
  r.get('/metrics', async (c) => c.text(await metrics.render(), 200, { 'Content-Type': metrics.contentType }));
  return r;
}
