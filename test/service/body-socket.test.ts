/**
 * Request bodies over a real socket, where the service reads the Node stream
 * itself (src/service/body.ts): a body is refused with 413 as soon as it
 * passes the limit, with or without a Content-Length, and a body that
 * arrives in many small chunks is read whole.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'node:http';
import { connect } from 'node:net';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { buildChain } from '../support/fixtures.js';
import { listenOnSocket, setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';

const LIMIT = 4096;
let svc: TestService;
let tenant: TestTenant;
let server: Awaited<ReturnType<typeof listenOnSocket>> | undefined;
let port: number;

beforeAll(async () => {
  svc = await startTestService({ env: { BATON_MAX_BODY_BYTES: String(LIMIT) } });
  tenant = await setupTenant(svc);
  server = await listenOnSocket(svc);
  port = server.port;
});
afterAll(async () => {
  await server?.close();
  await svc?.close();
});

/** POSTs `chunks` one write each (chunked transfer unless a length is given); resolves with status and code. */
function post(chunks: readonly string[], headers: Record<string, string> = {}): Promise<{ status: number; code: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/v1/verify',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${tenant.keys.verify}`, ...headers },
      },
      (res) => {
        let text = '';
        res.on('data', (b: Buffer) => (text += b.toString('utf8')));
        res.on('end', () => {
          let code: string | undefined;
          try {
            code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
          } catch {
            code = undefined;
          }
          resolve({ status: res.statusCode ?? 0, code });
        });
      },
    );
    req.on('error', (e: NodeJS.ErrnoException) => (e.code === 'EPIPE' || e.code === 'ECONNRESET' ? undefined : reject(e)));
    for (const c of chunks) req.write(c);
    req.end();
  });
}

describe('request bodies over a socket', () => {
  it('a chunked body without Content-Length is refused with 413 once it passes the limit', async () => {
    const piece = `"${'x'.repeat(1022)}",`;
    const r = await post(['{"pad":[', ...Array.from({ length: 8 }, () => piece), '"end"]}']);
    expect(r).toEqual({ status: 413, code: 'PAYLOAD_TOO_LARGE' });
  });

  it('a declared Content-Length above the limit is refused with 413', async () => {
    const body = `{"pad":"${'x'.repeat(LIMIT)}"}`;
    const r = await post([body], { 'content-length': String(Buffer.byteLength(body)) });
    expect(r).toEqual({ status: 413, code: 'PAYLOAD_TOO_LARGE' });
  });

  it('a body sent in many small chunks is read whole', async () => {
    const text = JSON.stringify({ bundle_version: '4.0', invocation: 'not-a-jws', receipts: [] });
    const chunks = text.match(/.{1,5}/gs) ?? [];
    expect(chunks.length).toBeGreaterThan(10);
    // A whole, parsed body: the refusal is about the invocation, not about reading the body.
    const r = await post(chunks);
    expect(r.status).toBe(403);
  });
});

describe('a body on a DELETE, which takes none', () => {
  /** DELETEs an unknown API key with the admin key over a raw socket, with `framing` and `body`; resolves with status and code. */
  function deleteWith(framing: string, body = '', withKey = true): Promise<{ status: number; code: string | undefined }> {
    return new Promise((resolve, reject) => {
      let text = '';
      const s = connect(port, '127.0.0.1', () =>
        s.write(
          `DELETE /v1/admin/api-keys/key_unknown HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${withKey ? `Authorization: Bearer ${svc.adminKey}\r\n` : ''}${framing}\r\n${body}`,
        ),
      );
      s.on('data', (b: Buffer) => (text += b.toString('utf8')));
      s.on('end', () => resolve({ status: Number(text.split(' ')[1]), code: /"code":"([A-Z_]+)"/.exec(text)?.[1] }));
      s.on('error', reject);
    });
  }
  const chunked = (...pieces: string[]) => pieces.map((p) => `${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`).join('') + '0\r\n\r\n';

  it('is refused 400 from its headers alone, before the key is read and before any byte of it is: chunked, with a length, even empty chunked', async () => {
    expect(await deleteWith('Transfer-Encoding: chunked\r\n', chunked('{"dry_', 'run":true}'))).toEqual({
      status: 400,
      code: 'INVALID_REQUEST',
    });
    expect(await deleteWith('Content-Length: 2\r\n', '{}')).toEqual({ status: 400, code: 'INVALID_REQUEST' });
    expect(await deleteWith('Transfer-Encoding: chunked\r\n', '0\r\n\r\n')).toEqual({ status: 400, code: 'INVALID_REQUEST' });
    // A body larger than the limit, announced but never sent: answered at once, nothing of it read.
    expect(await deleteWith(`Content-Length: ${LIMIT * 100}\r\n`)).toEqual({ status: 400, code: 'INVALID_REQUEST' });
    // Without a key too: the body is refused before the key is looked at (as an undeclared query is).
    expect(await deleteWith('Content-Length: 2\r\n', '{}', false)).toEqual({ status: 400, code: 'INVALID_REQUEST' });
    expect(await deleteWith('', '', false)).toEqual({ status: 401, code: 'UNAUTHORIZED' });
    // No body: the route answers (404 for an unknown key).
    expect(await deleteWith('')).toEqual({ status: 404, code: 'NOT_FOUND' });
    expect(await deleteWith('Content-Length: 0\r\n')).toEqual({ status: 404, code: 'NOT_FOUND' });
  });
});

describe('a body its sender cuts short', () => {
  it('is the client leaving, not a storage outage: nothing is logged as an error, and later requests are served', async () => {
    const errors: string[] = [];
    const quiet = () => {};
    const own = await startTestService({
      log: { debug: quiet, info: quiet, warn: quiet, error: (msg, fields) => errors.push(`${msg} ${JSON.stringify(fields)}`) },
    });
    const listening = await listenOnSocket(own);
    try {
      const ownTenant = await setupTenant(own);
      // A verify (keyed) and a keyless submit.
      for (const path of ['/v1/verify', '/v1/delegations']) {
        // Headers promise 100 bytes; one arrives, then the connection closes.
        await new Promise<void>((resolve, reject) => {
          const s = connect(listening.port, '127.0.0.1', () => {
            s.write(
              `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${path === '/v1/verify' ? `Authorization: Bearer ${ownTenant.keys.verify}\r\n` : ''}Content-Length: 100\r\n\r\n{`,
            );
            setTimeout(() => s.destroy(), 100);
          });
          s.on('close', () => resolve());
          s.on('error', reject);
        });
      }
      // The service reads the cut on its own time: wait until it has, then look.
      const health = await fetch(`${listening.url}/healthz`);
      expect(health.status).toBe(200);
      await new Promise((r) => setTimeout(r, 200));
      expect(errors).toEqual([]);
    } finally {
      await listening.close();
      await own.close();
    }
  });
});

describe('a verify whose body arrives slowly', () => {
  it('is decided: the deadline bounds the wait for the database, not the upload, which moves it by at most itself', async () => {
    const own = await startTestService({ env: { BATON_VERIFY_DEADLINE_MS: '1000' } });
    const listening = await listenOnSocket(own);
    try {
      const ownTenant = await setupTenant(own);
      const chain = buildChain([{ max_calls: 10 }, { max_calls: 10 }], { keys: [ownTenant.root, generateKeyPair(), generateKeyPair()] });
      /** Sends the headers and 100 bytes at once, the rest after `pauseMs`; resolves with the status line. */
      const slowly = (pauseMs: number) => {
        const body = JSON.stringify(chain.invoke({ tool: 'web_search', pii_access: false, write_access: false }).bundle);
        return new Promise<string>((resolve, reject) => {
          let text = '';
          const s = connect(listening.port, '127.0.0.1', () => {
            s.write(
              `POST /v1/verify HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nAuthorization: Bearer ${ownTenant.keys.verify}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 100)}`,
            );
            setTimeout(() => s.write(body.slice(100)), pauseMs);
          });
          s.on('data', (b: Buffer) => (text += b.toString('utf8')));
          s.on('end', () => resolve(text.split('\r\n')[0]!));
          s.on('error', reject);
        });
      };
      expect(await slowly(0)).toBe('HTTP/1.1 200 OK'); // warm: the chain stored, the statements prepared
      // 1.2 deadlines of upload: the deadline moves on by one, and the decision has the rest.
      expect(await slowly(1_200)).toBe('HTTP/1.1 200 OK');
      // 2.5 deadlines: moved by one only, it passed before the body was whole: the client's doing,
      // answered 408 with nothing sent to the database (a 503 said the database was too slow).
      expect(await slowly(2_500)).toBe('HTTP/1.1 408 Request Timeout');
    } finally {
      await listening.close();
      await own.close();
    }
  });
});

describe('a request other than a verify whose body arrives slowly', () => {
  it("is answered as its body says, not 503: the upload is the client's time; one slower than the deadline is a 408, never a storage outage", async () => {
    const errors: string[] = [];
    const quiet = () => {};
    const own = await startTestService({
      env: { BATON_VERIFY_DEADLINE_MS: '400', BATON_WRITE_DEADLINE_MS: '800' },
      log: { debug: quiet, info: quiet, warn: quiet, error: (msg, fields) => errors.push(`${msg} ${JSON.stringify(fields)}`) },
    });
    const listening = await listenOnSocket(own);
    try {
      const ownTenant = await setupTenant(own);
      /** Sends the headers and 10 bytes at once, the rest after `pauseMs`; resolves with the status line and error code. */
      const slowly = (path: string, body: string, pauseMs: number, key?: string) =>
        new Promise<string>((resolve, reject) => {
          let text = '';
          const s = connect(listening.port, '127.0.0.1', () => {
            s.write(
              `POST ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n${key ? `Authorization: Bearer ${key}\r\n` : ''}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 10)}`,
            );
            setTimeout(() => s.write(body.slice(10)), pauseMs);
          });
          s.on('data', (b: Buffer) => (text += b.toString('utf8')));
          s.on('end', () => {
            const code = /"code":"([A-Z_]+)"/.exec(text)?.[1];
            resolve(`${text.split('\r\n')[0]!.replace('HTTP/1.1 ', '')}${code ? ` ${code}` : ''}`);
          });
          s.on('error', reject);
        });
      const newRecord = () => buildChain([{ max_calls: 10 }], { keys: [ownTenant.root, generateKeyPair()] }).drs[0]!;
      const chain = { drs: [newRecord()] };
      const submit = (pauseMs: number, record = chain.drs[0]!) =>
        slowly('/v1/delegations', JSON.stringify({ receipt: record.jws }), pauseMs);
      const explain = (pauseMs: number) =>
        slowly(
          '/v1/explain',
          JSON.stringify({ dr_chain: [chain.drs[0]!.hash], args: { tool: 'web_search' } }),
          pauseMs,
          ownTenant.keys.audit,
        );

      // A keyless write (storing a DR) whose body takes longer than the write deadline: stored (201).
      expect(await submit(1_000)).toBe('201 Created');
      // A read that takes a body (explain), longer than the read deadline: answered.
      expect(await explain(600)).toMatch(/^200 /);
      // Slower than the deadline and then some: the client's fault, 408, and no storage outage logged.
      // A record not stored yet: its work goes on after the 408 and reaches the commit, which is
      // refused (rolled back), and is logged as no storage outage either.
      const late = newRecord();
      expect(await submit(2_000, late)).toBe('408 Request Timeout REQUEST_TIMEOUT');
      expect(await explain(1_000)).toBe('408 Request Timeout REQUEST_TIMEOUT');
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect((await own.call('GET', `/v1/delegations/${late.hash}`, { key: ownTenant.keys.audit })).status).toBe(404);
      expect(errors).toEqual([]);
    } finally {
      await listening.close();
      await own.close();
    }
  });
});
