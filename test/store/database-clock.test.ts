/**
 * A verify's deadline is set on the service's clock and checked by the statement on the
 * database's. The service converts it with the offset it measures, so a skewed host clock
 * neither refuses every verify (service behind) nor lets a statement commit after its 503
 * (service ahead).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { DatabaseClockOffset } from '../../src/store/verify-batch.js';
import { setupTenant, startTestService, storeTwoLeaves, verifyInvocation, type TestService } from '../support/service.js';

const SKEW_MS = 6_000;
let svc: TestService;

beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());
afterEach(() => {
  vi.useRealTimers();
});

/** This process's Date runs `ms` from the database's (timers stay real). */
function skewDate(ms: number): void {
  vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + ms });
}

describe('the database clock offset', () => {
  it('is measured from the database: a process clock 6 s behind reads about +6 s, one ahead about -6 s', async () => {
    for (const skew of [-SKEW_MS, SKEW_MS]) {
      skewDate(skew);
      const clock = new DatabaseClockOffset(svc.store.query);
      await clock.fresh();
      expect(Math.abs(clock.offsetMs + skew), `skew ${skew} ms`).toBeLessThan(500);
      vi.useRealTimers();
    }
  });

  it('a failed first reading is tried again a second later, not left at no offset for a minute; a good one is kept', async () => {
    let calls = 0;
    const query = async () => {
      calls++;
      if (calls === 1) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
      return [{ ms: Date.now() + SKEW_MS }];
    };
    const clock = new DatabaseClockOffset(query);
    await clock.fresh();
    expect(Math.abs(clock.offsetMs)).toBeLessThan(5); // none read: the clocks taken as in step
    await clock.fresh(); // within the retry pause: no new reading
    expect(calls).toBe(1);
    await new Promise((r) => setTimeout(r, DatabaseClockOffset.RETRY_MS + 50));
    await clock.fresh();
    expect(calls).toBe(2);
    expect(Math.abs(clock.offsetMs - SKEW_MS)).toBeLessThan(100);
    await new Promise((r) => setTimeout(r, DatabaseClockOffset.RETRY_MS + 50));
    await clock.fresh(); // a good reading stands for a minute
    expect(calls).toBe(2);
  });

  it('errs early, never late: a reading the database took at the end of a slow round trip gives no larger offset', async () => {
    // The database 10 s ahead, reading its clock only after 60 ms in a queue. A midpoint would put
    // it 30 ms further ahead, and every deadline 30 ms late.
    const query = async () => {
      await new Promise((r) => setTimeout(r, 60));
      return [{ ms: Date.now() + 10_000 }];
    };
    const clock = new DatabaseClockOffset(query, 60_000);
    await clock.fresh();
    expect(clock.offsetMs).toBeLessThanOrEqual(10_000 + 5);
    expect(clock.offsetMs).toBeGreaterThan(10_000 - 1_000); // the reading was taken
  });

  it('follows a step of the host clock after the reading (NTP), and reads again at once to learn which step it was', async () => {
    let databaseAhead = 0;
    let calls = 0;
    const clock = new DatabaseClockOffset(async () => {
      calls++;
      return [{ ms: Date.now() + databaseAhead }];
    });
    await clock.fresh();
    expect(Math.abs(clock.offsetMs)).toBeLessThan(50);
    expect(clock.fresh()).toBeUndefined(); // a reading stands: no batch waits
    // The host clock steps 6 s forward; the database's did not (an NTP correction on this host).
    skewDate(SKEW_MS);
    databaseAhead = -SKEW_MS;
    expect(Math.abs(clock.offsetMs + SKEW_MS)).toBeLessThan(50);
    const reading = clock.fresh();
    expect(reading).toBeInstanceOf(Promise); // the step is read again, and batches wait for it
    await reading;
    expect(calls).toBe(2);
    expect(Math.abs(clock.offsetMs + SKEW_MS)).toBeLessThan(50);
    expect(clock.fresh()).toBeUndefined();
  });

  it('after a suspend (the host clock jumps, the monotonic one does not), reads again before the next batch', async () => {
    // The database's clock jumped as the host's did: the offset is still 0, though the monotonic
    // clock says 30 s were not there. Without the new reading every deadline was 30 s early: 503s.
    const clock = new DatabaseClockOffset(async () => [{ ms: Date.now() }]);
    await clock.fresh();
    skewDate(30_000);
    expect(clock.offsetMs).toBeLessThan(-29_000);
    await clock.fresh();
    expect(Math.abs(clock.offsetMs)).toBeLessThan(50);
  });

  it('a service clock 6 s behind the database still verifies (the deadline is sent on the database clock)', async () => {
    const tenant = await setupTenant(svc, 'clock skew');
    const [A, B, C] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
    const { root, leafA } = await storeTwoLeaves(svc, tenant, { max_calls: 10 }, A, B, C);
    skewDate(-SKEW_MS);
    const { res: r } = await verifyInvocation(svc, tenant.keys.verify, [root, leafA], B);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  });
});
