/**
 * A denial made before the chain verified (blocks A-C) carries an invocation anyone could have
 * written: the decision log keeps every field read from it (invoker, tool, jti, dr_chain) under
 * claimed_*, and the answer does not call its `iss` the signer.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle } from '../../src/sdk/records.js';
import { createLogger } from '../../src/service/log.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { T0 } from '../support/fixtures.js';

const lines: Record<string, unknown>[] = [];
let svc: TestService;
let tenant: TestTenant;

beforeAll(async () => {
  svc = await startTestService({ log: createLogger('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>)) });
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

/** The invocation JWS with its payload's `iss` replaced, the original signature kept. */
function withIssuer(jws: string, iss: string): string {
  const [header, payload, signature] = jws.split('.');
  const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString('utf8')) as Record<string, unknown>;
  return [header, Buffer.from(JSON.stringify({ ...claims, iss }), 'utf8').toString('base64url'), signature].join('.');
}

describe('decision log: unverified claims', () => {
  it('an invocation re-signed in name only logs its invoker and tool as claims', async () => {
    const [agent, holder, framed] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
    const root = createRootDelegation({
      issuer: tenant.root,
      audience: agent.did,
      policy: { allowed_tools: ['search'] },
      iat: T0,
      nbf: T0 - 10,
    });
    const leaf = createSubDelegation({ parent: root, issuer: agent, audience: holder.did, policy: { allowed_tools: ['search'] }, iat: T0 });
    const invocation = createInvocation({
      chain: [root, leaf],
      invoker: holder,
      args: { tool: 'search', pii_access: false, write_access: false },
      toolServer: 'mcp://t',
      iat: T0,
    });
    const bundle = { ...makeBundle(invocation, [root, leaf]), invocation: withIssuer(invocation.jws, framed.did) };
    const res = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
    expect(res.status).toBe(403);
    const codes = (res.body.violations as { code: string }[]).map((v) => v.code);
    expect(codes).toEqual(expect.arrayContaining(['ISSUER_AUDIENCE_GAP', 'SIGNATURE_INVALID']));

    const decision = lines.find((l) => l['msg'] === 'verify decision' && l['request_id'] === res.headers.get('x-request-id'));
    expect(decision).toMatchObject({
      outcome: 'deny',
      invoker: null,
      tool: null,
      jti: null,
      dr_chain: [],
      claimed_invoker: framed.did,
      claimed_tool: 'search',
      claimed_jti: invocation.payload.jti,
      claimed_dr_chain: [root.hash, leaf.hash],
    });
    // No field of the line states the framed DID as fact.
    const asFact = Object.entries(decision!).filter(([k, v]) => !k.startsWith('claimed_') && JSON.stringify(v).includes(framed.did));
    expect(asFact).toEqual([]);
  });

  it('the answer does not say the invocation "is signed by" a DID whose signature did not verify', async () => {
    const [agent, holder, framed] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
    const root = createRootDelegation({
      issuer: tenant.root,
      audience: agent.did,
      policy: { allowed_tools: ['search'] },
      iat: T0,
      nbf: T0 - 10,
    });
    const leaf = createSubDelegation({ parent: root, issuer: agent, audience: holder.did, policy: { allowed_tools: ['search'] }, iat: T0 });
    const invocation = createInvocation({
      chain: [root, leaf],
      invoker: holder,
      args: { tool: 'search', pii_access: false, write_access: false },
      toolServer: 'mcp://t',
      iat: T0,
    });
    const bundle = { ...makeBundle(invocation, [root, leaf]), invocation: withIssuer(invocation.jws, framed.did) };
    const res = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
    const gap = (res.body.violations as { code: string; message?: string }[]).find((v) => v.code === 'ISSUER_AUDIENCE_GAP');
    expect(gap?.message).toContain(framed.did);
    expect(gap?.message).not.toMatch(/is signed by/);
  });

  it('a verified invocation is logged as fact, with no claimed_* fields', async () => {
    const [agent, holder] = [generateKeyPair(), generateKeyPair()];
    const root = createRootDelegation({
      issuer: tenant.root,
      audience: agent.did,
      policy: { allowed_tools: ['search'] },
      iat: T0,
      nbf: T0 - 10,
    });
    const leaf = createSubDelegation({ parent: root, issuer: agent, audience: holder.did, policy: { allowed_tools: ['search'] }, iat: T0 });
    const invocation = createInvocation({
      chain: [root, leaf],
      invoker: holder,
      args: { tool: 'delete_db', pii_access: false, write_access: false },
      toolServer: 'mcp://t',
      iat: T0,
    });
    const res = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(invocation, [root, leaf]) });
    expect(res.status).toBe(403);
    const decision = lines.find((l) => l['msg'] === 'verify decision' && l['request_id'] === res.headers.get('x-request-id'))!;
    expect(decision).toMatchObject({
      invoker: holder.did,
      tool: 'delete_db',
      jti: invocation.payload.jti,
      dr_chain: [root.hash, leaf.hash],
    });
    expect(Object.keys(decision).filter((k) => k.startsWith('claimed_'))).toEqual([]);
  });
});
