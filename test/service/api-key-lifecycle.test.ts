/**
 * API keys: expiry, rotation without downtime, and a coarse last-used time,
 * on real PostgreSQL, with a second node (its own auth cache, the same
 * database) to show every node refuses an expired or retired key at once.
 */
import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../src/service/app.js';
import { apiKeyCacheOf, authenticate, LAST_USED_INTERVAL_MS } from '../../src/service/auth.js';
import type { Db } from '../../src/store/db.js';
import { rows } from '../../src/store/rows.js';
import { silentLogger } from '../../src/service/log.js';
import type { ServiceDeps } from '../../src/service/types.js';
import { apiKeys } from '../../src/store/schema/index.js';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import { ARGS, T0 } from '../support/fixtures.js';
import { secondNodeApp } from '../support/nodes.js';
import { callerOf, setupTenant, startTestService, type CallResult, type TestService, type TestTenant } from '../support/service.js';

let svc: TestService;
let tenant: TestTenant;
let seq = 0;
beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc, 'lifecycle');
});
afterAll(async () => svc?.close());

const admin = () => ({ key: svc.adminKey });
const codeOf = (r: CallResult): string | undefined => r.body?.error?.code;

type Call = (method: string, path: string, key: string, json?: unknown) => Promise<CallResult>;

/** `call` with the key and the JSON body as arguments. */
const withKey =
  (call: TestService['call']): Call =>
  (method, path, key, json) =>
    call(method, path, { key, ...(json !== undefined ? { json } : {}) });

/** A second service node: its own caches (and, if given, its own log), the same database. */
function otherNode(log: ServiceDeps['log'] = svc.deps.log): { deps: ServiceDeps; call: Call } {
  const deps: ServiceDeps = { ...svc.deps, log };
  return { deps, call: withKey(callerOf(createApp(deps))) };
}

async function newKey(body: Record<string, unknown>): Promise<{ id: string; key: string; body: CallResult['body'] }> {
  const res = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, { ...admin(), json: body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { id: res.body.id, key: res.body.key, body: res.body };
}

async function listed(id: string) {
  const res = await svc.call('GET', `/v1/admin/tenants/${tenant.id}/api-keys`, admin());
  return (res.body.api_keys as { id: string; expires_at: string | null; last_used_at: string | null; rotated_from: string | null }[]).find(
    (k) => k.id === id,
  );
}

/** A stored chain and a fresh invocation bundle under it, on the service clock. */
async function bundle(): Promise<object> {
  const a = generateKeyPair();
  const b: KeyPair = generateKeyPair();
  const jti = (prefix: 'dr' | 'inv') => `${prefix}:lc-${Date.now().toString(36)}-${(seq++).toString(36)}`;
  const root = createRootDelegation({
    issuer: tenant.root,
    audience: a.did,
    policy: {},
    iat: T0,
    nbf: T0 - 100,
    exp: T0 + 3600,
    jti: jti('dr'),
  });
  const sub = createSubDelegation({ parent: root, issuer: a, audience: b.did, policy: {}, iat: T0, jti: jti('dr') });
  const chain: SignedDelegation[] = [root, sub];
  const stored = await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: chain.map((d) => d.jws) } });
  expect(stored.status).toBeLessThan(300);
  return makeBundle(createInvocation({ chain, invoker: b, args: ARGS, toolServer: 'mcp://tools', iat: T0, jti: jti('inv') }), chain);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('expiry', () => {
  it('a key created with expires_in_seconds carries expires_at; bad lifetimes are 400', async () => {
    const before = Date.now();
    const k = await newKey({ scopes: ['audit'], expires_in_seconds: 3600 });
    const expires = Date.parse(k.body.expires_at);
    expect(expires).toBeGreaterThan(before + 3590_000);
    expect(expires).toBeLessThan(Date.now() + 3610_000);
    expect(k.body).toMatchObject({ rotated_from: null });
    expect(await listed(k.id)).toMatchObject({ expires_at: k.body.expires_at, last_used_at: null, rotated_from: null });
    expect((await newKey({ scopes: ['audit'] })).body.expires_at).toBeNull();

    for (const bad of [0, -1, 1.5, '60', 11 * 365 * 86_400]) {
      const res = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
        ...admin(),
        json: { scopes: ['audit'], expires_in_seconds: bad },
      });
      expect(res.status, String(bad)).toBe(400);
      expect(codeOf(res)).toBe('INVALID_REQUEST');
    }
  });

  it('an expired key is refused at once on every node, even one that has it cached, and by verify', async () => {
    // Everything slow is prepared before the key exists: the key's real-time life must cover only
    // the two calls that cache it, with room to spare on a loaded machine.
    const before = await bundle();
    const after = await bundle();
    const b = otherNode();
    const k = await newKey({ scopes: ['verify', 'audit'], expires_in_seconds: 3 });
    expect((await b.call('GET', '/v1/service-receipts', k.key)).status).toBe(200);
    expect((await b.call('POST', '/v1/verify', k.key, before)).status).toBe(200); // cached on node B now
    expect(apiKeyCacheOf(b.deps).size).toBeGreaterThan(0);
    const expiresAt = Date.parse((await listed(k.id))!.expires_at!);
    await sleep(Math.max(0, expiresAt - Date.now()) + 50);

    const onB = await b.call('GET', '/v1/service-receipts', k.key);
    expect(onB.status).toBe(401);
    expect(codeOf(onB)).toBe('UNAUTHORIZED');
    expect((await svc.call('GET', '/v1/service-receipts', { key: k.key })).status).toBe(401);
    expect((await svc.call('POST', '/v1/verify', { key: k.key, json: after })).status).toBe(401);
  });

  it('the verify statement itself refuses an expired key that a node still has cached as valid', async () => {
    const k = await newKey({ scopes: ['verify'] });
    const b = otherNode();
    const first = await b.call('POST', '/v1/verify', k.key, await bundle());
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    // Expired behind node B's back (as a rotation elsewhere does): its cache still says valid.
    await svc.store.db
      .update(apiKeys)
      .set({ expiresAt: sql`now() - interval '1 second'` })
      .where(eq(apiKeys.id, k.id));
    const second = await b.call('POST', '/v1/verify', k.key, await bundle());
    expect(second.status).toBe(401);
    expect(codeOf(second)).toBe('UNAUTHORIZED');
    // The refusal evicted it there: node B refuses it everywhere from now on.
    expect((await b.call('POST', '/v1/verify', k.key, await bundle())).status).toBe(401);
  });
});

describe('rotation', () => {
  it('mints a successor with the same grants; both keys work during the grace period, then only the new one', async () => {
    const old = await newKey({ scopes: ['verify'], name: 'gateway', tool_server: 'mcp://tools' });
    const b = otherNode();
    expect((await b.call('POST', '/v1/verify', old.key, await bundle())).status).toBe(200);

    const res = await svc.call('POST', `/v1/admin/api-keys/${old.id}/rotate`, { ...admin(), json: { grace_seconds: 3600 } });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(res.headers.get('cache-control')).toBe('no-store');
    const { key: created, previous } = res.body;
    expect(created).toMatchObject({
      tenant_id: tenant.id,
      scopes: ['verify'],
      name: 'gateway',
      tool_server: 'mcp://tools',
      rotated_from: old.id,
      expires_at: null,
    });
    expect(created.key).toMatch(/^bt_[A-Za-z0-9_-]{43}$/);
    expect(previous.id).toBe(old.id);
    expect(Date.parse(previous.expires_at)).toBeGreaterThan(Date.now() + 3590_000);

    // The window: both keys verify, on both nodes; the new one without any delay.
    expect((await b.call('POST', '/v1/verify', created.key, await bundle())).status).toBe(200);
    expect((await svc.call('POST', '/v1/verify', { key: old.key, json: await bundle() })).status).toBe(200);
    expect((await b.call('POST', '/v1/verify', old.key, await bundle())).status).toBe(200);

    // A second rotation while the successor is live is refused (it would mint a live key nobody
    // deployed: a retried rotate whose answer was lost, say), naming the successor to rotate instead.
    const twice = await svc.call('POST', `/v1/admin/api-keys/${old.id}/rotate`, { ...admin(), json: { grace_seconds: 86_400 } });
    expect(twice.status).toBe(409);
    expect(codeOf(twice)).toBe('CONFLICT');
    expect(twice.body.error.details).toEqual({ successor: created.id });
    expect(twice.body.error.suggestion).toContain(created.id);
    expect((await svc.call('POST', '/v1/verify', { key: old.key, json: await bundle() })).status).toBe(200);

    // Once that successor is revoked, the old key may be rotated again; a longer grace never extends it.
    const lost = await newKey({ scopes: ['verify'], name: 'gateway', tool_server: 'mcp://tools' });
    const first = await svc.call('POST', `/v1/admin/api-keys/${lost.id}/rotate`, { ...admin(), json: { grace_seconds: 3600 } });
    expect((await svc.call('DELETE', `/v1/admin/api-keys/${first.body.key.id}`, admin())).status).toBe(204);
    const again = await svc.call('POST', `/v1/admin/api-keys/${lost.id}/rotate`, { ...admin(), json: { grace_seconds: 86_400 } });
    expect(again.status, JSON.stringify(again.body)).toBe(201);
    expect(again.body.previous.expires_at).toBe(first.body.previous.expires_at);

    // Nor while a successor of its successor is live: K1 -> K2 -> K3 with K2 retired at once left K1
    // in its grace, and a rotation of K1 would mint K4 beside K3 (two live lines of one holder).
    const k1 = await newKey({ scopes: ['verify'], name: 'gateway' });
    const k2 = await svc.call('POST', `/v1/admin/api-keys/${k1.id}/rotate`, { ...admin(), json: { grace_seconds: 3600 } });
    const k3 = await svc.call('POST', `/v1/admin/api-keys/${k2.body.key.id}/rotate`, { ...admin(), json: { grace_seconds: 0 } });
    expect(k3.status).toBe(201);
    const fork = await svc.call('POST', `/v1/admin/api-keys/${k1.id}/rotate`, admin());
    expect(fork.status, JSON.stringify(fork.body)).toBe(409);
    expect(fork.body.error.details).toEqual({ successor: k3.body.key.id });
    // With two live below it, the newest is named: the one to rotate instead.
    const j1 = await newKey({ scopes: ['verify'], name: 'gateway' });
    const j2 = await svc.call('POST', `/v1/admin/api-keys/${j1.id}/rotate`, { ...admin(), json: { grace_seconds: 3600 } });
    const j3 = await svc.call('POST', `/v1/admin/api-keys/${j2.body.key.id}/rotate`, { ...admin(), json: { grace_seconds: 3600 } });
    const named = await svc.call('POST', `/v1/admin/api-keys/${j1.id}/rotate`, admin());
    expect(named.status).toBe(409);
    expect(named.body.error.details).toEqual({ successor: j3.body.key.id });

    // grace 0 retires the old key now: verify refuses it at once on the node that cached it.
    const now = await svc.call('POST', `/v1/admin/api-keys/${created.id}/rotate`, { ...admin(), json: { grace_seconds: 0 } });
    expect(now.status).toBe(201);
    expect((await b.call('POST', '/v1/verify', created.key, await bundle())).status).toBe(401);
    expect((await svc.call('POST', '/v1/verify', { key: created.key, json: await bundle() })).status).toBe(401);
    expect((await b.call('POST', '/v1/verify', now.body.key.key, await bundle())).status).toBe(200);
  });

  it('a node that cached a key revoked since refuses its verify with the same 401, and logs the key with the request id', async () => {
    const k = await newKey({ scopes: ['verify'] });
    const infos: Record<string, unknown>[] = [];
    const b = otherNode({ ...silentLogger, info: (_msg, fields) => void infos.push(fields ?? {}) });
    expect((await b.call('POST', '/v1/verify', k.key, await bundle())).status).toBe(200);
    expect((await svc.call('DELETE', `/v1/admin/api-keys/${k.id}`, admin())).status).toBe(204);
    const refused = await b.call('POST', '/v1/verify', k.key, await bundle());
    expect(refused.status).toBe(401);
    expect(infos.filter((f) => f['key_id'] === k.id && 'reason' in f)).toEqual([
      { key_id: k.id, reason: 'revoked or expired', request_id: refused.headers.get('x-request-id') },
    ]);
  });

  it("an empty body takes the defaults (24 h grace); expires_in_seconds sets the new key's lifetime", async () => {
    const old = await newKey({ scopes: ['audit'] });
    const res = await svc.call('POST', `/v1/admin/api-keys/${old.id}/rotate`, admin());
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(Math.abs(Date.parse(res.body.previous.expires_at) - (Date.now() + 86_400_000))).toBeLessThan(60_000);
    const limited = await svc.call('POST', `/v1/admin/api-keys/${res.body.key.id}/rotate`, {
      ...admin(),
      json: { expires_in_seconds: 600 },
    });
    expect(Math.abs(Date.parse(limited.body.key.expires_at) - (Date.now() + 600_000))).toBeLessThan(60_000);
  });

  it('refusals: unknown key 404, revoked or expired 409, bad body 400, tenant key 403, no key 401', async () => {
    expect((await svc.call('POST', '/v1/admin/api-keys/key_nothing/rotate', admin())).status).toBe(404);
    expect((await svc.call('POST', '/v1/admin/api-keys/admin:env/rotate', admin())).status).toBe(404);
    const revoked = await newKey({ scopes: ['audit'] });
    await svc.call('DELETE', `/v1/admin/api-keys/${revoked.id}`, admin());
    const r = await svc.call('POST', `/v1/admin/api-keys/${revoked.id}/rotate`, admin());
    expect(r.status).toBe(409);
    expect(codeOf(r)).toBe('CONFLICT');
    const expired = await newKey({ scopes: ['audit'] });
    await svc.store.db
      .update(apiKeys)
      .set({ expiresAt: sql`now() - interval '1 second'` })
      .where(eq(apiKeys.id, expired.id));
    expect((await svc.call('POST', `/v1/admin/api-keys/${expired.id}/rotate`, admin())).status).toBe(409);

    const live = await newKey({ scopes: ['audit'] });
    for (const json of [{ grace_seconds: -1 }, { grace_seconds: 31 * 86_400 }, { grace_seconds: 'soon' }, { surprise: 1 }]) {
      const bad = await svc.call('POST', `/v1/admin/api-keys/${live.id}/rotate`, { ...admin(), json });
      expect(bad.status, JSON.stringify(json)).toBe(400);
      expect(codeOf(bad)).toBe('INVALID_REQUEST');
    }
    expect((await svc.call('POST', `/v1/admin/api-keys/${live.id}/rotate`, { key: tenant.keys.audit })).status).toBe(403);
    expect((await svc.call('POST', `/v1/admin/api-keys/${live.id}/rotate`)).status).toBe(401);
    // None of the refusals changed the key.
    expect(await listed(live.id)).toMatchObject({ expires_at: null });
  });
});

describe('last use', () => {
  it('is recorded in the background, at most once a minute per key and node', async () => {
    const k = await newKey({ scopes: ['audit'] });
    expect((await listed(k.id))?.last_used_at).toBeNull();
    expect((await svc.call('GET', '/v1/service-receipts', { key: k.key })).status).toBe(200);
    let first: string | null | undefined = null;
    for (let i = 0; i < 50 && !first; i++) {
      await sleep(20);
      first = (await listed(k.id))?.last_used_at;
    }
    expect(first).not.toBeNull();
    // Used again within the minute: nothing is written (the time stays).
    for (let i = 0; i < 3; i++) await svc.call('GET', '/v1/service-receipts', { key: k.key });
    await sleep(100);
    expect((await listed(k.id))?.last_used_at).toBe(first);
    expect(LAST_USED_INTERVAL_MS).toBe(60_000);
  });

  it('costs one background UPDATE per key per minute on a node, however often the key is used', async () => {
    const k = await newKey({ scopes: ['audit'] });
    let updates = 0;
    const counting = new Proxy(svc.store.db, {
      get(target, prop, receiver) {
        if (prop === 'update') updates++;
        return Reflect.get(target, prop, receiver);
      },
    }) as Db;
    const node: ServiceDeps = { ...svc.deps, store: { ...svc.store, db: counting } };
    for (let i = 0; i < 20; i++) expect((await authenticate(node, `Bearer ${k.key}`)).keyId).toBe(k.id);
    expect(updates).toBe(1);
  });
});

/**
 * Every node refuses a revoked, expired or rotated-out key on every route at
 * once, also right after it served that key: node B is a second service
 * instance with its own pool and caches on the same PostgreSQL, and the key's
 * state changes through node A (or behind both nodes' backs in the database).
 */
describe('revocation, expiry and rotation take effect at once on every route of every node', () => {
  // One route of each router a tenant key reaches besides verify; each answers a live key with something other than 401.
  const ROUTES: readonly (readonly [string, string, unknown?])[] = [
    ['GET', '/v1/service-receipts'],
    ['GET', '/v1/tools'],
    ['GET', '/v1/approvals'],
    ['GET', `/v1/delegations/sha256:${'0'.repeat(64)}`],
    ['GET', '/v1/invocations/inv:absent'],
    ['POST', '/v1/invocations/inv:absent/actuals', { source: 'provider', cost_usd: 1 }],
    ['GET', '/v1/log/checkpoint'],
    ['POST', `/v1/delegations/sha256:${'0'.repeat(64)}/revoke`, {}],
  ];
  const ALL_SCOPES = ['issue', 'verify', 'report', 'audit', 'approve'];

  let nodeB: { call: Call; close: () => Promise<void> };
  beforeAll(async () => {
    const { app, close } = await secondNodeApp(svc, 3);
    nodeB = { call: withKey(callerOf(app)), close };
  });
  afterAll(async () => nodeB?.close());

  /** Uses the key on every route of node B (and verify), so anything node B could cache is cached. */
  async function warm(key: string): Promise<void> {
    for (const [method, path, json] of ROUTES) {
      const res = await nodeB.call(method, path, key, json);
      expect(res.status, `${method} ${path} ${JSON.stringify(res.body)}`).not.toBe(401);
    }
    expect((await nodeB.call('POST', '/v1/verify', key, await bundle())).status).toBe(200);
  }

  async function refusedEverywhere(key: string): Promise<void> {
    for (const [method, path, json] of [...ROUTES, ['POST', '/v1/verify', await bundle()] as const]) {
      for (const [node, call] of [
        ['B', nodeB.call],
        ['A', withKey(svc.call)],
      ] as const) {
        const res = await call(method, path, key, json);
        expect(res.status, `node ${node}: ${method} ${path}`).toBe(401);
        expect(codeOf(res)).toBe('UNAUTHORIZED');
      }
    }
  }

  it('a key revoked through node A', async () => {
    const k = await newKey({ scopes: ALL_SCOPES });
    await warm(k.key);
    expect((await svc.call('DELETE', `/v1/admin/api-keys/${k.id}`, admin())).status).toBe(204);
    await refusedEverywhere(k.key);
  });

  it('a key expired behind both nodes (its expires_at moved into the past in the database)', async () => {
    const k = await newKey({ scopes: ALL_SCOPES });
    await warm(k.key);
    await svc.store.db
      .update(apiKeys)
      .set({ expiresAt: sql`now() - interval '1 second'` })
      .where(eq(apiKeys.id, k.id));
    await refusedEverywhere(k.key);
  });

  it('the old key after its rotation window (grace 0), while the new key works on node B at once', async () => {
    const k = await newKey({ scopes: ALL_SCOPES });
    await warm(k.key);
    const rotated = await svc.call('POST', `/v1/admin/api-keys/${k.id}/rotate`, { ...admin(), json: { grace_seconds: 0 } });
    expect(rotated.status).toBe(201);
    await refusedEverywhere(k.key);
    await warm(rotated.body.key.key);
  });
});

/** A promise and the function that resolves it. */
function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('the stored revocation and expiry of a key come after every call it was allowed', () => {
  /**
   * Verifies read the key without locking it, so one can be allowed while a revocation waits to
   * commit. Here that wait is made long and certain: the key's row is held locked, so the
   * revocation (or rotation) takes its now() and then waits while a verify is allowed.
   */
  async function allowedWhileHeld(keyId: string, key: string, change: () => Promise<CallResult>): Promise<CallResult> {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const lockedNow = new Promise<void>((r) => (locked = r));
    const holder = svc.store.db.transaction(async (tx) => {
      await tx.execute(sql`select 1 from api_keys where id = ${keyId} for update`);
      locked();
      await held;
    });
    let changed: Promise<CallResult> | undefined;
    try {
      await lockedNow;
      changed = change();
      // Until the change waits on the lock, its now() may not have been taken yet.
      for (let i = 0; i < 100; i++) {
        const waiting = await rows(
          svc.store.db,
          sql`select 1 as one from pg_stat_activity where wait_event_type = 'Lock' and query ilike '%api_keys%' and pid <> pg_backend_pid()`,
        );
        if (waiting.length > 0) break;
        await sleep(20);
      }
      const allowed = await svc.call('POST', '/v1/verify', { key, json: await bundle() });
      expect(allowed.status, JSON.stringify(allowed.body)).toBe(200);
    } finally {
      release();
      await holder;
    }
    return changed!;
  }

  const usesAtOrAfter = async (keyId: string, column: 'revoked_at' | 'expires_at') =>
    (
      await rows(
        svc.store.db,
        sql`select i.jti from invocations i join api_keys k on k.id = i.caller_key_id
             where k.id = ${keyId} and i.created_at >= k.${sql.raw(column)}`,
      )
    ).length;

  it('revocation: revoked_at is later than the created_at of a verify that saw the key live', async () => {
    const k = await newKey({ scopes: ['verify'] });
    const revoked = await allowedWhileHeld(k.id, k.key, () => svc.call('DELETE', `/v1/admin/api-keys/${k.id}`, admin()));
    expect(revoked.status).toBe(204);
    expect(await usesAtOrAfter(k.id, 'revoked_at')).toBe(0);
    // The time the API shows is that stored time, to the millisecond.
    const [row] = await svc.store.db.select({ revokedAt: apiKeys.revokedAt }).from(apiKeys).where(eq(apiKeys.id, k.id));
    const [used] = await rows<{ at: string }>(
      svc.store.db,
      sql`select max(created_at)::text as at from invocations where caller_key_id = ${k.id}`,
    );
    expect(row!.revokedAt!.getTime()).toBeGreaterThan(new Date(used!.at).getTime());
    expect((await svc.call('POST', '/v1/verify', { key: k.key, json: await bundle() })).status).toBe(401);
  });

  it('rotation with grace 0: the old key expires after the created_at of a verify that saw it live', async () => {
    const k = await newKey({ scopes: ['verify'] });
    const rotated = await allowedWhileHeld(k.id, k.key, () =>
      svc.call('POST', `/v1/admin/api-keys/${k.id}/rotate`, { ...admin(), json: { grace_seconds: 0 } }),
    );
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(201);
    expect(await usesAtOrAfter(k.id, 'expires_at')).toBe(0);
    expect(Date.parse(rotated.body.previous.expires_at)).toBeLessThanOrEqual(Date.now());
    expect((await svc.call('POST', '/v1/verify', { key: k.key, json: await bundle() })).status).toBe(401);
  });

  it('rotation: a database that stops answering after the commit does not keep the new secret from its caller', async () => {
    const k = await newKey({ scopes: ['verify'] });
    // H1 holds the old key's row, so the rotation queues on it; H2 queues behind the rotation and
    // takes the row the moment the rotation commits, so only the write after the commit waits.
    const lockers = [signal(), signal()];
    const releases = [signal(), signal()];
    const hold = (i: number, mode: string) =>
      svc.store.db.transaction(async (tx) => {
        await tx.execute(sql`select 1 from api_keys where id = ${k.id} ${sql.raw(mode)}`);
        lockers[i]!.resolve();
        await releases[i]!.promise;
      });
    const waitingOnLock = async (n: number) => {
      for (let i = 0; i < 200; i++) {
        const waiting = await rows(
          svc.store.db,
          sql`select 1 as one from pg_stat_activity where wait_event_type = 'Lock' and query ilike '%api_keys%' and pid <> pg_backend_pid()`,
        );
        if (waiting.length >= n) return;
        await sleep(20);
      }
      throw new Error(`expected ${n} statements waiting on the key's row`);
    };
    const h1 = hold(0, 'for update');
    let h2: Promise<void> | undefined;
    try {
      await lockers[0]!.promise;
      const rotated = svc.call('POST', `/v1/admin/api-keys/${k.id}/rotate`, { ...admin(), json: { grace_seconds: 0 } });
      await waitingOnLock(1);
      h2 = hold(1, 'for share');
      await waitingOnLock(2);
      releases[0]!.resolve();
      await lockers[1]!.promise; // the rotation has committed; its second write now waits on H2
      const answer = await rotated;
      expect(answer.status, JSON.stringify(answer.body)).toBe(201);
      expect(answer.body.key.key).toMatch(/^bt_/);
    } finally {
      releases[0]!.resolve();
      releases[1]!.resolve();
      await h1;
      await h2;
    }
  });
});
