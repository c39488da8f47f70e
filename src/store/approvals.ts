// Queries for approvals of calls. Every transition is one conditional UPDATE
// (WHERE status = the state it leaves), so two nodes racing on the same
// approval serialise on its row and exactly one wins; the spending of an
// approved one happens inside the verify statement (baton_tool_gate).
import { and, asc, count, desc, eq, gt, inArray, lte, ne, or, sql, type SQL } from 'drizzle-orm';
import type { Db } from './db.js';
import { isDeadlineRefusal } from './errors.js';
import { textArray } from './rows.js';
import type { ApprovalStatus, DecisionOutcome } from '../protocol/lists.js';
import { approvals, delegations, grantApprovals, toolCatalogs, trustedRoots, type ApprovalRow } from './schema/index.js';

export type NewApprovalRow = typeof approvals.$inferInsert;

export async function findApproval(db: Db, tenantId: string, id: string): Promise<ApprovalRow | undefined> {
  const [row] = await db
    .select()
    .from(approvals)
    .where(and(eq(approvals.tenantId, tenantId), eq(approvals.id, id)))
    .limit(1);
  return row;
}

/**
 * The approval with this id in whichever tenant holds it: a signed decision
 * arrives without a key. Ids are 128 random bits, so at most one matches; a
 * second match would be ambiguous and counts as none.
 */
export async function findApprovalAnyTenant(db: Db, id: string): Promise<ApprovalRow | undefined> {
  const found = await db.select().from(approvals).where(eq(approvals.id, id)).limit(2);
  return found.length === 1 ? found[0] : undefined;
}

/** The pending or approved approval of one call, if any (at most one: a partial unique index). */
export async function findLiveApproval(db: Db, tenantId: string, binding: string): Promise<ApprovalRow | undefined> {
  const [row] = await db
    .select()
    .from(approvals)
    .where(and(eq(approvals.tenantId, tenantId), eq(approvals.binding, binding), inArray(approvals.status, ['pending', 'approved'])))
    .limit(1);
  return row;
}

/**
 * The latest rejection of this call still inside the approval's lifetime: until then the same call
 * is answered with it, not asked again (an agent must not re-ask until a tired approver says yes).
 */
export async function findStandingRejection(db: Db, tenantId: string, binding: string, now: number): Promise<ApprovalRow | undefined> {
  const [row] = await db
    .select()
    .from(approvals)
    .where(
      and(eq(approvals.tenantId, tenantId), eq(approvals.binding, binding), eq(approvals.status, 'rejected'), gt(approvals.expiresAt, now)),
    )
    .orderBy(desc(approvals.decidedAt))
    .limit(1);
  return row;
}

/**
 * Records as expired every live approval past its deadline (of one call, or all of the tenant).
 * The tenant-wide sweep skips rows another transaction holds: it locked its rows in index order
 * while a verify statement locks the approvals its calls name in theirs, and the two deadlocked
 * (an outside review). What it skips stays live in the table only: every reader and the verify's
 * gate judge the deadline themselves, and the next sweep records it. One call's approval (at most
 * one is live) is a single row, waited for as before.
 */
export async function expireApprovals(db: Db, tenantId: string, now: number, binding?: string): Promise<ApprovalRow[]> {
  const live = and(eq(approvals.tenantId, tenantId), inArray(approvals.status, ['pending', 'approved']), lte(approvals.expiresAt, now));
  if (binding !== undefined)
    return db
      .update(approvals)
      .set({ status: 'expired' })
      .where(and(live, eq(approvals.binding, binding)))
      .returning();
  const free = db.select({ id: approvals.id }).from(approvals).where(live).for('no key update', { skipLocked: true });
  return db
    .update(approvals)
    .set({ status: 'expired' })
    .where(and(eq(approvals.tenantId, tenantId), inArray(approvals.id, free)))
    .returning();
}

/** Records that `key` asked for this approval while it is pending, so that key cannot decide it (SELF_APPROVAL). */
export async function recordAskingKey(db: Db, tenantId: string, id: string, key: string): Promise<void> {
  await db
    .update(approvals)
    .set({ askedByKeys: sql`array_append(${approvals.askedByKeys}, ${key})` })
    .where(
      and(
        eq(approvals.tenantId, tenantId),
        eq(approvals.id, id),
        eq(approvals.status, 'pending'),
        sql`not (${key} = any(${approvals.askedByKeys}))`,
      ),
    );
}

/**
 * Whether the call of an approval whose chain is `chain` can never run, whatever a human decides:
 * a record of the chain is revoked, or past its exp at `now` (RECEIPT_EXPIRED, judged as verify
 * judges it: expired once now > exp). Each record is one primary-key probe. Judged when an
 * approval is approved, and when an ask meets a cap (endApprovalsWhoseChainEnded), never in the
 * counts: an approval ends with its chain (a revocation ends it, its deadline is at most its
 * chain's exp), so the counts read live rows alone.
 */
function chainCannotRun(tenantId: string, chain: SQL, now: SQL | number): SQL {
  return sql`exists (select 1 from ${delegations} where ${delegations.tenantId} = ${tenantId} and ${delegations.hash} = any(${chain}) and (${delegations.revokedAt} is not null or ${delegations.exp} < ${now}))`;
}

/** Whether the root record `rootHash` is issued by a DID the tenant no longer trusts (UNTRUSTED_ROOT at every verify). */
function rootUntrusted(tenantId: string, rootHash: SQL): SQL {
  return sql`exists (select 1 from ${delegations} where ${delegations.tenantId} = ${tenantId} and ${delegations.hash} = ${rootHash} and not exists (select 1 from ${trustedRoots} where ${trustedRoots.tenantId} = ${tenantId} and ${trustedRoots.did} = ${delegations.iss}))`;
}

/**
 * The transaction lock on the approvals under the chain root `root`: asks under one root count and
 * insert one after another (so a cap on the count holds exactly), and a revocation under it ends
 * the approvals through the revoked record after any insert it raced has committed (endApprovalsThrough).
 * A revocation takes it before the record's row lock: an ask locks no record, a verify takes no
 * root lock, and a revocation in several tenants takes them in the tenants' order.
 */
export async function lockApprovalsUnderRoot(db: Db, tenantId: string, root: string): Promise<void> {
  await db.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`approvals under ${tenantId} ${root}`}, 0))`);
}

/**
 * How many approvals wait for a human under the chain root `root` (pending, not past their
 * deadline). An ask counts inside the transaction that inserts, after taking the root's lock
 * (lockApprovalsUnderRoot); a dry run reads without it.
 */
export async function countPendingUnderRoot(
  db: Db,
  tenantId: string,
  root: string,
  now: number,
  catalogVersion: number,
  asHealed = false,
): Promise<number> {
  const [row] = await pendingUnderRootQuery(db, tenantId, root, now, catalogVersion, undefined, asHealed);
  return row?.waiting ?? 0;
}

/**
 * How many approvals wait for a human under `root` with `dr` in their chain: the root's partial
 * index finds the live rows (bounded per catalog version by the service's caps), and the chain is
 * filtered among those.
 */
export async function countPendingThrough(
  db: Db,
  tenantId: string,
  root: string,
  dr: string,
  now: number,
  catalogVersion: number,
  asHealed = false,
): Promise<number> {
  const [row] = await pendingUnderRootQuery(db, tenantId, root, now, catalogVersion, dr, asHealed);
  return row?.waiting ?? 0;
}

/**
 * The count's query: found by the partial index on (tenant, root, deadline), reading only live rows
 * (0032) asked under `catalogVersion`, the current catalog; with `through`, only those whose chain
 * holds that delegation. It reads no delegation: an approval whose chain holds a revoked record was
 * ended by that revocation, and one whose chain expired is past its deadline, which is at most its
 * chain's exp (requestApproval). Judging each row's chain here made every count several times
 * slower, under the root's lock (an outside review). The few a revocation could not end are ended
 * by the first ask that meets a cap, which then counts again (endApprovalsWhoseChainEnded).
 * `asHealed`: count as that ask would after ending them, without ending them (a dry run at a cap),
 * so a dry run answers what the real call would. It leaves out rows another transaction holds too,
 * which that ask skips (SKIP LOCKED): racing a verify or a decision on one of them, a dry run may
 * answer an ask the real call refuses for a moment. It writes nothing either way.
 */
export function pendingUnderRootQuery(
  db: Db,
  tenantId: string,
  root: string,
  now: number,
  catalogVersion: number,
  through?: string,
  asHealed = false,
) {
  return db
    .select({ waiting: count() })
    .from(approvals)
    .where(
      and(
        ...livePendingUnderRoot(tenantId, root, now),
        // Asked under an older tool catalog: it can never run (the call asks again under the current one), so it holds no place.
        eq(approvals.catalogVersion, catalogVersion),
        through === undefined ? undefined : sql`${through} = any(${approvals.drChain})`,
        asHealed ? sql`not ${chainCannotRun(tenantId, sql`${approvals.drChain}`, now)}` : undefined,
      ),
    );
}

/** Pending approvals under `root` still inside their deadline: what the partial index of 0032 holds and finds. */
function livePendingUnderRoot(tenantId: string, root: string, now: number): SQL[] {
  return [
    eq(approvals.tenantId, tenantId),
    sql`(${approvals.drChain})[1] = ${root}`,
    eq(approvals.status, 'pending'),
    sql`${approvals.expiresAt} > ${now}`,
  ];
}

/**
 * Whether any approval under `root` through `dr` is pending inside its deadline: a revocation of a
 * record already revoked takes the root's lock and ends approvals only when one is (a revocation
 * that crashed before ending those a verify held left it). Otherwise an agent re-signing
 * revocations of its own revoked child queued with its siblings' asks for nothing.
 */
export async function hasPendingThrough(db: Db, tenantId: string, root: string, dr: string, now: number): Promise<boolean> {
  const found = await db
    .select({ id: approvals.id })
    .from(approvals)
    .where(and(...livePendingUnderRoot(tenantId, root, now), sql`${dr} = any(${approvals.drChain})`))
    .limit(1);
  return found.length > 0;
}

/**
 * Ends, as expired at `now`, every pending approval under `root` whose chain holds the revoked
 * record `dr`: its call can never run, so it holds no place under the root's caps and reads
 * expired. Called in the revoking transaction, under the root's lock, after the record's mark: an
 * approval inserted through `dr` before the lock is seen here, one inserted after it sees the mark.
 * Rows another transaction holds (a verify statement naming the approval, a decision) are skipped,
 * not waited for: the revocation holds the record's row, and a statement holding one approval may
 * wait on another this update holds. Returns the ids skipped; endHeldApprovalsThrough ends each
 * once this transaction has committed.
 */
export async function endApprovalsThrough(db: Db, tenantId: string, root: string, dr: string, now: number): Promise<string[]> {
  const through = [...livePendingUnderRoot(tenantId, root, now), sql`${dr} = any(${approvals.drChain})`];
  const free = db
    .select({ id: approvals.id })
    .from(approvals)
    .where(and(...through))
    .for('no key update', { skipLocked: true });
  await db
    .update(approvals)
    .set(endedAt(now))
    .where(and(eq(approvals.tenantId, tenantId), inArray(approvals.id, free), ...through));
  const held = await db
    .select({ id: approvals.id })
    .from(approvals)
    .where(and(...through));
  return held.map((r) => r.id);
}

/**
 * Expired as of `now`: the status says so (every reader, count and the verify's gate go by it, on any
 * node's clock), and the deadline shows when, never before its creation (a check of 0005).
 */
const endedAt = (now: number) => ({
  status: 'expired' as const,
  expiresAt: sql`least(${approvals.expiresAt}, greatest(${now}::bigint, ${approvals.createdAt} + 1))`,
});

/**
 * The rows endApprovalsThrough skipped, ended one transaction each once the revocation has
 * committed: each waits for its holder alone, holding no other row meanwhile, and no later than
 * `until` (Date.now() milliseconds: its lock_timeout and statement_timeout). One decided or spent
 * meanwhile is left as it is. Returns the ids not ended because their holder kept them past
 * `until`: they stay pending through the revoked record until an ask meets a cap under their root
 * (endApprovalsWhoseChainEnded) or their deadline passes. Other errors are thrown.
 */
export async function endHeldApprovalsThrough(
  db: Db,
  tenantId: string,
  root: string,
  dr: string,
  now: number,
  ids: readonly string[],
  until: number,
): Promise<string[]> {
  const left: string[] = [];
  for (const id of ids) {
    const waitMs = Math.floor(until - Date.now());
    // lock_timeout 0 would mean no bound at all.
    if (waitMs < 1) {
      left.push(id);
      continue;
    }
    try {
      await db.transaction(async (tx) => {
        // Bounded whether it waits for the row or for a slow database (both refusals: isDeadlineRefusal).
        await tx.execute(
          sql`select set_config('lock_timeout', ${`${waitMs}ms`}, true), set_config('statement_timeout', ${`${waitMs}ms`}, true)`,
        );
        await tx
          .update(approvals)
          .set(endedAt(now))
          .where(and(eq(approvals.id, id), ...livePendingUnderRoot(tenantId, root, now), sql`${dr} = any(${approvals.drChain})`));
      });
    } catch (err) {
      if (!isDeadlineRefusal(err)) throw err;
      left.push(id);
    }
  }
  return left;
}

/**
 * Ends, as expired at `now`, the pending approvals under `root` asked under `catalogVersion` whose
 * chain holds a revoked record or one past its exp (as verify judges it: once now > exp): those a
 * revocation left pending because a holder kept them past its bounded wait, or its node died
 * between its commit and endHeldApprovalsThrough, and those asked before an approval's deadline was
 * bounded by its chain's exp. Called under the root's lock by an ask that met a cap only, so the
 * counts stay plain (pendingUnderRootQuery): the healing depends on no revoking node. Rows another
 * transaction holds are skipped. Returns how many it ended.
 */
export async function endApprovalsWhoseChainEnded(
  db: Db,
  tenantId: string,
  root: string,
  now: number,
  catalogVersion: number,
): Promise<number> {
  const ended = [
    ...livePendingUnderRoot(tenantId, root, now),
    eq(approvals.catalogVersion, catalogVersion),
    chainCannotRun(tenantId, sql`${approvals.drChain}`, now),
  ];
  const free = db
    .select({ id: approvals.id })
    .from(approvals)
    .where(and(...ended))
    .for('no key update', { skipLocked: true });
  const done = await db
    .update(approvals)
    .set(endedAt(now))
    .where(and(eq(approvals.tenantId, tenantId), inArray(approvals.id, free), ...ended))
    .returning({ id: approvals.id });
  return done.length;
}

/** A record of a chain as far as whether a call through it can run: its issuer, its exp, whether it is revoked. */
export interface ChainRecordStanding {
  readonly hash: string;
  readonly iss: string;
  readonly depth: number;
  readonly exp: number | null;
  readonly revoked: boolean;
}

/** The standing of the stored records among `hashes`, keyed by hash (unknown hashes are absent). */
export async function chainStandings(db: Db, tenantId: string, hashes: readonly string[]): Promise<Map<string, ChainRecordStanding>> {
  const unique = [...new Set(hashes)];
  if (unique.length === 0) return new Map();
  const found = await db
    .select({
      hash: delegations.hash,
      iss: delegations.iss,
      depth: delegations.depth,
      exp: delegations.exp,
      revoked: sql<boolean>`${delegations.revokedAt} is not null`,
    })
    .from(delegations)
    .where(and(eq(delegations.tenantId, tenantId), inArray(delegations.hash, unique)));
  return new Map(found.map((r) => [r.hash, r]));
}

/** Inserts a pending approval; false when the call already has a live one (a concurrent request made it). */
export async function insertApproval(db: Db, row: NewApprovalRow): Promise<boolean> {
  const inserted = await db.insert(approvals).values(row).onConflictDoNothing().returning({ id: approvals.id });
  return inserted.length === 1;
}

/**
 * pending -> approved | rejected, only while pending, before the deadline and
 * by someone other than the requester (neither the agent's DID nor the API key
 * whose verify asked). Undefined when the row did not qualify.
 */
export async function decideApprovalRow(
  db: Db,
  tenantId: string,
  id: string,
  outcome: DecisionOutcome,
  d: {
    decidedBy: string;
    /** decidedBy and the keys it was rotated from or into (rotationLineage). */
    decider: readonly string[];
    actor: string;
    reason: string;
    now: number;
    signed?: SignedDecision;
  },
): Promise<ApprovalRow | undefined> {
  const signed = d.signed;
  // The row first, waited for if a verify holds it: the deadline below is then judged after the
  // wait, counted (an outside probe had an approval approved two seconds past its deadline,
  // decided_at before it). Called inside a transaction, which starts before the wait.
  await db
    .select({ id: approvals.id })
    .from(approvals)
    .where(and(eq(approvals.tenantId, tenantId), eq(approvals.id, id)))
    .for('no key update');
  const decidedNow = sql`(${d.now}::bigint + floor(extract(epoch from clock_timestamp() - now()))::bigint)`;
  const [row] = await db
    .update(approvals)
    .set({
      status: outcome,
      decidedBy: d.decidedBy,
      actor: d.actor,
      reason: d.reason,
      decidedAt: d.now,
      ...(signed === undefined ? {} : { decisionJti: signed.jti, decisionJws: signed.jws }),
    })
    .where(
      and(
        eq(approvals.tenantId, tenantId),
        eq(approvals.id, id),
        eq(approvals.status, 'pending'),
        // `now` was read before this transaction waited for the row: the wait is counted.
        sql`${approvals.expiresAt} > ${decidedNow}`,
        sql`${approvals.requestedBy} <> ${d.decidedBy}`,
        // Nor any key of the decider's rotation lineage: a successor is the same holder.
        sql`(${approvals.requestedByKey} is null or not (${approvals.requestedByKey} = any(${textArray(d.decider)})))`,
        sql`not (${approvals.askedByKeys} && ${textArray(d.decider)})`,
        // A call through a revoked or expired delegation, or under a root the tenant no longer trusts, can
        // never run: approving it would record a permission nothing can use. Expiry by the deadline's clock.
        ...(outcome === 'approved'
          ? [
              sql`not ${chainCannotRun(tenantId, sql`${approvals.drChain}`, decidedNow)}`,
              sql`not ${rootUntrusted(tenantId, sql`(${approvals.drChain})[1]`)}`,
              // Nor a call asked under a catalog a newer one replaced: it asks again under that one.
              sql`not exists (select 1 from ${toolCatalogs} where ${toolCatalogs.tenantId} = ${tenantId} and ${toolCatalogs.version} > ${approvals.catalogVersion})`,
            ]
          : []),
        // The signer was listed in this version: no newer one may have replaced the approvers meanwhile.
        ...(signed === undefined
          ? []
          : [
              sql`not exists (select 1 from ${toolCatalogs} where ${toolCatalogs.tenantId} = ${tenantId} and ${toolCatalogs.version} > ${signed.listedIn})`,
            ]),
      ),
    )
    .returning();
  return row;
}

/** A decision signed by an approver DID: its record, its jti, and the tool-document version that listed the signer. */
export interface SignedDecision {
  readonly jws: string;
  readonly jti: string;
  readonly listedIn: number;
}

/**
 * A page of the tenant's approvals, oldest first: those after the approval `after` (by creation
 * time, then id), at most `limit`. Undefined when `after` names no approval of the tenant.
 */
export async function listApprovals(
  db: Db,
  tenantId: string,
  status: ApprovalStatus | undefined,
  after: string | undefined,
  limit: number,
  now: number,
): Promise<ApprovalRow[] | undefined> {
  let from: ApprovalRow | undefined;
  if (after !== undefined) {
    from = await findApproval(db, tenantId, after);
    if (from === undefined) return undefined;
  }
  return approvalsPage(db, tenantId, status, from, limit, now);
}

/**
 * Approvals in `status` as of `now`: a live one past its deadline is expired, recorded or not (the
 * tenant-wide sweep skips a row a verify holds at that moment).
 */
function inStatus(status: ApprovalStatus, now: number) {
  if (status === 'pending' || status === 'approved') return and(eq(approvals.status, status), gt(approvals.expiresAt, now));
  if (status === 'expired')
    return or(eq(approvals.status, 'expired'), and(inArray(approvals.status, ['pending', 'approved']), lte(approvals.expiresAt, now)));
  return eq(approvals.status, status);
}

/**
 * One page of a tenant's approvals, oldest first, after `from`: read in index order (migration
 * 0029), so a page costs its own rows, not a sort of every approval the tenant ever had.
 */
export function approvalsPage(
  db: Db,
  tenantId: string,
  status: ApprovalStatus | undefined,
  from: Pick<ApprovalRow, 'createdAt' | 'id'> | undefined,
  limit: number,
  now: number,
) {
  return db
    .select()
    .from(approvals)
    .where(
      and(
        eq(approvals.tenantId, tenantId),
        ...(status === undefined ? [] : [inStatus(status, now)]),
        ...(from === undefined ? [] : [sql`(${approvals.createdAt}, ${approvals.id}) > (${from.createdAt}, ${from.id})`]),
      ),
    )
    .orderBy(asc(approvals.createdAt), asc(approvals.id))
    .limit(limit);
}

// ---------------------------------------------------------------- grants held for the trifecta

export type GrantRow = typeof grantApprovals.$inferSelect;

export async function insertPendingGrant(db: Db, row: typeof grantApprovals.$inferInsert): Promise<void> {
  await db.insert(grantApprovals).values(row).onConflictDoNothing();
}

export async function findGrant(db: Db, tenantId: string, hash: string): Promise<GrantRow | undefined> {
  const [row] = await db
    .select()
    .from(grantApprovals)
    .where(and(eq(grantApprovals.tenantId, tenantId), eq(grantApprovals.drHash, hash)))
    .limit(1);
  return row;
}

/** The grants among `hashes` not approved (pending or rejected): the verify statement refuses through each. */
export async function unapprovedGrants(db: Db, tenantId: string, hashes: readonly string[]): Promise<GrantRow[]> {
  if (hashes.length === 0) return [];
  return db
    .select()
    .from(grantApprovals)
    .where(and(eq(grantApprovals.tenantId, tenantId), inArray(grantApprovals.drHash, [...hashes]), ne(grantApprovals.status, 'approved')));
}

/** A grant of the chain (root first) not approved, nearest the root. */
export async function unapprovedGrantInChain(db: Db, tenantId: string, chain: readonly string[]): Promise<GrantRow | undefined> {
  const rows = await unapprovedGrants(db, tenantId, chain);
  return rows.sort((a, b) => chain.indexOf(a.drHash) - chain.indexOf(b.drHash))[0];
}

/**
 * pending -> approved | rejected, only while pending and by a key other than
 * the one that submitted the held record, and approved only while no record of
 * its chain is revoked or expired and its root is trusted. Undefined when the
 * row did not qualify.
 */
export async function decideGrantRow(
  db: Db,
  tenantId: string,
  hash: string,
  outcome: DecisionOutcome,
  d: { decidedBy: string; decider: readonly string[]; actor: string; reason: string; now: number },
): Promise<GrantRow | undefined> {
  const [row] = await db
    .update(grantApprovals)
    .set({ status: outcome, decidedBy: d.decidedBy, actor: d.actor, reason: d.reason, decidedAt: d.now })
    .where(
      and(
        eq(grantApprovals.tenantId, tenantId),
        eq(grantApprovals.drHash, hash),
        eq(grantApprovals.status, 'pending'),
        // In the UPDATE itself, so no check-then-write gap; NULL (keyless, or held before 0024) refuses no key.
        sql`(${grantApprovals.requestedByKey} is null or not (${grantApprovals.requestedByKey} = any(${textArray(d.decider)})))`,
        // As for a call approval: a delegation whose chain (the record or any ancestor) holds a revoked or
        // expired record, or whose root the tenant no longer trusts, is refused at every verify, so
        // approving it would record a permission nothing can use.
        ...(outcome === 'approved'
          ? [
              sql`not exists (select 1 from ${delegations} held join ${delegations} c on c.tenant_id = held.tenant_id and c.hash = any(held.ancestors || held.hash) where held.tenant_id = ${tenantId} and held.hash = ${grantApprovals.drHash} and (c.revoked_at is not null or c.exp < ${d.now}))`,
              sql`not exists (select 1 from ${delegations} held join ${delegations} r on r.tenant_id = held.tenant_id and r.hash = held.root_hash where held.tenant_id = ${tenantId} and held.hash = ${grantApprovals.drHash} and not exists (select 1 from ${trustedRoots} t where t.tenant_id = r.tenant_id and t.did = r.iss))`,
            ]
          : []),
      ),
    )
    .returning();
  return row;
}

/** A page of the tenant's held grants, by DR hash: those after `after`, at most `limit`. */
export async function listGrants(
  db: Db,
  tenantId: string,
  status: GrantRow['status'] | undefined,
  after: string | undefined,
  limit: number,
): Promise<GrantRow[]> {
  return db
    .select()
    .from(grantApprovals)
    .where(
      and(
        eq(grantApprovals.tenantId, tenantId),
        ...(status === undefined ? [] : [eq(grantApprovals.status, status)]),
        ...(after === undefined ? [] : [gt(grantApprovals.drHash, after)]),
      ),
    )
    .orderBy(asc(grantApprovals.drHash))
    .limit(limit);
}
