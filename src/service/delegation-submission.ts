/**
 * Submitting delegation records (POST /v1/delegations, custodial issuance, and
 * chains embedded in a verify): a service-level module, so that handlers call
 * it instead of one another.
 *
 * Submission runs the same pipeline as verification (verifyDelegations) over
 * the stored ancestors plus the submitted records, so a DR is stored only if
 * the chain it extends would verify: trusted root, linked hand-offs, valid
 * signatures, attenuation and time nesting, live and unrevoked parents.
 */
import {
  decodeDelegation,
  RequestDelegationCache,
  verifyDelegationSegment,
  verifyDelegations,
  type DelegationsDecision,
  type VerifiedDelegation,
} from '../protocol/chain.js';
import { BatonError, type ErrorCode, type Violation } from '../protocol/errors.js';
import { SubmissionRefusal } from './error-status.js';
import { transactionBehind, type CommitCheck, type Db } from '../store/db.js';
import {
  delegationsByHash,
  findDelegation,
  firstRevokedLocked,
  holdersOfDelegation,
  insertDelegation,
  jtisTakenByOthers,
  storedChainTo,
  tenantsTrustingRoot,
  trustedRootsOf,
} from '../store/delegations.js';
import { firstServiceReceipt } from '../store/service-receipts.js';
import type { Delegation } from '../store/schema/index.js';
import { recordServiceReceipt } from './service-receipts.js';
import type { ServiceDeps } from './types.js';
import { trifectaAtIssuance } from './tool-grants.js';
import type { Policy } from '../protocol/policy.js';
import { delegationView, heldAlongChain, type DelegationView, type ServiceReceiptView } from './delegations.handlers.js';

function refusal(code: ErrorCode, message: string, violations: readonly Violation[], details: Record<string, unknown> = {}): BatonError {
  return new SubmissionRefusal(code, { message, violations, details });
}

/** A record of the chain (dr_index counted from its root) is revoked: nothing can extend it. */
function revokedInSubmission(hash: string, index: number, storedAncestors: number): BatonError {
  return refusal(
    'RECEIPT_REVOKED',
    `Delegation record ${hash} has been revoked; nothing can extend it.`,
    [{ code: 'RECEIPT_REVOKED', dr_index: index, dr_hash: hash, field: 'status', required: 'active', actual: 'revoked' }],
    // As refusalFrom says it: violation dr_index counts from the root; the submitted records start here.
    { submitted_from_index: storedAncestors },
  );
}

function refusalFrom(decision: Extract<DelegationsDecision, { valid: false }>, storedAncestors: number): BatonError {
  // Indexes in the messages are the verified chain's too: say where the request's records start.
  const counted =
    storedAncestors === 0 ? '' : ` Indexes count from the stored chain's root: the first record sent is receipts[${storedAncestors}] here.`;
  return refusal(decision.error.code, `${decision.error.message}${counted}`, decision.violations, {
    // Violation dr_index counts from the root; the submitted records start here.
    submitted_from_index: storedAncestors,
  });
}

// ---------------------------------------------------------------- submit

type SubmittedDelegation = DelegationView & { readonly jws: string; readonly service_receipt: ServiceReceiptView | null };

/** What a keyless answer shows of a record: nothing stored about it (see keylessView). */
export type KeylessSubmittedDelegation = Omit<
  SubmittedDelegation,
  'status' | 'revoked_at' | 'revoked_by' | 'created_at' | 'service_receipt' | 'depth' | 'root_hash'
> & {
  readonly service_receipt: null;
  /** Absent when the submitted records do not start at a root: then only the store knows them. */
  readonly depth?: number;
  readonly root_hash?: string;
};

export interface SubmitResult {
  /** True when at least one record was newly stored (201), false when all were known (200). */
  readonly created: boolean;
  /** With an API key only: a keyless answer never names the tenant that holds a record. */
  readonly tenant_id?: string;
  readonly delegations: readonly (SubmittedDelegation | KeylessSubmittedDelegation)[];
}

/** What submitDelegations checked and will store. */
export interface CheckedSubmission {
  readonly tenantId: string;
  readonly now: number;
  /** The stored chain above the first submitted record, root first. */
  readonly ancestors: readonly Delegation[];
  readonly submitted: readonly VerifiedDelegation[];
  /** Keyless, and every record already stored: their rows. Nothing to write, and nothing judged against the store (rule 4). */
  readonly replayed: ReadonlyMap<string, Delegation> | null;
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
 *    learn whether some tenant trusts that key (not which one);
 * 4. re-submitted records that are all stored already are answered as
 *    stored, without their state (see keylessView).
 */
export async function checkSubmission(
  deps: ServiceDeps,
  callerTenant: string | null,
  jwsList: readonly string[],
): Promise<CheckedSubmission> {
  const db = deps.store.db;
  const now = deps.now();
  // What this request verifies is kept in its own scratch, and enters the process-wide cache only
  // once the whole chain passed under a root the tenant trusts (keepIn below): records judged on
  // their own (rule 1) may be anyone's, signed under throwaway keys (an outside probe filled the
  // cache with 400 MB of refused chains). Their signatures are still checked once in the request.
  const scratch = new RequestDelegationCache(deps.drCache);
  const verifyOptions = { now, maxDepth: deps.config.maxChainDepth, cache: scratch, allowNotYetValid: true } as const;
  let own: readonly VerifiedDelegation[] | undefined;
  if (callerTenant === null) {
    const segment = verifyDelegationSegment(jwsList, verifyOptions);
    if (!segment.valid) throw refusalFrom(segment, 0);
    own = segment.delegations;
  }
  let first: VerifiedDelegation;
  try {
    first = decodeDelegation(jwsList[0]!, 0, scratch);
  } catch (e) {
    if (e instanceof BatonError)
      throw refusal(e.code, e.message, [{ code: e.code, dr_index: 0, field: 'receipts[0]', message: e.message }]);
    throw e;
  }
  // With an API key the tenant is the key's, whose records the caller may read anyway.
  const tenantId = callerTenant ?? (await keylessTenant(db, first));
  // The submitted records already stored: read here without a key (rule 4), after verifying with one.
  const storedOf = (hashes: readonly string[]) => delegationsByHash(db, tenantId, hashes);
  const ownStored = own && (await storedOf(own.map((d) => d.hash)));
  // 4. records that are all stored already prove nothing (they travel in every bundle), and
  //    nothing will be written: they are not judged against the store again, so the answer
  //    cannot tell a revoked or expired chain from a live one.
  if (own && ownStored && own.every((d) => ownStored.has(d.hash)))
    return { tenantId, now, ancestors: [], submitted: own, replayed: ownStored };
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
  const known = ownStored ?? (await storedOf(submitted.map((d) => d.hash)));
  const revokedSubmitted = submitted.findIndex((d) => known.get(d.hash)?.revokedAt != null);
  if (revokedSubmitted >= 0)
    throw revokedInSubmission(submitted[revokedSubmitted]!.hash, ancestors.length + revokedSubmitted, ancestors.length);
  refuseTakenJtis(submitted, await jtisTakenByOthers(db, tenantId, submitted));
  scratch.keepIn(decision.delegations);
  return { tenantId, now, ancestors, submitted, replayed: null };
}

/**
 * Stores a root-to-leaf list of signed DRs. The first record is either a
 * root trusted by the tenant, or a sub-DR whose parent is already stored.
 * A keyless answer names no tenant: no tenant_id, and no acceptance
 * service receipts, whose signed claims name the tenant. A key of the tenant reads them.
 */
export async function submitDelegations(
  deps: ServiceDeps,
  callerTenant: string | null,
  jwsList: readonly string[],
  /** The API key submitting (null keyless): a trifecta grant held here may not be approved by it. */
  submittedByKey: string | null,
  /** The write request's (deadline.ts); none when the caller bounds its own wait (a verify storing its records). */
  gate?: CommitCheck,
): Promise<SubmitResult> {
  const { tenantId, now, ancestors, submitted, replayed } = await checkSubmission(deps, callerTenant, jwsList);
  if (replayed) {
    // Records all stored, sent without a key, prove nothing: the answer says only what they say.
    // Where they sit in the stored chain (depth, root) is the store's unless they start at a root.
    const fromRoot = submitted[0]?.payload.prev_dr_hash == null;
    const views = submitted.map((d, i) => {
      const row = replayed.get(d.hash)!; // every submitted hash is in it (checkSubmission)
      const {
        depth: _depth,
        root_hash: _root,
        ...view
      } = keylessView({ ...delegationView(row, now, null, false), jws: row.jws, service_receipt: null });
      return fromRoot ? { ...view, depth: i, root_hash: submitted[0]!.hash } : view;
    });
    return { created: false, delegations: views };
  }
  // A DR whose tools together form the lethal trifecta is stored held for a human.
  const trifecta = await trifectaAtIssuance(
    deps,
    tenantId,
    ancestors.map((a) => a.policy as Policy),
    submittedByKey,
  );
  const result = await transactionBehind(deps.store.db, gate, async (tx) => {
    // Every row lock and insert comes first, before the tenant's catalog lock (trifecta.pin below): a
    // submission that waits here (on a revocation's row lock, on a concurrent insert of the same record)
    // holds no catalog lock, so a publish does not queue behind it, nor every later submission of the
    // tenant behind the publish, each holding a pool connection.
    // Checked above outside this transaction: a revocation committed since would otherwise see no
    // descendant here and answer first, and these records be accepted under it after its answer.
    const chainSoFar = [...ancestors.map((a) => a.hash), ...submitted.map((d) => d.hash)];
    const { revoked, locked } = await firstRevokedLocked(tx, tenantId, chainSoFar);
    if (revoked !== null) throw revokedInSubmission(revoked, chainSoFar.indexOf(revoked), ancestors.length);
    let parent: Delegation | null = ancestors[ancestors.length - 1] ?? null;
    const written: { dr: VerifiedDelegation; row: Delegation; inserted: boolean }[] = [];
    for (const dr of submitted) {
      const inserted = await insertDelegation(tx, tenantId, dr, parent);
      // Stored by another request meanwhile (unseen, so unlocked, above): locked and read now, so a
      // revocation of it waits for the records below it here, or is seen.
      if (!inserted && !locked.has(dr.hash) && (await firstRevokedLocked(tx, tenantId, [dr.hash])).revoked !== null)
        throw revokedInSubmission(dr.hash, chainSoFar.indexOf(dr.hash), ancestors.length);
      const row = await findDelegation(tx, tenantId, dr.hash);
      // Checked above; a DR stored meanwhile by a concurrent request still lands here.
      if (!row) throw jtiConflict(dr);
      written.push({ dr, row, inserted });
      parent = row;
    }
    // Then the catalog lock, held to the commit, so no catalog is published between the trifecta
    // judgement and this commit (a publish waits for it, or it for the publish and judges under the
    // new version). Nothing below waits on a row another transaction may hold.
    await trifecta.pin(tx);
    let created = false;
    const stored: { row: Delegation; serviceReceipt: ServiceReceiptView | null }[] = [];
    for (const { dr, row, inserted } of written) {
      let serviceReceipt: ServiceReceiptView | null;
      if (inserted) {
        created = true;
        serviceReceipt = await recordServiceReceipt(tx, deps.signer, {
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
        serviceReceipt = (await firstServiceReceipt(tx, tenantId, dr.hash, 'delegation.accepted')) ?? null;
      }
      await trifecta.next(tx, { hash: dr.hash, policy: dr.payload.policy }, inserted);
      stored.push({ row, serviceReceipt });
    }
    // Held (by trifecta.next above, or before): a keyed answer shows it; a keyless one shows no status.
    const chain = [...ancestors, ...stored.map((s) => s.row)].map((r) => r.hash);
    const held = callerTenant === null ? [] : (await heldAlongChain(tx, tenantId, chain)).slice(ancestors.length);
    const out: SubmittedDelegation[] = stored.map(({ row, serviceReceipt }, i) => ({
      ...delegationView(row, now, null, held[i] ?? false),
      jws: row.jws,
      service_receipt: serviceReceipt,
    }));
    return { created, delegations: out };
  });
  if (callerTenant === null) {
    return { created: result.created, delegations: result.delegations.map(keylessView) };
  }
  return { created: result.created, tenant_id: tenantId, delegations: result.delegations };
}

/**
 * A record as a keyless answer shows it: what the submitted records and their chain say, none of
 * what is stored about it (status, revocation, when it was stored), and no service receipt (whose
 * claims name the tenant). Holding a record's JWS proves nothing: records travel in every bundle.
 */
function keylessView(d: SubmittedDelegation): KeylessSubmittedDelegation {
  const { status: _status, revoked_at: _revokedAt, revoked_by: _revokedBy, created_at: _createdAt, ...fromTheChain } = d;
  return { ...fromTheChain, service_receipt: null };
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
