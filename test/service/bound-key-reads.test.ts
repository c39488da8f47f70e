/**
 * Keys bound to one tool server, on real PostgreSQL (design.md §1): a key with
 * `tool_server` and none of `issue`, `audit` and `approve` reads, and reports actuals for,
 * only the invocations naming its server. Another server's invocation is
 * answered exactly as an unknown jti; the list under a record holds only its
 * server's calls, paged exactly; the delegation reads (record, chain, tree)
 * are refused 403 before any lookup. A bound key that also holds `audit`, and
 * an unbound key, read everything as before.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { count } from 'drizzle-orm';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import { actuals } from '../../src/store/schema/index.js';
import {
  createTenantKey,
  setupTenant,
  startTestService,
  storeTwoLeaves,
  type CallResult,
  type TestService,
  type TestTenant,
} from '../support/service.js';
import { ARGS, T0, TOOL_SERVER } from '../support/fixtures.js';

const OTHER_SERVER = 'mcp://other.example';

let svc: TestService;
let tenant: TestTenant;
/** Keys of `tenant`, each made through the admin API. */
const keys = {} as {
  verifyMine: string; // verify, bound to TOOL_SERVER
  reportMine: string; // report, bound to TOOL_SERVER
  verifyOther: string; // verify, bound to OTHER_SERVER
  reportOther: string; // report, bound to OTHER_SERVER
  bothOther: string; // verify + report, bound to OTHER_SERVER
  auditOther: string; // verify + audit, bound to OTHER_SERVER: audit is a tenant-wide grant
  approveOther: string; // verify + approve, bound to OTHER_SERVER: an approver reads every held call
};

// R -> A (root); A -> B (leafA); A -> C (leafB)
const A = generateKeyPair(),
  B = generateKeyPair(),
  C = generateKeyPair();
let root: SignedDelegation, leafA: SignedDelegation, leafB: SignedDelegation;

/** Calls through [root, leafA], oldest first, alternating servers. */
const mine: string[] = [];
const theirs: string[] = [];
/** A call through [root, leafB], naming TOOL_SERVER only. */
let onlyMineOnLeafB: string;

async function boundKey(scopes: string[], toolServer: string): Promise<string> {
  const r = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
    key: svc.adminKey,
    json: { scopes, tool_server: toolServer, name: `${scopes.join('+')} for ${toolServer}` },
  });
  if (r.status !== 201) throw new Error(`key: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.key as string;
}

let seq = 0;
/** POST /v1/verify of a web_search call naming `toolServer`, with the tenant's unbound verify key unless `key`. */
async function verifyCall(chain: SignedDelegation[], invoker: KeyPair, toolServer: string, o: { key?: string; jti?: string } = {}) {
  const jti = o.jti ?? `inv:bound-${++seq}`;
  const invocation = createInvocation({ chain, invoker, args: { ...ARGS }, toolServer, iat: T0, jti });
  const res = await svc.call('POST', '/v1/verify', { key: o.key ?? tenant.keys.verify, json: makeBundle(invocation, chain) });
  return { jti, invocation, res };
}

async function allowedCall(chain: SignedDelegation[], invoker: KeyPair, toolServer: string): Promise<string> {
  const { jti, res } = await verifyCall(chain, invoker, toolServer);
  if (res.status !== 200 || res.body.valid !== true) throw new Error(`verify: ${res.status} ${JSON.stringify(res.body)}`);
  return jti;
}

/** An error answer with the identifier asked for replaced, and the per-request id dropped, for comparing two answers. */
function shapeOf(r: CallResult, id: string) {
  const text = JSON.stringify(r.body).split(id).join('<id>');
  const body = JSON.parse(text) as { error: Record<string, unknown> };
  const { request_id: _r, ...error } = body.error;
  return { status: r.status, error };
}

const get = (path: string, key: string) => svc.call('GET', path, { key });

/** Every page of the list under `hash` for `key`, `limit` at a time. */
async function listAll(hash: string, key: string, limit: number) {
  const pages: string[][] = [];
  let cursor: string | null = null;
  do {
    const q: string = `limit=${limit}${cursor === null ? '' : `&cursor=${cursor}`}`;
    const r = await get(`/v1/delegations/${hash}/invocations?${q}`, key);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    pages.push(r.body.invocations.map((i: { jti: string }) => i.jti));
    cursor = r.body.next_cursor;
  } while (cursor !== null && pages.length < 50);
  return pages;
}

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  ({ root, leafA, leafB } = await storeTwoLeaves(svc, tenant, { allowed_tools: ['web_search'], max_cost_usd: 10 }, A, B, C));
  keys.verifyMine = await boundKey(['verify'], TOOL_SERVER);
  keys.reportMine = await boundKey(['report'], TOOL_SERVER);
  keys.verifyOther = await boundKey(['verify'], OTHER_SERVER);
  keys.reportOther = await boundKey(['report'], OTHER_SERVER);
  keys.bothOther = await boundKey(['verify', 'report'], OTHER_SERVER);
  keys.auditOther = await boundKey(['verify', 'audit'], OTHER_SERVER);
  keys.approveOther = await boundKey(['verify', 'approve'], OTHER_SERVER);
  // 5 calls naming TOOL_SERVER and 4 naming OTHER_SERVER, interleaved, through leafA.
  for (let i = 0; i < 9; i++) {
    if (i % 2 === 0) mine.push(await allowedCall([root, leafA], B, TOOL_SERVER));
    else theirs.push(await allowedCall([root, leafA], B, OTHER_SERVER));
  }
  onlyMineOnLeafB = await allowedCall([root, leafB], C, TOOL_SERVER);
});
afterAll(async () => svc?.close());

describe('GET /v1/invocations/{jti} with a key bound to a tool server', () => {
  it("another server's invocation is answered exactly as an unknown jti (verify and report keys)", async () => {
    const jti = mine[0]!;
    for (const key of [keys.verifyOther, keys.reportOther, keys.bothOther]) {
      const foreign = await get(`/v1/invocations/${jti}`, key);
      const unknown = await get('/v1/invocations/inv:never-stored', key);
      expect(foreign.status).toBe(404);
      expect(foreign.body.error.code).toBe('NOT_FOUND');
      expect(shapeOf(foreign, jti)).toEqual(shapeOf(unknown, 'inv:never-stored'));
      expect(JSON.stringify(foreign.body)).not.toContain(leafA.hash);
    }
  });

  it('its own server’s invocation is read in full (200, with its JWS)', async () => {
    for (const key of [keys.verifyMine, keys.reportMine]) {
      const r = await get(`/v1/invocations/${mine[1]!}`, key);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body).toMatchObject({ jti: mine[1], decision: 'allowed', dr_chain: [root.hash, leafA.hash] });
      expect(typeof r.body.jws).toBe('string');
    }
    const r = await get(`/v1/invocations/${theirs[0]!}`, keys.verifyOther);
    expect(r.status).toBe(200);
    expect(r.body.jti).toBe(theirs[0]);
  });

  it("a jti only another server's keys were denied for is unknown to it; its own server's denials and replays of its calls are shown", async () => {
    // A call naming TOOL_SERVER, sent with a key bound to OTHER_SERVER: denied, recorded with that key.
    const deniedThere = await verifyCall([root, leafA], B, TOOL_SERVER, { key: keys.verifyOther });
    expect(deniedThere.res.body.valid).toBe(false);
    const seenThere = await get(`/v1/invocations/${deniedThere.jti}`, keys.verifyOther);
    expect(seenThere.status, JSON.stringify(seenThere.body)).toBe(200);
    expect(seenThere.body.decision).toBe('denied');
    const hidden = await get(`/v1/invocations/${deniedThere.jti}`, keys.verifyMine);
    const unknown = await get('/v1/invocations/inv:never-stored', keys.verifyMine);
    expect(shapeOf(hidden, deniedThere.jti)).toEqual(shapeOf(unknown, 'inv:never-stored'));

    // A replay of a TOOL_SERVER call by another, unbound key: shown to its server, hidden from the other.
    const { jti, invocation } = await verifyCall([root, leafA], B, TOOL_SERVER);
    const replayer = await createTenantKey(svc, tenant.id, ['verify'], 'second verifier');
    const replay = await svc.call('POST', '/v1/verify', { key: replayer, json: makeBundle(invocation, [root, leafA]) });
    expect(replay.body.error.code).toBe('REPLAY_DETECTED');
    const own = await get(`/v1/invocations/${jti}`, keys.verifyMine);
    expect(own.status).toBe(200);
    expect(own.body.denials).toHaveLength(1);
    expect((await get(`/v1/invocations/${jti}`, keys.verifyOther)).status).toBe(404);
  });
});

describe('GET /v1/delegations/{hash}/invocations with a key bound to a tool server', () => {
  it('lists only the invocations naming its server, paged exactly (filtered in the query, not per page)', async () => {
    const pages = await listAll(root.hash, keys.verifyMine, 2);
    // 6 calls name TOOL_SERVER under the root (5 through leafA, 1 through leafB) and perhaps the replayed one.
    const all = pages.flat();
    expect(new Set(all).size).toBe(all.length);
    for (const jti of [...mine, onlyMineOnLeafB]) expect(all).toContain(jti);
    for (const jti of theirs) expect(all).not.toContain(jti);
    // Every page but the last is full: no page was thinned after it was read.
    for (const page of pages.slice(0, -1)) expect(page).toHaveLength(2);
    // The same order as the unbound view, with the other server's calls taken out.
    const everything = (await listAll(root.hash, tenant.keys.verify, 100)).flat();
    expect(all).toEqual(everything.filter((j) => all.includes(j)));
    expect(everything.filter((j) => !all.includes(j)).sort()).toEqual(expect.arrayContaining([...theirs].sort()));

    const theirPages = await listAll(leafA.hash, keys.reportOther, 3);
    expect(theirPages.flat()).toEqual([...theirs].reverse());
    expect(theirPages.map((p) => p.length)).toEqual([3, 1]);
  });

  it('a record none of its server’s calls pass through is answered exactly as an unknown one', async () => {
    const foreign = await get(`/v1/delegations/${leafB.hash}/invocations`, keys.verifyOther);
    const absent = `sha256:${'0'.repeat(64)}`;
    const unknown = await get(`/v1/delegations/${absent}/invocations`, keys.verifyOther);
    expect(foreign.status).toBe(404);
    expect(shapeOf(foreign, leafB.hash)).toEqual(shapeOf(unknown, absent));
  });
});

describe('delegation reads with a key bound to a tool server', () => {
  it('GET /v1/delegations/{hash}, /chain and /tree are refused 403 before any lookup', async () => {
    const absent = `sha256:${'1'.repeat(64)}`;
    for (const key of [keys.verifyMine, keys.reportMine, keys.bothOther]) {
      for (const suffix of ['', '/chain', '/tree']) {
        const stored = await get(`/v1/delegations/${root.hash}${suffix}`, key);
        expect(stored.status, `${suffix} ${JSON.stringify(stored.body)}`).toBe(403);
        expect(stored.body.error.code).toBe('FORBIDDEN');
        expect(stored.body.error.message).toContain('use an `audit` key to read delegations');
        expect(JSON.stringify(stored.body)).not.toContain('spend');
        const missing = await get(`/v1/delegations/${absent}${suffix}`, key);
        expect(shapeOf(missing, absent)).toEqual(shapeOf(stored, root.hash));
      }
    }
  });
});

describe('POST /v1/invocations/{jti}/actuals with a key bound to a tool server', () => {
  const body = { source: 'api-usage', cost_usd: 0.1 };
  const storedActuals = async () => (await svc.store.db.select({ n: count() }).from(actuals))[0]!.n;

  it("another server's invocation is answered exactly as an unknown jti (404), and nothing is stored", async () => {
    const before = await storedActuals();
    for (const key of [keys.reportOther, keys.bothOther]) {
      const foreign = await svc.call('POST', `/v1/invocations/${mine[2]!}/actuals`, { key, json: body });
      const unknown = await svc.call('POST', '/v1/invocations/inv:never-stored/actuals', { key, json: body });
      expect(foreign.status).toBe(404);
      expect(shapeOf(foreign, mine[2]!)).toEqual(shapeOf(unknown, 'inv:never-stored'));
    }
    expect(await storedActuals()).toBe(before);
    expect((await svc.call('POST', `/v1/invocations/${mine[2]!}/actuals`, { key: keys.reportMine, json: body })).status).toBe(201);
  });
});

describe('keys that read the whole tenant', () => {
  // audit and issue read the tenant; approve too: its approvals show every server's held calls.
  for (const which of ['auditOther', 'approveOther'] as const) {
    it(`a bound key that also holds ${which === 'auditOther' ? 'audit' : 'approve'} still reads every invocation and delegation`, async () => {
      const key = keys[which];
      expect((await get(`/v1/invocations/${mine[3]!}`, key)).status).toBe(200);
      const listed = (await listAll(leafA.hash, key, 100)).flat();
      for (const jti of [...mine, ...theirs]) expect(listed).toContain(jti);
      for (const suffix of ['', '/chain', '/tree']) expect((await get(`/v1/delegations/${root.hash}${suffix}`, key)).status).toBe(200);
    });
  }

  it('an unbound verify key is unchanged: every invocation, the whole list, delegations', async () => {
    const key = tenant.keys.verify;
    for (const jti of [mine[0]!, theirs[0]!]) expect((await get(`/v1/invocations/${jti}`, key)).status).toBe(200);
    const listed = (await listAll(leafA.hash, key, 4)).flat();
    for (const jti of [...mine, ...theirs]) expect(listed).toContain(jti);
    for (const suffix of ['', '/chain', '/tree']) expect((await get(`/v1/delegations/${root.hash}${suffix}`, key)).status).toBe(200);
  });
});
