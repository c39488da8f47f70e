/**
 * A body refused for the body budget (503 SERVICE_BUSY) leaves a trace an operator can read: its
 * request line carries the code (as every error answer's does), so it is told from a storage 503;
 * the first refusal in each second is logged at warn with the budget's state and the rest are
 * summed in one line; and /metrics counts the refusals and shows the bytes held, by caller (keyed or
 * keyless). On a server (startServer) over raw sockets, with a small budget.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { bodyBudget } from '../../src/service/body.js';
import { createLogger } from '../../src/service/log.js';
import { metrics } from '../../src/service/metrics.js';
import { startTestService, type TestService } from '../support/service.js';
import { startBudgetServer } from '../support/body-budget.js';

const MAX_BODY = 4096;
const BUDGET = 8192;
let svc: TestService;
let server: RunningServer;
const lines: Record<string, unknown>[] = [];
const open: Socket[] = [];

beforeAll(async () => {
  svc = await startTestService();
  server = await startBudgetServer(
    svc,
    { maxBody: MAX_BODY, budget: BUDGET },
    createLogger('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>)),
  );
});
afterAll(async () => {
  for (const s of open) s.destroy();
  await server?.close();
  await svc?.close();
});

/** Sends `raw` on a new connection, kept open; resolves with the answer's status and request id once it is whole. */
function send(raw: string): Promise<{ status: number; requestId: string | undefined }> {
  const socket = connect(server.port, '127.0.0.1');
  open.push(socket);
  socket.on('error', () => {});
  socket.write(raw);
  let text = '';
  return new Promise((resolve) => {
    socket.on('data', (b: Buffer) => {
      text += b.toString('utf8');
      const end = text.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(text)?.[1];
      if (end >= 0 && length !== undefined && text.length >= end + 4 + Number(length))
        resolve({ status: Number(text.split(' ')[1]), requestId: /^x-request-id: (\S+)/im.exec(text)?.[1] });
    });
  });
}

const submit = (sent: string) =>
  `POST /v1/delegations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${MAX_BODY}\r\n\r\n${sent}`;

/** The value of a sample of /metrics, 0 when it is not there. */
async function sample(series: string): Promise<number> {
  const text = await metrics.render();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

describe('a body refused for the body budget', () => {
  it('is on its request line as SERVICE_BUSY, logged at warn at most once a second with a summary of the rest, and counted by caller', async () => {
    const refusals = 'baton_body_budget_refusals_total{caller="keyless"}';
    const before = await sample(refusals);
    // A keyless body of 4,000 bytes sent and stalled: 4,000 of the keyless 4,096 are held.
    void send(submit(`{"receipt":"${'x'.repeat(3988)}`));
    const until = Date.now() + 5_000;
    while (bodyBudget.heldKeyless !== 4000 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    expect(await sample('baton_body_budget_held_bytes{caller="keyless"}')).toBe(4000);
    expect(await sample('baton_body_budget_held_bytes{caller="keyed"}')).toBe(0);
    expect(await sample('baton_body_budget_limit_bytes{caller="keyless"}')).toBe(4096);
    expect(await sample('baton_body_budget_limit_bytes{caller="keyed"}')).toBe(BUDGET);

    // Four more keyless bodies, refused as their bytes come.
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await send(submit(`{"receipt":"${'y'.repeat(200)}`)));
    for (const a of answers) expect(a.status).toBe(503);
    expect((await sample(refusals)) - before).toBe(4);

    for (const a of answers) {
      expect(lines.find((l) => l['msg'] === 'request' && l['request_id'] === a.requestId)).toMatchObject({
        status: 503,
        code: 'SERVICE_BUSY',
        path: '/v1/delegations',
      });
    }
    const warned = () => lines.filter((l) => l['level'] === 'warn' && String(l['msg']).startsWith('request body budget full'));
    expect(warned()).toHaveLength(1);
    expect(warned()[0]).toMatchObject({
      request_id: answers[0]!.requestId,
      caller: 'keyless',
      held_bytes: 4000,
      keyless_held_bytes: 4000,
      limit_bytes: BUDGET,
      keyless_limit_bytes: 4096,
    });
    // The three others, in one line at the end of the second.
    const summaryBy = Date.now() + 3_000;
    while (warned().length < 2 && Date.now() < summaryBy) await new Promise((r) => setTimeout(r, 50));
    expect(warned()[1]).toMatchObject({
      requests: 3,
      callers: { keyed: 0, keyless: 3 },
      request_ids: answers.slice(1).map((a) => a.requestId),
    });
  });

  it('leaves the code on the request line of every error answer, and none on a success', async () => {
    const missing = await send('GET /v1/nowhere HTTP/1.1\r\nHost: x\r\n\r\n');
    const unauthorized = await send('GET /v1/delegations/x HTTP/1.1\r\nHost: x\r\n\r\n');
    const healthy = await send('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    const lineOf = (id: string | undefined) => lines.find((l) => l['msg'] === 'request' && l['request_id'] === id);
    expect(lineOf(missing.requestId)).toMatchObject({ status: 404, code: 'NOT_FOUND' });
    expect(lineOf(unauthorized.requestId)).toMatchObject({ status: 401, code: 'UNAUTHORIZED' });
    expect(lineOf(healthy.requestId)).toMatchObject({ status: 200 });
    expect(lineOf(healthy.requestId)).not.toHaveProperty('code');
  });
});
