/**
 * Path and query parameters PostgreSQL would reject, on every route that
 * reaches it: each must be a 400 INVALID_REQUEST with a suggestion, never a
 * 500 from deep in a query. Impossible dates in a forged cursor, integers
 * past bigint, U+0000, invalid UTF-8 and lone surrogates.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, type SignedDelegation } from '../../src/sdk/records.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { T0 } from '../support/fixtures.js';
import { generatedApiDocument } from '../../src/service/app.js';

let svc: TestService;
let tenant: TestTenant;
let dr: SignedDelegation;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  dr = createRootDelegation({ issuer: tenant.root, audience: generateKeyPair().did, policy: {}, iat: T0 });
  const r = await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipt: dr.jws } });
  expect(r.status).toBe(201);
});
afterAll(async () => svc?.close());

const cursor = (createdAt: string, jti = 'inv:x') => Buffer.from(JSON.stringify([createdAt, jti])).toString('base64url');

/** Instants the cursor's shape allows but no calendar has (or PostgreSQL would roll over). */
const IMPOSSIBLE_INSTANTS = [
  '2026-02-30T00:00:00.000000Z',
  '2025-02-29T00:00:00.000000Z', // not a leap year
  '1900-02-29T00:00:00.000000Z', // divisible by 100, not by 400
  '2026-04-31T00:00:00.000000Z',
  '2026-01-32T00:00:00.000000Z',
  '2026-01-00T00:00:00.000000Z',
  '2026-00-10T00:00:00.000000Z',
  '2026-13-01T00:00:00.000000Z',
  '0000-00-00T00:00:00.000000Z',
  '0000-01-01T00:00:00.000000Z', // there is no year 0
  '2026-01-01T24:00:00.000000Z',
  '2026-01-01T23:60:00.000000Z',
  '2026-01-01T23:59:60.000000Z',
  '2026-01-01T99:99:99.999999Z',
];

const BAD_TEXT = { nul: '%00', 'invalid-utf8': '%C0%AF', 'byte-ff': '%FF', 'lone-surrogate': '%ED%A0%80' } as const;

function cases(): [name: string, method: string, path: string, key: string][] {
  const out: [string, string, string, string][] = [];
  const inv = `/v1/delegations/${dr.hash}/invocations`;
  for (const t of IMPOSSIBLE_INSTANTS) out.push([`cursor ${t}`, 'GET', `${inv}?cursor=${cursor(t)}`, tenant.keys.audit]);
  for (const [what, q] of Object.entries({
    'limit past bigint': 'limit=9223372036854775808',
    'limit 1e400': 'limit=1e400',
    'cursor NUL': 'cursor=%00',
  }))
    out.push([what, 'GET', `${inv}?${q}`, tenant.keys.audit]);
  for (const [what, q] of Object.entries({
    'after 2^63': 'after=9223372036854775808',
    'after 2^64 + 1': 'after=18446744073709551617',
    'after 1e400': 'after=1e400',
    'after NUL': 'after=%00',
    'limit past bigint': 'limit=9223372036854775808',
  }))
    out.push([`receipts ${what}`, 'GET', `/v1/service-receipts?${q}`, tenant.keys.audit]);
  // A parameter with no name, which Hono's query parser drops: refused, as any the route does not list.
  for (const q of ['=1', 'limit=1&=x', '='])
    for (const path of [inv, '/v1/service-receipts', '/v1/invocations'])
      out.push([`nameless parameter ${q} on ${path}`, 'GET', `${path}?${q}`, tenant.keys.audit]);
  // Routes that read their query through the route's own validator, not parseQuery.
  out.push(['nameless parameter on the consistency proof', 'GET', '/v1/log/consistency?from=1&to=1&=x', tenant.keys.audit]);
  out.push(['nameless parameter on a receipt proof', 'GET', '/v1/log/service-receipts/1/proof?=x', tenant.keys.audit]);
  for (const [what, x] of Object.entries(BAD_TEXT)) {
    for (const path of [
      `/v1/delegations/${x}`,
      `/v1/delegations/${dr.hash}${x}/chain`,
      `/v1/delegations/${x}/tree`,
      `/v1/delegations/${x}/invocations`,
      `/v1/invocations/inv:${x}`,
    ])
      out.push([`${what} in ${path}`, 'GET', path, tenant.keys.audit]);
    out.push([`${what} in actuals jti`, 'POST', `/v1/invocations/inv:${x}/actuals`, tenant.keys.report]);
    out.push([`${what} in revoke hash`, 'POST', `/v1/delegations/${x}/revoke`, tenant.keys.issue]);
    out.push([`${what} in tenant id`, 'GET', `/v1/admin/tenants/ten_${x}/roots`, svc.adminKey]);
    out.push([`${what} in tenant id (keys)`, 'GET', `/v1/admin/tenants/ten_${x}/api-keys`, svc.adminKey]);
    out.push([`${what} in root DID`, 'DELETE', `/v1/admin/tenants/${tenant.id}/roots/did:key:z${x}`, svc.adminKey]);
    out.push([`${what} in key id`, 'DELETE', `/v1/admin/api-keys/key_${x}`, svc.adminKey]);
  }
  return out;
}

describe('crafted path and query parameters', () => {
  it('every one is 400 INVALID_REQUEST with a suggestion, never a server error', async () => {
    const table = cases();
    expect(table.length).toBeGreaterThan(60);
    const wrong: string[] = [];
    for (const [name, method, path, key] of table) {
      const r = await svc.call(method, path, { key, ...(method === 'POST' ? { json: {} } : {}) });
      const ok =
        r.status === 400 &&
        r.body?.error?.code === 'INVALID_REQUEST' &&
        typeof r.body.error.suggestion === 'string' &&
        r.body.error.suggestion.length > 0;
      if (!ok) wrong.push(`${name}: ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`);
    }
    expect(wrong).toEqual([]);
  });

  it('a cursor names the instant encodeCursor wrote: the extremes of real dates still page (200)', async () => {
    for (const t of [
      '0001-01-01T00:00:00.000000Z',
      '2024-02-29T23:59:59.999999Z',
      '2000-02-29T12:00:00.000000Z',
      '9999-12-31T23:59:59.999999Z',
    ]) {
      const r = await svc.call('GET', `/v1/delegations/${dr.hash}/invocations?cursor=${cursor(t)}`, { key: tenant.keys.audit });
      expect(r.status, `${t}: ${JSON.stringify(r.body)}`).toBe(200);
      expect(r.body).toEqual({ invocations: [], next_cursor: null });
    }
  });
});

describe('a query on a route that declares none', () => {
  it('is refused before anything runs: ?dry_run=true on a revoke does not revoke', async () => {
    const leaf = createRootDelegation({ issuer: tenant.root, audience: generateKeyPair().did, policy: {}, iat: T0 });
    expect((await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipt: leaf.jws } })).status).toBe(201);
    const r = await svc.call('POST', `/v1/delegations/${leaf.hash}/revoke?dry_run=true`, {
      key: tenant.keys.issue,
      json: { confirm: true, reason: 'trying a dry run' },
    });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'INVALID_REQUEST', details: { parameters: ['dry_run'] } });
    const read = await svc.call('GET', `/v1/delegations/${leaf.hash}`, { key: tenant.keys.audit });
    expect(read.body.status).toBe('active');
    // The same request without the query revokes.
    const revoked = await svc.call('POST', `/v1/delegations/${leaf.hash}/revoke`, {
      key: tenant.keys.issue,
      json: { confirm: true, reason: 'trying a dry run' },
    });
    expect(revoked.status, JSON.stringify(revoked.body)).toBe(200);
  });

  it('on every route of the document that takes no query (with any key, or none)', async () => {
    const document = generatedApiDocument();
    const wrong: string[] = [];
    let checked = 0;
    for (const [path, operations] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        const takesQuery = (operation.parameters ?? []).some((p) => 'in' in p && p.in === 'query');
        const publicRead = method === 'get' && operation.security !== undefined && operation.security.length === 0;
        if (publicRead) {
          // A probe or fetcher's parameters are ignored there: they read, and take no option.
          const r = await svc.call('GET', `${path.replace(/\{[^}]+\}/g, 'x')}?nocache=1`);
          if (r.status === 400 && r.body?.error?.details?.parameters !== undefined) wrong.push(`public ${path} refused a query`);
          continue;
        }
        // The tile route refuses one itself; /v1/verify too, after the key check, and DRS's /verify ignores
        // what it does not know, as drs-verify does (verify.test.ts).
        if (takesQuery || path.startsWith('/v1/log/tile/') || path.endsWith('/verify') || path.endsWith('/verify/dry-run')) continue;
        checked++;
        const concrete = path.replace(/\{[^}]+\}/g, 'x');
        const r = await svc.call(method.toUpperCase(), `${concrete}?dry_run=true`, method === 'post' ? { json: {} } : {});
        // By this middleware, not by a body or key check that refuses the request anyway.
        if (r.status !== 400 || r.body?.error?.code !== 'INVALID_REQUEST' || r.body.error.details?.parameters?.[0] !== 'dry_run')
          wrong.push(`${method} ${path}: ${r.status} ${JSON.stringify(r.body).slice(0, 160)}`);
      }
    }
    expect(checked).toBeGreaterThan(30);
    expect(wrong).toEqual([]);
  });

  it('a route that declares one still reads it, and an empty query is none', async () => {
    expect((await svc.call('GET', `/v1/delegations/${dr.hash}/invocations?limit=5`, { key: tenant.keys.audit })).status).toBe(200);
    expect((await svc.call('GET', `/v1/delegations/${dr.hash}?`, { key: tenant.keys.audit })).status).toBe(200);
  });
});

describe('a body on a write that declares none', () => {
  it('is refused before anything runs: a dry_run body on removing a trusted root removes nothing', async () => {
    const admin = { key: svc.adminKey };
    const root = generateKeyPair();
    expect(
      (await svc.call('POST', `/v1/admin/tenants/${tenant.id}/roots`, { ...admin, json: { did: root.did, label: 'kept' } })).status,
    ).toBe(201);
    const path = `/v1/admin/tenants/${tenant.id}/roots/${root.did}`;
    const r = await svc.call('DELETE', path, { ...admin, json: { dry_run: true } });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('INVALID_REQUEST');
    expect(r.body.error.message).toMatch(/takes no request body/);
    const trusted = async () => {
      const list = await svc.call('GET', `/v1/admin/tenants/${tenant.id}/roots`, admin);
      return JSON.stringify(list.body).includes(root.did);
    };
    expect(await trusted()).toBe(true);
    // The same request without a body removes it.
    expect((await svc.call('DELETE', path, admin)).status).toBe(204);
    expect(await trusted()).toBe(false);
  });

  it('an API key revocation with a text body revokes nothing; without one it revokes', async () => {
    const made = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
      key: svc.adminKey,
      json: { scopes: ['audit'], name: 'kept' },
    });
    expect(made.status).toBe(201);
    const { id, key } = made.body as { id: string; key: string };
    const works = async () => (await svc.call('GET', `/v1/delegations/${dr.hash}`, { key })).status;
    const r = await svc.call('DELETE', `/v1/admin/api-keys/${id}`, {
      key: svc.adminKey,
      body: 'dry_run=true, this is not JSON at all',
      headers: { 'content-type': 'text/plain' },
    });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('INVALID_REQUEST');
    expect(await works()).toBe(200);
    expect((await svc.call('DELETE', `/v1/admin/api-keys/${id}`, { key: svc.adminKey })).status).toBe(204);
    expect(await works()).toBe(401);
  });

  it('on every operation of the document that writes and declares no body, whatever the key; its 400 says so', async () => {
    const document = generatedApiDocument();
    const wrong: string[] = [];
    let checked = 0;
    for (const [path, operations] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        if (method === 'get' || method === 'head' || operation.requestBody !== undefined) continue;
        checked++;
        if (!String(operation.responses['400']?.description).includes('has a body')) wrong.push(`${method} ${path}: 400 not documented`);
        for (const key of [svc.adminKey, undefined]) {
          const r = await svc.call(method.toUpperCase(), path.replace(/\{[^}]+\}/g, 'x'), { ...(key ? { key } : {}), json: { x: 1 } });
          if (r.status !== 400 || !/takes no request body/.test(r.body?.error?.message ?? ''))
            wrong.push(`${method} ${path}: ${r.status} ${JSON.stringify(r.body).slice(0, 160)}`);
        }
      }
    }
    expect(checked).toBeGreaterThanOrEqual(2);
    expect(wrong).toEqual([]);
  });
});
