/**
 * The log integrator: turns pending service receipts into leaves of their tenants'
 * logs and signs a checkpoint per tenant whose tree grew.
 *
 * Any node may run it; one round at a time runs per database, because each
 * round is one transaction that first takes a transaction-level advisory
 * lock (a node that does not get it skips the round). The lock and every
 * write of the round commit or roll back together, so a crash mid-round
 * leaves the pending rows for the next round and no half-appended tree.
 *
 * Indexes are assigned here, in the order the pending service receipts are read
 * (service receipt id among those committed), never at insert time: a service receipt whose
 * transaction commits late simply joins a later round, after the leaves
 * already indexed, so readers paging by index never skip it.
 */
import type { Hash } from '../protocol/merkle.js';
import type { Store } from '../store/db.js';
import { errorForLog } from '../store/errors.js';
import { appendRound, claimPending, fixLogName, preferIndexes, type NewLeaf, type PendingLeaf } from '../store/log.js';
import type { Logger } from './log.js';
import { appendLeaves, fixedNameRefusal, logOrigin, serviceReceiptLeafHash, signCheckpoint, type TreeEdges } from './log-tree.js';
import type { ServiceSigner } from './signer.js';

/** Service receipts integrated per round at most. */
export const INTEGRATION_BATCH = 5000;

export interface IntegratorDeps {
  readonly store: Store;
  readonly signer: ServiceSigner;
  readonly log: Logger;
  readonly logName: string;
}

export interface IntegrationRound {
  /** False when another node held the lock: this one did nothing. */
  readonly locked: boolean;
  readonly leaves: number;
  /** Tenants whose tree grew. */
  readonly tenants: number;
}

/**
 * Each tenant's right tree edges after the last round this process
 * committed, keyed by the size and root they belong to. A round reuses them
 * only when the log's head is still exactly that tree (no other node, no
 * rolled-back round, changed it), and otherwise reads the edges again.
 */
export type EdgeCache = Map<string, { readonly size: number; readonly rootHex: string; readonly edges: TreeEdges }>;

const hex = (h: Uint8Array) => Buffer.from(h).toString('hex');

/** Tenants whose edges the cache keeps at most (each a few KB); beyond that it starts over. */
const EDGE_CACHE_TENANTS = 1000;

/**
 * One integration round (see the module comment). Round trips: the claim
 * (lock, pending receipts and log heads in one statement), the edges of a
 * tenant not in `cache`, and one statement writing everything.
 */
export async function integrateOnce(
  deps: IntegratorDeps,
  batch = INTEGRATION_BATCH,
  cache: EdgeCache = new Map(),
): Promise<IntegrationRound> {
  const grownEdges: EdgeCache = new Map();
  const round = await deps.store.db.transaction(async (tx) => {
    await preferIndexes(tx);
    const claim = await claimPending(tx, batch);
    if (!claim.locked) return { locked: false, leaves: 0, tenants: 0 };
    if (claim.pending.length === 0) return { locked: true, leaves: 0, tenants: 0 };
    const byTenant = new Map<string, PendingLeaf[]>();
    for (const p of claim.pending) {
      if (p.jws === null) {
        // Only a service receipt removed behind the service's back gets here: it cannot be hashed.
        deps.log.error('a pending log leaf has no receipt; it is dropped from the queue', { receipt_id: p.receiptId, tenant: p.tenantId });
        continue;
      }
      const list = byTenant.get(p.tenantId) ?? [];
      list.push(p);
      byTenant.set(p.tenantId, list);
    }
    // Every checkpoint carries the one name the first checkpoint fixed: a node started under another
    // (two nodes on a new database, each with its own BATON_TLOG_NAME) signs nothing, round after
    // round. A round that signs nothing fixes nothing.
    if (byTenant.size > 0) {
      const fixed = await fixLogName(tx, deps.logName);
      if (fixed !== deps.logName)
        throw new Error(
          `${fixedNameRefusal(deps.logName, fixed)}: this node signs no checkpoint. Restart it with BATON_TLOG_NAME=${fixed}.`,
        );
    }
    const leaves: NewLeaf[] = [];
    const hashes: { tenantId: string; level: number; hashIndex: number; hash: Hash }[] = [];
    const checkpoints: { tenantId: string; treeSize: number; rootHash: Hash; note: string }[] = [];
    for (const [tenantId, list] of byTenant) {
      const head = claim.heads.get(tenantId) ?? { size: 0, rootHex: null };
      const cached = cache.get(tenantId);
      const known = cached && cached.size === head.size && cached.rootHex === head.rootHex ? cached.edges : undefined;
      const leafHashes: Hash[] = list.map((p) => serviceReceiptLeafHash(p.jws!));
      const grown = await appendLeaves(tx, tenantId, head.size, leafHashes, known);
      list.forEach((p, i) => leaves.push({ tenantId, leafIndex: head.size + i, receiptId: p.receiptId, leafHash: leafHashes[i]! }));
      for (const h of grown.hashes) hashes.push({ tenantId, ...h });
      const note = signCheckpoint(deps.signer, logOrigin(deps.logName, tenantId), grown.size, grown.root);
      checkpoints.push({ tenantId, treeSize: grown.size, rootHash: grown.root, note });
      grownEdges.set(tenantId, { size: grown.size, rootHex: hex(grown.root), edges: grown.edges });
    }
    await appendRound(tx, { leaves, hashes, checkpoints, claimed: claim.pending.map((p) => p.receiptId) });
    return { locked: true, leaves: leaves.length, tenants: byTenant.size };
  });
  // Committed: these edges are now the log's.
  if (cache.size + grownEdges.size > EDGE_CACHE_TENANTS) cache.clear();
  for (const [tenantId, e] of grownEdges) cache.set(tenantId, e);
  return round;
}

export interface RunningIntegrator {
  /** Stops scheduling rounds and waits for the one in flight, if any. */
  stop(): Promise<void>;
}

/**
 * The shortest time from the start of one round to the start of the next
 * while leaves keep arriving (never longer than the interval). Each round
 * has a fixed cost (a transaction with its own WAL flush, a claim, a signed
 * checkpoint per tenant): rounds back to back ran about ten a second with a
 * few dozen leaves each, and cost the service about 0.2-0.4 ms of CPU per
 * verify at 400 verifies/s; a round every 250 ms takes about a hundred
 * leaves, costs about a third of that, and keeps the lag p99 near 300 ms.
 */
export const BUSY_ROUND_GAP_MS = 250;

/** Longest wait between retries of a failing round (the interval doubles up to it, unless the interval is longer). */
export const FAILED_ROUND_MAX_WAIT_MS = 5_000;

/** While rounds keep failing, one warning per this long. */
const FAILURE_LOG_EVERY_MS = 60_000;

/**
 * Runs integration rounds until stopped. A round that found leaves is
 * followed by the next one soon: at once when it was full (a backlog), else
 * BUSY_ROUND_GAP_MS (or the interval, if shorter) after it started, so a leaf
 * waits at most about that plus one round. Only an idle round (nothing
 * pending, or another node holding the lock) waits `intervalMs` before
 * polling again, so an idle service costs one cheap query per interval. A
 * failed round (database down) is retried after the interval, doubling to
 * FAILED_ROUND_MAX_WAIT_MS; the first failure is logged, then one line a
 * minute, and the first round that succeeds again says so.
 * `round` is integrateOnce outside tests.
 */
export function startIntegrator(
  deps: IntegratorDeps,
  intervalMs: number,
  round: (deps: IntegratorDeps, batch: number, cache: EdgeCache) => Promise<IntegrationRound> = integrateOnce,
): RunningIntegrator {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let inFlight: Promise<void> = Promise.resolve();
  const edges: EdgeCache = new Map();
  const busyGap = Math.min(intervalMs, BUSY_ROUND_GAP_MS);
  let failedRounds = 0;
  let lastWarned = 0;
  const tick = () => {
    timer = undefined;
    inFlight = (async () => {
      const started = performance.now();
      let wait = intervalMs;
      try {
        const leaves = (await round(deps, INTEGRATION_BATCH, edges)).leaves;
        if (leaves >= INTEGRATION_BATCH) wait = 0;
        else if (leaves > 0) wait = Math.max(0, busyGap - (performance.now() - started));
        if (failedRounds > 0) deps.log.info('log integration recovered', { failed_rounds: failedRounds });
        failedRounds = 0;
      } catch (e) {
        failedRounds++;
        // The first failure, then one line a minute while the database stays down, not one per retry.
        const now = performance.now();
        if (failedRounds === 1 || now - lastWarned >= FAILURE_LOG_EVERY_MS) {
          lastWarned = now;
          deps.log.warn('log integration round failed; retrying', { failed_rounds: failedRounds, ...errorForLog(e) });
        }
        // Retries back off to FAILED_ROUND_MAX_WAIT_MS, so a node does not poll a down database four times a second.
        wait = Math.min(Math.max(intervalMs, 1) * 2 ** Math.min(failedRounds - 1, 10), Math.max(intervalMs, FAILED_ROUND_MAX_WAIT_MS));
      }
      if (!stopped) timer = setTimeout(tick, wait);
    })();
  };
  // Leaves left pending by a previous process are integrated at start, not one interval later.
  timer = setTimeout(tick, 0);
  return {
    async stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      await inFlight;
    },
  };
}
