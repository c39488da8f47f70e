/**
 * Signed approval decisions on real PostgreSQL: an approver DID the tenant
 * lists approves or rejects a pending approval without an API key. Accepted
 * only from a listed DID (in the version current at the decision), with a
 * valid signature, a fresh iat, once, on a pending unexpired approval; keyless
 * callers learn nothing from a wrong signer or an unknown id.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createApprovalDecision } from '../../src/sdk/tools.js';
import { verifyApprovalDecision, verifyServiceReceipt } from '../../src/sdk/index.js';
import { APPROVAL_DECISION_MAX_AGE_SECONDS } from '../../src/protocol/approval-decision.js';
import { encodeBase64url } from '../../src/protocol/base64url.js';
import type { Policy } from '../../src/protocol/policy.js';
import type { ToolDeclaration } from '../../src/protocol/tool-catalog.js';
import { serviceReceipts } from '../../src/store/schema/index.js';
import { APPROVAL_TTL_SECONDS } from '../../src/service/approvals.js';
import { buildChain } from '../support/fixtures.js';
import { twoNodes, type Node } from '../support/nodes.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { tool } from '../support/tools.js';

let svc: TestService;
let tenant: TestTenant;
let approverKey: string;
let nodes: [Node, Node];
const human = generateKeyPair();
const outsider = generateKeyPair();

const EXPORT = tool('crm_export', { type: 'write', blast_radius: 'organizational', action_type: 'crm:export' });
const POLICY: Policy = { allowed_tools: ['*'], max_cost_usd: 1, max_calls: 1000, write_access: true };
const REASON = 'Export agreed with legal.';

async function publish(approvers: string[]) {
  const current = await svc.call('GET', '/v1/tools', { key: tenant.keys.verify });
  const base = current.status === 200 ? (current.body.version as number) : 0;
  const r = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
    key: svc.adminKey,
    json: { base_version: base, strict: true, tools: [EXPORT] satisfies ToolDeclaration[], approvers },
  });
  expect(r.status).toBe(201);
}

beforeAll(async () => {
  svc = await startTestService({ pool: 10 });
  tenant = await setupTenant(svc);
  const k = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, { key: svc.adminKey, json: { scopes: ['approve'] } });
  approverKey = k.body.key;
  await publish([human.did]);
  nodes = await twoNodes(svc);
});
afterAll(async () => {
  for (const n of nodes ?? []) await n.close();
  await svc?.close();
});

let estimate = 0;
/** A new call that a rule sends to a human; returns its approval id and a way to retry it. */
async function pendingApproval() {
  const c = buildChain([POLICY], { keys: [tenant.root, generateKeyPair()] });
  const args = { tool: 'crm_export', estimated_cost_usd: 0.01 + (estimate += 0.0001), pii_access: false, write_access: true };
  const verify = () => svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: c.invoke(args, { iat: svc.clock.now }).bundle });
  const dryRun = () =>
    svc.call('POST', '/v1/verify/dry-run', { key: tenant.keys.verify, json: c.invoke(args, { iat: svc.clock.now }).bundle });
  const first = await verify();
  expect(first.body.error.code).toBe('APPROVAL_REQUIRED');
  return { id: first.body.approval.id as string, verify, dryRun };
}

function sign(id: string, over: { signer?: KeyPair; decision?: 'approve' | 'reject'; iat?: number; jti?: string } = {}) {
  return createApprovalDecision({
    signer: over.signer ?? human,
    approvalId: id,
    decision: over.decision ?? 'approve',
    reason: REASON,
    iat: over.iat ?? svc.clock.now,
    ...(over.jti === undefined ? {} : { jti: over.jti }),
  }).jws;
}

/** Keyless, as a human's tool would send it. */
const send = (id: string, jws: string) => svc.call('POST', `/v1/approvals/${id}/signed-decision`, { json: { signed_decision: jws } });

describe('signed approval decisions', () => {
  it('a listed DID approves without a key; the service receipt names it as actor; the call then goes through once', async () => {
    const { id, verify } = await pendingApproval();
    const r = await send(id, sign(id));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ id, status: 'approved', decision: { actor: human.did, decided_by: human.did, reason: REASON } });
    const [receipt] = await svc.store.db
      .select()
      .from(serviceReceipts)
      .where(and(eq(serviceReceipts.subject, id), eq(serviceReceipts.kind, 'approval.approved')));
    const data = JSON.parse(Buffer.from(receipt!.jws.split('.')[1]!, 'base64url').toString()).data;
    expect(data).toMatchObject({
      actor: human.did,
      decided_by: human.did,
      reason: REASON,
      decision_record: expect.stringMatching(/^sha256:/),
    });
    expect((await verify()).status).toBe(200);
    expect((await verify()).body.error.code).toBe('APPROVAL_REQUIRED'); // once
    // A rejection the same way.
    const other = await pendingApproval();
    const rejected = await send(other.id, sign(other.id, { decision: 'reject' }));
    expect(rejected.body).toMatchObject({ status: 'rejected', decision: { actor: human.did } });
  });

  it("the decision record is served with the approval; an auditor checks the human's signature offline and matches the service receipt", async () => {
    const { id } = await pendingApproval();
    const jws = sign(id);
    expect((await send(id, jws)).status).toBe(200);
    const served = await svc.call('GET', `/v1/approvals/${id}`, { key: tenant.keys.audit });
    expect(served.status).toBe(200);
    expect(served.body.decision.record).toBe(jws);
    const listed = await svc.call('GET', '/v1/approvals?status=approved', { key: tenant.keys.audit });
    expect((listed.body.approvals as { id: string; decision: { record?: string } }[]).find((a) => a.id === id)!.decision.record).toBe(jws);

    // Offline, later than a decision may arrive: the record's age no longer matters.
    svc.clock.now += 24 * 3600;
    try {
      const checked = verifyApprovalDecision(served.body.decision.record as string, { approvalId: id, approvers: [human.did] });
      expect(checked).toMatchObject({ valid: true, outcome: 'approved', payload: { iss: human.did, approval_id: id } });
      // The service receipt of the decision, checked against the published keys, names this very record.
      const receipts = await svc.call('GET', `/v1/service-receipts?subject=${id}`, { key: tenant.keys.audit });
      const approvedReceipt = (receipts.body.service_receipts as { kind: string; jws: string }[]).find(
        (r) => r.kind === 'approval.approved',
      )!;
      const keys = (await svc.call('GET', '/v1/keys')).body.keys as { kid: string; public_key: string }[];
      const receipt = verifyServiceReceipt(
        approvedReceipt.jws,
        keys.map((k) => ({ kid: k.kid, publicKey: new Uint8Array(Buffer.from(k.public_key, 'base64url')) })),
      );
      expect(receipt.valid).toBe(true);
      expect((receipt.payload!.data as { decision_record: string }).decision_record).toBe(checked.hash);
    } finally {
      svc.clock.now -= 24 * 3600;
    }

    // An edited record, a record for another approval, and a signer not among the approvers fail.
    const [h, p, sig] = jws.split('.') as [string, string, string];
    const payload = JSON.parse(Buffer.from(p, 'base64url').toString());
    const edited = `${h}.${encodeBase64url(new TextEncoder().encode(JSON.stringify({ ...payload, reason: 'Someone else said so.' })))}.${sig}`;
    expect(verifyApprovalDecision(edited, { approvalId: id })).toMatchObject({ valid: false, code: 'SIGNATURE_INVALID', hash: null });
    const other = `apr_${'f'.repeat(32)}`;
    expect(verifyApprovalDecision(jws, { approvalId: other })).toMatchObject({ valid: false, code: 'INVALID_FIELD' });
    expect(verifyApprovalDecision(jws, { approvalId: id, approvers: [outsider.did] })).toMatchObject({
      valid: false,
      code: 'NOT_AN_APPROVER',
    });
    expect(verifyApprovalDecision('not a jws', { approvalId: id }).valid).toBe(false);

    // A decision recorded with an API key has no record to serve.
    const keyed = await pendingApproval();
    const decided = await svc.call('POST', `/v1/approvals/${keyed.id}/approve`, {
      key: approverKey,
      json: { actor: 'bob', confirm: true, reason: REASON },
    });
    expect(decided.status).toBe(200);
    expect(decided.body.decision).not.toHaveProperty('record');
  });

  it("a verify's and a dry run's answer name a signed rejection without its record; reading the approval serves it", async () => {
    const { id, verify, dryRun } = await pendingApproval();
    const jws = sign(id, { decision: 'reject' });
    expect((await send(id, jws)).body.status).toBe('rejected');
    for (const refused of [await verify(), await dryRun()]) {
      expect(refused.body.error.code).toBe('APPROVAL_REJECTED');
      expect(refused.body.approval).toMatchObject({ id, status: 'rejected', decision: { actor: human.did } });
      expect(refused.body.approval.decision).not.toHaveProperty('record');
    }
    const served = await svc.call('GET', `/v1/approvals/${id}`, { key: tenant.keys.audit });
    expect(served.body.decision.record).toBe(jws);
  });

  it('an approver DID that holds a delegation of the chain cannot approve a call made through it', async () => {
    // Agent A is listed as an approver, delegates to a key of its own and invokes through it.
    const agentA = generateKeyPair();
    await publish([human.did, agentA.did]);
    try {
      const c = buildChain([POLICY, POLICY], { keys: [tenant.root, agentA, generateKeyPair()] });
      const args = { tool: 'crm_export', estimated_cost_usd: 0.02, pii_access: false, write_access: true };
      const asked = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: c.invoke(args, { iat: svc.clock.now }).bundle });
      const id = asked.body.approval.id as string;
      const self = await send(id, sign(id, { signer: agentA }));
      expect(self.status).toBe(403);
      expect(self.body.error.code).toBe('SELF_APPROVAL');
      expect(self.body.error.message).toContain('DR #0');
      // Another listed approver still can.
      expect((await send(id, sign(id))).body.status).toBe('approved');
    } finally {
      await publish([human.did]);
    }
  });

  it('a signer the tenant does not list and an unknown approval get the same answer', async () => {
    const { id } = await pendingApproval();
    const absent = `apr_${'0'.repeat(32)}`;
    const answers = [
      await send(id, sign(id, { signer: outsider })),
      await send(absent, sign(absent, { signer: outsider })),
      await send(absent, sign(absent)),
    ];
    const shapes = answers.map((a, i) => {
      const [aid, did] = i === 0 ? [id, outsider.did] : i === 1 ? [absent, outsider.did] : [absent, human.did];
      return {
        status: a.status,
        body: JSON.stringify(a.body)
          .replaceAll(aid, '<id>')
          .replaceAll(did, '<did>')
          .replace(/"request_id":"[^"]*"/, ''),
      };
    });
    expect(shapes[0]!.status).toBe(404);
    expect(shapes[1]).toEqual(shapes[0]);
    expect(shapes[2]).toEqual(shapes[0]);
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approverKey })).body.status).toBe('pending');
  });

  it('a DID removed by a newer tool document version can no longer decide', async () => {
    const { id } = await pendingApproval();
    const jws = sign(id); // signed while still listed
    await publish([outsider.did]);
    try {
      const r = await send(id, jws);
      expect(r.status).toBe(404);
      expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approverKey })).body.status).toBe('pending');
    } finally {
      await publish([human.did]);
    }
  });

  it('refuses a tampered payload, a stale or future iat, and a record naming another approval', async () => {
    const { id } = await pendingApproval();
    const [h, p, sig] = sign(id).split('.') as [string, string, string];
    const payload = JSON.parse(Buffer.from(p, 'base64url').toString());
    const tampered = `${h}.${encodeBase64url(new TextEncoder().encode(JSON.stringify({ ...payload, decision: 'reject' })))}.${sig}`;
    const t = await send(id, tampered);
    expect([t.status, t.body.error.code]).toEqual([403, 'SIGNATURE_INVALID']);
    const stale = await send(id, sign(id, { iat: svc.clock.now - APPROVAL_DECISION_MAX_AGE_SECONDS - 1 }));
    expect([stale.status, stale.body.error.code, stale.body.error.details.field]).toEqual([400, 'INVALID_FIELD', 'iat']);
    const future = await send(id, sign(id, { iat: svc.clock.now + 3600 }));
    expect([future.status, future.body.error.details.field]).toEqual([400, 'iat']);
    const other = await pendingApproval();
    const elsewhere = await send(id, sign(other.id));
    expect([elsewhere.status, elsewhere.body.error.details.field]).toEqual([400, 'approval_id']);
    expect((await svc.call('GET', `/v1/approvals/${id}`, { key: approverKey })).body.status).toBe('pending');
  });

  it('a record decides once: the same JWS again, or its jti on another approval, is a conflict', async () => {
    const { id } = await pendingApproval();
    const jws = sign(id, { jti: 'apd:once' });
    expect((await send(id, jws)).status).toBe(200);
    const replay = await send(id, jws);
    expect([replay.status, replay.body.error.code]).toEqual([409, 'CONFLICT']);
    const next = await pendingApproval();
    const reused = await send(next.id, sign(next.id, { jti: 'apd:once' }));
    expect([reused.status, reused.body.error.code]).toEqual([409, 'CONFLICT']);
    expect((await svc.call('GET', `/v1/approvals/${next.id}`, { key: approverKey })).body.status).toBe('pending');
  });

  it('an expired approval cannot be decided', async () => {
    const { id } = await pendingApproval();
    svc.clock.now += APPROVAL_TTL_SECONDS;
    try {
      const r = await send(id, sign(id));
      expect([r.status, r.body.error.code]).toEqual([403, 'APPROVAL_EXPIRED']);
    } finally {
      svc.clock.now -= APPROVAL_TTL_SECONDS;
    }
  });

  it('a signed approve racing an API-key reject across two nodes: one wins, the other gets a clean 409', async () => {
    for (let round = 0; round < 6; round++) {
      const { id } = await pendingApproval();
      const signedFirst = round % 2 === 0;
      const signed = () =>
        nodes[signedFirst ? 0 : 1].post(`/v1/approvals/${id}/signed-decision`, 'any-key-is-ignored', { signed_decision: sign(id) });
      const keyed = () =>
        nodes[signedFirst ? 1 : 0].post(`/v1/approvals/${id}/reject`, approverKey, { actor: 'bob', confirm: true, reason: 'No.' });
      const [a, b] = await Promise.all(signedFirst ? [signed(), keyed()] : [keyed(), signed()]);
      expect([a.status, b.status].sort()).toEqual([200, 409]);
      const loser = a.status === 409 ? a : b;
      expect(loser.body.error.code).toBe('CONFLICT');
      const final = (await svc.call('GET', `/v1/approvals/${id}`, { key: approverKey })).body;
      const winner = a.status === 200 ? a : b;
      expect(final.status).toBe(winner.body.status);
      const decided = await svc.store.db.select().from(serviceReceipts).where(eq(serviceReceipts.subject, id));
      expect(decided.filter((r) => r.kind === 'approval.approved' || r.kind === 'approval.rejected')).toHaveLength(1);
    }
  });
});
