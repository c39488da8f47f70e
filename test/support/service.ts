/**
 * A Baton app on its own fresh real-PostgreSQL database, driven in-process
 * with app.request (real HTTP sockets are used where concurrency matters).
 */
import { randomBytes } from 'node:crypto';
import { serve, type ServerType } from '@hono/node-server';
import { loadConfig } from '../../src/config.js';
import { createApp } from '../../src/service/app.js';
import { createServiceDeps } from '../../src/service/deps.js';
import { silentLogger, type Logger } from '../../src/service/log.js';
import type { ServiceDeps } from '../../src/service/types.js';
import type { Store } from '../../src/store/db.js';
import { freshDatabase, freshPglite } from '../setup/db.js';
import { T0, TOOL_SERVER } from './fixtures.js';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';

export interface CallResult {
  status: number;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any -- tests inspect arbitrary JSON
  headers: Headers;
}

export interface TestService {
  app: ReturnType<typeof createApp>;
  deps: ServiceDeps;
  store: Store;
  url: string;
  adminKey: string;
  /** The service clock (unix seconds); tests move it. */
  clock: { now: number };
  call(
    method: string,
    path: string,
    opts?: { key?: string; json?: unknown; body?: string; headers?: Record<string, string> },
  ): Promise<CallResult>;
  close(): Promise<void>;
}

/** Requests `app` in process as a client would; the answer's body is parsed when it is JSON, else kept as text. */
export function callerOf(app: ReturnType<typeof createApp>): TestService['call'] {
  return async (method, path, o = {}) => {
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    if (o.key) headers['authorization'] = `Bearer ${o.key}`;
    let body: string | undefined = o.body;
    if (o.json !== undefined) {
      body = JSON.stringify(o.json);
      headers['content-type'] ??= 'application/json';
    }
    const res = await app.request(path, { method, headers, ...(body !== undefined ? { body } : {}) });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      /* not JSON: keep text */
    }
    return { status: res.status, body: parsed, headers: res.headers };
  };
}

/** The configuration of a whole server (startServer) on a TestService's database, keys and admin key, on a free port. */
export function serverConfigOf(svc: TestService, env: Record<string, string> = {}): ReturnType<typeof loadConfig> {
  return loadConfig({
    DATABASE_URL: svc.url,
    BATON_MASTER_KEY: Buffer.from(svc.deps.masterKey).toString('hex'),
    BATON_ADMIN_KEY: svc.adminKey,
    PORT: '0',
    ...env,
  });
}

export async function startTestService(
  opts: { env?: Record<string, string>; pool?: number; driver?: 'postgres' | 'pglite'; log?: Logger } = {},
): Promise<TestService> {
  const db = opts.driver === 'pglite' ? { ...(await freshPglite()), url: '' } : await freshDatabase({ max: opts.pool ?? 5 });
  const adminKey = `test-admin-${randomBytes(16).toString('hex')}`;
  const masterKey = randomBytes(32);
  const config = loadConfig({ BATON_ADMIN_KEY: adminKey, BATON_MASTER_KEY: masterKey.toString('hex'), ...opts.env });
  const clock = { now: T0 };
  const deps = await createServiceDeps({ store: db.store, config, log: opts.log ?? silentLogger, masterKey, now: () => clock.now });
  const app = createApp(deps);
  return {
    app,
    deps,
    store: db.store,
    url: db.url,
    adminKey,
    clock,
    call: callerOf(app),
    close: () => db.drop(),
  };
}

export interface TestTenant {
  id: string;
  /** A trusted root key of the tenant. */
  root: KeyPair;
  keys: { issue: string; verify: string; report: string; audit: string };
}

/** A tenant with one trusted root and one API key per scope, made through the admin API. */
export async function setupTenant(svc: TestService, name = 'acme'): Promise<TestTenant> {
  const admin = { key: svc.adminKey };
  const t = await svc.call('POST', '/v1/admin/tenants', { ...admin, json: { name } });
  if (t.status !== 201) throw new Error(`tenant: ${t.status} ${JSON.stringify(t.body)}`);
  const id = t.body.id as string;
  const root = generateKeyPair();
  const r = await svc.call('POST', `/v1/admin/tenants/${id}/roots`, { ...admin, json: { did: root.did, label: 'test root' } });
  if (r.status !== 201) throw new Error(`root: ${r.status} ${JSON.stringify(r.body)}`);
  const keys: Record<string, string> = {};
  for (const scope of ['issue', 'verify', 'report', 'audit']) keys[scope] = await createTenantKey(svc, id, [scope], scope);
  return { id, root, keys: keys as TestTenant['keys'] };
}

/** A new API key of the tenant with these scopes, made through the admin API; its secret. */
export async function createTenantKey(svc: TestService, tenantId: string, scopes: readonly string[], name: string): Promise<string> {
  return (await createTenantKeyWithId(svc, tenantId, scopes, name)).key;
}

/** createTenantKey, with the key's id (for the admin routes that name it: rotate, revoke). */
export async function createTenantKeyWithId(
  svc: TestService,
  tenantId: string,
  scopes: readonly string[],
  name: string,
): Promise<{ id: string; key: string }> {
  const k = await svc.call('POST', `/v1/admin/tenants/${tenantId}/api-keys`, { key: svc.adminKey, json: { scopes, name } });
  if (k.status !== 201) throw new Error(`key: ${k.status} ${JSON.stringify(k.body)}`);
  return { id: k.body.id as string, key: k.body.key as string };
}

/** The app on a real socket (127.0.0.1, a free port), for tests where concurrency or the Node request path matters. */
export async function listenOnSocket(svc: TestService): Promise<{ url: string; port: number; close(): Promise<void> }> {
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: svc.app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return { url: `http://127.0.0.1:${port}`, port, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

let verifySeq = 0;

/**
 * POST /v1/verify with `key` for a web_search invocation through `chain`,
 * signed by `invoker` at T0 and declaring 0.25 USD; `args` override those.
 * Each call gets a fresh jti unless one is given (a replay).
 */
export async function verifyInvocation(
  svc: TestService,
  key: string,
  chain: SignedDelegation[],
  invoker: KeyPair,
  args: Record<string, unknown> = {},
  jti = `inv:t-${++verifySeq}`,
) {
  const invocation = createInvocation({
    chain,
    invoker,
    args: { tool: 'web_search', estimated_cost_usd: 0.25, pii_access: false, write_access: false, ...args },
    toolServer: TOOL_SERVER,
    iat: T0,
    jti,
  });
  const res = await svc.call('POST', '/v1/verify', { key, json: makeBundle(invocation, chain) });
  return { jti, invocation, res };
}

/**
 * Stores, for `tenant`, a root to A and two leaves under it, A to B (leafA)
 * and A to C (leafB), all with `policy`, issued at T0 and valid an hour.
 */
export async function storeTwoLeaves(svc: TestService, tenant: TestTenant, policy: Policy, A: KeyPair, B: KeyPair, C: KeyPair) {
  const root = createRootDelegation({ issuer: tenant.root, audience: A.did, policy, iat: T0, nbf: T0 - 100, exp: T0 + 3600 });
  const leafA = createSubDelegation({ parent: root, issuer: A, audience: B.did, policy, iat: T0 });
  const leafB = createSubDelegation({ parent: root, issuer: A, audience: C.did, policy, iat: T0 });
  for (const chain of [[root, leafA], [leafB]]) {
    const r = await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: chain.map((d) => d.jws) } });
    if (r.status !== 201) throw new Error(`Storing the delegations answered ${r.status}: ${JSON.stringify(r.body)}`);
  }
  return { root, leafA, leafB };
}
