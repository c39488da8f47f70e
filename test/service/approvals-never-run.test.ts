/**
 * Approvals whose call can never run, on real PostgreSQL: a delegation of the chain revoked or
 * expired, or the root no longer trusted. Such an approval holds no place under its root's cap of
 * waiting approvals (siblings of a revoked runaway sub-agent are not held up), says so where an
 * approver reads it, and cannot be approved (409), only rejected or left to expire.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import type { ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { approvals } from '../../src/store/schema/index.js';
import { MAX_OPEN_APPROVALS_PER_ROOT, MAX_PENDING_APPROVALS_PER_ROOT } from '../../src/service/approvals.js';
import { buildChain, T0 } from '../support/fixtures.js';
import { createTenantKey, setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { tool } from '../support/tools.js';

let svc: TestService;

const EXPORT = tool('crm_export', { type: 'write', blast_radius: 'organizational', action_type: 'crm:export' });
const ARGS = { tool: 'crm_export', estimated_cost_usd: 0.01, pii_access: false, write_access: true };
const POLICY: Policy = { allowed_tools: ['*'], max_cost_usd: 1, write_access: true };
const TOOL_SERVER = 'mcp://tools.example.com';
const triple = { actor: 'alice@example.com', confirm: true, reason: 'Export agreed with legal.' };

beforeAll(async () => {
  svc = await startTestService({ pool: 10 });
});
afterAll(async () => svc?.close());

/** A tenant whose catalog sends crm_export to a human, with an approver key. */
async function tenantWithApprover(name: string): Promise<{ own: TestTenant; human: string }> {
  const own = await setupTenant(svc, name);
  const published = await svc.call('POST', `/v1/admin/tenants/${own.id}/tools`, {
    key: svc.adminKey,
    json: { base_version: 0, strict: true, tools: [EXPORT] satisfies ToolDeclaration[] },
  });
  expect(published.status).toBe(201);
  return { own, human: await createTenantKey(svc, own.id, ['approve'], 'human') };
}

/** The root to A, and A to each of `children` (B, C, ...): siblings under one root. */
function family(own: TestTenant, childExp: number[] = [T0 + 3600, T0 + 3600]) {
  const A = generateKeyPair();
  const window = { iat: T0, nbf: T0 - 100 };
  const root = createRootDelegation({ issuer: own.root, audience: A.did, policy: POLICY, ...window, exp: T0 + 3600 });
  const children = childExp.map((exp) => {
    const holder = generateKeyPair();
    const dr = createSubDelegation({ parent: root, issuer: A, audience: holder.did, policy: POLICY, ...window, exp });
    return { holder, dr };
  });
  return { root, children };
}

function ask(own: TestTenant, root: SignedDelegation, child: { holder: KeyPair; dr: SignedDelegation }, note: string) {
  const chain = [root, child.dr];
  const invocation = createInvocation({
    chain,
    invoker: child.holder,
    args: { ...ARGS, note },
    toolServer: TOOL_SERVER,
    iat: svc.clock.now,
  });
  return svc.call('POST', '/v1/verify', { key: own.keys.verify, json: makeBundle(invocation, chain) });
}

const codesOf = (answers: { body: { error?: { code: string } } }[]) => answers.map((a) => a.body.error?.code);

describe('approvals whose call can never run hold no place under the root cap', () => {
  it("a revoked runaway sub-agent's approvals: its siblings ask again, the approver sees why they cannot run, and approving one is a conflict", async () => {
    const { own, human } = await tenantWithApprover('runaway');
    const { root, children } = family(own);
    const [B, C] = children as [(typeof children)[0], (typeof children)[0]];
    // B floods distinct calls: the root's cap, then refusals.
    const flood: Awaited<ReturnType<typeof ask>>[] = [];
    for (let i = 0; i < MAX_PENDING_APPROVALS_PER_ROOT + 2; i++) flood.push(await ask(own, root, B, `junk ${i}`));
    const codes = codesOf(flood);
    expect(codes.filter((c) => c === 'APPROVAL_REQUIRED')).toHaveLength(MAX_PENDING_APPROVALS_PER_ROOT);
    expect(codes.slice(-2)).toEqual(['APPROVALS_PENDING_LIMIT', 'APPROVALS_PENDING_LIMIT']);
    expect((await ask(own, root, C, 'before')).body.error.code).toBe('APPROVALS_PENDING_LIMIT');

    const revoked = await svc.call('POST', `/v1/delegations/${encodeURIComponent(B.dr.hash)}/revoke`, {
      key: own.keys.issue,
      json: { confirm: true, reason: 'runaway agent' },
    });
    expect(revoked.status).toBe(200);

    // The sibling's call reaches a human again, in a dry run as for real.
    const dry = await svc.call('POST', '/v1/verify/dry-run', {
      key: own.keys.verify,
      json: makeBundle(
        createInvocation({ chain: [root, C.dr], invoker: C.holder, args: { ...ARGS, note: 'dry' }, toolServer: TOOL_SERVER, iat: T0 }),
        [root, C.dr],
      ),
    });
    expect(dry.body.error?.code, JSON.stringify(dry.body)).toBe('APPROVAL_REQUIRED');
    const sibling = await ask(own, root, C, 'after');
    expect(sibling.body.error?.code, JSON.stringify(sibling.body)).toBe('APPROVAL_REQUIRED');

    // The approver's list says which waiting approvals can never run, and why.
    const listed = await svc.call('GET', '/v1/approvals?status=pending', { key: human });
    expect(listed.status).toBe(200);
    const byId = new Map((listed.body.approvals as { id: string; cannot_run?: unknown }[]).map((a) => [a.id, a]));
    const junk = flood[0]!.body.approval.id as string;
    expect(byId.get(junk)!.cannot_run).toMatchObject({ code: 'RECEIPT_REVOKED', dr_hash: B.dr.hash });
    expect(byId.get(sibling.body.approval.id as string)!.cannot_run).toBeUndefined();
    expect((await svc.call('GET', `/v1/approvals/${junk}`, { key: human })).body.cannot_run).toMatchObject({ code: 'RECEIPT_REVOKED' });

    const approved = await svc.call('POST', `/v1/approvals/${junk}/approve`, { key: human, json: triple });
    expect(approved.status).toBe(409);
    expect(approved.body.error).toMatchObject({
      code: 'CONFLICT',
      details: { approval_id: junk, status: 'pending', revoked_dr: B.dr.hash },
    });
    const rejected = await svc.call('POST', `/v1/approvals/${junk}/reject`, { key: human, json: triple });
    expect(rejected.status).toBe(200);
    expect(rejected.body.cannot_run).toBeUndefined(); // decided: nothing left to say
  });

  it("a sub-agent's expired delegation frees its approvals' places too", async () => {
    const { own } = await tenantWithApprover('short-lived');
    const { root, children } = family(own, [T0 + 60, T0 + 3600]);
    const [B, C] = children as [(typeof children)[0], (typeof children)[0]];
    const asked = await Promise.all(Array.from({ length: MAX_PENDING_APPROVALS_PER_ROOT }, (_, i) => ask(own, root, B, `junk ${i}`)));
    expect(codesOf(asked).every((c) => c === 'APPROVAL_REQUIRED')).toBe(true);
    expect((await ask(own, root, C, 'before')).body.error.code).toBe('APPROVALS_PENDING_LIMIT');
    const at = svc.clock.now;
    svc.clock.now = T0 + 61; // B expired; its approvals (15 minutes) did not
    try {
      expect((await ask(own, root, C, 'after')).body.error.code).toBe('APPROVAL_REQUIRED');
    } finally {
      svc.clock.now = at;
    }
  });

  it(`those that hold no place are still bounded: at ${MAX_OPEN_APPROVALS_PER_ROOT} open under a root, no new one is opened`, async () => {
    const { own } = await tenantWithApprover('bounded');
    const { root, children } = family(own);
    const [B, C] = children as [(typeof children)[0], (typeof children)[0]];
    // Store the chains (an approval of each), then revoke B: an agent cycling revoked sub-delegations.
    expect((await ask(own, root, B, 'store')).body.error.code).toBe('APPROVAL_REQUIRED');
    expect((await ask(own, root, C, 'store')).body.error.code).toBe('APPROVAL_REQUIRED');
    await svc.call('POST', `/v1/delegations/${encodeURIComponent(B.dr.hash)}/revoke`, {
      key: own.keys.issue,
      json: { confirm: true, reason: 'cycled' },
    });
    const template = (await svc.store.db.select().from(approvals)).find((r) => r.drChain[1] === B.dr.hash)!;
    await svc.store.db.insert(approvals).values(
      Array.from({ length: MAX_OPEN_APPROVALS_PER_ROOT - 2 }, (_, i) => ({
        ...template,
        id: `apr_${i.toString(16).padStart(32, '0')}`,
        binding: `sha256:junk-${i}`,
        invocationJti: `junk-${i}`,
      })),
    );
    const refused = await ask(own, root, C, 'one too many');
    expect(refused.body.error?.code, JSON.stringify(refused.body)).toBe('APPROVALS_PENDING_LIMIT');
    expect(refused.body.violations[0]).toMatchObject({ code: 'APPROVALS_PENDING_LIMIT', actual: MAX_OPEN_APPROVALS_PER_ROOT });
    expect(refused.body.error.message).toContain('can never run');
  });
});

describe('an approval whose call can never run cannot be approved', () => {
  it('through an expired delegation: 409 naming it (expired_dr); rejecting stays allowed', async () => {
    const { own, human } = await tenantWithApprover('expired');
    const c = buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()], exp: T0 + 60 });
    const asked = await svc.call('POST', '/v1/verify', { key: own.keys.verify, json: c.invoke(ARGS, { iat: T0 }).bundle });
    const id = asked.body.approval.id as string;
    const at = svc.clock.now;
    svc.clock.now = T0 + 61;
    try {
      const approved = await svc.call('POST', `/v1/approvals/${id}/approve`, { key: human, json: triple });
      expect(approved.status, JSON.stringify(approved.body)).toBe(409);
      expect(approved.body.error).toMatchObject({
        code: 'CONFLICT',
        details: { approval_id: id, status: 'pending', expired_dr: c.drs[0]!.hash },
      });
      expect(approved.body.error.message).toContain('RECEIPT_EXPIRED');
      expect(approved.body.error.suggestion).toMatch(/Reject it/);
      expect((await svc.call('GET', `/v1/approvals/${id}`, { key: human })).body).toMatchObject({
        status: 'pending',
        cannot_run: { code: 'RECEIPT_EXPIRED', dr_hash: c.drs[0]!.hash },
      });
      expect((await svc.call('POST', `/v1/approvals/${id}/reject`, { key: human, json: triple })).body.status).toBe('rejected');
    } finally {
      svc.clock.now = at;
    }
  });

  it('at the second of its exp the delegation still runs a call (verify: expired once now > exp), so it can be approved', async () => {
    const { own, human } = await tenantWithApprover('at exp');
    const c = buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()], exp: T0 + 60 });
    const id = (await svc.call('POST', '/v1/verify', { key: own.keys.verify, json: c.invoke(ARGS, { iat: T0 }).bundle })).body.approval
      .id as string;
    const at = svc.clock.now;
    svc.clock.now = T0 + 60;
    try {
      const approved = await svc.call('POST', `/v1/approvals/${id}/approve`, { key: human, json: triple });
      expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    } finally {
      svc.clock.now = at;
    }
  });

  it('under a root the tenant no longer trusts: 409 naming it (untrusted_root); rejecting stays allowed', async () => {
    const { own, human } = await tenantWithApprover('untrusted');
    const c = buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()] });
    const id = (await svc.call('POST', '/v1/verify', { key: own.keys.verify, json: c.invoke(ARGS, { iat: T0 }).bundle })).body.approval
      .id as string;
    const removed = await svc.call('DELETE', `/v1/admin/tenants/${own.id}/roots/${encodeURIComponent(own.root.did)}`, {
      key: svc.adminKey,
    });
    expect(removed.status, JSON.stringify(removed.body)).toBeLessThan(300);
    const approved = await svc.call('POST', `/v1/approvals/${id}/approve`, { key: human, json: triple });
    expect(approved.status, JSON.stringify(approved.body)).toBe(409);
    expect(approved.body.error).toMatchObject({
      code: 'CONFLICT',
      details: { approval_id: id, status: 'pending', untrusted_root: c.drs[0]!.hash },
    });
    expect(approved.body.error.message).toContain('no longer trusts');
    expect((await svc.call('GET', '/v1/approvals', { key: human })).body.approvals[0].cannot_run).toMatchObject({ code: 'UNTRUSTED_ROOT' });
    expect((await svc.call('POST', `/v1/approvals/${id}/reject`, { key: human, json: triple })).body.status).toBe('rejected');
  });
});
