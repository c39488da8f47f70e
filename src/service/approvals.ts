/**
 * Human approval of single calls: created when a tenant rule answers
 * require_approval (the verify that hit the rule consumes nothing), decided
 * by an approver with the guardrail triple, spent once inside the verify
 * statement. Every step is a service receipt: approval.requested,
 * approval.approved / approval.rejected, and the invocation.allowed receipt
 * of the one call names the approval it spent.
 */
import { randomBytes } from 'node:crypto';
import { approve, reject, type Approval, type GuardrailTriple } from '../protocol/approval.js';
import { BatonError } from '../protocol/errors.js';
import { decideApprovalRow, expireApprovals, findApproval, findLiveApproval, insertApproval, listApprovals } from '../store/approvals.js';
import { insertReceipt } from '../store/receipts.js';
import type { ApprovalRow, ApprovalStatusColumn } from '../store/schema/index.js';
import { pushPendingApproval } from './approval-webhook.js';
import { signReceipt } from './receipts.js';
import type { ServiceDeps } from './types.js';

/** How long an approval may wait for a decision and then for its one call. */
export const APPROVAL_TTL_SECONDS = 15 * 60;

export interface ApprovalJson {
  id: string;
  status: ApprovalStatusColumn;
  tool: string | null;
  tool_server: string;
  dr_chain: string[];
  invocation_jti: string;
  requested_by: string;
  catalog_version: number;
  rule: string;
  explanation: string;
  created_at: number;
  expires_at: number;
  decision: DecisionJson;
  used_at: number | null;
}

export type DecisionJson = { actor: string; decided_by: string; reason: string; at: number } | null;

/** The recorded decision of an approval or a held grant row, or null while undecided. */
export function decisionOf(row: {
  decidedBy: string | null;
  actor: string | null;
  reason: string | null;
  decidedAt: number | null;
}): DecisionJson {
  return row.decidedBy === null
    ? null
    : { actor: row.actor ?? '', decided_by: row.decidedBy, reason: row.reason ?? '', at: row.decidedAt ?? 0 };
}

/** The row as served; a live one past its deadline reads as expired, whether or not that was recorded yet. */
export function approvalJson(row: ApprovalRow, now: number): ApprovalJson {
  const live = row.status === 'pending' || row.status === 'approved';
  return {
    id: row.id,
    status: live && now >= row.expiresAt ? 'expired' : row.status,
    tool: row.tool,
    tool_server: row.toolServer,
    dr_chain: row.drChain,
    invocation_jti: row.invocationJti,
    requested_by: row.requestedBy,
    catalog_version: row.catalogVersion,
    rule: row.rule,
    explanation: row.explanation,
    created_at: row.createdAt,
    expires_at: row.expiresAt,
    decision: decisionOf(row),
    used_at: row.usedAt,
  };
}

export interface ApprovalRequest {
  readonly tenantId: string;
  readonly binding: string;
  readonly requestedBy: string;
  readonly invocationJti: string;
  readonly drChain: readonly string[];
  readonly tool: string | null;
  readonly toolServer: string;
  readonly catalogVersion: number;
  readonly rule: string;
  readonly explanation: string;
}

/**
 * The live approval of this call: the one already waiting or approved, else
 * a new pending one with its approval.requested receipt. Retries while a
 * human decides find the same approval.
 */
export async function requestApproval(deps: ServiceDeps, r: ApprovalRequest): Promise<ApprovalRow> {
  const db = deps.store.db;
  const now = deps.now();
  await expireApprovals(db, r.tenantId, now, r.binding);
  for (let attempt = 0; attempt < 3; attempt++) {
    const live = await findLiveApproval(db, r.tenantId, r.binding);
    if (live) return live;
    const id = `apr_${randomBytes(16).toString('hex')}`;
    const expiresAt = now + APPROVAL_TTL_SECONDS;
    const receipt = signReceipt(deps.signer, {
      tenantId: r.tenantId,
      kind: 'approval.requested',
      subject: id,
      now,
      data: {
        binding: r.binding,
        tool: r.tool,
        tool_server: r.toolServer,
        dr_chain: [...r.drChain],
        invocation_jti: r.invocationJti,
        requested_by: r.requestedBy,
        catalog_version: r.catalogVersion,
        rule: r.rule,
        expires_at: expiresAt,
      },
    });
    const created = await db.transaction(async (tx) => {
      const inserted = await insertApproval(tx, {
        tenantId: r.tenantId,
        id,
        binding: r.binding,
        status: 'pending',
        requestedBy: r.requestedBy,
        invocationJti: r.invocationJti,
        drChain: [...r.drChain],
        tool: r.tool,
        toolServer: r.toolServer,
        catalogVersion: r.catalogVersion,
        rule: r.rule,
        explanation: r.explanation,
        createdAt: now,
        expiresAt,
      });
      if (inserted) await insertReceipt(tx, receipt);
      return inserted;
    });
    if (created) {
      const row = (await findApproval(db, r.tenantId, id))!;
      // Not awaited: a webhook never delays the verify that asked for the approval.
      void pushPendingApproval(deps, r.tenantId, { event: 'approval.pending', approval: approvalJson(row, now), receipt: receipt.jws });
      return row;
    }
  }
  throw new BatonError('STORAGE_UNAVAILABLE', { message: 'The approval of this call kept changing; retry.' });
}

function asProtocolApproval(row: ApprovalRow): Approval {
  const base = { id: row.id, binding: row.binding, requested_by: row.requestedBy, created_at: row.createdAt, expires_at: row.expiresAt };
  const decision =
    row.decidedBy === null
      ? undefined
      : { actor: row.actor ?? '', decided_by: row.decidedBy, reason: row.reason ?? '', at: row.decidedAt ?? 0 };
  switch (row.status) {
    case 'pending':
      return { ...base, status: 'pending' };
    case 'approved':
    case 'rejected':
      return { ...base, status: row.status, decision: decision! };
    case 'used':
      return { ...base, status: 'used', decision: decision!, used_at: row.usedAt ?? 0 };
    case 'expired':
      return { ...base, status: 'expired', expired_at: row.expiresAt, ...(decision ? { decision } : {}) };
  }
}

/**
 * Approve or reject with the guardrail triple. One conditional UPDATE decides
 * (pending, before the deadline, not by the requester) together with its
 * receipt; when it does not apply, the pure transition says why.
 */
export async function decideApproval(
  deps: ServiceDeps,
  tenantId: string,
  id: string,
  outcome: 'approved' | 'rejected',
  triple: GuardrailTriple,
  decidedBy: string,
): Promise<ApprovalJson> {
  const db = deps.store.db;
  const now = deps.now();
  const receipt = signReceipt(deps.signer, {
    tenantId,
    kind: outcome === 'approved' ? 'approval.approved' : 'approval.rejected',
    subject: id,
    now,
    data: { actor: triple.actor, reason: triple.reason, decided_by: decidedBy },
  });
  const decided = await db.transaction(async (tx) => {
    const row = await decideApprovalRow(tx, tenantId, id, outcome, { decidedBy, actor: triple.actor, reason: triple.reason, now });
    if (row) await insertReceipt(tx, receipt);
    return row;
  });
  if (decided) return approvalJson(decided, now);
  const row = await findApproval(db, tenantId, id);
  if (!row) throw new BatonError('NOT_FOUND', { message: `No approval ${id} exists for this tenant.` });
  const transition = (outcome === 'approved' ? approve : reject)(asProtocolApproval(row), triple, { decided_by: decidedBy, now });
  if (transition.ok) throw new BatonError('CONFLICT', { message: `Approval ${id} changed while it was being decided; read it again.` });
  throw new BatonError(transition.code, { message: transition.message, details: { approval_id: id, status: transition.status } });
}

export async function approvalOf(deps: ServiceDeps, tenantId: string, id: string): Promise<ApprovalJson> {
  const row = await findApproval(deps.store.db, tenantId, id);
  if (!row) throw new BatonError('NOT_FOUND', { message: `No approval ${id} exists for this tenant.` });
  return approvalJson(row, deps.now());
}

/** Approvals of the tenant, oldest first; expired ones are recorded as such first. */
export async function approvalsOf(deps: ServiceDeps, tenantId: string, status?: ApprovalStatusColumn): Promise<ApprovalJson[]> {
  const now = deps.now();
  await expireApprovals(deps.store.db, tenantId, now);
  return (await listApprovals(deps.store.db, tenantId, status)).map((r) => approvalJson(r, now));
}
