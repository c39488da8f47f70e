/**
 * Human approval gates on real PostgreSQL: a call a rule sends to a human
 * consumes nothing and gets an approval id; an approver decides with the
 * guardrail triple; the approved call goes through once; races between two
 * nodes spend an approval at most once; per-tool rate limits are exact.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, count, eq, sql } from 'drizzle-orm';
import { generateKeyPair } from '../../src/sdk/keys.js';
import type { Policy } from '../../src/protocol/policy.js';
import type { ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { approvals, delegations, denials, invocations, serviceReceipts, toolRateWindows } from '../../src/store/schema/index.js';
import { APPROVAL_TTL_SECONDS, MAX_PENDING_APPROVALS_PER_ROOT } from '../../src/service/approvals.js';
import { rows } from '../../src/store/rows.js';
import type { RawQuery } from '../../src/store/db.js';
import { createApp } from '../../src/service/app.js';
import { buildChain, T0 } from '../support/fixtures.js';
import { twoNodes, type Node } from '../support/nodes.js';
import {
  createTenantKey,
  createTenantKeyWithId,
  setupTenant,
  startTestService,
  type TestService,
  type TestTenant,
} from '../support/service.js';
import { tool } from '../support/tools.js';
import { BatonClient } from '../../src/sdk/client.js';
import { createInvocation, makeBundle } from '../../src/sdk/records.js';

let svc: TestService;
let tenant: TestTenant;
let approver: string;
let nodes: [Node, Node];

const EXPORT = tool('crm_export', { type: 'write', blast_radius: 'organizational', action_type: 'crm:export' });
const LIMITED = tool('sms_send', { rate_limit_per_minute: 7, action_type: 'sms:send' });
const PRUNED = tool('fax_send', { rate_limit_per_minute: 5, action_type: 'fax:send' });
const ARGS = { tool: 'crm_export', estimated_cost_usd: 0.01, pii_access: false, write_access: true };
const POLICY: Policy = { allowed_tools: ['*'], max_cost_usd: 1, max_calls: 1000, write_access: true };

beforeAll(async () => {
  svc = await startTestService({ pool: 10 });
  tenant = await setupTenant(svc);
  const k = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
    key: svc.adminKey,
    json: { scopes: ['approve'], name: 'human' },
  });
  approver = k.body.key;
  const published = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
    key: svc.adminKey,
    json: { base_version: 0, strict: true, tools: [EXPORT, LIMITED, PRUNED] satisfies ToolDeclaration[] }, // default rules
  });
  expect(published.status).toBe(201);
  nodes = await twoNodes(svc);
});
afterAll(async () => {
  for (const n of nodes ?? []) await n.close();
  await svc?.close();
});

function chain() {
  return buildChain([POLICY, POLICY], { keys: [tenant.root, generateKeyPair(), generateKeyPair()] });
}

async function verify(json: unknown) {
  return svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json });
}

const decide = (id: string, what: 'approve' | 'reject', json: unknown, key = approver) =>
  svc.call('POST', `/v1/approvals/${id}/${what}`, { key, json });

const triple = { actor: 'alice@example.com', confirm: true, reason: 'Export agreed with legal.' };

async function callsUsed(hash: string): Promise<number> {
  const [row] = await svc.store.db.select().from(delegations).where(eq(delegations.hash, hash));
  return row!.callsUsed;
}

describe('require_approval', () => {
  it('waits for a human, consumes nothing, then allows the same call once', async () => {
    const c = chain();
    const { bundle, invocation } = c.invoke(ARGS, { iat: T0 });
    const first = await verify(bundle);
    expect(first.status).toBe(403);
    expect(first.body.error.code).toBe('APPROVAL_REQUIRED');
    const id = first.body.approval.id as string;
    expect(first.body.approval).toMatchObject({ status: 'pending', tool: 'crm_export', rule: 'organizational-blast-radius' });
    expect(first.body.violations[0]).toMatchObject({ code: 'APPROVAL_REQUIRED', actual: id });
    expect(await callsUsed(c.drs[0]!.hash)).toBe(0);
    const [inv] = await svc.store.db.select({ n: count() }).from(invocations).where(eq(invocations.jti, invocation.payload.jti));
    expect(inv!.n).toBe(0);

    // Retrying while waiting finds the same approval.
    expect((await verify(bundle)).body.approval.id).toBe(id);
    const listed = await svc.call('GET', '/v1/approvals?status=pending', { key: approver });
    expect(listed.body.approvals.map((a: { id: string }) => a.id)).toContain(id);

    // The guardrail triple, and the approve scope.
    for (const bad of [
      { ...triple, confirm: false },
      { ...triple, reason: '   ' },
      { ...triple, reason: '\u200b' },
      { actor: 'alice', confirm: true },
      { ...triple, extra: 1 },
    ]) {
      const r = await decide(id, 'approve', bad);
      expect(r.status, JSON.stringify(bad)).toBe(400);
    }
    expect((await decide(id, 'approve', triple, tenant.keys.verify)).status).toBe(403);
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approver })).body.status).toBe('pending');

    const approved = await decide(id, 'approve', triple);
    expect(approved.status).toBe(200);
    expect(approved.body).toMatchObject({ status: 'approved', decision: { actor: 'alice@example.com', reason: triple.reason } });
    expect((await decide(id, 'reject', triple)).status).toBe(409);

    const allowed = await verify(bundle);
    expect(allowed.status).toBe(200);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(1);
    const data = JSON.parse(Buffer.from(allowed.body.service_receipt.jws.split('.')[1], 'base64url').toString()).data;
    expect(data).toMatchObject({ approval_id: id, catalog_version: 1 });
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approver })).body.status).toBe('used');
    const kinds = await svc.store.db
      .select({ kind: serviceReceipts.kind })
      .from(serviceReceipts)
      .where(and(eq(serviceReceipts.tenantId, tenant.id), eq(serviceReceipts.subject, id)));
    expect(kinds.map((k) => k.kind).sort()).toEqual(['approval.approved', 'approval.requested']);

    // The same call again needs a new approval; the spent one cannot be named.
    const again = c.invoke(ARGS, { iat: T0 }).bundle;
    const next = await verify(again);
    expect(next.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(next.body.approval.id).not.toBe(id);
    const named = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: { ...again, approval_id: id } });
    expect(named.body.error.code).toBe('APPROVAL_USED');
  });

  it('an approval cannot be spent on another call, after rejection, or after its deadline', async () => {
    const c = chain();
    const a = await verify(c.invoke(ARGS, { iat: T0 }).bundle);
    const idA = a.body.approval.id as string;
    await decide(idA, 'approve', triple);
    const other = c.invoke({ ...ARGS, estimated_cost_usd: 0.02 }, { iat: T0 }).bundle;
    const mismatch = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: { ...other, approval_id: idA } });
    expect(mismatch.body.error.code).toBe('APPROVAL_MISMATCH');
    // What differs, never what the approved call held.
    expect(mismatch.body.violations[0].message).toBe(`Approval ${idA} does not cover this call: it was granted for other arguments.`);
    // Through another chain (another agent holding the id): no detail, which would tell it whether
    // its guess of the approved arguments was right.
    const guessed = await svc.call('POST', '/v1/verify', {
      key: tenant.keys.verify,
      json: { ...chain().invoke({ ...ARGS, estimated_cost_usd: 0.02 }, { iat: T0 }).bundle, approval_id: idA },
    });
    expect(guessed.body.error.code).toBe('APPROVAL_MISMATCH');
    expect(guessed.body.violations[0].message).toBe(`Approval ${idA} does not cover this call: it was granted for another call.`);
    // Text no approval can have is the caller's mistake: a 400, and no denial stored.
    const [before] = await svc.store.db.select({ n: count() }).from(denials);
    for (const junk of ['junk', 'apr_nobody', `APR_${'0'.repeat(32)}`, `apr_${'0'.repeat(33)}`]) {
      const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: { ...other, approval_id: junk } });
      expect([r.status, r.body.error?.code], junk).toEqual([400, 'INVALID_REQUEST']);
      expect(JSON.stringify(r.body.error.details), junk).toContain('approval_id');
    }
    expect((await svc.store.db.select({ n: count() }).from(denials))[0]).toEqual(before);

    const b = await verify(c.invoke({ ...ARGS, estimated_cost_usd: 0.03 }, { iat: T0 }).bundle);
    const idB = b.body.approval.id as string;
    expect((await decide(idB, 'reject', { ...triple, reason: 'Not this quarter.' })).body.status).toBe('rejected');
    const rejected = await svc.call('POST', '/v1/verify', {
      key: tenant.keys.verify,
      json: { ...c.invoke({ ...ARGS, estimated_cost_usd: 0.03 }, { iat: T0 }).bundle, approval_id: idB },
    });
    expect(rejected.body.error.code).toBe('APPROVAL_REJECTED');
    // Any call it was not granted for learns only that: not that it was rejected, used, or waits.
    const e = await verify(c.invoke({ ...ARGS, estimated_cost_usd: 0.05 }, { iat: T0 }).bundle);
    for (const id of [idB, idA, e.body.approval.id as string]) {
      for (const elsewhere of [c.invoke({ ...ARGS, estimated_cost_usd: 0.06 }, { iat: T0 }), chain().invoke(ARGS, { iat: T0 })]) {
        const named = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: { ...elsewhere.bundle, approval_id: id } });
        expect(named.body.error.code, id).toBe('APPROVAL_MISMATCH');
      }
    }

    const d = await verify(c.invoke({ ...ARGS, estimated_cost_usd: 0.04 }, { iat: T0 }).bundle);
    const idD = d.body.approval.id as string;
    svc.clock.now += APPROVAL_TTL_SECONDS;
    try {
      const late = await decide(idD, 'approve', triple);
      expect(late.status).toBe(403);
      expect(late.body.error.code).toBe('APPROVAL_EXPIRED');
      // A decision route is no verify step: no pipeline block letter in its details.
      expect(late.body.error.details).toEqual({ approval_id: idD, status: 'expired' });
      const lateReject = (await decide(idD, 'reject', triple)).body.error;
      expect([lateReject.code, lateReject.details]).toEqual(['APPROVAL_EXPIRED', { approval_id: idD, status: 'expired' }]);
      const deadline = d.body.approval.expires_at as number;
      expect(late.body.error.message).toContain(
        `expired at ${new Date(deadline * 1000).toISOString().replace('.000Z', 'Z')} (unix ${deadline})`,
      );
      // Approved in time but used late: expired too.
      const used = await svc.call('POST', '/v1/verify', {
        key: tenant.keys.verify,
        json: { ...c.invoke(ARGS, { iat: svc.clock.now }).bundle, approval_id: idA },
      });
      expect(used.body.error.code).toBe('APPROVAL_EXPIRED');
      // A verify keeps it.
      expect(used.body.error.block).toBe('G');
    } finally {
      svc.clock.now -= APPROVAL_TTL_SECONDS;
    }
  });

  it('two nodes, many concurrent retries of one approved call: exactly one is allowed', async () => {
    const c = chain();
    const first = await verify(c.invoke(ARGS, { iat: T0 }).bundle);
    const id = first.body.approval.id as string;
    await decide(id, 'approve', triple);
    const attempts = Array.from({ length: 16 }, (_, i) => {
      const node = nodes[i % 2]!;
      // Fresh invocations of the approved call (each its own jti), half naming the approval.
      const bundle = c.invoke(ARGS, { iat: T0 }).bundle;
      return node.post('/v1/verify', tenant.keys.verify, i % 4 < 2 ? { ...bundle, approval_id: id } : bundle);
    });
    const answers = await Promise.all(attempts);
    expect(answers.filter((r) => r.status === 200)).toHaveLength(1);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(1);
    const [row] = await svc.store.db.select().from(approvals).where(eq(approvals.id, id));
    expect(row!.status).toBe('used');
  });

  it('approve racing expiry and revocation across two nodes never allows a call it should not', async () => {
    for (let round = 0; round < 4; round++) {
      const c = chain();
      const first = await verify(c.invoke(ARGS, { iat: T0 }).bundle);
      const id = first.body.approval.id as string;
      await decide(id, 'approve', triple);
      // Revoke the leaf on one node while the other retries the approved call.
      const [revoke, call] = await Promise.all([
        nodes[round % 2]!.post(`/v1/delegations/${encodeURIComponent(c.drs[1]!.hash)}/revoke`, tenant.keys.issue, {
          confirm: true,
          reason: 'compromised',
        }),
        nodes[(round + 1) % 2]!.post('/v1/verify', tenant.keys.verify, c.invoke(ARGS, { iat: T0 }).bundle),
      ]);
      expect(revoke.status).toBe(200);
      const [row] = await svc.store.db.select().from(approvals).where(eq(approvals.id, id));
      // Either the call won (before the revocation) and spent the approval, or it lost and spent nothing.
      if (call.status === 200) expect(row!.status).toBe('used');
      else {
        expect(call.body.error.code).toBe('RECEIPT_REVOKED');
        expect(row!.status).toBe('approved');
      }
    }
    // Approve racing the deadline: at the deadline both approve and use refuse.
    const c = chain();
    const id = (await verify(c.invoke(ARGS, { iat: T0 }).bundle)).body.approval.id as string;
    svc.clock.now += APPROVAL_TTL_SECONDS;
    try {
      const [a, b] = await Promise.all([
        nodes[0].post(`/v1/approvals/${id}/approve`, approver, triple),
        nodes[1].post(`/v1/approvals/${id}/approve`, approver, triple),
      ]);
      expect([a.status, b.status]).toEqual([403, 403]);
    } finally {
      svc.clock.now -= APPROVAL_TTL_SECONDS;
    }
    const [x, y] = await Promise.all([
      nodes[0].post(`/v1/approvals/${id}/approve`, approver, triple),
      nodes[1].post(`/v1/approvals/${id}/reject`, approver, triple),
    ]);
    expect([x.status, y.status].sort()).toEqual([200, 409]);
  });
});

describe('an approval whose chain was revoked', () => {
  it('ends with the revocation (reads expired, cannot be decided); one the revocation missed cannot be approved, and can still be rejected', async () => {
    const c = chain();
    const id = (await verify(c.invoke(ARGS, { iat: T0 }).bundle)).body.approval.id as string;
    svc.clock.now += 5;
    try {
      const revoked = await svc.call('POST', `/v1/delegations/${encodeURIComponent(c.drs[0]!.hash)}/revoke`, {
        key: tenant.keys.issue,
        json: { confirm: true, reason: 'root withdrawn' },
      });
      expect(revoked.status).toBe(200);
      const [ended] = await svc.store.db.select().from(approvals).where(eq(approvals.id, id));
      expect(ended).toMatchObject({ status: 'expired', expiresAt: svc.clock.now });
      const late = await decide(id, 'approve', triple);
      expect(late.status, JSON.stringify(late.body)).toBe(403);
      expect(late.body.error.code).toBe('APPROVAL_EXPIRED');

      // A pending one the revocation did not end (asked before this release): 409 naming the revoked delegation.
      await svc.store.db
        .update(approvals)
        .set({ status: 'pending', expiresAt: T0 + 900 })
        .where(eq(approvals.id, id));
      const approved = await decide(id, 'approve', triple);
      expect(approved.status, JSON.stringify(approved.body)).toBe(409);
      expect(approved.body.error).toMatchObject({
        code: 'CONFLICT',
        details: { approval_id: id, status: 'pending', revoked_dr: c.drs[0]!.hash },
      });
      expect(approved.body.error.message).toContain('was revoked');
      const [row] = await svc.store.db.select().from(approvals).where(eq(approvals.id, id));
      expect(row!.status).toBe('pending');
      const rejected = await decide(id, 'reject', triple);
      expect(rejected.status, JSON.stringify(rejected.body)).toBe(200);
      expect(rejected.body.status).toBe('rejected');
    } finally {
      svc.clock.now -= 5;
    }
  });
});

describe('what an approval covers', () => {
  it('the approver sees the call: its command and its args as signed', async () => {
    const c = chain();
    const args = { ...ARGS, path: '/etc/target' };
    const { bundle } = c.invoke(args, { iat: T0 });
    const asked = await verify(bundle);
    expect(asked.body.error.code).toBe('APPROVAL_REQUIRED');
    const shown = await svc.call('GET', `/v1/approvals/${asked.body.approval.id}`, { key: approver });
    expect(shown.status).toBe(200);
    expect(shown.body.cmd).toBe('/mcp/tools/call');
    expect(shown.body.args).toEqual(args);
    const listed = await svc.call('GET', '/v1/approvals?status=pending', { key: approver });
    expect(listed.body.approvals.find((a: { id: string }) => a.id === asked.body.approval.id)?.args).toEqual(args);
  });

  it('an approval of one command does not run the same args under a sub-path of it', async () => {
    const c = chain();
    const asked = await verify(c.invoke(ARGS, { iat: T0 }).bundle);
    const approvalId = asked.body.approval.id as string;
    await decide(approvalId, 'approve', triple);

    // The DR's cmd covers its sub-paths, so this invocation verifies (its cmd names the tool it
    // calls); only the approval, given for the other cmd, must not cover it.
    const other = c.invoke(ARGS, { iat: T0, cmd: `/mcp/tools/call/${ARGS.tool}` }).bundle;
    const named = await svc.call('POST', '/v1/verify', {
      key: tenant.keys.verify,
      json: { ...(other as object), approval_id: approvalId },
    });
    expect(named.status).toBe(403);
    expect(named.body.error.code).toBe('APPROVAL_MISMATCH');
    expect(named.body.violations[0].message).toBe(`Approval ${approvalId} does not cover this call: it was granted for another command.`);
    const unnamed = await verify(other);
    expect(unnamed.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(unnamed.body.approval.id).not.toBe(approvalId);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(0);
    // The approved call itself still runs once.
    expect((await verify(c.invoke(ARGS, { iat: T0 }).bundle)).status).toBe(200);
  });
});

describe('a rejected call', () => {
  it('is answered with its rejection until the approval deadline, not asked again; then it may be asked anew', async () => {
    const c = chain();
    const args = { ...ARGS, estimated_cost_usd: 0.05 };
    const asked = await verify(c.invoke(args, { iat: T0 }).bundle);
    const id = asked.body.approval.id as string;
    expect((await decide(id, 'reject', { ...triple, reason: 'Not this quarter.' })).body.status).toBe('rejected');
    const pendingBefore = (await svc.call('GET', '/v1/approvals?status=pending', { key: approver })).body.approvals.length;

    // The same call re-sent (a fresh jti, no approval named): told no, and no new approval for a human.
    const again = await verify(c.invoke(args, { iat: T0 }).bundle);
    expect(again.status).toBe(403);
    expect(again.body.error.code).toBe('APPROVAL_REJECTED');
    expect(again.body.violations[0]).toMatchObject({ actual: id });
    expect(again.body.violations[0].message).toContain('Not this quarter.');
    expect(again.body.approval).toMatchObject({ id, status: 'rejected' });
    const dry = await svc.call('POST', '/v1/verify/dry-run', {
      key: tenant.keys.verify,
      json: { ...(c.invoke(args, { iat: T0 }).bundle as object) },
    });
    expect(dry.body.error.code).toBe('APPROVAL_REJECTED');
    expect((await svc.call('GET', '/v1/approvals?status=pending', { key: approver })).body.approvals.length).toBe(pendingBefore);

    // Past the rejected approval's deadline the call may ask again.
    svc.clock.now += APPROVAL_TTL_SECONDS;
    try {
      const later = await verify(c.invoke(args, { iat: svc.clock.now }).bundle);
      expect(later.body.error.code).toBe('APPROVAL_REQUIRED');
      expect(later.body.approval.id).not.toBe(id);
    } finally {
      svc.clock.now -= APPROVAL_TTL_SECONDS;
    }
  });
});

describe('a rejected call and a retry of its earlier allow', () => {
  it('the retry is answered as the original allow, in a dry run as for real', async () => {
    const c = chain();
    const args = { ...ARGS, estimated_cost_usd: 0.06 };
    const { bundle } = c.invoke(args, { iat: T0 });
    const first = await verify(bundle);
    await decide(first.body.approval.id as string, 'approve', triple);
    expect((await verify(bundle)).body.retry).toBe(false);
    // The same call again, rejected this time.
    const second = await verify(c.invoke(args, { iat: T0 }).bundle);
    await decide(second.body.approval.id as string, 'reject', { ...triple, reason: 'Once was enough.' });

    const dry = await svc.call('POST', '/v1/verify/dry-run', { key: tenant.keys.verify, json: { ...(bundle as object) } });
    expect([dry.status, dry.body.retry]).toEqual([200, true]);
    const real = await verify(bundle);
    expect([real.status, real.body.retry]).toEqual([200, true]);
  });
});

describe('approvals and catalog versions', () => {
  it('an approval made under one catalog version does not run the call under the next', async () => {
    const c = chain();
    const asked = await verify(c.invoke(ARGS, { iat: T0 }).bundle);
    const approvalId = asked.body.approval.id as string;
    await decide(approvalId, 'approve', triple);

    // The operator publishes again (the same tools here; a real change could redeclare the tool or its rules).
    const current = await svc.call('GET', '/v1/tools', { key: tenant.keys.verify });
    const republished = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
      key: svc.adminKey,
      json: { base_version: current.body.version, strict: true, tools: [EXPORT, LIMITED, PRUNED] },
    });
    expect(republished.status).toBe(201);

    const named = await svc.call('POST', '/v1/verify', {
      key: tenant.keys.verify,
      json: { ...(c.invoke(ARGS, { iat: T0 }).bundle as object), approval_id: approvalId },
    });
    expect(named.body.error.code).toBe('APPROVAL_MISMATCH');
    // The very call it approved: only the catalog differs, and the answer says so (the generic text
    // told the caller to retry exactly what it had just sent).
    expect(named.body.violations[0].message).toBe(
      `Approval ${approvalId} does not cover this call: it was granted under tool catalog version ${current.body.version}, and the catalog is now version ${republished.body.version}: an approval covers only the catalog it was granted under, so send the call without approval_id to ask again.`,
    );
    const unnamed = await verify(c.invoke(ARGS, { iat: T0 }).bundle);
    expect(unnamed.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(unnamed.body.approval.id).not.toBe(approvalId);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(0);
  });

  it('a node deciding from a catalog another node just replaced opens no approval under it: the call is decided under the new one', async () => {
    const { own } = await tenantWithApprover('stale gate');
    const c = buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()] });
    const [, nodeB] = nodes;
    // Node B reads version 1 (EXPORT to a human) and keeps it in its cache.
    const warm = await nodeB.post('/v1/verify', own.keys.verify, c.invoke({ ...ARGS, note: 'warm' }, { iat: T0 }).bundle);
    expect(warm.body.error.code).toBe('APPROVAL_REQUIRED');
    // Another node publishes version 2: every call is now denied by a rule.
    await publishExport(own.id, 1, DENY_EVERY_CALL);
    const during = await nodeB.post('/v1/verify', own.keys.verify, c.invoke({ ...ARGS, note: 'right after' }, { iat: T0 }).bundle);
    expect(during.body.error.code).toBe('RULE_DENIED');
    const opened = await svc.store.db.select({ v: approvals.catalogVersion }).from(approvals).where(eq(approvals.tenantId, own.id));
    expect(opened).toEqual([{ v: 1 }]); // the warm-up's alone
  });

  it('a node refusing from a catalog another node just replaced decides again under the new one', async () => {
    const { own } = await tenantWithApprover('stale refusal');
    await publishExport(own.id, 1, DENY_EVERY_CALL);
    const c = buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()] });
    const [, nodeB] = nodes;
    // Node B reads version 2 (every call denied) and keeps it in its cache.
    const warm = await nodeB.post('/v1/verify', own.keys.verify, c.invoke({ ...ARGS, note: 'warm' }, { iat: T0 }).bundle);
    expect(warm.body.error.code).toBe('RULE_DENIED');
    // Another node publishes version 3 without the rule: EXPORT goes to a human again.
    await publishExport(own.id, 2);
    const after = await nodeB.post('/v1/verify', own.keys.verify, c.invoke({ ...ARGS, note: 'right after' }, { iat: T0 }).bundle);
    expect(after.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(after.body.approval).toMatchObject({ catalog_version: 3 });
  });

  it('after a publish, approvals asked under the old catalog hold no place and cannot be approved: the same calls ask again', async () => {
    const { own, human } = await tenantWithApprover('republished');
    // The root to A, A to B with 2 calls: two waiting approvals fill B's places.
    const c = buildChain([POLICY, { ...POLICY, max_calls: 2 }], { keys: [own.root, generateKeyPair(), generateKeyPair()] });
    const ask = (note: string) =>
      svc.call('POST', '/v1/verify', { key: own.keys.verify, json: c.invoke({ ...ARGS, note }, { iat: T0 }).bundle });
    const [first, second] = [await ask('first'), await ask('second')];
    expect([first.body.error.code, second.body.error.code]).toEqual(['APPROVAL_REQUIRED', 'APPROVAL_REQUIRED']);
    expect((await ask('third')).body.error.code).toBe('APPROVALS_PENDING_LIMIT');

    await publishExport(own.id, 1);
    // Both calls ask again under version 2: their old approvals, which can never run, no longer fill B's places.
    const [firstAgain, secondAgain] = [await ask('first'), await ask('second')];
    expect([firstAgain.body.error.code, secondAgain.body.error.code]).toEqual(['APPROVAL_REQUIRED', 'APPROVAL_REQUIRED']);
    expect(secondAgain.body.approval).toMatchObject({ catalog_version: 2 });
    expect(secondAgain.body.approval.id).not.toBe(second.body.approval.id);
    // The cap still holds among the current ones, in a dry run as for real.
    expect((await ask('third')).body.error.code).toBe('APPROVALS_PENDING_LIMIT');
    const dry = await svc.call('POST', '/v1/verify/dry-run', {
      key: own.keys.verify,
      json: c.invoke({ ...ARGS, note: 'third' }, { iat: T0 }).bundle,
    });
    expect(dry.body.error.code).toBe('APPROVALS_PENDING_LIMIT');

    // An approver who approves an old one is told it can never run, and what to do; rejecting it works.
    const old = second.body.approval.id as string;
    const refused = await decide(old, 'approve', triple, human);
    expect(refused.status).toBe(409);
    expect(refused.body.error.message).toContain(`asked under tool catalog version 1, and version 2 has replaced it`);
    expect(refused.body.error.details).toMatchObject({
      approval_id: old,
      status: 'pending',
      catalog_version: 1,
      current_catalog_version: 2,
    });
    expect((await svc.call('GET', `/v1/approvals/${old}`, { key: human })).body.status).toBe('pending');
    expect((await decide(old, 'reject', triple, human)).status).toBe(200);
    expect((await decide(secondAgain.body.approval.id as string, 'approve', triple, human)).status).toBe(200);
  });
});

describe('separation of duties', () => {
  it('the API key whose verify asked for an approval cannot decide it, even holding the approve scope', async () => {
    const both = await createTenantKey(svc, tenant.id, ['verify', 'approve'], 'tool server that also approves');
    const c = chain();
    const { bundle } = c.invoke(ARGS, { iat: T0 });
    const asked = await svc.call('POST', '/v1/verify', { key: both, json: bundle });
    expect(asked.body.error.code).toBe('APPROVAL_REQUIRED');
    const id = asked.body.approval.id as string;
    for (const what of ['approve', 'reject'] as const) {
      const self = await decide(id, what, triple, both);
      expect(self.status, what).toBe(403);
      expect(self.body.error.code, what).toBe('SELF_APPROVAL');
    }
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approver })).body.status).toBe('pending');
    expect((await svc.call('POST', '/v1/verify', { key: both, json: bundle })).body.error.code).toBe('APPROVAL_REQUIRED');
    expect(await callsUsed(c.drs[0]!.hash)).toBe(0);
    // Another approver may; then the call runs once.
    expect((await decide(id, 'approve', triple)).body.status).toBe('approved');
    expect((await svc.call('POST', '/v1/verify', { key: both, json: bundle })).status).toBe(200);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(1);
  });

  it('a key that asked second, while the approval was pending, cannot decide it either', async () => {
    const both = await createTenantKey(svc, tenant.id, ['verify', 'approve'], 'second asker that also approves');
    const c = chain();
    const first = await verify(c.invoke(ARGS, { iat: T0 }).bundle); // the tenant's verify key opens it
    expect(first.body.error.code).toBe('APPROVAL_REQUIRED');
    const id = first.body.approval.id as string;
    // The same call again, by the other key: the same approval, now asked for by both.
    const second = await svc.call('POST', '/v1/verify', { key: both, json: c.invoke(ARGS, { iat: T0 }).bundle });
    expect(second.body.approval.id).toBe(id);
    for (const what of ['approve', 'reject'] as const) {
      const self = await decide(id, what, triple, both);
      expect(self.status, what).toBe(403);
      expect(self.body.error.code, what).toBe('SELF_APPROVAL');
    }
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approver })).body.status).toBe('pending');
    expect((await decide(id, 'approve', triple)).body.status).toBe('approved');
  });

  it('a key rotated from the key that asked is the same holder: it cannot decide the approval (held grants judge the same lineage)', async () => {
    const asker = await createTenantKeyWithId(svc, tenant.id, ['verify', 'approve'], 'rotated asker');
    const c = chain();
    const asked = await svc.call('POST', '/v1/verify', { key: asker.key, json: c.invoke(ARGS, { iat: T0 }).bundle });
    const id = asked.body.approval.id as string;
    const rotated = await svc.call('POST', `/v1/admin/api-keys/${asker.id}/rotate`, { key: svc.adminKey, json: { grace_seconds: 600 } });
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(201);
    const successor = rotated.body.key.key as string;
    const self = await decide(id, 'approve', triple, successor);
    expect(self.status).toBe(403);
    expect(self.body.error.code).toBe('SELF_APPROVAL');
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approver })).body.status).toBe('pending');
  });

  it('a key that sent the call again naming its waiting approval (approval_id) asked for it too, and cannot decide it', async () => {
    const both = await createTenantKey(svc, tenant.id, ['verify', 'approve'], 'retrier that also approves');
    const c = chain();
    const first = await verify(c.invoke(ARGS, { iat: T0 }).bundle);
    const id = first.body.approval.id as string;
    const named = await svc.call('POST', '/v1/verify', {
      key: both,
      json: { ...(c.invoke(ARGS, { iat: T0 }).bundle as object), approval_id: id },
    });
    expect(named.body.error.code).toBe('APPROVAL_REQUIRED');
    const self = await decide(id, 'approve', triple, both);
    expect(self.status).toBe(403);
    expect(self.body.error.code).toBe('SELF_APPROVAL');
    // Naming it in a dry run, or for a different call, asks for nothing.
    const bystander = await createTenantKey(svc, tenant.id, ['verify', 'approve'], 'dry runner that also approves');
    const dry = await svc.call('POST', '/v1/verify/dry-run', {
      key: bystander,
      json: { ...(c.invoke(ARGS, { iat: T0 }).bundle as object), approval_id: id },
    });
    expect(dry.status).toBe(403);
    const other = await svc.call('POST', '/v1/verify', {
      key: bystander,
      json: { ...(c.invoke({ ...ARGS, note: 'another call' }, { iat: T0 }).bundle as object), approval_id: id },
    });
    expect(other.status).toBe(403); // still waiting: refused, whichever call it names
    expect((await decide(id, 'approve', triple, bystander)).body.status).toBe('approved');
  });

  it('the key that decided an approval cannot spend it, nor a key of its rotation lineage; the key that asked can', async () => {
    const decider = await createTenantKeyWithId(svc, tenant.id, ['verify', 'approve'], 'approver that also verifies');
    const c = chain();
    const asked = await verify(c.invoke(ARGS, { iat: T0 }).bundle);
    expect(asked.body.error.code).toBe('APPROVAL_REQUIRED');
    const id = asked.body.approval.id as string;
    expect((await decide(id, 'approve', triple, decider.key)).body.status).toBe('approved');
    const rotated = await svc.call('POST', `/v1/admin/api-keys/${decider.id}/rotate`, { key: svc.adminKey, json: { grace_seconds: 600 } });
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(201);
    const successor = rotated.body.key.key as string;
    const bundle = c.invoke(ARGS, { iat: T0 }).bundle as object;
    const attempts = [
      { who: 'decider', key: decider.key, json: bundle },
      { who: 'decider naming it', key: decider.key, json: { ...bundle, approval_id: id } },
      { who: 'decider, dry run', key: decider.key, json: bundle, query: '/dry-run' },
      { who: "decider's successor", key: successor, json: bundle },
    ];
    for (const a of attempts) {
      const spent = await svc.call('POST', `/v1/verify${a.query ?? ''}`, { key: a.key, json: a.json });
      expect(spent.status, a.who).toBe(403);
      expect(spent.body.error.code, `${a.who}: ${JSON.stringify(spent.body.error)}`).toBe('APPROVAL_DECIDED_BY_CALLER');
    }
    expect(await callsUsed(c.drs[0]!.hash)).toBe(0);
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approver })).body.status).toBe('approved');
    const ran = await verify(bundle);
    expect(ran.status, JSON.stringify(ran.body)).toBe(200);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(1);
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approver })).body.status).toBe('used');
  });

  it('a sibling in the rotation family is the same holder: a successor minted after another was revoked cannot spend its decision', async () => {
    // The documented recovery (revoke the successor, rotate again) leaves two successors of one key.
    const first = await createTenantKeyWithId(svc, tenant.id, ['verify', 'approve'], 'approver rotated twice');
    const rotate = (id: string) => svc.call('POST', `/v1/admin/api-keys/${id}/rotate`, { key: svc.adminKey, json: { grace_seconds: 600 } });
    const lost = await rotate(first.id);
    expect(lost.status).toBe(201);
    const c = chain();
    const asked = await verify(c.invoke(ARGS, { iat: T0 }).bundle);
    const id = asked.body.approval.id as string;
    expect((await decide(id, 'approve', triple, lost.body.key.key as string)).body.status).toBe('approved');
    expect((await svc.call('DELETE', `/v1/admin/api-keys/${lost.body.key.id}`, { key: svc.adminKey })).status).toBe(204);
    const sibling = await rotate(first.id);
    expect(sibling.status, JSON.stringify(sibling.body)).toBe(201);
    const spent = await svc.call('POST', '/v1/verify', { key: sibling.body.key.key as string, json: c.invoke(ARGS, { iat: T0 }).bundle });
    expect(spent.status).toBe(403);
    expect(spent.body.error.code).toBe('APPROVAL_DECIDED_BY_CALLER');
    expect(await callsUsed(c.drs[0]!.hash)).toBe(0);
  });
});

describe('retries and replays of an approval-gated call', () => {
  /** The tenant's approvals of one call (by its binding's chain and args), as stored. */
  async function approvalsOfChain(leaf: string) {
    return (await svc.store.db.select().from(approvals).where(eq(approvals.tenantId, tenant.id))).filter(
      (a) => a.drChain[a.drChain.length - 1] === leaf,
    );
  }
  async function denialsOf(jti: string): Promise<number> {
    const [row] = await svc.store.db
      .select({ n: count() })
      .from(denials)
      .where(and(eq(denials.tenantId, tenant.id), eq(denials.jti, jti)));
    return row!.n;
  }
  async function allowedOnce(): Promise<{
    c: ReturnType<typeof chain>;
    bundle: unknown;
    jti: string;
    receiptId: number;
    approvalId: string;
  }> {
    const c = chain();
    const { bundle, invocation } = c.invoke(ARGS, { iat: T0 });
    const asked = await verify(bundle);
    expect(asked.body.error.code).toBe('APPROVAL_REQUIRED');
    const approvalId = asked.body.approval.id as string;
    await decide(approvalId, 'approve', triple);
    const allowed = await verify(bundle);
    expect(allowed.status).toBe(200);
    expect(allowed.body.retry).toBe(false);
    return { c, bundle, jti: invocation.payload.jti, receiptId: allowed.body.service_receipt.id as number, approvalId };
  }

  it("the same key's retry gets the original allow; it asks no human and records no denial", async () => {
    const { c, bundle, jti, receiptId, approvalId } = await allowedOnce();
    const leaf = c.drs[c.drs.length - 1]!.hash;
    const before = await approvalsOfChain(leaf);
    const deniedBefore = await denialsOf(jti);

    const retried = await verify(bundle);
    expect(retried.status).toBe(200);
    expect(retried.body.retry).toBe(true);
    expect(retried.body.service_receipt.id).toBe(receiptId);
    // Nothing asked, nothing counted, nothing refused: the spent approval is the only one.
    expect((await approvalsOfChain(leaf)).map((a) => [a.id, a.status])).toEqual(before.map((a) => [a.id, a.status]));
    expect(before.map((a) => [a.id, a.status])).toEqual([[approvalId, 'used']]);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(1);
    expect(await denialsOf(jti)).toBe(deniedBefore);

    // A dry run of the retry says the same, and writes nothing either.
    const dry = await svc.call('POST', '/v1/verify/dry-run', { key: tenant.keys.verify, json: { ...(bundle as object) } });
    expect(dry.status).toBe(200);
    expect(dry.body.retry).toBe(true);
    expect(await approvalsOfChain(leaf)).toHaveLength(1);
  });

  it('another key re-sending it gets REPLAY_DETECTED, and no approval is opened for it', async () => {
    const { c, bundle } = await allowedOnce();
    const leaf = c.drs[c.drs.length - 1]!.hash;
    const other = await createTenantKey(svc, tenant.id, ['verify'], 'another tool server');
    const replayed = await svc.call('POST', '/v1/verify', { key: other, json: bundle });
    expect(replayed.status).toBe(403);
    expect(replayed.body.error.code).toBe('REPLAY_DETECTED');
    expect((await approvalsOfChain(leaf)).map((a) => a.status)).toEqual(['used']);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(1);
  });

  it('a duplicate that asks while the original spends the approval gets that allow, and opens no approval', async () => {
    const c = chain();
    const { bundle, invocation } = c.invoke(ARGS, { iat: T0 });
    const leaf = c.drs[c.drs.length - 1]!.hash;
    const asked = await verify(bundle);
    const approvalId = asked.body.approval.id as string;
    await decide(approvalId, 'approve', triple);

    // A second node whose probe (the statement sent with no allow receipt) is answered "not used
    // yet", and only then the original call runs to its allow on the first node: the duplicate then
    // finds the approval spent, the window in which it used to open a new one.
    let original: Awaited<ReturnType<typeof verify>> | undefined;
    const jti = invocation.payload.jti;
    const query: RawQuery = async (text, params) => {
      const answer = await svc.store.query(text, params);
      const items = params[1];
      if (original === undefined && typeof items === 'string' && items.includes(jti) && items.includes('"rjws":null')) {
        original = await verify(bundle);
      }
      return answer;
    };
    const racing = createApp({ ...svc.deps, store: { ...svc.deps.store, query } });
    const duplicate = await racing.request('/v1/verify', {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.keys.verify}`, 'content-type': 'application/json' },
      body: JSON.stringify(bundle),
    });
    expect(original?.status).toBe(200);
    expect(original?.body.retry).toBe(false);
    const body = (await duplicate.json()) as { retry: boolean; service_receipt: { id: number } };
    expect(duplicate.status).toBe(200);
    expect(body.retry).toBe(true);
    expect(body.service_receipt.id).toBe(original?.body.service_receipt.id);
    expect((await approvalsOfChain(leaf)).map((a) => [a.id, a.status])).toEqual([[approvalId, 'used']]);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(1);
  });

  it('a fresh call with the same arguments after a retry still needs a new approval', async () => {
    const { c, bundle } = await allowedOnce();
    expect((await verify(bundle)).body.retry).toBe(true);
    // Before the fix the retry opened an approval; approved, it then let this call through unasked.
    const fresh = await verify(c.invoke(ARGS, { iat: T0 }).bundle);
    expect(fresh.status).toBe(403);
    expect(fresh.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(fresh.body.approval.status).toBe('pending');
    expect(await callsUsed(c.drs[0]!.hash)).toBe(1);
  });

  it('a dry run of an approved call allows as the real call would, and spends nothing', async () => {
    const c = chain();
    const { bundle } = c.invoke(ARGS, { iat: T0 });
    const asked = await verify(bundle);
    const id = asked.body.approval.id as string;

    const whilePending = await svc.call('POST', '/v1/verify/dry-run', { key: tenant.keys.verify, json: bundle });
    expect(whilePending.status).toBe(403);
    expect(whilePending.body.error.code).toBe('APPROVAL_REQUIRED');
    expect(whilePending.body.violations[0].message).toContain(`Approval ${id} waits for an approver`);
    // The answer names no approval (a dry run opens and shows none), so its advice does not send the caller to one.
    expect(whilePending.body.approval).toBeUndefined();
    expect(whilePending.body.error.suggestion).toMatch(
      /^A dry run opens no approval\. Send the call to POST \/v1\/verify, not its dry run/,
    );

    await decide(id, 'approve', triple);
    const dry = await svc.call('POST', '/v1/verify/dry-run', { key: tenant.keys.verify, json: bundle });
    expect(dry.status).toBe(200);
    expect(dry.body.dry_run).toBe(true);
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approver })).body.status).toBe('approved');
    expect(await callsUsed(c.drs[0]!.hash)).toBe(0);

    const real = await verify(bundle);
    expect(real.status).toBe(200);
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approver })).body.status).toBe('used');
  });
});

describe('rate_limit_per_minute', () => {
  it('is exact under concurrency across two nodes', async () => {
    const c = chain();
    const args = { tool: 'sms_send', estimated_cost_usd: 0.01, pii_access: false, write_access: false };
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) => nodes[i % 2]!.post('/v1/verify', tenant.keys.verify, c.invoke(args, { iat: T0 }).bundle)),
    );
    const allowed = answers.filter((r) => r.status === 200).length;
    const limited = answers.filter((r) => r.body.error?.code === 'TOOL_RATE_LIMITED').length;
    // One minute window of the database clock; a run crossing a minute boundary may see two windows.
    expect(allowed === 7 || allowed === 14 ? allowed : -allowed).toBeGreaterThan(0);
    expect(allowed + limited).toBe(30);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(allowed);
  });
});

describe('near_limit under concurrency', () => {
  it('verifies arriving together ask a human past 80% of max_calls, as they would one at a time', async () => {
    // A tenant of its own with the default rules (near-limit: require_approval) and one harmless tool.
    const own = await setupTenant(svc, 'near-limit');
    const published = await svc.call('POST', `/v1/admin/tenants/${own.id}/tools`, {
      key: svc.adminKey,
      json: { base_version: 0, strict: true, tools: [tool('docs_lookup')] },
    });
    expect(published.status).toBe(201);
    const c = buildChain(
      [
        { ...POLICY, max_calls: 30 },
        { ...POLICY, max_calls: 30 },
      ],
      { keys: [own.root, generateKeyPair(), generateKeyPair()] },
    );
    const args = { tool: 'docs_lookup', estimated_cost_usd: 0.01, pii_access: false, write_access: false };
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) => nodes[i % 2]!.post('/v1/verify', own.keys.verify, c.invoke(args, { iat: T0 }).bundle)),
    );
    const allowed = answers.filter((r) => r.status === 200).length;
    const asked = answers.filter((r) => r.body.error?.code === 'APPROVAL_REQUIRED').length;
    // Calls 1-24 keep the root at or below 80% (24/30); from the 25th a human is asked.
    expect({ allowed, asked }).toEqual({ allowed: 24, asked: 6 });
    expect(await callsUsed(c.drs[0]!.hash)).toBe(24);
  });

  it('a call past a ceiling is refused by that ceiling, and no human is asked to approve a call that cannot run', async () => {
    const own = await setupTenant(svc, 'near-limit-past');
    const published = await svc.call('POST', `/v1/admin/tenants/${own.id}/tools`, {
      key: svc.adminKey,
      json: { base_version: 0, strict: true, tools: [tool('docs_lookup'), tool('paid_lookup', { cost_per_invocation_usd: 0.6 })] },
    });
    expect(published.status).toBe(201);
    const human = (
      await svc.call('POST', `/v1/admin/tenants/${own.id}/api-keys`, { key: svc.adminKey, json: { scopes: ['approve'], name: 'h' } })
    ).body.key as string;
    const send = (c: ReturnType<typeof buildChain>, cost: number, { dry_run = false } = {}) =>
      svc.call('POST', dry_run ? '/v1/verify/dry-run' : '/v1/verify', {
        key: own.keys.verify,
        json: c.invoke({ tool: 'docs_lookup', estimated_cost_usd: cost, pii_access: false, write_access: false }, { iat: T0 }).bundle,
      });
    const approvalsOpened = async () =>
      (await svc.store.db.select({ n: count() }).from(approvals).where(eq(approvals.tenantId, own.id)))[0]!.n;
    const keys = () => [own.root, generateKeyPair(), generateKeyPair()];

    // max_spend_usd 1: 0.7 runs; 0.5 more would pass the budget, 0.2 more only past 80% of it.
    const spend = buildChain(
      [
        { ...POLICY, max_spend_usd: 1 },
        { ...POLICY, max_spend_usd: 1 },
      ],
      { keys: keys() },
    );
    expect((await send(spend, 0.7)).status).toBe(200);
    for (const dry_run of [true, false]) {
      const over = await send(spend, 0.5, { dry_run });
      expect(over.status, JSON.stringify(over.body)).toBe(403);
      expect(over.body.error.code).toBe('BUDGET_EXHAUSTED');
      expect(over.body).not.toHaveProperty('approval');
    }
    expect(await approvalsOpened()).toBe(0);
    // Counted at the tool's declared cost (0.6), not the agent's estimate (0.1): past the budget too.
    const floored = await svc.call('POST', '/v1/verify', {
      key: own.keys.verify,
      json: spend.invoke({ tool: 'paid_lookup', estimated_cost_usd: 0.1, pii_access: false, write_access: false }, { iat: T0 }).bundle,
    });
    expect(floored.body.error?.code, JSON.stringify(floored.body)).toBe('BUDGET_EXHAUSTED');
    expect(await approvalsOpened()).toBe(0);
    const near = await send(spend, 0.2);
    expect(near.body.error.code).toBe('APPROVAL_REQUIRED');
    // Said of this call, not of calls already made (none had passed 80% before it).
    expect(near.body.error.message).toContain('This call would take the chain past 80% of one of its calls or budget ceilings');
    expect(await approvalsOpened()).toBe(1);

    // max_calls 1: the only call is past 80%, so it is approved and runs; the next cannot run at all.
    const calls = buildChain(
      [
        { ...POLICY, max_calls: 1 },
        { ...POLICY, max_calls: 1 },
      ],
      { keys: keys() },
    );
    const first = calls.invoke(
      { tool: 'docs_lookup', estimated_cost_usd: 0.01, pii_access: false, write_access: false },
      { iat: T0 },
    ).bundle;
    const asked = await svc.call('POST', '/v1/verify', { key: own.keys.verify, json: first });
    expect(asked.body.error.code).toBe('APPROVAL_REQUIRED');
    expect((await decide(asked.body.approval.id, 'approve', triple, human)).status).toBe(200);
    const ran = await svc.call('POST', '/v1/verify', {
      key: own.keys.verify,
      json: { ...(first as object), approval_id: asked.body.approval.id },
    });
    expect(ran.status, JSON.stringify(ran.body)).toBe(200);
    for (const dry_run of [true, false]) {
      const next = await send(calls, 0.01, { dry_run });
      expect(next.status, JSON.stringify(next.body)).toBe(403);
      expect(next.body.error.code).toBe('CALLS_EXHAUSTED');
    }
    expect(await approvalsOpened()).toBe(2);
    expect(await callsUsed(calls.drs[0]!.hash)).toBe(1);
  });
});

describe("a dry run refuses what the real call's tool gate refuses, and consumes nothing", () => {
  let own: TestTenant;
  const RATED = tool('pager_send', { rate_limit_per_minute: 2, action_type: 'pager:send' });
  beforeAll(async () => {
    own = await setupTenant(svc, 'dry-gate');
    const published = await svc.call('POST', `/v1/admin/tenants/${own.id}/tools`, {
      key: svc.adminKey,
      json: { base_version: 0, strict: true, tools: [EXPORT, RATED] satisfies ToolDeclaration[] },
    });
    expect(published.status).toBe(201);
  });
  const ownChain = () => buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()] });
  const send = (json: unknown, dry = false) => svc.call('POST', dry ? '/v1/verify/dry-run' : '/v1/verify', { key: own.keys.verify, json });
  const ownApprover = async () =>
    (await svc.call('POST', `/v1/admin/tenants/${own.id}/api-keys`, { key: svc.adminKey, json: { scopes: ['approve'], name: 'h' } })).body
      .key as string;

  it('a full rate window: TOOL_RATE_LIMITED, and a dry run takes no slot of it', async () => {
    // Two calls a minute of the database clock: start early in a window, so all of it is one minute.
    const [clock] = await rows<{ s: string }>(svc.store.db, sql`select floor(extract(epoch from clock_timestamp()))::bigint::text as s`);
    const intoWindow = Number(clock!.s) % 60;
    if (intoWindow > 45) await new Promise((r) => setTimeout(r, (61 - intoWindow) * 1000));
    const c = ownChain();
    const args = { tool: 'pager_send', estimated_cost_usd: 0.01, pii_access: false, write_access: false };
    const dryFirst = await send(c.invoke(args, { iat: T0 }).bundle, true);
    expect(dryFirst.status, JSON.stringify(dryFirst.body)).toBe(200);
    expect(dryFirst.body.dry_run).toBe(true);
    for (let i = 0; i < 2; i++) expect((await send(c.invoke(args, { iat: T0 }).bundle)).status).toBe(200);
    const next = c.invoke(args, { iat: T0 }).bundle;
    const dry = await send(next, true);
    expect(dry.status, JSON.stringify(dry.body)).toBe(403);
    expect(dry.body.error.code).toBe('TOOL_RATE_LIMITED');
    const real = await send(next);
    expect(real.body.error.code).toBe('TOOL_RATE_LIMITED');
    expect(await callsUsed(c.drs[0]!.hash)).toBe(2);
  });

  it('naming an approval that is used, or rejected: refused as the real call is, and the approval is left as it was', async () => {
    const human = await ownApprover();
    const c = ownChain();
    const asked = await send(c.invoke(ARGS, { iat: T0 }).bundle);
    const usedId = asked.body.approval.id as string;
    expect((await decide(usedId, 'approve', triple, human)).status).toBe(200);
    expect((await send({ ...(c.invoke(ARGS, { iat: T0 }).bundle as object), approval_id: usedId })).status).toBe(200);

    const other = ownChain();
    const rejectedId = (await send(other.invoke(ARGS, { iat: T0 }).bundle)).body.approval.id as string;
    expect((await decide(rejectedId, 'reject', triple, human)).status).toBe(200);

    for (const [id, code, through] of [
      [usedId, 'APPROVAL_USED', c],
      [rejectedId, 'APPROVAL_REJECTED', other],
    ] as const) {
      const call = { ...(through.invoke(ARGS, { iat: T0 }).bundle as object), approval_id: id };
      const dry = await send(call, true);
      expect(dry.status, `${code}: ${JSON.stringify(dry.body)}`).toBe(403);
      expect(dry.body.error.code).toBe(code);
      expect((await send(call)).body.error.code).toBe(code);
    }
    const statuses = await svc.store.db
      .select({ id: approvals.id, status: approvals.status })
      .from(approvals)
      .where(eq(approvals.tenantId, own.id));
    expect(Object.fromEntries(statuses.map((a) => [a.id, a.status]))).toMatchObject({ [usedId]: 'used', [rejectedId]: 'rejected' });
    expect(await callsUsed(c.drs[0]!.hash)).toBe(1);
  });

  it("takes no lock: with the approval's row and the rate window's row locked by a verify in flight, a dry run answers at once", async () => {
    // A tenant of its own: the tests above filled this minute's pager window.
    const mine = await setupTenant(svc, 'dry-locks');
    const published = await svc.call('POST', `/v1/admin/tenants/${mine.id}/tools`, {
      key: svc.adminKey,
      json: { base_version: 0, strict: true, tools: [EXPORT, RATED] satisfies ToolDeclaration[] },
    });
    expect(published.status).toBe(201);
    const human = (
      await svc.call('POST', `/v1/admin/tenants/${mine.id}/api-keys`, { key: svc.adminKey, json: { scopes: ['approve'], name: 'h' } })
    ).body.key as string;
    const send = (json: unknown, dry = false) =>
      svc.call('POST', dry ? '/v1/verify/dry-run' : '/v1/verify', { key: mine.keys.verify, json });
    const c = buildChain([POLICY, POLICY], { keys: [mine.root, generateKeyPair(), generateKeyPair()] });
    const id = (await send(c.invoke(ARGS, { iat: T0 }).bundle)).body.approval.id as string;
    expect((await decide(id, 'approve', triple, human)).status).toBe(200);
    const paged = { tool: 'pager_send', estimated_cost_usd: 0.01, pii_access: false, write_access: false };
    expect((await send(c.invoke(paged, { iat: T0 }).bundle)).status).toBe(200); // opens this minute's window

    // A transaction holding both rows, as a real verify spending the approval and counting a call does.
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const lockedNow = new Promise<void>((r) => (locked = r));
    const holder = svc.store.db.transaction(async (tx) => {
      await tx.execute(sql`select 1 from approvals where tenant_id = ${mine.id} and id = ${id} for update`);
      await tx.execute(sql`select 1 from tool_rate_windows where tenant_id = ${mine.id} and tool = 'pager_send' for update`);
      locked();
      await held;
    });
    try {
      await lockedNow;
      // Before 0028 each waited for the locks until the request's deadline, then answered 503.
      const approved = await send({ ...(c.invoke(ARGS, { iat: T0 }).bundle as object), approval_id: id }, true);
      expect(approved.status, JSON.stringify(approved.body)).toBe(200);
      const rated = await send(c.invoke(paged, { iat: T0 }).bundle, true);
      expect(rated.status, JSON.stringify(rated.body)).toBe(200);
    } finally {
      release();
      await holder;
    }
    const [stillApproved] = await svc.store.db.select({ status: approvals.status }).from(approvals).where(eq(approvals.id, id));
    expect(stillApproved!.status).toBe('approved');
  });
});

describe('a dry run of a chain not yet stored whose reach is a trifecta, naming an approval of another call', () => {
  it('is refused GRANT_PENDING_APPROVAL, as the real call is once it has stored and held the chain', async () => {
    const own = await setupTenant(svc, 'trifecta asks');
    const trifecta = [
      tool('web_fetch', { untrusted_content: true, action_type: 'web:fetch' }),
      tool('db_read', { private_data_access: true, action_type: 'db:read' }),
      tool('mail_send', { type: 'external', action_type: 'mail:send' }),
    ];
    const published = await svc.call('POST', `/v1/admin/tenants/${own.id}/tools`, {
      key: svc.adminKey,
      json: { base_version: 0, strict: true, tools: [EXPORT, ...trifecta] satisfies ToolDeclaration[] },
    });
    expect(published.status).toBe(201);
    const narrow: Policy = { ...POLICY, allowed_tools: ['crm_export'] };
    const other = buildChain([narrow, narrow], { keys: [own.root, generateKeyPair(), generateKeyPair()] });
    const asked = await svc.call('POST', '/v1/verify', { key: own.keys.verify, json: other.invoke(ARGS, { iat: T0 }).bundle });
    expect(asked.body.error.code).toBe('APPROVAL_REQUIRED');
    const wide = buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()] }); // reach: every tool
    const send = (dry: boolean) =>
      svc.call('POST', dry ? '/v1/verify/dry-run' : '/v1/verify', {
        key: own.keys.verify,
        json: { ...(wide.invoke(ARGS, { iat: T0 }).bundle as object), approval_id: asked.body.approval.id },
      });
    const dry = await send(true);
    expect(dry.body.error?.code, JSON.stringify(dry.body)).toBe('GRANT_PENDING_APPROVAL');
    const real = await send(false);
    expect(real.body.error?.code, JSON.stringify(real.body)).toBe('GRANT_PENDING_APPROVAL');
    expect(real.body.violations).toEqual(dry.body.violations);
  });
});

/** Publishes the tenant's next catalog (EXPORT alone) on the main node, with `rules` if given. */
async function publishExport(tenantId: string, baseVersion: number, rules?: unknown[]): Promise<void> {
  const published = await svc.call('POST', `/v1/admin/tenants/${tenantId}/tools`, {
    key: svc.adminKey,
    json: { base_version: baseVersion, strict: true, tools: [EXPORT], ...(rules === undefined ? {} : { rules }) },
  });
  expect(published.status).toBe(201);
}

const DENY_EVERY_CALL = [{ id: 'closed', when: {}, decision: 'deny' }];

/** A tenant of its own whose catalog sends EXPORT to a human, and a key of its approver. */
async function tenantWithApprover(name: string): Promise<{ own: TestTenant; human: string }> {
  const own = await setupTenant(svc, name);
  const published = await svc.call('POST', `/v1/admin/tenants/${own.id}/tools`, {
    key: svc.adminKey,
    json: { base_version: 0, strict: true, tools: [EXPORT] satisfies ToolDeclaration[] },
  });
  expect(published.status).toBe(201);
  const human = await createTenantKey(svc, own.id, ['approve'], 'h');
  return { own, human };
}

describe('approvals waiting under one chain root are capped: a flood of distinct calls cannot bury the approvers', () => {
  it(`the call past ${MAX_PENDING_APPROVALS_PER_ROOT} waiting is refused with APPROVALS_PENDING_LIMIT and opens nothing; waiting calls, other roots and decided approvals are not held up`, async () => {
    const { own, human } = await tenantWithApprover('capped');
    const c = buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()] });
    const ask = (note: string, under = c) =>
      svc.call('POST', '/v1/verify', { key: own.keys.verify, json: under.invoke({ ...ARGS, note }, { iat: T0 }).bundle });
    // Asked concurrently, 10 past the cap: exactly the cap is opened, whatever the interleaving.
    const answers = await Promise.all(Array.from({ length: MAX_PENDING_APPROVALS_PER_ROOT + 10 }, (_, i) => ask(`call ${i}`)));
    const codes = answers.map((a) => a.body.error?.code as string);
    expect(codes.filter((x) => x === 'APPROVAL_REQUIRED')).toHaveLength(MAX_PENDING_APPROVALS_PER_ROOT);
    expect(codes.filter((x) => x === 'APPROVALS_PENDING_LIMIT')).toHaveLength(10);
    const refused = answers.find((a) => a.body.error?.code === 'APPROVALS_PENDING_LIMIT')!;
    expect(refused.status).toBe(403);
    expect(refused.body.approval).toBeUndefined();
    expect(refused.body.error.suggestion).toMatch(/GET \/v1\/approvals\?status=pending/);
    const stored = await svc.store.db.select({ n: count() }).from(approvals).where(eq(approvals.tenantId, own.id));
    expect(stored[0]!.n).toBe(MAX_PENDING_APPROVALS_PER_ROOT);
    // A dry run of a new call says what the real call says.
    const dry = await svc.call('POST', '/v1/verify/dry-run', {
      key: own.keys.verify,
      json: { ...(c.invoke({ ...ARGS, note: 'dry' }, { iat: T0 }).bundle as object) },
    });
    expect(dry.body.error.code).toBe('APPROVALS_PENDING_LIMIT');

    // A call already waiting still finds its approval.
    const waiting = answers.find((a) => a.body.error?.code === 'APPROVAL_REQUIRED')!;
    const again = await svc.call('POST', '/v1/verify', {
      key: own.keys.verify,
      json: c.invoke({ ...ARGS, note: (waiting.body.approval.args as { note: string }).note }, { iat: T0 }).bundle,
    });
    expect(again.body.approval.id).toBe(waiting.body.approval.id);
    // Another root of the tenant is not held up by this one.
    const other = buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()] });
    expect((await ask('elsewhere', other)).body.error.code).toBe('APPROVAL_REQUIRED');
    // A decided approval no longer waits: one new call may wait in its place.
    expect((await decide(waiting.body.approval.id as string, 'reject', triple, human)).status).toBe(200);
    expect((await ask('after a decision')).body.error.code).toBe('APPROVAL_REQUIRED');
    expect((await ask('one too many')).body.error.code).toBe('APPROVALS_PENDING_LIMIT');
  });

  it("a delegation holds no more waiting approvals than it has calls left: one sub-agent cannot fill its root's places", async () => {
    const { own } = await tenantWithApprover('calls left');
    const [A, B] = [generateKeyPair(), generateKeyPair()];
    // The root to A (1000 calls), A to B (2 calls): B floods distinct calls that each need a human.
    const c = buildChain([POLICY, { ...POLICY, max_calls: 2 }], { keys: [own.root, A, B] });
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        svc.call('POST', '/v1/verify', { key: own.keys.verify, json: c.invoke({ ...ARGS, note: `flood ${i}` }, { iat: T0 }).bundle }),
      ),
    );
    const codes = answers.map((a) => a.body.error?.code as string);
    expect(codes.filter((x) => x === 'APPROVAL_REQUIRED')).toHaveLength(2);
    expect(codes.filter((x) => x === 'APPROVALS_PENDING_LIMIT')).toHaveLength(10);
    const refused = answers.find((a) => a.body.error?.code === 'APPROVALS_PENDING_LIMIT')!;
    expect(refused.body.violations[0]).toMatchObject({ dr_hash: c.drs[1]!.hash, actual: 2 });
    expect(refused.body.error.message).toContain(`delegation ${c.drs[1]!.hash} has 2 calls left and 2 approvals already wait`);
    // A dry run says the same; the parent's own calls (through the root alone) still reach a human.
    const dry = await svc.call('POST', '/v1/verify/dry-run', {
      key: own.keys.verify,
      json: { ...(c.invoke({ ...ARGS, note: 'dry' }, { iat: T0 }).bundle as object) },
    });
    expect(dry.body.error.code).toBe('APPROVALS_PENDING_LIMIT');
    const parent = createInvocation({
      chain: [c.drs[0]!],
      invoker: A,
      args: { ...ARGS, note: 'the parent' },
      toolServer: 'mcp://tools.example.com',
      iat: T0,
    });
    const byParent = await svc.call('POST', '/v1/verify', { key: own.keys.verify, json: makeBundle(parent, [c.drs[0]!]) });
    expect(byParent.body.error?.code, JSON.stringify(byParent.body)).toBe('APPROVAL_REQUIRED');
    const stored = await svc.store.db.select({ n: count() }).from(approvals).where(eq(approvals.tenantId, own.id));
    expect(stored[0]!.n).toBe(3);
  });

  it('an approved approval past its deadline, not yet marked expired, is no approval: a dry run meets the cap as the real call does', async () => {
    const { own, human } = await tenantWithApprover('stale approved');
    const c = buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()] });
    const send = (note: string, dry = false) =>
      svc.call('POST', dry ? '/v1/verify/dry-run' : '/v1/verify', {
        key: own.keys.verify,
        json: c.invoke({ ...ARGS, note }, { iat: svc.clock.now }).bundle,
      });
    const asked = await send('the approved one');
    const id = asked.body.approval.id as string;
    expect((await decide(id, 'approve', triple, human)).body.status).toBe('approved');
    const start = svc.clock.now;
    try {
      // Later calls fill the root's places; then the approved one's deadline passes, theirs not.
      svc.clock.now = start + APPROVAL_TTL_SECONDS - 100;
      const fill = await Promise.all(Array.from({ length: MAX_PENDING_APPROVALS_PER_ROOT }, (_, i) => send(`filler ${i}`)));
      expect(fill.every((a) => a.body.error?.code === 'APPROVAL_REQUIRED')).toBe(true);
      svc.clock.now = start + APPROVAL_TTL_SECONDS + 1;
      const dry = await send('the approved one', true);
      expect(dry.body.error?.code, JSON.stringify(dry.body)).toBe('APPROVALS_PENDING_LIMIT');
      const real = await send('the approved one');
      expect(real.body.error?.code, JSON.stringify(real.body)).toBe('APPROVALS_PENDING_LIMIT');
    } finally {
      svc.clock.now = start;
    }
  });
});

describe('approval lists are paged: no number of approvals hides a newer one', () => {
  it('105 pending approvals: 100, then the rest after next_cursor; the SDK follows every page', async () => {
    const { own, human } = await tenantWithApprover('paged');
    // Three chain roots (at most 50 approvals wait under each): a flood of distinct calls, each
    // waiting for a human, then the one that matters.
    const roots = Array.from({ length: 3 }, () => buildChain([POLICY, POLICY], { keys: [own.root, generateKeyPair(), generateKeyPair()] }));
    const opened: string[] = [];
    for (let i = 0; i < 105; i += 15) {
      const answers = await Promise.all(
        Array.from({ length: Math.min(15, 105 - i) }, (_, j) =>
          svc.call('POST', '/v1/verify', {
            key: own.keys.verify,
            json: roots[(i + j) % 3]!.invoke({ ...ARGS, note: `call ${i + j}` }, { iat: T0 }).bundle,
          }),
        ),
      );
      for (const a of answers) opened.push(a.body.approval.id as string);
    }
    const newest = opened.at(-1)!;

    const first = await svc.call('GET', '/v1/approvals?status=pending', { key: human });
    expect(first.status).toBe(200);
    expect(first.body.approvals).toHaveLength(100);
    expect(first.body.next_cursor).toBe(first.body.approvals[99].id);
    const second = await svc.call('GET', `/v1/approvals?status=pending&cursor=${first.body.next_cursor}`, { key: human });
    expect(second.status).toBe(200);
    expect(second.body.approvals).toHaveLength(5);
    expect(second.body.next_cursor).toBeNull();
    const listed = [...first.body.approvals, ...second.body.approvals].map((a: { id: string }) => a.id);
    expect(new Set(listed)).toEqual(new Set(opened));
    expect(listed).toContain(newest);

    // A cursor that is not an approval of this tenant is refused, not read as "from the start".
    const foreign = (await verify(chain().invoke(ARGS, { iat: T0 }).bundle)).body.approval.id as string;
    for (const cursor of [foreign, `apr_${'0'.repeat(32)}`, 'garbage']) {
      const bad = await svc.call('GET', `/v1/approvals?cursor=${cursor}`, { key: human });
      expect(bad.status, cursor).toBe(400);
      expect(bad.body.error.code).toBe('INVALID_REQUEST');
    }

    const sdk = new BatonClient({
      baseUrl: 'http://baton.test',
      apiKey: human,
      fetch: async (input, init) => svc.app.request(String(input).replace('http://baton.test', ''), init),
    });
    const all = await sdk.tools.approvals('pending');
    expect(all.approvals.map((a) => a.id)).toEqual(listed);
  });
});

describe('rate windows', () => {
  /** The start of the current one-minute window of the database clock. */
  async function windowNow(): Promise<number> {
    const [r] = await rows<{ w: string }>(
      svc.store.db,
      sql`select (floor(extract(epoch from clock_timestamp()) / 60) * 60)::bigint::text as w`,
    );
    return Number(r!.w);
  }
  const windowsOf = async (name: string) =>
    svc.store.db
      .select()
      .from(toolRateWindows)
      .where(and(eq(toolRateWindows.tenantId, tenant.id), eq(toolRateWindows.tool, name)));

  it('are pruned when a call opens a new window, and the count of the current one stays exact across two nodes', async () => {
    const start = await windowNow();
    // Windows of this tenant from long ago (of a tool still declared and of one no longer), and the previous minute's.
    await svc.store.db.insert(toolRateWindows).values([
      { tenantId: tenant.id, tool: 'sms_send', windowStart: start - 600, calls: 7 },
      { tenantId: tenant.id, tool: 'retired_tool', windowStart: start - 3600, calls: 3 },
      { tenantId: tenant.id, tool: 'fax_send', windowStart: start - 120, calls: 5 },
      { tenantId: tenant.id, tool: 'fax_send', windowStart: start - 60, calls: 2 },
    ]);
    const c = chain();
    const args = { tool: 'fax_send', estimated_cost_usd: 0.01, pii_access: false, write_access: false };
    const answers = await Promise.all(
      Array.from({ length: 24 }, (_, i) => nodes[i % 2]!.post('/v1/verify', tenant.keys.verify, c.invoke(args, { iat: T0 }).bundle)),
    );
    const end = await windowNow();
    const allowed = answers.filter((r) => r.status === 200).length;
    expect(answers.filter((r) => r.body.error?.code === 'TOOL_RATE_LIMITED').length).toBe(24 - allowed);
    // Exact: 5 in one window (10 when the run crossed a minute boundary), every allowed call counted once.
    expect(allowed === 5 || (allowed === 10 && end > start) ? allowed : -allowed).toBeGreaterThan(0);
    const fax = await windowsOf('fax_send');
    const counted = fax.filter((w) => w.windowStart >= start).reduce((n, w) => n + w.calls, 0);
    expect(counted).toBe(allowed);
    expect(await callsUsed(c.drs[0]!.hash)).toBe(allowed);
    // Everything older than the previous minute is gone, for every tool of the tenant; the previous minute is kept.
    expect(await windowsOf('sms_send').then((ws) => ws.filter((w) => w.windowStart < start - 60))).toEqual([]);
    expect(await windowsOf('retired_tool')).toEqual([]);
    expect(fax.map((w) => w.windowStart).filter((w) => w < end - 60)).toEqual([]);
    if (end === start) expect(fax.find((w) => w.windowStart === start - 60)?.calls).toBe(2);
  });
});

describe('deciding an approval that is already decided', () => {
  it('is refused CONFLICT with a suggestion that fits: the decision is final, where to read it, and how to ask again', async () => {
    const c = chain();
    const approvedId = (await verify(c.invoke({ ...ARGS, estimated_cost_usd: 0.05 }, { iat: T0 }).bundle)).body.approval.id as string;
    expect((await decide(approvedId, 'approve', triple)).status).toBe(200);
    const twice = await decide(approvedId, 'reject', triple);
    expect(twice.status).toBe(409);
    expect(twice.body.error.code).toBe('CONFLICT');
    expect(twice.body.error.details).toMatchObject({ approval_id: approvedId, status: 'approved' });
    expect(twice.body.error.suggestion).toBe(
      `The decision is final and nothing more is needed: the agent's retry of the same call runs once. Read it with GET /v1/approvals/${approvedId} (baton approvals show ${approvedId}).`,
    );

    const rejectedId = (await verify(c.invoke({ ...ARGS, estimated_cost_usd: 0.06 }, { iat: T0 }).bundle)).body.approval.id as string;
    expect((await decide(rejectedId, 'reject', triple)).status).toBe(200);
    const late = await decide(rejectedId, 'approve', triple);
    expect(late.status).toBe(409);
    expect(late.body.error.suggestion).toMatch(
      new RegExp(
        `^The decision is final and cannot be changed\\. Read it with GET /v1/approvals/${rejectedId} .* answered APPROVAL_REJECTED until \\d{4}-.*; after that the agent may send it again`,
      ),
    );
    expect(late.body.error.suggestion).not.toContain('fresh identifier');
  });
});
