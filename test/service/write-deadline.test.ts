/**
 * A write that waits past BATON_WRITE_DEADLINE_MS is answered 503, and its work, which goes on
 * when the database answers again, must not commit after that answer: the 503 says the change was
 * not applied, so a client that sends it again must not end up with it twice (two tenants, a second
 * actual refused as a conflict) or with a change it was told failed (a revocation).
 *
 * The database is made to hang for one statement by a table lock held from another connection
 * (EXCLUSIVE: reads go on, writes wait), released after the 503. Real PostgreSQL: the rollback is
 * PostgreSQL's. test/reliability/hang.test.ts does the same with every PostgreSQL process paused.
 */
import { and, eq, isNull } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Policy } from '../../src/protocol/policy.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { actuals, apiKeys, custodialKeys, delegations, tenants, toolCatalogs, trustedRoots } from '../../src/store/schema/index.js';
import { tool } from '../support/tools.js';
import { buildChain, type TestChain } from '../support/fixtures.js';
import { setupTenant, startTestService, type CallResult, type TestService, type TestTenant } from '../support/service.js';

const WRITE_DEADLINE_MS = 600;

let svc: TestService;
let tenant: TestTenant;
/** A second connection of the test's own: holds the locks, and watches the service's connections. */
let side: postgres.Sql;

beforeAll(async () => {
  svc = await startTestService({ env: { BATON_VERIFY_DEADLINE_MS: '300', BATON_WRITE_DEADLINE_MS: String(WRITE_DEADLINE_MS) } });
  tenant = await setupTenant(svc, 'write-deadline');
  side = postgres(svc.url, { max: 2, onnotice: () => {} });
});
afterAll(async () => {
  await side?.end({ timeout: 5 });
  await svc?.close();
});

/**
 * Runs `request` while `table` is locked against writes, releases the lock once it is answered,
 * and waits until the service's connections have finished what the lock held up (the work goes on
 * after the answer), so that what is stored afterwards is final.
 */
async function answeredWhileLocked(table: string, request: () => Promise<CallResult>): Promise<CallResult> {
  const holder = await side.reserve();
  let reply: CallResult;
  try {
    await holder`begin`;
    await holder.unsafe(`lock table "${table}" in exclusive mode`);
    reply = await request();
  } finally {
    await holder`commit`;
    holder.release();
  }
  await serviceConnectionsIdle();
  return reply;
}

async function serviceConnectionsIdle(): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const [row] = await side<{ busy: number }[]>`
      select count(*)::int as busy from pg_stat_activity
       where datname = current_database() and pid <> pg_backend_pid() and state is not null and state <> 'idle'`;
    if (row!.busy === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error('the service still had work in the database 5 s after the lock was released');
}

/** A one-DR chain under the tenant's root, stored. */
async function storedChain(policy: Policy): Promise<TestChain> {
  const chain = buildChain([policy], { keys: [tenant.root, generateKeyPair()] });
  expect((await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipt: chain.drs[0]!.jws } })).status).toBe(201);
  return chain;
}

function expectNotApplied(reply: CallResult): void {
  expect(reply.status, JSON.stringify(reply.body)).toBe(503);
  expect(reply.body.error.code).toBe('STORAGE_UNAVAILABLE');
  expect(reply.body.error.message).toContain(`within ${WRITE_DEADLINE_MS} ms`);
  expect(reply.body.error.message).toContain('The change was not applied');
  expect(reply.body.error.suggestion).toMatch(/^Send it again/);
}

describe('a write answered 503 at its deadline is not committed when the database answers again', () => {
  it('creating a tenant: sent again, there is one tenant of that name, not two', async () => {
    const name = `late tenant ${Date.now()}`;
    const create = () => svc.call('POST', '/v1/admin/tenants', { key: svc.adminKey, json: { name } });
    expectNotApplied(await answeredWhileLocked('tenants', create));
    expect(await svc.store.db.$count(tenants, eq(tenants.name, name))).toBe(0);

    expect((await create()).status).toBe(201);
    expect(await svc.store.db.$count(tenants, eq(tenants.name, name))).toBe(1);
  });

  it('revoking a delegation: it stays active, and revoking it again revokes it (with one service receipt)', async () => {
    const dr = (await storedChain({})).drs[0]!;
    const revoke = () =>
      svc.call('POST', `/v1/delegations/${dr.hash}/revoke`, { key: tenant.keys.issue, json: { confirm: true, reason: 'deadline test' } });

    expectNotApplied(await answeredWhileLocked('delegations', revoke));
    expect((await svc.call('GET', `/v1/delegations/${dr.hash}`, { key: tenant.keys.audit })).body.status).toBe('active');

    const again = await revoke();
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body.already_revoked).toBe(false);
    expect(again.body.service_receipt).not.toBeNull();
  });

  it('reporting an actual: nothing is recorded, and the same report sent again is recorded (201, not 409)', async () => {
    const chain = await storedChain({ allowed_tools: ['web_search'], max_cost_usd: 10 });
    const jti = `inv:write-deadline-${Date.now()}`;
    const { bundle } = chain.invoke({ tool: 'web_search', estimated_cost_usd: 1, pii_access: false, write_access: false }, { jti });
    expect((await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle })).status).toBe(200);
    const report = () =>
      svc.call('POST', `/v1/invocations/${jti}/actuals`, { key: tenant.keys.report, json: { source: 'api-usage', cost_usd: 0.25 } });

    expectNotApplied(await answeredWhileLocked('actuals', report));
    expect(await svc.store.db.$count(actuals, eq(actuals.jti, jti))).toBe(0);

    const again = await report();
    expect(again.status, JSON.stringify(again.body)).toBe(201);
  });

  it('a request that committed part of its change before the deadline says it may be applied, and the rest is not', async () => {
    // Custodial issuance first creates the tenant's custodial root key (its own commit), then stores the DR.
    const fresh = await setupTenant(svc, 'write-deadline custodial');
    const holder = generateKeyPair();
    const issue = () =>
      svc.call('POST', '/v1/delegations/issue', {
        key: fresh.keys.issue,
        json: { audience: holder.did, policy: { allowed_tools: ['web_search'] }, jti: 'dr:write-deadline-custodial' },
      });
    const reply = await answeredWhileLocked('delegations', issue);
    expect(reply.status, JSON.stringify(reply.body)).toBe(503);
    expect(reply.body.error.message).toContain('may be applied in part or whole');
    expect(reply.body.error.suggestion).toMatch(/^Read it back/);
    expect(await svc.store.db.$count(custodialKeys, eq(custodialKeys.tenantId, fresh.id))).toBe(1);
    expect(await svc.store.db.$count(delegations, eq(delegations.tenantId, fresh.id))).toBe(0);

    const again = await issue();
    expect(again.status, JSON.stringify(again.body)).toBe(201);
    expect(await svc.store.db.$count(delegations, eq(delegations.tenantId, fresh.id))).toBe(1);
  });

  it("a verify held up by a lock gets the verify's own deadline answer, and is not counted", async () => {
    const chain = await storedChain({ max_calls: 5 });
    const dr = chain.drs[0]!;
    const { bundle } = chain.invoke(
      { tool: 'web_search', pii_access: false, write_access: false },
      { jti: `inv:locked-verify-${Date.now()}` },
    );
    // The statement's lock wait ends before the request's deadline (commitMarginMs): the answer is the deadline's all the same.
    const reply = await answeredWhileLocked('delegations', () => svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle }));
    expect(reply.status, JSON.stringify(reply.body)).toBe(503);
    expect(reply.body.error.code).toBe('STORAGE_UNAVAILABLE');
    expect(reply.body.error.message).toMatch(/^Baton had no decision from the database for this verify within the 300 ms deadline/);
    expect(reply.body.error.message).toContain('retry: true');
    expect((await svc.call('GET', `/v1/delegations/${dr.hash}`, { key: tenant.keys.audit })).body.usage.calls_used).toBe(0);
  });

  // The admin writes, each against the table it writes: refused at the deadline, nothing stored, and accepted when sent again.
  const admin = (method: string, path: string, json?: unknown) => () =>
    svc.call(method, path, { key: svc.adminKey, ...(json === undefined ? {} : { json }) });
  const keyOf = async (scopes: string[]) =>
    (await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, { key: svc.adminKey, json: { scopes } })).body.id as string;
  const liveKeys = () => svc.store.db.$count(apiKeys, and(eq(apiKeys.tenantId, tenant.id), isNull(apiKeys.revokedAt)));
  it.each([
    {
      route: 'trusting a root',
      table: 'trusted_roots',
      send: async () => admin('POST', `/v1/admin/tenants/${tenant.id}/roots`, { did: generateKeyPair().did }),
      rows: () => svc.store.db.$count(trustedRoots, eq(trustedRoots.tenantId, tenant.id)),
      again: 201,
      change: 1,
    },
    {
      route: 'removing a trusted root',
      table: 'trusted_roots',
      send: async () => {
        const did = generateKeyPair().did;
        expect((await admin('POST', `/v1/admin/tenants/${tenant.id}/roots`, { did })()).status).toBe(201);
        return admin('DELETE', `/v1/admin/tenants/${tenant.id}/roots/${encodeURIComponent(did)}`);
      },
      rows: () => svc.store.db.$count(trustedRoots, eq(trustedRoots.tenantId, tenant.id)),
      again: 204,
      change: -1,
    },
    {
      route: 'creating an API key',
      table: 'api_keys',
      send: async () => admin('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, { scopes: ['audit'] }),
      rows: liveKeys,
      again: 201,
      change: 1,
    },
    {
      route: 'revoking an API key',
      table: 'api_keys',
      send: async () => admin('DELETE', `/v1/admin/api-keys/${await keyOf(['audit'])}`),
      rows: liveKeys,
      again: 204,
      change: -1,
    },
    {
      route: 'rotating an API key',
      table: 'api_keys',
      send: async () => admin('POST', `/v1/admin/api-keys/${await keyOf(['audit'])}/rotate`, { grace_seconds: 600 }),
      rows: liveKeys,
      again: 201,
      change: 1,
    },
    {
      route: 'publishing a tool catalog',
      table: 'tool_catalogs',
      send: async () =>
        admin('POST', `/v1/admin/tenants/${tenant.id}/tools`, { base_version: 0, strict: false, tools: [tool('web_search')] }),
      rows: () => svc.store.db.$count(toolCatalogs, eq(toolCatalogs.tenantId, tenant.id)),
      again: 201,
      change: 1,
    },
  ])('$route', async ({ table, send, rows, again, change }) => {
    const request = await send();
    const before = await rows();
    expectNotApplied(await answeredWhileLocked(table, request));
    expect(await rows()).toBe(before);
    const resent = await request();
    expect(resent.status, JSON.stringify(resent.body)).toBe(again);
    expect(await rows()).toBe(before + change);
  });
});
