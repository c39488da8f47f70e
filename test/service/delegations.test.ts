/** /v1/delegations on real PostgreSQL: submit, idempotency, refusals, custodial issue, reads. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { count, eq } from 'drizzle-orm';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, createSubDelegation, type SignedDelegation } from '../../src/sdk/records.js';
import { custodialKeys, delegations, serviceReceipts } from '../../src/store/schema/index.js';
import { verifyServiceReceipt } from '../../src/service/signer.js';
import { main as cli } from '../../src/cli/main.js';
import { scratchFolders } from '../support/scratch.js';
import { setupTenant, startTestService, verifyInvocation, type TestService, type TestTenant } from '../support/service.js';
import { createSubDelegationUnchecked, T0 } from '../support/fixtures.js';
import { encodeBase58btc } from '../../src/protocol/base58.js';

let svc: TestService;
let tenant: TestTenant;
let agentA: KeyPair;
let agentB: KeyPair;
let root: SignedDelegation;

const scratch = scratchFolders('chain-');

const policy = { allowed_tools: ['web_search', 'file_read'], max_cost_usd: 10, max_calls: 100 };

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  agentA = generateKeyPair();
  agentB = generateKeyPair();
  root = createRootDelegation({ issuer: tenant.root, audience: agentA.did, policy, iat: T0, nbf: T0 - 10, exp: T0 + 3600 });
});
afterAll(async () => svc?.close());

async function rowCount(): Promise<number> {
  const [r] = await svc.store.db.select({ n: count() }).from(delegations);
  return r!.n;
}

describe('POST /v1/delegations', () => {
  it('stores a trusted root without an API key (201); the answer names no tenant, the key of the tenant reads the service receipt', async () => {
    const r = await svc.call('POST', '/v1/delegations', { json: { receipt: root.jws } });
    expect(r.status).toBe(201);
    expect(r.body).not.toHaveProperty('tenant_id');
    expect(r.body.delegations[0]).toMatchObject({ hash: root.hash, depth: 0, parent_hash: null, service_receipt: null });
    // Nothing stored about it either, even just stored (test/security/keyless-leaks.test.ts).
    for (const field of ['status', 'revoked_at', 'revoked_by', 'created_at']) expect(r.body.delegations[0]).not.toHaveProperty(field);
    const withKey = await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipt: root.jws } });
    expect(withKey.status).toBe(200);
    expect(withKey.body.tenant_id).toBe(tenant.id);
    expect(withKey.body.delegations[0]).toMatchObject({ status: 'active', revoked_at: null, created_at: expect.any(String) });
    const stored = withKey.body.delegations[0];
    const keys = (await svc.call('GET', '/v1/keys')).body.keys.map((k: { kid: string; public_key: string }) => ({
      kid: k.kid,
      publicKey: Uint8Array.from(Buffer.from(k.public_key, 'base64url')),
    }));
    const check = verifyServiceReceipt(stored.service_receipt.jws, keys);
    expect(check.valid).toBe(true);
  });

  it('is idempotent: the same JWS again is 200 with the same service receipt', async () => {
    const first = await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: [root.jws] } });
    const again = await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: [root.jws] } });
    expect(again.status).toBe(200);
    expect(again.body.delegations[0].service_receipt.id).toBe(first.body.delegations[0].service_receipt.id);
  });

  it('stores a sub-delegation extending a stored parent, signed by the parent aud', async () => {
    const sub = createSubDelegation({
      parent: root,
      issuer: agentA,
      audience: agentB.did,
      policy: { ...policy, allowed_tools: ['web_search'], max_calls: 10 },
      iat: T0,
    });
    const r = await svc.call('POST', '/v1/delegations', { json: { receipt: sub.jws } });
    expect(r.status).toBe(201);
    expect(r.body.delegations[0]).toMatchObject({ depth: 1, parent_hash: root.hash, root_hash: root.hash });
  });

  it('refuses escalation with 422 and every violation, storing nothing', async () => {
    const before = await rowCount();
    const bad = createSubDelegationUnchecked(root, {
      issuer: agentA,
      audience: agentB.did,
      policy: { allowed_tools: ['web_search', 'delete_db'], max_cost_usd: 50, max_calls: 1000 },
    });
    const r = await svc.call('POST', '/v1/delegations', { json: { receipt: bad.jws } });
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('POLICY_ESCALATION');
    expect(r.body.error.suggestion).toBeTruthy();
    const fields = r.body.error.details.violations.map((v: { field: string }) => v.field);
    expect(fields).toEqual(expect.arrayContaining(['policy.allowed_tools', 'policy.max_cost_usd', 'policy.max_calls']));
    expect(r.body.request_id).toBeTruthy();
    expect(await rowCount()).toBe(before);
  });

  it('refuses a sub-DR not signed by the parent aud: 422 ISSUER_AUDIENCE_GAP with a key, the unknown-parent answer without', async () => {
    const mallory = generateKeyPair();
    const bad = createSubDelegationUnchecked(root, { issuer: mallory, audience: mallory.did, policy: { ...policy, max_calls: 1 } });
    const r = await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipt: bad.jws } });
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('ISSUER_AUDIENCE_GAP');
    // Keyless, mallory proved no part in the chain: the stored parent is not shown (test/security/keyless-leaks.test.ts).
    const keyless = await svc.call('POST', '/v1/delegations', { json: { receipt: bad.jws } });
    expect(keyless.status).toBe(422);
    expect(keyless.body.error.code).toBe('BUNDLE_INCOMPLETE');
  });

  it('refuses an untrusted root (422) and an unknown parent (422)', async () => {
    const stranger = generateKeyPair();
    const untrusted = createRootDelegation({ issuer: stranger, audience: agentA.did, policy, iat: T0 });
    const r = await svc.call('POST', '/v1/delegations', { json: { receipt: untrusted.jws } });
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('UNTRUSTED_ROOT');
    const orphanParent = createRootDelegation({ issuer: tenant.root, audience: agentA.did, policy, iat: T0, jti: 'dr:never-stored' });
    const orphan = createSubDelegation({
      parent: orphanParent,
      issuer: agentA,
      audience: agentB.did,
      policy: { ...policy, max_calls: 1 },
      iat: T0,
    });
    const o = await svc.call('POST', '/v1/delegations', { json: { receipt: orphan.jws } });
    expect(o.status).toBe(422);
    expect(o.body.error.code).toBe('BUNDLE_INCOMPLETE');
  });

  it('refuses malformed input with 400 and a stable code', async () => {
    const cases: [unknown, string][] = [
      [{ receipt: 'not.a.jws' }, 'MALFORMED_JWS'],
      [{ receipt: 'abc' }, 'MALFORMED_JWS'],
      [{ receipts: [] }, 'INVALID_REQUEST'],
      [{ nope: 1 }, 'INVALID_REQUEST'],
      [[1, 2], 'INVALID_REQUEST'],
    ];
    for (const [json, code] of cases) {
      const r = await svc.call('POST', '/v1/delegations', { json });
      expect(r.status, JSON.stringify(json)).toBe(400);
      expect(r.body.error.code).toBe(code);
    }
    const dup = await svc.call('POST', '/v1/delegations', {
      body: `{"receipt":"${root.jws}","receipt":"x"}`,
      headers: { 'content-type': 'application/json' },
    });
    expect(dup.status).toBe(400);
    expect(dup.body.error.code).toBe('INVALID_REQUEST');
    // A body that fits neither form is told what the two forms are, not only "Invalid input".
    for (const json of [{ receipt: root.jws, receipts: [root.jws] }, { receipts: root.jws }, { nope: 1 }]) {
      const r = await svc.call('POST', '/v1/delegations', { json });
      expect(r.status, JSON.stringify(json)).toBe(400);
      expect(r.body.error.message).toMatch(/\{"receipts": \[root-to-leaf JWS, \.\.\.\]\} \(1 to 16\) or \{"receipt": "<JWS>"\}/);
    }
  });

  it('a record naming a weak (small-order) did:key is malformed input: 400 WEAK_KEY, as everywhere else', async () => {
    const smallOrder = `did:key:z${encodeBase58btc(new Uint8Array([0xed, 0x01, 0x01, ...new Uint8Array(31)]))}`;
    const weak = createSubDelegationUnchecked(root, { issuer: agentA, audience: smallOrder, policy: { ...policy, max_calls: 1 } });
    const r = await svc.call('POST', '/v1/delegations', { json: { receipts: [root.jws, weak.jws] } });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('WEAK_KEY');
  });

  it('a different DR reusing a jti is 409', async () => {
    const again = createRootDelegation({ issuer: tenant.root, audience: agentB.did, policy, iat: T0, jti: root.payload.jti });
    const r = await svc.call('POST', '/v1/delegations', { json: { receipt: again.jws } });
    expect(r.status).toBe(409);
    expect(r.body.error.code).toBe('CONFLICT');
  });

  it('an over-size body is 413 in the envelope', async () => {
    const r = await svc.call('POST', '/v1/delegations', {
      body: JSON.stringify({ receipt: 'x'.repeat(300 * 1024) }),
      headers: { 'content-type': 'application/json' },
    });
    expect(r.status).toBe(413);
    expect(r.body.error.code).toBe('PAYLOAD_TOO_LARGE');
  });

  it('with an API key of another tenant, the root is not trusted there (422)', async () => {
    const other = await setupTenant(svc, 'other');
    const fresh = createRootDelegation({ issuer: tenant.root, audience: agentA.did, policy, iat: T0 });
    const r = await svc.call('POST', '/v1/delegations', { key: other.keys.issue, json: { receipt: fresh.jws } });
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('UNTRUSTED_ROOT');
  });
});

describe('POST /v1/delegations/issue (custodial root)', () => {
  it('signs a root with the tenant custodial key, trusted automatically', async () => {
    const r = await svc.call('POST', '/v1/delegations/issue', {
      key: tenant.keys.issue,
      json: { audience: agentA.did, policy: { allowed_tools: ['web_search'], max_calls: 5 } },
    });
    expect(r.status).toBe(201);
    expect(r.body.delegation.iss).toBe(r.body.custodial_did);
    expect(r.body.delegation.status).toBe('active');
    const again = await svc.call('POST', '/v1/delegations/issue', { key: tenant.keys.issue, json: { audience: agentB.did, policy: {} } });
    expect(again.body.custodial_did).toBe(r.body.custodial_did);
  });

  it('needs an issue key and a valid body', async () => {
    expect((await svc.call('POST', '/v1/delegations/issue', { json: { audience: agentA.did, policy: {} } })).status).toBe(401);
    expect(
      (await svc.call('POST', '/v1/delegations/issue', { key: tenant.keys.audit, json: { audience: agentA.did, policy: {} } })).status,
    ).toBe(403);
    const bad = await svc.call('POST', '/v1/delegations/issue', {
      key: tenant.keys.issue,
      json: { audience: 'bob', policy: { surprise: 1 } },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('INVALID_REQUEST');
  });

  it('signs what it means to DRS verifiers too: access not granted as false, an empty tool list refused, storing nothing', async () => {
    const fresh = await setupTenant(svc, 'drs-readable');
    const empty = await svc.call('POST', '/v1/delegations/issue', {
      key: fresh.keys.issue,
      json: { audience: agentA.did, policy: { allowed_tools: [] } },
    });
    expect(empty.status).toBe(400);
    expect(empty.body.error.code).toBe('INVALID_FIELD');
    expect(empty.body.error.message).toMatch(/DRS verifier/);
    // Refused before the tenant's custodial key is made.
    expect(await svc.store.db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, fresh.id))).toHaveLength(0);

    const r = await svc.call('POST', '/v1/delegations/issue', {
      key: fresh.keys.issue,
      json: { audience: agentA.did, policy: { allowed_tools: ['web_search'], max_calls: 3 } },
    });
    expect(r.status).toBe(201);
    expect(r.body.delegation.policy).toEqual({ allowed_tools: ['web_search'], max_calls: 3, pii_access: false, write_access: false });
  });

  it('refuses an exp before now as what it is, with or without an nbf, before the custodial key is made', async () => {
    const fresh = await setupTenant(svc, 'past-exp');
    for (const times of [{ exp: T0 - 100 }, { exp: T0 - 1 }, { nbf: T0 - 200, exp: T0 - 100 }]) {
      const r = await svc.call('POST', '/v1/delegations/issue', {
        key: fresh.keys.issue,
        json: { audience: agentA.did, policy: { allowed_tools: ['web_search'] }, ...times },
      });
      expect(r.status, JSON.stringify(times)).toBe(422);
      expect(r.body.error).toMatchObject({ code: 'RECEIPT_EXPIRED', message: expect.stringMatching(/^exp \(\d+\) is before now/) });
      expect(r.body.error.details.violations).toEqual([{ code: 'RECEIPT_EXPIRED', field: 'exp', required: `>= ${T0}`, actual: times.exp }]);
    }
    expect(await svc.store.db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, fresh.id))).toHaveLength(0);
    // exp is the last second the record is valid: an exp of now is issued, and active.
    const lastSecond = await svc.call('POST', '/v1/delegations/issue', {
      key: fresh.keys.issue,
      json: { audience: agentA.did, policy: { allowed_tools: ['web_search'] }, exp: T0 },
    });
    expect(lastSecond.status, JSON.stringify(lastSecond.body)).toBe(201);
  });

  it('runs the default lifetime from nbf: a record valid from two days ahead is issued for 24 h from then', async () => {
    const later = T0 + 2 * 86_400;
    const r = await svc.call('POST', '/v1/delegations/issue', {
      key: tenant.keys.issue,
      json: { audience: agentA.did, policy: { allowed_tools: ['web_search'] }, nbf: later },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect(r.body.delegation).toMatchObject({ nbf: later, exp: later + 86_400 });
    // An nbf already passed changes nothing: 24 h from now.
    const past = await svc.call('POST', '/v1/delegations/issue', {
      key: tenant.keys.issue,
      json: { audience: agentB.did, policy: { allowed_tools: ['web_search'] }, nbf: T0 - 600 },
    });
    expect(past.body.delegation).toMatchObject({ nbf: T0 - 600, exp: T0 + 86_400 });
    // Near the largest time a record holds, the default stops there; an exp before nbf is refused
    // before a new tenant's custodial key is made.
    const last = await svc.call('POST', '/v1/delegations/issue', {
      key: tenant.keys.issue,
      json: { audience: agentA.did, policy: { allowed_tools: ['web_search'] }, nbf: Number.MAX_SAFE_INTEGER - 10 },
    });
    expect(last.status, JSON.stringify(last.body)).toBe(201);
    expect(last.body.delegation.exp).toBe(Number.MAX_SAFE_INTEGER);
    const fresh = await setupTenant(svc, 'exp-before-nbf');
    const never = await svc.call('POST', '/v1/delegations/issue', {
      key: fresh.keys.issue,
      json: { audience: agentA.did, policy: { allowed_tools: ['web_search'] }, nbf: T0 + 600, exp: T0 + 300 },
    });
    expect(never.status).toBe(400);
    expect(never.body.error).toMatchObject({ code: 'INVALID_FIELD', message: expect.stringMatching(/^exp \(\d+\) is before nbf/) });
    expect(await svc.store.db.select().from(custodialKeys).where(eq(custodialKeys.tenantId, fresh.id))).toHaveLength(0);
  });
});

describe('reading delegations', () => {
  let leaf: SignedDelegation;
  beforeAll(async () => {
    const mid = createSubDelegation({ parent: root, issuer: agentA, audience: agentB.did, policy: { ...policy, max_calls: 20 }, iat: T0 });
    const agentC = generateKeyPair();
    leaf = createSubDelegation({
      parent: mid,
      issuer: agentB,
      audience: agentC.did,
      policy: { ...policy, allowed_tools: ['web_search'], max_calls: 5 },
      iat: T0,
    });
    const r = await svc.call('POST', '/v1/delegations', { json: { receipts: [root.jws, mid.jws, leaf.jws] } });
    expect(r.status).toBe(201);
  });

  it('GET /v1/delegations/{hash} returns record, status, depth, parent and usage', async () => {
    const r = await svc.call('GET', `/v1/delegations/${leaf.hash}`, { key: tenant.keys.audit });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ hash: leaf.hash, depth: 2, status: 'active', jws: leaf.jws });
    expect(r.body.usage).toMatchObject({
      calls_used: 0,
      max_calls: 5,
      declared_usd: 0,
      metered_usd: 0,
      unmetered_invocations: 0,
      calibration: null,
    });
  });

  it('GET …/chain is root-to-leaf and re-verifies offline with baton verify', async () => {
    const r = await svc.call('GET', `/v1/delegations/${leaf.hash}/chain`, { key: tenant.keys.audit });
    expect(r.status).toBe(200);
    expect(r.body.receipts).toHaveLength(3);
    expect(r.body.records.map((x: { depth: number }) => x.depth)).toEqual([0, 1, 2]);
    const { writeFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    const file = join(scratch(), 'chain.json');
    writeFileSync(file, JSON.stringify(r.body));
    let out = '';
    const code = await cli(['verify', file, '--chain-only', '--trust', tenant.root.did, '--at', String(T0 + 10), '--json'], {
      out: (t) => (out += t),
      err: () => {},
    });
    expect(code).toBe(0);
    expect(JSON.parse(out)).toMatchObject({ valid: true, chain_depth: 3 });
  });

  it('GET …/tree lists descendants', async () => {
    const r = await svc.call('GET', `/v1/delegations/${root.hash}/tree`, { key: tenant.keys.audit });
    expect(r.status).toBe(200);
    expect(r.body.tree.hash).toBe(root.hash);
    expect(r.body.count).toBeGreaterThanOrEqual(3);
    const flat: string[] = [];
    const walk = (n: { hash: string; children: unknown[] }) => {
      flat.push(n.hash);
      n.children.forEach((c) => walk(c as never));
    };
    walk(r.body.tree);
    expect(flat).toContain(leaf.hash);
  });

  it('GET …/tree counts the calls of a DR without max_calls as GET /v1/delegations/{hash} does', async () => {
    // The verify statement counts only DRs with a max_calls in their own row: the others' calls are read.
    const uncounted = { allowed_tools: ['web_search'], max_cost_usd: 10 };
    const [A, B, C, D] = [generateKeyPair(), generateKeyPair(), generateKeyPair(), generateKeyPair()];
    const top = createRootDelegation({ issuer: tenant.root, audience: A.did, policy: uncounted, iat: T0, nbf: T0 - 10, exp: T0 + 3600 });
    const used = createSubDelegation({ parent: top, issuer: A, audience: B.did, policy: uncounted, iat: T0 });
    const counted = createSubDelegation({ parent: top, issuer: A, audience: C.did, policy: { ...uncounted, max_calls: 9 }, iat: T0 });
    const idle = createSubDelegation({ parent: top, issuer: A, audience: D.did, policy: uncounted, iat: T0 });
    for (const receipts of [[top.jws, used.jws], [counted.jws], [idle.jws]])
      expect((await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts } })).status).toBe(201);
    for (let i = 0; i < 2; i++) expect((await verifyInvocation(svc, tenant.keys.verify, [top, used], B)).res.status).toBe(200);
    expect((await verifyInvocation(svc, tenant.keys.verify, [top, counted], C)).res.status).toBe(200);
    const r = await svc.call('GET', `/v1/delegations/${top.hash}/tree`, { key: tenant.keys.audit });
    expect(r.status).toBe(200);
    const callsIn = new Map<string, number>();
    const walk = (n: { hash: string; calls_used: number; children: unknown[] }) => {
      callsIn.set(n.hash, n.calls_used);
      n.children.forEach((c) => walk(c as never));
    };
    walk(r.body.tree);
    expect(Object.fromEntries(callsIn)).toEqual({ [top.hash]: 3, [used.hash]: 2, [counted.hash]: 1, [idle.hash]: 0 });
    for (const dr of [top, counted, used, idle]) {
      const one = await svc.call('GET', `/v1/delegations/${dr.hash}`, { key: tenant.keys.audit });
      expect(one.body.usage.calls_used, dr.hash).toBe(callsIn.get(dr.hash));
    }
  });

  it('another tenant sees 404, never the record; no key is 401; bad hash is 400', async () => {
    const other = await setupTenant(svc, 'nosy');
    for (const suffix of ['', '/chain', '/tree']) {
      const r = await svc.call('GET', `/v1/delegations/${leaf.hash}${suffix}`, { key: other.keys.audit });
      expect(r.status).toBe(404);
      expect(JSON.stringify(r.body)).not.toContain(leaf.jws);
    }
    expect((await svc.call('GET', `/v1/delegations/${leaf.hash}`)).status).toBe(401);
    expect((await svc.call('GET', '/v1/delegations/not-a-hash', { key: tenant.keys.audit })).status).toBe(400);
  });

  it('every accepted DR has exactly one acceptance service receipt', async () => {
    const [r] = await svc.store.db.select({ n: count() }).from(serviceReceipts).where(eq(serviceReceipts.kind, 'delegation.accepted'));
    expect(r!.n).toBe(await rowCount());
  });
});

describe('unknown routes', () => {
  it('404 in the standard envelope', async () => {
    const r = await svc.call('GET', '/v1/nope');
    expect(r.status).toBe(404);
    expect(r.body.error.code).toBe('NOT_FOUND');
    expect(r.body.request_id).toBeTruthy();
  });

  it('a known route asked with another method is 405 with Allow, keyless too, and stores nothing', async () => {
    const before = await rowCount();
    for (const [method, path, allow] of [
      ['GET', '/v1/verify', 'POST'],
      ['PUT', '/v1/delegations', 'POST'],
      ['DELETE', `/v1/delegations/sha256:${'a'.repeat(64)}`, 'GET, HEAD'],
      ['POST', '/v1/log/tile/0/000', 'GET, HEAD'],
      ['PATCH', '/v1/approvals/apr_x/approve', 'POST'],
      ['GET', '/v1/admin/api-keys/key_x', 'DELETE'],
      // A path one route names literally answers only its methods, though GET /v1/delegations/{hash} matches it.
      ['GET', '/v1/delegations/issue', 'POST'],
      ['HEAD', '/v1/delegations/issue', 'POST'],
      ['PUT', '/v1/delegations/issue', 'POST'],
      ['GET', '/v1/delegations/issue?x=1', 'POST'], // not the query refusal of the route it never reaches
    ] as const) {
      const r = await svc.call(method, path);
      expect(r.status, `${method} ${path}`).toBe(405);
      expect(r.headers.get('allow')).toBe(allow);
      if (method === 'HEAD') continue; // no body
      expect(r.body.error.code).toBe('METHOD_NOT_ALLOWED');
      expect(r.body.error.details.allow).toEqual(allow.split(', '));
    }
    expect(await rowCount()).toBe(before);
    // Nothing serves the path under any method: still 404.
    expect((await svc.call('DELETE', '/v1/nope')).status).toBe(404);
    expect((await svc.call('GET', '/v1/delegations/x/y/z')).status).toBe(404);
  });

  it('a trailing slash is another path: 404 that names the route without it, never a 405 naming the method asked', async () => {
    for (const [method, path, hint] of [
      ['GET', '/v1/keys/', '/v1/keys answers GET, HEAD.'],
      ['POST', '/v1/delegations/', '/v1/delegations answers POST.'],
      ['GET', `/v1/delegations/sha256:${'a'.repeat(64)}//`, `/v1/delegations/sha256:${'a'.repeat(64)} answers GET, HEAD.`],
    ] as const) {
      const r = await svc.call(method, path);
      expect(r.status, `${method} ${path}`).toBe(404);
      expect(r.body.error.code).toBe('NOT_FOUND');
      expect(r.headers.get('allow')).toBeNull();
      expect(r.body.error.suggestion).toBe(`Routes do not end in "/": ${hint}`);
    }
    const unknown = await svc.call('GET', '/v1/nope/');
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.suggestion).toContain('GET /docs');
  });
});
