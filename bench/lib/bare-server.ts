/**
 * The "bare Hono route" ceiling: the same framework and server adapter as
 * Baton (@hono/node-server), one POST route that reads and parses the same
 * JSON request body and answers a response of the same size as a real
 * verify allow, with no auth, no verification and no database. Spawned as
 * its own process by verify.bench.ts (PORT, BARE_RESPONSE from the env).
 */
import { serve } from '@hono/node-server';
import { Hono } from 'hono';

const port = Number(process.env['PORT'] ?? 0);
const response = process.env['BARE_RESPONSE'] ?? '{"valid":true}';

const app = new Hono();
app.get('/healthz', (c) => c.json({ status: 'ok' }));
app.post('/v1/verify', async (c) => {
  const body = (await c.req.json()) as { invocation?: unknown };
  if (typeof body.invocation !== 'string') return c.json({ valid: false }, 400);
  return c.body(response, 200, { 'content-type': 'application/json' });
});

const server = serve({ fetch: app.fetch, port, hostname: '127.0.0.1' });
const stop = () => server.close(() => process.exit(0));
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
