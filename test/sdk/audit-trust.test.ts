/**
 * logPolicy(trust): a LogTrust whose witness quorum can never hold, or whose keys are of the wrong
 * type, is refused when it is read, saying what is wrong with the trust (quorums count distinct
 * witness keys, so one key under two names counts once), not later as a checkpoint that fails.
 */
import { describe, expect, it } from 'vitest';
import { cosignatureSigner } from '../../src/protocol/cosignature.js';
import { BatonError } from '../../src/protocol/errors.js';
import { COSIGNATURE_V1, ed25519NoteSigner, formatVerifierKey, verifierKey } from '../../src/protocol/note.js';
import { logPolicy, type LogTrust } from '../../src/sdk/audit.js';

const ORIGIN = 'baton.example/log/tenant-1';
const log = ed25519NoteSigner(ORIGIN, new Uint8Array(32).fill(1));
const witness = cosignatureSigner('w1.example', new Uint8Array(32).fill(2), 0).key;
const other = cosignatureSigner('w2.example', new Uint8Array(32).fill(3), 0).key;
const base: LogTrust = { origin: ORIGIN, logKeys: [formatVerifierKey(log.key)] };

function refusal(trust: LogTrust): BatonError {
  try {
    logPolicy(trust);
  } catch (e) {
    if (e instanceof BatonError) return e;
    throw e;
  }
  throw new Error('logPolicy accepted the trust');
}

describe('logPolicy', () => {
  it('refuses a quorum with no witnesses, saying none is listed', () => {
    const e = refusal({ ...base, requiredCosignatures: 1 });
    expect(e.code).toBe('INVALID_REQUEST');
    expect(e.message).toBe('A quorum of 1 witness (requiredCosignatures) cannot be met: no witness key is listed.');
    expect(e.suggestion).toMatch(/distinct witness keys/);
  });

  it('counts one key under two names once, and says so', () => {
    const alias = verifierKey('w1-again.example', COSIGNATURE_V1, witness.publicKey);
    const e = refusal({ ...base, witnesses: [formatVerifierKey(witness), formatVerifierKey(alias)], requiredCosignatures: 2 });
    expect(e.code).toBe('INVALID_REQUEST');
    expect(e.message).toBe(
      'A quorum of 2 witnesses (requiredCosignatures) cannot be met: only 1 distinct witness key is listed (2 listed: a key under two names counts once).',
    );
    expect(e.details).toMatchObject({ required: 2, distinctWitnessKeys: 1, witnessesListed: 2 });
  });

  it('refuses a quorum that is not a whole number of witnesses', () => {
    for (const n of [-1, 1.5, Number.NaN]) expect(refusal({ ...base, requiredCosignatures: n }).code).toBe('INVALID_REQUEST');
  });

  it('refuses a witness that is a note key or a log key, and a log key that is a cosignature key', () => {
    expect(
      refusal({ ...base, witnesses: [formatVerifierKey(ed25519NoteSigner('w.example', new Uint8Array(32).fill(4)).key)] }).message,
    ).toMatch(/^The witness w\.example is not a cosignature key \(type 0x04\)/);
    const selfWitness = verifierKey('self.example', COSIGNATURE_V1, log.key.publicKey);
    expect(refusal({ ...base, witnesses: [formatVerifierKey(selfWitness)] })).toMatchObject({
      code: 'INVALID_VERIFIER_KEY',
      message: expect.stringMatching(/^The witness self\.example has a log key/),
    });
    expect(refusal({ ...base, logKeys: [formatVerifierKey(witness)] }).message).toMatch(
      /^The log key w1\.example is not a note signing key \(type 0x01\)/,
    );
  });

  it('accepts a quorum the distinct witness keys can meet', () => {
    const policy = logPolicy({ ...base, witnesses: [formatVerifierKey(witness), formatVerifierKey(other)], requiredCosignatures: 2 });
    expect(policy).toMatchObject({ origin: ORIGIN, requiredCosignatures: 2 });
    expect(policy.witnesses).toHaveLength(2);
    expect(logPolicy(base).requiredCosignatures).toBe(0);
  });
});
