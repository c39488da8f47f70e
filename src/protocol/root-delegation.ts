/**
 * Signing a root delegation record: pure (the caller supplies iat and jti), so
 * the service's custodial issuance and the SDK sign the same way.
 */
import { publicKeyFromDidKey } from './did-key.js';
import { BatonError } from './errors.js';
import { recordHash, type RecordHash } from './hash.js';
import { signJws } from './jws.js';
import type { KeyPair } from './key-pair.js';
import type { RootType } from './lists.js';
import type { Policy } from './policy.js';
import { DelegationPayloadSchema, parseWith, type DelegationPayload } from './records.js';

export interface RootDelegationInput {
  readonly issuer: KeyPair;
  /** The agent receiving the authority. */
  readonly audience: string;
  /** The principal on whose behalf the chain acts; defaults to the issuer. */
  readonly subject?: string;
  readonly policy: Policy;
  readonly cmd?: string;
  readonly nbf?: number;
  readonly exp?: number | null;
  readonly iat?: number;
  readonly jti?: string;
  readonly rootType?: RootType;
  readonly consent?: { method: string; timestamp: string; [k: string]: unknown };
}

export interface SignedDelegation {
  readonly jws: string;
  readonly hash: RecordHash;
  readonly payload: DelegationPayload;
}

/** Signs a payload after checking it is a well-formed DR (so nothing malformed is ever signed). */
export function signDelegation(payload: Record<string, unknown>, issuer: KeyPair): SignedDelegation {
  const checked = parseWith(DelegationPayloadSchema, payload, 'delegation payload');
  // The schema checks a DID's form; a verifier also decodes it to an Ed25519 key (INVALID_DID,
  // WEAK_KEY). Decoded here too, so no record is signed that every verifier would refuse.
  for (const field of ['sub', 'aud'] as const) {
    try {
      publicKeyFromDidKey(checked[field]);
    } catch (e) {
      if (!(e instanceof BatonError)) throw e;
      throw new BatonError(e.code, {
        message: `${field} ${checked[field]} is not a usable did:key: ${e.message}`,
        violations: [{ code: e.code, field, actual: checked[field], message: e.message }],
      });
    }
  }
  const jws = signJws(payload, issuer.seed);
  return { jws, hash: recordHash(jws), payload: checked };
}

export function signRootDelegation(input: RootDelegationInput & { readonly iat: number; readonly jti: string }): SignedDelegation {
  const iat = input.iat;
  const payload = {
    iss: input.issuer.did,
    sub: input.subject ?? input.issuer.did,
    aud: input.audience,
    drs_v: '4.0',
    drs_type: 'delegation-receipt',
    cmd: input.cmd ?? '/mcp/tools/call',
    policy: input.policy,
    nbf: input.nbf ?? iat,
    exp: input.exp === undefined ? iat + 3600 : input.exp,
    iat,
    jti: input.jti,
    drs_root_type: input.rootType ?? 'organisation',
    ...(input.consent ? { drs_consent: input.consent } : {}),
  };
  return signDelegation(payload, input.issuer);
}
