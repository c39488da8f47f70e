/**
 * Signed revocation records, pure.
 *
 * A revocation record is a compact JWS with the same strict encoding and the
 * same Ed25519 rule as a delegation record (decodeJws + signatureValid):
 *
 *   {iss: did:key, drs_v: "4.0", drs_type: "revocation", target: <DR hash>,
 *    iat, jti: "rev:" + id, reason?}
 *
 * Who may revoke a DR: whoever granted authority on its way down, i.e. its
 * own issuer, the root issuer, or the holder (aud) of any strict ancestor.
 * Since each DR's iss is its parent's aud, that set is exactly the iss of
 * every record root→target. The target's own holder (its aud) is not in it
 * unless it also granted something above: a holder cannot revoke the grant
 * it received, only ask the one who granted it.
 */
import { z } from 'zod';
import { BatonError } from './errors.js';
import { decodeJws, signatureValid } from './jws.js';
import { DidKeySchema, DRS_VERSION, parseWith, RecordHashSchema } from './records.js';

export const REVOCATION_TYPE = 'revocation';
export const MAX_REVOCATION_REASON = 500;

const unixSeconds = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

/** A human reason: non-blank, at most MAX_REVOCATION_REASON characters. */
export const RevocationReasonSchema = z
  .string({ error: (iss) => (iss.input === undefined ? 'is required: say why the delegation is revoked' : 'must be a string') })
  .max(MAX_REVOCATION_REASON, `must be at most ${MAX_REVOCATION_REASON} characters`)
  .refine((s) => s.trim().length > 0, 'must not be blank');

export const RevocationPayloadSchema = z.strictObject({
  iss: DidKeySchema,
  drs_v: z.literal(DRS_VERSION),
  drs_type: z.literal(REVOCATION_TYPE),
  target: RecordHashSchema,
  iat: unixSeconds,
  jti: z
    .string()
    .max(160)
    .refine((s) => s.startsWith('rev:') && s.length > 4, 'must start with "rev:"')
    .refine((s) => /^[\x21-\x7e]+$/.test(s), 'must be printable ASCII without spaces'),
  reason: RevocationReasonSchema.optional(),
});

export type RevocationPayload = z.infer<typeof RevocationPayloadSchema>;

export interface VerifiedRevocation {
  readonly jws: string;
  readonly hash: string;
  readonly payload: RevocationPayload;
}

export interface RevocationCheckOptions {
  /** The DR the request addresses (the path hash). */
  readonly target: string;
  /** Unix seconds. */
  readonly now: number;
  /** How far in the future iat may lie. */
  readonly clockSkewSeconds: number;
}

/**
 * Decodes a revocation record and checks everything that needs no stored
 * state: encoding and shape (400), target = the addressed DR (400), iat not
 * beyond the clock skew in the future (400), and the signature of iss
 * (403 SIGNATURE_INVALID; WEAK_KEY / INVALID_DID for a bad key).
 * Whether iss may revoke this DR is mayRevoke's question.
 */
export function readRevocation(jws: unknown, opts: RevocationCheckOptions): VerifiedRevocation {
  const decoded = decodeJws(jws, 'revocation record');
  const payload = parseWith(RevocationPayloadSchema, decoded.payload, 'revocation payload');
  if (payload.target !== opts.target) {
    throw new BatonError('INVALID_FIELD', {
      message: `The revocation record targets ${payload.target}, but the request addresses ${opts.target}.`,
      suggestion: 'Post a revocation record to /v1/delegations/{hash}/revoke for the hash it targets.',
      details: { field: 'target', required: opts.target, actual: payload.target },
    });
  }
  if (payload.iat > opts.now + opts.clockSkewSeconds) {
    throw new BatonError('INVALID_FIELD', {
      message: `The revocation record claims iat ${payload.iat}, more than ${opts.clockSkewSeconds} s after the service time ${opts.now}.`,
      suggestion: 'Sign the revocation with iat taken from an accurate clock.',
      details: { field: 'iat', required: `<= ${opts.now + opts.clockSkewSeconds}`, actual: payload.iat },
    });
  }
  if (!signatureValid(decoded, payload.iss)) {
    throw new BatonError('SIGNATURE_INVALID', {
      message: `The signature of the revocation record does not verify under its issuer ${payload.iss}.`,
      suggestion: 'Sign the revocation record with the private key of its iss over the exact header.payload bytes.',
    });
  }
  return { jws: decoded.jws, hash: decoded.hash, payload };
}

/** The parties of one stored DR that matter for revocation. */
export interface ChainParty {
  readonly hash: string;
  readonly iss: string;
  readonly aud: string;
}

export type RevocationAuthority =
  | { readonly may: true; readonly as: 'root_issuer' | 'issuer' | 'ancestor_holder'; readonly dr_index: number }
  | { readonly may: false; readonly reason: string };

/**
 * Whether `did` may revoke the last DR of `chain` (root first, target last):
 * the root issuer, the target's issuer, or the holder of a strict ancestor.
 */
export function mayRevoke(did: string, chain: readonly ChainParty[]): RevocationAuthority {
  const target = chain[chain.length - 1];
  if (!target) return { may: false, reason: 'The delegation chain is empty.' };
  if (chain[0]!.iss === did) return { may: true, as: 'root_issuer', dr_index: 0 };
  if (target.iss === did) return { may: true, as: 'issuer', dr_index: chain.length - 1 };
  for (let i = 0; i < chain.length - 1; i++) {
    if (chain[i]!.aud === did) return { may: true, as: 'ancestor_holder', dr_index: i };
  }
  return {
    may: false,
    reason:
      target.aud === did
        ? `${did} holds ${target.hash} (its aud) and cannot revoke the grant it received; only its issuer, the root issuer or the holder of an ancestor can.`
        : `${did} neither issued ${target.hash} nor holds any delegation above it, so it cannot revoke it.`,
  };
}
