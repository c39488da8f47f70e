/**
 * Transfer codings (RFC 9112 6.1): Node's parser frames a request body whose final coding is chunked
 * and decodes no other, so Baton takes chunked alone (any case, optional whitespace) and refuses any
 * other Transfer-Encoding, 400 INVALID_REQUEST, storing nothing: on a server (startServer) from the
 * request's head before any route runs, the key included, and in the body reader for an app served
 * otherwise. Over raw sockets, since Node's parser is what reads the header.
 */
import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { unsupportedTransferCoding } from '../../src/service/body.js';
import { silentLogger } from '../../src/service/log.js';
import { buildChain } from '../support/fixtures.js';
import { listenOnSocket, serverConfigOf, setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';

let svc: TestService;
let tenant: TestTenant;
let server: RunningServer;
let appOnly: Awaited<ReturnType<typeof listenOnSocket>>;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  server = await startServer(serverConfigOf(svc, { BATON_TLOG_INTERVAL_MS: '0' }), silentLogger, () => {});
  appOnly = await listenOnSocket(svc);
});
afterAll(async () => {
  await appOnly?.close();
  await server?.close();
  await svc?.close();
});

interface Answer {
  readonly status: number;
  readonly code: string | undefined;
  readonly message: string | undefined;
  readonly closes: boolean;
}

/** One request on a new connection; resolves with the answer once the connection ends. */
function exchange(port: number, head: string, body: string | Buffer = ''): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const s = connect(port, '127.0.0.1', () => {
      s.write(`${head}\r\n`);
      s.write(body);
    });
    s.on('data', (b: Buffer) => chunks.push(b));
    s.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const headEnd = text.indexOf('\r\n\r\n');
      resolve({
        status: Number(text.split(' ')[1]),
        code: /"code":"([A-Z_]+)"/.exec(text)?.[1],
        message: /"message":"((?:[^"\\]|\\.)*)"/.exec(text)?.[1],
        closes: /^connection: close$/im.test(text.slice(0, headEnd)),
      });
    });
    s.on('error', reject);
  });
}

const chunked = (body: string | Buffer) => {
  const bytes = Buffer.from(body);
  return Buffer.concat([Buffer.from(`${bytes.length.toString(16)}\r\n`), bytes, Buffer.from('\r\n0\r\n\r\n')]);
};
const head = (path: string, codings: readonly string[], extra = '') =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n${extra}${codings.map((c) => `Transfer-Encoding: ${c}\r\n`).join('')}`;

describe('unsupportedTransferCoding', () => {
  it('lets chunked alone through, in any case and with whitespace around it, and refuses every other value', () => {
    for (const ok of [undefined, 'chunked', 'Chunked', 'CHUNKED', ' chunked', 'chunked\t', ' \tchunked \t'])
      expect(unsupportedTransferCoding(ok), ok).toBeUndefined();
    for (const bad of ['gzip, chunked', 'identity, chunked', 'chunked, chunked', 'gzip', 'chunked;q=1', 'x-chunked', '']) {
      const e = unsupportedTransferCoding(bad);
      expect(e?.code, bad).toBe('INVALID_REQUEST');
      expect(e?.message, bad).toContain('Transfer-Encoding');
    }
  });
});

describe('a request with a transfer coding other than chunked, on a server', () => {
  it('is refused 400 from its head, before the key and before any route runs, and stores nothing; chunked alone is read', async () => {
    const record = buildChain([{ max_calls: 10 }], { keys: [tenant.root, generateKeyPair()] }).drs[0]!;
    const body = JSON.stringify({ receipt: record.jws });
    // Declared gzip, sent plain: read as it came, it was stored (201).
    const plain = await exchange(server.port, head('/v1/delegations', ['gzip, chunked']), chunked(body));
    expect(plain).toMatchObject({ status: 400, code: 'INVALID_REQUEST', closes: true });
    expect(plain.message).toContain('Transfer-Encoding \\"gzip, chunked\\"');
    // Sent gzip-coded: refused for its coding, not as "not valid UTF-8".
    const coded = await exchange(server.port, head('/v1/delegations', ['gzip, chunked']), chunked(gzipSync(body)));
    expect(coded).toMatchObject({ status: 400, code: 'INVALID_REQUEST' });
    expect(coded.message).toContain('Transfer-Encoding');
    // The codings on two header lines, as Node joins them.
    expect((await exchange(server.port, head('/v1/delegations', ['gzip', 'chunked']), chunked(body))).message).toContain(
      'Transfer-Encoding \\"gzip, chunked\\"',
    );
    expect((await svc.call('GET', `/v1/delegations/${record.hash}`, { key: tenant.keys.audit })).status).toBe(404);
    // Before the key: a verify with no key is refused for its coding, not 401.
    expect(await exchange(server.port, head('/v1/verify', ['identity, chunked']), chunked('{}'))).toMatchObject({
      status: 400,
      code: 'INVALID_REQUEST',
    });
    // Chunked alone, in any case: read and stored.
    expect((await exchange(server.port, head('/v1/delegations', ['Chunked']), chunked(body))).status).toBe(201);
    expect((await svc.call('GET', `/v1/delegations/${record.hash}`, { key: tenant.keys.audit })).status).toBe(200);
  });
});

describe('a request with a transfer coding other than chunked, to an app served otherwise', () => {
  it('is refused 400 by the body reader, before a byte of the body is read as JSON', async () => {
    const keyed = `Authorization: Bearer ${tenant.keys.verify}\r\n`;
    // A plain {} declared gzip: read as sent, it was a verify's answer about the bundle.
    const r = await exchange(appOnly.port, head('/v1/verify', ['gzip, chunked'], keyed), chunked('{}'));
    expect(r).toMatchObject({ status: 400, code: 'INVALID_REQUEST' });
    expect(r.message).toContain('Transfer-Encoding \\"gzip, chunked\\"');
    const submit = await exchange(appOnly.port, head('/v1/delegations', ['identity, chunked']), chunked('{}'));
    expect(submit.message).toContain('Transfer-Encoding');
  });
});
