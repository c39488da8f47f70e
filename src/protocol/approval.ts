/**
 * Human approvals of one call: the guardrail triple an approver must send,
 * and the state machine of an approval.
 *
 *   pending ──approve──▶ approved ──use──▶ used
 *      │  └──reject───▶ rejected
 *      └─(expires_at)─▶ expired ◀─(expires_at)── approved
 *
 * One deadline, `expires_at`, bounds both the decision and the use: an
 * approval is good for one call before it, never after. Expiry is judged
 * against the `now` each transition is given, so a stored "pending" past its
 * deadline is already expired to every reader; `expire` only records it.
 * Terminal states (rejected, expired, used) never change again. An approval
 * is bound to the call it was requested for (`binding`), so it cannot be spent
 * on another, and the party that requested it cannot decide it.
 *
 * Pure: no I/O, no clock. Times are unix seconds.
 */
import { z } from 'zod';
import { BatonError, type ErrorCode } from './errors.js';
import { sha256Hex } from './hash.js';
import type { DecisionOutcome } from './lists.js';
import { canonicalJson } from './jcs.js';
import { MAX_NAME_LENGTH } from './policy.js';
import { parseWith } from './records.js';
import { NOT_PLAIN, PLAIN_TEXT, SAYS_SOMETHING } from './text.js';

export const MAX_APPROVAL_REASON = 500;

function text(what: string, max: number) {
  return z
    .string({ error: (iss) => (iss.input === undefined ? `is required: ${what}` : 'must be a string') })
    .max(max, `must be at most ${max} characters`)
    .regex(PLAIN_TEXT, NOT_PLAIN)
    .refine((s) => SAYS_SOMETHING.test(s), 'must not be blank: it needs at least one letter or digit');
}

/** What an approver sends to approve or reject: who, an explicit confirmation, and why. */
export const GuardrailTripleSchema = z.strictObject({
  actor: text('name who decides', MAX_NAME_LENGTH),
  confirm: z.literal(true, { error: 'must be true: the decision has to be confirmed explicitly' }),
  reason: text('say why', MAX_APPROVAL_REASON),
});

export type GuardrailTriple = z.infer<typeof GuardrailTripleSchema>;

/** Validates a guardrail triple; throws INVALID_REQUEST listing every issue. */
export function parseGuardrailTriple(raw: unknown): GuardrailTriple {
  return parseWith(GuardrailTripleSchema, raw, 'body', 'INVALID_REQUEST');
}

/** What exactly was approved: the chain, the command, the tool server and the args of the call, under one catalog version. */
export interface ApprovalSubject {
  readonly dr_chain: readonly string[];
  readonly cmd: string;
  readonly tool_server: string;
  readonly args: Record<string, unknown>;
  /** The tool catalog version the approver decided under: what the tool was, which rule asked. */
  readonly catalog_version: number;
}

/**
 * A digest binding an approval to one call: the same chain, command, tool
 * server and args (any jti), so the agent may retry with a fresh invocation.
 * The command is bound too: an invocation may name any sub-path of its DR's
 * cmd, and an approval of one command must not run another. So is the catalog
 * version: a human approved the call as that version declared the tool and its
 * rules explained it; once the catalog changes, the call asks again.
 */
export function approvalBinding(subject: ApprovalSubject): string {
  return `sha256:${sha256Hex(
    canonicalJson({
      args: subject.args,
      catalog_version: subject.catalog_version,
      cmd: subject.cmd,
      dr_chain: subject.dr_chain,
      tool_server: subject.tool_server,
    }),
  )}`;
}

export interface Decision {
  readonly actor: string;
  /** The authenticated identity that decided (API key id or approver DID). */
  readonly decided_by: string;
  readonly reason: string;
  readonly at: number;
}

interface ApprovalBase {
  readonly id: string;
  readonly binding: string;
  /** The authenticated identity that asked (the agent's DID). */
  readonly requested_by: string;
  readonly created_at: number;
  readonly expires_at: number;
}

export type Approval =
  | (ApprovalBase & { readonly status: 'pending' })
  | (ApprovalBase & { readonly status: 'approved'; readonly decision: Decision })
  | (ApprovalBase & { readonly status: 'rejected'; readonly decision: Decision })
  | (ApprovalBase & { readonly status: 'expired'; readonly expired_at: number; readonly decision?: Decision })
  | (ApprovalBase & { readonly status: 'used'; readonly decision: Decision; readonly used_at: number });

export type ApprovalStatus = Approval['status'];

export type Transition =
  | { readonly ok: true; readonly approval: Approval }
  | {
      readonly ok: false;
      readonly code: ErrorCode;
      /** The status the approval has at `now` (a pending one past its deadline reads as expired). */
      readonly status: ApprovalStatus;
      readonly message: string;
    };

export function newApproval(fields: ApprovalBase): Approval {
  if (!(Number.isSafeInteger(fields.created_at) && Number.isSafeInteger(fields.expires_at) && fields.expires_at > fields.created_at)) {
    throw new BatonError('INTERNAL', { message: 'An approval needs integer times with expires_at after created_at.' });
  }
  return { ...fields, status: 'pending' };
}

/** The status at `now`: pending or approved past the deadline read as expired. */
export function statusAt(approval: Approval, now: number): ApprovalStatus {
  if ((approval.status === 'pending' || approval.status === 'approved') && now >= approval.expires_at) return 'expired';
  return approval.status;
}

/** Unix seconds for a message: readable (RFC 3339, UTC), and as the approval's own field holds them. */
function isoTime(seconds: number): string {
  return `${new Date(seconds * 1000).toISOString().replace('.000Z', 'Z')} (unix ${seconds})`;
}

function refuse(code: ErrorCode, status: ApprovalStatus, message: string): Transition {
  return { ok: false, code, status, message };
}

/** Why an approval that is no longer pending cannot be decided. */
function notPending(approval: Approval, status: ApprovalStatus): Transition {
  if (status === 'expired')
    return refuse('APPROVAL_EXPIRED', status, `Approval ${approval.id} expired at ${isoTime(approval.expires_at)}.`);
  return refuse('CONFLICT', status, `Approval ${approval.id} is already ${status}; a decision is final.`);
}

function decide(
  approval: Approval,
  outcome: DecisionOutcome,
  triple: GuardrailTriple,
  by: { readonly decided_by: string; readonly now: number },
): Transition {
  const status = statusAt(approval, by.now);
  if (approval.status !== 'pending' || status !== 'pending') return notPending(approval, status);
  if (by.decided_by === approval.requested_by) {
    return refuse('SELF_APPROVAL', status, `${by.decided_by} requested approval ${approval.id} and cannot decide it.`);
  }
  const decision: Decision = { actor: triple.actor, decided_by: by.decided_by, reason: triple.reason, at: by.now };
  return { ok: true, approval: { ...approval, status: outcome, decision } };
}

/** pending → approved, before the deadline, by someone other than the requester. */
export function approve(approval: Approval, triple: GuardrailTriple, by: { decided_by: string; now: number }): Transition {
  return decide(approval, 'approved', triple, by);
}

/** pending → rejected, before the deadline, by someone other than the requester. */
export function reject(approval: Approval, triple: GuardrailTriple, by: { decided_by: string; now: number }): Transition {
  return decide(approval, 'rejected', triple, by);
}

/**
 * approved → used: the one call it allows, before the deadline, for the bound call only, and not
 * by its decider (`caller`: the identities of whoever sends the call, e.g. an API key's rotation lineage).
 */
export function use(approval: Approval, call: { binding: string; now: number; caller?: readonly string[] }): Transition {
  const status = statusAt(approval, call.now);
  if (approval.status === 'approved' && status === 'approved') {
    if (call.binding !== approval.binding) {
      return refuse('APPROVAL_MISMATCH', status, `Approval ${approval.id} was granted for a different call.`);
    }
    const decider = approval.decision.decided_by;
    if (call.caller?.includes(decider) === true) {
      return refuse('APPROVAL_DECIDED_BY_CALLER', status, `${decider} decided approval ${approval.id} and cannot spend it.`);
    }
    return { ok: true, approval: { ...approval, status: 'used', used_at: call.now } };
  }
  switch (status) {
    case 'pending':
      return refuse('APPROVAL_REQUIRED', status, `Approval ${approval.id} has not been decided yet.`);
    case 'rejected':
      return refuse('APPROVAL_REJECTED', status, `Approval ${approval.id} was rejected.`);
    case 'used':
      return refuse('APPROVAL_USED', status, `Approval ${approval.id} has already allowed its one call.`);
    default: // expired (an approved one past its deadline reads as expired)
      return refuse('APPROVAL_EXPIRED', status, `Approval ${approval.id} expired at ${isoTime(approval.expires_at)}.`);
  }
}

/** pending or approved → expired, once the deadline has passed (records what statusAt already says). */
export function expire(approval: Approval, now: number): Transition {
  const status = statusAt(approval, now);
  if (approval.status === 'expired') return refuse('CONFLICT', status, `Approval ${approval.id} is already expired.`);
  if (status !== 'expired') {
    const why = status === 'pending' || status === 'approved' ? `good until ${isoTime(approval.expires_at)}` : 'final';
    return refuse('CONFLICT', status, `Approval ${approval.id} is ${status} and ${why}.`);
  }
  const decided = approval.status === 'approved' ? { decision: approval.decision } : {};
  const { id, binding, requested_by, created_at, expires_at } = approval;
  return { ok: true, approval: { id, binding, requested_by, created_at, expires_at, ...decided, status: 'expired', expired_at: now } };
}
