/**
 * HTTP timeouts that suit a load balancer in front: an idle keep-alive
 * connection outlives common balancer idle timeouts (60 s), so the balancer
 * closes it first and never sends a request on a connection the service has
 * just closed. Checked on a real listening server over a raw socket.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { connect, createServer, type Socket } from 'node:net';
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { silentLogger } from '../../src/service/log.js';
import { MAX_HEADER_BYTES, startServer, type RunningServer } from '../../src/server.js';
import { answerUnreadRequest } from '../../src/service/http.js';
import { createDatabase, type FreshDatabase } from '../setup/db.js';
import { scratchFolders } from '../support/scratch.js';

const cleanup: (() => Promise<void>)[] = [];
const scratch = scratchFolders('baton-busy-port-');
afterAll(async () => {
  for (const f of cleanup.reverse()) await f();
});

const ADMIN_KEY = `timeouts-admin-${randomBytes(16).toString('hex')}`;

async function start(env: Record<string, string> = {}, db?: FreshDatabase): Promise<RunningServer> {
  if (!db) {
    db = await createDatabase();
    cleanup.push(db.drop);
  }
  const config = loadConfig({
    PORT: '0',
    DATABASE_URL: db.url,
    BATON_ADMIN_KEY: ADMIN_KEY,
    BATON_MASTER_KEY: randomBytes(32).toString('hex'),
    ...env,
  });
  const server = await startServer(config, silentLogger, () => {});
  cleanup.push(server.close);
  return server;
}

/** Sends GET /healthz on `socket` and resolves with the raw response head once the whole response is in. */
function get(socket: Socket, extraHeader = ''): Promise<string> {
  return new Promise((resolve, reject) => {
    let raw = '';
    const onData = (chunk: Buffer) => {
      raw += chunk.toString('latin1');
      const end = raw.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(raw)?.[1];
      if (end >= 0 && length !== undefined && raw.length >= end + 4 + Number(length)) {
        socket.off('data', onData);
        resolve(raw.slice(0, end));
      }
    };
    socket.on('data', onData);
    socket.once('error', reject);
    // Closed before a whole response (a 431 closes the connection): fail now, not at the timeout.
    socket.once('close', () => reject(new Error(`connection closed; got: ${raw.slice(0, 60)}`)));
    socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n${extraHeader}\r\n`);
  });
}

/** The server on `port` still answers GET /healthz with a 200, on a fresh connection. */
async function expectServing(port: number): Promise<void> {
  const socket = await open(port);
  try {
    expect(await get(socket)).toMatch(/^HTTP\/1\.1 200/);
  } finally {
    socket.destroy();
  }
}

function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => resolve(s));
    s.once('error', reject);
  });
}

describe('HTTP timeouts', () => {
  it('default to keep-alive 65 s, headers 66 s, request 120 s; a bad order stops the start', () => {
    expect(loadConfig({}).http).toEqual({ keepAliveTimeoutMs: 65_000, headersTimeoutMs: 66_000, requestTimeoutMs: 120_000 });
    expect(
      loadConfig({ BATON_KEEP_ALIVE_TIMEOUT_MS: '350000', BATON_HEADERS_TIMEOUT_MS: '360000', BATON_REQUEST_TIMEOUT_MS: '360000' }).http,
    ).toEqual({ keepAliveTimeoutMs: 350_000, headersTimeoutMs: 360_000, requestTimeoutMs: 360_000 });
    expect(() => loadConfig({ BATON_KEEP_ALIVE_TIMEOUT_MS: '70000' })).toThrow(ConfigError); // not below headers (66 s)
    expect(() => loadConfig({ BATON_REQUEST_TIMEOUT_MS: '60000' })).toThrow(/BATON_REQUEST_TIMEOUT_MS/); // below headers
    expect(() => loadConfig({ BATON_KEEP_ALIVE_TIMEOUT_MS: '5' })).toThrow(/BATON_KEEP_ALIVE_TIMEOUT_MS must be a whole number/);
  });

  it('the server keeps an idle connection 65 s by default (Node alone: 5 s) and says so to clients', async () => {
    const server = await start();
    const socket = await open(server.port);
    try {
      expect(await get(socket)).toMatch(/\r\nkeep-alive: timeout=65(\r\n|$)/i);
    } finally {
      socket.destroy();
    }
  }, 60_000);

  it('the configured keep-alive is the one the server applies: an idle connection lives that long, then the server closes it', async () => {
    const server = await start({ BATON_KEEP_ALIVE_TIMEOUT_MS: '1500' });
    const socket = await open(server.port);
    const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(performance.now())));
    try {
      expect(await get(socket)).toMatch(/\r\nkeep-alive: timeout=1(\r\n|$)/i);
      await new Promise((r) => setTimeout(r, 700));
      expect(await get(socket)).toMatch(/^HTTP\/1\.1 200/); // still open after 0.7 s idle
      const idleFrom = performance.now();
      const idleMs = (await closed) - idleFrom;
      // Closed by the server after about 1.5 s idle: well before Node's default 5 s.
      expect(idleMs).toBeGreaterThan(1_000);
      expect(idleMs).toBeLessThan(4_500);
    } finally {
      socket.destroy();
    }
  }, 60_000);

  it('a port already in use fails the start with what to do next, not a crash', async () => {
    const first = await start();
    await expect(start({ PORT: String(first.port) })).rejects.toThrow(/127\.0\.0\.1:\d+ is already in use.*PORT, or baton serve --port/);
    // The first server is untouched.
    await expectServing(first.port);
  }, 60_000);

  it('a port already in use fails the start before anything is created: no database, no keys in the data folder', async () => {
    const first = await start();
    const dataDir = join(scratch(), 'data');
    await expect(startServer(loadConfig({ BATON_DATA_DIR: dataDir, PORT: String(first.port) }), silentLogger, () => {})).rejects.toThrow(
      /already in use/,
    );
    // Before this check the store was opened, migrated and keyed first: seconds, and files left behind.
    expect(existsSync(dataDir), 'the data folder was created').toBe(false);
  }, 60_000);

  it('a first start that cannot bind its port shows no admin key and keeps none: the next start shows a new one', async () => {
    const first = await start();
    const db: FreshDatabase = await createDatabase();
    cleanup.push(db.drop);
    const env = { DATABASE_URL: db.url, BATON_MASTER_KEY: randomBytes(32).toString('hex') };
    const shown: string[] = [];
    const show = (text: string) => shown.push(text);
    await expect(startServer(loadConfig({ ...env, PORT: String(first.port) }), silentLogger, show)).rejects.toThrow(/already in use/);
    expect(shown).toEqual([]);

    const second = await startServer(loadConfig({ ...env, PORT: '0' }), silentLogger, show);
    cleanup.push(second.close);
    const key = /(bt_admin_[A-Za-z0-9_-]{43})/.exec(shown.join(''))?.[1];
    expect(key, shown.join('')).toBeDefined();
    const res = await fetch(`http://127.0.0.1:${second.port}/v1/admin/tenants`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(200);
  }, 60_000);

  it('a first start that fails after binding, before it shows the admin key, keeps no key and frees its port', async () => {
    const db: FreshDatabase = await createDatabase();
    cleanup.push(db.drop);
    const env = { DATABASE_URL: db.url, BATON_MASTER_KEY: randomBytes(32).toString('hex') };
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port: p } = probe.address() as { port: number };
        probe.close(() => resolve(p));
      });
    });
    // Showing the key is the start's last step; a start whose output cannot be written has shown nothing.
    const unwritable = () => {
      throw new Error('EPIPE: the terminal went away');
    };
    await expect(startServer(loadConfig({ ...env, PORT: String(port) }), silentLogger, unwritable)).rejects.toThrow(/EPIPE/);

    const shown: string[] = [];
    const second = await startServer(loadConfig({ ...env, PORT: String(port) }), silentLogger, (t) => shown.push(t));
    cleanup.push(second.close);
    const key = /(bt_admin_[A-Za-z0-9_-]{43})/.exec(shown.join(''))?.[1];
    expect(key, shown.join('')).toBeDefined();
    const res = await fetch(`http://127.0.0.1:${second.port}/v1/admin/tenants`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(200);
  }, 60_000);

  it('takes request headers up to 64 KiB (a whole chain in X-DRS-Bundle); beyond, a 431 HEADERS_TOO_LARGE in the envelope', async () => {
    const server = await start();
    const within = await open(server.port);
    try {
      // Past Node's own 16 KiB default, as a DRS client's 16-record bundle is.
      expect(await get(within, `x-drs-bundle: ${'A'.repeat(40 * 1024)}\r\n`)).toMatch(/^HTTP\/1\.1 200/);
    } finally {
      within.destroy();
    }
    const beyond = await open(server.port);
    try {
      const answer = await new Promise<string>((resolve) => {
        let raw = '';
        beyond.on('data', (c: Buffer) => (raw += c.toString('latin1')));
        beyond.once('close', () => resolve(raw));
        beyond.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nx-drs-bundle: ${'A'.repeat(MAX_HEADER_BYTES)}\r\n\r\n`);
      });
      expect(answer).toMatch(/^HTTP\/1\.1 431/);
      expect(envelopeOf(answer)).toMatchObject({ error: { code: 'HEADERS_TOO_LARGE' } });
    } finally {
      beyond.destroy();
    }
  }, 60_000);
});

/** Sends `raw` on a fresh connection and resolves with everything the server wrote before it closed. */
async function exchange(port: number, raw: string): Promise<string> {
  const socket = await open(port);
  try {
    return await new Promise<string>((resolve) => {
      let got = '';
      socket.on('data', (c: Buffer) => (got += c.toString('latin1')));
      socket.once('close', () => resolve(got));
      socket.write(raw);
    });
  } finally {
    socket.destroy();
  }
}

/** The JSON body of a raw answer, checked to be Baton's envelope whose request_id is its X-Request-Id. */
function envelopeOf(raw: string): { error: { code: string; message: string; suggestion: string }; request_id: string } {
  const end = raw.indexOf('\r\n\r\n');
  const head = raw.slice(0, end);
  expect(head).toMatch(/\r\ncontent-type: application\/json\r\n/i);
  expect(head).toMatch(/\r\nconnection: close(\r\n|$)/i);
  const body = raw.slice(end + 4);
  expect(Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1])).toBe(Buffer.byteLength(body, 'latin1'));
  const parsed = JSON.parse(body) as ReturnType<typeof envelopeOf>;
  expect(/\r\nx-request-id: ([^\r]+)/i.exec(head)?.[1]).toBe(parsed.request_id);
  expect(parsed.error.suggestion.length).toBeGreaterThan(0);
  return parsed;
}

describe('requests Node refuses before Baton reads them', () => {
  it('are answered in the envelope with a stable code at the status Node chose, and the connection closes', async () => {
    const server = await start();
    const garbage = await exchange(server.port, 'NOT HTTP AT ALL\r\n\r\n');
    expect(garbage).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(envelopeOf(garbage).error).toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringMatching(/not HTTP\/1\.1/) });
    // Both framings at once: a request smuggling shape, refused by the parser.
    const smuggled = await exchange(
      server.port,
      'POST /v1/verify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
    );
    expect(smuggled).toMatch(/^HTTP\/1\.1 400 /);
    expect(envelopeOf(smuggled).error.code).toBe('INVALID_REQUEST');
    // The server goes on answering.
    await expectServing(server.port);
  }, 60_000);

  it('a request the parser reads but no URL can be made of (a bad Host, a backslash, `*`) gets the envelope too, and the connection closes', async () => {
    const server = await start();
    for (const raw of [
      'GET /v1/keys HTTP/1.1\r\nHost: a b\r\n\r\n',
      'GET /v1\\keys HTTP/1.1\r\nHost: x\r\n\r\n',
      'OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n',
      'GET /v1/keys HTTP/1.1\r\n\r\n',
      'POST /v1/verify HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}',
    ]) {
      const answer = await exchange(server.port, raw);
      expect(answer, raw).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
      expect(envelopeOf(answer).error, raw).toMatchObject({
        code: 'INVALID_REQUEST',
        message: expect.stringMatching(/^Baton cannot read this request: /),
      });
    }
    await expectServing(server.port);
  }, 60_000);

  it('a CONNECT gets the envelope (Baton is no proxy), where Node alone closed the connection without a word', async () => {
    const server = await start();
    for (const raw of [
      'CONNECT 127.0.0.1:5432 HTTP/1.1\r\nHost: 127.0.0.1:5432\r\n\r\n',
      'CONNECT /v1/keys HTTP/1.1\r\nHost: x\r\n\r\ntunnel bytes',
    ]) {
      const answer = await exchange(server.port, raw);
      expect(answer, raw).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
      expect(envelopeOf(answer).error, raw).toMatchObject({ code: 'INVALID_REQUEST', message: expect.stringMatching(/CONNECT/) });
    }
    // Pipelined behind a request still being answered, it writes nothing: it would read as that answer.
    const pipelined = await exchange(server.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nCONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n');
    expect(pipelined).not.toMatch(/CONNECT/);
    expect(pipelined === '' || /^HTTP\/1\.1 200 OK\r\n/.test(pipelined), pipelined).toBe(true);
    await expectServing(server.port);
  }, 60_000);

  it('a request not in within the timeouts is a 408 REQUEST_TIMEOUT, and the connection is closed even if the client keeps its half open', async () => {
    // Node checks its timeouts every 30 s, so the handler gets Node's own timeout error on a real socket
    // here; both ends allow half-open connections, as the HTTP server's sockets do.
    const listener = createServer({ allowHalfOpen: true });
    cleanup.push(() => new Promise((r) => listener.close(() => r())));
    await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
    const accepted = new Promise<Socket>((resolve) => listener.once('connection', resolve));
    const client = await new Promise<Socket>((resolve, reject) => {
      const s = connect({ port: (listener.address() as { port: number }).port, host: '127.0.0.1', allowHalfOpen: true }, () => resolve(s));
      s.once('error', reject);
    });
    cleanup.push(async () => void client.destroy());
    const received = new Promise<string>((resolve) => {
      let got = '';
      client.on('data', (c: Buffer) => (got += c.toString('latin1')));
      client.once('end', () => resolve(got));
    });
    const serverSide = await accepted;
    const serverClosed = new Promise<void>((resolve) => serverSide.once('close', () => resolve()));
    answerUnreadRequest(Object.assign(new Error('Request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }), serverSide);
    const answer = await received;
    expect(answer).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(envelopeOf(answer).error.code).toBe('REQUEST_TIMEOUT');
    // The client never ends its side; the server's socket closes all the same.
    await serverClosed;
    expect(serverSide.destroyed).toBe(true);
  }, 60_000);

  it('an Expect other than 100-continue is ignored, as RFC 9110 allows: the request is served (Node alone answered a bare 417)', async () => {
    const server = await start();
    const socket = await open(server.port);
    try {
      const head = await get(socket, 'Expect: something-else\r\n');
      expect(head).toMatch(/^HTTP\/1\.1 200/);
      expect(head).toMatch(/\r\nx-request-id: /i);
    } finally {
      socket.destroy();
    }
  }, 60_000);

  it("a headers timeout of 2 s answers its 408 within about two seconds on a real server, not at Node's 30 s check", async () => {
    const server = await start({ BATON_HEADERS_TIMEOUT_MS: '2000', BATON_REQUEST_TIMEOUT_MS: '2000', BATON_KEEP_ALIVE_TIMEOUT_MS: '1000' });
    const socket = await open(server.port);
    cleanup.push(async () => void socket.destroy());
    const started = Date.now();
    const answer = new Promise<string>((resolve) => {
      let got = '';
      socket.on('data', (c: Buffer) => (got += c.toString('latin1')));
      socket.once('close', () => resolve(got));
    });
    socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n'); // and never the blank line
    const got = await answer;
    expect(got).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(envelopeOf(got).error.code).toBe('REQUEST_TIMEOUT');
    // The timeout (2 s) plus one check interval (250 ms) and scheduling: up to 30 s more without the setting.
    expect(Date.now() - started).toBeLessThan(4_000);
  }, 60_000);

  it('a refusal on a connection with a request still being answered writes nothing: it would read as that answer', () => {
    // A pipelined client: its first request is complete and its handler still running (no head
    // written yet) when the next one times out or cannot be parsed.
    for (const headersSent of [false, true]) {
      const written: string[] = [];
      let destroyed = false;
      const pipelined = {
        writable: true,
        _httpMessage: { headersSent, req: { complete: true } },
        end: (data: string) => written.push(data),
        destroy: () => (destroyed = true),
      };
      answerUnreadRequest(Object.assign(new Error('Request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }), pipelined);
      expect(written).toEqual([]);
      expect(destroyed).toBe(true);
    }
    // A socket error is a client gone, not a request refused: nothing is written.
    const written: string[] = [];
    answerUnreadRequest(Object.assign(new Error('read ETIMEDOUT'), { code: 'ETIMEDOUT' }), {
      writable: true,
      end: (data: string) => written.push(data),
      destroy: () => undefined,
    });
    expect(written).toEqual([]);
  });

  it('a request whose own body the parser refuses gets the envelope: it was never read in full, so nothing ran', async () => {
    const server = await start();
    // Node has attached this request's answer when its chunked body turns out unreadable.
    const badChunk = await exchange(
      server.port,
      'POST /v1/verify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n',
    );
    expect(badChunk).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(envelopeOf(badChunk).error).toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringContaining('HPE_INVALID_CHUNK_SIZE'),
    });
  }, 60_000);
});

describe('a client that leaves while its request waits', () => {
  it('is let go when the handler comes to read the body of a connection already gone: no request open for ever', async () => {
    const db = await createDatabase();
    cleanup.push(db.drop);
    const server = await start({}, db);
    const admin = { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' };
    const tenant = (await (
      await fetch(`${server.url}/v1/admin/tenants`, { method: 'POST', headers: admin, body: '{"name":"leaver"}' })
    ).json()) as { id: string };
    const made = await fetch(`${server.url}/v1/admin/tenants/${tenant.id}/api-keys`, {
      method: 'POST',
      headers: admin,
      body: JSON.stringify({ scopes: ['issue'], name: 'issuer' }),
    });
    const issueKey = ((await made.json()) as { key: string }).key;
    const inFlight = async () => {
      const text = await (await fetch(`${server.url}/metrics`, { headers: admin })).text();
      return Number(/^baton_http_requests_in_flight (\S+)$/m.exec(text)?.[1]);
    };
    expect(await inFlight()).toBe(1); // the scrape itself

    // Hold the key's first lookup: the handler waits on it, with the body not yet read.
    const sql = postgres(db.url, { max: 1, onnotice: () => {} });
    cleanup.push(() => sql.end({ timeout: 1 }));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const holding = sql.begin(async (tx) => {
      await tx`lock table api_keys in access exclusive mode`;
      locked();
      await released;
    });
    await isLocked;

    // The whole request, then a reset while its key is being looked up.
    const socket = await open(server.port);
    const body = '{"receipts":[]}';
    socket.write(
      `POST /v1/delegations HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${issueKey}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    await new Promise((r) => setTimeout(r, 200));
    socket.resetAndDestroy();
    await new Promise((r) => setTimeout(r, 200));
    release();
    await holding;

    // Without the check the request never ends: the gauge stays one up for ever.
    const deadline = Date.now() + 5_000;
    let seen = await inFlight();
    while (seen !== 1 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      seen = await inFlight();
    }
    expect(seen).toBe(1);
  });
});
