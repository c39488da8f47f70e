/** Liveness, readiness (the database answers) and Prometheus metrics (for the operator only). */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { healthzRoute, metricsRoute, readyzRoute } from '../api/health.js';
import { requireMetricsReader } from './auth.js';
import { metrics } from './metrics.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';

const READY_TIMEOUT_MS = 2000;

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

export function healthRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const r = newRouter();
  serve(r, healthzRoute, (c) => c.json({ status: 'ok' }));
  serve(r, readyzRoute, async (c) => {
    try {
      // A stopped database can hang a connect; readiness must answer promptly.
      await withTimeout(deps.store.ping(), READY_TIMEOUT_MS);
      return c.json({ status: 'ready' });
    } catch {
      return c.json({ status: 'unready' }, 503);
    }
  });
  serve(r, metricsRoute, requireMetricsReader(deps), async (c) =>
    c.text(await metrics.render(), 200, { 'Content-Type': metrics.contentType }),
  );
  return r;
}
