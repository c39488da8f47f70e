/**
 * POST /v1/delegations/{hash}/revoke.
 *
 * Two ways in:
 * - an API key: `issue` of the DR's tenant, or an admin key (every tenant
 *   holding the hash), with {confirm: true, reason};
 * - no key: {revocation: <JWS>} signed by the DR's issuer, the root issuer,
 *   or the holder of any ancestor (src/protocol/revocation.ts). The signer
 *   revokes the record itself, so it is revoked in every tenant holding it:
 *   leaving it live in one tenant would let that tenant keep allowing it.
 *
 * The mark and a 'delegation.revoked' service receipt are written in one
 * transaction, which also ends (as expired) every pending approval whose chain
 * holds the record: its call can never run, so it holds no place under its
 * root's cap of waiting approvals (one a verify holds then is ended just after
 * the commit, best effort: see applyRevocation). Descendants need no write: verification
 * checks every DR of a chain and the counting transaction re-reads revocation
 * from the shared database. Revoking again is idempotent: the original revoked_at, reason,
 * revoker and service receipt come back unchanged (a keyless answer carries no
 * service receipt: see revokeWithSignature).
 */
import type { z } from 'zod';
import type {
  RevokedBy as RevokedByShape,
  RevokeResult as RevokeResultShape,
  RevokeWithKeyRequest,
  TenantRevocation as TenantRevocationShape,
} from '../api/delegations.js';
import { decodeBase64url } from '../protocol/base64url.js';
import { BatonError } from '../protocol/errors.js';
import { utf8Decode } from '../protocol/jcs.js';
import { mayRevoke, readRevocation, type RevocationAuthority, type VerifiedRevocation } from '../protocol/revocation.js';
import { endApprovalsThrough, endHeldApprovalsThrough, hasPendingThrough, lockApprovalsUnderRoot } from '../store/approvals.js';
import { transactionBehind, type CommitCheck } from '../store/db.js';
import { findDelegation, tenantsHoldingDelegation } from '../store/delegations.js';
import { firstServiceReceipt } from '../store/service-receipts.js';
import { chainPartiesByTenant, countDescendants, markRevoked, revocationTarget } from '../store/revocations.js';
import { hotPathCacheOf } from './hot-cache.js';
import { recordServiceReceipt } from './service-receipts.js';
import type { AuthContext, ServiceDeps } from './types.js';

export type RevokeWithKey = z.output<typeof RevokeWithKeyRequest>;
export type RevokeResult = z.output<typeof RevokeResultShape>;
type RevokedBy = z.output<typeof RevokedByShape>;
/** One tenant's mark; the answer's `tenants` list it without revoked_by. */
type TenantRevocation = z.output<typeof TenantRevocationShape> & {
  readonly revoked_by: RevokedBy;
  /** Whether revoked_by is the first revoker as recorded (this call, or its service receipt), not a stand-in. */
  readonly revokerRecorded: boolean;
};

function notFound(hash: string, scope: string): BatonError {
  return new BatonError('NOT_FOUND', {
    message: `No delegation record ${hash} is stored${scope}.`,
    suggestion:
      'Check the hash and that the key belongs to the tenant that holds the record. If you hold the record but Baton has not stored it, submit it first (POST /v1/delegations, no key needed), then revoke it by hash.',
  });
}

/** Revocation with an `issue` key (its tenant) or an admin key (every tenant holding the hash). */
export async function revokeWithKey(
  deps: ServiceDeps,
  auth: AuthContext,
  hash: string,
  body: RevokeWithKey,
  gate: CommitCheck | undefined,
): Promise<RevokeResult> {
  const db = deps.store.db;
  const reason = body.reason.trim();
  if (auth.tenantId !== null) {
    if (!(await findDelegation(db, auth.tenantId, hash))) throw notFound(hash, ' for this tenant');
    const [r] = await applyRevocation(deps, [auth.tenantId], hash, reason, { kind: 'api_key', id: auth.keyId }, {}, gate);
    return { ...summary(hash, r!), tenant_id: r!.tenant_id };
  }
  const tenants = [...new Set(await tenantsHoldingDelegation(db, hash))].sort();
  if (tenants.length === 0) throw notFound(hash, ' in any tenant');
  const results = await applyRevocation(deps, tenants, hash, reason, { kind: 'admin', id: auth.keyId }, {}, gate);
  return {
    ...summary(hash, results[0]!),
    tenant_id: results[0]!.tenant_id,
    tenants: results.map(({ revoked_by: _unused, revokerRecorded: _internal, ...rest }) => rest),
  };
}

/**
 * Revocation by a signed revocation record, without an API key.
 *
 * The caller is known only by the signature, so until it proves a part in the
 * DR's chain the answer must not depend on what is stored: a signer who may
 * not revoke gets exactly the answer of an unknown hash. The one exception is
 * the DR's own holder (its aud signed), who is told why a holder cannot
 * revoke the grant it received. The answer names no tenant: no tenant id and
 * no service receipt (its signed claims name the tenant); a key of the tenant reads it.
 */
export async function revokeWithSignature(
  deps: ServiceDeps,
  hash: string,
  jws: string,
  gate: CommitCheck | undefined,
): Promise<RevokeResult> {
  const db = deps.store.db;
  const rev: VerifiedRevocation = readRevocation(jws, { target: hash, now: deps.now(), clockSkewSeconds: deps.config.clockSkewSeconds });
  const iss = rev.payload.iss;
  const chains = await chainPartiesByTenant(db, hash);
  const tenants = [...chains.keys()].sort();
  let as: Extract<RevocationAuthority, { may: true }>['as'] | undefined;
  for (const tenantId of tenants) {
    // A DR's ancestry is hash-linked, so every tenant holds the same chain; each is checked anyway.
    const chain = chains.get(tenantId)!;
    const authority = mayRevoke(iss, chain);
    if (!authority.may) {
      if (chain[chain.length - 1]!.aud !== iss) throw noRevocableRecord(hash);
      throw new BatonError('FORBIDDEN', {
        message: `The revocation record is signed by ${iss}, who may not revoke ${hash}. ${authority.reason}`,
        suggestion: 'Ask the issuer of the delegation you hold to revoke it.',
        details: { iss, target: hash },
      });
    }
    as ??= authority.as;
  }
  if (as === undefined) throw noRevocableRecord(hash);
  const results = await applyRevocation(
    deps,
    tenants,
    hash,
    rev.payload.reason?.trim() ?? null,
    { kind: 'did', id: iss },
    {
      revocation: { hash: rev.hash, jti: rev.payload.jti, iat: rev.payload.iat, signer_role: as },
    },
    gate,
  );
  return { ...keylessView(summary(hash, results[0]!), results[0]!.revokerRecorded), service_receipt: null };
}

/**
 * What a keyless revoker learns of a revocation made before it: that the record is revoked, when,
 * and by whom when that was a chain party's signature (a DID of the chain, with the reason it
 * signed). A revocation made with a key carries the tenant's own words and key id: the answer says
 * only that a key of the tenant (or the operator) revoked it. When the first revoker cannot be read
 * back, the stored reason may be a key holder's words, so it is withheld too.
 */
function keylessView(r: RevokeResult, revokerRecorded: boolean): RevokeResult {
  if (r.revoked_by.kind === 'did' && revokerRecorded) return r;
  return { ...r, reason: null, revoked_by: { kind: r.revoked_by.kind } };
}

/** The one answer for an unknown hash and for a signer with no part in its chain: nothing in it comes from the store. */
function noRevocableRecord(hash: string): BatonError {
  return new BatonError('NOT_FOUND', {
    message: `No delegation record ${hash} is stored that the signer of this revocation record may revoke.`,
    suggestion:
      'Check the hash, and have the issuer of the delegation, the root issuer or the holder of one of its ancestors sign the revocation record. A record Baton has not stored is submitted first (POST /v1/delegations, no key needed).',
  });
}

function summary(hash: string, r: TenantRevocation): RevokeResult {
  return {
    hash,
    status: 'revoked',
    revoked_at: r.revoked_at,
    reason: r.reason,
    revoked_by: r.revoked_by,
    descendants: r.descendants,
    service_receipt: r.service_receipt,
    already_revoked: r.already_revoked,
  };
}

/**
 * Marks the DR revoked in each tenant, ends the pending approvals through it and signs a service
 * receipt for each new mark, all in one transaction. An approval a verify or a decision holds at
 * that moment is ended once the transaction has committed (endHeldApprovalsThrough), best effort:
 * the revocation has committed, so that pass never fails its answer nor waits past its bound; what
 * it leaves is ended by the first ask that meets its root's cap (pendingLimitFor).
 */
async function applyRevocation(
  deps: ServiceDeps,
  tenants: readonly string[],
  hash: string,
  reason: string | null,
  revokedBy: RevokedBy,
  extra: Record<string, unknown>,
  gate: CommitCheck | undefined,
): Promise<TenantRevocation[]> {
  const now = deps.now();
  const startedAt = Date.now();
  const held: { tenantId: string; root: string; ids: string[] }[] = [];
  const results = await transactionBehind(deps.store.db, gate, async (tx) => {
    const out: TenantRevocation[] = [];
    // In the tenants' order (both callers sort them): the root locks of two revocations of one hash
    // are taken in one order.
    for (const tenantId of tenants) {
      const target = await revocationTarget(tx, tenantId, hash);
      if (!target) throw notFound(hash, ' for this tenant');
      // An approval never outlives its call's chain: those through this record end now, so a revoked
      // runaway agent's approvals free their places for its siblings at once (an outside review).
      // Revoked already: only when some are still pending (a crash or a holder left them), so an
      // agent re-signing revocations of its own revoked child does not queue with its siblings' asks.
      const endsApprovals = !target.revoked || (await hasPendingThrough(tx, tenantId, target.rootHash, hash, now));
      // The root's lock before the record's row lock: holding the record while queued for the root
      // held up every verify through it and its descendants (an outside review). An ask that raced
      // this revocation has committed its approval (ended below), or will read the mark and open
      // none (requestApproval).
      if (endsApprovals) await lockApprovalsUnderRoot(tx, tenantId, target.rootHash);
      const mark = await markRevoked(tx, tenantId, hash, reason);
      if (!mark) throw notFound(hash, ' for this tenant');
      if (endsApprovals) {
        const skipped = await endApprovalsThrough(tx, tenantId, target.rootHash, hash, now);
        if (skipped.length > 0) held.push({ tenantId, root: target.rootHash, ids: skipped });
      }
      const descendants = await countDescendants(tx, tenantId, hash);
      const revokedAt = mark.revokedAt.toISOString();
      const serviceReceipt = mark.newly
        ? await recordServiceReceipt(tx, deps.signer, {
            tenantId,
            kind: 'delegation.revoked',
            subject: hash,
            now,
            data: { hash, reason: mark.reason, revoked_at: revokedAt, revoked_by: { ...revokedBy }, descendants, ...extra },
          })
        : ((await firstServiceReceipt(tx, tenantId, hash, 'delegation.revoked')) ?? null);
      // Who revoked first is kept in the original service receipt; the row has no column for it.
      const firstRevoker = mark.newly ? revokedBy : serviceReceipt && revokerInServiceReceipt(serviceReceipt.jws);
      out.push({
        tenant_id: tenantId,
        revoked_at: revokedAt,
        reason: mark.reason,
        revoked_by: firstRevoker ?? revokedBy,
        revokerRecorded: Boolean(firstRevoker),
        descendants,
        service_receipt: serviceReceipt,
        already_revoked: !mark.newly,
      });
    }
    return out;
  });
  // This node's verifies refuse the record from now on without a stale round (other nodes learn
  // it from their statements: the denial statement re-checks revocation too).
  const hotPath = hotPathCacheOf(deps);
  for (const r of results) hotPath.forgetDelegation(r.tenant_id, hash);
  await endHeldApprovals(deps, hash, now, held, heldApprovalsUntil(deps, startedAt));
  for (const r of results.filter((x) => !x.already_revoked)) {
    deps.log.info('delegation revoked', {
      tenant_id: r.tenant_id,
      hash,
      by: revokedBy.kind,
      ...(revokedBy.id === undefined ? {} : { by_id: revokedBy.id }),
      descendants: r.descendants,
    });
  }
  return results;
}

/**
 * Until when (Date.now() milliseconds) the pass after the commit may wait for the approvals a
 * verify or a decision held: a verify holds one for at most its deadline, and the answer must go
 * out well inside the request's write deadline, counted from before the request reached this
 * handler, so no later than half of it after the revocation began (`startedAt`).
 */
function heldApprovalsUntil(deps: ServiceDeps, startedAt: number): number {
  return Math.min(Date.now() + deps.config.verifyDeadlineMs, startedAt + deps.config.writeDeadlineMs / 2);
}

/**
 * Ends the approvals the revoking transaction skipped (endHeldApprovalsThrough), waiting until
 * `until` at most. The revocation has committed: a failure here is logged, never answered. What is
 * left stays pending through the revoked record, unable to be approved or spent, until an ask under
 * its root meets the cap and ends it (pendingLimitFor) or its deadline passes.
 */
async function endHeldApprovals(
  deps: ServiceDeps,
  hash: string,
  now: number,
  held: readonly { tenantId: string; root: string; ids: readonly string[] }[],
  until: number,
): Promise<void> {
  for (const h of held) {
    let left: readonly string[];
    let error: string | undefined;
    try {
      left = await endHeldApprovalsThrough(deps.store.db, h.tenantId, h.root, hash, now, h.ids, until);
    } catch (err) {
      left = h.ids;
      error = err instanceof Error ? err.message : String(err);
    }
    if (left.length === 0) continue;
    deps.log.warn('approvals through a revoked delegation left pending', {
      tenant_id: h.tenantId,
      hash,
      approval_ids: left,
      ...(error === undefined ? { why: 'held past the wait' } : { error }),
      healed_by: 'the next ask under the root that meets its cap',
    });
  }
}

/** data.revoked_by of a 'delegation.revoked' service receipt the service signed itself. */
function revokerInServiceReceipt(jws: string): RevokedBy | null {
  try {
    const payload = JSON.parse(utf8Decode(decodeBase64url(jws.split('.')[1] ?? '', 'service receipt payload'))) as {
      data?: { revoked_by?: unknown };
    };
    const by = payload.data?.revoked_by as { kind?: unknown; id?: unknown } | undefined;
    if ((by?.kind === 'api_key' || by?.kind === 'admin' || by?.kind === 'did') && typeof by.id === 'string')
      return { kind: by.kind, id: by.id };
  } catch {
    /* not readable: fall back */
  }
  return null;
}
