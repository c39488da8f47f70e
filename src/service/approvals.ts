/**
 * Human approval of single calls: created when a tenant rule answers
 * require_approval (the verify that hit the rule consumes nothing), decided
 * by an approver with the guardrail triple, spent once inside the verify
 * statement. Every step is a service receipt: approval.requested,
 * approval.approved / approval.rejected, and the invocation.allowed service receipt
 * of the one call names the approval it spent.
 */
import { randomBytes } from 'node:crypto';
import { approve, reject, type Approval, type GuardrailTriple } from '../protocol/approval.js';
import { readApprovalDecision } from '../protocol/approval-decision.js';
import { BatonError } from '../protocol/errors.js';
import type { ApprovalStatus, DecisionOutcome } from '../protocol/lists.js';
import {
  chainStandings,
  decideApprovalRow,
  expireApprovals,
  findApproval,
  findApprovalAnyTenant,
  findLiveApproval,
  findStandingRejection,
  insertApproval,
  listApprovals,
  countPendingThrough,
  countPendingUnderRoot,
  endApprovalsWhoseChainEnded,
  lockApprovalsUnderRoot,
  recordAskingKey,
  type SignedDecision,
} from '../store/approvals.js';
import { isUniqueViolation } from '../store/errors.js';
import { delegationsByHash, trustedRootsOf } from '../store/delegations.js';
import { rotationLineage } from '../store/api-keys.js';
import { findInvocation } from '../store/invocations.js';
import { readChainState } from '../store/runtime.js';
import { transactionBehind, type CommitCheck, type Db } from '../store/db.js';
import { insertServiceReceipt } from '../store/service-receipts.js';
import { currentToolDocument, newerCatalogExists } from '../store/tools.js';
import type { ApprovalRow } from '../store/schema/index.js';
import { pushPendingApproval } from './approval-webhook.js';
import { signServiceReceipt } from './service-receipts.js';
import { toolDocumentOf } from './tools.js';
import type { ServiceDeps } from './types.js';

/** How long an approval may wait for a decision and then for its one call. */
export const APPROVAL_TTL_SECONDS = 15 * 60;

export interface ApprovalJson {
  id: string;
  status: ApprovalStatus;
  tool: string | null;
  tool_server: string;
  cmd: string | null;
  args: Record<string, unknown> | null;
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
  /** Present only on a live (pending or approved) approval, as read by an approver, whose call cannot run now: why not. */
  cannot_run?: CannotRun;
}

/**
 * A recorded decision; `record` only for one signed by an approver DID: the decision record itself
 * (its compact JWS), whose hash the decision's service receipt names as `decision_record`.
 */
export type DecisionJson = { actor: string; decided_by: string; reason: string; at: number; record?: string } | null;

/** The recorded decision of an approval or a held grant row, or null while undecided. */
export function decisionOf(row: {
  decidedBy: string | null;
  actor: string | null;
  reason: string | null;
  decidedAt: number | null;
  decisionJws?: string | null;
}): DecisionJson {
  if (row.decidedBy === null) return null;
  const decision = { actor: row.actor ?? '', decided_by: row.decidedBy, reason: row.reason ?? '', at: row.decidedAt ?? 0 };
  return row.decisionJws == null ? decision : { ...decision, record: row.decisionJws };
}

/**
 * Why a call through a chain cannot run now, whatever a human decides: the refusal every verify of
 * it meets, judged in verify's order (the root's issuer no longer trusted, block C; a delegation
 * expired, block E; one revoked, block F; nearest the root first). The message names neither a
 * time nor a DID: a key that may only approve reads it, and explain hides both from such keys.
 */
export interface CannotRun {
  code: 'RECEIPT_REVOKED' | 'RECEIPT_EXPIRED' | 'UNTRUSTED_ROOT';
  dr_hash: string;
  message: string;
}

/**
 * For each chain (root first), why a call through it cannot run at `now`, or undefined when it
 * can: one read of the records of every chain and one of the tenant's trusted roots. A record
 * not stored is judged by nothing (verify stores a chain before an approval is asked through it).
 * An untrusted root can be trusted again; a revoked or expired delegation stays so.
 */
export async function cannotRunOf(
  db: Db,
  tenantId: string,
  chains: readonly (readonly string[])[],
  now: number,
): Promise<(CannotRun | undefined)[]> {
  if (chains.length === 0) return [];
  const standings = await chainStandings(db, tenantId, chains.flat());
  const trusted = await trustedRootsOf(db, tenantId);
  return chains.map((chain) => {
    const records = chain.flatMap((hash) => standings.get(hash) ?? []).sort((a, b) => a.depth - b.depth);
    const root = records[0];
    if (root !== undefined && root.depth === 0 && !trusted.has(root.iss)) {
      return { code: 'UNTRUSTED_ROOT', dr_hash: root.hash, message: 'The tenant no longer trusts the issuer of its root delegation.' };
    }
    // Expired as verify judges it: once now > exp.
    const expired = records.find((r) => r.exp !== null && now > r.exp);
    if (expired) return { code: 'RECEIPT_EXPIRED', dr_hash: expired.hash, message: 'A delegation of its chain has expired.' };
    const revoked = records.find((r) => r.revoked);
    if (revoked) return { code: 'RECEIPT_REVOKED', dr_hash: revoked.hash, message: 'A delegation of its chain was revoked.' };
    return undefined;
  });
}

/**
 * The row as served; a live one past its deadline reads as expired, whether or not that was recorded
 * yet. `read` is given where an approver or an auditor reads the approval (GET /v1/approvals, its
 * decision routes): only there does `decision` carry the signed record, and `cannot_run` (from
 * cannotRunOf) is shown while the approval is live. A verify's or a dry run's answer names the
 * approval without them: the record is some 500 bytes on every refusal of the hot path.
 */
export function approvalJson(row: ApprovalRow, now: number, read?: { readonly cannotRun: CannotRun | undefined }): ApprovalJson {
  const live = row.status === 'pending' || row.status === 'approved';
  const liveNow = live && now < row.expiresAt;
  return {
    id: row.id,
    status: live && !liveNow ? 'expired' : row.status,
    tool: row.tool,
    tool_server: row.toolServer,
    cmd: row.cmd,
    args: row.args,
    dr_chain: row.drChain,
    invocation_jti: row.invocationJti,
    requested_by: row.requestedBy,
    catalog_version: row.catalogVersion,
    rule: row.rule,
    explanation: row.explanation,
    created_at: row.createdAt,
    expires_at: row.expiresAt,
    decision: decisionOf(read === undefined ? { ...row, decisionJws: null } : row),
    used_at: row.usedAt,
    ...(liveNow && read?.cannotRun !== undefined ? { cannot_run: read.cannotRun } : {}),
  };
}

/** Approvals as served to an approver or an auditor, each live one saying whether its call cannot run now. */
async function approvalsServed(deps: ServiceDeps, tenantId: string, rows: readonly ApprovalRow[], now: number): Promise<ApprovalJson[]> {
  const live = rows.filter((r) => (r.status === 'pending' || r.status === 'approved') && now < r.expiresAt);
  const why = await cannotRunOf(
    deps.store.db,
    tenantId,
    live.map((r) => r.drChain),
    now,
  );
  const byId = new Map(live.map((r, i) => [r.id, why[i]]));
  return rows.map((r) => approvalJson(r, now, { cannotRun: byId.get(r.id) }));
}

export interface ApprovalRequest {
  readonly tenantId: string;
  readonly binding: string;
  readonly requestedBy: string;
  /** The API key whose verify asks: it may not decide this approval either. */
  readonly requestedByKey: string;
  readonly invocationJti: string;
  readonly drChain: readonly string[];
  readonly tool: string | null;
  readonly toolServer: string;
  /** The call's command and arguments: bound by the binding, shown to the approver. */
  readonly cmd: string;
  readonly args: Record<string, unknown>;
  readonly catalogVersion: number;
  readonly rule: string;
  readonly explanation: string;
}

/**
 * The live approval of this call: the one already waiting or approved, else a
 * rejection of it still inside its lifetime, else a new pending one with its
 * approval.requested service receipt. Retries while a human decides find the
 * same approval; retries after a human said no find that no.
 *
 * INVOCATION_STORED when the invocation itself was allowed meanwhile (a
 * duplicate sent while the original spent its approval): no approval is opened
 * for a call that already ran. The approval is seen spent only once the
 * transaction that spent it has committed, and that transaction stored the
 * invocation, so the check in the insert's transaction sees it.
 */
export const INVOCATION_STORED = 'invocation-stored';

/**
 * requestApproval's answer when the tool catalog the gate decided under (a node's cached copy, up
 * to 2 s old) has been replaced: nothing is opened, and the call is to be decided again under the
 * current one. Opened anyway, the approval asked a human about a call that could never run, signed
 * a receipt under the old catalog, and was pushed to the webhook the new one had replaced (a probe).
 */
export const CATALOG_CHANGED = 'catalog-changed';

/**
 * Approvals that may wait for a human at once under one chain root (a delegation the tenant
 * issued). Each distinct call a rule sends to a human opens one, so without a cap an agent could
 * bury the approvers (and the list) in calls nobody will approve. Re-asking a call that already
 * waits finds its approval, cap or not; the cap only stops new ones (APPROVALS_PENDING_LIMIT).
 */
export const MAX_PENDING_APPROVALS_PER_ROOT = 50;

/** Why no new approval may wait now: the root's cap, or a delegation with no call left for another. */
export type PendingLimit =
  | { readonly kind: 'root'; readonly root: string }
  | { readonly kind: 'calls'; readonly dr: string; readonly callsLeft: number; readonly waiting: number };

/**
 * requestApproval's answer when the call's chain ended between the verify's checks and the
 * approval's insert: a delegation of it was revoked (the revocation ended every approval through
 * it, and this one would have outlived it) or has expired. Nothing is opened; the call is refused
 * as its next verify will be.
 */
export type ChainEnded =
  | { readonly kind: 'chain-ended'; readonly code: 'RECEIPT_REVOKED'; readonly dr: string }
  /** `exp` and the `now` it was judged at: what verify's block E names (required `>= now`, actual exp). */
  | { readonly kind: 'chain-ended'; readonly code: 'RECEIPT_EXPIRED'; readonly dr: string; readonly exp: number; readonly now: number };

/**
 * Whether one more approval may wait under this chain. The root's cap bounds how many wait at once;
 * and no delegation with a max_calls holds more waiting approvals than it has calls left, since no
 * more of them could ever run: one sub-agent with one call left opened 50 (found by a probe) and
 * filled its root's cap, so its parent's and its siblings' calls were refused for the approvals'
 * lifetime. Only approvals asked under `catalogVersion` (the current catalog) count: one asked under
 * an older catalog can never run, and after a publish it held the very place its call needed to ask
 * again (an outside probe). One whose chain holds a revoked or expired record is not pending any
 * more: a revocation ends the approvals through it, and an approval's deadline is at most its
 * chain's exp (requestApproval), so the count reads no delegation. `lock`: take the root's
 * transaction lock first (inside the inserting transaction), so concurrent asks count one after
 * another; a dry run reads without it.
 *
 * An ask (`lock`) that meets a limit first ends the root's approvals whose chain has ended and
 * counts again: those a revocation could not end (a verify held them past its wait after the
 * commit, or its node died in between) would otherwise hold their places until their deadline.
 * Only there, so the counts every other ask makes stay plain. A dry run (no `lock`) that meets a
 * limit counts again as that ask would after ending them, and ends nothing: it writes nothing.
 */
export async function pendingLimitFor(
  db: Db,
  tenantId: string,
  chain: readonly string[],
  now: number,
  lock: boolean,
  catalogVersion: number,
): Promise<PendingLimit | undefined> {
  const root = chain[0]!;
  if (lock) await lockApprovalsUnderRoot(db, tenantId, root);
  const limit = await pendingLimitNow(db, tenantId, chain, now, catalogVersion, false);
  if (limit === undefined) return limit;
  if (!lock) return pendingLimitNow(db, tenantId, chain, now, catalogVersion, true);
  const healed = await endApprovalsWhoseChainEnded(db, tenantId, root, now, catalogVersion);
  return healed === 0 ? limit : pendingLimitNow(db, tenantId, chain, now, catalogVersion, false);
}

/**
 * pendingLimitFor's counts, as they stand (under the root's lock when the caller took it); `asHealed`
 * leaves out the approvals whose chain ended, as an ask at a cap would once it had ended them.
 */
async function pendingLimitNow(
  db: Db,
  tenantId: string,
  chain: readonly string[],
  now: number,
  catalogVersion: number,
  asHealed: boolean,
): Promise<PendingLimit | undefined> {
  const root = chain[0]!;
  const underRoot = await countPendingUnderRoot(db, tenantId, root, now, catalogVersion, asHealed);
  if (underRoot >= MAX_PENDING_APPROVALS_PER_ROOT) return { kind: 'root', root };
  for (const s of await readChainState(db, tenantId, chain)) {
    if (s.maxCalls === null) continue;
    const callsLeft = Math.max(0, s.maxCalls - s.callsUsed);
    const waiting = await countPendingThrough(db, tenantId, root, s.hash, now, catalogVersion, asHealed);
    if (waiting >= callsLeft) return { kind: 'calls', dr: s.hash, callsLeft, waiting };
  }
  return undefined;
}

export async function requestApproval(
  deps: ServiceDeps,
  r: ApprovalRequest,
): Promise<ApprovalRow | typeof INVOCATION_STORED | typeof CATALOG_CHANGED | PendingLimit | ChainEnded> {
  const db = deps.store.db;
  const now = deps.now();
  if (await newerCatalogExists(db, r.tenantId, r.catalogVersion)) return CATALOG_CHANGED;
  await expireApprovals(db, r.tenantId, now, r.binding);
  for (let attempt = 0; attempt < 3; attempt++) {
    const live = await findLiveApproval(db, r.tenantId, r.binding);
    // A key asking for a pending approval, first or not, may not decide it.
    if (live?.status === 'pending' && !live.askedByKeys.includes(r.requestedByKey)) {
      await recordAskingKey(db, r.tenantId, live.id, r.requestedByKey);
    }
    if (live) return live;
    // A human said no to this very call: answered with that, not asked again, until the approval's deadline.
    const rejected = await findStandingRejection(db, r.tenantId, r.binding, now);
    if (rejected) return rejected;
    const id = `apr_${randomBytes(16).toString('hex')}`;
    // Signed in the transaction: its expires_at depends on the chain as read under the root's lock.
    let requested: ReturnType<typeof signServiceReceipt> | undefined;
    const created = await db.transaction(async (tx) => {
      if ((await findInvocation(tx, r.tenantId, r.invocationJti)) !== undefined) return INVOCATION_STORED;
      if (await newerCatalogExists(tx, r.tenantId, r.catalogVersion)) return CATALOG_CHANGED;
      const limit = await pendingLimitFor(tx, r.tenantId, r.drChain, now, true, r.catalogVersion);
      // Read under the root's lock (pendingLimitFor took it): a revocation of the chain either
      // committed before it (read here) or ends this approval once it commits (endApprovalsThrough).
      const chain = await chainEnd(tx, r.tenantId, r.drChain, now);
      if ('kind' in chain) return chain;
      if (limit) return limit;
      // An approval never outlives its call's chain: its deadline is at most the last second the
      // chain runs (exp is inclusive), so one through a short-lived delegation holds no place past it.
      const expiresAt = Math.min(now + APPROVAL_TTL_SECONDS, chain.lastSecond + 1);
      const serviceReceipt = signServiceReceipt(deps.signer, {
        tenantId: r.tenantId,
        kind: 'approval.requested',
        subject: id,
        now,
        data: {
          binding: r.binding,
          tool: r.tool,
          tool_server: r.toolServer,
          cmd: r.cmd,
          dr_chain: [...r.drChain],
          invocation_jti: r.invocationJti,
          requested_by: r.requestedBy,
          requested_by_key: r.requestedByKey,
          catalog_version: r.catalogVersion,
          rule: r.rule,
          expires_at: expiresAt,
        },
      });
      const inserted = await insertApproval(tx, {
        tenantId: r.tenantId,
        id,
        binding: r.binding,
        status: 'pending',
        requestedBy: r.requestedBy,
        requestedByKey: r.requestedByKey,
        askedByKeys: [r.requestedByKey],
        invocationJti: r.invocationJti,
        drChain: [...r.drChain],
        tool: r.tool,
        toolServer: r.toolServer,
        cmd: r.cmd,
        args: r.args,
        catalogVersion: r.catalogVersion,
        rule: r.rule,
        explanation: r.explanation,
        createdAt: now,
        expiresAt,
      });
      if (inserted) await insertServiceReceipt(tx, serviceReceipt);
      requested = serviceReceipt;
      return inserted;
    });
    if (created === INVOCATION_STORED || created === CATALOG_CHANGED || (typeof created === 'object' && 'kind' in created)) return created;
    if (created && requested !== undefined) {
      const row = (await findApproval(db, r.tenantId, id))!;
      // Not awaited: a webhook never delays the verify that asked for the approval.
      void pushPendingApproval(deps, r.tenantId, {
        event: 'approval.pending',
        approval: approvalJson(row, now),
        service_receipt: requested.jws,
      });
      return row;
    }
  }
  throw new BatonError('STORAGE_UNAVAILABLE', { message: 'The approval of this call kept changing; retry.' });
}

/**
 * Whether the chain still runs at `now`, read in the approval's transaction: the nearest revoked
 * or expired record (ChainEnded), else the last second it runs (its records' earliest exp;
 * Infinity when none has one). A record not stored is judged by nothing.
 */
async function chainEnd(db: Db, tenantId: string, chain: readonly string[], now: number): Promise<ChainEnded | { lastSecond: number }> {
  const standings = await chainStandings(db, tenantId, chain);
  const records = chain.flatMap((hash) => standings.get(hash) ?? []).sort((a, b) => a.depth - b.depth);
  const expired = records.find((rec) => rec.exp !== null && now > rec.exp);
  if (expired) return { kind: 'chain-ended', code: 'RECEIPT_EXPIRED', dr: expired.hash, exp: expired.exp!, now };
  const revoked = records.find((rec) => rec.revoked);
  if (revoked) return { kind: 'chain-ended', code: 'RECEIPT_REVOKED', dr: revoked.hash };
  return { lastSecond: Math.min(Infinity, ...records.flatMap((rec) => (rec.exp === null ? [] : [rec.exp]))) };
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
 * service receipt; when it does not apply, the pure transition says why.
 */
export async function decideApproval(
  deps: ServiceDeps,
  tenantId: string,
  id: string,
  outcome: DecisionOutcome,
  triple: GuardrailTriple,
  decidedBy: string,
  gate: CommitCheck | undefined,
  signed?: SignedDecision & { readonly hash: string },
): Promise<ApprovalJson> {
  const db = deps.store.db;
  const now = deps.now();
  const serviceReceipt = signServiceReceipt(deps.signer, {
    tenantId,
    kind: outcome === 'approved' ? 'approval.approved' : 'approval.rejected',
    subject: id,
    now,
    data: {
      actor: triple.actor,
      reason: triple.reason,
      decided_by: decidedBy,
      // A signed decision: which record, so an auditor can fetch and check the human's own signature.
      ...(signed === undefined ? {} : { decision_record: signed.hash, decision_jti: signed.jti, approvers_version: signed.listedIn }),
    },
  });
  // A key rotated from or into one that asked is the same holder: it may not decide either.
  const decider = await rotationLineage(db, decidedBy);
  const decided = await transactionBehind(db, gate, async (tx) => {
    const row = await decideApprovalRow(tx, tenantId, id, outcome, {
      decidedBy,
      decider,
      actor: triple.actor,
      reason: triple.reason,
      now,
      ...(signed === undefined ? {} : { signed }),
    });
    if (row) await insertServiceReceipt(tx, serviceReceipt);
    return row;
  });
  if (decided) return (await approvalsServed(deps, tenantId, [decided], now))[0]!;
  const row = await findApproval(db, tenantId, id);
  if (!row) throw new BatonError('NOT_FOUND', { message: `No approval ${id} exists for this tenant.` });
  if (decider.some((k) => k === row.requestedByKey || row.askedByKeys.includes(k))) {
    throw new BatonError('SELF_APPROVAL', {
      message: `API key ${decidedBy} asked for approval ${id} (its verify of the call) and cannot decide it.`,
      details: { approval_id: id, status: row.status },
    });
  }
  // Judged as the UPDATE judged it: after the wait for the row, which may have passed the deadline.
  const judgedAt = Math.max(now, deps.now());
  const transition = (outcome === 'approved' ? approve : reject)(asProtocolApproval(row), triple, {
    decided_by: decidedBy,
    now: judgedAt,
  });
  if (transition.ok) {
    // The decision's UPDATE also refuses to approve a call that cannot run (its root no longer
    // trusted, a delegation of its chain expired or revoked): say which.
    const [why] = outcome === 'approved' ? await cannotRunOf(db, tenantId, [row.drChain], judgedAt) : [];
    if (why !== undefined)
      throw cannotApprove(
        `Approval ${id} is for a call that cannot run`,
        { approval_id: id, status: row.status },
        why,
        approvalRejection(id),
      );
    const current = outcome === 'approved' ? await currentToolDocument(db, tenantId) : undefined;
    if (current !== undefined && current.version > row.catalogVersion) {
      throw new BatonError('CONFLICT', {
        message: `Approval ${id} was asked under tool catalog version ${row.catalogVersion}, and version ${current.version} has replaced it: the call can never run on this approval (the agent's retry asks again under version ${current.version}), so it cannot be approved.`,
        suggestion: `Reject it (POST /v1/approvals/${id}/reject, or baton approvals reject), or leave it to expire; decide the new approval the call asks for instead.`,
        details: { approval_id: id, status: row.status, catalog_version: row.catalogVersion, current_catalog_version: current.version },
      });
    }
    throw new BatonError('CONFLICT', { message: `Approval ${id} changed while it was being decided; read it again.` });
  }
  // CONFLICT here means already decided (or used): the generic "fresh identifier / resend" advice fits nothing.
  const suggestion = transition.code === 'CONFLICT' ? decidedSuggestion(id, transition.status, row.expiresAt) : undefined;
  // APPROVAL_EXPIRED's block letter (G) names a step of the verify pipeline; a decision is none, so its answer carries no `block`.
  throw new BatonError(transition.code, {
    message: transition.message,
    suggestion,
    details: { approval_id: id, status: transition.status },
    block: null,
  });
}

const approvalRejection = (id: string) => `Reject it (POST /v1/approvals/${id}/reject, or baton approvals reject), or leave it to expire.`;

/**
 * CONFLICT for approving what cannot run: `what` names the approval or the held grant (`details`
 * say which, and its status), `why` says what every verify through it meets. The details keep `revoked_dr` for a revoked delegation,
 * as before; an expired one is `expired_dr`, an untrusted root `untrusted_root` (its record's hash).
 */
export function cannotApprove(what: string, details: Record<string, unknown>, why: CannotRun, suggestion: string): BatonError {
  const field = why.code === 'RECEIPT_REVOKED' ? 'revoked_dr' : why.code === 'RECEIPT_EXPIRED' ? 'expired_dr' : 'untrusted_root';
  return new BatonError('CONFLICT', {
    message: `${what}: ${why.message} Every verify through it is refused ${why.code}${why.code === 'UNTRUSTED_ROOT' ? ' while the tenant does not trust that issuer' : ''}, so it cannot be approved (an approval would record a permission nothing can use).`,
    suggestion,
    details: { ...details, [field]: why.dr_hash },
  });
}

/** What an approver can still do about an approval that is already decided (approved, rejected or used). */
function decidedSuggestion(id: string, status: ApprovalStatus, expiresAt: number): string {
  const read = `Read it with GET /v1/approvals/${id} (baton approvals show ${id}).`;
  if (status === 'approved')
    return `The decision is final and nothing more is needed: the agent's retry of the same call runs once. ${read}`;
  if (status === 'rejected') {
    return `The decision is final and cannot be changed. ${read} The same call is answered APPROVAL_REJECTED until ${new Date(expiresAt * 1000).toISOString()}; after that the agent may send it again, which asks for a new approval.`;
  }
  return `The decision is final and cannot be changed. ${read} For the call to run again, the agent must re-send it, which asks for a new approval.`;
}

/**
 * Approve or reject with a decision record signed by an approver DID, sent
 * without an API key (src/protocol/approval-decision.ts). Accepted only when
 * the signer is in the `approvers` of the approval's tenant, in the version
 * current when the decision is stored (a newer version that drops the signer
 * wins the race), and then exactly like a key holder's decision, with the DID
 * as actor and decider. A record's jti decides once per signer.
 *
 * Keyless callers learn nothing about tenants: an unknown approval id and a
 * signer the tenant does not list get the same 404. Only a listed approver
 * learns the approval's state.
 */
export async function decideApprovalSigned(
  deps: ServiceDeps,
  id: string,
  jws: string,
  gate: CommitCheck | undefined,
): Promise<ApprovalJson> {
  const record = readApprovalDecision(jws, { approvalId: id, now: deps.now(), clockSkewSeconds: deps.config.clockSkewSeconds });
  const signer = record.payload.iss;
  const notAnApprover = () =>
    new BatonError('NOT_FOUND', {
      message: `No approval ${id} accepts a decision signed by ${signer}.`,
      suggestion: "Check the approval id, and that the tenant lists this DID among its tool document's approvers.",
    });
  const row = await findApprovalAnyTenant(deps.store.db, id);
  if (!row) throw notAnApprover();
  for (let attempt = 0; ; attempt++) {
    const doc = await toolDocumentOf(deps, row.tenantId, true);
    if (doc === null || !doc.settings.approvers.includes(signer)) throw notAnApprover();
    await refuseChainParty(deps, row, signer);
    const signed = { jws: record.jws, jti: record.payload.jti, hash: record.hash, listedIn: doc.version };
    try {
      const decided = await decideApproval(deps, row.tenantId, id, record.outcome, record.triple, signer, gate, signed);
      deps.log.info('approval decided', { tenant_id: row.tenantId, approval_id: id, status: decided.status, decided_by: signer });
      return decided;
    } catch (err) {
      if (isUniqueViolation(err)) {
        throw new BatonError('CONFLICT', {
          message: `${signer} already used a decision record with jti ${JSON.stringify(record.payload.jti)}; a record decides once.`,
          suggestion: 'Sign a new decision record with a fresh jti.',
        });
      }
      // Still pending but not decided: a new tool document version came in between. Judge the signer under it, once.
      const moved =
        err instanceof BatonError &&
        err.code === 'CONFLICT' &&
        (await currentToolDocument(deps.store.db, row.tenantId))?.version !== doc.version;
      if (moved && attempt === 0) continue;
      throw err;
    }
  }
}

/**
 * An approver DID that holds a delegation of the call's chain is a party to the call: it could
 * delegate to a key of its own, invoke through it, and approve what it asked for. Only the leaf's
 * invoker is the approval's requested_by, so every holder (each DR's audience) is checked here; the
 * root's issuer, the operator, holds none.
 */
async function refuseChainParty(deps: ServiceDeps, row: ApprovalRow, signer: string): Promise<void> {
  const stored = await delegationsByHash(deps.store.db, row.tenantId, row.drChain);
  const index = row.drChain.findIndex((hash) => stored.get(hash)?.aud === signer);
  if (index < 0) return;
  throw new BatonError('SELF_APPROVAL', {
    message: `${signer} holds DR #${index} of the chain approval ${row.id} is for, so it is a party to the call and cannot decide it.`,
  });
}

export async function approvalOf(deps: ServiceDeps, tenantId: string, id: string): Promise<ApprovalJson> {
  const row = await findApproval(deps.store.db, tenantId, id);
  if (!row) throw new BatonError('NOT_FOUND', { message: `No approval ${id} exists for this tenant.` });
  return (await approvalsServed(deps, tenantId, [row], deps.now()))[0]!;
}

/** Approvals per page: however many an agent opens, the next page starts where this one ended. */
export const APPROVALS_PAGE_SIZE = 100;

/**
 * A page of the tenant's approvals, oldest first, after the approval `cursor` (the previous page's
 * `next_cursor`); expired ones are recorded as such first (all but those a verify holds at that
 * moment, which the status filter and each approval's status judge by the deadline all the same).
 */
export async function approvalsOf(
  deps: ServiceDeps,
  tenantId: string,
  status: ApprovalStatus | undefined,
  cursor: string | undefined,
): Promise<{ approvals: ApprovalJson[]; next_cursor: string | null }> {
  const now = deps.now();
  await expireApprovals(deps.store.db, tenantId, now);
  const found = await listApprovals(deps.store.db, tenantId, status, cursor, APPROVALS_PAGE_SIZE + 1, now);
  if (found === undefined) {
    throw new BatonError('INVALID_REQUEST', {
      message: `The cursor ${cursor} is not an approval of this tenant.`,
      suggestion: 'Pass next_cursor from the previous page unchanged, or omit cursor for the first page.',
      details: { parameter: 'cursor' },
    });
  }
  const page = found.slice(0, APPROVALS_PAGE_SIZE);
  return {
    approvals: await approvalsServed(deps, tenantId, page, now),
    next_cursor: found.length > APPROVALS_PAGE_SIZE ? page[page.length - 1]!.id : null,
  };
}
