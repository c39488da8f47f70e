/** The signed approval decision record, pure: shape, the guardrail triple, the addressed approval, time and signature. */
import { describe, expect, it } from 'vitest';
import { APPROVAL_DECISION_MAX_AGE_SECONDS, readApprovalDecision } from '../../src/protocol/approval-decision.js';
import { BatonError } from '../../src/protocol/errors.js';
import { signJws } from '../../src/protocol/jws.js';
import { generateKeyPair } from '../../src/sdk/keys.js';

const NOW = 1_800_000_000;
const ID = `apr_${'a'.repeat(32)}`;
const signer = generateKeyPair();
const base = {
  iss: signer.did,
  drs_v: '4.0',
  drs_type: 'baton-approval-decision',
  approval_id: ID,
  decision: 'approve',
  confirm: true,
  reason: 'Agreed with legal.',
  iat: NOW,
  jti: 'apd:1',
};
const read = (payload: Record<string, unknown>, key = signer) =>
  readApprovalDecision(signJws(payload, key.seed), { approvalId: ID, now: NOW, clockSkewSeconds: 60 });
const codeOf = (f: () => unknown) => {
  try {
    f();
    return 'ok';
  } catch (e) {
    return e instanceof BatonError ? e.code : String(e);
  }
};

describe('readApprovalDecision', () => {
  it('accepts a well-formed record and carries the guardrail triple with iss as actor', () => {
    const r = read(base);
    expect(r.outcome).toBe('approved');
    expect(r.triple).toEqual({ actor: signer.did, confirm: true, reason: base.reason });
    expect(read({ ...base, decision: 'reject' }).outcome).toBe('rejected');
  });

  it('refuses every malformed variant without looking at any stored state', () => {
    for (const bad of [
      { ...base, confirm: false },
      { ...base, reason: '   ' },
      { ...base, reason: 'ok\u202e' },
      { ...base, decision: 'maybe' },
      { ...base, drs_type: 'revocation' },
      { ...base, approval_id: 'apr_x' },
      { ...base, extra: 1 },
      { ...base, jti: 'has space' },
    ]) {
      expect(
        codeOf(() => read(bad)),
        JSON.stringify(bad),
      ).toBe('INVALID_FIELD');
    }
    expect(codeOf(() => read({ ...base, approval_id: `apr_${'b'.repeat(32)}` }))).toBe('INVALID_FIELD');
    expect(codeOf(() => read({ ...base, iat: NOW - APPROVAL_DECISION_MAX_AGE_SECONDS - 1 }))).toBe('INVALID_FIELD');
    expect(codeOf(() => read({ ...base, iat: NOW + 61 }))).toBe('INVALID_FIELD');
    expect(codeOf(() => read({ ...base, iat: NOW - APPROVAL_DECISION_MAX_AGE_SECONDS }))).toBe('ok');
    // Signed by another key than iss names.
    expect(codeOf(() => read(base, generateKeyPair()))).toBe('SIGNATURE_INVALID');
  });
});
