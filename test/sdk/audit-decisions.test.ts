/**
 * auditLog re-verifies every decision's chain, against a real service and
 * its real log: a clean log has no findings; records swapped, receipts
 * naming other records, and allows forged over a chain that widens its
 * parent (rows written as a superuser, behind the service) are each
 * reported at their log index.
 */
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeInvocation } from '../../src/protocol/chain.js';
import { signDelegation } from '../../src/protocol/root-delegation.js';
import { auditLog, checkDecision, type AuditFinding, type AuditReport } from '../../src/sdk/audit.js';
import { BatonClient } from '../../src/sdk/client.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createSubDelegation, makeBundle } from '../../src/sdk/records.js';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { silentLogger } from '../../src/service/log.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { findDelegation, insertDelegation } from '../../src/store/delegations.js';
import { invocations } from '../../src/store/schema/index.js';
import { ARGS, storedChain, type StoredChain } from './chains.js';
import { startLiveService, type LiveService } from './live-service.js';

let live: LiveService;
let su: postgres.Sql;
let c1: StoredChain;
let c2: StoredChain;
let jti1: string;
let jti2: string;

const integrate = () =>
  integrateOnce({ store: live.svc.store, signer: live.svc.deps.signer, log: silentLogger, logName: live.svc.deps.config.tlogName });

const audit = (): Promise<AuditReport> =>
  auditLog({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit, decisions: { trustedRoots: [live.tenant.root.did] } });

/** Log index of each receipt of the tenant, with what it is about. */
async function leaves(): Promise<{ index: number; kind: string; subject: string }[]> {
  const found = await su<{ index: number; kind: string; subject: string }[]>`
    select l.leaf_index::int as index, r.kind, r.subject from log_leaves l join receipts r on r.id = l.receipt_id
    where l.tenant_id = ${live.tenant.id} order by l.leaf_index`;
  return [...found];
}

async function indexOf(kind: string, subject: string): Promise<number[]> {
  return (await leaves()).filter((l) => l.kind === kind && l.subject === subject).map((l) => l.index);
}

const at = (report: AuditReport, indexes: readonly number[]): AuditFinding[] =>
  report.findings.filter((f) => 'index' in f && indexes.includes(f.index));

/** Signs an allow receipt with the service's own key, as a service rewriting its history would. */
async function forgeAllow(jti: string, data: Record<string, unknown>): Promise<number> {
  await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
    tenantId: live.tenant.id,
    kind: 'invocation.allowed',
    subject: jti,
    data: { caller_key_id: 'forged', estimated_micros: 0, ...data },
    now: Math.floor(Date.now() / 1000),
  });
  await integrate();
  const indexes = await indexOf('invocation.allowed', jti);
  return indexes[indexes.length - 1]!;
}

beforeAll(async () => {
  live = await startLiveService();
  su = postgres(live.svc.url, { max: 1, onnotice: () => {} });
  c1 = await storedChain(live);
  c2 = await storedChain(live);
  jti1 = await c1.call();
  jti2 = await c2.call();
  // A denial over a stored chain: a tool the sub-delegation does not allow.
  const inv = createInvocation({ chain: [c1.root, c1.sub], invoker: c1.b, args: { ...ARGS, tool: 'fetch' }, toolServer: 'mcp://search' });
  const denied = await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify }).verify(
    makeBundle(inv, [c1.root, c1.sub], 'reference'),
  );
  expect(denied.valid).toBe(false);
  await integrate();
});
afterAll(async () => {
  await su?.end();
  await live?.close();
});

describe('auditLog: every decision chain', () => {
  it('passes a clean log, having checked every allow, denial and accepted DR', async () => {
    const report = await audit();
    expect(report.findings).toEqual([]);
    expect(report.ok).toBe(true);
    // 4 DRs accepted, 2 allows, 1 denial.
    expect(report.decisionsChecked).toBe(7);
    expect(report.rootsPinned).toBe(true);
    expect(report.notChecked).toMatch(/revocation.*not re-derived offline/);
  });

  it('a root the auditor does not trust makes every decision over it chain-invalid', async () => {
    const report = await auditLog({
      baseUrl: live.baseUrl,
      apiKey: live.tenant.keys.audit,
      decisions: { trustedRoots: [generateKeyPair().did] },
    });
    const allows = [...(await indexOf('invocation.allowed', jti1)), ...(await indexOf('invocation.allowed', jti2))];
    for (const i of allows) {
      expect(at(report, [i])).toContainEqual(
        expect.objectContaining({
          kind: 'chain-invalid',
          index: i,
          // Said as a root missing from the pins, with the one root a tenant trusts that auditors tend to miss.
          detail: expect.stringMatching(/which is not among the roots this audit pins \(--root, trustedRoots\)\. .*custodial_did/),
        }),
      );
    }
  });

  it("reports every decision over a DR whose JWS was swapped behind the service's back", async () => {
    const [before] = await su<{ jws: string }[]>`select jws from delegations where hash = ${c2.sub.hash}`;
    await su.begin(async (tx) => {
      await tx`set local session_replication_role = replica`;
      await tx`update delegations set jws = ${c1.sub.jws} where hash = ${c2.sub.hash}`;
    });
    try {
      const report = await audit();
      const accepted = await indexOf('delegation.accepted', c2.sub.hash);
      const allowed = await indexOf('invocation.allowed', jti2);
      for (const i of [...accepted, ...allowed])
        expect(at(report, [i]), JSON.stringify(report.findings)).toContainEqual(expect.objectContaining({ kind: 'substituted', index: i }));
      // Decisions over other records are untouched.
      const clean = [...(await indexOf('delegation.accepted', c1.sub.hash)), ...(await indexOf('invocation.allowed', jti1))];
      expect(at(report, clean)).toEqual([]);
      expect(report.ok).toBe(false);
    } finally {
      await su.begin(async (tx) => {
        await tx`set local session_replication_role = replica`;
        await tx`update delegations set jws = ${before!.jws} where hash = ${c2.sub.hash}`;
      });
    }
  });

  it('reports allows whose receipt names other records, or another tool, than the invocation', async () => {
    const real = (await su<{ hash: string }[]>`select hash from invocations where jti = ${jti1}`)[0]!.hash;
    const chain = [c1.root.hash, c1.sub.hash];
    const wrongChain = await forgeAllow(jti1, { invocation_hash: real, dr_chain: [c2.root.hash, c1.sub.hash], tool: 'search' });
    const wrongInvocation = await forgeAllow(jti1, { invocation_hash: c2.sub.hash, dr_chain: chain, tool: 'search' });
    const wrongTool = await forgeAllow(jti1, { invocation_hash: real, dr_chain: chain, tool: 'fetch', tool_server: 'mcp://search' });
    const report = await audit();
    expect(at(report, [wrongChain])).toEqual([expect.objectContaining({ kind: 'substituted', index: wrongChain })]);
    expect(at(report, [wrongInvocation])).toEqual([expect.objectContaining({ kind: 'substituted', index: wrongInvocation })]);
    expect(at(report, [wrongTool])).toEqual([
      expect.objectContaining({ kind: 'mismatch', index: wrongTool, detail: expect.stringMatching(/^tool:/) }),
    ]);
  });

  it('reports an allow forged over a DR that widens its parent (rows inserted as a superuser)', async () => {
    // A -> B' allowing a tool the root never granted: signed by A, never accepted by the service.
    const b = generateKeyPair();
    const honest = createSubDelegation({
      parent: c1.root,
      issuer: c1.a,
      audience: b.did,
      policy: { allowed_tools: ['search'], max_calls: 5, max_cost_usd: 1 },
    });
    const wide = signDelegation(
      { ...honest.payload, policy: { allowed_tools: ['search', 'delete'], max_calls: 5, max_cost_usd: 1 } },
      c1.a,
    );
    const rootRow = (await findDelegation(live.svc.store.db, live.tenant.id, c1.root.hash))!;
    expect(await insertDelegation(live.svc.store.db, live.tenant.id, wide, rootRow)).toBe(true);
    const chain = [c1.root, wide];
    const inv = decodeInvocation(
      createInvocation({ chain, invoker: b, args: { ...ARGS, tool: 'delete' }, toolServer: 'mcp://search' }).jws,
    );
    await live.svc.store.db.insert(invocations).values({
      tenantId: live.tenant.id,
      jti: inv.payload.jti,
      hash: inv.hash,
      jws: inv.jws,
      leafHash: wide.hash,
      drChain: [c1.root.hash, wide.hash],
      tool: 'delete',
      callerKeyId: 'forged',
    });
    const index = await forgeAllow(inv.payload.jti, {
      invocation_hash: inv.hash,
      dr_chain: [c1.root.hash, wide.hash],
      tool: 'delete',
      tool_server: 'mcp://search',
    });
    const report = await audit();
    expect(at(report, [index])).toEqual([
      expect.objectContaining({ kind: 'chain-invalid', index, detail: expect.stringMatching(/POLICY_ESCALATION/) }),
    ]);
  });

  it('a denial is checked for substituted records only; an unstored chain is no finding', () => {
    const denial = { index: 3, kind: 'invocation.denied', subject: 'inv:x', iat: 1, data: { dr_chain: [c1.root.hash] } };
    expect(checkDecision(denial, { chain: null })).toEqual([]);
    expect(checkDecision(denial, { chain: { receipts: [c1.root.jws], hashes: [c1.root.hash] } })).toEqual([]);
    expect(checkDecision(denial, { chain: { receipts: [c1.sub.jws], hashes: [c1.root.hash] } })).toEqual([
      expect.objectContaining({ kind: 'substituted' }),
    ]);
  });
});
