/** Signed revocation records: shape, signature, and who may revoke. */
import { describe, expect, it } from 'vitest';
import { BatonError, isMalformed } from '../../src/protocol/errors.js';
import { signJws } from '../../src/protocol/jws.js';
import { mayRevoke, readRevocation, type ChainParty } from '../../src/protocol/revocation.js';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { encodeBase64url } from '../../src/protocol/base64url.js';

const NOW = 1_800_000_000;
const TARGET = `sha256:${'ab'.repeat(32)}`;

function revocation(signer: KeyPair, overrides: Record<string, unknown> = {}, seed = signer.seed): string {
  return signJws(
    { iss: signer.did, drs_v: '4.0', drs_type: 'revocation', target: TARGET, iat: NOW, jti: 'rev:1', reason: 'compromised', ...overrides },
    seed,
  );
}

function codeOf(f: () => unknown): { code: string; malformed: boolean } | undefined {
  try {
    f();
  } catch (e) {
    if (e instanceof BatonError) return { code: e.code, malformed: isMalformed(e.code) };
    throw e;
  }
  return undefined;
}

const opts = { target: TARGET, now: NOW, clockSkewSeconds: 60 };

describe('readRevocation', () => {
  const key = generateKeyPair();

  it('accepts a well-formed record signed by its iss, with or without a reason', () => {
    const r = readRevocation(revocation(key), opts);
    expect(r.payload).toMatchObject({ iss: key.did, target: TARGET, jti: 'rev:1', reason: 'compromised' });
    expect(r.hash).toMatch(/^sha256:[0-9a-f]{64}$/);
    const { reason: _r, ...noReason } = {
      iss: key.did,
      drs_v: '4.0',
      drs_type: 'revocation',
      target: TARGET,
      iat: NOW,
      jti: 'rev:2',
      reason: '',
    };
    expect(readRevocation(signJws(noReason, key.seed), opts).payload.reason).toBeUndefined();
  });

  it('refuses a signature by another key (403 SIGNATURE_INVALID)', () => {
    const other = generateKeyPair();
    expect(codeOf(() => readRevocation(revocation(key, {}, other.seed), opts))).toEqual({ code: 'SIGNATURE_INVALID', malformed: false });
  });

  it('refuses a tampered payload (403 SIGNATURE_INVALID)', () => {
    const [h, , s] = revocation(key).split('.');
    const forged = encodeBase64url(
      new TextEncoder().encode(
        JSON.stringify({ drs_type: 'revocation', drs_v: '4.0', iat: NOW, iss: key.did, jti: 'rev:9', target: TARGET }),
      ),
    );
    expect(codeOf(() => readRevocation(`${h}.${forged}.${s}`, opts))?.code).toBe('SIGNATURE_INVALID');
  });

  it('refuses malformed records with 400', () => {
    const cases: [unknown, string][] = [
      ['nope', 'MALFORMED_JWS'],
      [42, 'MALFORMED_JWS'],
      [revocation(key, { drs_type: 'delegation-receipt' }), 'INVALID_FIELD'],
      [revocation(key, { jti: 'dr:1' }), 'INVALID_FIELD'],
      [revocation(key, { target: 'sha256:xyz' }), 'INVALID_FIELD'],
      [revocation(key, { reason: '   ' }), 'INVALID_FIELD'],
      [revocation(key, { reason: 'x'.repeat(501) }), 'INVALID_FIELD'],
      [revocation(key, { extra: true }), 'INVALID_FIELD'],
      [revocation(key, { iat: -1 }), 'INVALID_FIELD'],
    ];
    for (const [jws, code] of cases) {
      const got = codeOf(() => readRevocation(jws, opts));
      expect(got?.code, String(jws).slice(0, 40)).toBe(code);
      expect(got?.malformed).toBe(true);
    }
  });

  it('refuses a target other than the addressed DR (malformed)', () => {
    const got = codeOf(() => readRevocation(revocation(key), { ...opts, target: `sha256:${'cd'.repeat(32)}` }));
    expect(got).toEqual({ code: 'INVALID_FIELD', malformed: true });
  });

  it('allows iat up to the clock skew ahead, refuses beyond it (malformed)', () => {
    expect(readRevocation(revocation(key, { iat: NOW + 60 }), opts).payload.iat).toBe(NOW + 60);
    expect(codeOf(() => readRevocation(revocation(key, { iat: NOW + 61 }), opts))).toEqual({ code: 'INVALID_FIELD', malformed: true });
    // An old revocation is still a revocation.
    expect(readRevocation(revocation(key, { iat: 0 }), opts).payload.iat).toBe(0);
  });
});

describe('mayRevoke', () => {
  // R -> A (root), A -> B (mid), B -> C (leaf)
  const [R, A, B, C, X] = ['did:key:zR', 'did:key:zA', 'did:key:zB', 'did:key:zC', 'did:key:zX'];
  const root: ChainParty = { hash: 'h0', iss: R, aud: A };
  const mid: ChainParty = { hash: 'h1', iss: A, aud: B };
  const leaf: ChainParty = { hash: 'h2', iss: B, aud: C };

  it('the root issuer may revoke anything in its tree', () => {
    expect(mayRevoke(R, [root])).toMatchObject({ may: true, as: 'root_issuer' });
    expect(mayRevoke(R, [root, mid, leaf])).toMatchObject({ may: true, as: 'root_issuer' });
  });

  it("the target's issuer may revoke it", () => {
    expect(mayRevoke(B, [root, mid, leaf])).toMatchObject({ may: true, as: 'issuer', dr_index: 2 });
    expect(mayRevoke(A, [root, mid])).toMatchObject({ may: true, as: 'issuer' });
  });

  it('the holder of a strict ancestor may revoke it', () => {
    expect(mayRevoke(A, [root, mid, leaf])).toMatchObject({ may: true, as: 'ancestor_holder', dr_index: 0 });
  });

  it("the target's own holder, a descendant's holder and a stranger may not", () => {
    const own = mayRevoke(C, [root, mid, leaf]);
    expect(own.may).toBe(false);
    if (!own.may) expect(own.reason).toContain('cannot revoke the grant it received');
    expect(mayRevoke(B, [root, mid]).may).toBe(false); // B holds mid
    expect(mayRevoke(C, [root, mid]).may).toBe(false); // C is below mid
    expect(mayRevoke(A, [root]).may).toBe(false); // A holds the root
    expect(mayRevoke(X, [root, mid, leaf]).may).toBe(false);
    expect(mayRevoke(R, []).may).toBe(false);
  });
});
