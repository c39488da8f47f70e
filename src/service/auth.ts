/**
 * API-key authentication: `Authorization: Bearer <key>`.
 *
 * - Tenant keys ('bt_' + base64url(32 bytes)) and generated admin keys
 *   ('bt_admin_' + …) are stored only as lowercase hex SHA-256. A presented key
 *   is hashed, looked up by hash (one indexed query) and the stored hash is
 *   compared with crypto.timingSafeEqual.
 * - The environment admin key (BATON_ADMIN_KEY) is compared in constant time
 *   through SHA-256 digests (equal lengths whatever was presented). When it is
 *   set it is the only admin key: stored (generated) admin keys are refused, and
 *   revoked at the next start (ensureAdminKey), so setting it retires a
 *   generated key that may have leaked for good.
 * - Every refusal of a key is the same 401 UNAUTHORIZED with the same message
 *   (missing, garbled, unknown, revoked): no oracle. A valid key without the
 *   route's scope is 403 FORBIDDEN with details.required_scopes.
 *
 * Caching: only the verify routes use the in-memory cache of successful
 * lookups (requireScopeWithCache: at most KEY_CACHE_TTL_MS, 10 s, bounded to
 * KEY_CACHE_MAX entries, per app instance), so the verify hot path costs no
 * query for the key. That is safe because the verify statements re-check that
 * the key is still active and unexpired inside their transaction
 * (baton_verify_count, baton_record_denial, the dry run's check), so a key
 * revoked, expired or retired by a rotation on any node is refused by every
 * node's next verify. Every other route (requireScope, authenticateRequest)
 * looks the key up on each request: those routes have no such re-check, and a
 * cached key would outlive its revocation on the other nodes for the TTL.
 * Revoking a key also evicts it from this node's cache at once. Refusals are
 * never cached, so garbage keys cannot evict good entries, and a new key works
 * immediately.
 *
 * Expiry: a key past its expires_at is refused like a revoked one (the same
 * 401). A cached entry carries the key's expiry and is refused once it has
 * passed. A rotation brings the old key's expiry forward: every route on every
 * node refuses the old key from the end of its window on.
 *
 * Last use: each node writes api_keys.last_used_at at most once a minute per
 * key (LAST_USED_INTERVAL_MS), without awaiting it, so authentication never
 * waits for the write and a busy key is not a hot row; the UPDATE itself
 * skips rows written less than a minute ago by another node. The time is
 * therefore accurate to about a minute.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Context, MiddlewareHandler } from 'hono';
import { BEARER_TOKEN_MAX_LENGTH } from '../config.js';
import { BatonError } from '../protocol/errors.js';
import { API_KEY_SCOPES, type ApiKeyScope } from '../protocol/lists.js';
import {
  MINTED_KEY_PATTERN,
  createBootstrapAdminKey,
  retireStoredAdminKeys,
  findApiKeyByHash,
  touchApiKeyLastUsed,
  type ApiKeyForAuth,
} from '../store/api-keys.js';
import type { AppEnv, AuthContext, ServiceDeps } from './types.js';
import { withinDeadline } from './deadline.js';
import { httpStatusOf } from './error-status.js';
import { handleError } from './http.js';
import { errorForLog } from '../store/errors.js';

export const KEY_CACHE_TTL_MS = 10_000;
export const KEY_CACHE_MAX = 10_000;
/** How often one node records a key's use (api_keys.last_used_at) at most. */
export const LAST_USED_INTERVAL_MS = 60_000;
/** A bearer token longer than this is refused before it is hashed or looked up. */
const MAX_TOKEN_LENGTH = BEARER_TOKEN_MAX_LENGTH;
/** How often a node asks about a cached key again after a verify refused before its statement (refuseDeadKeyOfRefusedRequest). */
const KEY_RECHECK_INTERVAL_MS = 1_000;
/** How long that lookup waits for the database before the refusal is answered as it was. */
const KEY_RECHECK_WAIT_MS = 250;
/** The key id reported for the environment admin key (it has no api_keys row). */
export const ENV_ADMIN_KEY_ID = 'admin:env';

/** Bounded map of secret hash -> AuthContext with a TTL, on a monotonic clock. */
export class ApiKeyCache {
  readonly #entries = new Map<string, { auth: AuthContext; expiresAt: number; keyExpiresAtMs: number | null }>();

  constructor(
    private readonly ttlMs: number = KEY_CACHE_TTL_MS,
    private readonly max: number = KEY_CACHE_MAX,
    private readonly clock: () => number = () => performance.now(),
    /** Wall clock (ms since the epoch), for the keys' own expiry. */
    private readonly wallClock: () => number = Date.now,
  ) {}

  get(secretHash: string): AuthContext | undefined {
    const entry = this.#entries.get(secretHash);
    if (!entry) return undefined;
    if (this.clock() >= entry.expiresAt || (entry.keyExpiresAtMs !== null && this.wallClock() >= entry.keyExpiresAtMs)) {
      this.#entries.delete(secretHash);
      return undefined;
    }
    return entry.auth;
  }

  /** `keyExpiresAt`: the key's own expiry; the entry is not served after it. */
  set(secretHash: string, auth: AuthContext, keyExpiresAt: Date | null = null): void {
    this.#entries.delete(secretHash);
    while (this.#entries.size >= this.max) {
      const oldest = this.#entries.keys().next();
      if (oldest.done === true) break;
      this.#entries.delete(oldest.value);
    }
    this.#entries.set(secretHash, { auth, expiresAt: this.clock() + this.ttlMs, keyExpiresAtMs: keyExpiresAt?.getTime() ?? null });
  }

  /** Drops every entry for this key id (revocation). */
  evictKeyId(keyId: string): void {
    for (const [hash, entry] of this.#entries) {
      if (entry.auth.keyId === keyId) this.#entries.delete(hash);
    }
  }

  get size(): number {
    return this.#entries.size;
  }
}

interface AuthState {
  readonly cache: ApiKeyCache;
  /** SHA-256 of BATON_ADMIN_KEY, or null when it is not set. */
  readonly envAdminDigest: Buffer | null;
  /** SHA-256 of BATON_METRICS_TOKEN, or null when it is not set. */
  readonly metricsTokenDigest: Buffer | null;
  /** Key id -> when this node last recorded its use (monotonic ms). */
  readonly lastRecordedUse: Map<string, number>;
  /** Key id -> when this node last logged a use of it revoked or expired (monotonic ms). */
  readonly lastRefusalLogged: Map<string, number>;
  /** Key id -> when this node last asked about it after a refused verify (monotonic ms). */
  readonly lastRecheck: Map<string, number>;
}

/** Per app instance (one ServiceDeps), so tests with separate apps never share a cache. */
const states = new WeakMap<ServiceDeps, AuthState>();

function stateOf(deps: ServiceDeps): AuthState {
  let state = states.get(deps);
  if (!state) {
    const { adminKey, metricsToken } = deps.config;
    state = {
      cache: new ApiKeyCache(),
      envAdminDigest: adminKey ? sha256(adminKey) : null,
      metricsTokenDigest: metricsToken ? sha256(metricsToken) : null,
      lastRecordedUse: new Map(),
      lastRefusalLogged: new Map(),
      lastRecheck: new Map(),
    };
    states.set(deps, state);
  }
  return state;
}

/** The auth cache of this app instance (exposed for tests and operations). */
export function apiKeyCacheOf(deps: ServiceDeps): ApiKeyCache {
  return stateOf(deps).cache;
}

/** Evicts a key from this node's cache; call after revoking it. */
export function evictApiKey(deps: ServiceDeps, keyId: string): void {
  stateOf(deps).cache.evictKeyId(keyId);
}

/**
 * Whether `keyId`'s next once-per-`intervalMs` event on this node is due (monotonic clock); if so,
 * notes it as happening now. The map is cleared rather than grown past KEY_CACHE_MAX keys.
 */
function dueOncePer(lastAt: Map<string, number>, keyId: string, intervalMs: number): boolean {
  const now = performance.now();
  const last = lastAt.get(keyId);
  if (last !== undefined && now - last < intervalMs) return false;
  if (lastAt.size >= KEY_CACHE_MAX) lastAt.clear();
  lastAt.set(keyId, now);
  return true;
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

function unauthorized(): BatonError {
  // One message for every refusal: the caller learns nothing about why.
  return new BatonError('UNAUTHORIZED');
}

/**
 * 401 for a key whose whole secret the caller presented, but which is revoked or expired: the same
 * 401 as any other (a leaked secret must not be confirmed as a real key), but the operator's log
 * names the key at info, so a client still using a rotated key after its grace is found. At most
 * once a minute per key and node: a client retrying a dead key must not flood the log.
 */
export function deadKeyRefused(
  deps: ServiceDeps,
  keyId: string,
  reason: 'revoked' | 'expired' | 'revoked or expired',
  requestId?: string,
): BatonError {
  if (dueOncePer(stateOf(deps).lastRefusalLogged, keyId, LAST_USED_INTERVAL_MS)) {
    deps.log.info(`an api key ${reason === 'expired' ? 'past its expiry' : reason} was used (refused 401)`, {
      request_id: requestId,
      key_id: keyId,
      reason,
    });
  }
  return unauthorized();
}

/** The token of `Authorization: Bearer <token>` (scheme case-insensitive), or null. */
export function bearerToken(header: string | undefined): string | null {
  if (header === undefined) return null;
  const match = /^Bearer +([\x21-\x7e]+) *$/i.exec(header);
  const token = match?.[1];
  if (token === undefined || token.length > MAX_TOKEN_LENGTH) return null;
  return token;
}

function isScope(s: string): s is ApiKeyScope {
  return (API_KEY_SCOPES as readonly string[]).includes(s);
}

function contextOf(row: ApiKeyForAuth): AuthContext {
  return {
    keyId: row.id,
    tenantId: row.tenantId,
    scopes: Object.freeze(row.scopes.filter(isScope)),
    toolServer: row.toolServer,
  };
}

/**
 * Establishes who is calling from the Authorization header, or throws 401.
 * Never logs the key; refusals log only a reason at debug level (a revoked or expired key: at info, deadKeyRefused).
 */
export async function authenticate(
  deps: ServiceDeps,
  authorization: string | undefined,
  requestId?: string,
  /** Serve from the cache: only for routes whose statements re-check the key in their transaction. */
  useCache = false,
  /** When the request stops waiting for the database (deadline.ts); default: the configured deadline from now. */
  deadline: Date = new Date(Date.now() + deps.config.verifyDeadlineMs),
): Promise<AuthContext> {
  const state = stateOf(deps);
  const refuse = (reason: string, keyId?: string): BatonError => {
    deps.log.debug('api key refused', { request_id: requestId, reason, ...(keyId ? { key_id: keyId } : {}) });
    return unauthorized();
  };
  const token = bearerToken(authorization);
  if (token === null) throw refuse(authorization === undefined ? 'missing' : 'malformed header');
  const digest = sha256(token);

  // The environment admin key: digests are always 32 bytes, so the comparison
  // takes the same time whatever length or content was presented.
  if (state.envAdminDigest !== null && timingSafeEqual(digest, state.envAdminDigest)) {
    return { keyId: ENV_ADMIN_KEY_ID, tenantId: null, scopes: ['admin'], toolServer: null };
  }
  if (!MINTED_KEY_PATTERN.test(token)) throw refuse('not a Baton key');

  const hashHex = digest.toString('hex');
  const cached = useCache ? state.cache.get(hashHex) : undefined;
  if (cached) {
    recordUse(deps, state, cached.keyId);
    return cached;
  }

  // A read: abandoned safely when the database does not answer in time (a prompt 503, not a hang).
  const row = await withinDeadline(
    findApiKeyByHash(deps.store.db, hashHex),
    deadline,
    `The database did not answer the API key lookup within ${deps.config.verifyDeadlineMs} ms, so Baton refuses the request; nothing was done.`,
  );
  if (!row) throw refuse('unknown');
  const stored = Buffer.from(row.secretHash, 'hex');
  // Lengths are public (always 32 bytes for a well-formed row); a malformed row never matches.
  if (stored.length !== digest.length || !timingSafeEqual(stored, digest)) throw refuse('hash mismatch', row.id);
  if (row.revokedAt !== null) throw deadKeyRefused(deps, row.id, 'revoked', requestId);
  if (row.expiresAt !== null && row.expiresAt.getTime() <= Date.now()) throw deadKeyRefused(deps, row.id, 'expired', requestId);
  if (row.tenantId === null && state.envAdminDigest !== null) throw refuse('stored admin key while BATON_ADMIN_KEY is set', row.id);

  const auth = contextOf(row);
  if (useCache) state.cache.set(hashHex, auth, row.expiresAt);
  recordUse(deps, state, auth.keyId);
  return auth;
}

/**
 * Records the key's use at most once per LAST_USED_INTERVAL_MS on this node,
 * in the background: the request does not wait, and a failed write only
 * costs an older last_used_at.
 */
function recordUse(deps: ServiceDeps, state: AuthState, keyId: string): void {
  if (!dueOncePer(state.lastRecordedUse, keyId, LAST_USED_INTERVAL_MS)) return;
  touchApiKeyLastUsed(deps.store.db, keyId).catch((err: unknown) => {
    deps.log.debug('api key last use not recorded', { key_id: keyId, ...errorForLog(err) });
  });
}

/**
 * Throws 403 unless `auth` may use a route accepting `scopes`. A tenant key
 * needs one of them; an admin key passes only routes that list 'admin'.
 */
export function assertScope(auth: AuthContext, scopes: readonly ApiKeyScope[]): void {
  const allowed =
    auth.tenantId === null
      ? scopes.includes('admin') && auth.scopes.includes('admin')
      : scopes.some((s) => s !== 'admin' && auth.scopes.includes(s));
  if (!allowed) {
    const tenantScopes = scopes.filter((s) => s !== 'admin');
    throw new BatonError('FORBIDDEN', {
      message: `This route needs an API key with one of the scopes: ${scopes.join(', ')}.`,
      // The operator holding the admin key cannot "ask the operator": what it lacks is a key of a tenant.
      ...(auth.tenantId === null && tenantScopes.length > 0
        ? {
            suggestion: `The admin key belongs to no tenant, and this route serves a tenant's data. Create a key of the tenant with the scope ${tenantScopes.join(' or ')} (POST /v1/admin/tenants/{tenant}/api-keys, or baton keys create) and use it here.`,
          }
        : {}),
      details: { required_scopes: [...scopes] },
    });
  }
}

/** The scopes that read the whole tenant whatever a key is bound to. */
const TENANT_WIDE_SCOPES = ['issue', 'audit', 'approve'] as const satisfies readonly ApiKeyScope[];

/**
 * Whether `auth` is a key confined to one tool server: bound to it (`tool_server`) and holding
 * none of `issue`, `audit` and `approve`, the tenant-wide grants (an approver reads every call held
 * for a human, whatever its server). Such a key verifies, reports
 * actuals for, and reads only the invocations naming its server (design.md §1); it reads no
 * delegation. The one place this rule is written: every read route asks it.
 */
export function boundToolServerOf(auth: Pick<AuthContext, 'scopes' | 'toolServer'>): string | null {
  if (auth.toolServer === null || TENANT_WIDE_SCOPES.some((scope) => auth.scopes.includes(scope))) return null;
  return auth.toolServer;
}

/**
 * The guard of the delegation reads, after requireScope: a key bound to one tool server (see
 * boundToolServerOf) is refused 403 before anything is looked up, so the answer says nothing about
 * what exists; delegations and their rollups span every server's calls.
 */
export const refuseBoundKeys: MiddlewareHandler<AppEnv> = async (c, next) => {
  const toolServer = boundToolServerOf(c.get('auth'));
  if (toolServer !== null) {
    throw new BatonError('FORBIDDEN', {
      message: `This API key is bound to tool server ${toolServer}. A key bound to a tool server reads only the invocations naming its server; use an \`audit\` key to read delegations.`,
      suggestion:
        'Read this delegation with a key of the tenant holding the `audit` scope (or `issue`), or read your own calls with GET /v1/invocations/{jti}.',
      details: { required_scopes: ['audit', 'issue'] },
    });
  }
  await next();
};

/** Authenticates the caller (401) and requires one of `scopes` (403); sets c.get('auth'). */
export function requireScope(deps: ServiceDeps, ...scopes: ApiKeyScope[]): MiddlewareHandler<AppEnv> {
  return scopeGuard(deps, scopes, false);
}

/**
 * requireScope served from the key cache. Only for routes whose every
 * statement re-checks in its own transaction that the key is still active
 * (the verify routes): elsewhere a cached key would outlive its revocation.
 */
export function requireScopeWithCache(deps: ServiceDeps, ...scopes: ApiKeyScope[]): MiddlewareHandler<AppEnv> {
  return scopeGuard(deps, scopes, true);
}

function scopeGuard(deps: ServiceDeps, scopes: readonly ApiKeyScope[], useCache: boolean): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const auth = await authenticateRequest(deps, c, useCache);
    assertScope(auth, scopes);
    await next();
    if (useCache) await refuseDeadKeyOfRefusedRequest(deps, c, auth);
  };
}

/**
 * A request a key from the cache made, refused before any verify statement re-checked the key (an
 * unreadable bundle, a body too large: thrown, where decisions are answered), is asked about the
 * key once more: a key revoked or expired on another node within KEY_CACHE_TTL_MS gets the 401 any
 * route gives it, not the 400 that tells its holder how to mend the request. The database's
 * answer replaces the refusal only when it refuses the key: a database that does not answer leaves
 * the refusal as it was (a bad request stays a 400, not a 503).
 */
async function refuseDeadKeyOfRefusedRequest(deps: ServiceDeps, c: Context<AppEnv>, auth: AuthContext): Promise<void> {
  const refusal = c.error;
  if (!(refusal instanceof BatonError) || refusal.code === 'UNAUTHORIZED' || httpStatusOf(refusal) >= 500) return;
  if (auth.tenantId === null) return; // the environment admin key has no row, and a stored admin key passes no verify route
  // At most one such lookup per key and second on a node (a client looping on a malformed verify
  // would otherwise cost one per request), each waiting KEY_RECHECK_WAIT_MS at most: a slow
  // database held every malformed verify for its whole deadline (a review).
  const wait = new Date(Math.min(c.get('deadline').getTime(), Date.now() + KEY_RECHECK_WAIT_MS));
  if (wait.getTime() <= Date.now()) return; // the deadline has passed: no time to ask, and no second spent
  if (!dueOncePer(stateOf(deps).lastRecheck, auth.keyId, KEY_RECHECK_INTERVAL_MS)) return;
  try {
    await authenticate(deps, c.req.header('authorization'), c.get('requestId'), false, wait);
  } catch (err) {
    if (!(err instanceof BatonError) || err.code !== 'UNAUTHORIZED') return;
    evictApiKey(deps, auth.keyId);
    c.error = err;
    c.res = undefined;
    c.res = handleError(err, c, deps.log);
  }
}

/**
 * The guard of /metrics. Its counters span every tenant (decisions by code, requests by route), so
 * a keyless caller or a tenant's key would learn about other tenants' traffic: it takes the
 * metrics token (BATON_METRICS_TOKEN, compared in constant time like the environment admin key,
 * and good for nothing else) or the operator's admin key. Anything else is refused as any route
 * refuses it: 401 for no key or an unknown one, 403 for a tenant key.
 */
export function requireMetricsReader(deps: ServiceDeps): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const { metricsTokenDigest } = stateOf(deps);
    const token = bearerToken(c.req.header('authorization'));
    if (metricsTokenDigest !== null && token !== null && timingSafeEqual(sha256(token), metricsTokenDigest)) return next();
    assertScope(await authenticateRequest(deps, c), ['admin']);
    return next();
  };
}

/** authenticate() for a Hono request; sets c.get('auth') on success. */
export async function authenticateRequest(deps: ServiceDeps, c: Context<AppEnv>, useCache = false): Promise<AuthContext> {
  const requestId = c.get('requestId');
  const auth = { ...(await authenticate(deps, c.req.header('authorization'), requestId, useCache, c.get('deadline'))), requestId };
  c.set('auth', auth);
  return auth;
}

/** The tenant a tenant-scoped route acts for; admin keys have none. */
export function tenantOf(auth: { tenantId: string | null }): string {
  if (!auth.tenantId) throw new BatonError('FORBIDDEN', { message: 'This route needs a tenant API key, not an admin key.' });
  return auth.tenantId;
}

/**
 * First start: when BATON_ADMIN_KEY is not set and no unrevoked admin key is
 * stored, mints one ('bt_admin_' + base64url(32 bytes)), stores its hash and
 * returns the plaintext, exactly once; the caller prints it. Returns null when
 * the environment key is in use or an admin key already exists.
 *
 * With BATON_ADMIN_KEY set, stored admin keys are revoked, not only refused
 * while it is set: an operator sets it to retire a generated key that may have
 * leaked, which must not work again once the variable is unset (a later start
 * without it mints and prints a new one).
 */
export async function ensureAdminKey(deps: ServiceDeps): Promise<string | null> {
  if (deps.config.adminKey) {
    const retired = await retireStoredAdminKeys(deps.store.db);
    if (retired > 0) deps.log.warn('BATON_ADMIN_KEY is set: the stored (generated) admin key is revoked for good', { revoked: retired });
    return null;
  }
  return createBootstrapAdminKey(deps.store.db);
}
