/**
 * A revocation racing a submission under the revoked DR, when that DR is itself being stored by
 * another request: the submission finds it stored (its insert conflicts), so it never locked it with
 * the chain it locked first. It locks and reads it then, so the revocation waits for the record
 * below it and counts it (or the submission is refused): never a record accepted after a revocation
 * that answered without it.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { and, count, eq, sql } from 'drizzle-orm';
import { rows } from '../../src/store/rows.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, createSubDelegation } from '../../src/sdk/records.js';
import { decodeDelegation } from '../../src/protocol/chain.js';
import { findDelegation, insertDelegation } from '../../src/store/delegations.js';
import { delegations, serviceReceipts } from '../../src/store/schema/index.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { T0 } from '../support/fixtures.js';

let svc: TestService;
let tenant: TestTenant;
const policy = { allowed_tools: ['web_search'], max_cost_usd: 10 };
beforeAll(async () => {
  svc = await startTestService({ pool: 10 });
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

/** Sessions of this database waiting for a lock: the requests this test holds up. */
async function waitingSessions(): Promise<number> {
  const [w] = await rows<{ n: number }>(
    svc.store.db,
    sql`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
  );
  return w!.n;
}
async function untilWaiting(n: number): Promise<void> {
  for (let i = 0; i < 1000 && (await waitingSessions()) < n; i++) await new Promise((ok) => setTimeout(ok, 10));
  expect(await waitingSessions()).toBeGreaterThanOrEqual(n);
}
/** A transaction held open until release() is called, then rolled back or committed. */
function heldTransaction(
  work: (tx: Parameters<Parameters<TestService['store']['db']['transaction']>[0]>[0]) => Promise<void>,
  commit: boolean,
) {
  let release!: () => void;
  const released = new Promise<void>((ok) => (release = ok));
  let ready!: () => void;
  const started = new Promise<void>((ok) => (ready = ok));
  const done = svc.store.db
    .transaction(async (tx) => {
      await work(tx);
      ready();
      await released;
      if (!commit) throw new Error('rolled back on purpose');
    })
    .catch((e: unknown) => {
      if (commit) throw e;
    });
  return { started, release, done };
}

it('a record whose parent another request stores meanwhile: the revocation of that parent waits for it and counts it', async () => {
  const [A, B, X, Y] = [generateKeyPair(), generateKeyPair(), generateKeyPair(), generateKeyPair()];
  const r = createRootDelegation({ issuer: tenant.root, audience: A.did, policy, iat: T0, nbf: T0 - 100, exp: T0 + 3600 });
  const mid = createSubDelegation({ parent: r, issuer: A, audience: B.did, policy, iat: T0 });
  const P = createSubDelegation({ parent: mid, issuer: B, audience: X.did, policy, iat: T0 });
  const C = createSubDelegation({ parent: P, issuer: X, audience: Y.did, policy, iat: T0 });
  expect((await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: [r.jws, mid.jws] } })).status).toBe(201);
  const midRow = (await findDelegation(svc.store.db, tenant.id, mid.hash))!;
  const c = decodeDelegation(C.jws, 0);

  // Holds the submission at its insert of C, after it has met P stored: a row taking C's (iss, jti), uncommitted.
  const stall = heldTransaction(async (tx) => {
    await tx.execute(sql`insert into delegations (tenant_id, hash, jws, jti, iss, sub, aud, cmd, policy, nbf, exp, iat, parent_hash, root_hash, depth, ancestors)
      values (${tenant.id}, ${'sha256:' + 'ab'.repeat(32)}, 'x', ${c.payload.jti}, ${c.payload.iss}, ${c.payload.sub}, ${c.payload.aud}, ${c.payload.cmd}, '{}'::jsonb,
        ${midRow.nbf}, ${midRow.exp}, ${midRow.iat}, ${mid.hash}, ${r.hash}, 2, array[${r.hash}, ${mid.hash}]::text[])`);
  }, false);
  await stall.started;
  // Another request storing P, not committed yet when the submission of [P, C] locks its chain.
  const other = heldTransaction(async (tx) => {
    await insertDelegation(tx, tenant.id, decodeDelegation(P.jws, 0), midRow);
  }, true);
  await other.started;

  const submission = svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: [P.jws, C.jws] } });
  await untilWaiting(1); // on the other request's P
  other.release();
  await other.done;
  await untilWaiting(1); // now on the stall, at C's insert, with P met stored
  let revokeAnswered = false;
  const revoke = svc.call('POST', `/v1/delegations/${P.hash}/revoke`, { key: tenant.keys.issue, json: { confirm: true, reason: 'race' } });
  void revoke.then(() => (revokeAnswered = true));
  // Until the revocation waits for the submission (it met P locked), or has answered (it came first).
  for (let i = 0; i < 1000 && !revokeAnswered && (await waitingSessions()) < 2; i++) await new Promise((ok) => setTimeout(ok, 10));
  stall.release();
  await stall.done;

  const submitted = await submission;
  const revoked = await revoke;
  expect(revoked.status, JSON.stringify(revoked.body)).toBe(200);
  const [accepted] = await svc.store.db
    .select({ n: count() })
    .from(serviceReceipts)
    .where(and(eq(serviceReceipts.kind, 'delegation.accepted'), eq(serviceReceipts.subject, C.hash)));
  const [stored] = await svc.store.db.select({ n: count() }).from(delegations).where(eq(delegations.hash, C.hash));
  // Either order is right, never both halves of the wrong one (C accepted, the revocation answered without it).
  if (submitted.status === 201) {
    expect(revoked.body.descendants, 'the revocation counts the record accepted under it').toBe(1);
    expect([accepted!.n, stored!.n]).toEqual([1, 1]);
  } else {
    expect(submitted.status, JSON.stringify(submitted.body)).toBe(422);
    expect(submitted.body.error.code).toBe('RECEIPT_REVOKED');
    expect(revoked.body.descendants).toBe(0);
    expect([accepted!.n, stored!.n]).toEqual([0, 0]);
  }
});
