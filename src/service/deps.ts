/** Assembles what handlers need from configuration and an open store. */
import { DelegationCache } from '../protocol/chain.js';
import type { Config } from '../config.js';
import type { Store } from '../store/db.js';
import { pendingBacklog } from '../store/log.js';
import type { Logger } from './log.js';
import { metrics } from './metrics.js';
import { loadServiceSigner } from './signer.js';
import type { ServiceDeps } from './types.js';

export async function createServiceDeps(opts: {
  store: Store;
  config: Config;
  log: Logger;
  masterKey: Uint8Array;
  now?: () => number;
}): Promise<ServiceDeps> {
  metrics.observePool(opts.store.kind, opts.store.kind === 'pglite' ? 1 : opts.config.dbPoolSize);
  metrics.observeLogBacklog(() => pendingBacklog(opts.store.db));
  return {
    store: opts.store,
    config: opts.config,
    log: opts.log,
    now: opts.now ?? (() => Math.floor(Date.now() / 1000)),
    signer: await loadServiceSigner(opts.store.db, opts.masterKey, opts.log),
    masterKey: opts.masterKey,
    drCache: new DelegationCache(),
  };
}
