/**
 * Expect: 100-continue (RFC 9110 10.1.1): a request declaring a body over BATON_MAX_BODY_BYTES is
 * refused 413 from its head, before 100 Continue, so the client does not send a body to be refused;
 * any other gets 100 Continue and is served. With nothing listening, Node sent 100 Continue at once
 * and the client uploaded the whole body before its 413. On a server (startServer), over raw sockets.
 */
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/server.js';
import { silentLogger } from '../../src/service/log.js';
import { serverConfigOf, startTestService, type TestService } from '../support/service.js';

const MAX_BODY = 4096;
let svc: TestService;
let server: RunningServer;

beforeAll(async () => {
  svc = await startTestService();
  server = await startServer(
    serverConfigOf(svc, { BATON_TLOG_INTERVAL_MS: '0', BATON_MAX_BODY_BYTES: String(MAX_BODY) }),
    silentLogger,
    () => {},
  );
});
afterAll(async () => {
  await server?.close();
  await svc?.close();
});

/** Sends a head asking for 100 Continue; sends `body` only once 100 Continue comes; resolves with all the server wrote. */
function askToContinue(length: number, body: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    let sent = false;
    const socket = connect(server.port, '127.0.0.1', () =>
      socket.write(
        `POST /v1/delegations HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`,
      ),
    );
    socket.on('data', (c: Buffer) => {
      got += c.toString('latin1');
      if (!sent && got.startsWith('HTTP/1.1 100 ')) {
        sent = true;
        socket.write(body);
      }
    });
    socket.once('error', reject);
    socket.once('close', () => resolve(got));
  });
}

describe('Expect: 100-continue', () => {
  it('a declared body over BATON_MAX_BODY_BYTES is refused 413 before 100 Continue, in the envelope', async () => {
    const answer = await askToContinue(MAX_BODY + 1, 'x'.repeat(MAX_BODY + 1));
    expect(answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(answer).not.toContain('100 Continue');
    expect(answer).toContain('"code":"PAYLOAD_TOO_LARGE"');
    expect(answer).toMatch(/\r\nconnection: close\r\n/i);
  });

  it('a body within it gets 100 Continue, then is read and answered', async () => {
    const answer = await askToContinue(2, '{}');
    expect(answer).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 400 /);
    expect(answer).toContain('"code":"INVALID_REQUEST"');
  });
});
