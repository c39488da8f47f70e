/**
 * Graceful shutdown on a keep-alive connection. A tool server keeps its
 * connection open and busy; when the service is told to stop, the request in
 * flight is answered, that answer says `Connection: close`, and the connection
 * ends, so no new request is taken on it and the stop completes. Before, a busy
 * keep-alive connection went on carrying new requests until the forced exit
 * cut them off, some counted and never answered.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IDLE_CONNECTION_CLOSE_GRACE_MS, startServer } from '../../src/server.js';
import { silentLogger } from '../../src/service/log.js';
import { serverConfigOf, startTestService, type TestService } from '../support/service.js';

let svc: TestService;

beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

/** Everything the socket receives until `done(text)` holds, or it ends, or 10 s pass. */
function readUntil(socket: Socket, done: (text: string) => boolean): Promise<{ text: string; ended: boolean }> {
  return new Promise((resolve) => {
    let text = '';
    const timer = setTimeout(() => finish(false), 10_000);
    const onData = (d: Buffer) => {
      text += d.toString('latin1');
      if (done(text)) finish(false);
    };
    const onEnd = () => finish(true);
    const finish = (ended: boolean) => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onEnd);
      resolve({ text, ended });
    };
    socket.on('data', onData);
    socket.once('end', onEnd);
  });
}

const HEALTHZ = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n';

/**
 * A started server and a connection to it that has had one exchange (GET /healthz), so it is kept
 * alive as a tool server's is; `errors` collects the socket's errors (a reset, say).
 */
async function serverWithKeptAliveConnection() {
  const server = await startServer(serverConfigOf(svc, { BATON_TLOG_INTERVAL_MS: '0' }), silentLogger, () => {});
  const socket = connect(server.port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  const errors: Error[] = [];
  socket.on('error', (e) => errors.push(e));
  socket.write(HEALTHZ);
  const first = await readUntil(socket, (t) => /\r\n\r\n[\s\S]*\}/.test(t));
  return { server, socket, errors, first };
}

describe('stopping the server', () => {
  it('answers the request in flight on a keep-alive connection with Connection: close, then the connection ends', async () => {
    // A first exchange: kept alive, as a tool server's connection is.
    const { server, socket, first } = await serverWithKeptAliveConnection();
    try {
      expect(first.text).toMatch(/^HTTP\/1\.1 200/);
      expect(first.text.toLowerCase()).not.toContain('connection: close');

      // A second request, half sent when the stop begins.
      const body = '{"receipt":"x"}';
      socket.write(
        `POST /v1/delegations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 7)}`,
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
      const stopped = server.close();
      socket.write(body.slice(7));
      const second = await readUntil(socket, () => false);
      expect(second.text).toMatch(/^HTTP\/1\.1 400/);
      expect(second.text.toLowerCase()).toContain('connection: close');
      expect(second.ended).toBe(true);
      await stopped;
    } finally {
      socket.destroy();
    }
  });

  it('answers a request sent on an idle keep-alive connection just after the stop began, rather than reset it', async () => {
    const { server, socket, errors, first } = await serverWithKeptAliveConnection();
    try {
      expect(first.text).toMatch(/^HTTP\/1\.1 200/);
      // The connection is idle when the stop begins; its client sends the next request right then
      // (a busy tool server's loop), before it could learn of the stop.
      const stopped = server.close();
      socket.write(HEALTHZ);
      const next = await readUntil(socket, () => false);
      expect(errors).toEqual([]);
      expect(next.text).toMatch(/^HTTP\/1\.1 200/);
      expect(next.text.toLowerCase()).toContain('connection: close');
      expect(next.ended).toBe(true);
      await stopped;
    } finally {
      socket.destroy();
    }
  });

  it('closes a keep-alive connection idle all through the grace, and stops', async () => {
    const { server, socket } = await serverWithKeptAliveConnection();
    try {
      const ended = readUntil(socket, () => false);
      const started = performance.now();
      await server.close();
      expect((await ended).ended).toBe(true);
      // The grace, not the keep-alive timeout (minutes): the stop does not wait on idle clients.
      expect(performance.now() - started).toBeLessThan(IDLE_CONNECTION_CLOSE_GRACE_MS + 5_000);
    } finally {
      socket.destroy();
    }
  });
});
