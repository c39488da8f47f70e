/**
 * The log integrator: turns pending receipts into leaves of their tenants'
 * logs and signs a checkpoint per tenant whose tree grew.
 *
 * Any node may run it; one round at a time runs per database, because each
 * round is one transaction that first takes a transaction-level advisory
 * lock (a node that does not get it skips the round). The lock and every
 * write of the round commit or roll back together, so a crash mid-round
 * leaves the pending rows for the next round and no half-appended tree.
 *
 * Indexes are assigned here, in the order the pending receipts are read
 * (receipt id among those committed), never at insert time: a receipt whose
 * transaction commits late simply joins a later round, after the leaves
 * already indexed, so readers paging by index never skip it.
 */
import type { Hash } from '../protocol/merkle.js';
import type { Db, Store } from '../store/db.js';
import {
  appendToLog,
  latestCheckpoint,
  pendingLeaves,
  removePending,
  tryIntegratorLock,
  type NewLeaf,
  type PendingLeaf,
} from '../store/log.js';
import type { Logger } from './log.js';
import { appendLeaves, logOrigin, receiptLeafHash, signCheckpoint } from './log-tree.js';
import type { ServiceSigner } from './signer.js';

/** Receipts integrated per round at most; a full round is followed by another at once. */
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

/** One integration round (see the module comment). */
export async function integrateOnce(deps: IntegratorDeps, batch = INTEGRATION_BATCH): Promise<IntegrationRound> {
  return deps.store.db.transaction(async (tx) => {
    if (!(await tryIntegratorLock(tx))) return { locked: false, leaves: 0, tenants: 0 };
    const pending = await pendingLeaves(tx, batch);
    if (pending.length === 0) return { locked: true, leaves: 0, tenants: 0 };
    const byTenant = new Map<string, PendingLeaf[]>();
    for (const p of pending) {
      if (p.jws === null) {
        // Only a receipt removed behind the service's back gets here: it cannot be hashed.
        deps.log.error('a pending log leaf has no receipt; it is dropped from the queue', { receipt_id: p.receiptId, tenant: p.tenantId });
        continue;
      }
      const list = byTenant.get(p.tenantId) ?? [];
      list.push(p);
      byTenant.set(p.tenantId, list);
    }
    let leaves = 0;
    for (const [tenantId, list] of byTenant) {
      await integrateTenant(tx, deps, tenantId, list);
      leaves += list.length;
    }
    await removePending(
      tx,
      pending.map((p) => p.receiptId),
    );
    return { locked: true, leaves, tenants: byTenant.size };
  });
}

async function integrateTenant(tx: Db, deps: IntegratorDeps, tenantId: string, list: readonly PendingLeaf[]): Promise<void> {
  const size = (await latestCheckpoint(tx, tenantId))?.treeSize ?? 0;
  const hashes: Hash[] = list.map((p) => receiptLeafHash(p.jws!));
  const grown = await appendLeaves(tx, tenantId, size, hashes);
  const origin = logOrigin(deps.logName, tenantId);
  const integratedAt = new Date();
  const newLeaves: NewLeaf[] = list.map((p, i) => ({
    tenantId,
    leafIndex: size + i,
    receiptId: p.receiptId,
    leafHash: hashes[i]!,
    queuedAt: p.queuedAt,
    integratedAt,
  }));
  await appendToLog(tx, {
    leaves: newLeaves,
    hashes: grown.hashes.map((h) => ({ tenantId, ...h })),
    checkpoint: { tenantId, treeSize: grown.size, rootHash: grown.root, note: signCheckpoint(deps.signer, origin, grown.size, grown.root) },
  });
}

export interface RunningIntegrator {
  /** Stops scheduling rounds and waits for the one in flight, if any. */
  stop(): Promise<void>;
}

/**
 * Runs integrateOnce every `intervalMs` (at once again after a full batch).
 * A failed round (database down) is logged and retried at the next tick.
 */
export function startIntegrator(deps: IntegratorDeps, intervalMs: number): RunningIntegrator {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let inFlight: Promise<void> = Promise.resolve();
  const tick = () => {
    timer = undefined;
    inFlight = (async () => {
      let again = false;
      try {
        const round = await integrateOnce(deps);
        again = round.leaves >= INTEGRATION_BATCH;
      } catch (e) {
        deps.log.warn('log integration round failed; retrying', { error: String(e) });
      }
      if (!stopped) timer = setTimeout(tick, again ? 0 : intervalMs);
    })();
  };
  timer = setTimeout(tick, intervalMs);
  return {
    async stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      await inFlight;
    },
  };
}
