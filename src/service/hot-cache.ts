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

/**
 * Bounded insertion-ordered map: the oldest entry goes first when full, by count and, given a
 * weight, by bytes. The weight is computed on set and eviction only, never on a get.
 */
class BoundedMap<V> {
  readonly #entries = new Map<string, V>();
  #bytes = 0;
  constructor(
    private readonly max: number,
    private readonly maxBytes = Infinity,
    private readonly bytesOf: (key: string, value: V) => number = () => 0,
  ) {}
  get(key: string): V | undefined {
    return this.#entries.get(key);
  }
  /** Keeps `value` unless its weight alone is above the budget, evicting the oldest entries until both bounds hold. */
  set(key: string, value: V): void {
    this.delete(key);
    const bytes = this.bytesOf(key, value);
    if (bytes > this.maxBytes) return;
    while (this.#entries.size > 0 && (this.#entries.size >= this.max || this.#bytes + bytes > this.maxBytes)) {
      this.delete(this.#entries.keys().next().value!);
    }
    this.#entries.set(key, value);
    this.#bytes += bytes;
  }
  delete(key: string): void {
    const value = this.#entries.get(key);
    if (value === undefined) return;
    this.#entries.delete(key);
    this.#bytes -= this.bytesOf(key, value);
  }
  get size(): number {
    return this.#entries.size;
  }
  get bytes(): number {
    return this.#bytes;
  }
}

const MAX_DELEGATIONS = 100_000;
const MAX_TENANTS = 10_000;

/**
 * What the stored DRs may hold at most, by storedDelegationBytes: 64 MiB. Counted in records only,
 * 100,000 DRs of up to 64 KiB of JWS each could hold 6.4 GB, and anyone holding one DR under a
 * trusted root can store large sub-DRs and have a tool server verify them by reference: a miss
 * caches them before any signature is checked, and they stay when the verify is refused.
 */
export const DEFAULT_HOT_DELEGATION_BYTES = 64 * 1024 * 1024;

/**
 * What a cached stored DR holds, over-estimated: its strings (the key, hash, issuer and JWS) at 2
 * bytes a character, and 256 bytes for the object and the map entry. V8 stores a string at 1 byte
 * a character unless one is above U+00FF; a stored JWS is base64url, but counting 2 saves
 * scanning it. Measured with a forced GC, strings decoded from Buffers as postgres.js does: a
 * 0.9 KB JWS held 1.25 KB (estimated 2.5 KB), a 62 KB one 62.3 KB (estimated 125 KB), a 62 KB
 * string of 2-byte characters 124.7 KB (estimated 124.7 KB). So ~26,000 ordinary DRs fit the
 * default budget, and at most ~32 MB of large ones.
 */
export function storedDelegationBytes(key: string, dr: StoredDelegation): number {
  return 256 + 2 * (key.length + dr.hash.length + dr.iss.length + dr.jws.length);
}

export class HotPathCache {
  readonly #delegations: BoundedMap<StoredDelegation>;
  /** DRs whose max_calls the statement found used up: calls_used never goes down, so this stays true. */
  readonly #exhausted = new BoundedMap<true>(MAX_DELEGATIONS);
  /** Trusted root DIDs per tenant as last read: a DID missing here is read again. */
  readonly #roots = new BoundedMap<ReadonlySet<string>>(MAX_TENANTS);

  constructor(maxDelegationBytes = DEFAULT_HOT_DELEGATION_BYTES) {
    this.#delegations = new BoundedMap(MAX_DELEGATIONS, maxDelegationBytes, storedDelegationBytes);
  }

  /** Stored DRs cached, and their estimated bytes (storedDelegationBytes), at most the budget. */
  get delegationsCached(): { readonly count: number; readonly bytes: number } {
    return { count: this.#delegations.size, bytes: this.#delegations.bytes };
  }

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

/**
 * Gives an app instance the hot-path cache it will use, one of a smaller budget (tests), before
 * its first verify made one: replacing a cache in use would drop what requests learned.
 */
export function installHotPathCache(deps: ServiceDeps, cache: HotPathCache): void {
  if (caches.has(deps)) throw new Error('This app instance already has its hot-path cache; set one before its first verify.');
  caches.set(deps, cache);
}

/** Per app instance (one ServiceDeps), like the API key cache. */
export function hotPathCacheOf(deps: ServiceDeps): HotPathCache {
  let cache = caches.get(deps);
  if (!cache) {
    cache = new HotPathCache();
    caches.set(deps, cache);
  }
  return cache;
}
