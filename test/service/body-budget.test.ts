/**
 * The process's budget of request body bytes held while they arrive (BATON_MAX_BODY_BUFFER_BYTES,
 * src/service/body.ts): bytes are counted as they arrive, and a body that would take the total past
 * it (or, without a key, the keyless half past its half) is refused at once, 503 SERVICE_BUSY with
 * Retry-After, storing nothing; every body's bytes are given back when it is done, whole or not
 * (read, refused 413 or 503, cut short, timed out). Checked on a real server (startServer) over raw
 * sockets, keyless, where an outside probe grew the process by 500 MB with 3,000 stalled uploads.
 * body-budget-keyless.test.ts checks that keyless bodies never crowd out keyed ones.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import type { RunningServer } from '../../src/server.js';
import { bodyBudget } from '../../src/service/body.js';
import { silentLogger } from '../../src/service/log.js';
import { buildChain } from '../support/fixtures.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { startBudgetServer } from '../support/body-budget.js';

const MAX_BODY = 4096;
/** Half of it, 4,350 bytes, is what keyless bodies may hold together. */
const BUDGET = 8700;
let svc: TestService;
let tenant: TestTenant;
let server: RunningServer;
const open: Socket[] = [];

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  // A stalled upload is ended by the request timeout: short here, so that path is seen too.
  const timeouts = { BATON_KEEP_ALIVE_TIMEOUT_MS: '1000', BATON_HEADERS_TIMEOUT_MS: '1500', BATON_REQUEST_TIMEOUT_MS: '2000' };
  server = await startBudgetServer(svc, { maxBody: MAX_BODY, budget: BUDGET }, silentLogger, timeouts);
});
afterAll(async () => {
  for (const s of open) s.destroy();
  await server?.close();
  await svc?.close();
});

interface Answer {
  readonly status: number;
  readonly code: string | undefined;
  readonly retryAfter: string | undefined;
}

/** Sends `head` and `body` on a new connection, and keeps it open (stalled) until the answer comes or the test ends. */
function send(head: string, body = ''): { socket: Socket; answer: Promise<Answer> } {
  const socket = connect(server.port, '127.0.0.1');
  open.push(socket);
  let text = '';
  const answer = new Promise<Answer>((resolve) => {
    socket.on('data', (b: Buffer) => {
      text += b.toString('utf8');
      const end = text.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(text)?.[1];
      if (end >= 0 && length !== undefined && text.length >= end + 4 + Number(length)) {
        resolve({
          status: Number(text.split(' ')[1]),
          code: /"code":"([A-Z_]+)"/.exec(text)?.[1],
          retryAfter: /^retry-after: (.*)$/im.exec(text.slice(0, end))?.[1],
        });
      }
    });
    socket.on('close', () => resolve({ status: Number(text.split(' ')[1]) || 0, code: undefined, retryAfter: undefined }));
  });
  socket.on('error', () => {});
  socket.write(`${head}\r\n${body}`);
  return { socket, answer };
}

const submitHead = (framing: string) => `POST /v1/delegations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${framing}`;
const declared = (length: number) => submitHead(`Content-Length: ${length}\r\n`);
const chunk = (piece: string) => `${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`;

/** Resolves once the budget holds `bytes`, failing after 5 s with what it holds. */
async function budgetHolds(bytes: number): Promise<void> {
  const until = Date.now() + 5_000;
  while (bodyBudget.held !== bytes && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
  expect(bodyBudget.held).toBe(bytes);
}

describe('BATON_MAX_BODY_BUFFER_BYTES', () => {
  it('is 64 MiB by default, read as the others are, and refused below BATON_MAX_BODY_BYTES', () => {
    expect(loadConfig({}).maxBodyBufferBytes).toBe(64 * 1024 * 1024);
    expect(loadConfig({ BATON_MAX_BODY_BUFFER_BYTES: '1048576' }).maxBodyBufferBytes).toBe(1_048_576);
    for (const bad of ['12', '1e6', '-1', 'lots'])
      expect(() => loadConfig({ BATON_MAX_BODY_BUFFER_BYTES: bad })).toThrow(/BATON_MAX_BODY_BUFFER_BYTES must be a whole number/);
    expect(() => loadConfig({ BATON_MAX_BODY_BYTES: '262144', BATON_MAX_BODY_BUFFER_BYTES: '524287' })).toThrow(ConfigError);
    expect(loadConfig({ BATON_MAX_BODY_BYTES: '262144', BATON_MAX_BODY_BUFFER_BYTES: '524288' }).maxBodyBufferBytes).toBe(524_288);
    expect(() => loadConfig({ BATON_MAX_BODY_BYTES: '262144', BATON_MAX_BODY_BUFFER_BYTES: '262143' })).toThrow(
      /BATON_MAX_BODY_BUFFER_BYTES \(262143\) must be at least twice BATON_MAX_BODY_BYTES \(524288\)/,
    );
  });
});

describe('the budget of body bytes held while they arrive', () => {
  it('refuses a body that would pass it at once, 503 SERVICE_BUSY with Retry-After, storing nothing; stalled bodies give their bytes back when their sender leaves', async () => {
    await budgetHolds(0);
    // A declared length holds nothing until its bytes come.
    const unsent = send(declared(4096));
    await new Promise((r) => setTimeout(r, 200));
    await budgetHolds(0);
    unsent.socket.destroy();
    // Two keyless uploads declare 4,096 bytes each, send 2,000, and stall: 4,000 of the keyless 4,350 are held.
    const sent = `{"receipt":"${'x'.repeat(1988)}`;
    const stalled = [send(declared(4096), sent), send(declared(4096), sent)];
    await budgetHolds(4000);
    // A third, a whole and valid submission, would take the keyless bytes past their half: refused as it arrives.
    const record = buildChain([{ max_calls: 10 }], { keys: [tenant.root, generateKeyPair()] }).drs[0]!;
    const body = JSON.stringify({ receipt: record.jws });
    expect(Buffer.byteLength(body)).toBeGreaterThan(BUDGET / 2 - 4000);
    expect(await send(declared(Buffer.byteLength(body)), body).answer).toEqual({ status: 503, code: 'SERVICE_BUSY', retryAfter: '1' });
    expect((await svc.call('GET', `/v1/delegations/${record.hash}`, { key: tenant.keys.audit })).status).toBe(404);
    await budgetHolds(4000);
    // A chunked body is counted as it arrives too: 306 bytes fit, 300 more would not.
    const piece = 'x'.repeat(300);
    const chunked = send(submitHead('Transfer-Encoding: chunked\r\n'), chunk(`{"a":"${piece}`));
    await budgetHolds(4000 + 306);
    chunked.socket.write(chunk(piece));
    expect(await chunked.answer).toMatchObject({ status: 503, code: 'SERVICE_BUSY', retryAfter: '1' });
    await budgetHolds(4000);
    // The stalled senders leave: their bytes are given back, and the same submission is now stored.
    for (const s of stalled) s.socket.destroy();
    await budgetHolds(0);
    expect((await send(declared(Buffer.byteLength(body)), body).answer).status).toBe(201);
    expect((await svc.call('GET', `/v1/delegations/${record.hash}`, { key: tenant.keys.audit })).status).toBe(200);
    await budgetHolds(0);
  });

  it('gives every body its bytes back however it ends: read and answered, not JSON, 413 declared or as it arrives, cut short, timed out', async () => {
    await budgetHolds(0);
    expect((await send(declared(2), '{}').answer).status).toBe(400); // read whole, refused by the schema
    expect((await send(declared(5), '{nope').answer).status).toBe(400); // read whole, not JSON
    expect((await send(declared(MAX_BODY + 1), '{').answer).code).toBe('PAYLOAD_TOO_LARGE'); // refused from its length
    const over = 'x'.repeat(MAX_BODY);
    expect((await send(submitHead('Transfer-Encoding: chunked\r\n'), chunk(over) + chunk(over)).answer).code).toBe('PAYLOAD_TOO_LARGE');
    await budgetHolds(0);
    // Cut short: the sender closes with 3,006 of 3,999 bytes sent.
    const cut = send(declared(3999), `{"a":"${'x'.repeat(3000)}`);
    await budgetHolds(3006);
    cut.socket.destroy();
    await budgetHolds(0);
    // Timed out: the sender stalls past BATON_REQUEST_TIMEOUT_MS (2 s), and Node answers 408 and closes.
    const late = send(declared(3999), '{"a":"');
    await budgetHolds(6);
    expect((await late.answer).status).toBe(408);
    await budgetHolds(0);
    // And the budget still takes a body of the largest size.
    expect((await send(declared(MAX_BODY), `{"a":"${'x'.repeat(MAX_BODY - 8)}"}`).answer).status).toBe(400);
    await budgetHolds(0);
  });
});
