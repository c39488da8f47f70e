/** A second Baton node on the same database as a TestService, both served on real sockets. */
import { serve, type ServerType } from '@hono/node-server';
import { createApp } from '../../src/service/app.js';
import { createServiceDeps } from '../../src/service/deps.js';
import { silentLogger } from '../../src/service/log.js';
import { openStore } from '../../src/store/db.js';
import type { TestService } from './service.js';

export interface Node {
  readonly url: string;
  post(path: string, key: string, json: unknown): Promise<{ status: number; body: any }>; // eslint-disable-line @typescript-eslint/no-explicit-any -- tests inspect arbitrary JSON
  close(): Promise<void>;
}

async function listen(fetchFn: (req: Request) => Response | Promise<Response>): Promise<{ url: string; server: ServerType }> {
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: fetchFn, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  const address = server.address();
  return { url: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`, server };
}

function nodeOf(url: string, server: ServerType, extra: () => Promise<void>): Node {
  return {
    url,
    async post(path, key, json) {
      const res = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify(json),
      });
      return { status: res.status, body: await res.json() };
    },
    async close() {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await extra();
    },
  };
}

/**
 * A second node's app, not served: its own pool on the TestService's
 * database, the same configuration, master key and clock. `close` ends its pool.
 */
export async function secondNodeApp(svc: TestService, pool = 8): Promise<{ app: ReturnType<typeof createApp>; close(): Promise<void> }> {
  const store = await openStore({ databaseUrl: svc.url, max: pool });
  const deps = await createServiceDeps({
    store,
    config: svc.deps.config,
    log: silentLogger,
    masterKey: svc.deps.masterKey,
    now: svc.deps.now,
  });
  return { app: createApp(deps), close: () => store.close() };
}

/** The service's own app on a socket, and a second app with its own pool on the same database and clock. */
export async function twoNodes(svc: TestService, pool = 8): Promise<[Node, Node]> {
  const first = await listen(svc.app.fetch);
  const other = await secondNodeApp(svc, pool);
  const second = await listen(other.app.fetch);
  return [nodeOf(first.url, first.server, async () => {}), nodeOf(second.url, second.server, other.close)];
}
