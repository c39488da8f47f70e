/**
 * A Baton service on a fresh real-PostgreSQL database, served over a real
 * HTTP socket on 127.0.0.1 (port 0), on the real clock: what the SDK client
 * and the CLI talk to in their tests.
 */
import type { Socket } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { createServer, type Server } from 'node:net';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { silentLogger } from '../../src/service/log.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';

export interface LiveService {
  readonly svc: TestService;
  readonly tenant: TestTenant;
  readonly baseUrl: string;
  close(): Promise<void>;
}

export const nowSeconds = (): number => Math.floor(Date.now() / 1000);

export async function startLiveService(): Promise<LiveService> {
  const svc = await startTestService();
  // Records signed by the SDK and the CLI use the wall clock; so does this service.
  Object.defineProperty(svc.clock, 'now', { get: nowSeconds, set: () => undefined, configurable: true });
  const tenant = await setupTenant(svc);
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: svc.app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  const address = server.address();
  const baseUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  return {
    svc,
    tenant,
    baseUrl,
    close: async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await svc.close();
    },
  };
}

/** A TCP server that accepts connections and never answers: for timeouts. */
export async function startSilentServer(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A port on 127.0.0.1 where nothing listens (bound, then released). */
export async function closedPortUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}`;
}

/** Records `n` service receipts (`inv:<from>`...) of the tenant and integrates them into its log. */
export async function recordIntoLog(live: LiveService, n: number, from: number, tenantId = live.tenant.id): Promise<void> {
  for (let i = 0; i < n; i++)
    await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
      tenantId,
      kind: 'invocation.denied',
      subject: `inv:${from + i}`,
      data: { i: from + i },
      now: live.svc.clock.now,
    });
  await integrateOnce({ store: live.svc.store, signer: live.svc.deps.signer, log: silentLogger, logName: live.svc.deps.config.tlogName });
}

/** The text of GET `path` as the tenant's auditor (or `key`) reads it. */
export async function readAsAuditor(live: LiveService, path: string, key = live.tenant.keys.audit): Promise<string> {
  return (await fetch(`${live.baseUrl}${path}`, { headers: { authorization: `Bearer ${key}` } })).text();
}
