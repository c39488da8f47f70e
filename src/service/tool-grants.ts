/**
 * The lethal trifecta at issuance: a delegation whose reach (its allowed_tools
 * within its ancestors', or the whole catalog when unrestricted) combines
 * untrusted content, private data and external communication is stored
 * pending a human, with a grant.pending service receipt, and every verify through it
 * is refused (GRANT_PENDING_APPROVAL, checked inside the verify statement)
 * until an approver approves it with the guardrail triple.
 *
 * Judged against the catalog version current at issuance; a tenant without a
 * catalog has nothing to judge with.
 *
 * The API key that submitted the held record is kept with the grant and may not
 * decide it (SELF_APPROVAL), as the key whose verify asked for a call approval
 * may not decide that: otherwise one key with the issue and approve scopes
 * could lift its own hold.
 */
import type { GuardrailTriple } from '../protocol/approval.js';
import { BatonError } from '../protocol/errors.js';
import type { DecisionOutcome, GrantStatus } from '../protocol/lists.js';
import { effectiveAllowedTools, type Policy } from '../protocol/policy.js';
import { detectTrifecta, explainTrifecta } from '../protocol/trifecta.js';
import { transactionBehind, type CommitCheck, type Db } from '../store/db.js';
import { rotationLineage } from '../store/api-keys.js';
import { decideGrantRow, findGrant, insertPendingGrant, listGrants, type GrantRow } from '../store/approvals.js';
import { findDelegation } from '../store/delegations.js';
import { insertServiceReceipt } from '../store/service-receipts.js';
import { cannotApprove, cannotRunOf, decisionOf, type DecisionJson } from './approvals.js';
import { signServiceReceipt } from './service-receipts.js';
import { toolDocumentOf, toolDocumentWhileStoring } from './tools.js';
import type { ServiceDeps } from './types.js';

export interface GrantJson {
  dr_hash: string;
  status: GrantStatus;
  explanation: string;
  catalog_version: number;
  decision: DecisionJson;
}

export function grantJson(row: GrantRow): GrantJson {
  return {
    dr_hash: row.drHash,
    status: row.status,
    explanation: row.explanation,
    catalog_version: row.catalogVersion,
    decision: decisionOf(row),
  };
}

/**
 * For one submission, inside the storing transaction: `pin` once its records are inserted and locked,
 * then `next` for each DR root to leaf; a newly stored DR whose reach is a trifecta is held.
 *
 * `requestedByKey` is the id of the API key that submitted the records (POST
 * /v1/delegations with a key, custodial issuance, a verify storing unknown
 * DRs); that key cannot decide the grant. Null for a keyless submission (an
 * agent's signed sub-delegation): no key asked, so none is refused. Every
 * keyed caller must pass its key: the null default only records "no key".
 */
export async function trifectaAtIssuance(
  deps: ServiceDeps,
  tenantId: string,
  ancestorPolicies: readonly Policy[],
  requestedByKey: string | null = null,
): Promise<{ pin(tx: Db): Promise<void>; next(tx: Db, dr: { hash: string; policy: Policy }, inserted: boolean): Promise<void> }> {
  // Read before the storing transaction, and pinned in it: a publish between the two would otherwise
  // leave records judged under a version no longer current when they commit.
  let doc = await toolDocumentOf(deps, tenantId, true);
  let pinned = false;
  const policies = [...ancestorPolicies];
  return {
    /**
     * In the storing transaction, after its row locks and inserts and before the first `next`: the
     * version judged with is the one current until it commits. Never before a wait on a row lock:
     * the catalog lock it takes would then stop a publish, and every submission queued behind it.
     */
    async pin(tx) {
      doc = await toolDocumentWhileStoring(tx, tenantId, doc);
      pinned = true;
    },
    async next(tx, dr, inserted) {
      // Judged unpinned, a record could commit judged under a version a publish replaced meanwhile.
      if (!pinned) throw new Error('trifectaAtIssuance: pin(tx) must be called before next()');
      policies.push(dr.policy);
      const report = inserted ? trifectaReach(doc, policies) : null;
      if (doc === null || report === null) return;
      const explanation = `Its tools combine all three risks (${explainTrifecta(report)}).`;
      await insertPendingGrant(tx, {
        tenantId,
        drHash: dr.hash,
        status: 'pending',
        explanation,
        catalogVersion: doc.version,
        requestedByKey,
      });
      const serviceReceipt = signServiceReceipt(deps.signer, {
        tenantId,
        kind: 'grant.pending',
        subject: dr.hash,
        now: deps.now(),
        // Who submitted it is part of the record of the hold, as requested_by_key is of approval.requested.
        data: { catalog_version: doc.version, reach: report.reach, explanation, requested_by_key: requestedByKey },
      });
      await insertServiceReceipt(tx, serviceReceipt);
    },
  };
}

type ToolDocument = Awaited<ReturnType<typeof toolDocumentOf>>;

/** The trifecta report of a chain's reach under the tenant's catalog, when it is one (a hold). */
function trifectaReach(doc: ToolDocument, policies: readonly Policy[]): ReturnType<typeof detectTrifecta> | null {
  if (doc === null) return null;
  const report = detectTrifecta(effectiveAllowedTools(policies), { catalog: doc.catalog, strict: doc.settings.strict });
  return report.detected ? report : null;
}

/**
 * For a dry run: the first of `submitted` (root to leaf, after the stored `ancestorPolicies`) that
 * storing them would hold for a human, judged as trifectaAtIssuance judges it, without storing
 * anything. Records already stored (`alreadyStored`) are not newly held; their grants are read.
 */
export async function predictTrifectaHold(
  deps: ServiceDeps,
  tenantId: string,
  ancestorPolicies: readonly Policy[],
  submitted: readonly { readonly hash: string; readonly payload: { readonly policy: Policy } }[],
  alreadyStored: { has(hash: string): boolean },
): Promise<string | null> {
  const doc = await toolDocumentOf(deps, tenantId, true);
  const policies = [...ancestorPolicies];
  for (const dr of submitted) {
    policies.push(dr.payload.policy);
    if (!alreadyStored.has(dr.hash) && trifectaReach(doc, policies) !== null) return dr.hash;
  }
  return null;
}

/**
 * pending -> approved | rejected with the guardrail triple, once, with its
 * service receipt; never by the key that submitted the held record.
 */
export async function decideGrant(
  deps: ServiceDeps,
  tenantId: string,
  hash: string,
  outcome: DecisionOutcome,
  triple: GuardrailTriple,
  decidedBy: string,
  gate: CommitCheck | undefined,
): Promise<GrantJson> {
  const now = deps.now();
  const serviceReceipt = signServiceReceipt(deps.signer, {
    tenantId,
    kind: outcome === 'approved' ? 'grant.approved' : 'grant.rejected',
    subject: hash,
    now,
    data: { actor: triple.actor, reason: triple.reason, decided_by: decidedBy },
  });
  // A key rotated from or into the one that submitted the held record is the same holder.
  const decider = await rotationLineage(deps.store.db, decidedBy);
  const decided = await transactionBehind(deps.store.db, gate, async (tx) => {
    const row = await decideGrantRow(tx, tenantId, hash, outcome, { decidedBy, decider, actor: triple.actor, reason: triple.reason, now });
    if (row) await insertServiceReceipt(tx, serviceReceipt);
    return row;
  });
  if (decided) return grantJson(decided);
  const row = await findGrant(deps.store.db, tenantId, hash);
  if (!row) throw new BatonError('NOT_FOUND', { message: `No delegation ${hash} waits for approval in this tenant.` });
  if (row.requestedByKey !== null && decider.includes(row.requestedByKey)) {
    throw new BatonError('SELF_APPROVAL', {
      message: `API key ${decidedBy} submitted delegation ${hash}, whose grant is held, and cannot decide it.`,
      details: { dr_hash: hash, status: row.status },
    });
  }
  if (row.status === 'pending') {
    // The decision's UPDATE also refuses to approve a delegation through which no call can run (a
    // record of its chain revoked or expired, its root no longer trusted): say which.
    const dr = outcome === 'approved' ? await findDelegation(deps.store.db, tenantId, hash) : undefined;
    const [why] = dr === undefined ? [] : await cannotRunOf(deps.store.db, tenantId, [[...dr.ancestors, dr.hash]], now);
    if (why !== undefined) {
      throw cannotApprove(
        `Delegation ${hash} is held for approval, and no call can run through it`,
        { dr_hash: hash, status: row.status },
        why,
        `Reject it (POST /v1/grants/${hash}/reject, or baton approvals reject ${hash} --actor <name> --reason <text>), or leave it held.`,
      );
    }
    throw new BatonError('CONFLICT', { message: `The grant of ${hash} changed while it was being decided; read it again.` });
  }
  throw new BatonError('CONFLICT', { message: `The grant of ${hash} is already ${row.status}; a decision is final.` });
}

/** Held grants per page. */
export const GRANTS_PAGE_SIZE = 100;

/** A page of the tenant's held grants by DR hash, after `cursor` (the previous page's `next_cursor`). */
export async function grantsOf(
  deps: ServiceDeps,
  tenantId: string,
  status: GrantRow['status'] | undefined,
  cursor: string | undefined,
): Promise<{ grants: GrantJson[]; next_cursor: string | null }> {
  const found = await listGrants(deps.store.db, tenantId, status, cursor, GRANTS_PAGE_SIZE + 1);
  const page = found.slice(0, GRANTS_PAGE_SIZE);
  return { grants: page.map(grantJson), next_cursor: found.length > GRANTS_PAGE_SIZE ? page[page.length - 1]!.drHash : null };
}
