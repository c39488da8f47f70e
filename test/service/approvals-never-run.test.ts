/**
 * Approvals whose call cannot run, on real PostgreSQL. An approval never outlives its call's chain:
 * a revocation ends every pending approval through the revoked delegation (it reads expired, and
 * holds no place under its root's cap: siblings of a revoked runaway sub-agent ask at once), and an
 * approval's deadline is at most its chain's exp. One whose root the tenant no longer trusts stays
 * pending (trust can come back), says why where an approver reads it, and cannot be approved (409).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import type { ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { approvals } from '../../src/store/schema/index.js';
import { MAX_PENDING_APPROVALS_PER_ROOT, requestApproval } from '../../src/service/approvals.js';
import { createRevocation } from '../../src/sdk/revocation.js';
import { eq, sql } from 'drizzle-orm';
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
  return { root, children, A };
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

const revokeWithKey = (own: TestTenant, hash: string, reason: string) =>
  svc.call('POST', `/v1/delegations/${encodeURIComponent(hash)}/revoke`, { key: own.keys.issue, json: { confirm: true, reason } });

describe("an approval never outlives its call's chain", () => {
  it('the operator revokes a runaway sub-agent: its approvals end at once (read expired), and its siblings ask at once', async () => {
    const { own, human } = await tenantWithApprover('runaway');
    const { root, children } = family(own, [T0 + 3600, T0 + 3600, T0 + 3600]);
    const [B, C, D] = children as [(typeof children)[0], (typeof children)[0], (typeof children)[0]];
    // B floods distinct calls: the root's cap, then refusals.
    const flood: Awaited<ReturnType<typeof ask>>[] = [];
    for (let i = 0; i < MAX_PENDING_APPROVALS_PER_ROOT + 2; i++) flood.push(await ask(own, root, B, `junk ${i}`));
    const codes = codesOf(flood);
    expect(codes.filter((c) => c === 'APPROVAL_REQUIRED')).toHaveLength(MAX_PENDING_APPROVALS_PER_ROOT);
    expect(codes.slice(-2)).toEqual(['APPROVALS_PENDING_LIMIT', 'APPROVALS_PENDING_LIMIT']);
    expect((await ask(own, root, C, 'before')).body.error.code).toBe('APPROVALS_PENDING_LIMIT');

    const at = svc.clock.now;
    svc.clock.now += 10; // so the approvals' deadlines show the revocation's time, after their creation
    const revokedB = await revokeWithKey(own, B.dr.hash, 'runaway agent');
    expect(revokedB.status, JSON.stringify(revokedB.body)).toBe(200);

    // The siblings' calls reach a human again, at once, in a dry run as for real.
    const dry = await svc.call('POST', '/v1/verify/dry-run', {
      key: own.keys.verify,
      json: makeBundle(
        createInvocation({ chain: [root, C.dr], invoker: C.holder, args: { ...ARGS, note: 'dry' }, toolServer: TOOL_SERVER, iat: T0 }),
        [root, C.dr],
      ),
    });
    expect(dry.body.error?.code, JSON.stringify(dry.body)).toBe('APPROVAL_REQUIRED');
    const siblings = await Promise.all([ask(own, root, C, 'after'), ask(own, root, D, 'after')]);
    expect(codesOf(siblings)).toEqual(['APPROVAL_REQUIRED', 'APPROVAL_REQUIRED']);

    // B's approvals ended with the revocation: expired as of it, none pending.
    const junk = flood[0]!.body.approval.id as string;
    const read = await svc.call('GET', `/v1/approvals/${junk}`, { key: human });
    expect(read.body).toMatchObject({ status: 'expired', expires_at: at + 10 });
    expect(read.body.cannot_run).toBeUndefined();
    const pending = (await svc.call('GET', '/v1/approvals?status=pending', { key: human })).body.approvals as { dr_chain: string[] }[];
    expect(pending).toHaveLength(2);
    expect(pending.every((a) => a.dr_chain[1] !== B.dr.hash)).toBe(true);
    const rows = (await svc.store.db.select().from(approvals)).filter((r) => r.drChain[1] === B.dr.hash);
    expect(rows).toHaveLength(MAX_PENDING_APPROVALS_PER_ROOT);
    expect(rows.every((r) => r.status === 'expired' && r.expiresAt === at + 10)).toBe(true);

    // Approving one is past its deadline; B's call, sent again, meets the revocation.
    const approved = await svc.call('POST', `/v1/approvals/${junk}/approve`, { key: human, json: triple });
    expect(approved.status).toBe(403);
    expect(approved.body.error.code).toBe('APPROVAL_EXPIRED');
    expect((await ask(own, root, B, 'junk 0')).body.error.code).toBe('RECEIPT_REVOKED');
    svc.clock.now = at;
  });

  it('an agent revoking its own sub-delegations and asking again never blocks a sibling, nor grows what the count reads', async () => {
    const { own } = await tenantWithApprover('self-revoke');
    const { root, children, A: rootHolder } = family(own, [T0 + 3600]);
    const [S] = children as [(typeof children)[0]];
    // The runaway A is S's sibling; it delegates to children of its own (B1, B2, ...) and revokes them.
    const A = generateKeyPair();
    const window = { iat: T0, nbf: T0 - 100, exp: T0 + 3600 };
    const toA = createSubDelegation({ parent: root, issuer: rootHolder, audience: A.did, policy: POLICY, ...window });
    // Five rounds of 50: past the former bound of 200 open approvals per root.
    for (let round = 0; round < 5; round++) {
      const B = generateKeyPair();
      const toB = createSubDelegation({ parent: toA, issuer: A, audience: B.did, policy: POLICY, ...window });
      const chain = [root, toA, toB];
      const asked: Awaited<ReturnType<typeof ask>>[] = [];
      for (let i = 0; i < MAX_PENDING_APPROVALS_PER_ROOT; i += 10) {
        const tenAtOnce = Array.from({ length: 10 }, (_, j) =>
          svc.call('POST', '/v1/verify', {
            key: own.keys.verify,
            json: makeBundle(
              createInvocation({
                chain,
                invoker: B,
                args: { ...ARGS, note: `r${round} ${i + j}` },
                toolServer: TOOL_SERVER,
                iat: svc.clock.now,
              }),
              chain,
            ),
          }),
        );
        asked.push(...(await Promise.all(tenAtOnce)));
      }
      const roundCodes = codesOf(asked);
      // The sibling's approvals of earlier rounds wait too: the rest of the round meets the cap.
      expect(roundCodes.filter((c) => c === 'APPROVAL_REQUIRED').length, JSON.stringify(roundCodes)).toBe(
        MAX_PENDING_APPROVALS_PER_ROOT - round,
      );
      // A revokes B with its own signature: no key needed.
      const revocation = createRevocation({ signer: A, target: toB.hash, iat: svc.clock.now }).jws;
      const revoked = await svc.call('POST', `/v1/delegations/${toB.hash}/revoke`, { json: { revocation } });
      expect(revoked.status, JSON.stringify(revoked.body)).toBe(200);
      const sibling = await ask(own, root, S, `round ${round}`);
      expect(sibling.body.error?.code, JSON.stringify(sibling.body)).toBe('APPROVAL_REQUIRED');
    }
    const live = (await svc.store.db.select().from(approvals)).filter((r) => r.tenantId === own.id && r.status === 'pending');
    expect(live).toHaveLength(5); // the sibling's: the runaway's all ended
  });

  it('an approval through a delegation expiring in 2 s reads expired after it, and holds no place past it', async () => {
    const { own, human } = await tenantWithApprover('short-lived');
    const soon = svc.clock.now + 2;
    const { root, children } = family(own, [soon, T0 + 3600]);
    const [B, C] = children as [(typeof children)[0], (typeof children)[0]];
    const asked = await Promise.all(Array.from({ length: MAX_PENDING_APPROVALS_PER_ROOT }, (_, i) => ask(own, root, B, `junk ${i}`)));
    expect(codesOf(asked).every((c) => c === 'APPROVAL_REQUIRED')).toBe(true);
    const id = asked[0]!.body.approval.id as string;
    // Its deadline is the last second the chain runs (exp is inclusive), not 15 minutes.
    expect(asked[0]!.body.approval.expires_at).toBe(soon + 1);
    expect((await ask(own, root, C, 'before')).body.error.code).toBe('APPROVALS_PENDING_LIMIT');
    const at = svc.clock.now;
    try {
      svc.clock.now = soon; // the chain still runs: the approval waits
      expect((await svc.call('GET', `/v1/approvals/${id}`, { key: human })).body.status).toBe('pending');
      svc.clock.now = soon + 1;
      const read = await svc.call('GET', `/v1/approvals/${id}`, { key: human });
      expect(read.body.status).toBe('expired');
      expect(read.body.cannot_run).toBeUndefined();
      expect((await ask(own, root, C, 'after')).body.error.code).toBe('APPROVAL_REQUIRED');
    } finally {
      svc.clock.now = at;
    }
  });

  it('an ask that raced a revocation of its chain opens nothing; one through an expired chain neither', async () => {
    const { own } = await tenantWithApprover('raced');
    const { root, children } = family(own, [T0 + 3600]);
    const [B] = children as [(typeof children)[0]];
    const first = await ask(own, root, B, 'stored');
    expect(first.body.error.code).toBe('APPROVAL_REQUIRED');
    const request = {
      tenantId: own.id,
      requestedBy: B.holder.did,
      requestedByKey: 'key_raced',
      drChain: [root.hash, B.dr.hash],
      tool: 'crm_export',
      toolServer: TOOL_SERVER,
      cmd: '/mcp/tools/call',
      args: ARGS,
      catalogVersion: first.body.approval.catalog_version as number,
      rule: 'r',
      explanation: 'x',
    };
    // The verify checked the chain before the revocation; its ask comes after it.
    expect((await revokeWithKey(own, B.dr.hash, 'raced')).status).toBe(200);
    const raced = await requestApproval(svc.deps, { ...request, binding: 'sha256:raced', invocationJti: 'raced' });
    expect(raced).toEqual({ kind: 'chain-ended', code: 'RECEIPT_REVOKED', dr: B.dr.hash });
    const at = svc.clock.now;
    svc.clock.now = T0 + 3601;
    try {
      const late = await requestApproval(svc.deps, { ...request, binding: 'sha256:late', invocationJti: 'late' });
      expect(late).toMatchObject({ kind: 'chain-ended', code: 'RECEIPT_EXPIRED' });
    } finally {
      svc.clock.now = at;
    }
    const rows = (await svc.store.db.select().from(approvals)).filter((r) => r.tenantId === own.id);
    expect(rows.map((r) => r.status)).toEqual(['expired']);
  });

  it('a revocation ends an approval a verify statement holds at that moment, once the revocation has committed', async () => {
    const { own } = await tenantWithApprover('held');
    const { root, children } = family(own, [T0 + 3600]);
    const [B] = children as [(typeof children)[0]];
    const id = (await ask(own, root, B, 'held')).body.approval.id as string;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const holder = svc.store.db.transaction(async (tx) => {
      await tx.execute(sql`select 1 from approvals where id = ${id} for update`);
      locked();
      await released;
    });
    await isLocked;
    const revoking = revokeWithKey(own, B.dr.hash, 'held');
    // The revocation commits while the row is held: it does not wait on the row inside its transaction...
    const readStatus = async () =>
      (await svc.call('GET', `/v1/delegations/${encodeURIComponent(B.dr.hash)}`, { key: own.keys.audit })).body.status as string;
    for (let waited = 0; waited < 50 && (await readStatus()) !== 'revoked'; waited++)
      await new Promise((resolve) => setTimeout(resolve, 100));
    const [row] = await svc.store.db.select().from(approvals).where(eq(approvals.id, id));
    expect(row!.status).toBe('pending');
    expect((await svc.call('GET', `/v1/delegations/${encodeURIComponent(B.dr.hash)}`, { key: own.keys.audit })).body.status).toBe(
      'revoked',
    );
    release();
    await holder;
    expect((await revoking).status).toBe(200);
    const [after] = await svc.store.db.select().from(approvals).where(eq(approvals.id, id));
    expect(after!.status).toBe('expired'); // ...and ended it once it had committed
  });
});

describe('an approval whose call cannot run cannot be approved', () => {
  it('through an expired delegation (an approval asked before deadlines were bounded by the chain): 409 naming it (expired_dr); rejecting stays allowed', async () => {
    const { own, human } = await tenantWithApprover('expired');
    const c = buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()], exp: T0 + 60 });
    const asked = await svc.call('POST', '/v1/verify', { key: own.keys.verify, json: c.invoke(ARGS, { iat: T0 }).bundle });
    const id = asked.body.approval.id as string;
    expect(asked.body.approval.expires_at).toBe(T0 + 61);
    // Asked before this release, its deadline was the usual 15 minutes.
    await svc.store.db
      .update(approvals)
      .set({ expiresAt: T0 + 900 })
      .where(eq(approvals.id, id));
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
      const read = await svc.call('GET', `/v1/approvals/${id}`, { key: human });
      expect(read.body).toMatchObject({ status: 'pending', cannot_run: { code: 'RECEIPT_EXPIRED', dr_hash: c.drs[0]!.hash } });
      // The message names no time (explain hides a chain's times from a key that cannot read delegations).
      expect(read.body.cannot_run.message).not.toMatch(/\d{4}-\d{2}-\d{2}|did:key/);
      // Judged in verify's order: the root's trust (C) before time (E).
      await svc.call('DELETE', `/v1/admin/tenants/${own.id}/roots/${encodeURIComponent(own.root.did)}`, { key: svc.adminKey });
      expect((await svc.call('GET', `/v1/approvals/${id}`, { key: human })).body.cannot_run).toMatchObject({ code: 'UNTRUSTED_ROOT' });
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
    expect(approved.body.error.message).not.toContain(own.root.did);
    // Trust can come back: the approval stays pending (and keeps its place under the root's cap).
    const listed = (await svc.call('GET', '/v1/approvals', { key: human })).body.approvals[0];
    expect(listed).toMatchObject({ status: 'pending', cannot_run: { code: 'UNTRUSTED_ROOT', dr_hash: c.drs[0]!.hash } });
    expect(listed.cannot_run.message).not.toContain(own.root.did);
    expect((await svc.call('POST', `/v1/approvals/${id}/reject`, { key: human, json: triple })).body.status).toBe('rejected');
  });
});
