/**
 * A denial refused before the chain's linkage and every signature verified (blocks A-C) is
 * recorded without the jti and dr_chain its invocation claims: anyone may write those, and
 * recorded, a forged invocation would be listed under any DR and any jti it named. A denial after
 * that (block D and later) keeps them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, type SignedDelegation } from '../../src/sdk/records.js';
import { T0, TOOL_SERVER } from '../support/fixtures.js';
import { setupTenant, startTestService, storeTwoLeaves, verifyInvocation, type TestService, type TestTenant } from '../support/service.js';

let svc: TestService;
let tenant: TestTenant;
let root: SignedDelegation, leafA: SignedDelegation;
const A = generateKeyPair(),
  B = generateKeyPair(),
  C = generateKeyPair();

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  ({ root, leafA } = await storeTwoLeaves(svc, tenant, { allowed_tools: ['web_search'], max_cost_usd: 1 }, A, B, C));
});
afterAll(async () => svc?.close());

interface Denied {
  decision: string;
  jti: string | null;
  dr_chain: string[];
  code: string;
  invocation_hash: string | null;
}

describe('what a denial records of its invocation', () => {
  it("a forged invocation's jti and chain are not recorded as its own; a policy denial keeps them", async () => {
    const honest = await verifyInvocation(svc, tenant.keys.verify, [root, leafA], B);
    expect(honest.res.status, JSON.stringify(honest.res.body)).toBe(200);

    // Signed by a key the chain never named, under the honest jti and chain (block B).
    const stranger = await verifyInvocation(svc, tenant.keys.verify, [root, leafA], generateKeyPair(), {}, honest.jti);
    expect(stranger.res.body.error.code).toBe('ISSUER_AUDIENCE_GAP');
    // The holder's invocation with its signature altered (block C).
    const signed = createInvocation({
      chain: [root, leafA],
      invoker: B,
      args: { tool: 'web_search', estimated_cost_usd: 0.1, pii_access: false, write_access: false },
      toolServer: TOOL_SERVER,
      iat: T0,
    });
    const [h, p, sig] = signed.jws.split('.');
    const tampered = `${h}.${p}.${sig!.startsWith('A') ? 'B' : 'A'}${sig!.slice(1)}`;
    const badSignature = await svc.call('POST', '/v1/verify', {
      key: tenant.keys.verify,
      json: { bundle_version: '4.0', invocation: tampered, receipts: [] },
    });
    expect(badSignature.body.error.code).toBe('SIGNATURE_INVALID');
    // A chain of the stranger's own, every signature and link valid, under a root nobody trusts here
    // (block C): its jti is still only the stranger's word.
    const ownRoot = generateKeyPair(),
      holder = generateKeyPair();
    const theirs = createRootDelegation({ issuer: ownRoot, audience: holder.did, policy: {}, iat: T0, nbf: T0 - 100, exp: T0 + 3600 });
    const untrusted = await verifyInvocation(svc, tenant.keys.verify, [theirs], holder, {}, honest.jti);
    expect(untrusted.res.body.error.code).toBe('UNTRUSTED_ROOT');
    // The holder's own call of a tool the chain does not allow (block D): its claims are verified.
    const policy = await verifyInvocation(svc, tenant.keys.verify, [root, leafA], B, { tool: 'delete_everything' });
    expect(policy.res.body.error.code).toBe('POLICY_VIOLATION');

    const denied = (await svc.call('GET', '/v1/invocations?outcome=denied', { key: tenant.keys.audit })).body.invocations as Denied[];
    const byCode = new Map(denied.map((d) => [d.code, d]));
    for (const code of ['ISSUER_AUDIENCE_GAP', 'SIGNATURE_INVALID', 'UNTRUSTED_ROOT']) {
      expect(byCode.get(code), code).toMatchObject({ jti: null, dr_chain: [] });
      expect(byCode.get(code)?.invocation_hash, code).toMatch(/^sha256:/);
    }
    expect(byCode.get('POLICY_VIOLATION')).toMatchObject({ jti: policy.jti, dr_chain: [root.hash, leafA.hash] });
    // Under the honest DR only the holder's own decisions; under the honest jti, no forged denial.
    const underLeaf = (await svc.call('GET', `/v1/invocations?dr=${leafA.hash}`, { key: tenant.keys.audit })).body.invocations as Denied[];
    expect(underLeaf.filter((i) => i.decision === 'denied').map((i) => i.code)).toEqual(['POLICY_VIOLATION']);
    const ofJti = await svc.call('GET', `/v1/invocations/${honest.jti}`, { key: tenant.keys.audit });
    expect(ofJti.body.denials).toEqual([]);
  });
});
