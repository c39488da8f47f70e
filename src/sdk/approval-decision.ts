/**
 * Checking a signed approval decision afterwards, offline: an auditor reads the decision record an
 * approver DID signed (`decision.record` of GET /v1/approvals/{id}) and checks the human's own
 * signature, that it is for that approval, and that it is the record the service's
 * `approval.approved` / `approval.rejected` receipt names (`decision_record`, its hash).
 */
import { readStoredApprovalDecision, type ApprovalDecisionPayload } from '../protocol/approval-decision.js';
import { isBatonError } from '../protocol/errors.js';
import type { RecordHash } from '../protocol/hash.js';

export interface ApprovalDecisionCheck {
  /** The approval the record must name. */
  readonly approvalId: string;
  /** The approver DIDs the auditor accepts (the tenant's `approvers` of the time); any signer when absent. */
  readonly approvers?: readonly string[];
}

export interface ApprovalDecisionVerification {
  readonly valid: boolean;
  /** The record's hash when valid: compare it with `decision_record` in the decision's service receipt. */
  readonly hash: RecordHash | null;
  /** The parsed payload when valid; null otherwise (never act on an unverified payload). */
  readonly payload: ApprovalDecisionPayload | null;
  readonly outcome: 'approved' | 'rejected' | null;
  /** Why it is not valid: the error code, and what it says. */
  readonly code?: string;
  readonly reason?: string;
}

/**
 * Checks a decision record offline. Never throws on bad input. Valid means: encoded like a
 * delegation record, a payload of the decision record's exact shape, `approval_id` = `approvalId`,
 * the Ed25519 signature verifies under `iss` (the project's one verification rule), and `iss` is
 * one of `approvers` when given. Not its age: the service refused a stale record when it arrived,
 * and an auditor reads it later.
 */
export function verifyApprovalDecision(jws: string, check: ApprovalDecisionCheck): ApprovalDecisionVerification {
  const refuse = (code: string, reason: string) => ({ valid: false, hash: null, payload: null, outcome: null, code, reason });
  try {
    const record = readStoredApprovalDecision(jws, check.approvalId);
    if (check.approvers !== undefined && !check.approvers.includes(record.payload.iss)) {
      return refuse('NOT_AN_APPROVER', `The decision record is signed by ${record.payload.iss}, which is not among the approvers given.`);
    }
    return { valid: true, hash: record.hash, payload: record.payload, outcome: record.outcome };
  } catch (err) {
    if (isBatonError(err)) return refuse(err.code, err.message);
    return refuse('MALFORMED_JWS', err instanceof Error ? err.message : String(err));
  }
}
