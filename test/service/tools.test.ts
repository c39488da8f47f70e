/** Tool catalogs per tenant (versioned, with receipts) and what verify derives from them, on real PostgreSQL. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, count, eq, sql } from 'drizzle-orm';
import { generateKeyPair } from '../../src/sdk/keys.js';
import type { Policy } from '../../src/protocol/policy.js';
import type { ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { approvals, delegations, serviceReceipts, toolCatalogs } from '../../src/store/schema/index.js';
import { buildChain, T0 } from '../support/fixtures.js';
import { createTenantKey, setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { secondNodeApp } from '../support/nodes.js';
import { tool } from '../support/tools.js';

let svc: TestService;
let tenant: TestTenant;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

async function publish(tools: ToolDeclaration[], over: Record<string, unknown> = {}, t: TestTenant = tenant) {
  const current = await svc.call('GET', '/v1/tools', { key: t.keys.verify });
  const base = current.status === 200 ? (current.body.version as number) : 0;
  return svc.call('POST', `/v1/admin/tenants/${t.id}/tools`, {
    key: svc.adminKey,
    json: { base_version: base, strict: true, tools, rules: [], ...over },
  });
}

function chain(policies: Policy[]) {
  const keys = [tenant.root, ...policies.map(() => generateKeyPair())];
  return buildChain(policies, { keys });
}

/** Policies make every call declare these; the catalog decides what the tool needs whatever they say. */
const DECLARED = { estimated_cost_usd: 0.01, pii_access: false, write_access: false };

async function verify(c: ReturnType<typeof chain>, args: Record<string, unknown>) {
  const { bundle } = c.invoke({ ...DECLARED, ...args }, { iat: T0 });
  return svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
}

function receiptData(jws: string): Record<string, unknown> {
  return (JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString('utf8')) as { data: Record<string, unknown> }).data;
}

async function latestReceipt(kind: string) {
  const rows = await svc.store.db
    .select()
    .from(serviceReceipts)
    .where(and(eq(serviceReceipts.tenantId, tenant.id), eq(serviceReceipts.kind, kind as never)))
    .orderBy(serviceReceipts.id);
  return rows[rows.length - 1]!;
}

describe('tool catalog API', () => {
  it('publishes versions with a service receipt each, serves them, refuses a stale base', async () => {
    const v1 = await publish([tool('docs_search')]);
    expect(v1.status).toBe(201);
    expect(v1.body).toMatchObject({ version: 1, strict: true, tools: [{ name: 'docs_search' }] });
    const v2 = await publish([tool('docs_search'), tool('crm_update', { type: 'write', action_type: 'crm:update' })]);
    expect(v2.body.version).toBe(2);
    const r = await latestReceipt('tools.catalog.published');
    expect(r.subject).toBe('tools:v2');
    expect(receiptData(r.jws)).toMatchObject({ version: 2, hash: v2.body.hash });

    const stale = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
      key: svc.adminKey,
      json: { base_version: 1, strict: false, tools: [] },
    });
    expect(stale.status).toBe(409);
    expect(stale.body.error.code).toBe('CONFLICT');
    expect((await svc.call('GET', '/v1/tools/versions/1', { key: tenant.keys.audit })).body.tools).toHaveLength(1);
    expect((await svc.call('GET', '/v1/tools', { key: tenant.keys.issue })).body.version).toBe(2);

    // A version is decimal digits, and no larger than the column holds: 400, never 500.
    for (const version of ['2147483648', '999999999999999', '0', '01', '+1', '%201', '0x10', '1e3', '1.0', 'one']) {
      const r = await svc.call('GET', `/v1/tools/versions/${version}`, { key: tenant.keys.audit });
      expect(r.status, version).toBe(400);
      expect(r.body.error.code).toBe('INVALID_REQUEST');
    }
    expect((await svc.call('GET', '/v1/tools/versions/2147483647', { key: tenant.keys.audit })).status).toBe(404);
  });

  it('bad input is refused with every issue and stores nothing', async () => {
    const [before] = await svc.store.db.select({ n: count() }).from(toolCatalogs);
    const bad = [
      { base_version: 2, strict: false, tools: [tool('a'), tool('A')] }, // look-alike names
      { base_version: 2, strict: false, tools: [{ ...tool('x'), untrusted_content: undefined }] }, // a flag left out
      { base_version: 2, strict: false, tools: [tool('*')] },
      { base_version: 2, strict: 'yes', tools: [] },
      { base_version: 2, strict: false, tools: [], rules: [{ id: 'r', when: {}, decision: 'maybe' }] },
      { base_version: 2, strict: false, tools: [], extra: 1 },
    ];
    for (const json of bad) {
      const r = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, { key: svc.adminKey, json });
      expect(r.status, JSON.stringify(json)).toBe(400);
      expect(r.body.error.code).toMatch(/INVALID_(REQUEST|FIELD)/);
    }
    const dup = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
      key: svc.adminKey,
      body: '{"base_version":2,"strict":false,"strict":true,"tools":[]}',
      headers: { 'content-type': 'application/json' },
    });
    expect(dup.status).toBe(400);
    const [after] = await svc.store.db.select({ n: count() }).from(toolCatalogs);
    expect(after!.n).toBe(before!.n);
  });

  it('only the admin key publishes; tenant keys read their own tenant only', async () => {
    const r = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
      key: tenant.keys.issue,
      json: { base_version: 2, strict: false, tools: [] },
    });
    expect(r.status).toBe(403);
    const nobody = await svc.call('POST', '/v1/admin/tenants/ten_nobody/tools', {
      key: svc.adminKey,
      json: { base_version: 0, strict: false, tools: [] },
    });
    expect(nobody.status).toBe(404);
    expect((await svc.call('GET', '/v1/tools', {})).status).toBe(401);
    expect((await svc.call('GET', '/v1/tools', { key: tenant.keys.report })).status).toBe(403);
  });

  it('the admin key reads back the catalog it publishes: the current version is the next base_version', async () => {
    const mine = await setupTenant(svc, 'admin-reads-tools');
    const path = `/v1/admin/tenants/${mine.id}/tools`;
    const none = await svc.call('GET', path, { key: svc.adminKey });
    expect(none.status).toBe(404);
    expect(none.body.error.message).toMatch(/not published a tool catalog/);
    const v1 = await svc.call('POST', path, { key: svc.adminKey, json: { base_version: 0, strict: true, tools: [tool('docs_search')] } });
    expect(v1.status).toBe(201);
    const read = await svc.call('GET', path, { key: svc.adminKey });
    expect(read.status).toBe(200);
    expect(read.body).toEqual(v1.body);
    expect(read.headers.get('cache-control')).toBe('no-store');
    // The tenant's own key reads the same document on its route.
    expect((await svc.call('GET', '/v1/tools', { key: mine.keys.audit })).body).toEqual(v1.body);

    const nobody = await svc.call('GET', '/v1/admin/tenants/ten_nobody/tools', { key: svc.adminKey });
    expect(nobody.status).toBe(404);
    expect(nobody.body.error.message).not.toMatch(/catalog/);
    expect((await svc.call('GET', path, {})).status).toBe(401);
    expect((await svc.call('GET', path, { key: mine.keys.audit })).status).toBe(403);
    // Another tenant's key learns nothing of this tenant: 404, as on every admin route.
    expect((await svc.call('GET', path, { key: tenant.keys.audit })).status).toBe(404);
  });
});

describe('verify derives requirements from the catalog', () => {
  // Strict tenants unless a test says otherwise: in a non-strict one, undeclared tools count as carrying every risk flag.
  const base = { allowed_tools: ['crm_update', 'hr_lookup', 'mailbox', 'gpu_render', 'flip'], max_cost_usd: 5, max_calls: 100 };

  it('a write tool needs write_access in every DR, whatever the args claim', async () => {
    await publish([tool('crm_update', { type: 'write', action_type: 'crm:update' })]);
    const c = chain([{ ...base, write_access: true }, { ...base }]);
    const r0 = await verify(c, { tool: 'crm_update', write_access: false });
    expect(r0.status).toBe(403);
    expect(r0.body.violations).toEqual([expect.objectContaining({ field: 'policy.write_access', dr_index: 1, dr_hash: c.drs[1]!.hash })]);
    for (const claim of [true, 'no', null]) {
      expect((await verify(c, { tool: 'crm_update', write_access: claim })).status).toBe(403);
    }
    const ok = chain([
      { ...base, write_access: true },
      { ...base, write_access: true },
    ]);
    const r = await verify(ok, { tool: 'crm_update', write_access: false });
    expect(r.status).toBe(200);
    expect(receiptData(r.body.service_receipt.jws)).toMatchObject({ catalog_version: expect.any(Number) });
  });

  it('a private-data or pii-tagged tool needs pii_access', async () => {
    await publish([tool('hr_lookup', { tags: ['pii'] }), tool('mailbox', { private_data_access: true })]);
    const c = chain([{ ...base }]);
    for (const name of ['hr_lookup', 'mailbox']) {
      const r = await verify(c, { tool: name, pii_access: false });
      expect(r.status).toBe(403);
      expect(r.body.violations).toContainEqual(expect.objectContaining({ field: 'policy.pii_access', dr_index: 0 }));
      const denial = await latestReceipt('invocation.denied');
      expect(receiptData(denial.jws)['catalog_version']).toBe(
        (await svc.call('GET', '/v1/tools', { key: tenant.keys.verify })).body.version,
      );
    }
    expect((await verify(chain([{ ...base, pii_access: true }]), { tool: 'hr_lookup' })).status).toBe(200);
  });

  it('the declared cost per invocation is the floor of the estimate that budgets count', async () => {
    await publish([tool('gpu_render', { cost_per_invocation_usd: 0.4 })]);
    const c = chain([{ ...base, max_spend_usd: 1 }]);
    const r = await verify(c, { tool: 'gpu_render', estimated_cost_usd: 0.01 });
    expect(r.status).toBe(200);
    const [row] = await svc.store.db.select().from(delegations).where(eq(delegations.hash, c.drs[0]!.hash));
    expect(row!.spendReservedMicros).toBe(400_000);
    expect((await verify(c, { tool: 'gpu_render', estimated_cost_usd: 0 })).status).toBe(200);
    const third = await verify(c, { tool: 'gpu_render', estimated_cost_usd: 0 });
    expect(third.status).toBe(403);
    expect(third.body.error.code).toBe('BUDGET_EXHAUSTED');
    const capped = await verify(chain([{ ...base, max_cost_usd: 0.1 }]), { tool: 'gpu_render', estimated_cost_usd: 0.05 });
    expect(capped.body.violations).toContainEqual(expect.objectContaining({ field: 'policy.max_cost_usd' }));
  });

  it('strict mode denies undeclared tools and look-alikes with TOOL_UNDECLARED', async () => {
    await publish([tool('docs_search')], { strict: true });
    const c = chain([{ ...base, allowed_tools: ['*'] }]);
    for (const name of ['shell_exec', 'Docs_Search', 'ｄocs_search']) {
      const r = await verify(c, { tool: name });
      expect(r.status).toBe(403);
      expect(r.body.error.code).toBe('TOOL_UNDECLARED');
    }
    expect((await verify(c, { tool: 'docs_search' })).status).toBe(200);
  });

  it('a catalog changed after a node cached it is re-decided on the new version inside the statement', async () => {
    const first = await publish([tool('flip')]);
    const c = chain([{ ...base }]);
    expect((await verify(c, { tool: 'flip' })).status).toBe(200); // caches this version
    // Another node publishes: this node's cache does not know.
    const v = (first.body.version as number) + 1;
    await svc.store.db.insert(toolCatalogs).values({
      tenantId: tenant.id,
      version: v,
      document: {
        strict: false,
        rules: [],
        default_decision: 'allow',
        approvers: [],
        tools: [tool('flip', { type: 'write', action_type: 'x:y' })],
      },
      hash: 'sha256:other-node',
      createdBy: 'elsewhere',
    });
    const r = await verify(c, { tool: 'flip' });
    expect(r.status).toBe(403);
    expect(r.body.violations).toContainEqual(expect.objectContaining({ field: 'policy.write_access' }));
    expect(receiptData((await latestReceipt('invocation.denied')).jws)['catalog_version']).toBe(v);
  });

  it("a tenant's first catalog, published on another node, binds this node's next verify at once", async () => {
    const other = await setupTenant(svc, 'first-catalog');
    const c = buildChain([{ ...base, allowed_tools: ['*'] }], { keys: [other.root, generateKeyPair()] });
    const send = () => {
      const { bundle } = c.invoke({ ...DECLARED, tool: 'flip' }, { iat: T0 });
      return svc.call('POST', '/v1/verify', { key: other.keys.verify, json: bundle });
    };
    expect((await send()).status).toBe(200); // this node now caches "no catalog"
    // Another node publishes the first version, denying the tool: this node's cache does not know.
    await svc.store.db.insert(toolCatalogs).values({
      tenantId: other.id,
      version: 1,
      document: {
        strict: false,
        rules: [],
        default_decision: 'deny',
        approvers: [],
        tools: [tool('flip')],
      },
      hash: 'sha256:other-node-first',
      createdBy: 'elsewhere',
    });
    const r = await send();
    expect(r.status, JSON.stringify(r.body)).toBe(403);
    expect(r.body.violations).toContainEqual(expect.objectContaining({ code: 'RULE_DENIED' }));
    // Nothing of the refused call was counted.
    const [leaf] = await svc.store.db
      .select()
      .from(delegations)
      .where(eq(delegations.hash, c.drs.at(-1)!.hash));
    expect(leaf!.callsUsed).toBe(1);
  });

  it('a retry or replay is answered as such before the gate, also when a catalog published since refuses the call', async () => {
    const t = await setupTenant(svc, 'retry-before-gate');
    expect((await publish([tool('flip')], { strict: false }, t)).status).toBe(201);
    const c = buildChain([{ ...base, allowed_tools: ['flip'] }], { keys: [t.root, generateKeyPair()] });
    const { bundle } = c.invoke({ ...DECLARED, tool: 'flip' }, { iat: T0 });
    const first = await svc.call('POST', '/v1/verify', { key: t.keys.verify, json: bundle });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect((await publish([tool('flip')], { strict: false, default_decision: 'deny' }, t)).status).toBe(201);

    const retry = await svc.call('POST', '/v1/verify', { key: t.keys.verify, json: bundle });
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body.retry).toBe(true);
    expect(retry.body.service_receipt.id).toBe(first.body.service_receipt.id);
    const otherKey = await createTenantKey(svc, t.id, ['verify'], 'another tool server');
    const replay = await svc.call('POST', '/v1/verify', { key: otherKey, json: bundle });
    expect(replay.body.error.code).toBe('REPLAY_DETECTED');
    // A new call is refused by the new version.
    const fresh = await svc.call('POST', '/v1/verify', {
      key: t.keys.verify,
      json: c.invoke({ ...DECLARED, tool: 'flip' }, { iat: T0 }).bundle,
    });
    expect(fresh.body.violations).toContainEqual(expect.objectContaining({ code: 'RULE_DENIED' }));
  });

  it('a chain revoked on another node is refused as revoked by a node that cached it, and asks no human', async () => {
    const t = await setupTenant(svc, 'stale-revoked');
    expect(
      (await publish([tool('flip')], { strict: false, rules: [{ id: 'human', when: {}, decision: 'require_approval' }] }, t)).status,
    ).toBe(201);
    const only = { ...base, allowed_tools: ['flip'] };
    const c = buildChain([only, only], { keys: [t.root, generateKeyPair(), generateKeyPair()] });
    // Each call its own args, so each would open an approval of its own.
    let n = 0;
    const send = () =>
      svc.call('POST', '/v1/verify', { key: t.keys.verify, json: c.invoke({ ...DECLARED, tool: 'flip', n: ++n }, { iat: T0 }).bundle });
    expect((await send()).body.error.code).toBe('APPROVAL_REQUIRED'); // stores the chain
    expect((await send()).body.error.code).toBe('APPROVAL_REQUIRED'); // this node now caches it, live
    const pending = async () => (await svc.store.db.select({ n: count() }).from(approvals).where(eq(approvals.tenantId, t.id)))[0]!.n;
    expect(await pending()).toBe(2);

    const other = await secondNodeApp(svc);
    try {
      const revoked = await other.app.request(`/v1/delegations/${c.drs[0]!.hash}/revoke`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${t.keys.issue}` },
        body: JSON.stringify({ confirm: true, reason: 'compromised root grant' }),
      });
      expect(revoked.status).toBe(200);
    } finally {
      await other.close();
    }
    const r = await send();
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('RECEIPT_REVOKED');
    expect(await pending()).toBe(2);
  });

  it('a tenant without a catalog verifies as before', async () => {
    const other = await setupTenant(svc, 'plain');
    const keys = [other.root, generateKeyPair()];
    const c = buildChain([{ ...base, allowed_tools: ['*'] }], { keys });
    const { bundle } = c.invoke({ tool: 'anything', estimated_cost_usd: 0.01, pii_access: false, write_access: false }, { iat: T0 });
    const r = await svc.call('POST', '/v1/verify', { key: other.keys.verify, json: bundle });
    expect(r.status).toBe(200);
    expect(receiptData(r.body.service_receipt.jws)['catalog_version']).toBeUndefined();
  });

  it('a delegation whose tools form the lethal trifecta is unusable until an approver approves it', async () => {
    await publish(
      [
        tool('web_fetch', { untrusted_content: true, action_type: 'web:fetch' }),
        tool('hr_lookup', { tags: ['pii'] }),
        tool('mail_send', { type: 'external', action_type: 'mail:send' }),
      ],
      { strict: false },
    );
    const k = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, { key: svc.adminKey, json: { scopes: ['approve'] } });
    const approver = k.body.key as string;
    const two = chain([{ ...base, pii_access: true, allowed_tools: ['web_fetch', 'hr_lookup'] }]);
    expect((await verify(two, { tool: 'hr_lookup' })).status).toBe(200);
    for (const allowed of [
      ['web_fetch', 'hr_lookup', 'mail_send'],
      ['hr_lookup', 'mail_send', 'not_declared'],
    ]) {
      const three = chain([{ ...base, pii_access: true, allowed_tools: allowed }]);
      const held = await verify(three, { tool: 'hr_lookup' });
      expect(held.status).toBe(403);
      expect(held.body.error.code).toBe('GRANT_PENDING_APPROVAL');
      expect(held.body.violations[0]).toMatchObject({ dr_index: 0, dr_hash: three.drs[0]!.hash });
      const grants = await svc.call('GET', '/v1/grants?status=pending', { key: approver });
      expect(grants.body.grants.map((g: { dr_hash: string }) => g.dr_hash)).toContain(three.drs[0]!.hash);
      const statusOf = async () => (await svc.call('GET', `/v1/delegations/${three.drs[0]!.hash}`, { key: tenant.keys.audit })).body.status;
      expect(await statusOf()).toBe('held');
      const triple = { actor: 'bob', confirm: true, reason: 'Reviewed the mail recipients.' };
      expect((await svc.call('POST', `/v1/grants/${three.drs[0]!.hash}/approve`, { key: tenant.keys.issue, json: triple })).status).toBe(
        403,
      );
      expect((await svc.call('POST', `/v1/grants/${three.drs[0]!.hash}/approve`, { key: approver, json: triple })).status).toBe(200);
      expect((await verify(three, { tool: 'hr_lookup' })).status).toBe(200);
      expect((await latestReceipt('grant.approved')).subject).toBe(three.drs[0]!.hash);
      expect(await statusOf()).toBe('active');
    }
    // A child of a held parent narrowing away one risk is not held itself, but the parent still is.
    const parent = chain([
      { ...base, pii_access: true, allowed_tools: ['web_fetch', 'hr_lookup', 'mail_send'] },
      { ...base, pii_access: true, allowed_tools: ['hr_lookup'] },
    ]);
    const r = await verify(parent, { tool: 'hr_lookup' });
    expect(r.body.error.code).toBe('GRANT_PENDING_APPROVAL');
    expect(r.body.violations[0].dr_index).toBe(0);
    // An auditor reads both as held, wherever it looks: the hold cascades like a revocation.
    const [top, below] = [parent.drs[0]!.hash, parent.drs[1]!.hash];
    const read = (path: string) => svc.call('GET', path, { key: tenant.keys.audit });
    expect((await read(`/v1/delegations/${below}`)).body.status).toBe('held');
    expect((await read(`/v1/delegations/${below}/chain`)).body.records.map((d: { status: string }) => d.status)).toEqual(['held', 'held']);
    const tree = (await read(`/v1/delegations/${top}/tree`)).body.tree;
    expect([tree.status, tree.children[0].status]).toEqual(['held', 'held']);
    expect((await read(`/v1/delegations/${below}/tree`)).body.tree.status).toBe('held');
    const resubmitted = await svc.call('POST', '/v1/delegations', {
      key: tenant.keys.issue,
      json: { receipts: parent.drs.map((d) => d.jws) },
    });
    expect(resubmitted.body.delegations.map((d: { status: string }) => d.status)).toEqual(['held', 'held']);

    // Rejected is final: a call through it says so, not "pending" and "ask an approver".
    const triple = { actor: 'bob', confirm: true, reason: 'Mail plus private data plus the web: no.' };
    expect((await svc.call('POST', `/v1/grants/${top}/reject`, { key: approver, json: triple })).status).toBe(200);
    const refused = await verify(parent, { tool: 'hr_lookup' });
    expect(refused.body.error.code).toBe('GRANT_PENDING_APPROVAL');
    expect(refused.body.violations[0]).toMatchObject({ dr_hash: top, actual: 'rejected' });
    expect(refused.body.violations[0].message).toMatch(/rejected .* for good/);
  });

  it('a call a rule sends for approval asks no human while a grant of its chain is held', async () => {
    await publish(
      [
        tool('web_fetch', { untrusted_content: true, action_type: 'web:fetch' }),
        tool('hr_lookup', { tags: ['pii'] }),
        tool('mail_send', { type: 'external', action_type: 'mail:send' }),
      ],
      { strict: false, rules: [{ id: 'pii-needs-a-human', when: { tags: ['pii'] }, decision: 'require_approval' }] },
    );
    const k = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, { key: svc.adminKey, json: { scopes: ['approve'] } });
    const approver = k.body.key as string;
    const pendingApprovals = async () => (await svc.call('GET', '/v1/approvals?status=pending', { key: approver })).body.approvals.length;
    const three = chain([{ ...base, pii_access: true, allowed_tools: ['web_fetch', 'hr_lookup', 'mail_send'] }]);
    const before = await pendingApprovals();
    const held = await verify(three, { tool: 'hr_lookup' });
    expect(held.status).toBe(403);
    // Every unmet condition that could be evaluated, in block order (the rule is block D, the grant F).
    expect(held.body.violations.map((v: { code: string }) => v.code)).toEqual(['APPROVAL_REQUIRED', 'GRANT_PENDING_APPROVAL']);
    expect(held.body.violations[1]).toMatchObject({ dr_index: 0, dr_hash: three.drs[0]!.hash, actual: 'pending' });
    expect(held.body.error.message).toContain(`No approval is requested while grant ${three.drs[0]!.hash} is pending`);
    expect(held.body).not.toHaveProperty('approval');
    // What to do is the grant's: the rule's own advice (wait for the approval this answer names) would mislead.
    expect(held.body.error.suggestion).toMatch(/^Ask an approver to approve the delegation/);
    expect(await pendingApprovals()).toBe(before);

    // Once the grant is approved, the rule asks for a human as it would anywhere.
    const triple = { actor: 'bob', confirm: true, reason: 'Reviewed the mail recipients.' };
    expect((await svc.call('POST', `/v1/grants/${three.drs[0]!.hash}/approve`, { key: approver, json: triple })).status).toBe(200);
    const asked = await verify(three, { tool: 'hr_lookup' });
    expect(asked.status).toBe(403);
    expect(asked.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(await pendingApprovals()).toBe(before + 1);
    await publish([tool('docs_search')], { strict: true });
  });

  it('undeclared tools in a non-strict tenant count as carrying all three risk flags at issuance, and the hold says why', async () => {
    const k = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, { key: svc.adminKey, json: { scopes: ['approve'] } });
    const approver = k.body.key as string;
    const heldFor = async (hash: string) => {
      const grants = await svc.call('GET', '/v1/grants', { key: approver });
      return (grants.body.grants as { dr_hash: string; explanation: string }[]).find((g) => g.dr_hash === hash);
    };
    const named = { ...base, allowed_tools: ['docs_search', 'mystery_tool'] };
    const open = { ...base, allowed_tools: ['*'] };

    await publish([tool('docs_search')], { strict: false });
    const one = chain([named]);
    expect((await verify(one, { tool: 'docs_search' })).body.error.code).toBe('GRANT_PENDING_APPROVAL');
    const reason = (await heldFor(one.drs[0]!.hash))!.explanation;
    expect(reason).toContain('Tool "mystery_tool" is undeclared');
    expect(reason).toContain('in a non-strict tenant an undeclared tool counts as carrying all three risk flags');
    const any = chain([open]);
    expect((await verify(any, { tool: 'docs_search' })).body.error.code).toBe('GRANT_PENDING_APPROVAL');
    expect((await heldFor(any.drs[0]!.hash))!.explanation).toContain('it reaches any undeclared tool');
    // The same reach of declared harmless tools only is not held, and neither is any of it in a strict tenant.
    expect((await verify(chain([{ ...base, allowed_tools: ['docs_search'] }]), { tool: 'docs_search' })).status).toBe(200);
    await publish([tool('docs_search')], { strict: true });
    for (const policy of [named, open]) {
      const c = chain([policy]);
      expect((await verify(c, { tool: 'docs_search' })).status).toBe(200);
      expect(await heldFor(c.drs[0]!.hash)).toBeUndefined();
    }
  });

  it('POST /v1/explain lists every unmet condition with a remediation and counts nothing', async () => {
    await publish([tool('crm_export', { type: 'write', blast_radius: 'organizational', action_type: 'crm:export', tags: ['pii'] })], {
      rules: [{ id: 'org', when: { blast_radius: ['organizational'] }, decision: 'require_approval' }],
    });
    const c = chain([
      { ...base, allowed_tools: ['crm_export'], write_access: true },
      { ...base, allowed_tools: ['crm_export'] },
    ]);
    await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: c.drs.map((d) => d.jws) } });
    const args = { tool: 'crm_export', ...DECLARED };
    const r = await svc.call('POST', '/v1/explain', { key: tenant.keys.verify, json: { dr_chain: c.drs.map((d) => d.hash), args } });
    expect(r.status).toBe(200);
    expect(r.body.decision).toBe('deny');
    const by = (field: string, i?: number) =>
      r.body.violations.find((v: { field: string; dr_index?: number }) => v.field === field && (i === undefined || v.dr_index === i));
    expect(by('policy.write_access', 1).remediation).toMatch(/^grant write_access in DR #1/);
    expect(by('policy.pii_access', 0).remediation).toMatch(/^grant pii_access in DR #0/);
    expect(by('rules[0]').remediation).toMatch(/^request approval; approvers: holders of an API key with the approve scope/);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(0);

    // Only a chain is explained: root first, each DR the child of the one before.
    const other = chain([{ ...base, allowed_tools: ['crm_export'] }]);
    await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: other.drs.map((d) => d.jws) } });
    const [root, leaf] = c.drs.map((d) => d.hash) as [string, string];
    for (const [dr_chain, field] of [
      [[leaf, root], 'dr_chain.0'],
      [[leaf], 'dr_chain.0'],
      [[root, root], 'dr_chain.1'],
      [[other.drs[0]!.hash, leaf], 'dr_chain.1'],
    ] as const) {
      const refused = await svc.call('POST', '/v1/explain', { key: tenant.keys.verify, json: { dr_chain, args } });
      expect(refused.status, dr_chain.join(' ')).toBe(400);
      expect(refused.body.error.details.field).toBe(field);
    }
  });
});

async function callsUsed(hash: string): Promise<number> {
  const [row] = await svc.store.db.select().from(delegations).where(eq(delegations.hash, hash));
  return row!.callsUsed;
}

describe('a tenant without a catalog', () => {
  it('GET /v1/tools is NOT_FOUND with a suggestion to publish the first version', async () => {
    const bare = await setupTenant(svc, 'no-catalog');
    const r = await svc.call('GET', '/v1/tools', { key: bare.keys.verify });
    expect(r.status).toBe(404);
    expect(r.body.error.code).toBe('NOT_FOUND');
    expect(r.body.error.message).toBe('This tenant has not published a tool catalog yet.');
    expect(r.body.error.suggestion).toBe(
      `Publish the first version with the admin key: baton tools publish <file.json> --tenant ${bare.id}, ` +
        `the file holding {"base_version": 0, "strict": ..., "tools": [...]} (or POST /v1/admin/tenants/${bare.id}/tools).`,
    );
  });
});

describe('explain agrees with verify', () => {
  async function explainAndVerify(t: TestTenant, c: ReturnType<typeof buildChain>, args: Record<string, unknown>) {
    await svc.call('POST', '/v1/delegations', { key: t.keys.issue, json: { receipts: c.drs.map((d) => d.jws) } });
    const call = { ...DECLARED, ...args };
    const explained = await svc.call('POST', '/v1/explain', {
      key: t.keys.verify,
      json: { dr_chain: c.drs.map((d) => d.hash), args: call },
    });
    expect(explained.status, JSON.stringify(explained.body)).toBe(200);
    const verified = await svc.call('POST', '/v1/verify', { key: t.keys.verify, json: c.invoke(call, { iat: svc.clock.now }).bundle });
    return { explained: explained.body, verified };
  }

  it('for a tenant with no tool document: no tool gate, only the policies', async () => {
    const bare = await setupTenant(svc, 'explain-without-catalog');
    // Unrestricted and calling a tool nothing declares: a trifecta hold under any catalog, and no gate without one.
    const open = buildChain([{ max_cost_usd: 1 }], { keys: [bare.root, generateKeyPair()] });
    const allowed = await explainAndVerify(bare, open, { tool: 'web_search' });
    expect(allowed.verified.status, JSON.stringify(allowed.verified.body)).toBe(200);
    expect(allowed.explained).toMatchObject({ decision: 'allow', violations: [], catalog_version: 0, chain_trifecta: { detected: false } });
    expect(allowed.explained.rule.why.join(' ')).toMatch(/no tool document/);

    const over = await explainAndVerify(bare, buildChain([{ max_cost_usd: 1 }], { keys: [bare.root, generateKeyPair()] }), {
      tool: 'web_search',
      estimated_cost_usd: 2,
    });
    expect(over.verified.status).toBe(403);
    expect(over.explained.decision).toBe('deny');
    expect(over.explained.violations.map((v: { field: string }) => v.field)).toEqual(['args.estimated_cost_usd']);
  });

  it("denies what stands in the chain's way now, as verify does: revoked, used up, over budget, expired, untrusted", async () => {
    const own = await setupTenant(svc, 'explain-standing');
    const fresh = (policy: Policy = {}) => buildChain([policy, policy], { keys: [own.root, generateKeyPair(), generateKeyPair()] });
    const codes = (e: { violations: { code: string; dr_index?: number }[] }) => e.violations.map((v) => `${v.code}@${v.dr_index}`);

    const revoked = fresh();
    await explainAndVerify(own, revoked, { tool: 'web_search' });
    const r = await svc.call('POST', `/v1/delegations/${revoked.drs[1]!.hash}/revoke`, {
      key: own.keys.issue,
      json: { confirm: true, reason: 'explain test' },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    let got = await explainAndVerify(own, revoked, { tool: 'web_search' });
    expect([got.verified.status, got.verified.body.error.code]).toEqual([403, 'RECEIPT_REVOKED']);
    expect(got.explained.decision).toBe('deny');
    expect(codes(got.explained)).toEqual(['RECEIPT_REVOKED@1']);
    // A key that cannot read delegations (approve alone) is not shown their standing by explain either.
    const approver = await createTenantKey(svc, own.id, ['approve'], 'approver');
    const asApprover = await svc.call('POST', '/v1/explain', {
      key: approver,
      json: { dr_chain: revoked.drs.map((d) => d.hash), args: { ...DECLARED, tool: 'web_search' } },
    });
    expect(asApprover.status).toBe(200);
    expect(codes(asApprover.body)).toEqual([]);
    // Nor is a verify key confined to one tool server, which reads no delegation either.
    const bound = await svc.call('POST', `/v1/admin/tenants/${own.id}/api-keys`, {
      key: svc.adminKey,
      json: { scopes: ['verify'], name: 'bound verifier', tool_server: 'mcp://elsewhere' },
    });
    expect(bound.status).toBe(201);
    const asBound = await svc.call('POST', '/v1/explain', {
      key: bound.body.key as string,
      json: { dr_chain: revoked.drs.map((d) => d.hash), args: { ...DECLARED, tool: 'web_search' } },
    });
    expect(asBound.status).toBe(200);
    expect(codes(asBound.body)).toEqual([]);

    const once = fresh({ max_calls: 1 });
    expect((await explainAndVerify(own, once, { tool: 'web_search' })).verified.status).toBe(200);
    got = await explainAndVerify(own, once, { tool: 'web_search' });
    expect(got.verified.body.error.code).toBe('CALLS_EXHAUSTED');
    expect(codes(got.explained)).toEqual(['CALLS_EXHAUSTED@0', 'CALLS_EXHAUSTED@1']);

    const budget = fresh({ max_spend_usd: 1, max_cost_usd: 1 });
    got = await explainAndVerify(own, budget, { tool: 'web_search', estimated_cost_usd: 0.75 });
    expect(got.verified.status).toBe(200);
    got = await explainAndVerify(own, budget, { tool: 'web_search', estimated_cost_usd: 0.5 });
    expect(got.verified.body.error.code).toBe('BUDGET_EXHAUSTED');
    expect(codes(got.explained)).toEqual(['BUDGET_EXHAUSTED@0', 'BUDGET_EXHAUSTED@1']);
    // A call that still fits is not refused for the budget.
    got = await explainAndVerify(own, budget, { tool: 'web_search', estimated_cost_usd: 0.25 });
    expect([got.verified.status, got.explained.decision]).toEqual([200, 'allow']);

    const later = fresh();
    await svc.call('POST', '/v1/delegations', { key: own.keys.issue, json: { receipts: later.drs.map((d) => d.jws) } });
    const start = svc.clock.now;
    try {
      svc.clock.now = T0 + 3601;
      got = await explainAndVerify(own, later, { tool: 'web_search' });
      expect(got.verified.body.error.code).toBe('RECEIPT_EXPIRED');
      expect(codes(got.explained)).toEqual(['RECEIPT_EXPIRED@0', 'RECEIPT_EXPIRED@1']);
    } finally {
      svc.clock.now = start;
    }

    const distrusted = fresh();
    expect((await explainAndVerify(own, distrusted, { tool: 'web_search' })).verified.status).toBe(200);
    const removed = await svc.call('DELETE', `/v1/admin/tenants/${own.id}/roots/${own.root.did}`, { key: svc.adminKey });
    expect(removed.status, JSON.stringify(removed.body)).toBe(204);
    got = await explainAndVerify(own, distrusted, { tool: 'web_search' });
    expect(got.verified.body.error.code).toBe('UNTRUSTED_ROOT');
    expect(codes(got.explained)).toEqual(['UNTRUSTED_ROOT@0']);
  });

  it('a tool that has had its calls this minute is TOOL_RATE_LIMITED in explain as in verify', async () => {
    const own = await setupTenant(svc, 'explain-rate-limit');
    const published = await publish([tool('sms', { action_type: 'sms:send', rate_limit_per_minute: 2 })], {}, own);
    expect(published.status, JSON.stringify(published.body)).toBe(201);
    const c = buildChain([{ allowed_tools: ['sms'], max_cost_usd: 1 }], { keys: [own.root, generateKeyPair()] });
    expect((await explainAndVerify(own, c, { tool: 'sms' })).explained.decision).toBe('allow');
    // Full windows for this minute of the database clock and the next two: the test cannot straddle one.
    await svc.store.db.execute(
      sql`INSERT INTO tool_rate_windows (tenant_id, tool, window_start, calls)
          SELECT ${own.id}, 'sms', floor(extract(epoch FROM clock_timestamp()) / 60)::bigint * 60 + m * 60, 2 FROM generate_series(0, 2) AS m
          ON CONFLICT (tenant_id, tool, window_start) DO UPDATE SET calls = 2`,
    );
    const { explained, verified } = await explainAndVerify(own, c, { tool: 'sms' });
    expect(verified.body.error.code).toBe('TOOL_RATE_LIMITED');
    expect(explained.decision).toBe('deny');
    expect(explained.violations.map((v: { code: string }) => v.code)).toEqual(['TOOL_RATE_LIMITED']);
    // The tenant's tool activity is not an approve-only key's to read.
    const approver = await createTenantKey(svc, own.id, ['approve'], 'approver');
    const asApprover = await svc.call('POST', '/v1/explain', {
      key: approver,
      json: { dr_chain: c.drs.map((d) => d.hash), args: { ...DECLARED, tool: 'sms' } },
    });
    expect(asApprover.body.decision).toBe('allow');
    // A call a rule holds for a human never reaches the window: verify asks for approval, and so does explain.
    const held = await publish(
      [tool('sms', { action_type: 'sms:send', rate_limit_per_minute: 2 })],
      { rules: [{ id: 'every-sms', when: {}, decision: 'require_approval' }] },
      own,
    );
    expect(held.status, JSON.stringify(held.body)).toBe(201);
    const asked = await explainAndVerify(own, c, { tool: 'sms' });
    expect(asked.verified.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(asked.explained.decision).toBe('require_approval');
    expect(asked.explained.violations.map((v: { code: string }) => v.code)).toEqual(['APPROVAL_REQUIRED']);
    // Once approved it meets the window, as verify's statement counts it after the approval: said now.
    expect(asked.explained.violations[0].remediation).toMatch(/approved call is refused TOOL_RATE_LIMITED until the next minute/);
  });

  it('NEAR_LIMIT counts the call about to be made, raised to its cost floor, as verify does', async () => {
    const own = await setupTenant(svc, 'explain-near-limit');
    const published = await publish(
      [tool('buy', { action_type: 'shop:buy', cost_per_invocation_usd: 9 }), tool('quote', { action_type: 'shop:quote' })],
      { rules: [{ id: 'near', when: { near_limit: true }, decision: 'require_approval' }] },
      own,
    );
    expect(published.status, JSON.stringify(published.body)).toBe(201);
    const budget = (tools: string[]) =>
      buildChain([{ allowed_tools: tools, max_spend_usd: 10, max_cost_usd: 10 }], { keys: [own.root, generateKeyPair()] });
    // 9 USD of a 10 USD budget: by the tool's floor, then by the declared estimate.
    for (const [name, estimate] of [
      ['buy', 0.01],
      ['quote', 9],
    ] as const) {
      const { explained, verified } = await explainAndVerify(own, budget([name]), { tool: name, estimated_cost_usd: estimate });
      expect(verified.status, name).toBe(403);
      expect(verified.body.error.code, name).toBe('APPROVAL_REQUIRED');
      expect(explained.decision, name).toBe('require_approval');
      expect(explained.rule, name).toMatchObject({ rule: { id: 'near' } });
    }
    // Under the line both allow.
    const { explained, verified } = await explainAndVerify(own, budget(['quote']), { tool: 'quote', estimated_cost_usd: 1 });
    expect(verified.status).toBe(200);
    expect(explained.decision).toBe('allow');
    // A key that does not read the chain's spend (bound to a tool server) is not told where it stands:
    // an estimate of its choosing would bisect the line. It gets the call judged alone.
    const bound = await svc.call('POST', `/v1/admin/tenants/${own.id}/api-keys`, {
      key: svc.adminKey,
      json: { scopes: ['verify'], name: 'bound verifier', tool_server: 'mcp://elsewhere' },
    });
    const nearLine = budget(['quote']);
    await svc.call('POST', '/v1/delegations', { key: own.keys.issue, json: { receipts: nearLine.drs.map((d) => d.jws) } });
    const asBound = await svc.call('POST', '/v1/explain', {
      key: bound.body.key as string,
      json: { dr_chain: nearLine.drs.map((d) => d.hash), args: { ...DECLARED, tool: 'quote', estimated_cost_usd: 9 } },
    });
    expect(asBound.status, JSON.stringify(asBound.body)).toBe(200);
    expect(asBound.body.decision).toBe('allow');
  });
});

describe('versions stored under older publish rules', () => {
  it('still read and decide; the newer rules apply at the next publish', async () => {
    const own = await setupTenant(svc, 'stored-before-an-upgrade');
    const approver = generateKeyPair().did;
    // Accepted when it was published; refused by rules added since (look-alikes by whitespace, an
    // approver listed twice, a rule description with a bidi override).
    const document = {
      strict: false,
      tools: [tool('paid search'), tool('paidsearch')],
      rules: [{ id: 'old', when: {}, decision: 'allow', description: 'kept \u202e as stored' }],
      default_decision: 'allow',
      approvers: [approver, approver],
    };
    await svc.store.db
      .insert(toolCatalogs)
      .values({ tenantId: own.id, version: 1, document, hash: `sha256:${'0'.repeat(64)}`, createdBy: 'key_old' });

    const read = await svc.call('GET', '/v1/tools', { key: own.keys.verify });
    expect(read.status, JSON.stringify(read.body)).toBe(200);
    expect(read.body).toMatchObject({ version: 1, approvers: [approver, approver] });
    const c = buildChain([{ allowed_tools: ['paidsearch'], max_cost_usd: 1 }], { keys: [own.root, generateKeyPair()] });
    const allowed = await svc.call('POST', '/v1/verify', {
      key: own.keys.verify,
      json: c.invoke({ ...DECLARED, tool: 'paidsearch' }, { iat: T0 }).bundle,
    });
    expect(allowed.status, JSON.stringify(allowed.body)).toBe(200);

    const republished = await publish(document.tools, { ...document, base_version: 1 }, own);
    expect(republished.status).toBe(400);
  });
});
