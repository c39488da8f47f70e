/**
 * Expect: 100-continue (RFC 9110 10.1.1): a request declaring a body over BATON_MAX_BODY_BYTES is
 * refused 413 from its head, before 100 Continue, so the client does not send a body to be refused;
 * any other gets 100 Continue when a route starts reading its body, and a request refused before
 * that (no key, a bad key, no route, a query the route does not take) gets none, and its connection
 * is closed after the answer. With nothing listening, Node sent 100 Continue at once and the client
 * uploaded the whole body before its 413, or its 401. On a server (startServer), over raw sockets.
 */
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/server.js';
import { silentLogger } from '../../src/service/log.js';
import { serverConfigOf, setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';

const MAX_BODY = 4096;
let svc: TestService;
let server: RunningServer;
let tenant: TestTenant;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
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

/**
 * Sends a head asking for 100 Continue (on `target`, with `headers`); sends `body` only once 100
 * Continue comes; resolves with all the server wrote once it closes the connection.
 */
function askToContinue(length: number, body: string, target = 'POST /v1/delegations', headers = 'Connection: close\r\n'): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    let sent = false;
    const socket = connect(server.port, '127.0.0.1', () =>
      socket.write(
        `${target} HTTP/1.1\r\nHost: x\r\n${headers}Content-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`,
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
    // A connection the server keeps open ends the wait, with what it wrote, after 3 s.
    const giveUp = setTimeout(() => socket.destroy(), 3_000);
    socket.once('close', () => {
      clearTimeout(giveUp);
      resolve(got);
    });
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
    // With a valid key, once the key is read.
    const verified = await askToContinue(
      2,
      '{}',
      'POST /v1/verify',
      `Connection: close\r\nAuthorization: Bearer ${tenant.keys.verify}\r\n`,
    );
    expect(verified).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 403 /); // read, and judged: a denial
  });

  it('a request refused before its body is read gets no 100 Continue, and its connection is closed after the answer', async () => {
    // Keep-alive asked for: the server closes the connection itself, as the client may still send the body.
    const refusals: [target: string, headers: string, status: number, code: string][] = [
      ['POST /v1/verify', '', 401, 'UNAUTHORIZED'],
      ['POST /v1/verify', 'Authorization: Bearer bt_not-a-key\r\n', 401, 'UNAUTHORIZED'],
      ['POST /v1/verify', `Authorization: Bearer ${tenant.keys.audit}\r\n`, 403, 'FORBIDDEN'],
      ['POST /v1/nowhere', '', 404, 'NOT_FOUND'],
      ['PUT /v1/delegations', '', 405, 'METHOD_NOT_ALLOWED'],
      ['POST /v1/verify?nope=1', `Authorization: Bearer ${tenant.keys.verify}\r\n`, 400, 'INVALID_REQUEST'],
    ];
    for (const [target, headers, status, code] of refusals) {
      const answer = await askToContinue(2, '{}', target, headers);
      expect(answer, target).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
      expect(answer, target).not.toContain('100 Continue');
      expect(answer, target).toContain(`"code":"${code}"`);
      expect(answer, target).toMatch(/\r\nconnection: close\r\n/i);
    }
  });
});
