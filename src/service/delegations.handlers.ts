/**
 * Issuance and reading of delegation records.
 *
 * Submission runs the same pipeline as verification (verifyDelegations) over
 * the stored ancestors plus the submitted records, so a DR is stored only if
 * the chain it extends would verify: trusted root, linked hand-offs, valid
 * signatures, attenuation and time nesting, live and unrevoked parents.
 */
import { trifectaAtIssuance } from './tool-grants.js';
import type { Policy } from '../protocol/policy.js';
import {
  decodeDelegation,
  verifyDelegationSegment,
  verifyDelegations,
  type DelegationsDecision,
  type VerifiedDelegation,
} from '../protocol/chain.js';
import { BatonError, type ErrorCode, type Violation } from '../protocol/errors.js';
import { microsToUsd, saturatingMicros, type Micros } from '../protocol/money.js';
import type { Db } from '../store/db.js';
import {
  delegationsByHash,
  findDelegation,
  holdersOfDelegation,
  insertDelegation,
  jtisTakenByOthers,
  revokedInChain,
  spendRollup,
  storedChainTo,
  subtreeOf,
  tenantsTrustingRoot,
  trustedRootsOf,
} from '../store/delegations.js';
import { firstReceipt } from '../store/receipts.js';
import type { Delegation } from '../store/schema/index.js';
import { recordReceipt } from './receipts.js';
import type { ServiceDeps } from './types.js';

/** Shape problems are malformed requests (400); everything else is a refusal (422). */
const SHAPE_CODES: ReadonlySet<ErrorCode> = new Set([
  'MALFORMED_JWS',
  'NON_CANONICAL_JSON',
  'NUMBER_OUT_OF_RANGE',
  'INVALID_FIELD',
  'UNSUPPORTED_ALG',
]);

function refusal(code: ErrorCode, message: string, violations: readonly Violation[], details: Record<string, unknown> = {}): BatonError {
  return new BatonError(code, { message, violations, details, status: SHAPE_CODES.has(code) ? 400 : 422 });
}

function refusalFrom(decision: Extract<DelegationsDecision, { valid: false }>, storedAncestors: number): BatonError {
  return refusal(decision.error.code, decision.error.message, decision.violations, {
    // Violation dr_index counts from the root; the submitted records start here.
    submitted_from_index: storedAncestors,
  });
}

export interface ServiceReceiptView {
  readonly id: number;
  readonly kid: string;
  readonly jws: string;
}

export type DelegationStatus = 'active' | 'revoked' | 'expired' | 'not_yet_valid';

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

export function delegationStatus(row: Delegation, now: number, revokedBy: string | null): DelegationStatus {
  if (revokedBy) return 'revoked';
  if (row.exp !== null && now > row.exp) return 'expired';
  if (now < row.nbf) return 'not_yet_valid';
  return 'active';
}

export function delegationView(row: Delegation, now: number, revokedBy: string | null): DelegationView {
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
    status: delegationStatus(row, now, revokedBy),
    revoked_at: row.revokedAt?.toISOString() ?? null,
    revoked_by: revokedBy,
    created_at: row.createdAt.toISOString(),
  };
}

// ---------------------------------------------------------------- submit

export interface SubmitResult {
  /** True when at least one record was newly stored (201), false when all were known (200). */
  readonly created: boolean;
  /** With an API key only: a keyless answer never names the tenant that holds a record. */
  readonly tenant_id?: string;
  readonly delegations: readonly (DelegationView & { readonly jws: string; readonly receipt: ServiceReceiptView | null })[];
}

/** What submitDelegations checked and will store. */
export interface CheckedSubmission {
  readonly tenantId: string;
  readonly now: number;
  /** The stored chain above the first submitted record, root first. */
  readonly ancestors: readonly Delegation[];
  readonly submitted: readonly VerifiedDelegation[];
}

/**
 * Every check submitDelegations makes before it writes, read-only: it
 * throws the same refusal the submission would. A dry run of /verify calls
 * it so that it refuses whatever storing the embedded records would refuse.
 *
 * Without an API key the caller is known only by what it signed, so the
 * answer may depend on stored records only once its signatures prove it
 * holds a DR of the chain:
 * 1. the submitted records are judged on their own first (shape, signatures
 *    by their own iss, linkage and attenuation between them), before any
 *    lookup; that answer echoes only what was sent;
 * 2. a stored parent counts only when the first record is signed by the
 *    parent's holder (its aud). An unknown hash and a hash held by someone
 *    else get the same answer;
 * 3. a root's verified signature proves its issuer key, so that caller may
 *    learn whether some tenant trusts that key (not which one).
 */
export async function checkSubmission(
  deps: ServiceDeps,
  callerTenant: string | null,
  jwsList: readonly string[],
): Promise<CheckedSubmission> {
  const db = deps.store.db;
  const now = deps.now();
  const verifyOptions = { now, maxDepth: deps.config.maxChainDepth, cache: deps.drCache, allowNotYetValid: true } as const;
  if (callerTenant === null) {
    const own = verifyDelegationSegment(jwsList, verifyOptions);
    if (!own.valid) throw refusalFrom(own, 0);
  }
  let first: VerifiedDelegation;
  try {
    first = decodeDelegation(jwsList[0]!, 0, deps.drCache);
  } catch (e) {
    if (e instanceof BatonError)
      throw refusal(e.code, e.message, [{ code: e.code, dr_index: 0, field: 'receipts[0]', message: e.message }]);
    throw e;
  }
  // With an API key the tenant is the key's, whose records the caller may read anyway.
  const tenantId = callerTenant ?? (await keylessTenant(db, first));
  const parentHash = first.payload.prev_dr_hash ?? null;
  const ancestors = parentHash ? await storedChainTo(db, tenantId, parentHash) : [];
  if (parentHash && ancestors.length === 0) throw parentNotHeld(first, parentHash, true);
  const fullChain = [...ancestors.map((a) => a.jws), ...jwsList];

  const stored = await delegationsByHash(db, tenantId, [...ancestors.map((a) => a.hash)]);
  const roots = await trustedRootsOf(db, tenantId);
  const decision = verifyDelegations(fullChain, {
    ...verifyOptions,
    trustedRoots: roots,
    isRevoked: (h) => stored.get(h)?.revokedAt != null,
  });
  if (!decision.valid) throw refusalFrom(decision, ancestors.length);

  // Records already stored in the submitted list may be revoked too.
  const submitted = decision.delegations.slice(ancestors.length);
  const known = await delegationsByHash(
    db,
    tenantId,
    submitted.map((d) => d.hash),
  );
  const revokedSubmitted = submitted.findIndex((d) => known.get(d.hash)?.revokedAt != null);
  if (revokedSubmitted >= 0) {
    const d = submitted[revokedSubmitted]!;
    const index = ancestors.length + revokedSubmitted;
    throw refusal('RECEIPT_REVOKED', `Delegation record ${d.hash} has been revoked; nothing can extend it.`, [
      { code: 'RECEIPT_REVOKED', dr_index: index, dr_hash: d.hash, field: 'status', required: 'active', actual: 'revoked' },
    ]);
  }
  refuseTakenJtis(submitted, await jtisTakenByOthers(db, tenantId, submitted));
  return { tenantId, now, ancestors, submitted };
}

/**
 * Stores a root-to-leaf list of signed DRs. The first record is either a
 * root trusted by the tenant, or a sub-DR whose parent is already stored.
 * A keyless answer names no tenant: no tenant_id, and no acceptance
 * receipts, whose signed claims name the tenant. A key of the tenant reads them.
 */
export async function submitDelegations(deps: ServiceDeps, callerTenant: string | null, jwsList: readonly string[]): Promise<SubmitResult> {
  const { tenantId, now, ancestors, submitted } = await checkSubmission(deps, callerTenant, jwsList);
  // Issue 13: a DR whose tools together form the lethal trifecta is stored pending a human.
  const trifecta = await trifectaAtIssuance(
    deps,
    tenantId,
    ancestors.map((a) => a.policy as Policy),
  );
  const result = await deps.store.db.transaction(async (tx) => {
    let parent: Delegation | null = ancestors[ancestors.length - 1] ?? null;
    let created = false;
    const out: SubmitResult['delegations'][number][] = [];
    for (const dr of submitted) {
      const inserted = await insertDelegation(tx, tenantId, dr, parent);
      const row = await findDelegation(tx, tenantId, dr.hash);
      // Checked above; a DR stored meanwhile by a concurrent request still lands here.
      if (!row) throw jtiConflict(dr);
      let receipt: ServiceReceiptView | null;
      if (inserted) {
        created = true;
        receipt = await recordReceipt(tx, deps.signer, {
          tenantId,
          kind: 'delegation.accepted',
          subject: dr.hash,
          now,
          data: {
            jti: dr.payload.jti,
            iss: dr.payload.iss,
            aud: dr.payload.aud,
            depth: row.depth,
            parent_hash: row.parentHash,
            root_hash: row.rootHash,
          },
        });
      } else {
        receipt = (await firstReceipt(tx, tenantId, dr.hash, 'delegation.accepted')) ?? null;
      }
      await trifecta.next(tx, { hash: dr.hash, policy: dr.payload.policy }, inserted); // issue 13
      out.push({ ...delegationView(row, now, null), jws: row.jws, receipt });
      parent = row;
    }
    return { created, delegations: out };
  });
  if (callerTenant === null) {
    return { created: result.created, delegations: result.delegations.map((d) => ({ ...d, receipt: null })) };
  }
  return { created: result.created, tenant_id: tenantId, delegations: result.delegations };
}

/** The one answer for a parent that is unknown, or stored but not proven held: nothing in it comes from the store. */
function parentNotHeld(first: VerifiedDelegation, parentHash: string, forTenant: boolean): BatonError {
  return refusal(
    'BUNDLE_INCOMPLETE',
    forTenant
      ? `The parent delegation ${parentHash} is not stored for this tenant; submit the chain from its root.`
      : `No stored delegation record ${parentHash} was granted to ${first.payload.iss}, the issuer of receipts[0]; submit the chain from its root.`,
    [{ code: 'BUNDLE_INCOMPLETE', dr_index: 0, dr_hash: first.hash, field: 'prev_dr_hash', actual: parentHash }],
  );
}

function rootNotTrusted(first: VerifiedDelegation): BatonError {
  return refusal('UNTRUSTED_ROOT', `The root delegation is issued by ${first.payload.iss}, which no tenant trusts.`, [
    { code: 'UNTRUSTED_ROOT', dr_index: 0, dr_hash: first.hash, field: 'iss', actual: first.payload.iss },
  ]);
}

function jtiConflict(dr: VerifiedDelegation): BatonError {
  return new BatonError('CONFLICT', {
    message: `A different delegation record of issuer ${dr.payload.iss} already uses jti ${JSON.stringify(dr.payload.jti)} in this tenant.`,
    suggestion: 'Give every delegation record a fresh jti ("dr:" + a random id).',
    details: { jti: dr.payload.jti, iss: dr.payload.iss, hash: dr.hash },
  });
}

/**
 * Refuses the first record whose (iss, jti) is taken: by a stored DR with
 * another hash, or by an earlier, different record of the same list.
 */
function refuseTakenJtis(submitted: readonly VerifiedDelegation[], takenInStore: ReadonlySet<string>): void {
  const seen = new Map<string, string>();
  for (const dr of submitted) {
    const key = JSON.stringify([dr.payload.iss, dr.payload.jti]);
    const earlier = seen.get(key);
    if (takenInStore.has(dr.hash) || (earlier !== undefined && earlier !== dr.hash)) throw jtiConflict(dr);
    seen.set(key, dr.hash);
  }
}

/**
 * A DR belongs to its root's tenant. Without an API key the tenant follows
 * from the chain: who trusts the root, or who holds a parent granted to the
 * first record's (already verified) issuer. Called only after the submitted
 * records' own signatures verified.
 */
async function keylessTenant(db: Db, first: VerifiedDelegation): Promise<string> {
  const parentHash = first.payload.prev_dr_hash ?? null;
  let candidates: string[];
  if (parentHash) {
    // One query whether the hash is unknown or held by someone else: the filter is in memory.
    const holders = await holdersOfDelegation(db, parentHash);
    candidates = holders.filter((h) => h.aud === first.payload.iss).map((h) => h.tenantId);
    if (candidates.length === 0) throw parentNotHeld(first, parentHash, false);
  } else {
    candidates = await tenantsTrustingRoot(db, first.payload.iss);
    if (candidates.length === 0) throw rootNotTrusted(first);
  }
  if (candidates.length === 1) return candidates[0]!;
  throw new BatonError('UNPROCESSABLE', {
    message: 'More than one tenant could own this delegation record.',
    suggestion: 'Submit it with an API key (issue scope) of the tenant it belongs to.',
  });
}

// ---------------------------------------------------------------- read

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
  /** metered / declared over the invocations that were metered; null before any. */
  readonly calibration: number | null;
  /** Set when metered spend persistently runs above what agents declared. */
  readonly calibration_flag: 'metered_above_declared' | null;
  readonly max_spend_usd: number | null;
  readonly spend_reserved_usd: number | null;
  /** True when an amount above reached the largest one reported exactly and shows that lower bound. */
  readonly amounts_saturated: boolean;
}

/**
 * "Persistently above": at least this many metered invocations, and at
 * least this share of them over their estimate by more than 10%, so one
 * large overrun alone does not flag a DR.
 */
const CALIBRATION_MIN_SAMPLES = 3;
const CALIBRATION_FLAG_SHARE = 0.75;

export async function usageOf(db: Db, tenantId: string, row: Delegation): Promise<UsageView> {
  const r = await spendRollup(db, tenantId, row.hash);
  const reserved = saturatingMicros(row.spendReservedMicros);
  const calibration = r.declared_of_metered_micros > 0 ? r.metered_micros / r.declared_of_metered_micros : null;
  const flagged =
    r.metered_invocations >= CALIBRATION_MIN_SAMPLES && r.over_estimate_invocations >= CALIBRATION_FLAG_SHARE * r.metered_invocations;
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
  return {
    ...delegationView(row, deps.now(), revokedBy),
    jws: row.jws,
    revoked_reason: row.revokedReason,
    usage: await usageOf(db, tenantId, row),
  };
}

/** Root-to-leaf JWS list with service receipts: what `baton verify` re-checks offline. */
export async function chainOfDelegation(deps: ServiceDeps, tenantId: string, hash: string) {
  const db = deps.store.db;
  const chain = await storedChainTo(db, tenantId, hash);
  if (chain.length === 0) throw notFound(hash);
  const now = deps.now();
  const revoked = chain.find((r) => r.revokedAt !== null)?.hash ?? null;
  const records = [];
  let revokedBy: string | null = null;
  for (const row of chain) {
    if (row.hash === revoked) revokedBy = revoked;
    records.push({
      ...delegationView(row, now, revokedBy),
      jws: row.jws,
      receipt: (await firstReceipt(db, tenantId, row.hash, 'delegation.accepted')) ?? null,
    });
  }
  return { hash, root_principal: chain[0]!.iss, receipts: chain.map((r) => r.jws), records };
}

const TREE_LIMIT = 1000;

export interface TreeNode extends DelegationView {
  readonly calls_used: number;
  readonly max_calls: number | null;
  readonly children: TreeNode[];
}

/** The DR and its descendants as a nested tree (at most TREE_LIMIT records). */
export async function treeOfDelegation(deps: ServiceDeps, tenantId: string, hash: string) {
  const db = deps.store.db;
  const top = await findDelegation(db, tenantId, hash);
  if (!top) throw notFound(hash);
  const rowsInTree = await subtreeOf(db, tenantId, hash, TREE_LIMIT + 1);
  const truncated = rowsInTree.length > TREE_LIMIT;
  const now = deps.now();
  const aboveRevoked = await revokedInChain(db, tenantId, top);
  const nodes = new Map<string, TreeNode>();
  let root: TreeNode | undefined;
  for (const row of rowsInTree.slice(0, TREE_LIMIT)) {
    const parent = row.parentHash ? nodes.get(row.parentHash) : undefined;
    // Revocation cascades: the highest revoked record above or at a node names it.
    const revokedBy = row.hash === hash ? aboveRevoked : (parent?.revoked_by ?? (row.revokedAt ? row.hash : null));
    const node: TreeNode = { ...delegationView(row, now, revokedBy), calls_used: row.callsUsed, max_calls: row.maxCalls, children: [] };
    nodes.set(row.hash, node);
    if (row.hash === hash) root = node;
    else parent?.children.push(node);
  }
  return { tree: root!, count: Math.min(rowsInTree.length, TREE_LIMIT), truncated };
}
