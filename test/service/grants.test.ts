/** Trifecta grants held for a human, and who may decide them; approver lists and rule texts at publish. On real PostgreSQL. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { generateKeyPair } from '../../src/sdk/keys.js';
import type { Policy } from '../../src/protocol/policy.js';
import { grantApprovals, serviceReceipts } from '../../src/store/schema/index.js';
import { buildChain, T0 } from '../support/fixtures.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { tool } from '../support/tools.js';

let svc: TestService;
let tenant: TestTenant;

const TOOLS = [
  tool('fetch_web', { untrusted_content: true, action_type: 'web:fetch' }),
  tool('read_db', { private_data_access: true, action_type: 'db:read' }),
  tool('send_email', { type: 'external', action_type: 'mail:send' }),
];
/** Reaches all three risks: stored held. */
const TRIFECTA: Policy = { allowed_tools: ['fetch_web', 'read_db', 'send_email'], pii_access: true, max_cost_usd: 5, max_calls: 100 };
const TRIPLE = { actor: 'bob', confirm: true, reason: 'Reviewed the recipients.' };

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  const r = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
    key: svc.adminKey,
    json: { base_version: 0, strict: true, tools: TOOLS, rules: [] },
  });
  expect(r.status).toBe(201);
});
afterAll(async () => svc?.close());

async function apiKey(scopes: string[]): Promise<{ id: string; key: string }> {
  const k = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, { key: svc.adminKey, json: { scopes } });
  expect(k.status).toBe(201);
  return { id: k.body.id as string, key: k.body.key as string };
}

function trifectaRoot() {
  return buildChain([TRIFECTA], { keys: [tenant.root, generateKeyPair()] }).drs[0]!;
}

async function grantRow(hash: string) {
  const [row] = await svc.store.db
    .select()
    .from(grantApprovals)
    .where(and(eq(grantApprovals.tenantId, tenant.id), eq(grantApprovals.drHash, hash)));
  return row!;
}

async function pendingReceiptData(hash: string): Promise<Record<string, unknown>> {
  const [row] = await svc.store.db
    .select()
    .from(serviceReceipts)
    .where(and(eq(serviceReceipts.tenantId, tenant.id), eq(serviceReceipts.kind, 'grant.pending'), eq(serviceReceipts.subject, hash)));
  return (JSON.parse(Buffer.from(row!.jws.split('.')[1]!, 'base64url').toString('utf8')) as { data: Record<string, unknown> }).data;
}

const decide = (hash: string, what: 'approve' | 'reject', key: string) =>
  svc.call('POST', `/v1/grants/${hash}/${what}`, { key, json: TRIPLE });

describe('a held grant is never decided by the API key that submitted it', () => {
  it('keeps the submitting key with the hold and in grant.pending; that key is refused SELF_APPROVAL, another decides', async () => {
    const both = await apiKey(['issue', 'approve', 'verify']);
    const other = await apiKey(['approve']);
    const dr = trifectaRoot();
    const stored = await svc.call('POST', '/v1/delegations', { key: both.key, json: { receipt: dr.jws } });
    expect(stored.status).toBe(201);
    expect((await grantRow(dr.hash)).requestedByKey).toBe(both.id);
    expect(await pendingReceiptData(dr.hash)).toMatchObject({ requested_by_key: both.id });

    for (const what of ['approve', 'reject'] as const) {
      const self = await decide(dr.hash, what, both.key);
      expect(self.status).toBe(403);
      expect(self.body.error.code).toBe('SELF_APPROVAL');
      expect(self.body.error.message).toContain(`API key ${both.id} submitted delegation ${dr.hash}`);
    }
    expect((await grantRow(dr.hash)).status).toBe('pending');

    const approved = await decide(dr.hash, 'approve', other.key);
    expect(approved.status).toBe(200);
    expect(approved.body).toMatchObject({ status: 'approved', decision: { decided_by: other.id } });
    // Decided: the submitting key still gets SELF_APPROVAL, as for call approvals, not a hint to retry.
    expect((await decide(dr.hash, 'reject', both.key)).body.error.code).toBe('SELF_APPROVAL');
  });

  it('every keyed path that holds a grant records its key: custodial issuance and a verify storing the chain', async () => {
    const both = await apiKey(['issue', 'approve', 'verify']);
    const agent = generateKeyPair();
    const issued = await svc.call('POST', '/v1/delegations/issue', { key: both.key, json: { audience: agent.did, policy: TRIFECTA } });
    expect(issued.status).toBe(201);
    const hash = issued.body.delegation.hash as string;
    expect((await grantRow(hash)).requestedByKey).toBe(both.id);
    expect((await decide(hash, 'approve', both.key)).body.error.code).toBe('SELF_APPROVAL');

    // A DRS client never pre-registers: the verify that stores the chain holds it, and records its key.
    const c = buildChain([TRIFECTA], { keys: [tenant.root, generateKeyPair()] });
    const args = { tool: 'read_db', estimated_cost_usd: 0.01, pii_access: true, write_access: false };
    const held = await svc.call('POST', '/v1/verify', { key: both.key, json: c.invoke(args).bundle });
    expect(held.body.error.code).toBe('GRANT_PENDING_APPROVAL');
    expect((await grantRow(c.drs[0]!.hash)).requestedByKey).toBe(both.id);
  });

  it('a keyless submission records no key, and any approver key decides it, as grants held before migration 0024', async () => {
    const dr = trifectaRoot();
    const stored = await svc.call('POST', '/v1/delegations', { json: { receipt: dr.jws } });
    expect(stored.status).toBe(201);
    expect((await grantRow(dr.hash)).requestedByKey).toBeNull();
    expect(await pendingReceiptData(dr.hash)).toMatchObject({ requested_by_key: null });
    const anyApprover = await apiKey(['issue', 'approve']);
    expect((await decide(dr.hash, 'approve', anyApprover.key)).status).toBe(200);
  });
});

describe('a held grant whose chain was revoked', () => {
  const revoke = async (hash: string) => {
    const r = await svc.call('POST', `/v1/delegations/${encodeURIComponent(hash)}/revoke`, {
      key: tenant.keys.issue,
      json: { confirm: true, reason: 'withdrawn' },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  };
  const receipts = async (hash: string, kind: 'grant.approved' | 'grant.rejected') =>
    svc.store.db
      .select()
      .from(serviceReceipts)
      .where(and(eq(serviceReceipts.tenantId, tenant.id), eq(serviceReceipts.kind, kind), eq(serviceReceipts.subject, hash)));

  it('cannot be approved when the held record itself was revoked (no call can use it), and can still be rejected', async () => {
    const approver = await apiKey(['approve']);
    const dr = trifectaRoot();
    expect((await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipt: dr.jws } })).status).toBe(201);
    expect((await grantRow(dr.hash)).status).toBe('pending');
    await revoke(dr.hash);

    const approved = await decide(dr.hash, 'approve', approver.key);
    expect(approved.status, JSON.stringify(approved.body)).toBe(409);
    expect(approved.body.error).toMatchObject({ code: 'CONFLICT', details: { dr_hash: dr.hash, status: 'pending', revoked_dr: dr.hash } });
    expect(approved.body.error.message).toContain('was revoked');
    expect((await grantRow(dr.hash)).status).toBe('pending');
    expect(await receipts(dr.hash, 'grant.approved')).toHaveLength(0);

    const rejected = await decide(dr.hash, 'reject', approver.key);
    expect(rejected.status, JSON.stringify(rejected.body)).toBe(200);
    expect(rejected.body.status).toBe('rejected');
    expect(await receipts(dr.hash, 'grant.rejected')).toHaveLength(1);
  });

  it('cannot be approved when an ancestor was revoked, though the held record itself was not', async () => {
    const approver = await apiKey(['approve']);
    const c = buildChain([TRIFECTA, { ...TRIFECTA, max_calls: 10 }], { keys: [tenant.root, generateKeyPair(), generateKeyPair()] });
    const [root, child] = [c.drs[0]!, c.drs[1]!];
    const stored = await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: c.drs.map((d) => d.jws) } });
    expect(stored.status, JSON.stringify(stored.body)).toBe(201);
    expect((await grantRow(child.hash)).status).toBe('pending');
    expect((await decide(root.hash, 'approve', approver.key)).status).toBe(200);
    await revoke(root.hash);

    const approved = await decide(child.hash, 'approve', approver.key);
    expect(approved.status, JSON.stringify(approved.body)).toBe(409);
    expect(approved.body.error).toMatchObject({
      code: 'CONFLICT',
      details: { dr_hash: child.hash, status: 'pending', revoked_dr: root.hash },
    });
    expect((await grantRow(child.hash)).status).toBe('pending');
    expect(await receipts(child.hash, 'grant.approved')).toHaveLength(0);
    expect((await decide(child.hash, 'reject', approver.key)).body.status).toBe('rejected');
  });
});

describe('a held grant through which no call can ever run', () => {
  it('cannot be approved once a record of its chain has expired (409, expired_dr), and can still be rejected', async () => {
    const approver = await apiKey(['approve']);
    const dr = buildChain([TRIFECTA], { keys: [tenant.root, generateKeyPair()], exp: T0 + 60 }).drs[0]!;
    expect((await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipt: dr.jws } })).status).toBe(201);
    const at = svc.clock.now;
    svc.clock.now = T0 + 61;
    try {
      const approved = await decide(dr.hash, 'approve', approver.key);
      expect(approved.status, JSON.stringify(approved.body)).toBe(409);
      expect(approved.body.error).toMatchObject({
        code: 'CONFLICT',
        details: { dr_hash: dr.hash, status: 'pending', expired_dr: dr.hash },
      });
      expect(approved.body.error.message).toContain('RECEIPT_EXPIRED');
      expect((await grantRow(dr.hash)).status).toBe('pending');
      expect((await decide(dr.hash, 'reject', approver.key)).body.status).toBe('rejected');
    } finally {
      svc.clock.now = at;
    }
  });

  it('cannot be approved once the tenant no longer trusts its root (409, untrusted_root), and can still be rejected', async () => {
    const own = await setupTenant(svc, 'untrusting');
    expect(
      (
        await svc.call('POST', `/v1/admin/tenants/${own.id}/tools`, {
          key: svc.adminKey,
          json: { base_version: 0, strict: true, tools: TOOLS, rules: [] },
        })
      ).status,
    ).toBe(201);
    const approver = await svc.call('POST', `/v1/admin/tenants/${own.id}/api-keys`, { key: svc.adminKey, json: { scopes: ['approve'] } });
    const dr = buildChain([TRIFECTA], { keys: [own.root, generateKeyPair()] }).drs[0]!;
    expect((await svc.call('POST', '/v1/delegations', { key: own.keys.issue, json: { receipt: dr.jws } })).status).toBe(201);
    const removed = await svc.call('DELETE', `/v1/admin/tenants/${own.id}/roots/${encodeURIComponent(own.root.did)}`, {
      key: svc.adminKey,
    });
    expect(removed.status).toBeLessThan(300);
    const approved = await svc.call('POST', `/v1/grants/${dr.hash}/approve`, { key: approver.body.key, json: TRIPLE });
    expect(approved.status, JSON.stringify(approved.body)).toBe(409);
    expect(approved.body.error).toMatchObject({
      code: 'CONFLICT',
      details: { dr_hash: dr.hash, status: 'pending', untrusted_root: dr.hash },
    });
    const rejected = await svc.call('POST', `/v1/grants/${dr.hash}/reject`, { key: approver.body.key, json: TRIPLE });
    expect(rejected.body.status).toBe('rejected');
  });
});

describe('a dry run of a chain not yet stored', () => {
  it('refuses what storing it would hold, as the real call is refused, and stores nothing', async () => {
    const verifier = await apiKey(['verify']);
    const c = buildChain([TRIFECTA, { ...TRIFECTA, max_calls: 10 }], { keys: [tenant.root, generateKeyPair(), generateKeyPair()] });
    const args = { tool: 'read_db', estimated_cost_usd: 0.01, pii_access: true, write_access: false };
    const send = (dry: boolean) =>
      svc.call('POST', dry ? '/v1/verify/dry-run' : '/v1/verify', { key: verifier.key, json: c.invoke(args).bundle });
    const dry = await send(true);
    expect(dry.status, JSON.stringify(dry.body)).toBe(403);
    expect(dry.body.error.code).toBe('GRANT_PENDING_APPROVAL');
    expect(dry.body.violations).toEqual([
      expect.objectContaining({ code: 'GRANT_PENDING_APPROVAL', dr_index: 0, dr_hash: c.drs[0]!.hash, actual: 'pending' }),
    ]);
    const [nothing] = await svc.store.db.select().from(grantApprovals).where(eq(grantApprovals.drHash, c.drs[0]!.hash));
    expect(nothing).toBeUndefined();
    // The real call stores the chain, holds its root, and is refused with the same violations.
    const real = await send(false);
    expect(real.status).toBe(403);
    expect(real.body.error.code).toBe('GRANT_PENDING_APPROVAL');
    expect(real.body.violations).toEqual(dry.body.violations);
    expect((await grantRow(c.drs[0]!.hash)).status).toBe('pending');
  });
});

describe('publishing approvers and rule descriptions', () => {
  const publish = async (over: Record<string, unknown>) => {
    const base = (await svc.call('GET', '/v1/tools', { key: tenant.keys.verify })).body.version as number;
    return svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
      key: svc.adminKey,
      json: { base_version: base, strict: true, tools: TOOLS, rules: [], ...over },
    });
  };
  const fields = (r: { body: { error: { details: { issues: { field: string }[] } } } }) => r.body.error.details.issues.map((i) => i.field);

  it('refuses an approver DID no key can sign for, and an approver listed twice', async () => {
    const k = generateKeyPair().did;
    const twice = await publish({ approvers: [k, k] });
    expect(twice.status).toBe(400);
    expect(fields(twice)).toEqual(['approvers.1']);
    const garbage = await publish({ approvers: ['did:key:zzz', k, 'did:key:z1111111111111111111111111111111111111111111111'] });
    expect(garbage.status).toBe(400);
    expect(fields(garbage)).toEqual(['approvers.0', 'approvers.2']);
    expect((await publish({ approvers: [k] })).status).toBe(201);
  });

  it('refuses control, bidi and zero-width characters in a rule description', async () => {
    for (const description of ['x\u001b[2Jy\u200b', 'x\u202ey']) {
      const r = await publish({ rules: [{ id: 'a', when: {}, decision: 'allow', description }] });
      expect(r.status).toBe(400);
      expect(fields(r)).toEqual(['rules.0.description']);
    }
  });
});
