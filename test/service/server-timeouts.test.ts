/**
 * HTTP timeouts that suit a load balancer in front: an idle keep-alive
 * connection outlives common balancer idle timeouts (60 s), so the balancer
 * closes it first and never sends a request on a connection the service has
 * just closed. Checked on a real listening server over a raw socket.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, createServer, type Socket } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { silentLogger } from '../../src/service/log.js';
import { MAX_HEADER_BYTES, startServer, type RunningServer } from '../../src/server.js';
import { createDatabase, type FreshDatabase } from '../setup/db.js';

const cleanup: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const f of cleanup.reverse()) await f();
});

async function start(env: Record<string, string> = {}): Promise<RunningServer> {
  const db: FreshDatabase = await createDatabase();
  cleanup.push(db.drop);
  const config = loadConfig({
    PORT: '0',
    DATABASE_URL: db.url,
    BATON_ADMIN_KEY: `timeouts-admin-${randomBytes(16).toString('hex')}`,
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
    const socket = await open(first.port);
    try {
      expect(await get(socket)).toMatch(/^HTTP\/1\.1 200/);
    } finally {
      socket.destroy();
    }
  }, 60_000);

  it('a port already in use fails the start before anything is created: no database, no keys in the data folder', async () => {
    const first = await start();
    const dataDir = join(mkdtempSync(join(tmpdir(), 'baton-busy-port-')), 'data');
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

  it('takes request headers up to 64 KiB (a whole chain in X-DRS-Bundle); beyond, Node refuses them (431)', async () => {
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
    } finally {
      beyond.destroy();
    }
  }, 60_000);
});
