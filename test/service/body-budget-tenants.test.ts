/**
 * One tenant cannot make another tenant's requests answer 503 SERVICE_BUSY (src/service/body.ts): the
 * bodies of one keyed caller (a tenant, every admin key together counting as one) hold at most an
 * eighth of the budget of body bytes held while they arrive, and never less than one body of
 * BATON_MAX_BODY_BYTES. A review found keyed requests could use the whole budget: with a budget of
 * 16,384 bytes, four verifies with tenant A's key each sent 4,000 of 4,096 bytes and stalled, and
 * tenant B's verify got 503 for as long as they stayed. Reproduced here over real sockets on a
 * server (startServer).
 */
import type { Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { bodyBudget } from '../../src/service/body.js';
import { createLogger } from '../../src/service/log.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { sendAndStall, startBudgetServer, type StalledAnswer } from '../support/body-budget.js';

const MAX_BODY = 4096;
/** An eighth of it is 2,048 bytes, below one body of the largest size: each caller may hold 4,096. */
const BUDGET = 16_384;
let svc: TestService;
let tenantA: TestTenant;
let tenantB: TestTenant;
let server: RunningServer;
const lines: Record<string, unknown>[] = [];
const open: Socket[] = [];

beforeAll(async () => {
  svc = await startTestService();
  tenantA = await setupTenant(svc, 'tenant-a');
  tenantB = await setupTenant(svc, 'tenant-b');
  server = await startBudgetServer(
    svc,
    { maxBody: MAX_BODY, budget: BUDGET },
    createLogger('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>)),
  );
});
afterEach(async () => {
  for (const s of open.splice(0)) s.destroy();
  await eventually('the budget is empty', () => bodyBudget.held === 0);
});
afterAll(async () => {
  await server?.close();
  await svc?.close();
});

type Answer = StalledAnswer;

const send = (head: string, body = ''): Promise<Answer> => sendAndStall(server.port, open, head, body);

const withKey = (path: string, key: string | undefined, length: number) =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\n${key === undefined ? '' : `Authorization: Bearer ${key}\r\n`}Content-Type: application/json\r\nContent-Length: ${length}\r\n`;

/** 4,000 of the 4,096 bytes a head declares: then the sender stalls. */
const STALLED_PART = `{"pad":"${'x'.repeat(3992)}`;

/** A verify whose body (3,000 bytes) is read whole and refused for its member (400), when it is read at all. */
function verify(key: string): Promise<Answer> {
  const body = JSON.stringify({ pad: 'x'.repeat(2990) });
  return send(withKey('/v1/verify', key, Buffer.byteLength(body)), body);
}

/** The first of `answers`, or 'waiting' when none comes within `ms`. */
function within(ms: number, ...answers: Promise<Answer>[]): Promise<Answer | 'waiting'> {
  return Promise.race([...answers, new Promise<'waiting'>((r) => setTimeout(() => r('waiting'), ms))]);
}

/** Resolves once `condition` holds, failing after 5 s. */
async function eventually(what: string, condition: () => boolean): Promise<void> {
  const until = Date.now() + 5_000;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`not within 5 s: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("one tenant's bodies and the body budget", () => {
  it("a tenant's stalled verifies hold back only its own: another tenant's verify is read", async () => {
    const stalled = send(withKey('/v1/verify', tenantA.keys.verify, MAX_BODY), STALLED_PART);
    await eventually("tenant A's first body is held", () => bodyBudget.heldBy(tenantA.id) === 4000);
    // Three more of tenant A's would pass its share (4,096 bytes): refused as they arrive, though the budget has room.
    const refused: (Answer | 'waiting')[] = [];
    for (let i = 0; i < 3; i++) refused.push(await within(2_000, send(withKey('/v1/verify', tenantA.keys.verify, MAX_BODY), STALLED_PART)));
    for (const answer of refused) expect(answer).toMatchObject({ status: 503, code: 'SERVICE_BUSY' });
    // The first is logged at warn with its tenant and what that tenant holds, so the operator finds it.
    expect(lines.find((l) => l['level'] === 'warn' && l['request_id'] === (refused[0] as Answer).requestId)).toMatchObject({
      caller: 'keyed',
      tenant_id: tenantA.id,
      tenant_held_bytes: 4000,
      tenant_limit_bytes: MAX_BODY,
    });
    expect([bodyBudget.held, bodyBudget.heldBy(tenantA.id)]).toEqual([4000, 4000]);
    // Tenant B's verify is read and answered (400: its body is no verify request), twice over.
    expect(await verify(tenantB.keys.verify)).toMatchObject({ status: 400, code: 'INVALID_REQUEST' });
    expect(await verify(tenantB.keys.verify)).toMatchObject({ status: 400, code: 'INVALID_REQUEST' });
    expect(await within(50, stalled)).toBe('waiting');
  });

  it('a key of any scope counts for its tenant, the admin key for itself, and a full keyless half does not change that', async () => {
    // Keyless bodies fill their half (8,000 of 8,192 bytes).
    const keyless = [
      send(withKey('/v1/delegations', undefined, MAX_BODY), STALLED_PART),
      send(withKey('/v1/delegations', undefined, MAX_BODY), STALLED_PART),
    ];
    await eventually('the keyless half is full', () => bodyBudget.heldKeyless === 8000);
    // Tenant A fills its share with a submission (its issue key), the admin key its own with a tenant's creation.
    const stalled = [
      send(withKey('/v1/delegations/issue', tenantA.keys.issue, MAX_BODY), STALLED_PART),
      send(withKey('/v1/admin/tenants', svc.adminKey, MAX_BODY), STALLED_PART),
    ];
    await eventually('tenant A and the admin key hold 4,000 bytes each', () => bodyBudget.held === 16_000);
    expect([bodyBudget.heldBy(tenantA.id), bodyBudget.heldBy(null), bodyBudget.heldKeyless]).toEqual([4000, 4000, 8000]);
    // Tenant A's verify key is tenant A: its verify waits for its tenant's other body.
    expect(await within(2_000, send(withKey('/v1/verify', tenantA.keys.verify, MAX_BODY), STALLED_PART))).toMatchObject({
      status: 503,
      code: 'SERVICE_BUSY',
    });
    // 384 bytes are left, short of tenant B's 3,000-byte verify: that is the whole budget, not tenant A.
    expect(await verify(tenantB.keys.verify)).toMatchObject({ status: 503, code: 'SERVICE_BUSY' });
    // The admin key's body ends: tenant B's verify is read.
    open[3]!.destroy();
    await eventually("the admin key's bytes are given back", () => bodyBudget.heldBy(null) === 0);
    expect(await verify(tenantB.keys.verify)).toMatchObject({ status: 400, code: 'INVALID_REQUEST' });
    expect(await within(50, ...keyless, ...stalled.slice(0, 1))).toBe('waiting');
  });

  it("gives each caller's bytes back, leaving no entry for a caller that holds nothing", async () => {
    const stalled = send(withKey('/v1/verify', tenantB.keys.verify, MAX_BODY), STALLED_PART);
    await eventually("tenant B's body is held", () => bodyBudget.heldBy(tenantB.id) === 4000);
    open[0]!.destroy();
    await stalled;
    await eventually('the budget is empty', () => bodyBudget.held === 0);
    expect([bodyBudget.heldBy(tenantA.id), bodyBudget.heldBy(tenantB.id), bodyBudget.heldBy(null)]).toEqual([0, 0, 0]);
    expect(bodyBudget.callers).toBe(0);
  });

  it('is an eighth of the budget, at least one body of the largest size', () => {
    const [limit, maxBodyBytes] = [bodyBudget.limit, bodyBudget.maxBodyBytes];
    try {
      expect(bodyBudget.callerLimit).toBe(MAX_BODY);
      bodyBudget.limit = 64 * 1024 * 1024;
      bodyBudget.maxBodyBytes = 256 * 1024;
      expect(bodyBudget.callerLimit).toBe(8 * 1024 * 1024);
      bodyBudget.limit = 1024 * 1024;
      expect(bodyBudget.callerLimit).toBe(256 * 1024);
    } finally {
      bodyBudget.limit = limit;
      bodyBudget.maxBodyBytes = maxBodyBytes;
    }
  });
});
