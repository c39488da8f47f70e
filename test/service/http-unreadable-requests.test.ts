/**
 * A request no route could read (a Host that is no host name, a backslash in the path; no Host at
 * all; one Node's parser refused) is answered in the envelope with a request_id to quote to the
 * operator: it is logged with that id, as every request is, and counted in baton_http_requests_total
 * under the fixed route "(unreadable)", never its target or Host.
 */
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startServer } from '../../src/server.js';
import { answerHostless, answerUnreadRequest, UNREADABLE_ROUTE } from '../../src/service/http.js';
import { createLogger } from '../../src/service/log.js';
import { metrics } from '../../src/service/metrics.js';
import { createDatabase } from '../setup/db.js';

const cleanup: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const f of cleanup.reverse()) await f();
});

/** Sends `raw` on a fresh connection and resolves with all the server wrote before closing it. */
function exchange(port: number, raw: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    const socket = connect(port, '127.0.0.1', () => socket.write(raw));
    socket.on('data', (c: Buffer) => (got += c.toString('latin1')));
    socket.once('error', reject);
    socket.once('close', () => resolve(got));
  });
}

const requestIdOf = (raw: string) => (JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)) as { request_id: string }).request_id;

/** baton_http_requests_total of the unreadable route, by method and status. */
async function unreadableCounts(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const text = await metrics.render();
  for (const m of text.matchAll(/^baton_http_requests_total\{method="([^"]*)",route="\(unreadable\)",status="(\d+)"\} (\S+)$/gm)) {
    out[`${m[1]} ${m[2]}`] = Number(m[3]);
  }
  return out;
}

const delta = (before: Record<string, number>, after: Record<string, number>) =>
  Object.fromEntries(Object.entries(after).flatMap(([k, v]) => (v === (before[k] ?? 0) ? [] : [[k, v - (before[k] ?? 0)]])));

describe('requests no route could read', () => {
  it('a bad Host and a backslash in the path: a request line with the answer\'s request_id, counted under "(unreadable)"', async () => {
    const db = await createDatabase();
    cleanup.push(db.drop);
    const lines: Record<string, unknown>[] = [];
    const log = createLogger('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    const config = loadConfig({
      PORT: '0',
      DATABASE_URL: db.url,
      BATON_ADMIN_KEY: `unreadable-admin-${randomBytes(16).toString('hex')}`,
      BATON_MASTER_KEY: randomBytes(32).toString('hex'),
    });
    const server = await startServer(config, log, () => {});
    cleanup.push(server.close);

    const before = await unreadableCounts();
    const answers = [
      await exchange(server.port, 'GET /healthz HTTP/1.1\r\nHost: bad host!!\r\n\r\n'),
      await exchange(server.port, 'GET /a\\SECRETPATH HTTP/1.1\r\nHost: x\r\n\r\n'),
      // The server's own refusals before any route: no Host, a transfer coding it does not decode, a line Node cannot parse.
      await exchange(server.port, 'POST /v1/SECRETPATH HTTP/1.1\r\n\r\n'),
      await exchange(server.port, 'POST /v1/SECRETPATH HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n'),
      await exchange(server.port, 'GE(T /SECRETPATH HTTP/1.1\r\nHost: x\r\n\r\n'),
    ];
    for (const a of answers) expect(a).toMatch(/^HTTP\/1\.1 400 /);
    expect(delta(before, await unreadableCounts())).toEqual({ 'unknown 400': 3, 'POST 400': 2 });

    for (const answer of answers) {
      const id = requestIdOf(answer);
      const line = lines.find((l) => l['request_id'] === id);
      expect(line, `no log line carries ${id}`).toMatchObject({
        level: 'info',
        msg: 'request',
        path: null,
        route: UNREADABLE_ROUTE,
        status: 400,
        code: 'INVALID_REQUEST',
        reason: expect.any(String),
      });
    }
    // What the client sent as Host or target is in no line.
    const text = JSON.stringify(lines);
    expect(text).not.toContain('bad host');
    expect(text).not.toContain('SECRETPATH');
  }, 60_000);

  it('no Host, and what the parser refuses: logged with the request_id when given a logger, and counted', async () => {
    const lines: Record<string, unknown>[] = [];
    const log = createLogger('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    const before = await unreadableCounts();

    let hostlessHead: Record<string, string | number> = {};
    answerHostless({ writeHead: (_s, h) => (hostlessHead = h), end: () => undefined, req: { method: 'POST' } }, log);
    let written = '';
    const socket = {
      writable: true,
      end: (data: string, done: () => void) => {
        written = data;
        done();
      },
      destroy: () => undefined,
    };
    answerUnreadRequest(Object.assign(new Error('Parse Error'), { code: 'HPE_INVALID_METHOD' }), socket, log);

    expect(delta(before, await unreadableCounts())).toEqual({ 'POST 400': 1, 'unknown 400': 1 });
    expect(lines.find((l) => l['request_id'] === hostlessHead['x-request-id'])).toMatchObject({
      msg: 'request',
      method: 'POST',
      route: UNREADABLE_ROUTE,
      status: 400,
    });
    const unreadId = /\r\nx-request-id: ([^\r]+)/.exec(written)?.[1];
    expect(lines.find((l) => l['request_id'] === unreadId)).toMatchObject({
      msg: 'request',
      method: null,
      route: UNREADABLE_ROUTE,
      status: 400,
      reason: 'HPE_INVALID_METHOD',
    });
  });
});

describe('a request a route was reading, cut short outside the app', () => {
  it("by the request timeout (408) or the parser (HPE_INVALID_CHUNK_SIZE): one request line, with the answer's request_id, status and code, counted once", async () => {
    const db = await createDatabase();
    cleanup.push(db.drop);
    const lines: Record<string, unknown>[] = [];
    const log = createLogger('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    const config = loadConfig({
      PORT: '0',
      DATABASE_URL: db.url,
      BATON_ADMIN_KEY: `unreadable-admin-${randomBytes(16).toString('hex')}`,
      BATON_MASTER_KEY: randomBytes(32).toString('hex'),
      BATON_TLOG_INTERVAL_MS: '0',
      BATON_KEEP_ALIVE_TIMEOUT_MS: '1000',
      BATON_HEADERS_TIMEOUT_MS: '1500',
      BATON_REQUEST_TIMEOUT_MS: '2000',
    });
    const server = await startServer(config, log, () => {});
    cleanup.push(server.close);
    const submit = 'POST /v1/delegations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n';
    const routeCounts = async () => {
      const text = await metrics.render();
      const count = (status: number) =>
        Number(
          new RegExp(`^baton_http_requests_total\\{method="POST",route="/v1/delegations",status="${status}"\\} (\\S+)$`, 'm').exec(
            text,
          )?.[1] ?? 0,
        );
      return { '400': count(400), '408': count(408) };
    };
    const before = { unreadable: await unreadableCounts(), route: await routeCounts() };

    // The body stalls past BATON_REQUEST_TIMEOUT_MS: Node's timeout answers 408 while the route waits for it.
    const late = await exchange(server.port, `${submit}Content-Length: 100\r\n\r\n{"receipt"`);
    expect(late).toMatch(/^HTTP\/1\.1 408 /);
    // A chunk size that is not hex, after a first chunk the route has read.
    const garbled = await exchange(server.port, `${submit}Transfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\nZZ\r\n`);
    expect(garbled).toMatch(/^HTTP\/1\.1 400 /);

    const expected = [
      { answer: late, status: 408, code: 'REQUEST_TIMEOUT', reason: 'ERR_HTTP_REQUEST_TIMEOUT' },
      { answer: garbled, status: 400, code: 'INVALID_REQUEST', reason: 'HPE_INVALID_CHUNK_SIZE' },
    ];
    // The route's line comes once its reader sees the connection closed.
    const until = Date.now() + 5_000;
    while (lines.filter((l) => l['msg'] === 'request').length < 2 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, 200)); // and no second line after it
    const requestLines = lines.filter((l) => l['msg'] === 'request');
    expect(requestLines).toHaveLength(2);
    for (const { answer, status, code, reason } of expected) {
      expect(
        requestLines.find((l) => l['request_id'] === requestIdOf(answer)),
        `no line carries ${requestIdOf(answer)}`,
      ).toMatchObject({
        method: 'POST',
        path: '/v1/delegations',
        status,
        code,
        reason,
      });
    }
    expect(delta(before.unreadable, await unreadableCounts())).toEqual({});
    const after = await routeCounts();
    expect({ '400': after['400'] - before.route['400'], '408': after['408'] - before.route['408'] }).toEqual({ '400': 1, '408': 1 });
  }, 60_000);
});
