/**
 * In-process caches of the verify hot path. They save reads, never decide:
 * they hold only what cannot change (a stored DR's bytes, issuer and place in
 * its chain) or what the verify statement re-checks inside its transaction
 * (a root still trusted, a DR not revoked, an API key active). A miss, or a
 * cached fact the statement contradicts, leads to a fresh read.
 */
import { delegationsByHash, trustedRootsOf } from '../store/delegations.js';
import type { Db } from '../store/db.js';
import type { ServiceDeps } from './types.js';

/** What the hot path needs of a stored DR. `revoked` is as read, and only ever true from a fresh read. */
export interface StoredDelegation {
  readonly hash: string;
  readonly jws: string;
  readonly iss: string;
  readonly revoked: boolean;
}

/** Bounded insertion-ordered map: the oldest entry goes first when full. */
class BoundedMap<V> {
  readonly #entries = new Map<string, V>();
  constructor(private readonly max: number) {}
  get(key: string): V | undefined {
    return this.#entries.get(key);
  }
  set(key: string, value: V): void {
    this.#entries.delete(key);
    while (this.#entries.size >= this.max) {
      const oldest = this.#entries.keys().next();
      if (oldest.done === true) break;
      this.#entries.delete(oldest.value);
    }
    this.#entries.set(key, value);
  }
  delete(key: string): void {
    this.#entries.delete(key);
  }
}

const MAX_DELEGATIONS = 100_000;
const MAX_TENANTS = 10_000;

export class HotPathCache {
  readonly #delegations = new BoundedMap<StoredDelegation>(MAX_DELEGATIONS);
  /** DRs whose max_calls the statement found used up: calls_used never goes down, so this stays true. */
  readonly #exhausted = new BoundedMap<true>(MAX_DELEGATIONS);
  /** Trusted root DIDs per tenant as last read: a DID missing here is read again. */
  readonly #roots = new BoundedMap<ReadonlySet<string>>(MAX_TENANTS);

  /**
   * Stored DRs of the tenant among `hashes`. Cached entries are used as they
   * are (the statement re-checks revocation); misses are read, and cached
   * unless revoked (a revoked DR is then refused early, from a fresh read).
   */
  async delegations(db: Db, tenantId: string, hashes: readonly string[]): Promise<Map<string, StoredDelegation>> {
    const out = new Map<string, StoredDelegation>();
    const missing: string[] = [];
    for (const hash of hashes) {
      const hit = this.#delegations.get(`${tenantId} ${hash}`);
      if (hit) out.set(hash, hit);
      else missing.push(hash);
    }
    if (missing.length === 0) return out;
    for (const [hash, row] of await delegationsByHash(db, tenantId, missing)) {
      const dr: StoredDelegation = { hash, jws: row.jws, iss: row.iss, revoked: row.revokedAt !== null };
      out.set(hash, dr);
      if (!dr.revoked) this.#delegations.set(`${tenantId} ${hash}`, dr);
    }
    return out;
  }

  /** Whether the statement refused `hash` for its max_calls (used only to predict, never to decide). */
  isExhausted(tenantId: string, hash: string): boolean {
    return this.#exhausted.get(`${tenantId} ${hash}`) === true;
  }

  markExhausted(tenantId: string, hash: string): void {
    this.#exhausted.set(`${tenantId} ${hash}`, true);
  }

  /** Forgets a DR the statement found revoked, so the next verify refuses it before the statement. */
  forgetDelegation(tenantId: string, hash: string): void {
    this.#delegations.delete(`${tenantId} ${hash}`);
  }

  /**
   * The tenant's trusted roots, from the cache when it holds `rootDid` (the
   * statement re-checks it), else read now. Without a known root DID (a
   * chain not stored yet) they are read now.
   */
  async trustedRoots(db: Db, tenantId: string, rootDid: string | undefined): Promise<ReadonlySet<string>> {
    const hit = this.#roots.get(tenantId);
    if (hit && rootDid !== undefined && hit.has(rootDid)) return hit;
    const fresh = await trustedRootsOf(db, tenantId);
    this.#roots.set(tenantId, fresh);
    return fresh;
  }

  /** Forgets a tenant's roots after the statement found one no longer trusted. */
  forgetRoots(tenantId: string): void {
    this.#roots.delete(tenantId);
  }
}

const caches = new WeakMap<ServiceDeps, HotPathCache>();

/** Per app instance (one ServiceDeps), like the API key cache. */
export function hotPathCacheOf(deps: ServiceDeps): HotPathCache {
  let cache = caches.get(deps);
  if (!cache) {
    cache = new HotPathCache();
    caches.set(deps, cache);
  }
  return cache;
}
