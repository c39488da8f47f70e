/**
 * Keyless connections cannot make keyed requests answer 503 SERVICE_BUSY (src/service/body.ts): the
 * budget of body bytes held while they arrive counts bytes as they come, never a declared
 * Content-Length, and requests without a valid key hold at most half of it. An outside probe filled
 * the default budget in 186 ms with 256 keyless connections that each sent only the head of
 * `POST /v1/delegations` declaring 262,144 bytes, after which a keyed verify got 503 for as long as
 * they stayed. Reproduced here over real sockets on a server (startServer) with a small budget.
 */
import type { Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { bodyBudget } from '../../src/service/body.js';
import { metrics } from '../../src/service/metrics.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { sendAndStall, startBudgetServer, type StalledAnswer } from '../support/body-budget.js';

const MAX_BODY = 4096;
/** Half of it, 8,192 bytes, is what keyless bodies may hold together. */
const BUDGET = 16_384;
let svc: TestService;
let tenant: TestTenant;
let server: RunningServer;
const open: Socket[] = [];

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  server = await startBudgetServer(svc, { maxBody: MAX_BODY, budget: BUDGET });
});
afterAll(async () => {
  for (const s of open) s.destroy();
  await server?.close();
  await svc?.close();
});

type Answer = Pick<StalledAnswer, 'status' | 'code'>;

const send = (head: string, body = ''): Promise<Answer> =>
  sendAndStall(server.port, open, head, body).then(({ status, code }) => ({ status, code }));

const keylessSubmit = (length: number) =>
  `POST /v1/delegations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n`;

/** A keyed verify whose body (3,000 bytes) is read whole and refused for its member (400), when it is read at all. */
async function keyedVerify(): Promise<Answer> {
  const body = JSON.stringify({ pad: 'x'.repeat(2990) });
  return send(
    `POST /v1/verify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${tenant.keys.verify}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`,
    body,
  );
}

/** baton_http_requests_in_flight of this process. */
async function inFlight(): Promise<number> {
  return Number(/^baton_http_requests_in_flight (\S+)$/m.exec(await metrics.render())?.[1]);
}

/** The first of `answers`, or 'waiting' when none comes within `ms`. */
function within(ms: number, ...answers: Promise<Answer>[]): Promise<Answer | 'waiting'> {
  return Promise.race([...answers, new Promise<'waiting'>((r) => setTimeout(() => r('waiting'), ms))]);
}

/** Resolves once `condition` holds, failing after 5 s. */
async function eventually(what: string, condition: () => boolean | Promise<boolean>): Promise<void> {
  const until = Date.now() + 5_000;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error(`not within 5 s: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('keyless connections and the body budget', () => {
  it('heads declaring a length, with no body bytes, hold nothing: a keyed verify is read and answered', async () => {
    const idle = await inFlight();
    // Eight heads declaring 4,096 bytes each, twice the budget, and not a byte of body.
    let answered = 0;
    const stalled = Array.from({ length: 8 }, () => send(keylessSubmit(MAX_BODY)).finally(() => answered++));
    await eventually('the eight heads are served or answered', async () => (await inFlight()) + answered >= idle + 8);
    await new Promise((r) => setTimeout(r, 100)); // their routes are waiting for body bytes
    // Held by their declared lengths, the eight filled the budget and the verify was refused 503.
    expect(bodyBudget.held).toBe(0);
    expect(await keyedVerify()).toEqual({ status: 400, code: 'INVALID_REQUEST' });
    // They are still waiting: nothing answered them.
    expect(await within(50, ...stalled)).toBe('waiting');
    for (const s of open.splice(0)) s.destroy();
    await eventually('the budget is empty', () => bodyBudget.held === 0);
  });

  it('keyless bodies really sent and stalled fill half of it at most: other keyless bodies wait (503), keyed ones are read', async () => {
    await eventually('the budget is empty', () => bodyBudget.held === 0);
    const part = `{"receipt":"${'x'.repeat(3988)}`; // 4,000 of the 4,096 declared bytes, then a stall
    const first = [send(keylessSubmit(MAX_BODY), part), send(keylessSubmit(MAX_BODY), part)];
    await eventually('two keyless bodies hold 8,000 bytes', () => bodyBudget.held === 8000);
    // Two more would take the keyless half past 8,192 bytes: refused, though the whole budget has room.
    expect(await within(2_000, send(keylessSubmit(MAX_BODY), part))).toEqual({ status: 503, code: 'SERVICE_BUSY' });
    expect(await within(2_000, send(keylessSubmit(MAX_BODY), part))).toEqual({ status: 503, code: 'SERVICE_BUSY' });
    expect([bodyBudget.held, bodyBudget.heldKeyless]).toEqual([8000, 8000]);
    // A keyed request's body is held in the half the keyless ones cannot take.
    expect(await keyedVerify()).toEqual({ status: 400, code: 'INVALID_REQUEST' });
    expect(await keyedVerify()).toEqual({ status: 400, code: 'INVALID_REQUEST' });
    expect(await within(50, ...first)).toBe('waiting');
    for (const s of open.splice(0)) s.destroy();
    await eventually('the budget is empty', () => bodyBudget.held === 0 && bodyBudget.heldKeyless === 0);
  });

  it('a request with an invalid key is refused 401 before a byte of its body is read, so it holds nothing of either half', async () => {
    await eventually('the budget is empty', () => bodyBudget.held === 0);
    const part = `{"pad":"${'x'.repeat(3992)}`; // 4,000 of 4,096 bytes, then a stall
    for (const path of ['/v1/verify', '/v1/delegations', `/v1/delegations/sha256:${'0'.repeat(64)}/revoke`]) {
      const head = `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer bt_not-a-key\r\nContent-Type: application/json\r\nContent-Length: ${MAX_BODY}\r\n`;
      expect(await within(2_000, send(head, part)), path).toEqual({ status: 401, code: 'UNAUTHORIZED' });
    }
    expect(bodyBudget.held).toBe(0);
    for (const s of open.splice(0)) s.destroy();
  });
});
