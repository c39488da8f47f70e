/**
 * POST /v1/delegations/{hash}/revoke on real PostgreSQL: both auth paths,
 * who may sign a revocation, idempotency, refusals that store nothing, and
 * the effect through POST /v1/verify (descendants denied, siblings not).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, count, eq, isNotNull, sql } from 'drizzle-orm';
import { rows } from '../../src/store/rows.js';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import { signJws } from '../../src/protocol/jws.js';
import { delegations, serviceReceipts, trustedRoots } from '../../src/store/schema/index.js';
import { verifyServiceReceipt } from '../../src/service/signer.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { ARGS, T0, TOOL_SERVER } from '../support/fixtures.js';

let svc: TestService;
let tenant: TestTenant;

const policy = { allowed_tools: ['web_search'], max_cost_usd: 10 };

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

const root = (issuer: KeyPair, audience: KeyPair) =>
  createRootDelegation({ issuer, audience: audience.did, policy, iat: T0, nbf: T0 - 100, exp: T0 + 3600 });
const sub = (parent: SignedDelegation, issuer: KeyPair, audience: KeyPair) =>
  createSubDelegation({ parent, issuer, audience: audience.did, policy, iat: T0 });

async function submit(chain: readonly SignedDelegation[], key?: string): Promise<void> {
  const r = await svc.call('POST', '/v1/delegations', { ...(key ? { key } : {}), json: { receipts: chain.map((d) => d.jws) } });
  if (r.status !== 201 && r.status !== 200) throw new Error(`submit: ${r.status} ${JSON.stringify(r.body)}`);
}

let seq = 0;
async function verifyThrough(chain: readonly SignedDelegation[], invoker: KeyPair, opts: { key?: string; byReference?: boolean } = {}) {
  const invocation = createInvocation({ chain, invoker, args: ARGS, toolServer: TOOL_SERVER, iat: T0, jti: `inv:revoke-${++seq}` });
  return svc.call('POST', '/v1/verify', {
    key: opts.key ?? tenant.keys.verify,
    json: makeBundle(invocation, chain, opts.byReference ? 'reference' : 'value'),
  });
}

function signedRevocation(signer: KeyPair, target: string, extra: Record<string, unknown> = {}, seed = signer.seed): string {
  return signJws({ iss: signer.did, drs_v: '4.0', drs_type: 'revocation', target, iat: T0, jti: `rev:${++seq}`, ...extra }, seed);
}

async function revokedRows(): Promise<number> {
  const [r] = await svc.store.db.select({ n: count() }).from(delegations).where(isNotNull(delegations.revokedAt));
  return r!.n;
}
async function revocationReceipts(hash?: string): Promise<number> {
  const [r] = await svc.store.db
    .select({ n: count() })
    .from(serviceReceipts)
    .where(
      hash
        ? and(eq(serviceReceipts.kind, 'delegation.revoked'), eq(serviceReceipts.subject, hash))
        : eq(serviceReceipts.kind, 'delegation.revoked'),
    );
  return r!.n;
}

/** A fresh tree: R -> A (root); A -> B (mid); B -> C (leaf). */
async function freshChain(): Promise<{
  R: KeyPair;
  A: KeyPair;
  B: KeyPair;
  C: KeyPair;
  root: SignedDelegation;
  mid: SignedDelegation;
  leaf: SignedDelegation;
}> {
  const [A, B, C] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
  const r = root(tenant.root, A);
  const m = sub(r, A, B);
  const l = sub(m, B, C);
  await submit([r, m, l]);
  return { R: tenant.root, A, B, C, root: r, mid: m, leaf: l };
}

describe('revoking a middle DR', () => {
  // R -> A (root); A -> B (mid1) and A -> D (mid2, its sibling);
  // B -> C and B -> E (under mid1); D -> F (under mid2).
  const A = generateKeyPair(),
    B = generateKeyPair(),
    C = generateKeyPair(),
    D = generateKeyPair(),
    E = generateKeyPair(),
    F = generateKeyPair();
  let r0: SignedDelegation,
    mid1: SignedDelegation,
    mid2: SignedDelegation,
    leaf1: SignedDelegation,
    leaf2: SignedDelegation,
    leaf3: SignedDelegation;
  let paths: { name: string; chain: SignedDelegation[]; invoker: KeyPair; underMid1: boolean }[];

  beforeAll(async () => {
    r0 = root(tenant.root, A);
    mid1 = sub(r0, A, B);
    mid2 = sub(r0, A, D);
    leaf1 = sub(mid1, B, C);
    leaf2 = sub(mid1, B, E);
    leaf3 = sub(mid2, D, F);
    await submit([r0, mid1, leaf1]);
    await submit([leaf2]);
    await submit([mid2, leaf3]);
    paths = [
      { name: 'root', chain: [r0], invoker: A, underMid1: false },
      { name: 'mid1', chain: [r0, mid1], invoker: B, underMid1: true },
      { name: 'leaf1', chain: [r0, mid1, leaf1], invoker: C, underMid1: true },
      { name: 'leaf2', chain: [r0, mid1, leaf2], invoker: E, underMid1: true },
      { name: 'mid2', chain: [r0, mid2], invoker: D, underMid1: false },
      { name: 'leaf3', chain: [r0, mid2, leaf3], invoker: F, underMid1: false },
    ];
  });

  it('every path verifies before the revocation', async () => {
    for (const p of paths) expect((await verifyThrough(p.chain, p.invoker)).status, p.name).toBe(200);
  });

  it('an issue key revokes mid1: 200 with the mark, the revoker, the descendant count and a signed service receipt', async () => {
    const receiptsBefore = await revocationReceipts();
    const before = Date.now();
    const r = await svc.call('POST', `/v1/delegations/${mid1.hash}/revoke`, {
      key: tenant.keys.issue,
      json: { confirm: true, reason: '  agent B compromised  ' },
    });
    const after = Date.now();
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      hash: mid1.hash,
      status: 'revoked',
      reason: 'agent B compromised',
      descendants: 2,
      already_revoked: false,
      tenant_id: tenant.id,
    });
    // The database's clock when the mark was written (the calls it compares with carry that clock),
    // to the millisecond, not the service's clock in whole seconds.
    const revokedAt = Date.parse(r.body.revoked_at);
    // (A database on another host may keep another time: a second either way.)
    expect(revokedAt).toBeGreaterThanOrEqual(before - 1_000);
    expect(revokedAt).toBeLessThanOrEqual(after + 1_000);
    expect(revokedAt).not.toBe(T0 * 1000);
    // Stored in whole milliseconds (rounded up), the precision the answer and the receipt show.
    const [stored] = await rows<{ sub_ms: number }>(
      svc.store.db,
      sql`select (extract(microseconds from revoked_at)::bigint % 1000)::int as sub_ms from delegations where hash = ${mid1.hash}`,
    );
    expect(stored?.sub_ms).toBe(0);
    expect(r.body.revoked_by.kind).toBe('api_key');
    expect(r.body.revoked_by.id).toMatch(/^key_/);
    expect(await revocationReceipts()).toBe(receiptsBefore + 1);

    const keys = (await svc.call('GET', '/v1/keys')).body.keys.map((k: { kid: string; public_key: string }) => ({
      kid: k.kid,
      publicKey: Uint8Array.from(Buffer.from(k.public_key, 'base64url')),
    }));
    const check = verifyServiceReceipt(r.body.service_receipt.jws, keys);
    expect(check.valid).toBe(true);
    expect(check.payload).toMatchObject({ baton_receipt: 'delegation.revoked', subject: mid1.hash, tenant: tenant.id });
    expect((check.payload as { data: Record<string, unknown> }).data).toMatchObject({
      descendants: 2,
      reason: 'agent B compromised',
      revoked_by: r.body.revoked_by,
    });
  });

  it('every descendant is denied RECEIPT_REVOKED from then on, by value and by reference; no sibling is', async () => {
    for (const p of paths) {
      for (const byReference of [false, true]) {
        const v = await verifyThrough(p.chain, p.invoker, { byReference });
        if (p.underMid1) {
          expect(v.status, p.name).toBe(403);
          expect(v.body.valid).toBe(false);
          expect(v.body.error.code).toBe('RECEIPT_REVOKED');
          expect(v.body.error.block).toBe('F');
          expect(v.body.violations.some((x: { dr_hash?: string }) => x.dr_hash === mid1.hash)).toBe(true);
        } else {
          expect(v.status, `${p.name}: ${JSON.stringify(v.body)}`).toBe(200);
          expect(v.body.valid).toBe(true);
        }
      }
    }
  });

  it('only mid1 carries the mark; the views show descendants revoked by mid1 and siblings active', async () => {
    const marked = await svc.store.db.select({ hash: delegations.hash }).from(delegations).where(isNotNull(delegations.revokedAt));
    expect(marked.map((m) => m.hash)).toContain(mid1.hash);
    for (const d of [leaf1, leaf2, r0, mid2, leaf3]) expect(marked.map((m) => m.hash)).not.toContain(d.hash);

    for (const d of [mid1, leaf1, leaf2]) {
      const g = await svc.call('GET', `/v1/delegations/${d.hash}`, { key: tenant.keys.audit });
      expect(g.body).toMatchObject({ status: 'revoked', revoked_by: mid1.hash });
    }
    for (const d of [r0, mid2, leaf3]) {
      const g = await svc.call('GET', `/v1/delegations/${d.hash}`, { key: tenant.keys.audit });
      expect(g.body).toMatchObject({ status: 'active', revoked_by: null });
    }
    expect((await svc.call('GET', `/v1/delegations/${mid1.hash}`, { key: tenant.keys.audit })).body.revoked_reason).toBe(
      'agent B compromised',
    );
  });

  it('nothing can extend a revoked DR', async () => {
    const G = generateKeyPair();
    const late = sub(leaf1, C, G);
    const r = await svc.call('POST', '/v1/delegations', { json: { receipt: late.jws } });
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('RECEIPT_REVOKED');
  });

  it('revoking again is idempotent: 200 with the original time, reason, revoker and service receipt', async () => {
    const first = await svc.call('POST', `/v1/delegations/${mid1.hash}/revoke`, {
      key: tenant.keys.issue,
      json: { confirm: true, reason: 'again' },
    });
    const receiptsBefore = await revocationReceipts(mid1.hash);
    svc.clock.now += 120;
    try {
      for (const call of [
        { key: tenant.keys.issue, json: { confirm: true, reason: 'a different reason' } },
        { key: svc.adminKey, json: { confirm: true, reason: 'admin too' } },
        { json: { revocation: signedRevocation(tenant.root, mid1.hash, { iat: svc.clock.now, reason: 'signed' }) } },
      ]) {
        const again = await svc.call('POST', `/v1/delegations/${mid1.hash}/revoke`, call);
        expect(again.status).toBe(200);
        // A keyless revoker is told a key revoked it first, not the tenant's reason or key id.
        const keyed = 'key' in call;
        expect(again.body).toMatchObject({
          hash: mid1.hash,
          status: 'revoked',
          revoked_at: first.body.revoked_at,
          reason: keyed ? 'agent B compromised' : null,
          revoked_by: keyed ? first.body.revoked_by : { kind: 'api_key' },
          descendants: 2,
          already_revoked: true,
        });
        if (!keyed) expect(again.body.revoked_by).not.toHaveProperty('id');
        // A keyless answer carries no service receipt: its signed claims name the tenant.
        if ('key' in call) expect(again.body.service_receipt.id).toBe(first.body.service_receipt.id);
        else expect(again.body.service_receipt).toBeNull();
      }
    } finally {
      svc.clock.now -= 120;
    }
    expect(await revocationReceipts(mid1.hash)).toBe(receiptsBefore);
  });
});

describe("a keyless revoker never reads a key holder's reason", () => {
  it('when no service receipt names the first revoker, the reason is withheld and no revoker is named', async () => {
    const { mid } = await freshChain();
    // Revoked in the store with no receipt of who did it (an operator's direct revocation, say): the
    // reason may be anyone's words, and the answer must not fall back on naming the signer.
    await svc.store.db
      .update(delegations)
      .set({ revokedAt: new Date(T0 * 1000), revokedReason: 'ticket SEC-9 (internal)' })
      .where(and(eq(delegations.tenantId, tenant.id), eq(delegations.hash, mid.hash)));
    const keyless = await svc.call('POST', `/v1/delegations/${mid.hash}/revoke`, {
      json: { revocation: signedRevocation(tenant.root, mid.hash, { iat: svc.clock.now, reason: 'signed' }) },
    });
    expect(keyless.status, JSON.stringify(keyless.body)).toBe(200);
    expect(keyless.body).toMatchObject({ status: 'revoked', already_revoked: true, reason: null });
    expect(keyless.body.revoked_by).not.toHaveProperty('id');
    expect(JSON.stringify(keyless.body)).not.toContain('SEC-9');
  });
});

describe('revoking with an API key: refusals store nothing', () => {
  let target: SignedDelegation;
  beforeAll(async () => {
    target = (await freshChain()).mid;
  });

  it('needs confirm: true and a non-blank reason of at most 500 characters (400)', async () => {
    const before = [await revokedRows(), await revocationReceipts()];
    const bodies: unknown[] = [
      { reason: 'no confirm' },
      { confirm: false, reason: 'not confirmed' },
      { confirm: 'true', reason: 'string confirm' },
      { confirm: true },
      { confirm: true, reason: '' },
      { confirm: true, reason: '   \n\t ' },
      { confirm: true, reason: 'x'.repeat(501) },
      { confirm: true, reason: 42 },
      { confirm: true, reason: 'ok', extra: 1 },
      { confirm: true, reason: 'ok', revocation: 'x.y.z' },
      [],
    ];
    for (const json of bodies) {
      const r = await svc.call('POST', `/v1/delegations/${target.hash}/revoke`, { key: tenant.keys.issue, json });
      expect(r.status, JSON.stringify(json).slice(0, 60)).toBe(400);
      expect(r.body.error.code).toBe('INVALID_REQUEST');
    }
    const noConfirm = await svc.call('POST', `/v1/delegations/${target.hash}/revoke`, { key: tenant.keys.issue, json: { reason: 'x' } });
    expect(noConfirm.body.error.message).toContain('confirm');
    const empty = await svc.call('POST', `/v1/delegations/${target.hash}/revoke`, { key: tenant.keys.issue });
    expect(empty.status).toBe(400);
    expect([await revokedRows(), await revocationReceipts()]).toEqual(before);
  });

  it('401 without a key for {confirm, reason}; 403 for verify, report and audit keys; 400 for a bad hash', async () => {
    const before = await revokedRows();
    const body = { confirm: true, reason: 'x' };
    const noKey = await svc.call('POST', `/v1/delegations/${target.hash}/revoke`, { json: body });
    expect(noKey.status).toBe(401);
    expect(noKey.body.error.code).toBe('UNAUTHORIZED');
    expect((await svc.call('POST', `/v1/delegations/${target.hash}/revoke`, { key: 'bt_nonsense', json: body })).status).toBe(401);
    for (const key of [tenant.keys.verify, tenant.keys.report, tenant.keys.audit]) {
      const r = await svc.call('POST', `/v1/delegations/${target.hash}/revoke`, { key, json: body });
      expect(r.status).toBe(403);
      expect(r.body.error.code).toBe('FORBIDDEN');
    }
    const bad = await svc.call('POST', '/v1/delegations/sha256:nothex/revoke', { key: tenant.keys.issue, json: body });
    expect(bad.status).toBe(400);
    expect(await revokedRows()).toBe(before);
  });

  it('404 for an unknown hash and for a DR of another tenant', async () => {
    const before = await revokedRows();
    const unknown = `sha256:${'0'.repeat(64)}`;
    const body = { confirm: true, reason: 'x' };
    expect((await svc.call('POST', `/v1/delegations/${unknown}/revoke`, { key: tenant.keys.issue, json: body })).status).toBe(404);
    expect((await svc.call('POST', `/v1/delegations/${unknown}/revoke`, { key: svc.adminKey, json: body })).status).toBe(404);
    const other = await setupTenant(svc, 'other-issuer');
    const r = await svc.call('POST', `/v1/delegations/${target.hash}/revoke`, { key: other.keys.issue, json: body });
    expect(r.status).toBe(404);
    expect(r.body.error.code).toBe('NOT_FOUND');
    // What to do when the record is the caller's but was never stored, as the README says.
    expect(r.body.error.suggestion).toContain('submit it first (POST /v1/delegations, no key needed), then revoke it by hash');
    expect(await revokedRows()).toBe(before);
  });

  it('the admin key revokes a DR of any tenant', async () => {
    const { root: r0, A, mid, leaf, B, C } = await freshChain();
    const r = await svc.call('POST', `/v1/delegations/${mid.hash}/revoke`, {
      key: svc.adminKey,
      json: { confirm: true, reason: 'operator decision' },
    });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      status: 'revoked',
      reason: 'operator decision',
      descendants: 1,
      tenant_id: tenant.id,
      revoked_by: { kind: 'admin', id: 'admin:env' },
    });
    expect(r.body.tenants).toHaveLength(1);
    expect((await verifyThrough([r0, mid, leaf], C)).body.error.code).toBe('RECEIPT_REVOKED');
    expect((await verifyThrough([r0, mid], B)).body.error.code).toBe('RECEIPT_REVOKED');
    expect((await verifyThrough([r0], A)).status).toBe(200);
  });
});

describe('revoking with a signed revocation record (no API key)', () => {
  it('the root issuer may revoke any DR of its tree', async () => {
    const { R, root: r, mid, leaf, C } = await freshChain();
    const res = await svc.call('POST', `/v1/delegations/${leaf.hash}/revoke`, {
      json: { revocation: signedRevocation(R, leaf.hash, { reason: 'root says so' }) },
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      hash: leaf.hash,
      status: 'revoked',
      reason: 'root says so',
      revoked_by: { kind: 'did', id: R.did },
      descendants: 0,
      already_revoked: false,
    });
    expect(res.body.tenant_id).toBeUndefined();
    expect((await verifyThrough([r, mid, leaf], C)).body.error.code).toBe('RECEIPT_REVOKED');
  });

  it('the holder of an ancestor may revoke (A holds the root, revokes the leaf); reason is optional', async () => {
    const { A, root: r, mid, leaf, B, C } = await freshChain();
    const res = await svc.call('POST', `/v1/delegations/${leaf.hash}/revoke`, { json: { revocation: signedRevocation(A, leaf.hash) } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ reason: null, revoked_by: { kind: 'did', id: A.did } });
    expect((await verifyThrough([r, mid, leaf], C)).body.error.code).toBe('RECEIPT_REVOKED');
    expect((await verifyThrough([r, mid], B)).status).toBe(200);
  });

  it("the DR's issuer may revoke it (B issued the leaf; A issued mid)", async () => {
    const { A, B, mid, leaf } = await freshChain();
    expect(
      (await svc.call('POST', `/v1/delegations/${leaf.hash}/revoke`, { json: { revocation: signedRevocation(B, leaf.hash) } })).status,
    ).toBe(200);
    const m = await svc.call('POST', `/v1/delegations/${mid.hash}/revoke`, { json: { revocation: signedRevocation(A, mid.hash) } });
    expect(m.status).toBe(200);
    expect(m.body.descendants).toBe(1);
  });

  it("the DR's own holder is refused 403; a descendant's holder and a stranger get the unknown-hash 404; nothing stored", async () => {
    const { B, C, mid, leaf } = await freshChain();
    const stranger = generateKeyPair();
    const before = [await revokedRows(), await revocationReceipts()];
    const cases: [KeyPair, SignedDelegation, number][] = [
      [C, leaf, 403], // holds the leaf
      [B, mid, 403], // holds mid
      [C, mid, 404], // holds a descendant of mid
      [stranger, leaf, 404],
      [stranger, mid, 404],
    ];
    for (const [signer, target, status] of cases) {
      const r = await svc.call('POST', `/v1/delegations/${target.hash}/revoke`, {
        json: { revocation: signedRevocation(signer, target.hash) },
      });
      expect(r.status).toBe(status);
      if (status === 403) {
        expect(r.body.error.code).toBe('FORBIDDEN');
        expect(r.body.error.message).toContain('cannot revoke the grant it received');
      } else {
        expect(r.body.error.code).toBe('NOT_FOUND');
      }
      expect(r.body.error.details?.may_revoke).toBeUndefined();
    }
    expect([await revokedRows(), await revocationReceipts()]).toEqual(before);
  });

  it('a bad signature is 403 SIGNATURE_INVALID; malformed, mis-targeted or future-dated records are 400; nothing stored', async () => {
    const { R, mid, leaf } = await freshChain();
    const before = [await revokedRows(), await revocationReceipts()];
    const forged = signedRevocation(R, leaf.hash, {}, generateKeyPair().seed);
    const sig = await svc.call('POST', `/v1/delegations/${leaf.hash}/revoke`, { json: { revocation: forged } });
    expect(sig.status).toBe(403);
    expect(sig.body.error.code).toBe('SIGNATURE_INVALID');

    const cases: [unknown, string][] = [
      [{ revocation: 'not-a-jws' }, 'MALFORMED_JWS'],
      [{ revocation: signedRevocation(R, leaf.hash, { drs_type: 'revocation-receipt' }) }, 'INVALID_FIELD'],
      [{ revocation: signedRevocation(R, leaf.hash, { reason: '  ' }) }, 'INVALID_FIELD'],
      [{ revocation: signedRevocation(R, mid.hash) }, 'INVALID_FIELD'], // targets another DR
      [{ revocation: signedRevocation(R, leaf.hash, { iat: T0 + svc.deps.config.clockSkewSeconds + 1 }) }, 'INVALID_FIELD'],
      [{ revocation: 12 }, 'INVALID_REQUEST'],
      [{ revocation: signedRevocation(R, leaf.hash), extra: true }, 'INVALID_REQUEST'],
      [{}, 'INVALID_REQUEST'],
    ];
    for (const [json, code] of cases) {
      const r = await svc.call('POST', `/v1/delegations/${leaf.hash}/revoke`, { json });
      expect(r.status, JSON.stringify(json).slice(0, 80)).toBe(400);
      expect(r.body.error.code).toBe(code);
    }
    const future = await svc.call('POST', `/v1/delegations/${leaf.hash}/revoke`, {
      json: { revocation: signedRevocation(R, leaf.hash, { iat: T0 + 3600 }) },
    });
    expect(future.body.error.message).toContain('iat');
    expect([await revokedRows(), await revocationReceipts()]).toEqual(before);
  });

  it('an unknown hash is 404, even for a valid signature', async () => {
    const unknown = `sha256:${'1'.repeat(64)}`;
    const r = await svc.call('POST', `/v1/delegations/${unknown}/revoke`, { json: { revocation: signedRevocation(tenant.root, unknown) } });
    expect(r.status).toBe(404);
  });

  it('a DR held by two tenants is revoked in both, each with its own service receipt', async () => {
    // The admin API gives a root DID to one tenant only, so this state is set up
    // in the database: if a hash is ever held twice, a signed revocation must not
    // leave it live in either tenant.
    const other = await setupTenant(svc, 'shares-the-root');
    const trust = await svc.call('POST', `/v1/admin/tenants/${other.id}/roots`, {
      key: svc.adminKey,
      json: { did: tenant.root.did, label: 'shared' },
    });
    expect(trust.status).toBe(409);
    await svc.store.db.insert(trustedRoots).values({ tenantId: other.id, did: tenant.root.did, label: 'shared (test)' });
    const A = generateKeyPair();
    const shared = root(tenant.root, A);
    await submit([shared], tenant.keys.issue);
    await submit([shared], other.keys.issue);
    expect((await verifyThrough([shared], A, { key: other.keys.verify })).status).toBe(200);

    const r = await svc.call('POST', `/v1/delegations/${shared.hash}/revoke`, {
      json: { revocation: signedRevocation(tenant.root, shared.hash, { reason: 'key rotation' }) },
    });
    expect(r.status).toBe(200);
    expect(await revocationReceipts(shared.hash)).toBe(2);
    for (const key of [tenant.keys.verify, other.keys.verify]) {
      const v = await verifyThrough([shared], A, { key });
      expect(v.status).toBe(403);
      expect(v.body.error.code).toBe('RECEIPT_REVOKED');
    }
  });
});

describe('a revocation committed while a record is being stored under it', () => {
  // The submission checks its chain before its transaction; a revocation committing in between
  // answered first (counting no such descendant) and the record was then accepted under it.
  it.each([
    ['its parent', 'mid'],
    ['an ancestor above its parent', 'root'],
  ] as const)('a record under %s is refused RECEIPT_REVOKED, nothing stored', async (_what, revokedOne) => {
    // Submitted with a key: the root is trusted by two tenants since the test above.
    const [A, B, C] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
    const r = root(tenant.root, A);
    const mid = sub(r, A, B);
    const leaf = sub(mid, B, C);
    await submit([r, mid, leaf], tenant.keys.issue);
    const target = revokedOne === 'mid' ? mid : r;
    const child = sub(leaf, C, generateKeyPair());
    const waitingForRowLocks = async () => {
      const [w] = await rows<{ n: number }>(
        svc.store.db,
        sql`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
      );
      return w!.n;
    };
    let submission: ReturnType<typeof svc.call> | undefined;
    await svc.store.db.transaction(async (tx) => {
      // markRevoked's lock, taken before the submission reaches its own transaction.
      await tx.execute(sql`select 1 from delegations where tenant_id = ${tenant.id} and hash = ${target.hash} for update`);
      submission = svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: [child.jws] } });
      // Until the submission waits for this row (or, unfixed, it has finished without waiting).
      for (let i = 0; i < 100 && (await waitingForRowLocks()) === 0; i++) await new Promise((ok) => setTimeout(ok, 20));
      await tx.execute(
        sql`update delegations set revoked_at = clock_timestamp(), revoked_reason = 'racing' where tenant_id = ${tenant.id} and hash = ${target.hash}`,
      );
    });
    const res = await submission!;
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error.code).toBe('RECEIPT_REVOKED');
    expect(res.body.error.details.violations[0]).toMatchObject({ dr_hash: target.hash, dr_index: revokedOne === 'mid' ? 1 : 0 });
    const [stored] = await svc.store.db.select({ n: count() }).from(delegations).where(eq(delegations.hash, child.hash));
    expect(stored!.n).toBe(0);
    const [accepted] = await svc.store.db
      .select({ n: count() })
      .from(serviceReceipts)
      .where(and(eq(serviceReceipts.kind, 'delegation.accepted'), eq(serviceReceipts.subject, child.hash)));
    expect(accepted!.n).toBe(0);
  });
});
