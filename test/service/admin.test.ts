// The admin API on real PostgreSQL: tenants, trusted roots, API keys; every
// route's success and refusal paths, and nothing stored on a refusal.
import { createHash } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeBase58btc } from '../../src/protocol/base58.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation } from '../../src/sdk/records.js';
import { T0 } from '../support/fixtures.js';
import { apiKeys, tenants, trustedRoots } from '../../src/store/schema/index.js';
import { startTestService, type CallResult, type TestService } from '../support/service.js';

/** did:key of the Ed25519 identity point (y = 1): small order, so forgeable. */
function smallOrderDid(): string {
  const bytes = new Uint8Array(34);
  bytes[0] = 0xed;
  bytes[1] = 0x01;
  bytes[2] = 0x01;
  return `did:key:z${encodeBase58btc(bytes)}`;
}

let svc: TestService;
let admin: string;

async function counts(): Promise<{ tenants: number; roots: number; keys: number }> {
  const db = svc.store.db;
  return { tenants: await db.$count(tenants), roots: await db.$count(trustedRoots), keys: await db.$count(apiKeys) };
}

/** Runs `fn` and checks that no tenant, root or key row appeared or vanished. */
async function storesNothing(fn: () => Promise<void>): Promise<void> {
  const before = await counts();
  await fn();
  expect(await counts()).toEqual(before);
}

function expectError(res: CallResult, status: number, code: string): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body.error.code).toBe(code);
  expect(typeof res.body.request_id).toBe('string');
}

function fieldsOf(res: CallResult): string[] {
  return (res.body.error.details.issues as { field: string }[]).map((i) => i.field).sort();
}

async function newTenant(name = 'acme'): Promise<string> {
  const res = await svc.call('POST', '/v1/admin/tenants', { key: admin, json: { name } });
  expect(res.status).toBe(201);
  return res.body.id as string;
}

async function newKey(tenant: string, body: Record<string, unknown> = { scopes: ['verify'] }): Promise<{ id: string; key: string }> {
  const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/api-keys`, { key: admin, json: body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body;
}

beforeAll(async () => {
  svc = await startTestService();
  admin = svc.adminKey;
});
afterAll(() => svc.close());

describe('admin API: authentication on every route', () => {
  let tenant: string;
  let ownKey: string;
  let keyId: string;
  const did = generateKeyPair().did;

  beforeAll(async () => {
    tenant = await newTenant('guarded');
    const created = await newKey(tenant, { scopes: ['issue', 'verify', 'report', 'audit'] });
    ownKey = created.key;
    keyId = created.id;
    const root = await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json: { did } });
    expect(root.status).toBe(201);
  });

  const routes = (): [string, string, unknown?][] => [
    ['POST', '/v1/admin/tenants', { name: 'x' }],
    ['GET', '/v1/admin/tenants'],
    ['POST', `/v1/admin/tenants/${tenant}/roots`, { did: generateKeyPair().did }],
    ['GET', `/v1/admin/tenants/${tenant}/roots`],
    ['DELETE', `/v1/admin/tenants/${tenant}/roots/${did}`],
    ['POST', `/v1/admin/tenants/${tenant}/api-keys`, { scopes: ['audit'] }],
    ['GET', `/v1/admin/tenants/${tenant}/api-keys`],
    ['DELETE', `/v1/admin/api-keys/${keyId}`],
  ];

  it('refuses a missing key with 401 and stores nothing', async () => {
    await storesNothing(async () => {
      for (const [method, path, json] of routes()) expectError(await svc.call(method, path, { json }), 401, 'UNAUTHORIZED');
    });
  });

  it("refuses a wrong key with 401, including one of the admin key's exact length (the constant-time compare)", async () => {
    const sameLength = `${admin.slice(0, -1)}${admin.endsWith('0') ? '1' : '0'}`;
    expect(sameLength).toHaveLength(admin.length);
    const wrongs = [sameLength, 'nope', `${admin}x`, admin.slice(0, -1), `bt_${'A'.repeat(43)}`];
    await storesNothing(async () => {
      for (const wrong of wrongs) {
        for (const [method, path, json] of routes()) expectError(await svc.call(method, path, { key: wrong, json }), 401, 'UNAUTHORIZED');
      }
    });
  });

  it('refuses a tenant key on every admin route of its own tenant with 403 naming the admin scope', async () => {
    await storesNothing(async () => {
      for (const [method, path, json] of routes()) {
        const res = await svc.call(method, path, { key: ownKey, json });
        expectError(res, 403, 'FORBIDDEN');
        expect(res.body.error.details.required_scopes).toEqual(['admin']);
      }
    });
    // The refused DELETE did not revoke the key, nor the root.
    const listed = await svc.call('GET', `/v1/admin/tenants/${tenant}/api-keys`, { key: admin });
    expect(listed.body.api_keys.find((k: { id: string }) => k.id === keyId).revoked_at).toBeNull();
    const roots = await svc.call('GET', `/v1/admin/tenants/${tenant}/roots`, { key: admin });
    expect(roots.body.roots.map((r: { did: string }) => r.did)).toContain(did);
  });

  it('answers 404 for unknown admin paths, in the error envelope', async () => {
    expectError(await svc.call('GET', '/v1/admin/nothing-here', { key: admin }), 404, 'NOT_FOUND');
  });
});

describe('POST /v1/admin/tenants', () => {
  it('creates a tenant: 201 {id, name, created_at}, name trimmed, no-store', async () => {
    const before = await counts();
    const res = await svc.call('POST', '/v1/admin/tenants', { key: admin, json: { name: '  Acme Corp  ' } });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ id: expect.stringMatching(/^ten_[0-9a-f]{32}$/), name: 'Acme Corp', created_at: expect.any(String) });
    expect(new Date(res.body.created_at).toISOString()).toBe(res.body.created_at);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect((await counts()).tenants).toBe(before.tenants + 1);
    const [row] = await svc.store.db.select().from(tenants).where(eq(tenants.id, res.body.id));
    expect(row?.name).toBe('Acme Corp');
  });

  it('accepts a name of exactly 200 characters', async () => {
    const res = await svc.call('POST', '/v1/admin/tenants', { key: admin, json: { name: 'n'.repeat(200) } });
    expect(res.status).toBe(201);
  });

  it.each([
    ['no name', {}, ['name']],
    ['empty name', { name: '' }, ['name']],
    ['blank name', { name: ' \t\n ' }, ['name']],
    ['name too long', { name: 'n'.repeat(201) }, ['name']],
    ['name not a string', { name: 42 }, ['name']],
    ['a name that displays as another (right-to-left override)', { name: 'acme\u202egnp.exe' }, ['name']],
    ['a name with a zero-width space', { name: 'ac\u200bme' }, ['name']],
    ['unknown field', { name: 'ok', plan: 'gold' }, ['plan']],
    ['several problems at once', { name: 7, extra: 1, more: 2 }, ['extra', 'more', 'name']],
    ['an array body', [{ name: 'x' }], ['(body)']],
    ['a string body', 'acme', ['(body)']],
    ['null body', null, ['(body)']],
  ])('refuses %s: 400 INVALID_REQUEST listing each field, nothing stored', async (_label, json, fields) => {
    await storesNothing(async () => {
      const res = await svc.call('POST', '/v1/admin/tenants', { key: admin, json });
      expectError(res, 400, 'INVALID_REQUEST');
      expect(fieldsOf(res)).toEqual(fields);
      // The message reads "<field> <predicate>": never the field name twice ("name name must be…").
      expect(res.body.error.message).not.toMatch(/\b(\w+) \1\b/);
      for (const issue of res.body.error.details.issues) expect(issue.message).toEqual(expect.any(String));
    });
  });

  it('says a missing name is required, and a name of another type is not a string', async () => {
    const missing = await svc.call('POST', '/v1/admin/tenants', { key: admin, json: {} });
    expect(missing.body.error.message).toBe('The request body is not valid: name is required (a string).');
    const number = await svc.call('POST', '/v1/admin/tenants', { key: admin, json: { name: 42 } });
    expect(number.body.error.message).toBe('The request body is not valid: name must be a string.');
  });

  it.each([
    ['a duplicate key', '{"name":"a","name":"b"}'],
    ['invalid JSON', '{"name":'],
    ['an empty body', ''],
  ])('refuses %s with 400 INVALID_REQUEST, nothing stored', async (_label, body) => {
    await storesNothing(async () => {
      const res = await svc.call('POST', '/v1/admin/tenants', { key: admin, body, headers: { 'content-type': 'application/json' } });
      expectError(res, 400, 'INVALID_REQUEST');
    });
  });

  it('refuses a body over the size limit with 413, nothing stored', async () => {
    await storesNothing(async () => {
      const res = await svc.call('POST', '/v1/admin/tenants', { key: admin, json: { name: 'x'.repeat(svc.deps.config.maxBodyBytes) } });
      expectError(res, 413, 'PAYLOAD_TOO_LARGE');
      // The advice fits any route: the limit, and the verify-only way round it named as such.
      expect(res.body.error.suggestion).toMatch(/^Send a smaller body \(the limit is BATON_MAX_BODY_BYTES/);
    });
  });

  it("the admin key on a tenant's route: 403 that says to make a key of the tenant, not to ask the operator", async () => {
    const tenant = await newTenant('admin-on-tenant-route');
    const routes: [string, string][] = [
      ['GET', '/v1/invocations'],
      ['GET', `/v1/delegations/sha256:${'0'.repeat(64)}`],
      ['POST', '/v1/verify'],
    ];
    for (const [method, path] of routes) {
      const res = await svc.call(method, path, { key: admin, json: method === 'POST' ? {} : undefined });
      expectError(res, 403, 'FORBIDDEN');
      expect(res.body.error.suggestion, path).toMatch(
        /^The admin key belongs to no tenant.*POST \/v1\/admin\/tenants\/\{tenant\}\/api-keys/,
      );
    }
    // A tenant's key without the scope keeps the general advice.
    const { key } = await newKey(tenant, { scopes: ['verify'] });
    const res = await svc.call('GET', '/v1/invocations', { key });
    expectError(res, 403, 'FORBIDDEN');
    expect(res.body.error.suggestion).toMatch(/scope named in details/);
  });
});

describe('GET /v1/admin/tenants', () => {
  it('lists tenants, oldest first', async () => {
    const a = await newTenant('list-a');
    const b = await newTenant('list-b');
    const res = await svc.call('GET', '/v1/admin/tenants', { key: admin });
    expect(res.status).toBe(200);
    const ids = res.body.tenants.map((t: { id: string }) => t.id);
    expect(ids).toContain(a);
    expect(ids.indexOf(a)).toBeLessThan(ids.indexOf(b));
    expect(res.body.tenants.find((t: { id: string }) => t.id === b)).toEqual({ id: b, name: 'list-b', created_at: expect.any(String) });
  });
});

describe('trusted roots', () => {
  let tenant: string;
  beforeAll(async () => {
    tenant = await newTenant('roots');
  });

  it('adds a root: 201 {tenant_id, did, label, created_at}; the same DID again is 200 with the stored row', async () => {
    const did = generateKeyPair().did;
    const first = await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json: { did, label: 'Ops signing key' } });
    expect(first.status).toBe(201);
    expect(first.body).toEqual({ tenant_id: tenant, did, label: 'Ops signing key', created_at: expect.any(String) });

    await storesNothing(async () => {
      const again = await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json: { did, label: 'Ops signing key' } });
      expect(again.status).toBe(200);
      expect(again.body).toEqual(first.body);
      // A different label does not rewrite the stored row: the answer is what is stored.
      const relabel = await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json: { did, label: 'other' } });
      expect(relabel.status).toBe(200);
      expect(relabel.body).toEqual(first.body);
    });
  });

  it('adds a root without a label (label null)', async () => {
    const did = generateKeyPair().did;
    const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json: { did } });
    expect(res.status).toBe(201);
    expect(res.body.label).toBeNull();
  });

  it('refuses a small-order key with 400 WEAK_KEY, nothing stored', async () => {
    await storesNothing(async () => {
      const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json: { did: smallOrderDid() } });
      expectError(res, 400, 'WEAK_KEY');
      expect(res.body.error.details.field).toBe('did');
    });
  });

  it.each([
    ['a did:web', 'did:web:example.com'],
    ['an empty string', ''],
    ['a did:key with a leading zero byte', 'did:key:z1' + generateKeyPair().did.slice('did:key:z'.length)],
    ['a did:key of another key type', `did:key:z${encodeBase58btc(new Uint8Array([0xe7, 0x01, ...new Uint8Array(33).fill(2)]))}`],
  ])('refuses %s with 400 INVALID_DID, nothing stored', async (_label, did) => {
    await storesNothing(async () => {
      const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json: { did } });
      expectError(res, 400, 'INVALID_DID');
    });
  });

  it.each([
    ['no did', {}, ['did']],
    ['did not a string', { did: 5 }, ['did']],
    ['blank label', { did: 'did:key:zX', label: '  ' }, ['label']],
    ['label too long', { did: 'did:key:zX', label: 'l'.repeat(201) }, ['label']],
    ['unknown field', { did: 'did:key:zX', tenant_id: 'ten_x' }, ['tenant_id']],
  ])('refuses a body with %s: 400 INVALID_REQUEST, nothing stored', async (_label, json, fields) => {
    await storesNothing(async () => {
      const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json });
      expectError(res, 400, 'INVALID_REQUEST');
      expect(fieldsOf(res)).toEqual(fields);
      // The message reads "<field> <predicate>": never the field name twice ("name name must be…").
      expect(res.body.error.message).not.toMatch(/\b(\w+) \1\b/);
    });
  });

  it('refuses a duplicate-key body with 400, nothing stored', async () => {
    const did = generateKeyPair().did;
    await storesNothing(async () => {
      const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, {
        key: admin,
        body: `{"did":"${did}","did":"${generateKeyPair().did}"}`,
        headers: { 'content-type': 'application/json' },
      });
      expectError(res, 400, 'INVALID_REQUEST');
    });
  });

  it('answers 404 for an unknown tenant on add, list and delete; nothing stored', async () => {
    const did = generateKeyPair().did;
    await storesNothing(async () => {
      expectError(await svc.call('POST', '/v1/admin/tenants/ten_nobody/roots', { key: admin, json: { did } }), 404, 'NOT_FOUND');
      expectError(await svc.call('GET', '/v1/admin/tenants/ten_nobody/roots', { key: admin }), 404, 'NOT_FOUND');
      expectError(await svc.call('DELETE', `/v1/admin/tenants/ten_nobody/roots/${did}`, { key: admin }), 404, 'NOT_FOUND');
    });
  });

  it("refuses a DID another tenant already trusts with 409 CONFLICT (a DR belongs to its root's tenant)", async () => {
    const other = await newTenant('roots-other');
    const did = generateKeyPair().did;
    expect((await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json: { did } })).status).toBe(201);
    await storesNothing(async () => {
      const res = await svc.call('POST', `/v1/admin/tenants/${other}/roots`, { key: admin, json: { did } });
      expectError(res, 409, 'CONFLICT');
    });
  });

  it('moves a root DID to another tenant only while no delegation rooted at it is stored elsewhere', async () => {
    const from = await newTenant('roots-move-from');
    const to = await newTenant('roots-move-to');
    const root = generateKeyPair();
    const rootsOf = (t: string) => `/v1/admin/tenants/${t}/roots`;
    expect((await svc.call('POST', rootsOf(from), { key: admin, json: { did: root.did } })).status).toBe(201);
    // Nothing stored under it yet: it may move, and back.
    expect((await svc.call('DELETE', `${rootsOf(from)}/${root.did}`, { key: admin })).status).toBe(204);
    expect((await svc.call('POST', rootsOf(to), { key: admin, json: { did: root.did } })).status).toBe(201);
    expect((await svc.call('DELETE', `${rootsOf(to)}/${root.did}`, { key: admin })).status).toBe(204);
    expect((await svc.call('POST', rootsOf(from), { key: admin, json: { did: root.did } })).status).toBe(201);

    // A delegation stored under it keeps its counters, revocation and used jtis in its tenant.
    const issue = await newKey(from, { scopes: ['issue'] });
    const dr = createRootDelegation({
      issuer: root,
      audience: generateKeyPair().did,
      policy: { allowed_tools: ['x'], max_calls: 1 },
      iat: T0,
      nbf: T0 - 60,
      exp: T0 + 3600,
    });
    const stored = await svc.call('POST', '/v1/delegations', { key: issue.key, json: { receipt: dr.jws } });
    expect(stored.status, JSON.stringify(stored.body)).toBe(201);
    expect((await svc.call('DELETE', `${rootsOf(from)}/${root.did}`, { key: admin })).status).toBe(204);
    await storesNothing(async () => {
      const res = await svc.call('POST', rootsOf(to), { key: admin, json: { did: root.did } });
      expectError(res, 409, 'CONFLICT');
      expect(res.body.error.message).toContain('stores delegations rooted at this DID');
    });
    // Its own tenant may trust it again.
    expect((await svc.call('POST', rootsOf(from), { key: admin, json: { did: root.did } })).status).toBe(201);
  });

  it('lists roots of one tenant only', async () => {
    const mine = await newTenant('roots-list');
    const theirs = await newTenant('roots-list-other');
    const a = generateKeyPair().did;
    const b = generateKeyPair().did;
    await svc.call('POST', `/v1/admin/tenants/${mine}/roots`, { key: admin, json: { did: a, label: 'a' } });
    await svc.call('POST', `/v1/admin/tenants/${theirs}/roots`, { key: admin, json: { did: b } });
    const res = await svc.call('GET', `/v1/admin/tenants/${mine}/roots`, { key: admin });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ roots: [{ tenant_id: mine, did: a, label: 'a', created_at: expect.any(String) }] });
    const empty = await newTenant('roots-empty');
    expect((await svc.call('GET', `/v1/admin/tenants/${empty}/roots`, { key: admin })).body).toEqual({ roots: [] });
  });

  it('removes a root: 204, then 404; a percent-encoded DID in the path works too', async () => {
    const did = generateKeyPair().did;
    await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json: { did } });
    const res = await svc.call('DELETE', `/v1/admin/tenants/${tenant}/roots/${did}`, { key: admin });
    expect(res.status).toBe(204);
    expect(res.body).toBeUndefined();
    expectError(await svc.call('DELETE', `/v1/admin/tenants/${tenant}/roots/${did}`, { key: admin }), 404, 'NOT_FOUND');
    const roots = await svc.call('GET', `/v1/admin/tenants/${tenant}/roots`, { key: admin });
    expect(roots.body.roots.map((r: { did: string }) => r.did)).not.toContain(did);

    const encoded = generateKeyPair().did;
    await svc.call('POST', `/v1/admin/tenants/${tenant}/roots`, { key: admin, json: { did: encoded } });
    const del = await svc.call('DELETE', `/v1/admin/tenants/${tenant}/roots/${encodeURIComponent(encoded)}`, { key: admin });
    expect(del.status).toBe(204);
  });

  it("does not remove another tenant's root through this tenant's path (404)", async () => {
    const other = await newTenant('roots-del-other');
    const did = generateKeyPair().did;
    await svc.call('POST', `/v1/admin/tenants/${other}/roots`, { key: admin, json: { did } });
    await storesNothing(async () => {
      expectError(await svc.call('DELETE', `/v1/admin/tenants/${tenant}/roots/${did}`, { key: admin }), 404, 'NOT_FOUND');
    });
  });
});

describe('API keys', () => {
  let tenant: string;
  beforeAll(async () => {
    tenant = await newTenant('keys');
  });

  it('creates a key: 201 with the plaintext once; only its SHA-256 is stored', async () => {
    const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/api-keys`, {
      key: admin,
      json: { scopes: ['verify', 'report'], name: ' tool server A ', tool_server: 'mcp://tools.example.com' },
    });
    expect(res.status).toBe(201);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.body).toEqual({
      id: expect.stringMatching(/^key_[0-9a-f]{32}$/),
      key: expect.stringMatching(/^bt_[A-Za-z0-9_-]{43}$/),
      tenant_id: tenant,
      scopes: ['verify', 'report'],
      name: 'tool server A',
      tool_server: 'mcp://tools.example.com',
      created_at: expect.any(String),
      expires_at: null,
      rotated_from: null,
    });
    const [row] = await svc.store.db.select().from(apiKeys).where(eq(apiKeys.id, res.body.id));
    expect(row?.secretHash).toBe(createHash('sha256').update(res.body.key).digest('hex'));
    expect(JSON.stringify(row)).not.toContain(res.body.key);
  });

  it('creates keys with defaults: name and tool_server null', async () => {
    const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/api-keys`, { key: admin, json: { scopes: ['audit'] } });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ scopes: ['audit'], name: null, tool_server: null });
  });

  it('mints a different key every time', async () => {
    const a = await newKey(tenant);
    const b = await newKey(tenant);
    expect(a.key).not.toBe(b.key);
    expect(a.id).not.toBe(b.id);
  });

  it.each([
    ['no scopes', {}, ['scopes']],
    ['empty scopes', { scopes: [] }, ['scopes']],
    ['the admin scope', { scopes: ['admin'] }, ['scopes.0']],
    ['an unknown scope', { scopes: ['verify', 'root'] }, ['scopes.1']],
    ['a repeated scope', { scopes: ['issue', 'issue'] }, ['scopes']],
    ['scopes as a string', { scopes: 'verify' }, ['scopes']],
    ['tool_server without verify or report', { scopes: ['audit', 'issue'], tool_server: 'mcp://x' }, ['tool_server']],
    ['an empty tool_server', { scopes: ['verify'], tool_server: '' }, ['tool_server']],
    ['a tool_server over 512 characters', { scopes: ['verify'], tool_server: 'x'.repeat(513) }, ['tool_server']],
    ['a tool_server with surrounding spaces', { scopes: ['verify'], tool_server: ' mcp://x ' }, ['tool_server']],
    ['a tool_server behind a zero-width space', { scopes: ['verify'], tool_server: '\u200bmcp://search' }, ['tool_server']],
    ['a key name with a bidi override', { scopes: ['verify'], name: 'ci\u202e' }, ['name']],
    ['a blank name', { scopes: ['verify'], name: '  ' }, ['name']],
    ['an unknown field', { scopes: ['verify'], tenant_id: 'ten_other' }, ['tenant_id']],
    ['several problems', { scopes: ['admin', 'x'], name: 3, key: 'bt_mine' }, ['key', 'name', 'scopes.0', 'scopes.1']],
  ])('refuses %s: 400 INVALID_REQUEST listing each field, nothing stored', async (_label, json, fields) => {
    await storesNothing(async () => {
      const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/api-keys`, { key: admin, json });
      expectError(res, 400, 'INVALID_REQUEST');
      expect(fieldsOf(res)).toEqual(fields);
      // The message reads "<field> <predicate>": never the field name twice ("name name must be…").
      expect(res.body.error.message).not.toMatch(/\b(\w+) \1\b/);
    });
  });

  it('accepts a tool_server of exactly 512 characters on a verify key', async () => {
    const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/api-keys`, {
      key: admin,
      json: { scopes: ['verify'], tool_server: 't'.repeat(512) },
    });
    expect(res.status).toBe(201);
  });

  it('refuses a duplicate-key body with 400, nothing stored', async () => {
    await storesNothing(async () => {
      const res = await svc.call('POST', `/v1/admin/tenants/${tenant}/api-keys`, {
        key: admin,
        body: '{"scopes":["audit"],"scopes":["verify"]}',
        headers: { 'content-type': 'application/json' },
      });
      expectError(res, 400, 'INVALID_REQUEST');
    });
  });

  it('answers 404 for an unknown tenant, nothing stored', async () => {
    await storesNothing(async () => {
      expectError(
        await svc.call('POST', '/v1/admin/tenants/ten_nobody/api-keys', { key: admin, json: { scopes: ['verify'] } }),
        404,
        'NOT_FOUND',
      );
      expectError(await svc.call('GET', '/v1/admin/tenants/ten_nobody/api-keys', { key: admin }), 404, 'NOT_FOUND');
    });
  });

  it("lists a tenant's keys without secrets or hashes, revoked ones with revoked_at", async () => {
    const own = await newTenant('keys-list');
    const other = await newTenant('keys-list-other');
    const a = await newKey(own, { scopes: ['issue'], name: 'issuer' });
    const b = await newKey(own, { scopes: ['verify'], tool_server: 'mcp://t' });
    await newKey(other, { scopes: ['audit'] });
    expect((await svc.call('DELETE', `/v1/admin/api-keys/${b.id}`, { key: admin })).status).toBe(204);

    const res = await svc.call('GET', `/v1/admin/tenants/${own}/api-keys`, { key: admin });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      api_keys: [
        {
          id: a.id,
          tenant_id: own,
          scopes: ['issue'],
          name: 'issuer',
          tool_server: null,
          created_at: expect.any(String),
          revoked_at: null,
          expires_at: null,
          last_used_at: null,
          rotated_from: null,
        },
        {
          id: b.id,
          tenant_id: own,
          scopes: ['verify'],
          name: null,
          tool_server: 'mcp://t',
          created_at: expect.any(String),
          revoked_at: expect.any(String),
          expires_at: null,
          last_used_at: null,
          rotated_from: null,
        },
      ],
    });
    const text = JSON.stringify(res.body);
    for (const k of [a, b]) {
      expect(text).not.toContain(k.key);
      expect(text).not.toContain(createHash('sha256').update(k.key).digest('hex'));
    }
  });

  it('revokes a key: 204, again 204 keeping the first revoked_at, unknown id 404', async () => {
    const k = await newKey(tenant);
    expect((await svc.call('DELETE', `/v1/admin/api-keys/${k.id}`, { key: admin })).status).toBe(204);
    const [first] = await svc.store.db.select().from(apiKeys).where(eq(apiKeys.id, k.id));
    expect(first?.revokedAt).toBeInstanceOf(Date);
    const again = await svc.call('DELETE', `/v1/admin/api-keys/${k.id}`, { key: admin });
    expect(again.status).toBe(204);
    const [second] = await svc.store.db.select().from(apiKeys).where(eq(apiKeys.id, k.id));
    expect(second?.revokedAt?.getTime()).toBe(first?.revokedAt?.getTime());
    await storesNothing(async () => {
      const unknown = await svc.call('DELETE', '/v1/admin/api-keys/key_nobody', { key: admin });
      expectError(unknown, 404, 'NOT_FOUND');
      const rotated = await svc.call('POST', '/v1/admin/api-keys/key_nobody/rotate', { key: admin, json: {} });
      expectError(rotated, 404, 'NOT_FOUND');
      // No tenant is involved on these routes: the advice says where key ids are, not to check a tenant.
      for (const res of [unknown, rotated]) {
        expect(res.body.error.suggestion).toMatch(/^Key ids look like key_…: list a tenant's keys/);
        expect(res.body.error.suggestion).not.toMatch(/belongs to the tenant/);
      }
    });
  });
});

describe('tenant isolation on the admin API', () => {
  it("a key of tenant A never sees tenant B's roots or keys: 404, the same as a tenant that does not exist", async () => {
    const a = await newTenant('iso-a');
    const b = await newTenant('iso-b');
    const keyA = (await newKey(a, { scopes: ['issue', 'verify', 'report', 'audit'] })).key;
    const didB = generateKeyPair().did;
    await svc.call('POST', `/v1/admin/tenants/${b}/roots`, { key: admin, json: { did: didB } });
    const keyB = await newKey(b, { scopes: ['audit'] });

    await storesNothing(async () => {
      for (const target of [b, 'ten_nobody']) {
        const reads = [
          await svc.call('GET', `/v1/admin/tenants/${target}/roots`, { key: keyA }),
          await svc.call('GET', `/v1/admin/tenants/${target}/api-keys`, { key: keyA }),
          await svc.call('POST', `/v1/admin/tenants/${target}/roots`, { key: keyA, json: { did: generateKeyPair().did } }),
          await svc.call('POST', `/v1/admin/tenants/${target}/api-keys`, { key: keyA, json: { scopes: ['verify'] } }),
          await svc.call('DELETE', `/v1/admin/tenants/${target}/roots/${didB}`, { key: keyA }),
        ];
        for (const res of reads) {
          expectError(res, 404, 'NOT_FOUND');
          const text = JSON.stringify(res.body);
          expect(text).not.toContain(didB);
          expect(text).not.toContain(keyB.id);
        }
      }
      // Revoking by id is an admin-only act; a tenant key is refused before any lookup.
      expectError(await svc.call('DELETE', `/v1/admin/api-keys/${keyB.id}`, { key: keyA }), 403, 'FORBIDDEN');
    });
    const listed = await svc.call('GET', `/v1/admin/tenants/${b}/api-keys`, { key: admin });
    expect(listed.body.api_keys[0].revoked_at).toBeNull();
  });
});
