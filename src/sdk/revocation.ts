/**
 * Signing revocation records client-side (the record format and who may
 * revoke what are defined in src/protocol/revocation.ts).
 *
 * A revocation is the way an agent or operator withdraws a grant without an
 * API key: the signature is the authority. The service accepts it from the
 * DR's issuer, the root issuer, or the holder of any ancestor, and refuses it
 * from the DR's own holder (who can only ask whoever granted it).
 */
import { isRecordHash, recordHash, type RecordHash } from '../protocol/hash.js';
import { signJws } from '../protocol/jws.js';
import { DRS_VERSION, parseWith } from '../protocol/records.js';
import { REVOCATION_TYPE, RevocationPayloadSchema, type RevocationPayload } from '../protocol/revocation.js';
import type { KeyPair } from './keys.js';
import type { SignedDelegation } from './records.js';

export interface RevocationInput {
  /** Who revokes: the DR's issuer, the root issuer, or the holder of an ancestor. */
  readonly signer: KeyPair;
  /** The delegation record to revoke (its hash, or the signed record). Its descendants fall with it. */
  readonly target: RecordHash | string | SignedDelegation;
  /** Why, in words an auditor will read (at most 500 characters, not blank). */
  readonly reason?: string;
  readonly iat?: number;
  readonly jti?: string;
}

export interface SignedRevocation {
  readonly jws: string;
  readonly hash: RecordHash;
  readonly payload: RevocationPayload;
}

/** Builds and signs a revocation record; the payload is checked against the service's schema first. */
export function createRevocation(input: RevocationInput): SignedRevocation {
  const target = typeof input.target === 'string' ? input.target : input.target.hash;
  if (!isRecordHash(target)) {
    throw new TypeError(
      `A revocation targets a delegation record hash ("sha256:" + 64 lowercase hex digits), got ${JSON.stringify(target)}.`,
    );
  }
  const payload: Record<string, unknown> = {
    iss: input.signer.did,
    drs_v: DRS_VERSION,
    drs_type: REVOCATION_TYPE,
    target,
    iat: input.iat ?? Math.floor(Date.now() / 1000),
    jti: input.jti ?? `rev:${globalThis.crypto.randomUUID()}`,
    ...(input.reason !== undefined ? { reason: input.reason } : {}),
  };
  const checked = parseWith(RevocationPayloadSchema, payload, 'revocation payload');
  const jws = signJws(payload, input.signer.seed);
  return { jws, hash: recordHash(jws), payload: checked };
}
