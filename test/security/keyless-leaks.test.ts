/**
 * What a caller without an API key can learn about stored records, on real
 * PostgreSQL.
 *
 * Keyless submit and revoke are allowed because signatures are the proof.
 * Until a caller's signatures prove it holds a DR of a chain, the answer must
 * not depend on what is stored: a hash stored in some tenant (held by someone
 * else) and a hash stored nowhere get the same body, byte for byte once the
 * identifiers the caller chose are put side by side. A keyless answer never
 * names a tenant. The legitimate holder, and callers with a key of the
 * tenant, still get the full explanation.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, createSubDelegation, type SignedDelegation } from '../../src/sdk/records.js';
import { signJws } from '../../src/protocol/jws.js';
import { recordHash } from '../../src/protocol/hash.js';
import { setupTenant, startTestService, type CallResult, type TestService, type TestTenant } from '../support/service.js';
import { createSubDelegationUnchecked, T0 } from '../support/fixtures.js';

let svc: TestService;
let owner: TestTenant;
let other: TestTenant;
/** R (owner's root) -> A (root DR) -> B (mid) -> C (leaf); a sibling tree lives in `other`. */
let A: KeyPair, B: KeyPair, C: KeyPair;
let root: SignedDelegation, mid: SignedDelegation, leaf: SignedDelegation;
let otherRoot: SignedDelegation;

/** Values only the store knows: none may appear in an answer to a caller who proved nothing. */
const SECRET_TOOL = 'payroll_export_7731';
const SECRET_EXP = T0 + 4321;
const SECRET_NBF = T0 - 77;
const SECRET_CMD = '/mcp/tools/call/secret-ns';
const parentPolicy = {
  allowed_tools: [SECRET_TOOL, 'web_search'],
  max_cost_usd: 12.345,
  max_calls: 9876,
  allowed_data_classes: ['hr-records'],
};

beforeAll(async () => {
  svc = await startTestService();
  owner = await setupTenant(svc, 'owner');
  other = await setupTenant(svc, 'other');
  [A, B, C] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
  const times = { iat: T0, nbf: SECRET_NBF, exp: SECRET_EXP };
  root = createRootDelegation({ issuer: owner.root, audience: A.did, policy: parentPolicy, cmd: SECRET_CMD, ...times });
  mid = createSubDelegation({ parent: root, issuer: A, audience: B.did, policy: parentPolicy, ...times });
  leaf = createSubDelegation({ parent: mid, issuer: B, audience: C.did, policy: parentPolicy, ...times });
  const stored = await svc.call('POST', '/v1/delegations', {
    key: owner.keys.issue,
    json: { receipts: [root, mid, leaf].map((d) => d.jws) },
  });
  expect(stored.status).toBe(201);
  otherRoot = createRootDelegation({ issuer: other.root, audience: A.did, policy: parentPolicy, ...times });
  expect((await svc.call('POST', '/v1/delegations', { key: other.keys.issue, json: { receipt: otherRoot.jws } })).status).toBe(201);
});
afterAll(async () => svc?.close());

const UNKNOWN = `sha256:${'5'.repeat(64)}`;

/** A child naming `prev` as its parent, issued by `iss`, signed with `signer` (a different key forges it). */
function child(prev: string, iss: KeyPair, opts: { signer?: KeyPair; overrides?: Record<string, unknown> } = {}): SignedDelegation {
  const payload = {
    iss: iss.did,
    sub: iss.did,
    aud: generateKeyPair().did,
    drs_v: '4.0',
    drs_type: 'delegation-receipt',
    // Wider than the stored parent on every axis, so a comparison with it would have plenty to say.
    cmd: '/mcp',
    policy: { allowed_tools: ['delete_everything'], max_cost_usd: 1e6, max_calls: 1e6 },
    nbf: T0 - 100_000,
    exp: T0 + 100_000,
    iat: T0,
    jti: 'dr:probe',
    prev_dr_hash: prev,
    ...opts.overrides,
  };
  const jws = signJws(payload, (opts.signer ?? iss).seed);
  return { jws, hash: recordHash(jws), payload: payload as SignedDelegation['payload'] };
}

async function submitKeyless(receipts: readonly string[]): Promise<CallResult> {
  return svc.call('POST', '/v1/delegations', { json: { receipts } });
}

/** The body as sent, without request_id, with each [from, to] pair replaced: identifiers the caller chose. */
function comparable(r: CallResult, pairs: readonly (readonly [string, string])[] = []): string {
  const { request_id: _id, ...rest } = r.body as Record<string, unknown>;
  let text = `${r.status} ${JSON.stringify(rest)}`;
  for (const [from, to] of pairs) text = text.split(from).join(to);
  return text;
}

/** Submits a child of `parentHash` and the same child of an unknown hash; the two answers must be one. */
async function expectSameAsUnknown(parentHash: string, make: (prev: string) => SignedDelegation): Promise<CallResult> {
  const [ofStored, ofUnknown] = [make(parentHash), make(UNKNOWN)];
  const [s, u] = [await submitKeyless([ofStored.jws]), await submitKeyless([ofUnknown.jws])];
  expect(
    comparable(s, [
      [ofStored.hash, '<child>'],
      [parentHash, '<parent>'],
    ]),
  ).toBe(
    comparable(u, [
      [ofUnknown.hash, '<child>'],
      [UNKNOWN, '<parent>'],
    ]),
  );
  return s;
}

function storedOnly(): string[] {
  return [
    owner.root.did,
    owner.id,
    other.id,
    other.root.did,
    SECRET_TOOL,
    SECRET_CMD,
    'hr-records',
    String(SECRET_EXP),
    String(SECRET_NBF),
    '12.345',
    '9876',
    '"depth"',
  ];
}

/**
 * A number is looked for as a number, not as digits inside a random hash, DID or request id
 * (a record hash once held "9876" by chance, and the test failed with nothing revealed).
 */
function reveals(text: string, secret: string): boolean {
  if (!/^[0-9.]+$/.test(secret)) return text.includes(secret);
  return new RegExp(`(?<![0-9A-Za-z.])${secret.replace(/\./g, '\\.')}(?![0-9A-Za-z])`).test(text);
}

function expectNothingStored(r: CallResult, extra: readonly string[] = []): void {
  const text = JSON.stringify(r.body);
  for (const secret of [...storedOnly(), ...extra]) expect(reveals(text, secret), `answer reveals ${secret}: ${text}`).toBe(false);
}

describe('keyless submit of a child before proof', () => {
  it('a forged child (bad signature) of a stored parent answers exactly as one of an unknown hash', async () => {
    const mallory = generateKeyPair();
    for (const parent of [root, mid, otherRoot]) {
      const parentAud = parent.payload.aud === A.did ? A : B;
      const s = await expectSameAsUnknown(parent.hash, (prev) => child(prev, parentAud, { signer: mallory }));
      expect(s.body.error.code).toBe('SIGNATURE_INVALID');
      expectNothingStored(s, parent === mid ? [A.did] : []);
    }
  });

  it("a validly signed child by someone other than the parent's holder answers exactly as one of an unknown hash", async () => {
    const mallory = generateKeyPair();
    // Held by A in the owner's tenant, held by A in another tenant, held by B: none by mallory.
    for (const parent of [root, otherRoot, mid]) {
      const s = await expectSameAsUnknown(parent.hash, (prev) => child(prev, mallory));
      expect(s.status).toBe(422);
      expect(s.body.error.code).toBe('BUNDLE_INCOMPLETE');
      expectNothingStored(s, [A.did, B.did]);
    }
  });

  it('the same holds when the stranger extends the parent with a chain of its own (pure checks first, then the hand-off)', async () => {
    const mallory = generateKeyPair();
    const next = generateKeyPair();
    const aud = { overrides: { aud: generateKeyPair().did } };
    const ofStored = child(root.hash, mallory, aud);
    const ofUnknown = child(UNKNOWN, mallory, aud);
    const grand = (p: SignedDelegation) =>
      createSubDelegationUnchecked(p, { issuer: mallory, audience: next.did, policy: { allowed_tools: ['delete_everything'] } });
    const [gs, gu] = [grand(ofStored), grand(ofUnknown)];
    // The grandchild is issued by mallory, not by the child's aud: a linkage problem among what was sent.
    const [s, u] = [await submitKeyless([ofStored.jws, gs.jws]), await submitKeyless([ofUnknown.jws, gu.jws])];
    expect(s.body.error.code).toBe('ISSUER_AUDIENCE_GAP');
    expect(
      comparable(s, [
        [ofStored.hash, '<child>'],
        [gs.hash, '<grand>'],
        [root.hash, '<parent>'],
      ]),
    ).toBe(
      comparable(u, [
        [ofUnknown.hash, '<child>'],
        [gu.hash, '<grand>'],
        [UNKNOWN, '<parent>'],
      ]),
    );
    expectNothingStored(s, [A.did]);
  });

  it("the parent's holder gets the full explanation: every violation against the stored parent", async () => {
    const escalating = child(root.hash, A, { overrides: { sub: root.payload.sub, cmd: root.payload.cmd } });
    const r = await submitKeyless([escalating.jws]);
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('POLICY_ESCALATION');
    const fields = r.body.error.details.violations.map((v: { field: string }) => v.field);
    expect(fields).toEqual(expect.arrayContaining(['policy.allowed_tools', 'policy.max_cost_usd', 'policy.max_calls', 'nbf', 'exp']));
    expect(JSON.stringify(r.body)).toContain(SECRET_TOOL);
    expect(r.body.error.details.submitted_from_index).toBe(1);
    // Its indexes are the stored chain's, and the message says where the request's records start.
    expect(r.body.error.message).toMatch(/the first record sent is receipts\[1\] here\.$/);
    expect(JSON.stringify(r.body)).not.toContain(owner.id);
  });
});

describe('keyless submit of a root before proof', () => {
  it('a forged root answers the same whether its issuer is trusted by a tenant or by none', async () => {
    const nobody = generateKeyPair();
    const forge = (issuer: KeyPair) => {
      const payload = { ...root.payload, iss: issuer.did, sub: issuer.did, jti: 'dr:forged-root' };
      const jws = signJws(payload, generateKeyPair().seed);
      return { jws, hash: recordHash(jws) };
    };
    const [trusted, untrusted] = [forge(owner.root), forge(nobody)];
    const [t, u] = [await submitKeyless([trusted.jws]), await submitKeyless([untrusted.jws])];
    expect(t.body.error.code).toBe('SIGNATURE_INVALID');
    expect(
      comparable(t, [
        [trusted.hash, '<root>'],
        [owner.root.did, '<iss>'],
      ]),
    ).toBe(
      comparable(u, [
        [untrusted.hash, '<root>'],
        [nobody.did, '<iss>'],
      ]),
    );
    expect(JSON.stringify(t.body)).not.toContain(owner.id);
  });

  it('a root signed by its issuer learns only whether some tenant trusts that key, never which', async () => {
    const nobody = generateKeyPair();
    const untrusted = createRootDelegation({ issuer: nobody, audience: A.did, policy: {}, iat: T0 });
    const u = await submitKeyless([untrusted.jws]);
    expect(u.status).toBe(422);
    expect(u.body.error.code).toBe('UNTRUSTED_ROOT');
    const trusted = createRootDelegation({ issuer: owner.root, audience: A.did, policy: {}, iat: T0 });
    const t = await submitKeyless([trusted.jws]);
    expect(t.status).toBe(201);
    expect(JSON.stringify(t.body)).not.toContain(owner.id);
  });
});

describe('keyless re-submit of stored records', () => {
  it('names no tenant: no tenant_id, no acceptance service receipt (whose claims name the tenant)', async () => {
    for (const list of [[root], [root, mid], [mid, leaf], [leaf], [otherRoot]]) {
      const r = await submitKeyless(list.map((d) => d.jws));
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.created).toBe(false);
      expect(r.body).not.toHaveProperty('tenant_id');
      expect(r.body.delegations.map((d: { hash: string }) => d.hash)).toEqual(list.map((d) => d.hash));
      for (const d of r.body.delegations) expect(d.service_receipt).toBeNull();
      const text = JSON.stringify(r.body);
      for (const id of [owner.id, other.id]) expect(text).not.toContain(id);
      // Depth and root are what the records say: from a root, counted from it; otherwise only the
      // store knows where they sit, and the answer does not say.
      const startsAtRoot = list[0] === root || list[0] === otherRoot;
      r.body.delegations.forEach((d: { depth?: number; root_hash?: string }, i: number) => {
        if (startsAtRoot) expect(d, `${i}`).toMatchObject({ depth: i, root_hash: list[0]!.hash });
        else {
          expect(d, `${i}`).not.toHaveProperty('depth');
          expect(d, `${i}`).not.toHaveProperty('root_hash');
        }
      });
    }
  });

  it('with a key of the owning tenant, the same re-submit gets everything', async () => {
    const r = await svc.call('POST', '/v1/delegations', { key: owner.keys.issue, json: { receipts: [root.jws, mid.jws] } });
    expect(r.status).toBe(200);
    expect(r.body.tenant_id).toBe(owner.id);
    for (const d of r.body.delegations) expect(d.service_receipt).toMatchObject({ id: expect.any(Number), jws: expect.any(String) });
  });
});

describe('keyless re-submit of a revoked chain', () => {
  const STATE = ['status', 'revoked_at', 'revoked_by', 'created_at'] as const;

  it('answers exactly as for the live chain: nothing stored about a record is shown', async () => {
    const [X, Y] = [generateKeyPair(), generateKeyPair()];
    const times = { iat: T0, nbf: SECRET_NBF, exp: SECRET_EXP };
    const r2 = createRootDelegation({ issuer: owner.root, audience: X.did, policy: parentPolicy, ...times });
    const m2 = createSubDelegation({ parent: r2, issuer: X, audience: Y.did, policy: parentPolicy, ...times });
    expect((await svc.call('POST', '/v1/delegations', { key: owner.keys.issue, json: { receipts: [r2.jws, m2.jws] } })).status).toBe(201);
    const lists = [[r2, m2], [m2], [r2]];
    const live = await Promise.all(lists.map((l) => submitKeyless(l.map((d) => d.jws))));
    for (const r of live) {
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.created).toBe(false);
      for (const d of r.body.delegations) {
        for (const field of STATE) expect(d, `a keyless answer shows ${field}`).not.toHaveProperty(field);
        expect(d.service_receipt).toBeNull();
      }
    }

    const revoked = await svc.call('POST', `/v1/delegations/${r2.hash}/revoke`, {
      key: owner.keys.issue,
      json: { confirm: true, reason: 'keyless-leaks' },
    });
    expect(revoked.status, JSON.stringify(revoked.body)).toBe(200);
    const after = await Promise.all(lists.map((l) => submitKeyless(l.map((d) => d.jws))));
    after.forEach((r, i) => expect(comparable(r)).toBe(comparable(live[i]!)));
    const read = await svc.call('GET', `/v1/delegations/${m2.hash}`, { key: owner.keys.audit });
    expect(read.body).toMatchObject({ status: 'revoked', revoked_by: r2.hash });

    // A key of the tenant reads the state anyway, and is told.
    const keyed = await svc.call('POST', '/v1/delegations', { key: owner.keys.issue, json: { receipts: [r2.jws, m2.jws] } });
    expect(keyed.status).toBe(422);
    expect(keyed.body.error.code).toBe('RECEIPT_REVOKED');
    // So is the holder who extends it: the new record, signed by m2's holder, is the proof.
    const grandchild = createSubDelegation({ parent: m2, issuer: Y, audience: generateKeyPair().did, policy: parentPolicy, ...times });
    const extended = await submitKeyless([m2.jws, grandchild.jws]);
    expect(extended.status, JSON.stringify(extended.body)).toBe(422);
    expect(extended.body.error.code).toBe('RECEIPT_REVOKED');
    const alone = await submitKeyless([grandchild.jws]);
    expect(alone.status, JSON.stringify(alone.body)).toBe(422);
    expect(alone.body.error.code).toBe('RECEIPT_REVOKED');
  });
});

describe('keyless revocation before proof', () => {
  let seq = 0;
  const revocation = (signer: KeyPair, target: string, opts: { forge?: boolean } = {}) =>
    signJws(
      { iss: signer.did, drs_v: '4.0', drs_type: 'revocation', target, iat: T0, jti: `rev:leaks-${++seq}` },
      opts.forge ? generateKeyPair().seed : signer.seed,
    );
  const revoke = (target: string, jws: string) => svc.call('POST', `/v1/delegations/${target}/revoke`, { json: { revocation: jws } });

  it("a stranger's signed revocation answers exactly as one for an unknown hash: no holders, no chain", async () => {
    const stranger = generateKeyPair();
    // C holds the leaf below mid: a descendant's holder has no say over mid either.
    for (const [signer, target] of [
      [stranger, leaf],
      [stranger, mid],
      [stranger, root],
      [C, mid],
      [stranger, otherRoot],
    ] as const) {
      const s = await revoke(target.hash, revocation(signer, target.hash));
      const u = await revoke(UNKNOWN, revocation(signer, UNKNOWN));
      expect(s.status).toBe(404);
      expect(comparable(s, [[target.hash, '<target>']])).toBe(comparable(u, [[UNKNOWN, '<target>']]));
      expectNothingStored(s, [A.did, B.did, ...(signer === C ? [] : [C.did])]);
    }
  });

  it('a forged signature is refused before any lookup, the same for a stored and an unknown hash', async () => {
    const s = await revoke(leaf.hash, revocation(owner.root, leaf.hash, { forge: true }));
    const u = await revoke(UNKNOWN, revocation(owner.root, UNKNOWN, { forge: true }));
    expect(s.body.error.code).toBe('SIGNATURE_INVALID');
    expect(comparable(s, [[leaf.hash, '<target>']])).toBe(comparable(u, [[UNKNOWN, '<target>']]));
  });

  it('the holder of the DR itself is told why it cannot revoke, without the chain', async () => {
    const r = await revoke(leaf.hash, revocation(C, leaf.hash));
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('FORBIDDEN');
    expect(r.body.error.message).toContain('cannot revoke the grant it received');
    expectNothingStored(r, [A.did, owner.root.did]);
  });

  it('the real issuer and the holder of an ancestor can still revoke; the answer names no tenant', async () => {
    const byIssuer = await revoke(leaf.hash, revocation(B, leaf.hash));
    expect(byIssuer.status).toBe(200);
    expect(byIssuer.body).toMatchObject({
      hash: leaf.hash,
      status: 'revoked',
      revoked_by: { kind: 'did', id: B.did },
      service_receipt: null,
    });
    const byAncestorHolder = await revoke(mid.hash, revocation(A, mid.hash));
    expect(byAncestorHolder.status).toBe(200);
    expect(byAncestorHolder.body).toMatchObject({ revoked_by: { kind: 'did', id: A.did }, descendants: 1, already_revoked: false });
    for (const r of [byIssuer, byAncestorHolder]) {
      expect(r.body).not.toHaveProperty('tenant_id');
      expect(JSON.stringify(r.body)).not.toContain(owner.id);
    }
    const read = await svc.call('GET', `/v1/delegations/${mid.hash}`, { key: owner.keys.audit });
    expect(read.body.status).toBe('revoked');
  });

  it("a record a key revoked first: the keyless revoker learns it is revoked, not the tenant's reason or key", async () => {
    const times = { iat: T0, nbf: SECRET_NBF, exp: SECRET_EXP };
    const [X, Y] = [generateKeyPair(), generateKeyPair()];
    const top = createRootDelegation({ issuer: owner.root, audience: X.did, policy: parentPolicy, ...times });
    const below = createSubDelegation({ parent: top, issuer: X, audience: Y.did, policy: parentPolicy, ...times });
    const stored = await svc.call('POST', '/v1/delegations', { key: owner.keys.issue, json: { receipts: [top.jws, below.jws] } });
    expect(stored.status).toBe(201);
    const secretReason = 'internal: contractor offboarded, ticket SEC-4411';
    const byKey = await svc.call('POST', `/v1/delegations/${below.hash}/revoke`, {
      key: owner.keys.issue,
      json: { confirm: true, reason: secretReason },
    });
    expect(byKey.status, JSON.stringify(byKey.body)).toBe(200);
    const keyId = (byKey.body as { revoked_by: { id: string } }).revoked_by.id;
    expect(keyId).toMatch(/^key_/);

    const bySignature = await revoke(below.hash, revocation(X, below.hash));
    expect(bySignature.status, JSON.stringify(bySignature.body)).toBe(200);
    expect(bySignature.body).toMatchObject({ status: 'revoked', already_revoked: true, reason: null, revoked_by: { kind: 'api_key' } });
    const text = JSON.stringify(bySignature.body);
    expect(text).not.toContain(keyId);
    expect(text).not.toContain('SEC-4411');
    expect(text).not.toContain(owner.id);
    // The tenant's own key still reads the whole revocation.
    const read = await svc.call('GET', `/v1/delegations/${below.hash}`, { key: owner.keys.audit });
    expect(read.body).toMatchObject({ status: 'revoked', revoked_reason: secretReason });
  });
});

describe('keyless operations routes', () => {
  it('/readyz says only whether the service is ready, not which database it runs on (the operator reads that in /metrics)', async () => {
    const ready = await svc.call('GET', '/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({ status: 'ready' });
    const scraped = await svc.call('GET', '/metrics', { key: svc.adminKey });
    expect(String(scraped.body)).toMatch(/baton_db_pool_max_connections\{driver="(postgres|pglite)"\}/);
  });
});
