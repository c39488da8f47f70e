/**
 * openapi.yaml is the contract; these tests hold the code to it.
 *
 * (a) Routes: every route registered in the Hono app is documented with the
 *     same method and path, and every documented operation is served.
 * (b) Responses: a realistic scenario drives the real app on real PostgreSQL
 *     through every operation's success and failure statuses; every response
 *     must have a documented status and content type, and a body that
 *     validates against the documented JSON Schema (2020-12, ajv strict).
 *     Every documented (operation, status) pair must be observed, except
 *     500, which no correct request produces. Accepted request bodies must
 *     validate against the documented request schemas.
 * (c) Auth: every operation needing a key answers 401 without one, and the
 *     scopes it accepts are exactly its documented x-baton-scopes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICE_ERROR_CODES } from '../../src/protocol/errors.js';
import { signJws } from '../../src/protocol/jws.js';
import { encodeBase64url } from '../../src/protocol/base64url.js';
import { utf8Encode } from '../../src/protocol/jcs.js';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createApprovalDecision } from '../../src/sdk/tools.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import { createApp } from '../../src/service/app.js';
import { freshDatabase } from '../setup/db.js';
import { createTenantKey, setupTenant, startTestService, type CallResult, type TestService, type TestTenant } from '../support/service.js';
import { createSubDelegationUnchecked, ARGS, T0, TOOL_SERVER } from '../support/fixtures.js';
import { cosignatureSigner } from '../../src/protocol/cosignature.js';
import { publicKeyFromSeed } from '../../src/protocol/ed25519.js';
import { COSIGNATURE_V1, formatVerifierKey, parseNote, signNote, verifierKey } from '../../src/protocol/note.js';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { silentLogger } from '../../src/service/log.js';
import { Contract, deref, honoPathToOpenApi, loadSpec, pointer, type Json } from './spec.js';

type App = ReturnType<typeof createApp>;

interface CallOptions {
  key?: string;
  json?: unknown;
  body?: string;
  headers?: Record<string, string>;
  /** Another app instance (the one whose database is down). */
  app?: App;
}

let svc: TestService;
let contract: Contract;
let tenant: TestTenant;
let other: TestTenant;
let downApp: App;
let dropDown: () => Promise<void>;
const problems: string[] = [];

const OVERSIZE = JSON.stringify({ receipt: 'x'.repeat(300 * 1024) });
const UNKNOWN_HASH = `sha256:${'0'.repeat(64)}`;

async function send(app: App, method: string, path: string, o: CallOptions): Promise<CallResult & { contentType: string | null }> {
  const headers: Record<string, string> = { ...(o.headers ?? {}) };
  if (o.key) headers['authorization'] = `Bearer ${o.key}`;
  let body = o.body;
  if (o.json !== undefined) {
    body = JSON.stringify(o.json);
    headers['content-type'] ??= 'application/json';
  }
  if (body !== undefined) headers['content-type'] ??= 'application/json';
  const res = await app.request(path, { method, headers, ...(body !== undefined ? { body } : {}) });
  const text = await res.text();
  const contentType = res.headers.get('content-type');
  let parsed: unknown = text === '' ? undefined : text;
  if (contentType?.startsWith('application/json')) parsed = JSON.parse(text);
  return { status: res.status, body: parsed, headers: res.headers, contentType };
}

/** One request, checked against the spec; `expected` (when given) is the status it must get. */
async function api(method: string, path: string, o: CallOptions = {}, expected?: number): Promise<CallResult> {
  const res = await send(o.app ?? svc.app, method, path, o);
  const op = contract.operationFor(method, path);
  if (expected !== undefined) {
    expect(res.status, `${method} ${path}: ${JSON.stringify(res.body)?.slice(0, 600)}`).toBe(expected);
  }
  const found = contract.check(op, res.status, res.contentType, res.body);
  // Every response carries X-Request-Id (components/headers/RequestId), equal to an error body's request_id.
  const requestId = res.headers.get('x-request-id');
  if (requestId === null) found.push(`${method} ${path} ${res.status}: no X-Request-Id header`);
  else if (typeof (res.body as { request_id?: unknown } | undefined)?.request_id === 'string' && res.body.request_id !== requestId)
    found.push(`${method} ${path} ${res.status}: X-Request-Id ${requestId} is not the body's request_id ${res.body.request_id}`);
  if (res.status < 300 && o.json !== undefined) found.push(...contract.checkRequest(op, o.headers?.['content-type'], o.json));
  problems.push(...found);
  expect(found, found.join('\n')).toEqual([]);
  return res;
}

beforeAll(async () => {
  contract = new Contract(loadSpec());
  svc = await startTestService();
  tenant = await setupTenant(svc, 'acme');
  other = await setupTenant(svc, 'other');
  // A node whose database is gone: everything that needs it must refuse with 503.
  const down = await freshDatabase();
  await down.store.close();
  downApp = createApp({ ...svc.deps, store: down.store });
  dropDown = down.drop;
});

afterAll(async () => {
  await dropDown?.();
  await svc?.close();
});

// ---------------------------------------------------------------- the spec itself

describe('openapi.yaml is a well-formed contract', () => {
  it('every component schema compiles in ajv strict mode (JSON Schema 2020-12)', () => {
    expect(contract.spec.openapi).toMatch(/^3\.1\./);
    contract.compileAllComponents();
  });

  it('every reference resolves; operationIds are unique; tags are declared', () => {
    const refs: string[] = [];
    const walk = (v: Json) => {
      if (Array.isArray(v)) v.forEach(walk);
      else if (v && typeof v === 'object')
        for (const [k, x] of Object.entries(v)) {
          if (k === '$ref' && typeof x === 'string') refs.push(x);
          else walk(x);
        }
    };
    walk(contract.spec);
    for (const ref of refs) expect(() => pointer(contract.spec, ref), ref).not.toThrow();
    const ids = contract.operations.map((o) => o.id);
    expect(ids.every((id) => typeof id === 'string')).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    const tags = new Set(contract.spec.tags.map((t: { name: string }) => t.name));
    for (const o of contract.operations) {
      expect(o.op.tags?.length, o.id).toBeGreaterThan(0);
      for (const t of o.op.tags) expect(tags.has(t), `${o.id}: tag ${t}`).toBe(true);
    }
  });

  it('the ErrorCode enum is exactly the service codes of ERROR_TABLE', () => {
    expect(contract.spec.components.schemas.ErrorCode.enum).toEqual(SERVICE_ERROR_CODES);
  });

  it('path parameters match the path templates; every operation states its scopes and its 500', () => {
    for (const o of contract.operations) {
      const inPath = [...o.path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
      const declared = (o.op.parameters ?? []).map((p: Json) => deref(contract.spec, p)).filter((p: Json) => p.in === 'path');
      expect(declared.map((p: Json) => p.name).sort(), o.id).toEqual([...inPath].sort());
      for (const p of declared) expect(p.required, `${o.id} ${p.name}`).toBe(true);
      expect(Array.isArray(o.op['x-baton-scopes']), `${o.id}: x-baton-scopes`).toBe(true);
      expect(Array.isArray(o.op.security), `${o.id}: security`).toBe(true);
      expect(o.op.responses['500'], `${o.id}: 500`).toBeDefined();
      const needsKey = o.op.security.length > 0 && !o.op.security.some((s: Json) => Object.keys(s).length === 0);
      if (needsKey) expect(o.op.responses['401'], `${o.id}: 401`).toBeDefined();
      if (o.op.requestBody) expect(o.op.responses['413'], `${o.id}: 413`).toBeDefined();
    }
  });
});

// ---------------------------------------------------------------- (a) routes

describe('(a) the routes the app serves are exactly the documented operations', () => {
  it('app.routes and openapi.yaml agree on every method and path', () => {
    const served = new Set<string>();
    for (const r of svc.app.routes) {
      if (r.method === 'ALL') {
        // Only the global middleware (request id, access log) may match every method.
        expect(r.path, 'an app.all()/app.use() route other than the global middleware').toBe('/*');
        continue;
      }
      served.add(`${r.method.toLowerCase()} ${honoPathToOpenApi(r.path)}`);
    }
    const documented = new Set(contract.operations.map((o) => `${o.method} ${o.path}`));
    const undocumented = [...served].filter((r) => !documented.has(r)).sort();
    const unserved = [...documented].filter((r) => !served.has(r)).sort();
    expect(undocumented, 'served but not in openapi.yaml').toEqual([]);
    expect(unserved, 'in openapi.yaml but not served').toEqual([]);
    expect(documented.size).toBeGreaterThan(20);
  });
});

// ---------------------------------------------------------------- (b) responses

describe('(b) operations: docs, keys and health', () => {
  it('serves the spec and its page, the keys, health, readiness and metrics', async () => {
    await api('GET', '/healthz', {}, 200);
    await api('GET', '/readyz', {}, 200);
    await api('GET', '/readyz', { app: downApp }, 503);
    const metrics = await api('GET', '/metrics', { key: svc.adminKey }, 200);
    expect(String(metrics.body)).toContain('baton_http_requests_total');
    await api('GET', '/metrics', {}, 401);
    // A stored key is looked up; with the database gone that is a 503 (the env admin key needs none).
    await api('GET', '/metrics', { key: `bt_${'A'.repeat(43)}`, app: downApp }, 503);
    await api('GET', '/docs', {}, 200);
    await api('GET', '/openapi.yaml', {}, 200);
    const json = await api('GET', '/openapi.json', {}, 200);
    expect(json.body).toEqual(contract.spec);
    await api('GET', '/v1/keys', {}, 200);
    await api('GET', '/.well-known/jwks.json', {}, 200);
    await api('GET', '/v1/keys', { app: downApp }, 503);
    await api('GET', '/.well-known/jwks.json', { app: downApp }, 503);
  });
});

describe('(b) admin', () => {
  it('tenants', async () => {
    const admin = { key: svc.adminKey };
    await api('POST', '/v1/admin/tenants', { ...admin, json: { name: 'contract' } }, 201);
    await api('POST', '/v1/admin/tenants', { ...admin, json: { name: '   ' } }, 400);
    await api('POST', '/v1/admin/tenants', { json: { name: 'x' } }, 401);
    await api('POST', '/v1/admin/tenants', { key: tenant.keys.audit, json: { name: 'x' } }, 403);
    await api('POST', '/v1/admin/tenants', { ...admin, body: OVERSIZE }, 413);
    await api('POST', '/v1/admin/tenants', { ...admin, json: { name: 'x' }, app: downApp }, 503);
    await api('GET', '/v1/admin/tenants', admin, 200);
    await api('GET', '/v1/admin/tenants', {}, 401);
    await api('GET', '/v1/admin/tenants', { key: tenant.keys.issue }, 403);
    await api('GET', '/v1/admin/tenants', { ...admin, app: downApp }, 503);
  });

  it('trusted roots', async () => {
    const admin = { key: svc.adminKey };
    const roots = `/v1/admin/tenants/${tenant.id}/roots`;
    const extra = generateKeyPair();
    await api('POST', roots, { ...admin, json: { did: extra.did, label: 'extra' } }, 201);
    await api('POST', roots, { ...admin, json: { did: extra.did, label: 'extra' } }, 200);
    await api('POST', roots, { ...admin, json: { did: 'did:key:z6MkNotAKey' } }, 400);
    await api('POST', roots, { ...admin, json: { did: extra.did, surprise: true } }, 400);
    await api('POST', '/v1/admin/tenants/ten_nobody/roots', { ...admin, json: { did: generateKeyPair().did } }, 404);
    await api('POST', `/v1/admin/tenants/${other.id}/roots`, { ...admin, json: { did: tenant.root.did } }, 409);
    await api('POST', roots, { json: { did: extra.did } }, 401);
    await api('POST', roots, { key: tenant.keys.issue, json: { did: extra.did } }, 403);
    await api('POST', `/v1/admin/tenants/${other.id}/roots`, { key: tenant.keys.issue, json: { did: extra.did } }, 404);
    await api('POST', roots, { ...admin, body: OVERSIZE }, 413);
    await api('POST', roots, { ...admin, json: { did: generateKeyPair().did }, app: downApp }, 503);

    await api('GET', roots, admin, 200);
    await api('GET', '/v1/admin/tenants/ten_nobody/roots', admin, 404);
    await api('GET', roots, {}, 401);
    await api('GET', roots, { key: tenant.keys.audit }, 403);
    await api('GET', roots, { ...admin, app: downApp }, 503);

    // It takes no body: one is refused, and the root stays trusted.
    await api('DELETE', `${roots}/${extra.did}`, { ...admin, json: { dry_run: true } }, 400);
    await api('DELETE', `${roots}/${extra.did}`, admin, 204);
    await api('DELETE', `${roots}/${extra.did}`, admin, 404);
    await api('DELETE', `${roots}/${extra.did}`, {}, 401);
    await api('DELETE', `${roots}/${extra.did}`, { key: tenant.keys.audit }, 403);
    await api('DELETE', `${roots}/${extra.did}`, { ...admin, app: downApp }, 503);
  });

  it('API keys', async () => {
    const admin = { key: svc.adminKey };
    const keys = `/v1/admin/tenants/${tenant.id}/api-keys`;
    const created = await api('POST', keys, { ...admin, json: { scopes: ['verify'], name: 'bound', tool_server: 'mcp://contract' } }, 201);
    await api('POST', keys, { ...admin, json: { scopes: [] } }, 400);
    await api('POST', keys, { ...admin, json: { scopes: ['audit'], tool_server: 'mcp://x' } }, 400);
    await api('POST', '/v1/admin/tenants/ten_nobody/api-keys', { ...admin, json: { scopes: ['audit'] } }, 404);
    await api('POST', keys, { json: { scopes: ['audit'] } }, 401);
    await api('POST', keys, { key: tenant.keys.audit, json: { scopes: ['audit'] } }, 403);
    await api('POST', keys, { ...admin, body: OVERSIZE }, 413);
    await api('POST', keys, { ...admin, json: { scopes: ['audit'] }, app: downApp }, 503);

    await api('GET', keys, admin, 200);
    await api('GET', '/v1/admin/tenants/ten_nobody/api-keys', admin, 404);
    await api('GET', keys, {}, 401);
    await api('GET', keys, { key: tenant.keys.verify }, 403);
    await api('GET', keys, { ...admin, app: downApp }, 503);

    const id = (created.body as { id: string }).id;
    await api('DELETE', `/v1/admin/api-keys/${id}`, { ...admin, json: { dry_run: true } }, 400);
    await api('DELETE', `/v1/admin/api-keys/${id}`, admin, 204);
    await api('DELETE', '/v1/admin/api-keys/key_nothing', admin, 404);
    await api('DELETE', `/v1/admin/api-keys/${id}`, {}, 401);
    await api('DELETE', `/v1/admin/api-keys/${id}`, { key: tenant.keys.audit }, 403);
    await api('DELETE', `/v1/admin/api-keys/${id}`, { ...admin, app: downApp }, 503);
    const rotatable = await api('POST', keys, { ...admin, json: { scopes: ['audit'], expires_in_seconds: 86_400 } }, 201);
    const rid = (rotatable.body as { id: string }).id;
    await api('POST', `/v1/admin/api-keys/${rid}/rotate`, { ...admin, json: { grace_seconds: 600 } }, 201);
    await api('POST', `/v1/admin/api-keys/${rid}/rotate`, { ...admin, json: { grace_seconds: -1 } }, 400);
    await api('POST', '/v1/admin/api-keys/key_nothing/rotate', admin, 404);
    await api('POST', `/v1/admin/api-keys/${id}/rotate`, admin, 409); // revoked above
    await api('POST', `/v1/admin/api-keys/${rid}/rotate`, {}, 401);
    await api('POST', `/v1/admin/api-keys/${rid}/rotate`, { key: tenant.keys.audit }, 403);
    await api('POST', `/v1/admin/api-keys/${rid}/rotate`, { ...admin, body: OVERSIZE }, 413);
    await api('POST', `/v1/admin/api-keys/${rid}/rotate`, { ...admin, app: downApp }, 503);
    // The revoked key lists with revoked_at set.
    const listed = await api('GET', keys, admin, 200);
    expect(
      (listed.body as { api_keys: { id: string; revoked_at: string | null }[] }).api_keys.find((k) => k.id === id)?.revoked_at,
    ).not.toBeNull();
  });
});

// A chain R -> A (root) -> B (mid) -> C (leaf), a tight sibling leaf D under
// mid, and further branches for revocation.
const A = generateKeyPair(),
  B = generateKeyPair(),
  C = generateKeyPair(),
  D = generateKeyPair();
const rootPolicy: Policy = { allowed_tools: ['web_search', 'file_read'], max_cost_usd: 5, max_calls: 100, max_spend_usd: 50, max_depth: 4 };
const midPolicy: Policy = { allowed_tools: ['web_search', 'file_read'], max_cost_usd: 2, max_calls: 50, max_spend_usd: 20, max_depth: 3 };
const leafPolicy: Policy = { allowed_tools: ['web_search'], max_cost_usd: 1, max_calls: 20, max_spend_usd: 10, max_depth: 0 };
const tightPolicy: Policy = { allowed_tools: ['web_search'], max_cost_usd: 1, max_calls: 2, max_spend_usd: 1, max_depth: 0 };
let root: SignedDelegation, mid: SignedDelegation, leaf: SignedDelegation, tight: SignedDelegation;
let seq = 0;

function invocation(chain: SignedDelegation[], invoker: KeyPair, args: Record<string, unknown> = ARGS, jti = `inv:contract-${++seq}`) {
  return createInvocation({ chain, invoker, args, toolServer: TOOL_SERVER, iat: T0, jti });
}

describe('(b) delegations', () => {
  beforeAll(() => {
    root = createRootDelegation({ issuer: tenant.root, audience: A.did, policy: rootPolicy, iat: T0, nbf: T0 - 100, exp: T0 + 7200 });
    mid = createSubDelegation({ parent: root, issuer: A, audience: B.did, policy: midPolicy, iat: T0 });
    leaf = createSubDelegation({ parent: mid, issuer: B, audience: C.did, policy: leafPolicy, iat: T0 });
    tight = createSubDelegation({ parent: mid, issuer: B, audience: D.did, policy: tightPolicy, iat: T0 });
  });

  it('POST /v1/delegations', async () => {
    await api('POST', '/v1/delegations', { json: { receipts: [root.jws, mid.jws] } }, 201);
    await api('POST', '/v1/delegations', { json: { receipts: [root.jws, mid.jws] } }, 200);
    await api('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipt: leaf.jws } }, 201);
    await api('POST', '/v1/delegations', { json: { receipt: tight.jws } }, 201);
    await api('POST', '/v1/delegations', { json: { receipt: 'not.a.jws' } }, 400);
    await api('POST', '/v1/delegations', { json: { receipts: [] } }, 400);
    await api('POST', '/v1/delegations', { key: `bt_${'x'.repeat(43)}`, json: { receipt: root.jws } }, 401);
    await api('POST', '/v1/delegations', { key: tenant.keys.audit, json: { receipt: root.jws } }, 403);
    const sameJti = createRootDelegation({ issuer: tenant.root, audience: B.did, policy: rootPolicy, iat: T0, jti: root.payload.jti });
    await api('POST', '/v1/delegations', { json: { receipt: sameJti.jws } }, 409);
    const escalating = createSubDelegationUnchecked(root, {
      issuer: A,
      audience: B.did,
      policy: { allowed_tools: ['web_search', 'delete_db'], max_cost_usd: 50 },
    });
    const refused = await api('POST', '/v1/delegations', { json: { receipt: escalating.jws } }, 422);
    expect(refused.body.error.details.violations.length).toBeGreaterThan(1);
    await api('POST', '/v1/delegations', { body: OVERSIZE }, 413);
    await api('POST', '/v1/delegations', { json: { receipt: root.jws }, app: downApp }, 503);
  });

  it('POST /v1/delegations/issue', async () => {
    const path = '/v1/delegations/issue';
    const key = tenant.keys.issue;
    const issued = await api(
      'POST',
      path,
      { key, json: { audience: A.did, policy: { allowed_tools: ['web_search'], max_calls: 3 } } },
      201,
    );
    await api(
      'POST',
      path,
      {
        key,
        json: {
          audience: A.did,
          policy: {},
          exp: null,
          root_type: 'human',
          consent: { method: 'click', timestamp: '2027-01-15T08:00:00Z' },
        },
      },
      201,
    );
    await api('POST', path, { key, json: { audience: 'bob', policy: { surprise: 1 } } }, 400);
    await api('POST', path, { json: { audience: A.did, policy: {} } }, 401);
    await api('POST', path, { key: tenant.keys.audit, json: { audience: A.did, policy: {} } }, 403);
    // A jti is unique per issuer: the custodial key already issued this one.
    await api('POST', path, { key, json: { audience: A.did, policy: {}, jti: issued.body.delegation.jti } }, 409);
    // The same request again in the same second (the test clock stands still) is the same record, stored already.
    const fixed = { audience: A.did, policy: {}, jti: 'dr:contract-reissued' };
    const first = await api('POST', path, { key, json: fixed }, 201);
    const again = await api('POST', path, { key, json: fixed }, 200);
    expect(again.body.delegation.hash).toBe(first.body.delegation.hash);
    await api('POST', path, { key, json: { audience: A.did, policy: {}, nbf: T0 - 7200, exp: T0 - 3600 } }, 422);
    await api('POST', path, { key, body: OVERSIZE }, 413);
    await api('POST', path, { key, json: { audience: A.did, policy: {} }, app: downApp }, 503);
  });

  it('GET /v1/delegations/{hash}, /chain and /tree', async () => {
    for (const suffix of ['', '/chain', '/tree']) {
      await api('GET', `/v1/delegations/${leaf.hash}${suffix}`, { key: tenant.keys.audit }, 200);
      await api('GET', `/v1/delegations/${root.hash}${suffix}`, { key: tenant.keys.verify }, 200);
      await api('GET', `/v1/delegations/sha256:zz${suffix}`, { key: tenant.keys.audit }, 400);
      await api('GET', `/v1/delegations/${leaf.hash}${suffix}`, {}, 401);
      await api('GET', `/v1/delegations/${leaf.hash}${suffix}`, { key: svc.adminKey }, 403);
      await api('GET', `/v1/delegations/${leaf.hash}${suffix}`, { key: other.keys.audit }, 404);
      await api('GET', `/v1/delegations/${leaf.hash}${suffix}`, { key: tenant.keys.audit, app: downApp }, 503);
    }
  });
});

/** A root of the same issuer reusing the stored root's jti (`iat` offset `n`): storing it would clash (409). */
function clashingRoot(n: number) {
  return createRootDelegation({
    issuer: tenant.root,
    audience: A.did,
    policy: rootPolicy,
    iat: T0 + n,
    nbf: T0 - 100,
    exp: T0 + 7200,
    jti: root.payload.jti,
  });
}

let allowedJti: string;
let unavailableJti: string;
let deniedJti: string;

describe('(b) verify', () => {
  it('POST /v1/verify: allow (by value, by reference, dry run), deny, and refusals', async () => {
    const key = tenant.keys.verify;
    const first = invocation([root, mid, leaf], C);
    await api('POST', '/v1/verify', { key, json: makeBundle(first, [root, mid, leaf]) }, 200);
    allowedJti = first.payload.jti;
    const second = invocation([root, mid, leaf], C);
    await api('POST', '/v1/verify', { key, json: makeBundle(second, [root, mid, leaf], 'reference') }, 200);
    unavailableJti = second.payload.jti;
    await api(
      'POST',
      '/v1/verify/dry-run',
      { key, json: { ...makeBundle(invocation([root, mid, leaf], C), [root, mid, leaf], 'reference'), body: ARGS } },
      200,
    );
    // Through the tight leaf: NEAR_LIMIT warnings, then exhaustion.
    for (let i = 0; i < 2; i++)
      await api('POST', '/v1/verify', { key, json: makeBundle(invocation([root, mid, tight], D), [root, mid, tight], 'reference') }, 200);
    const exhausted = await api(
      'POST',
      '/v1/verify',
      { key, json: makeBundle(invocation([root, mid, tight], D), [root, mid, tight], 'reference') },
      403,
    );
    expect(exhausted.body.error.block).toBe('G');
    // A deny with every violation, recorded for auditors.
    const bad = invocation([root, mid, leaf], C, { tool: 'delete_db', estimated_cost_usd: 9, pii_access: false, write_access: false });
    deniedJti = bad.payload.jti;
    const denied = await api('POST', '/v1/verify', { key, json: makeBundle(bad, [root, mid, leaf], 'reference') }, 403);
    expect(denied.body.valid).toBe(false);
    // The same invocation again from the same key: a retry, answered with the original allow.
    const again = await api('POST', '/v1/verify', { key, json: makeBundle(first, [root, mid, leaf], 'reference') }, 200);
    expect(again.body.retry).toBe(true);
    // Another invocation reusing an allowed jti: a replay.
    const reuse = invocation([root, mid, leaf], C, { ...ARGS, estimated_cost_usd: 0.01 }, first.payload.jti);
    await api('POST', '/v1/verify', { key, json: makeBundle(reuse, [root, mid, leaf], 'reference') }, 403);
    // A malformed bundle is a block-A deny, not a 400.
    await api('POST', '/v1/verify', { key, json: { bundle_version: '4.0', invocation: 'garbage', receipts: [] } }, 403);
    await api('POST', '/v1/verify', { key: tenant.keys.audit, json: makeBundle(first, [root, mid, leaf]) }, 403);
    await api('POST', '/v1/verify', { key, body: '{"invocation":' }, 400);
    await api('POST', '/v1/verify', { key, json: { require_binding: 'yes' } }, 400);
    await api('POST', '/v1/verify?dry_run=true', { key, json: makeBundle(first, [root, mid, leaf]) }, 400);
    await api('POST', '/v1/verify', { json: makeBundle(first, [root, mid, leaf]) }, 401);
    // An embedded, unstored root reusing a stored root's jti cannot be stored.
    const clash = clashingRoot(1);
    await api('POST', '/v1/verify', { key, json: makeBundle(invocation([clash], A), [clash]) }, 409);
    await api('POST', '/v1/verify', { key, body: OVERSIZE }, 413);
    await api('POST', '/v1/verify', { key, json: makeBundle(first, [root, mid, leaf]), app: downApp }, 503);
  });

  it('POST /verify: the DRS transport (X-DRS-Bundle) and the same refusals', async () => {
    const key = tenant.keys.verify;
    const inv = invocation([root, mid, leaf], C);
    const header = encodeBase64url(utf8Encode(JSON.stringify(makeBundle(inv, [root, mid, leaf]))));
    const ok = await api('POST', '/verify', { key, json: { body: ARGS }, headers: { 'x-drs-bundle': header } }, 200);
    expect(ok.body.binding).toBe('match');
    const reuse = invocation([root, mid, leaf], C, { ...ARGS, estimated_cost_usd: 0.01 }, inv.payload.jti);
    const replayHeader = encodeBase64url(utf8Encode(JSON.stringify(makeBundle(reuse, [root, mid, leaf]))));
    await api('POST', '/verify', { key, json: { body: ARGS }, headers: { 'x-drs-bundle': replayHeader } }, 403);
    await api('POST', '/verify', { key, json: {}, headers: { 'x-drs-bundle': '%%%' } }, 400);
    await api('POST', '/verify', { json: {}, headers: { 'x-drs-bundle': header } }, 401);
    const clash = clashingRoot(2);
    await api('POST', '/verify', { key, json: makeBundle(invocation([clash], A), [clash]) }, 409);
    await api('POST', '/verify', { key, body: OVERSIZE }, 413);
    await api('POST', '/verify', { key, json: {}, headers: { 'x-drs-bundle': header }, app: downApp }, 503);
  });
  it('POST /v1/verify/dry-run: would allow, would deny, and the same refusals, consuming nothing', async () => {
    const key = tenant.keys.verify;
    const inv = invocation([root, mid, leaf], C);
    const would = await api('POST', '/v1/verify/dry-run', { key, json: makeBundle(inv, [root, mid, leaf], 'reference') }, 200);
    expect(would.body).toMatchObject({ valid: true, dry_run: true, service_receipt: null });
    const bad = invocation([root, mid, leaf], C, { tool: 'delete_db', estimated_cost_usd: 9, pii_access: false, write_access: false });
    await api('POST', '/v1/verify/dry-run', { key, json: makeBundle(bad, [root, mid, leaf], 'reference') }, 403);
    await api('POST', '/v1/verify/dry-run', { key, json: { ...makeBundle(inv, [root, mid, leaf]), dry_run: true } }, 400);
    await api('POST', '/v1/verify/dry-run', { json: makeBundle(inv, [root, mid, leaf]) }, 401);
    const clash = clashingRoot(3);
    await api('POST', '/v1/verify/dry-run', { key, json: makeBundle(invocation([clash], A), [clash]) }, 409);
    await api('POST', '/v1/verify/dry-run', { key, body: OVERSIZE }, 413);
    await api('POST', '/v1/verify/dry-run', { key, json: makeBundle(inv, [root, mid, leaf]), app: downApp }, 503);
  });
});

describe('(b) invocations and actuals', () => {
  it('POST /v1/invocations/{jti}/actuals', async () => {
    const key = tenant.keys.report;
    const path = `/v1/invocations/${allowedJti}/actuals`;
    const actual = { source: 'api-usage', cost_usd: 0.4, tokens_in: 120, tokens_out: 80 };
    await api('POST', path, { key, json: actual }, 201);
    await api('POST', path, { key, json: actual }, 200);
    const conflict = await api('POST', path, { key, json: { ...actual, cost_usd: 0.41 } }, 409);
    expect(conflict.body.error.details.stored).toBeDefined();
    await api(
      'POST',
      `/v1/invocations/${unavailableJti}/actuals`,
      { key, json: { source: 'unavailable', unavailable_reason: 'meter offline' } },
      201,
    );
    await api('POST', path, { key, json: { cost_usd: 0.4 } }, 400);
    await api('POST', path, { json: actual }, 401);
    await api('POST', path, { key: tenant.keys.audit, json: actual }, 403);
    await api('POST', '/v1/invocations/inv:never-verified/actuals', { key, json: actual }, 404);
    await api('POST', path, { key, body: OVERSIZE }, 413);
    await api('POST', path, { key, json: actual, app: downApp }, 503);
  });

  it('GET /v1/invocations/{jti}', async () => {
    const key = tenant.keys.audit;
    const allowed = await api('GET', `/v1/invocations/${allowedJti}`, { key }, 200);
    expect(allowed.body).toMatchObject({ decision: 'allowed', denials: [{ code: 'REPLAY_DETECTED' }] });
    expect(allowed.body.actual).not.toBeNull();
    const denied = await api('GET', `/v1/invocations/${deniedJti}`, { key }, 200);
    expect(denied.body.decision).toBe('denied');
    await api('GET', `/v1/invocations/${'x'.repeat(161)}`, { key }, 400);
    await api('GET', `/v1/invocations/${allowedJti}`, {}, 401);
    await api('GET', `/v1/invocations/${allowedJti}`, { key: svc.adminKey }, 403);
    await api('GET', `/v1/invocations/${allowedJti}`, { key: other.keys.audit }, 404);
    await api('GET', `/v1/invocations/${allowedJti}`, { key, app: downApp }, 503);
  });

  it('GET /v1/delegations/{hash}/invocations', async () => {
    const key = tenant.keys.audit;
    const base = `/v1/delegations/${root.hash}/invocations`;
    const page = await api('GET', `${base}?limit=2`, { key }, 200);
    expect(page.body.next_cursor).toEqual(expect.any(String));
    await api('GET', `${base}?limit=2&cursor=${encodeURIComponent(page.body.next_cursor)}`, { key }, 200);
    await api('GET', `${base}?limit=0`, { key }, 400);
    await api('GET', `${base}?page=2`, { key }, 400);
    await api('GET', base, {}, 401);
    await api('GET', base, { key: svc.adminKey }, 403);
    await api('GET', `/v1/delegations/${UNKNOWN_HASH}/invocations`, { key }, 404);
    await api('GET', base, { key, app: downApp }, 503);
  });

  it('GET /v1/invocations', async () => {
    const key = tenant.keys.audit;
    const page = await api('GET', '/v1/invocations?limit=1', { key }, 200);
    expect(page.body.next_cursor).toEqual(expect.any(String));
    await api('GET', `/v1/invocations?limit=1&cursor=${encodeURIComponent(page.body.next_cursor)}`, { key }, 200);
    await api('GET', `/v1/invocations?dr=${root.hash}&outcome=denied&since=2020-01-01T00:00:00Z`, { key }, 200);
    await api('GET', `/v1/invocations?dr=${root.hash}&tool=web_search&until=2100-01-01T00:00:00Z`, { key }, 200);
    await api('GET', '/v1/invocations?code=REPLAY_DETECTED&outcome=allowed', { key }, 400);
    await api('GET', '/v1/invocations', {}, 401);
    await api('GET', '/v1/invocations', { key: tenant.keys.verify }, 403);
    await api('GET', '/v1/invocations', { key, app: downApp }, 503);
  });

  it('usage on GET /v1/delegations/{hash} reflects the actuals', async () => {
    const r = await api('GET', `/v1/delegations/${leaf.hash}`, { key: tenant.keys.audit }, 200);
    expect(r.body.usage.metered_usd).toBe(0.4);
  });
});

describe('(b) service receipts', () => {
  it('GET /v1/service-receipts', async () => {
    const key = tenant.keys.audit;
    const page = await api('GET', '/v1/service-receipts?limit=3', { key }, 200);
    expect(page.body.next_after).toEqual(expect.any(Number));
    await api('GET', `/v1/service-receipts?after=${page.body.next_after}&limit=500`, { key }, 200);
    await api('GET', '/v1/service-receipts?limit=0', { key }, 400);
    await api('GET', '/v1/service-receipts', {}, 401);
    await api('GET', '/v1/service-receipts', { key: tenant.keys.verify }, 403);
    await api('GET', '/v1/service-receipts', { key, app: downApp }, 503);
  });
});

describe('(b) transparency log', () => {
  it('log, checkpoints, tiles, service receipt proofs, consistency and cosignatures', async () => {
    const key = tenant.keys.audit;
    const { id: first } = await recordServiceReceipt(svc.store.db, svc.deps.signer, {
      tenantId: tenant.id,
      kind: 'actual.recorded',
      subject: 'inv:contract-log',
      data: {},
      now: T0,
    });
    await api('GET', `/v1/log/service-receipts/${first}/proof`, { key }, 404); // queued, not integrated yet
    await integrateOnce({ store: svc.store, signer: svc.deps.signer, log: silentLogger, logName: svc.deps.config.tlogName });
    const size = (await api('GET', '/v1/log', { key }, 200)).body.tree_size as number;
    const note = (await api('GET', '/v1/log/checkpoint', { key }, 200)).body as string;
    await api('GET', `/v1/log/checkpoints/${size}`, { key }, 200);
    await api('GET', '/v1/log/checkpoints/01', { key }, 400);
    await api('GET', `/v1/log/checkpoints/${size + 1000}`, { key }, 404);
    await api('GET', '/v1/log/tile/0/000.p/1', { key }, 200);
    await api('GET', '/v1/log/tile/entries/000.p/1', { key }, 200);
    await api('GET', '/v1/log/tile/0/0', { key }, 400);
    await api('GET', '/v1/log/tile/3/000', { key }, 404);
    await api('GET', `/v1/log/service-receipts/${first}/proof`, { key }, 200);
    await api('GET', `/v1/log/service-receipts/${first}/proof?tree_size=x`, { key }, 400);
    await api('GET', `/v1/log/consistency?from=1&to=${size}`, { key }, 200);
    await api('GET', '/v1/log/consistency?from=2&to=1', { key }, 400);
    await api('GET', `/v1/log/consistency?from=1&to=${size + 1000}`, { key }, 404);
    const seed = new Uint8Array(32).fill(9);
    const witness = formatVerifierKey(verifierKey('witness.example', COSIGNATURE_V1, publicKeyFromSeed(seed)));
    const cosigned = signNote(parseNote(note), [cosignatureSigner('witness.example', seed, T0)]);
    await api('POST', '/v1/log/cosignatures', { key, json: { witness_key: witness, checkpoint: cosigned } }, 201);
    await api('POST', '/v1/log/cosignatures', { key, json: { witness_key: witness, checkpoint: cosigned } }, 200);
    await api('POST', '/v1/log/cosignatures', { key, json: { witness_key: witness } }, 400);
    await api('POST', '/v1/log/cosignatures', { key, body: OVERSIZE }, 413);
    // At most 32 witnesses per checkpoint, 2 posted by one API key: the served note stays within
    // the signed-note limits, and no one key takes every slot.
    const auditKey = (name: string) => createTenantKey(svc, tenant.id, ['audit'], name);
    const posters = [key];
    for (let k = 1; k < 16; k++) posters.push(await auditKey(`witness ${k}`));
    const cosignature = (name: string, s: Uint8Array) => ({
      witness_key: formatVerifierKey(verifierKey(name, COSIGNATURE_V1, publicKeyFromSeed(s))),
      checkpoint: signNote(parseNote(note), [cosignatureSigner(name, s, T0)]),
    });
    for (let i = 1; i < 32; i++) {
      const posted = cosignature(`w${i}.example`, new Uint8Array(32).fill(9 + i));
      await api('POST', '/v1/log/cosignatures', { key: posters[Math.floor(i / 2)]!, json: posted }, 201);
    }
    const late = cosignature('late.example', new Uint8Array(32).fill(200));
    await api('POST', '/v1/log/cosignatures', { key: await auditKey('late witness'), json: late }, 409); // the checkpoint's 32
    await api('POST', '/v1/log/cosignatures', { key, json: late }, 409); // this key's 2
    // Every cosignature served verifies: the note is still one a client can open.
    const served = (await api('GET', '/v1/log/checkpoint', { key }, 200)).body as string;
    expect(parseNote(served).signatures).toHaveLength(33);
    await api('POST', '/v1/log/cosignatures', { key: other.keys.audit, json: { witness_key: witness, checkpoint: cosigned } }, 404);
    for (const path of [
      '/v1/log',
      '/v1/log/checkpoint',
      `/v1/log/checkpoints/${size}`,
      '/v1/log/tile/0/000.p/1',
      `/v1/log/service-receipts/${first}/proof`,
      '/v1/log/consistency?from=1&to=1',
    ]) {
      await api('GET', path, {}, 401);
      await api('GET', path, { key: tenant.keys.verify }, 403);
      await api('GET', path, { key, app: downApp }, 503);
    }
    await api('POST', '/v1/log/cosignatures', { json: {} }, 401);
    await api('POST', '/v1/log/cosignatures', { key: tenant.keys.verify, json: {} }, 403);
    await api('POST', '/v1/log/cosignatures', { key, app: downApp, json: { witness_key: witness, checkpoint: cosigned } }, 503);
  });
});

describe('(b) revocation', () => {
  it('POST /v1/delegations/{hash}/revoke: with a key, with a signature, as admin, and refusals', async () => {
    const key = tenant.keys.issue;
    const E = generateKeyPair(),
      F = generateKeyPair(),
      G = generateKeyPair();
    const byAdmin = createSubDelegation({ parent: mid, issuer: B, audience: E.did, policy: leafPolicy, iat: T0 });
    const bySignature = createSubDelegation({ parent: mid, issuer: B, audience: F.did, policy: leafPolicy, iat: T0 });
    const unrevoked = createSubDelegation({ parent: mid, issuer: B, audience: G.did, policy: leafPolicy, iat: T0 });
    await api('POST', '/v1/delegations', { json: { receipts: [byAdmin.jws] } }, 201);
    await api('POST', '/v1/delegations', { json: { receipts: [bySignature.jws] } }, 201);
    await api('POST', '/v1/delegations', { json: { receipts: [unrevoked.jws] } }, 201);

    const revoke = (hash: string) => `/v1/delegations/${hash}/revoke`;
    const confirm = { confirm: true, reason: 'contract test' };
    await api('POST', revoke(tight.hash), { key, json: confirm }, 200);
    const again = await api('POST', revoke(tight.hash), { key, json: confirm }, 200);
    expect(again.body.already_revoked).toBe(true);
    const asAdmin = await api('POST', revoke(byAdmin.hash), { key: svc.adminKey, json: confirm }, 200);
    expect(asAdmin.body.tenants).toHaveLength(1);
    const revocation = (signer: KeyPair, target: string) =>
      signJws(
        { iss: signer.did, drs_v: '4.0', drs_type: 'revocation', target, iat: T0, jti: `rev:contract-${++seq}`, reason: 'signed' },
        signer.seed,
      );
    await api('POST', revoke(bySignature.hash), { json: { revocation: revocation(B, bySignature.hash) } }, 200);

    await api('POST', revoke(unrevoked.hash), { key, json: { confirm: false, reason: 'x' } }, 400);
    await api('POST', revoke(unrevoked.hash), { json: { revocation: 'not.a.jws' } }, 400);
    await api('POST', revoke(unrevoked.hash), { json: { revocation: revocation(B, leaf.hash) } }, 400);
    await api('POST', revoke('sha256:zz'), { key, json: confirm }, 400);
    await api('POST', revoke(unrevoked.hash), { json: confirm }, 401);
    await api('POST', revoke(unrevoked.hash), { key: `bt_${'y'.repeat(43)}`, json: confirm }, 401);
    await api('POST', revoke(unrevoked.hash), { key: tenant.keys.audit, json: confirm }, 403);
    // The holder of a grant cannot revoke the grant it received.
    await api('POST', revoke(unrevoked.hash), { json: { revocation: revocation(G, unrevoked.hash) } }, 403);
    await api('POST', revoke(UNKNOWN_HASH), { key, json: confirm }, 404);
    await api('POST', revoke(UNKNOWN_HASH), { json: { revocation: revocation(A, UNKNOWN_HASH) } }, 404);
    await api('POST', revoke(unrevoked.hash), { key, body: OVERSIZE }, 413);
    await api('POST', revoke(unrevoked.hash), { key, json: confirm, app: downApp }, 503);

    // The effect, through the documented reads.
    const denied = await api(
      'POST',
      '/v1/verify',
      { key: tenant.keys.verify, json: makeBundle(invocation([root, mid, tight], D), [root, mid, tight], 'reference') },
      403,
    );
    expect(denied.body.error.code).toBe('RECEIPT_REVOKED');
    const view = await api('GET', `/v1/delegations/${tight.hash}`, { key: tenant.keys.audit }, 200);
    expect(view.body).toMatchObject({ status: 'revoked', revoked_by: tight.hash, revoked_reason: 'contract test' });
    await api('GET', `/v1/delegations/${root.hash}/tree`, { key: tenant.keys.audit }, 200);
    await api('GET', `/v1/delegations/${tight.hash}/chain`, { key: tenant.keys.audit }, 200);
  });
});

// ---------------------------------------------------------------- (c) auth

function concretePath(template: string): string {
  const values: Record<string, string> = {
    hash: UNKNOWN_HASH,
    jti: 'inv:contract-none',
    tenant: '',
    did: 'did:key:z6MkContractNone',
    id: 'key_contract_none',
    size: '1',
    path: '0/000',
    version: '1',
  };
  return template.replace(/\{([^}]+)\}/g, (_m, name: string) => {
    if (name === 'tenant') return tenant.id;
    // An id of the right form for its resource (paths are checked before bodies), naming nothing.
    if (name === 'id' && template.startsWith('/v1/approvals')) return `apr_${'0'.repeat(32)}`;
    const v = values[name];
    if (v === undefined) throw new Error(`no test value for path parameter ${name}`);
    return encodeURIComponent(v).replace(/%3A/g, ':');
  });
}

describe('(b) tools and approvals', () => {
  it('catalog versions, a call waiting for a human, approve and reject', async () => {
    // The other tenant, so that the verify scenarios above keep a tenant without a catalog.
    const admin = { key: svc.adminKey };
    const tools = `/v1/admin/tenants/${other.id}/tools`;
    const declared = {
      name: 'crm_export',
      type: 'write',
      blast_radius: 'organizational',
      untrusted_content: false,
      private_data_access: false,
      external_communication: false,
      tags: [],
      action_type: 'crm:export',
    };
    await api('GET', '/v1/tools', { key: other.keys.verify }, 404);
    await api('GET', tools, admin, 404);
    const human = generateKeyPair(); // an approver DID the tenant lists
    await api('POST', tools, { ...admin, json: { base_version: 0, strict: true, tools: [declared], approvers: [human.did] } }, 201);
    await api('POST', tools, { ...admin, json: { base_version: 0, strict: true, tools: [] } }, 409);
    await api('POST', tools, { ...admin, json: { base_version: 1, strict: true, tools: [{ ...declared, name: '*' }] } }, 400);
    await api('POST', tools, { json: { base_version: 1, strict: true, tools: [] } }, 401);
    await api('POST', tools, { key: other.keys.issue, json: { base_version: 1, strict: true, tools: [] } }, 403);
    await api('POST', tools, { ...admin, body: OVERSIZE }, 413);
    await api('POST', '/v1/admin/tenants/ten_nobody/tools', { ...admin, json: { base_version: 0, strict: true, tools: [] } }, 404);
    await api('POST', tools, { ...admin, json: { base_version: 1, strict: true, tools: [] }, app: downApp }, 503);
    await api('GET', tools, admin, 200);
    await api('GET', tools, {}, 401);
    await api('GET', tools, { key: other.keys.audit }, 403);
    await api('GET', tools, { ...admin, app: downApp }, 503);
    await api('GET', '/v1/tools', { key: other.keys.verify, app: downApp }, 503);
    await api('GET', '/v1/tools/versions/1', { key: other.keys.audit, app: downApp }, 503);
    await api('GET', '/v1/tools', { key: other.keys.verify }, 200);
    await api('GET', '/v1/tools', {}, 401);
    await api('GET', '/v1/tools', { key: other.keys.report }, 403);
    await api('GET', '/v1/tools/versions/1', { key: other.keys.audit }, 200);
    await api('GET', '/v1/tools/versions/x', { key: other.keys.audit }, 400);
    await api('GET', '/v1/tools/versions/9', { key: other.keys.audit }, 404);
    await api('GET', '/v1/tools/versions/1', {}, 401);
    await api('GET', '/v1/tools/versions/1', { key: other.keys.report }, 403);

    const k = await api('POST', `/v1/admin/tenants/${other.id}/api-keys`, { ...admin, json: { scopes: ['approve'] } }, 201);
    const approver = { key: k.body.key as string };
    const agent = generateKeyPair();
    const policy = { allowed_tools: ['crm_export'], max_cost_usd: 1, write_access: true };
    const root = createRootDelegation({ issuer: other.root, audience: agent.did, policy, iat: T0, nbf: T0 - 10 });
    const args = { tool: 'crm_export', estimated_cost_usd: 0.1, pii_access: false, write_access: true };
    const call = () => makeBundle(createInvocation({ chain: [root], invoker: agent, args, toolServer: TOOL_SERVER, iat: T0 }), [root]);
    const waiting = await api('POST', '/v1/verify', { key: other.keys.verify, json: call() }, 403);
    expect(waiting.body.error.code).toBe('APPROVAL_REQUIRED');
    const id = waiting.body.approval.id as string;
    const second = await api(
      'POST',
      '/v1/verify',
      { key: other.keys.verify, json: { ...call(), approval_id: `apr_${'0'.repeat(32)}` } },
      403,
    );
    expect(second.body.error.code).toBe('APPROVAL_MISMATCH');
    // Text no approval can have is the caller's mistake: 400, nothing stored.
    await api('POST', '/v1/verify', { key: other.keys.verify, json: { ...call(), approval_id: 'apr_nobody' } }, 400);

    await api('GET', '/v1/approvals?status=pending', approver, 200);
    await api('GET', '/v1/approvals?status=maybe', approver, 400);
    await api('GET', '/v1/approvals', {}, 401);
    await api('GET', '/v1/approvals', { key: other.keys.verify }, 403);
    await api('GET', `/v1/approvals/${id}`, { key: other.keys.audit }, 200);
    await api('GET', `/v1/approvals/apr_${'0'.repeat(32)}`, approver, 404);
    await api('GET', '/v1/approvals/apr_nobody', approver, 400);
    await api('GET', `/v1/approvals/${id}`, {}, 401);
    await api('GET', `/v1/approvals/${id}`, { key: other.keys.verify }, 403);
    await api('GET', '/v1/approvals', { ...approver, app: downApp }, 503);
    await api('GET', `/v1/approvals/${id}`, { ...approver, app: downApp }, 503);

    const triple = { actor: 'alice', confirm: true, reason: 'Agreed with legal.' };
    for (const what of ['approve', 'reject']) {
      await api('POST', `/v1/approvals/${id}/${what}`, { ...approver, json: { ...triple, reason: ' ' } }, 400);
      await api('POST', `/v1/approvals/${id}/${what}`, { json: triple }, 401);
      await api('POST', `/v1/approvals/${id}/${what}`, { key: other.keys.verify, json: triple }, 403);
      await api('POST', `/v1/approvals/apr_${'0'.repeat(32)}/${what}`, { ...approver, json: triple }, 404);
      await api('POST', `/v1/approvals/apr_nobody/${what}`, { ...approver, json: triple }, 400);
      await api('POST', `/v1/approvals/${id}/${what}`, { ...approver, body: OVERSIZE }, 413);
      await api('POST', `/v1/approvals/${id}/${what}`, { ...approver, json: triple, app: downApp }, 503);
    }
    await api('POST', `/v1/approvals/${id}/approve`, { ...approver, json: triple }, 200);
    await api('POST', `/v1/approvals/${id}/approve`, { ...approver, json: triple }, 409);
    await api('POST', `/v1/approvals/${id}/reject`, { ...approver, json: triple }, 409);
    await api('POST', '/v1/verify', { key: other.keys.verify, json: call() }, 200);
    const next = await api('POST', '/v1/verify', { key: other.keys.verify, json: call() }, 403);
    await api('POST', `/v1/approvals/${next.body.approval.id}/reject`, { ...approver, json: triple }, 200);
    // Rejected stands: the same call is told so, not asked again.
    const told = await api('POST', '/v1/verify', { key: other.keys.verify, json: call() }, 403);
    expect(told.body.error.code).toBe('APPROVAL_REJECTED');

    // Decided without a key by a record the approver DID signs (another call: the first one was rejected).
    const otherCall = () =>
      makeBundle(
        createInvocation({ chain: [root], invoker: agent, args: { ...args, estimated_cost_usd: 0.2 }, toolServer: TOOL_SERVER, iat: T0 }),
        [root],
      );
    const third = await api('POST', '/v1/verify', { key: other.keys.verify, json: otherCall() }, 403);
    const signedId = third.body.approval.id as string;
    const signed = (signer: KeyPair) =>
      createApprovalDecision({ signer, approvalId: signedId, decision: 'approve', reason: 'Agreed.', iat: svc.clock.now }).jws;
    const at = `/v1/approvals/${signedId}/signed-decision`;
    const good = signed(human);
    await api('POST', at, { json: { signed_decision: 'not-a-jws' } }, 400);
    await api('POST', '/v1/approvals/apr_nobody/signed-decision', { json: { signed_decision: good } }, 400);
    await api('POST', at, { json: { signed_decision: `${good.slice(0, -4)}AAAA` } }, 403);
    await api('POST', at, { json: { signed_decision: signed(generateKeyPair()) } }, 404);
    await api('POST', at, { body: OVERSIZE }, 413);
    await api('POST', at, { json: { signed_decision: good }, app: downApp }, 503);
    await api('POST', at, { json: { signed_decision: good } }, 200);
    await api('POST', at, { json: { signed_decision: good } }, 409);

    // A delegation whose tools together form the lethal trifecta is held for a human.
    const risky = [
      { ...declared, name: 'web_fetch', type: 'read', blast_radius: 'read', untrusted_content: true, action_type: 'web:fetch' },
      { ...declared, name: 'mail_send', type: 'external', blast_radius: 'domain', private_data_access: true, action_type: 'mail:send' },
    ];
    await api('POST', tools, { ...admin, json: { base_version: 1, strict: true, tools: [declared, ...risky] } }, 201);
    const held = createRootDelegation({ issuer: other.root, audience: agent.did, policy: { max_cost_usd: 1 }, iat: T0, nbf: T0 - 10 });
    const held2 = createRootDelegation({ issuer: other.root, audience: agent.did, policy: { max_cost_usd: 2 }, iat: T0, nbf: T0 - 10 });
    await api('POST', '/v1/delegations', { key: other.keys.issue, json: { receipts: [held.jws] } }, 201);
    await api('POST', '/v1/delegations', { key: other.keys.issue, json: { receipts: [held2.jws] } }, 201);
    await api('GET', '/v1/grants?status=pending', approver, 200);
    await api('GET', '/v1/grants?status=maybe', approver, 400);
    await api('GET', '/v1/grants', {}, 401);
    await api('GET', '/v1/grants', { key: other.keys.verify }, 403);
    await api('GET', '/v1/grants', { ...approver, app: downApp }, 503);
    for (const what of ['approve', 'reject']) {
      await api('POST', `/v1/grants/${held.hash}/${what}`, { ...approver, json: { ...triple, confirm: false } }, 400);
      await api('POST', `/v1/grants/${held.hash}/${what}`, { json: triple }, 401);
      await api('POST', `/v1/grants/${held.hash}/${what}`, { key: other.keys.verify, json: triple }, 403);
      await api('POST', `/v1/grants/${UNKNOWN_HASH}/${what}`, { ...approver, json: triple }, 404);
      await api('POST', `/v1/grants/not-a-hash/${what}`, { ...approver, json: triple }, 400);
      await api('POST', `/v1/grants/${held.hash}/${what}`, { ...approver, body: OVERSIZE }, 413);
      await api('POST', `/v1/grants/${held.hash}/${what}`, { ...approver, json: triple, app: downApp }, 503);
    }
    await api('POST', `/v1/grants/${held.hash}/approve`, { ...approver, json: triple }, 200);
    await api('POST', `/v1/grants/${held.hash}/reject`, { ...approver, json: triple }, 409);
    await api('POST', `/v1/grants/${held2.hash}/reject`, { ...approver, json: triple }, 200);
    await api('POST', `/v1/grants/${held2.hash}/approve`, { ...approver, json: triple }, 409);

    const explained = await api('POST', '/v1/explain', { key: other.keys.verify, json: { dr_chain: [root.hash], args } }, 200);
    expect(explained.body.decision).toBe('require_approval');
    await api('POST', '/v1/explain', { key: other.keys.verify, json: { dr_chain: [], args } }, 400);
    await api('POST', '/v1/explain', { key: other.keys.verify, json: { dr_chain: [UNKNOWN_HASH], args } }, 404);
    await api('POST', '/v1/explain', { json: { dr_chain: [root.hash], args } }, 401);
    await api('POST', '/v1/explain', { key: other.keys.report, json: { dr_chain: [root.hash], args } }, 403);
    await api('POST', '/v1/explain', { key: other.keys.verify, body: OVERSIZE }, 413);
    await api('POST', '/v1/explain', { key: other.keys.verify, json: { dr_chain: [root.hash], args }, app: downApp }, 503);
  });
});

describe('(c) authentication and scopes match the spec', () => {
  it('every operation that requires a key answers 401 without one', async () => {
    for (const o of contract.operations) {
      const required = o.op.security.length > 0 && !o.op.security.some((s: Json) => Object.keys(s).length === 0);
      if (!required) continue;
      const res = await api(o.method.toUpperCase(), concretePath(o.path), o.op.requestBody ? { json: {} } : {});
      expect(res.status, `${o.id} without a key`).toBe(401);
      expect(res.body.error.code).toBe('UNAUTHORIZED');
    }
  });

  it('each operation accepts exactly the scopes in its x-baton-scopes', async () => {
    const keys: [string, string][] = [
      ['issue', tenant.keys.issue],
      ['verify', tenant.keys.verify],
      ['report', tenant.keys.report],
      ['audit', tenant.keys.audit],
      ['admin', svc.adminKey],
    ];
    for (const o of contract.operations) {
      const scopes: string[] = o.op['x-baton-scopes'];
      if (scopes.length === 0) continue;
      for (const [scope, key] of keys) {
        const res = await api(o.method.toUpperCase(), concretePath(o.path), { key, ...(o.op.requestBody ? { json: {} } : {}) });
        const forbidden = res.status === 403 && res.body?.error?.code === 'FORBIDDEN';
        expect(
          forbidden,
          `${o.id} with a${scope === 'admin' ? 'n' : ''} ${scope} key: ${res.status} ${JSON.stringify(res.body).slice(0, 300)}`,
        ).toBe(!scopes.includes(scope));
        const required = res.body?.error?.details?.required_scopes as string[] | undefined;
        if (forbidden && required) expect([...required].sort(), `${o.id}: required_scopes`).toEqual([...scopes].sort());
      }
    }
  });
});

describe('(c) a URL Baton cannot read', () => {
  it('every operation answers 400 INVALID_REQUEST to a query that is not validly percent-encoded, key or none', async () => {
    for (const o of contract.operations) {
      for (const key of [undefined, tenant.keys.audit]) {
        const res = await api(o.method.toUpperCase(), `${concretePath(o.path)}?x=%ZZ`, { ...(key ? { key } : {}) });
        expect(res.status, `${o.id} with a query of a lone %`).toBe(400);
        expect(res.body.error.code).toBe('INVALID_REQUEST');
      }
    }
  });
});

describe('(d) every JSON body is read by the one strict reader', () => {
  // A route validated by the OpenAPI library instead answered another media type with a 500
  // and kept the last of two repeated keys (POST /v1/log/cosignatures, until it read its body
  // as every other route does).
  it('another media type, a repeated key, deep nesting or a number read as another is a 400 INVALID_REQUEST on every operation with a body', async () => {
    const made = new Map<string, string>([['admin', svc.adminKey]]);
    /** A key with the operation's first scope (made once), or none for a keyless operation. */
    const keyFor = async (scopes: string[]) => {
      const scope = scopes[0];
      if (scope === undefined) return undefined;
      if (!made.has(scope)) made.set(scope, await createTenantKey(svc, tenant.id, [scope], `strict body ${scope}`));
      return made.get(scope);
    };
    const deep = `${'['.repeat(100)}${']'.repeat(100)}`;
    const hostile: [string, Record<string, string>, string, RegExp][] = [
      ['text/plain', { 'content-type': 'text/plain' }, '{}', /application\/json/],
      ['a repeated key', { 'content-type': 'application/json' }, '{"a":1,"a":2}', /repeats the key/],
      ['100 levels of nesting', { 'content-type': 'application/json' }, `{"a":${deep}}`, /nest/],
      // Read as 0.1 by JSON.parse: the route would act on a value the client did not send.
      [
        'a number a double cannot hold',
        { 'content-type': 'application/json' },
        '{"a":0.1000000000000000000000001}',
        /holds only as 0\.1\b/,
      ],
    ];
    let checked = 0;
    for (const o of contract.operations) {
      if (!o.op.requestBody) continue;
      const key = await keyFor(o.op['x-baton-scopes']);
      for (const [what, headers, body, message] of hostile) {
        const res = await api(o.method.toUpperCase(), concretePath(o.path), { ...(key ? { key } : {}), headers, body });
        expect(res.status, `${o.id}, ${what}: ${JSON.stringify(res.body).slice(0, 300)}`).toBe(400);
        expect(res.body.error.code, o.id).toBe('INVALID_REQUEST');
        expect(res.body.error.message, `${o.id}, ${what}`).toMatch(message);
      }
      checked++;
    }
    expect(checked).toBeGreaterThan(10);
  });
});

// ---------------------------------------------------------------- coverage

describe('coverage', () => {
  it('every documented (operation, status) was observed and validated, except 500', () => {
    expect(problems).toEqual([]);
    const missing: string[] = [];
    for (const o of contract.operations) {
      for (const status of contract.documentedStatuses(o)) {
        if (status === '500') continue;
        if (!contract.observed.has(`${o.id} ${status}`)) missing.push(`${o.method.toUpperCase()} ${o.path} ${status}`);
      }
    }
    expect(missing, 'documented but never observed').toEqual([]);
  });
});
