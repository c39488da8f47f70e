/**
 * A body refused while it arrives (503 SERVICE_BUSY for the body budget, 413 PAYLOAD_TOO_LARGE past
 * BATON_MAX_BODY_BYTES) closes its connection once answered (src/service/body.ts): the rest of the
 * body is never read, and kept open, the connection held it unread in Node's buffers, uncounted by
 * the budget, until the request timeout. An outside probe: 400 keyless bodies refused 503 left 401
 * connections open and the process 9 to 14 MB larger. On a server (startServer) over raw sockets.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { bodyBudget } from '../../src/service/body.js';
import { startTestService, type TestService } from '../support/service.js';
import { startBudgetServer } from '../support/body-budget.js';

const MAX_BODY = 4096;
/** Half of it, 4,096 bytes, is what keyless bodies may hold together. */
const BUDGET = 8192;
let svc: TestService;
let server: RunningServer;
const open: Socket[] = [];

beforeAll(async () => {
  svc = await startTestService();
  server = await startBudgetServer(svc, { maxBody: MAX_BODY, budget: BUDGET });
});
afterEach(async () => {
  for (const s of open.splice(0)) s.destroy();
  await budgetHolds(0);
});
afterAll(async () => {
  await server?.close();
  await svc?.close();
});

interface Exchange {
  readonly socket: Socket;
  /** The first answer's head and body, once whole. */
  readonly answer: Promise<{ status: number; head: string; code: string | undefined }>;
  /** Resolves when the server ends or closes the connection. */
  readonly ended: Promise<void>;
}

/** Sends `raw` on a new connection and leaves it open: the server alone decides whether it closes. */
function send(raw: string): Exchange {
  const socket = connect(server.port, '127.0.0.1');
  open.push(socket);
  socket.on('error', () => {});
  socket.write(raw);
  let text = '';
  const answer = new Promise<{ status: number; head: string; code: string | undefined }>((resolve) => {
    socket.on('data', (b: Buffer) => {
      text += b.toString('utf8');
      const end = text.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(text)?.[1];
      if (end >= 0 && length !== undefined && text.length >= end + 4 + Number(length))
        resolve({ status: Number(text.split(' ')[1]), head: text.slice(0, end), code: /"code":"([A-Z_]+)"/.exec(text)?.[1] });
    });
  });
  const ended = new Promise<void>((resolve) => {
    socket.once('end', resolve);
    socket.once('close', resolve);
  });
  return { socket, answer, ended };
}

/** Whether `ended` resolves within `ms`. */
async function endsWithin(ms: number, ended: Promise<void>): Promise<boolean> {
  return Promise.race([ended.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);
}

const submit = (framing: string) => `POST /v1/delegations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${framing}\r\n`;
const chunk = (piece: string) => `${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`;

async function budgetHolds(bytes: number): Promise<void> {
  const until = Date.now() + 5_000;
  while (bodyBudget.held !== bytes && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
  expect(bodyBudget.held).toBe(bytes);
}

describe('a body refused while it arrives', () => {
  it('503 SERVICE_BUSY: answered with Connection: close, and the connection is closed', async () => {
    await budgetHolds(0);
    // 4,000 of the keyless 4,096 bytes held by a stalled body.
    const stalled = send(submit(`Content-Length: ${MAX_BODY}\r\n`) + `{"receipt":"${'x'.repeat(3988)}`);
    await budgetHolds(4000);
    // The next keyless body is refused as its bytes come; the rest of it (declared, never sent) is not read.
    const refused = send(submit(`Content-Length: ${MAX_BODY}\r\n`) + `{"receipt":"${'y'.repeat(1988)}`);
    const answer = await refused.answer;
    expect(answer).toMatchObject({ status: 503, code: 'SERVICE_BUSY' });
    expect(answer.head).toMatch(/\r\nconnection: close(\r\n|$)/i);
    expect(await endsWithin(400, refused.ended)).toBe(true);
    expect(refused.socket.destroyed || refused.socket.readableEnded).toBe(true);
    // The stalled one is still open, waiting for its body.
    expect(await endsWithin(50, stalled.ended)).toBe(false);
    stalled.socket.destroy();
    await budgetHolds(0);
  });

  it('413 PAYLOAD_TOO_LARGE as it arrives: answered with Connection: close, and the connection is closed', async () => {
    await budgetHolds(0);
    // Chunked, so the size is known only as it arrives: 4,100 bytes sent, more promised.
    const over = send(submit('Transfer-Encoding: chunked\r\n') + chunk(`{"a":"${'x'.repeat(4094)}`));
    const answer = await over.answer;
    expect(answer).toMatchObject({ status: 413, code: 'PAYLOAD_TOO_LARGE' });
    expect(answer.head).toMatch(/\r\nconnection: close(\r\n|$)/i);
    expect(await endsWithin(400, over.ended)).toBe(true);
    await budgetHolds(0);
  });

  it('a body read whole and refused on its merits keeps its keep-alive connection', async () => {
    const read = send(submit('Content-Length: 2\r\n') + '{}');
    const answer = await read.answer;
    expect(answer.status).toBe(400);
    expect(answer.head).not.toMatch(/\r\nconnection: close/i);
    expect(await endsWithin(700, read.ended)).toBe(false);
    read.socket.destroy();
  });
});
