/**
 * Reading delegation records: one record, its chain, its subtree. Submission
 * is in delegation-submission.ts.
 */
import { BatonError } from '../protocol/errors.js';
import type { DelegationStatus } from '../protocol/lists.js';
import { microsToUsd, saturatingMicros, type Micros } from '../protocol/money.js';
import type { Db } from '../store/db.js';
import { callsThrough, findDelegation, revokedInChain, spendRollup, storedChainTo, subtreeOf, type TreeRow } from '../store/delegations.js';
import { firstServiceReceipt } from '../store/service-receipts.js';
import { unapprovedGrants } from '../store/approvals.js';
import type { Delegation } from '../store/schema/index.js';
import { delegationCalibrationFlagged } from './tool-gate.js';
import type { ServiceDeps } from './types.js';

export interface ServiceReceiptView {
  readonly id: number;
  readonly kid: string;
  readonly jws: string;
}

export interface DelegationView {
  readonly hash: string;
  readonly jti: string;
  readonly iss: string;
  readonly sub: string;
  readonly aud: string;
  readonly cmd: string;
  readonly policy: Record<string, unknown>;
  readonly nbf: number;
  readonly exp: number | null;
  readonly iat: number;
  readonly depth: number;
  readonly parent_hash: string | null;
  readonly root_hash: string;
  readonly status: DelegationStatus;
  readonly revoked_at: string | null;
  readonly revoked_by: string | null;
  readonly created_at: string;
}

/**
 * What a verify through the record would meet first, of what is stored about it: a revocation at
 * or above it, its window, a grant at or above it still held for a human (tool-grants.ts).
 */
export function delegationStatus(
  row: Pick<Delegation, 'exp' | 'nbf'>,
  now: number,
  revokedBy: string | null,
  held: boolean,
): DelegationStatus {
  if (revokedBy) return 'revoked';
  if (row.exp !== null && now > row.exp) return 'expired';
  if (held) return 'held';
  if (now < row.nbf) return 'not_yet_valid';
  return 'active';
}

/**
 * For a root-first chain of stored records, whether each is held: a grant at or above it is not
 * approved (pending or rejected). A hold cascades down the chain like a revocation.
 */
export async function heldAlongChain(db: Db, tenantId: string, chain: readonly string[]): Promise<boolean[]> {
  const held = new Set((await unapprovedGrants(db, tenantId, chain)).map((g) => g.drHash));
  let above = false;
  return chain.map((hash) => (above ||= held.has(hash)));
}

/** `revokedBy`: the highest revoked record at or above it; `held`: a grant at or above it not approved. */
export function delegationView(
  row: Omit<TreeRow, 'maxCalls' | 'callsUsed'>,
  now: number,
  revokedBy: string | null,
  held: boolean,
): DelegationView {
  return {
    hash: row.hash,
    jti: row.jti,
    iss: row.iss,
    sub: row.sub,
    aud: row.aud,
    cmd: row.cmd,
    policy: row.policy,
    nbf: row.nbf,
    exp: row.exp,
    iat: row.iat,
    depth: row.depth,
    parent_hash: row.parentHash,
    root_hash: row.rootHash,
    status: delegationStatus(row, now, revokedBy, held),
    revoked_at: row.revokedAt?.toISOString() ?? null,
    revoked_by: revokedBy,
    created_at: row.createdAt.toISOString(),
  };
}

function notFound(hash: string): BatonError {
  return new BatonError('NOT_FOUND', { message: `No delegation record ${hash} is stored for this tenant.` });
}

export interface UsageView {
  readonly calls_used: number;
  readonly max_calls: number | null;
  readonly declared_usd: number;
  readonly metered_usd: number;
  readonly metered_invocations: number;
  readonly unmetered_invocations: number;
  readonly unavailable_invocations: number;
  /** metered / declared over the invocations that were metered; null when none of them declared a cost. */
  readonly calibration: number | null;
  /** Set exactly when the tool gate's `cost_calibration` condition holds for this delegation. */
  readonly calibration_flag: 'metered_above_declared' | null;
  readonly max_spend_usd: number | null;
  readonly spend_reserved_usd: number | null;
  /** True when an amount above reached the largest one reported exactly and shows that lower bound. */
  readonly amounts_saturated: boolean;
}

export async function usageOf(deps: ServiceDeps, tenantId: string, row: Delegation): Promise<UsageView> {
  // The flag is the gate's own predicate under the tenant's thresholds, never a heuristic of this
  // view: an auditor reads here what verify decides with.
  const [r, flagged] = await Promise.all([
    spendRollup(deps.store.db, tenantId, row.hash),
    delegationCalibrationFlagged(deps, tenantId, row.hash),
  ]);
  const reserved = saturatingMicros(row.spendReservedMicros);
  const calibration = r.declared_of_metered_micros > 0 ? r.metered_micros / r.declared_of_metered_micros : null;
  return {
    calls_used: row.maxCalls === null ? r.calls : row.callsUsed,
    max_calls: row.maxCalls,
    declared_usd: microsToUsd(r.declared_micros as Micros),
    metered_usd: microsToUsd(r.metered_micros as Micros),
    metered_invocations: r.metered_invocations,
    unmetered_invocations: r.unmetered_invocations,
    unavailable_invocations: r.unavailable_invocations,
    calibration: calibration === null ? null : Math.round(calibration * 1e4) / 1e4,
    calibration_flag: flagged ? 'metered_above_declared' : null,
    max_spend_usd: row.maxSpendMicros === null ? null : microsToUsd(row.maxSpendMicros as Micros),
    spend_reserved_usd: row.maxSpendMicros === null ? null : microsToUsd(reserved.micros),
    amounts_saturated: r.saturated || (row.maxSpendMicros !== null && reserved.saturated),
  };
}

export async function describeDelegation(deps: ServiceDeps, tenantId: string, hash: string) {
  const db = deps.store.db;
  const row = await findDelegation(db, tenantId, hash);
  if (!row) throw notFound(hash);
  const revokedBy = await revokedInChain(db, tenantId, row);
  const held = (await heldAlongChain(db, tenantId, [...row.ancestors, row.hash])).at(-1)!;
  return {
    ...delegationView(row, deps.now(), revokedBy, held),
    jws: row.jws,
    revoked_reason: row.revokedReason,
    usage: await usageOf(deps, tenantId, row),
  };
}

/** Root-to-leaf JWS list with service receipts: what `baton verify` re-checks offline. */
export async function chainOfDelegation(deps: ServiceDeps, tenantId: string, hash: string) {
  const db = deps.store.db;
  const chain = await storedChainTo(db, tenantId, hash);
  if (chain.length === 0) throw notFound(hash);
  const now = deps.now();
  const revoked = chain.find((r) => r.revokedAt !== null)?.hash ?? null;
  const held = await heldAlongChain(
    db,
    tenantId,
    chain.map((r) => r.hash),
  );
  const records = [];
  let revokedBy: string | null = null;
  for (const [i, row] of chain.entries()) {
    if (row.hash === revoked) revokedBy = revoked;
    records.push({
      ...delegationView(row, now, revokedBy, held[i]!),
      jws: row.jws,
      service_receipt: (await firstServiceReceipt(db, tenantId, row.hash, 'delegation.accepted')) ?? null,
    });
  }
  return { hash, root_principal: chain[0]!.iss, receipts: chain.map((r) => r.jws), records };
}

/** The most records a tree answer holds. */
export const TREE_RECORDS = 1000;
/**
 * The most bytes of policies (as JSON) a tree answer holds, past its first record, measured by each
 * record's JWS (which holds its policy base64url-encoded: about 3 MiB of policies at most). Ordinary policies
 * are well under 1 KB, so 1000 of them never reach it; records with outsized ones (any holder may
 * store them, each up to about 48 KB, inside a JWS's 64 KiB) stop at about 85 such records, keeping
 * an answer near 5 MB (the other fields of a node add under 1 KB) where 1000 of them made 45 MB.
 */
export const TREE_POLICY_BYTES = 4 * 1024 * 1024;

export interface TreeNode extends DelegationView {
  readonly calls_used: number;
  readonly max_calls: number | null;
  readonly children: TreeNode[];
}

/**
 * The DR and its descendants as a nested tree: at most TREE_RECORDS records and TREE_POLICY_BYTES of
 * policies, shallowest first, `truncated` when more exist (the rest are read as subtrees of children).
 */
export async function treeOfDelegation(deps: ServiceDeps, tenantId: string, hash: string) {
  const db = deps.store.db;
  const top = await findDelegation(db, tenantId, hash);
  if (!top) throw notFound(hash);
  const { rows: inTree, truncated } = await subtreeOf(db, tenantId, hash, { records: TREE_RECORDS, policyBytes: TREE_POLICY_BYTES });
  const now = deps.now();
  const aboveRevoked = await revokedInChain(db, tenantId, top);
  const heldHashes = new Set((await unapprovedGrants(db, tenantId, [...top.ancestors, ...inTree.map((r) => r.hash)])).map((g) => g.drHash));
  const aboveHeld = top.ancestors.some((h) => heldHashes.has(h));
  // A DR without max_calls is not counted in its own row: its calls are read as usageOf reads them.
  const uncounted = await callsThrough(
    db,
    tenantId,
    hash,
    inTree.filter((r) => r.maxCalls === null).map((r) => r.hash),
  );
  const nodes = new Map<string, TreeNode>();
  let root: TreeNode | undefined;
  const heldNodes = new Set<string>();
  for (const row of inTree) {
    const parent = row.parentHash ? nodes.get(row.parentHash) : undefined;
    // Revocation cascades: the highest revoked record above or at a node names it. So does a hold.
    const revokedBy = row.hash === hash ? aboveRevoked : (parent?.revoked_by ?? (row.revokedAt ? row.hash : null));
    const held = heldHashes.has(row.hash) || (row.hash === hash ? aboveHeld : row.parentHash !== null && heldNodes.has(row.parentHash));
    if (held) heldNodes.add(row.hash);
    const node: TreeNode = {
      ...delegationView(row, now, revokedBy, held),
      calls_used: row.maxCalls === null ? (uncounted.get(row.hash) ?? 0) : row.callsUsed,
      max_calls: row.maxCalls,
      children: [],
    };
    nodes.set(row.hash, node);
    if (row.hash === hash) root = node;
    else parent?.children.push(node);
  }
  return { tree: root!, count: inTree.length, truncated };
}
