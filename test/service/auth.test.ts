// API-key authentication on real PostgreSQL: bearer parsing, scopes, the
// bounded TTL cache and revocation, the environment and bootstrap admin keys.
import { createHash } from 'node:crypto';
import { createServer, type AddressInfo } from 'node:net';
import { eq } from 'drizzle-orm';
import { Hono } from 'hono';
import { requestId } from 'hono/request-id';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ApiKeyCache,
  ENV_ADMIN_KEY_ID,
  KEY_CACHE_TTL_MS,
  apiKeyCacheOf,
  authenticate,
  ensureAdminKey,
  requireScope,
  requireScopeWithCache,
  tenantOf,
} from '../../src/service/auth.js';
import { createApp } from '../../src/service/app.js';
import { handleError } from '../../src/service/http.js';
import type { AppEnv, AuthContext, ServiceDeps } from '../../src/service/types.js';
import { createBootstrapAdminKey, retireStoredAdminKeys } from '../../src/store/api-keys.js';
import { openStore, type Db, type Store } from '../../src/store/db.js';
import { apiKeys } from '../../src/store/schema/index.js';
import { freshDatabase, freshPglite } from '../setup/db.js';
import { startTestService, type CallResult, type TestService } from '../support/service.js';

/**
 * A small app whose routes need the scopes their names say, answering with the
 * AuthContext. /probe/verify uses the key cache as the verify routes do.
 */
function probeApp(deps: ServiceDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.use('*', requestId());
  const echo = (c: { get(k: 'auth'): AuthContext; json(o: unknown): Response }) => c.json(c.get('auth'));
  app.get('/probe/verify', requireScopeWithCache(deps, 'verify'), (c) => echo(c));
  app.get('/probe/audit', requireScope(deps, 'audit'), (c) => echo(c));
  app.get('/probe/audit-or-admin', requireScope(deps, 'audit', 'admin'), (c) => echo(c));
  app.get('/probe/tenant', requireScope(deps, 'issue', 'verify', 'report', 'audit', 'admin'), (c) =>
    c.json({ tenant: tenantOf(c.get('auth')) }),
  );
  app.onError((err, c) => handleError(err, c, deps.log));
  return app;
}

async function call(app: Hono<AppEnv>, path: string, authorization?: string): Promise<CallResult> {
  const res = await app.request(path, { headers: authorization === undefined ? {} : { authorization } });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

const sha256Hex = (s: string) => createHash('sha256').update(s).digest('hex');

/** The error part of a refusal, without the per-request id. */
const errorOf = (res: CallResult) => res.body.error;

let svc: TestService;
let probe: Hono<AppEnv>;
let tenant: string;

async function newKey(body: Record<string, unknown>, forTenant = tenant): Promise<{ id: string; key: string }> {
  const res = await svc.call('POST', `/v1/admin/tenants/${forTenant}/api-keys`, { key: svc.adminKey, json: body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body;
}

async function revoke(id: string, via: TestService['call'] = svc.call): Promise<void> {
  expect((await via('DELETE', `/v1/admin/api-keys/${id}`, { key: svc.adminKey })).status).toBe(204);
}

beforeAll(async () => {
  svc = await startTestService();
  probe = probeApp(svc.deps);
  const res = await svc.call('POST', '/v1/admin/tenants', { key: svc.adminKey, json: { name: 'auth' } });
  tenant = res.body.id;
});
afterAll(() => svc.close());

describe('tenant API keys', () => {
  it('authenticate and carry exactly their scopes, tenant and tool server', async () => {
    const k = await newKey({ scopes: ['verify', 'report'], tool_server: 'mcp://tools.example.com' });
    const res = await call(probe, '/probe/verify', `Bearer ${k.key}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      keyId: k.id,
      tenantId: tenant,
      scopes: ['verify', 'report'],
      toolServer: 'mcp://tools.example.com',
      requestId: res.headers.get('x-request-id'),
    });

    const denied = await call(probe, '/probe/audit', `Bearer ${k.key}`);
    expect(denied.status).toBe(403);
    expect(errorOf(denied)).toMatchObject({ code: 'FORBIDDEN', details: { required_scopes: ['audit'] } });

    expect((await call(probe, '/probe/tenant', `Bearer ${k.key}`)).body).toEqual({ tenant });
  });

  it('pass a route that accepts any one of their scopes', async () => {
    const k = await newKey({ scopes: ['audit'] });
    expect((await call(probe, '/probe/audit-or-admin', `Bearer ${k.key}`)).status).toBe(200);
    const res = await call(probe, '/probe/verify', `Bearer ${k.key}`);
    expect(errorOf(res)).toMatchObject({ code: 'FORBIDDEN', details: { required_scopes: ['verify'] } });
  });

  it('accept the scheme in any case and extra spaces around the token', async () => {
    const k = await newKey({ scopes: ['verify'] });
    for (const header of [`bearer ${k.key}`, `BEARER ${k.key}`, `Bearer   ${k.key}`, `Bearer ${k.key}  `]) {
      expect((await call(probe, '/probe/verify', header)).status, header).toBe(200);
    }
  });
});

describe('refusals: one 401 for every bad key, no oracle', () => {
  it('missing, garbled, unknown and revoked keys all get the identical 401 error', async () => {
    const k = await newKey({ scopes: ['verify'] });
    const revoked = await newKey({ scopes: ['verify'] });
    await revoke(revoked.id);
    // One character changed: same length and format, so it reaches the hash lookup.
    const last = k.key.at(-1) === 'A' ? 'B' : 'A';
    const headers: (string | undefined)[] = [
      undefined,
      '',
      'Bearer',
      'Bearer ',
      `Basic ${Buffer.from(`user:${k.key}`).toString('base64')}`,
      `Token ${k.key}`,
      `Bearer ${k.key} extra`,
      `Bearer ${k.key.slice(0, -1)}${last}`,
      `Bearer ${k.key}x`,
      `Bearer ${k.key.slice(0, -1)}`,
      `Bearer ${k.key.replace('bt_', 'bt_admin_')}`,
      `Bearer ${sha256Hex(k.key)}`,
      `Bearer bt_${'é'.repeat(43)}`,
      `Bearer ${'x'.repeat(600)}`,
      `Bearer ${revoked.key}`,
      `Bearer ${svc.adminKey.slice(0, -1)}`,
    ];
    const errors = [];
    for (const header of headers) {
      const res = await call(probe, '/probe/verify', header);
      expect(res.status, String(header)).toBe(401);
      errors.push(errorOf(res));
    }
    for (const e of errors) expect(e).toEqual(errors[0]);
    expect(errors[0]).toEqual({ code: 'UNAUTHORIZED', message: expect.any(String), suggestion: expect.any(String) });
    // The good key still works: refusals are never cached.
    expect((await call(probe, '/probe/verify', `Bearer ${k.key}`)).status).toBe(200);
  });

  it('a revoked or expired key: the same 401, but the operator log names the key at info, once a minute', async () => {
    const lines: { level: string; msg: string; fields?: Record<string, unknown> }[] = [];
    const record = (level: string) => (msg: string, fields?: Record<string, unknown>) => lines.push({ level, msg, fields });
    const logged = probeApp({
      ...svc.deps,
      log: { debug: record('debug'), info: record('info'), warn: record('warn'), error: record('error') },
    });
    const revoked = await newKey({ scopes: ['verify'] });
    await revoke(revoked.id);
    const expired = await newKey({ scopes: ['audit'] });
    await svc.store.db
      .update(apiKeys)
      .set({ expiresAt: new Date(Date.now() - 1_000) })
      .where(eq(apiKeys.id, expired.id));
    const unknown = errorOf(await call(logged, '/probe/verify', `Bearer bt_${'Q'.repeat(43)}`));
    for (let i = 0; i < 3; i++) {
      for (const [k, path] of [
        [revoked, '/probe/verify'],
        [expired, '/probe/audit'],
      ] as const) {
        const res = await call(logged, path, `Bearer ${k.key}`);
        expect(res.status).toBe(401);
        expect(errorOf(res)).toEqual(unknown);
      }
    }
    const named = lines.filter((l) => l.level === 'info');
    expect(named.map((l) => [l.fields?.['key_id'], l.fields?.['reason']])).toEqual([
      [revoked.id, 'revoked'],
      [expired.id, 'expired'],
    ]);
    expect(JSON.stringify(lines)).not.toContain(revoked.key);
  });

  it('never answers a refusal with anything but 401 when the key is unknown, even on a route the key could not use', async () => {
    expect((await call(probe, '/probe/audit-or-admin', `Bearer bt_${'Z'.repeat(43)}`)).status).toBe(401);
  });
});

describe('the environment admin key', () => {
  it('passes only routes whose scopes include admin, and has no tenant', async () => {
    const ok = await call(probe, '/probe/audit-or-admin', `Bearer ${svc.adminKey}`);
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({
      keyId: ENV_ADMIN_KEY_ID,
      tenantId: null,
      scopes: ['admin'],
      toolServer: null,
      requestId: ok.headers.get('x-request-id'),
    });

    const res = await call(probe, '/probe/verify', `Bearer ${svc.adminKey}`);
    expect(res.status).toBe(403);
    expect(errorOf(res)).toMatchObject({ code: 'FORBIDDEN', details: { required_scopes: ['verify'] } });

    // A route open to admin keys that acts for a tenant: tenantOf refuses the admin key.
    const tenantRoute = await call(probe, '/probe/tenant', `Bearer ${svc.adminKey}`);
    expect(tenantRoute.status).toBe(403);
    expect(errorOf(tenantRoute).code).toBe('FORBIDDEN');
  });

  it('refuses a wrong key of the same length (constant-time digest compare) and prefixes of it', async () => {
    const flipped = svc.adminKey.slice(0, -1) + (svc.adminKey.endsWith('a') ? 'b' : 'a');
    expect(flipped).toHaveLength(svc.adminKey.length);
    for (const wrong of [flipped, svc.adminKey.slice(0, 24), ` ${svc.adminKey}x`]) {
      expect((await call(probe, '/probe/audit-or-admin', `Bearer ${wrong}`)).status).toBe(401);
    }
  });

  it('is the only admin key while set: a stored (generated) admin key is refused', async () => {
    const stored = await createBootstrapAdminKey(svc.store.db);
    expect(stored).toMatch(/^bt_admin_[A-Za-z0-9_-]{43}$/);
    expect((await call(probe, '/probe/audit-or-admin', `Bearer ${stored}`)).status).toBe(401);
    expect((await svc.call('GET', '/v1/admin/tenants', { key: stored! })).status).toBe(401);
    // Without the environment key, the same stored key is the admin key.
    const noEnv: ServiceDeps = { ...svc.deps, config: { ...svc.deps.config, adminKey: undefined } };
    expect((await call(probeApp(noEnv), '/probe/audit-or-admin', `Bearer ${stored}`)).status).toBe(200);
    expect((await call(probeApp(noEnv), '/probe/audit-or-admin', `Bearer ${svc.adminKey}`)).status).toBe(401);
  });

  it('makes ensureAdminKey return null and store nothing', async () => {
    const before = await svc.store.db.$count(apiKeys);
    expect(await ensureAdminKey(svc.deps)).toBeNull();
    expect(await svc.store.db.$count(apiKeys)).toBe(before);
  });

  it('retires a stored admin key for good: unset again, it stays refused and a new one is minted', async () => {
    const noEnv: ServiceDeps = { ...svc.deps, config: { ...svc.deps.config, adminKey: undefined } };
    await retireStoredAdminKeys(svc.store.db); // whatever earlier tests left
    const leaked = await ensureAdminKey(noEnv);
    expect(leaked).toMatch(/^bt_admin_/);
    // A start with BATON_ADMIN_KEY set (the operator's answer to a leak) revokes it.
    expect(await ensureAdminKey(svc.deps)).toBeNull();
    const [row] = await svc.store.db
      .select()
      .from(apiKeys)
      .where(eq(apiKeys.secretHash, sha256Hex(leaked!)));
    expect(row!.revokedAt).not.toBeNull();
    // A later start without it: the leaked key is still refused, and a new one is printed once.
    expect((await call(probeApp({ ...noEnv }), '/probe/audit-or-admin', `Bearer ${leaked}`)).status).toBe(401);
    const replacement = await ensureAdminKey(noEnv);
    expect(replacement).toMatch(/^bt_admin_/);
    expect(replacement).not.toBe(leaked);
    expect((await call(probeApp({ ...noEnv }), '/probe/audit-or-admin', `Bearer ${replacement}`)).status).toBe(200);
    // Tenant keys are untouched by it.
    const k = await newKey({ scopes: ['audit'] });
    expect(await ensureAdminKey(svc.deps)).toBeNull();
    expect((await call(probe, '/probe/audit', `Bearer ${k.key}`)).status).toBe(200);
  });
});

describe('the key cache and revocation', () => {
  it('revoking a key through the admin API refuses it at once on this node (local eviction)', async () => {
    const k = await newKey({ scopes: ['verify'] });
    expect((await call(probe, '/probe/verify', `Bearer ${k.key}`)).status).toBe(200);
    expect(apiKeyCacheOf(svc.deps).get(sha256Hex(k.key))?.keyId).toBe(k.id);
    await revoke(k.id);
    expect(apiKeyCacheOf(svc.deps).get(sha256Hex(k.key))).toBeUndefined();
    const res = await call(probe, '/probe/verify', `Bearer ${k.key}`);
    expect(res.status).toBe(401);
    expect(errorOf(res).code).toBe('UNAUTHORIZED');
  });

  it('another node refuses a revoked key at once on routes without the cache; the cached path holds it for at most the TTL', async () => {
    const k = await newKey({ scopes: ['verify', 'audit'] });
    const otherNode: ServiceDeps = { ...svc.deps }; // its own cache, same database
    const other = probeApp(otherNode);
    expect((await call(other, '/probe/verify', `Bearer ${k.key}`)).status).toBe(200);
    expect((await call(other, '/probe/audit', `Bearer ${k.key}`)).status).toBe(200);
    await revoke(k.id);
    // An uncached route looks the key up on every request: refused at once.
    expect((await call(other, '/probe/audit', `Bearer ${k.key}`)).status).toBe(401);
    // The cached path (only the verify routes, whose statements re-check the key) still has it (< 10 s).
    expect((await call(other, '/probe/verify', `Bearer ${k.key}`)).status).toBe(200);
    apiKeyCacheOf(otherNode).evictKeyId(k.id);
    expect((await call(other, '/probe/verify', `Bearer ${k.key}`)).status).toBe(401);
    // A third node that never cached it refuses at once.
    expect((await call(probeApp({ ...svc.deps }), '/probe/verify', `Bearer ${k.key}`)).status).toBe(401);
    expect(KEY_CACHE_TTL_MS).toBeLessThanOrEqual(10_000);
  });

  it('a verify a cached key sends refused before the statement (400, 413) is the 401 any route gives the key once it is revoked on another node', async () => {
    const k = await newKey({ scopes: ['verify'] });
    const otherNode: ServiceDeps = { ...svc.deps }; // its own cache, same database
    const other = createApp(otherNode);
    const badVerify = async (path: string, body: string) => {
      const res = await other.request(path, {
        method: 'POST',
        headers: { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' },
        body,
      });
      return { status: res.status, code: ((await res.json()) as { error?: { code?: string } }).error?.code, headers: res.headers };
    };
    const malformed = JSON.stringify({ foo: 1 });
    const tooLarge = JSON.stringify({ pad: 'x'.repeat(svc.deps.config.maxBodyBytes) });
    // Live and cached: the request's own fault.
    expect(await badVerify('/v1/verify', malformed)).toMatchObject({ status: 400, code: 'INVALID_REQUEST' });
    expect(apiKeyCacheOf(otherNode).get(sha256Hex(k.key))?.keyId).toBe(k.id);
    await revoke(k.id);
    // That refusal asked about the key (live then); the node asks again a second later at most.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    for (const path of ['/v1/verify', '/v1/verify/dry-run', '/verify']) {
      const refused = await badVerify(path, malformed);
      expect(refused, path).toMatchObject({ status: 401, code: 'UNAUTHORIZED' });
      // The headers any 401 carries (request id, security headers), and no stale length.
      const keyless = await other.request(path, { method: 'POST', body: malformed });
      expect(keyless.status).toBe(401);
      expect([...refused.headers.keys()].sort(), path).toEqual([...keyless.headers.keys()].sort());
    }
    expect(apiKeyCacheOf(otherNode).get(sha256Hex(k.key))).toBeUndefined();
    // A node asks about one key at most once a second this way (a client looping on a malformed
    // verify would otherwise cost a lookup each): cached again within it, the refusal stands.
    apiKeyCacheOf(otherNode).set(sha256Hex(k.key), { keyId: k.id, tenantId: tenant, scopes: ['verify'], toolServer: null });
    expect(await badVerify('/v1/verify', tooLarge)).toMatchObject({ status: 413, code: 'PAYLOAD_TOO_LARGE' });
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    expect(await badVerify('/v1/verify', tooLarge)).toMatchObject({ status: 401, code: 'UNAUTHORIZED' });

    // A database that does not answer leaves the request's own refusal (a 400, not a 503).
    const live = await newKey({ scopes: ['verify'] });
    const down = await freshDatabase();
    await down.store.close();
    const downNode: ServiceDeps = { ...svc.deps, store: down.store };
    apiKeyCacheOf(downNode).set(sha256Hex(live.key), { keyId: live.id, tenantId: tenant, scopes: ['verify'], toolServer: null });
    const res = await createApp(downNode).request('/v1/verify', {
      method: 'POST',
      headers: { authorization: `Bearer ${live.key}`, 'content-type': 'application/json' },
      body: malformed,
    });
    await down.drop();
    expect(res.status).toBe(400);

    // Nor does one that hangs hold the refusal for the request's whole deadline (5 s): the lookup
    // waits a quarter of a second.
    const silent = createServer(() => {}); // accepts, never answers
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const hanging = await openStore({
      databaseUrl: `postgres://postgres@127.0.0.1:${(silent.address() as AddressInfo).port}/none`,
      migrate: false,
    });
    const hangingNode: ServiceDeps = { ...svc.deps, store: hanging };
    apiKeyCacheOf(hangingNode).set(sha256Hex(live.key), { keyId: live.id, tenantId: tenant, scopes: ['verify'], toolServer: null });
    try {
      const started = Date.now();
      const slow = await createApp(hangingNode).request('/v1/verify', {
        method: 'POST',
        headers: { authorization: `Bearer ${live.key}`, 'content-type': 'application/json' },
        body: malformed,
      });
      expect(slow.status).toBe(400);
      expect(Date.now() - started).toBeLessThan(svc.deps.config.verifyDeadlineMs / 2);
    } finally {
      void hanging.close();
      silent.close();
    }
  });

  it('keeps the cached (verify) path to one query per key per TTL; other routes look the key up each time', async () => {
    const k = await newKey({ scopes: ['verify'] });
    let selects = 0;
    const counting = new Proxy(svc.store.db, {
      get(target, prop, receiver) {
        if (prop === 'select') selects++;
        return Reflect.get(target, prop, receiver);
      },
    }) as Db;
    const node: ServiceDeps = { ...svc.deps, store: { ...svc.store, db: counting } };
    for (let i = 0; i < 5; i++) expect((await authenticate(node, `Bearer ${k.key}`, undefined, true)).keyId).toBe(k.id);
    expect(selects).toBe(1);
    for (let i = 0; i < 3; i++) expect((await authenticate(node, `Bearer ${k.key}`)).keyId).toBe(k.id);
    expect(selects).toBe(4);
    // Unknown keys are looked up every time (never cached), garbled ones never reach the database.
    await expect(authenticate(node, `Bearer bt_${'Q'.repeat(43)}`, undefined, true)).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await expect(authenticate(node, `Bearer bt_${'Q'.repeat(43)}`, undefined, true)).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    expect(selects).toBe(6);
    await expect(authenticate(node, 'Bearer not-a-baton-key-at-all', undefined, true)).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    expect(selects).toBe(6);
  });

  it('ApiKeyCache: entries expire after the TTL, the map stays bounded (oldest out), eviction by key id', () => {
    let now = 0;
    const cache = new ApiKeyCache(10_000, 3, () => now);
    const ctx = (id: string): AuthContext => ({ keyId: id, tenantId: 'ten_x', scopes: ['verify'], toolServer: null });
    cache.set('h1', ctx('k1'));
    now = 9_999;
    expect(cache.get('h1')?.keyId).toBe('k1');
    now = 10_000;
    expect(cache.get('h1')).toBeUndefined();
    expect(cache.size).toBe(0);

    for (const i of [1, 2, 3, 4]) cache.set(`h${i}`, ctx(`k${i}`));
    expect(cache.size).toBe(3);
    expect(cache.get('h1')).toBeUndefined();
    expect(cache.get('h4')?.keyId).toBe('k4');
    cache.evictKeyId('k3');
    expect(cache.get('h3')).toBeUndefined();
    expect(cache.get('h2')?.keyId).toBe('k2');
  });

  it('refuses (503, never an allow) when the database cannot answer', async () => {
    const k = await newKey({ scopes: ['verify'] });
    const down = await freshDatabase();
    await down.store.close();
    const logged: { msg: string; fields?: Record<string, unknown> }[] = [];
    const capture = (msg: string, fields?: Record<string, unknown>) => void logged.push({ msg, ...(fields ? { fields } : {}) });
    const node: ServiceDeps = { ...svc.deps, store: down.store, log: { debug: capture, info: capture, warn: capture, error: capture } };
    const res = await call(probeApp(node), '/probe/verify', `Bearer ${k.key}`);
    await down.drop();
    expect(res.status).toBe(503);
    expect(errorOf(res).code).toBe('STORAGE_UNAVAILABLE');
    // The log says which query failed and why, never its parameters (here the key's stored hash).
    expect(logged.map((l) => l.msg)).toContain('storage unavailable');
    const text = JSON.stringify(logged);
    expect(text).toContain('Failed query');
    expect(text).not.toContain(sha256Hex(k.key));
    expect(text).not.toContain('params');
  });
});

describe('ensureAdminKey without BATON_ADMIN_KEY (first start)', () => {
  let fresh: TestService;
  let deps: ServiceDeps;
  beforeAll(async () => {
    fresh = await startTestService();
    deps = { ...fresh.deps, config: { ...fresh.deps.config, adminKey: undefined } };
  });
  afterAll(() => fresh.close());

  it('returns a new admin key exactly once; it works on the admin API; a second call returns null', async () => {
    const key = await ensureAdminKey(deps);
    expect(key).toMatch(/^bt_admin_[A-Za-z0-9_-]{43}$/);
    expect(await ensureAdminKey(deps)).toBeNull();

    const rows = await fresh.store.db.select().from(apiKeys);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ tenantId: null, scopes: ['admin'], secretHash: sha256Hex(key!), revokedAt: null });

    const app = createApp(deps);
    const created = await app.request('/v1/admin/tenants', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'first tenant' }),
    });
    expect(created.status).toBe(201);
    // It is an admin key only: tenant routes refuse it.
    expect((await call(probeApp(deps), '/probe/verify', `Bearer ${key}`)).status).toBe(403);

    // Revoked (e.g. leaked), the next start mints a replacement.
    await fresh.store.db.update(apiKeys).set({ revokedAt: new Date() }).where(eq(apiKeys.id, rows[0]!.id));
    expect((await call(probeApp({ ...deps }), '/probe/audit-or-admin', `Bearer ${key}`)).status).toBe(401);
    const replacement = await ensureAdminKey(deps);
    expect(replacement).toMatch(/^bt_admin_/);
    expect(replacement).not.toBe(key);
  });

  it('mints exactly one key when several nodes start together on one database', async () => {
    const db = await freshDatabase();
    try {
      const nodes = Array.from({ length: 4 }, () => ({ ...deps, store: db.store }));
      const keys = await Promise.all(nodes.map((n) => ensureAdminKey(n)));
      expect(keys.filter((k) => k !== null)).toHaveLength(1);
      expect(await db.store.db.$count(apiKeys)).toBe(1);
    } finally {
      await db.drop();
    }
  });

  it('works on embedded PGlite too', { timeout: 90_000 }, async () => {
    const lite: { store: Store; drop(): Promise<void> } = await freshPglite();
    try {
      const node: ServiceDeps = { ...deps, store: lite.store };
      const key = await ensureAdminKey(node);
      expect(key).toMatch(/^bt_admin_/);
      expect(await ensureAdminKey(node)).toBeNull();
      expect((await authenticate(node, `Bearer ${key}`)).scopes).toEqual(['admin']);
    } finally {
      await lite.drop();
    }
  });
});
