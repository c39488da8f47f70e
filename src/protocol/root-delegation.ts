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

/** The lists a DRS verifier reads, whose empty form it reads as unrestricted (`len(list) > 0` guards its check). */
const DRS_LISTS = ['allowed_tools', 'allowed_resources', 'allowed_data_classes'] as const;

/**
 * Refuses a policy that would mean more to a DRS verifier (drs-verify) than to Baton, since a signed
 * record is checked by both: an empty tool, resource or data-class list allows nothing to Baton but
 * everything to drs-verify (its check is guarded by `len(list) > 0`), and no list says "nothing" to both.
 */
export function refuseDrsWiderPolicy(policy: unknown): void {
  if (policy === null || typeof policy !== 'object' || Array.isArray(policy)) return; // the schema refuses it
  for (const list of DRS_LISTS) {
    const value = (policy as Record<string, unknown>)[list];
    if (Array.isArray(value) && value.length === 0)
      throw new BatonError('INVALID_FIELD', {
        message: `policy.${list} is empty: Baton reads that as nothing allowed, a DRS verifier as no restriction, so it is never signed.`,
        suggestion: `List what the holder may use (under a parent that lists ${list}, a subset of its list), or delegate nothing; on a root, leave ${list} out for no restriction.`,
        violations: [{ code: 'INVALID_FIELD', field: `policy.${list}`, actual: '[]', message: `${list} must not be empty.` }],
      });
  }
}

/**
 * The policy as signed, meaning to a DRS verifier what it means to Baton (refuseDrsWiderPolicy).
 * Absent PII and write access mean false to Baton but unrestricted to drs-verify, which would then
 * allow what Baton denies: they are signed as false.
 */
function drsReadablePolicy(policy: unknown): unknown {
  refuseDrsWiderPolicy(policy);
  if (policy === null || typeof policy !== 'object' || Array.isArray(policy)) return policy;
  return { pii_access: false, write_access: false, ...policy };
}

/** Signs a payload after checking it is a well-formed DR (so nothing malformed is ever signed). */
export function signDelegation(unsigned: Record<string, unknown>, issuer: KeyPair): SignedDelegation {
  const payload = 'policy' in unsigned ? { ...unsigned, policy: drsReadablePolicy(unsigned['policy']) } : unsigned;
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
    // The default hour runs from when the record starts to be valid: from iat, an nbf hours ahead
    // was refused "exp must not be before nbf", of an exp the caller never gave.
    exp: input.exp === undefined ? Math.max(input.nbf ?? iat, iat) + 3600 : input.exp,
    iat,
    jti: input.jti,
    drs_root_type: input.rootType ?? 'organisation',
    ...(input.consent ? { drs_consent: input.consent } : {}),
  };
  return signDelegation(payload, input.issuer);
}
