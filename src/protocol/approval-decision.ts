/**
 * Signed approval decisions, pure: how an approver DID the tenant lists
 * approves or rejects one pending approval without an API key.
 *
 * A decision record is a compact JWS with the same strict encoding and
 * Ed25519 rule as a delegation or revocation record:
 *
 *   {iss: did:key, drs_v: "4.0", drs_type: "baton-approval-decision",
 *    approval_id, decision: "approve" | "reject", confirm: true, reason,
 *    iat, jti}
 *
 * It carries the guardrail triple: the actor is iss itself, `confirm` must be
 * true and `reason` follows the same text rules as a key holder's reason. It
 * names one approval, so it can decide nothing else; `iat` must be recent, so
 * a record found later cannot be used; and the service keeps its jti per
 * signer, so one record decides at most once. Whether iss may decide in the
 * approval's tenant (the tenant's current `approvers`) is the service's
 * question.
 */
import { z } from 'zod';
import { GuardrailTripleSchema, type GuardrailTriple } from './approval.js';
import { BatonError } from './errors.js';
import type { RecordHash } from './hash.js';
import { decodeJws, signatureValid } from './jws.js';
import { DidKeySchema, DRS_VERSION, parseWith } from './records.js';

export const APPROVAL_DECISION_TYPE = 'baton-approval-decision';
/** How old a decision record may be when it arrives: long enough for a human's tooling, short enough that a leaked one is soon useless. */
export const APPROVAL_DECISION_MAX_AGE_SECONDS = 300;

/** Approval ids as the service mints them. */
export const ApprovalIdSchema = z.string().regex(/^apr_[0-9a-f]{32}$/, 'must be an approval id: "apr_" and 32 lowercase hex digits');

export const ApprovalDecisionPayloadSchema = z.strictObject({
  iss: DidKeySchema,
  drs_v: z.literal(DRS_VERSION),
  drs_type: z.literal(APPROVAL_DECISION_TYPE),
  approval_id: ApprovalIdSchema,
  decision: z.enum(['approve', 'reject']),
  confirm: GuardrailTripleSchema.shape.confirm,
  reason: GuardrailTripleSchema.shape.reason,
  iat: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  jti: z
    .string()
    .min(1)
    .max(160)
    .refine((s) => /^[\x21-\x7e]+$/.test(s), 'must be printable ASCII without spaces'),
});

export type ApprovalDecisionPayload = z.infer<typeof ApprovalDecisionPayloadSchema>;

export interface VerifiedApprovalDecision {
  readonly jws: string;
  readonly hash: RecordHash;
  readonly payload: ApprovalDecisionPayload;
  /** The guardrail triple it carries, with iss as the actor. */
  readonly triple: GuardrailTriple;
  readonly outcome: 'approved' | 'rejected';
}

export interface ApprovalDecisionCheckOptions {
  /** The approval the request addresses (the path id). */
  readonly approvalId: string;
  /** Unix seconds. */
  readonly now: number;
  /** How far in the future iat may lie. */
  readonly clockSkewSeconds: number;
  /** How far in the past iat may lie; APPROVAL_DECISION_MAX_AGE_SECONDS unless told. */
  readonly maxAgeSeconds?: number;
}

/**
 * Decodes a decision record and checks everything that needs no stored
 * state: encoding and shape (400), approval_id = the addressed approval
 * (400), iat neither beyond the clock skew in the future nor older than the
 * maximum age (400), and the signature of iss (403 SIGNATURE_INVALID). None
 * of these answers depends on the approval or its tenant.
 */
export function readApprovalDecision(jws: unknown, opts: ApprovalDecisionCheckOptions): VerifiedApprovalDecision {
  return readDecisionRecord(jws, opts.approvalId, (payload) => {
    const maxAge = opts.maxAgeSeconds ?? APPROVAL_DECISION_MAX_AGE_SECONDS;
    if (payload.iat > opts.now + opts.clockSkewSeconds || payload.iat < opts.now - maxAge) {
      throw new BatonError('INVALID_FIELD', {
        message: `The decision record claims iat ${payload.iat}; it must lie within ${maxAge} s before and ${opts.clockSkewSeconds} s after the service time ${opts.now}.`,
        suggestion: 'Sign the decision just before sending it, with iat taken from an accurate clock.',
        details: { field: 'iat', required: `${opts.now - maxAge}..${opts.now + opts.clockSkewSeconds}`, actual: payload.iat },
      });
    }
  });
}

/**
 * A decision record as kept with its approval (`decision.record`), checked as an auditor checks it
 * later: encoding and shape, that it names `approvalId`, and the signature of iss; not its age,
 * which only mattered when it arrived. Throws as readApprovalDecision does.
 */
export function readStoredApprovalDecision(jws: unknown, approvalId: string): VerifiedApprovalDecision {
  return readDecisionRecord(jws, approvalId);
}

function readDecisionRecord(
  jws: unknown,
  approvalId: string,
  fresh?: (payload: ApprovalDecisionPayload) => void,
): VerifiedApprovalDecision {
  const decoded = decodeJws(jws, 'approval decision record');
  const payload = parseWith(ApprovalDecisionPayloadSchema, decoded.payload, 'approval decision payload');
  if (payload.approval_id !== approvalId) {
    throw new BatonError('INVALID_FIELD', {
      message: `The decision record names approval ${payload.approval_id}, but the request addresses ${approvalId}.`,
      suggestion: 'Post a decision record to /v1/approvals/{id}/signed-decision for the approval it names.',
      details: { field: 'approval_id', required: approvalId, actual: payload.approval_id },
    });
  }
  fresh?.(payload);
  if (!signatureValid(decoded, payload.iss)) {
    throw new BatonError('SIGNATURE_INVALID', {
      message: `The signature of the decision record does not verify under its issuer ${payload.iss}.`,
      suggestion: 'Sign the decision record with the private key of its iss over the exact header.payload bytes.',
    });
  }
  return {
    jws: decoded.jws,
    hash: decoded.hash,
    payload,
    triple: { actor: payload.iss, confirm: true, reason: payload.reason },
    outcome: payload.decision === 'approve' ? 'approved' : 'rejected',
  };
}
