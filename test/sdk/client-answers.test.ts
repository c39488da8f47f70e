/**
 * What BatonClient takes from an answer it cannot check against a live service: a chain that is
 * not the one asked for, a 2xx body of the wrong shape, a proxy's status (retryable or not), and a
 * per-call timeout that is no timeout. A fake fetch plays the server, so nothing here needs
 * PostgreSQL.
 */
import { describe, expect, it } from 'vitest';
import { BatonApiError, BatonClient, adminKeys, createApprovalDecision, createRevocation, type ChainResult } from '../../src/sdk/index.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, createSubDelegation, type SignedDelegation } from '../../src/sdk/records.js';
import { signJws } from '../../src/protocol/jws.js';
import { recordHash } from '../../src/protocol/hash.js';
import { MAX_ANSWER_BYTES, MAX_VERIFY_ANSWER_BYTES } from '../../src/sdk/client.js';
import { MAX_CHAIN_DEPTH } from '../../src/protocol/records.js';

interface FakeAnswer {
  readonly status?: number;
  readonly type?: string;
  readonly body: unknown;
}

/** A client whose every request is answered by `answer` (JSON unless told), counting the requests. */
function fakeBaton(answer: (url: URL) => FakeAnswer) {
  const requests: URL[] = [];
  const client = new BatonClient({
    baseUrl: 'http://baton.test',
    apiKey: 'bt_x',
    fetch: (input) => {
      const url = new URL(String(input));
      requests.push(url);
      const a = answer(url);
      const text = typeof a.body === 'string' ? a.body : JSON.stringify(a.body);
      return Promise.resolve(
        new Response(a.status === 204 ? null : text, {
          status: a.status ?? 200,
          headers: { 'content-type': a.type ?? 'application/json' },
        }),
      );
    },
  });
  return { client, requests };
}

async function rejection(p: Promise<unknown>): Promise<BatonApiError> {
  const e = await p.then(
    () => {
      throw new Error('expected the call to throw');
    },
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(BatonApiError);
  return e as BatonApiError;
}

// ---------------------------------------------------------------- getChain

/** The chain as GET /v1/delegations/{hash}/chain serves it. */
function servedChain(records: readonly SignedDelegation[], hash = records[records.length - 1]!.hash): ChainResult {
  return {
    hash,
    root_principal: records[0]!.payload.iss,
    receipts: records.map((r) => r.jws),
    records: records.map((r, depth) => ({
      ...r.payload,
      hash: r.hash,
      jws: r.jws,
      depth,
      parent_hash: r.payload.prev_dr_hash ?? null,
      root_hash: records[0]!.hash,
      created_at: '2025-01-01T00:00:00Z',
      status: 'active',
      revoked_at: null,
      revoked_by: null,
      service_receipt: null,
    })) as unknown as ChainResult['records'],
  };
}

describe('getChain takes only the chain of the hash asked for', () => {
  const operator = generateKeyPair();
  const agent = generateKeyPair();
  const worker = generateKeyPair();
  const root = createRootDelegation({ issuer: operator, audience: agent.did, policy: { max_calls: 10 } });
  const asked = createSubDelegation({ parent: root, issuer: agent, audience: worker.did, policy: { max_calls: 3 } });
  // The same hand-off, but wider: what a wrong base URL or a hostile server would have the user sign under.
  const wider = createSubDelegation({ parent: root, issuer: agent, audience: worker.did, policy: { max_calls: 10 } });

  const chainAnswer = (body: unknown) => fakeBaton(() => ({ body })).client.getChain(asked.hash);

  it('the chain ending at the hash, each record linked to the one before and signed by its issuer, is taken', async () => {
    const chain = await chainAnswer(servedChain([root, asked]));
    expect(chain.receipts).toEqual([root.jws, asked.jws]);
  });

  // A record naming the agent as its issuer, signed with another key.
  const forgedPayload = { ...asked.payload, policy: { max_calls: 50 } };
  const forgedJws = signJws(forgedPayload, generateKeyPair().seed);
  const forged = { jws: forgedJws, hash: recordHash(forgedJws), payload: forgedPayload } as SignedDelegation;
  const otherRoot = createRootDelegation({ issuer: operator, audience: agent.did, policy: { max_calls: 50 } });
  const refused: { what: string; body: unknown; why: RegExp }[] = [
    { what: 'another chain', body: servedChain([root, wider]), why: new RegExp(`ends at ${wider.hash}`) },
    {
      what: 'another chain, labelled with the hash asked for',
      body: servedChain([root, wider], asked.hash),
      why: new RegExp(`ends at ${wider.hash}`),
    },
    { what: 'no records', body: { ...servedChain([root, asked]), receipts: [], records: [] }, why: /holds no delegation record/ },
    {
      what: 'the leaf under another parent',
      body: { ...servedChain([root, asked]), receipts: [otherRoot.jws, asked.jws] },
      why: /receipts\[1\] names parent .* not receipts\[0\]/,
    },
    { what: 'the leaf alone, without its root', body: servedChain([asked]), why: /receipts\[0\] names a parent/ },
    {
      what: 'a forged signature',
      body: { ...servedChain([root, asked]), receipts: [root.jws, forged.jws] },
      why: /signature of receipts\[1\] does not verify/,
    },
    {
      what: 'records that are not the receipts',
      body: { ...servedChain([root, asked]), records: servedChain([root, wider]).records },
      why: /records\[1\] is not receipts\[1\]/,
    },
    // What `baton chain` shows beside each receipt must be what it signs, not a proxy's rewrite.
    ...(['policy', 'exp', 'aud', 'depth'] as const).map((member) => ({
      what: `records[1].${member} rewritten beside the right receipt`,
      body: {
        ...servedChain([root, asked]),
        records: servedChain([root, asked]).records.map((r, i) =>
          i === 1 ? { ...r, [member]: member === 'policy' ? { max_calls: 50 } : member === 'aud' ? agent.did : 7 } : r,
        ),
      },
      why: new RegExp(`records\\[1\\]\\.${member} is not what receipts\\[1\\] signs`),
    })),
    {
      what: 'more records than any chain holds',
      body: { ...servedChain([root, asked]), receipts: Array.from({ length: 40 }, () => root.jws) },
      why: /holds 40 records, more than any chain/,
    },
    {
      // A chain is at most MAX_CHAIN_DEPTH records, the root among them (CHAIN_TOO_DEEP past that).
      what: 'one record more than the deepest chain',
      body: { ...servedChain([root, asked]), receipts: Array.from({ length: MAX_CHAIN_DEPTH + 1 }, () => root.jws) },
      why: new RegExp(`holds ${MAX_CHAIN_DEPTH + 1} records, more than any chain`),
    },
  ];

  it.each(refused)('$what is UNEXPECTED_RESPONSE, naming the hash asked for and what came back', async ({ body, why }) => {
    const e = await rejection(chainAnswer(body));
    expect(e.code).toBe('UNEXPECTED_RESPONSE');
    expect(e.retryable).toBe(false);
    expect(e.message).toContain(`GET /v1/delegations/${encodeURIComponent(asked.hash)}/chain`);
    expect(e.message).toContain(asked.hash);
    expect(e.message).toMatch(why);
  });
});

// ---------------------------------------------------------------- answer shapes

describe('a 2xx answer of the wrong shape is UNEXPECTED_RESPONSE naming the route and the member', () => {
  const hash = `sha256:${'a'.repeat(64)}`;
  const signer = generateKeyPair();
  const revocation = createRevocation({ signer, target: hash }).jws;
  const approvalId = `apr_${'b'.repeat(32)}`;
  const decision = createApprovalDecision({ signer, approvalId, decision: 'approve', reason: 'fine' });
  const calls: [string, (c: BatonClient) => Promise<unknown>][] = [
    ['POST /v1/delegations', (c) => c.submit('a.b.c')],
    ['POST /v1/delegations/issue', (c) => c.issue({ audience: signer.did, policy: {} })],
    ['POST /v1/verify', (c) => c.verify({ bundle_version: '4.0', invocation: 'a.b.c', receipts: [] })],
    [`POST /v1/delegations/${encodeURIComponent(hash)}/revoke`, (c) => c.revoke(hash, 'lost key')],
    [`POST /v1/delegations/${encodeURIComponent(hash)}/revoke`, (c) => c.revokeSigned({ revocation })],
    ['POST /v1/invocations/inv%3A1/actuals', (c) => c.reportActual('inv:1', { source: 'unavailable', unavailable_reason: 'no meter' })],
    [`GET /v1/delegations/${encodeURIComponent(hash)}`, (c) => c.getDelegation(hash)],
    [`GET /v1/delegations/${encodeURIComponent(hash)}/chain`, (c) => c.getChain(hash)],
    [`GET /v1/delegations/${encodeURIComponent(hash)}/tree`, (c) => c.getTree(hash)],
    [`GET /v1/delegations/${encodeURIComponent(hash)}/invocations`, (c) => c.listInvocations(hash)],
    [`GET /v1/delegations/${encodeURIComponent(hash)}/invocations`, (c) => c.iterateInvocations(hash).next()],
    ['GET /v1/invocations', (c) => c.listDecisions()],
    ['GET /v1/invocations', (c) => c.iterateDecisions().next()],
    ['GET /v1/invocations/inv%3A1', (c) => c.getInvocation('inv:1')],
    ['GET /v1/service-receipts', (c) => c.listServiceReceipts()],
    ['GET /v1/service-receipts', (c) => c.iterateServiceReceipts().next()],
    ['GET /v1/log', (c) => c.logInfo()],
    ['GET /v1/log/service-receipts/1/proof', (c) => c.logProof(1)],
    ['GET /v1/log/consistency', (c) => c.logConsistency(1, 2)],
    ['GET /v1/keys', (c) => c.keys()],
    ['GET /v1/keys', (c) => c.verifyServiceReceipt('a.b.c')],
    ['GET /.well-known/jwks.json', (c) => c.jwks()],
    ['GET /healthz', (c) => c.health()],
    ['GET /readyz', (c) => c.ready()],
    ['POST /v1/admin/tenants', (c) => c.admin.createTenant('acme')],
    ['GET /v1/admin/tenants', (c) => c.admin.listTenants()],
    ['POST /v1/admin/tenants/ten_1/roots', (c) => c.admin.addRoot('ten_1', signer.did)],
    ['GET /v1/admin/tenants/ten_1/roots', (c) => c.admin.listRoots('ten_1')],
    ['POST /v1/admin/tenants/ten_1/api-keys', (c) => c.admin.createApiKey('ten_1', { scopes: ['verify'] })],
    ['GET /v1/admin/tenants/ten_1/api-keys', (c) => c.admin.listApiKeys('ten_1')],
    ['POST /v1/admin/tenants/ten_1/api-keys', (c) => adminKeys(c).create('ten_1', { scopes: ['verify'] })],
    ['GET /v1/admin/tenants/ten_1/api-keys', (c) => adminKeys(c).list('ten_1')],
    ['POST /v1/admin/api-keys/key_1/rotate', (c) => adminKeys(c).rotate('key_1')],
    ['GET /v1/tools', (c) => c.tools.current()],
    ['GET /v1/tools/versions/2', (c) => c.tools.version(2)],
    ['GET /v1/admin/tenants/ten_1/tools', (c) => c.tools.currentOf('ten_1')],
    ['POST /v1/admin/tenants/ten_1/tools', (c) => c.tools.publish('ten_1', { base_version: 1, strict: false, tools: [] })],
    ['GET /v1/approvals', (c) => c.tools.approvals()],
    ['GET /v1/approvals/apr_1', (c) => c.tools.approval('apr_1')],
    ['POST /v1/approvals/apr_1/approve', (c) => c.tools.approve('apr_1', { actor: 'ann', reason: 'fine' })],
    ['POST /v1/approvals/apr_1/reject', (c) => c.tools.reject('apr_1', { actor: 'ann', reason: 'no' })],
    [`POST /v1/approvals/${approvalId}/signed-decision`, (c) => c.tools.decideSigned(decision)],
    ['GET /v1/grants', (c) => c.tools.grants()],
    [`POST /v1/grants/${encodeURIComponent(hash)}/approve`, (c) => c.tools.decideGrant(hash, 'approve', { actor: 'ann', reason: 'ok' })],
  ];

  it.each(calls)('%s answering {"hello":"world"}', async (route, call) => {
    const { client } = fakeBaton(() => ({ body: { hello: 'world' } }));
    const e = await rejection(call(client));
    expect(e).toMatchObject({ code: 'UNEXPECTED_RESPONSE', status: 200, retryable: false });
    expect(e.message).toContain(route);
    expect(e.message).toMatch(/`\w+`|"valid"/);
  });

  const misshapen: { call: (c: BatonClient) => Promise<unknown>; body: unknown; member: string }[] = [
    { call: (c) => c.iterateDecisions().next(), body: { invocations: [1], next_cursor: null }, member: '`invocations[0]`' },
    { call: (c) => c.listDecisions(), body: { invocations: [], next_cursor: 7 }, member: '`next_cursor`' },
    { call: (c) => c.iterateServiceReceipts().next(), body: { service_receipts: {}, next_after: null }, member: '`service_receipts`' },
    {
      call: (c) => c.verifyServiceReceipt('a.b.c'),
      body: { keys: [{ kid: 'k1', did: 'did:key:z6Mk', status: 'current' }] },
      member: '`keys[0].public_key`',
    },
    { call: (c) => c.tools.approvals(), body: { approvals: null, next_cursor: null }, member: '`approvals`' },
    { call: (c) => c.tools.grants(), body: { grants: ['g'], next_cursor: null }, member: '`grants[0]`' },
    {
      call: (c) => c.getTree(hash),
      // A node deep down without its children: a reader walking the tree would throw on it.
      body: {
        count: 2,
        truncated: false,
        tree: { ...nestedTree(hash, 1), children: [{ ...nestedTree(hash, 1), children: undefined }] },
      },
      member: '`tree.children[0].children`',
    },
    { call: (c) => c.health(), body: [], member: 'not a JSON object' },
    // Deeper than any tree of Baton's: refused, not walked until the stack overflows.
    { call: (c) => c.getTree(hash), body: { count: 1, truncated: false, tree: nestedTree(hash, 1000) }, member: 'nested deeper' },
    // A deny must carry the error a caller reads (decision.error.code), also from a 200.
    {
      call: (c) => c.verify({ bundle_version: '4.0', invocation: 'a.b.c', receipts: [] }),
      body: { valid: false },
      member: '`error`',
    },
  ];
  it.each(misshapen)('a body whose $member is wrong is refused, naming it (no TypeError later)', async ({ call, body, member }) => {
    const { client } = fakeBaton(() => ({ body }));
    const e = await rejection(call(client));
    expect(e.code).toBe('UNEXPECTED_RESPONSE');
    expect(e.message).toContain(member);
  });

  it('a 204 where a body is due is not Baton', async () => {
    const { client } = fakeBaton(() => ({ status: 204, body: '' }));
    expect(await rejection(client.keys())).toMatchObject({ code: 'UNEXPECTED_RESPONSE', status: 204 });
  });
});

/** A delegation tree `depth` nodes deep, one child each. */
function nestedTree(hash: string, depth: number): Record<string, unknown> {
  const view = { hash, status: 'active', iss: 'did:key:z', aud: 'did:key:z', policy: {}, exp: null, calls_used: 0, max_calls: null };
  let node: Record<string, unknown> = { ...view, children: [] };
  for (let i = 1; i < depth; i++) node = { ...view, children: [node] };
  return node;
}

// ---------------------------------------------------------------- retryable

describe('retryable: no answer, or a 429, 502, 503 or 504 from Baton or anything before it', () => {
  const envelope = (code: string) => ({ error: { code, message: 'm', suggestion: 's' }, request_id: 'req_1' });
  const cases: { status: number; type?: string; body: unknown; code: string; retryable: boolean }[] = [
    { status: 429, body: envelope('RATE_LIMITED'), code: 'RATE_LIMITED', retryable: true },
    { status: 503, body: envelope('STORAGE_UNAVAILABLE'), code: 'STORAGE_UNAVAILABLE', retryable: true },
    { status: 429, type: 'text/plain', body: 'Too Many Requests', code: 'UNEXPECTED_RESPONSE', retryable: true },
    { status: 502, type: 'text/html', body: '<html>Bad Gateway</html>', code: 'UNEXPECTED_RESPONSE', retryable: true },
    { status: 503, type: 'text/html', body: '<html>Service Unavailable</html>', code: 'UNEXPECTED_RESPONSE', retryable: true },
    { status: 504, type: 'text/html', body: '<html>Gateway Timeout</html>', code: 'UNEXPECTED_RESPONSE', retryable: true },
    { status: 500, body: envelope('INTERNAL'), code: 'INTERNAL', retryable: false },
    { status: 500, type: 'text/html', body: '<html>Internal Server Error</html>', code: 'UNEXPECTED_RESPONSE', retryable: false },
    { status: 404, body: envelope('NOT_FOUND'), code: 'NOT_FOUND', retryable: false },
    { status: 200, body: { hello: 'world' }, code: 'UNEXPECTED_RESPONSE', retryable: false },
  ];
  it.each(cases)('HTTP $status $code ($type): retryable $retryable', async ({ status, type, body, code, retryable }) => {
    const { client } = fakeBaton(() => ({ status, ...(type ? { type } : {}), body }));
    for (const call of [() => client.keys(), () => client.verify({ bundle_version: '4.0', invocation: 'a.b.c', receipts: [] })]) {
      const e = await rejection(call());
      expect(e).toMatchObject({ status, code, retryable });
    }
  });
});

// ---------------------------------------------------------------- per-call timeout

describe('a per-call timeoutMs is checked like the constructor one', () => {
  it.each([-5, 0, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31, '100' as unknown as number])(
    'timeoutMs %s is a TypeError, nothing sent',
    (bad) => {
      const { client, requests } = fakeBaton(() => ({ body: { status: 'ok' } }));
      expect(() => new BatonClient({ baseUrl: 'http://baton.test', timeoutMs: bad })).toThrow(TypeError);
      return client.health({ timeoutMs: bad }).then(
        () => {
          throw new Error('expected a TypeError');
        },
        (e: unknown) => {
          expect(e).toBeInstanceOf(TypeError);
          expect((e as Error).message).toMatch(/timeoutMs must be a positive number of milliseconds/);
          expect(requests).toHaveLength(0);
        },
      );
    },
  );

  it('a good one is used', async () => {
    const { client } = fakeBaton(() => ({ body: { status: 'ok' } }));
    expect(await client.health({ timeoutMs: 50 })).toEqual({ status: 'ok' });
  });
});

// ---------------------------------------------------------------- answer size

describe("an answer past its route's limit is not read", () => {
  const streamed = (declared: number | undefined) => {
    let sent = 0;
    const chunk = new Uint8Array(1024 * 1024).fill(0x20);
    const client = new BatonClient({
      baseUrl: 'http://baton.test',
      apiKey: 'bt_x',
      fetch: () => {
        const body = new ReadableStream<Uint8Array>({
          pull(controller) {
            sent += chunk.byteLength;
            controller.enqueue(chunk); // never closes: a server that never stops sending
          },
        });
        const headers: Record<string, string> = { 'content-type': 'application/json' };
        if (declared !== undefined) headers['content-length'] = String(declared);
        return Promise.resolve(new Response(body, { status: 200, headers }));
      },
    });
    return { client, sent: () => sent };
  };
  const bundle = { bundle_version: '4.0' as const, invocation: 'a.b.c', receipts: [] };

  it("a verify's answer sent without end stops at MAX_VERIFY_ANSWER_BYTES: UNEXPECTED_RESPONSE", async () => {
    const { client, sent } = streamed(undefined);
    const e = await rejection(client.verify(bundle));
    expect(e.code).toBe('UNEXPECTED_RESPONSE');
    expect(e.message).toContain(`more than ${MAX_VERIFY_ANSWER_BYTES} bytes`);
    expect(sent()).toBeLessThanOrEqual(MAX_VERIFY_ANSWER_BYTES + 2 * 1024 * 1024);
  });

  it('an answer declared longer than MAX_ANSWER_BYTES is refused before its body is read', async () => {
    const { client, sent } = streamed(MAX_ANSWER_BYTES + 1);
    const e = await rejection(client.getTree(`sha256:${'a'.repeat(64)}`));
    expect(e.message).toContain(`more than ${MAX_ANSWER_BYTES} bytes`);
    expect(sent()).toBeLessThanOrEqual(2 * 1024 * 1024);
  });

  it("a custom fetch's answer whose body is no web stream is read whole, as before", async () => {
    const text = JSON.stringify({ status: 'ok' });
    const client = new BatonClient({
      baseUrl: 'http://baton.test',
      fetch: () =>
        Promise.resolve({
          status: 200,
          ok: true,
          headers: new Headers({ 'content-type': 'application/json' }),
          body: { pipe: () => undefined },
          arrayBuffer: () => Promise.resolve(new TextEncoder().encode(text).buffer),
        } as unknown as Response),
    });
    expect(await client.health()).toMatchObject({ status: 'ok' });
  });

  const responseLike = (body: unknown) =>
    new BatonClient({
      baseUrl: 'http://baton.test',
      apiKey: 'bt_x',
      fetch: () =>
        Promise.resolve({
          status: 200,
          ok: true,
          headers: new Headers({ 'content-type': 'application/json' }),
          body,
          arrayBuffer: () => Promise.resolve(new TextEncoder().encode(JSON.stringify({ status: 'ok' })).buffer),
        } as unknown as Response),
    });

  it("a node-fetch-like body (a Node stream) is counted as it comes: a verify's stops at its limit", async () => {
    let sent = 0;
    async function* endless() {
      for (;;) {
        sent += 1024 * 1024;
        yield Buffer.alloc(1024 * 1024, 0x20);
      }
    }
    const e = await rejection(responseLike(endless()).verify(bundle));
    expect(e.code).toBe('UNEXPECTED_RESPONSE');
    expect(e.message).toContain(`more than ${MAX_VERIFY_ANSWER_BYTES} bytes`);
    expect(sent).toBeLessThanOrEqual(MAX_VERIFY_ANSWER_BYTES + 2 * 1024 * 1024);
  });

  it('a body whose pieces are not bytes (an object-mode stream) is refused, not counted as nothing', async () => {
    async function* objects() {
      for (;;) yield { not: 'bytes' };
    }
    const e = await rejection(responseLike(objects()).verify(bundle));
    expect(e.code).toBe('UNEXPECTED_RESPONSE');
    expect(e.message).toMatch(/pieces are not bytes/);
  });

  it('a Response-like answer with no body member is read whole', async () => {
    expect(await responseLike(undefined).health()).toMatchObject({ status: 'ok' });
  });
});

describe('shape modifiers compose', () => {
  it('a deny whose block is null is a deny, as the contract allows (optional and nullable)', async () => {
    const { client } = fakeBaton(() => ({
      status: 403,
      body: { valid: false, error: { code: 'UNTRUSTED_ROOT', message: 'm', suggestion: 's', block: null }, violations: [] },
    }));
    const result = await client.verify({ bundle_version: '4.0', invocation: 'a.b.c', receipts: [] });
    expect(result.valid).toBe(false);
  });
});

// ---------------------------------------------------------------- base URL

describe('a base URL carrying credentials is refused at construction, never echoed', () => {
  it.each([
    'http://user:s3cret-pw@127.0.0.1:8080',
    'https://s3cret-pw@baton.example',
    'ftp://user:s3cret-pw@host/',
    // Spellings the URL parser reads user information from as well
    'http:user:s3cret-pw@127.0.0.1:9',
    'http:/user:s3cret-pw@127.0.0.1:9',
    'http:\\\\user:s3cret-pw@127.0.0.1:9',
    // A password the parser cannot read past
    'http://user:pa/s3cret-pw@host',
    'http://user:pa#s3cret-pw@host',
  ])('%s', (baseUrl) => {
    let thrown: unknown;
    try {
      new BatonClient({ baseUrl, apiKey: 'bt_x' });
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(TypeError);
    expect((thrown as Error).message).toMatch(/baseUrl/);
    expect((thrown as Error).message).not.toContain('s3cret-pw');
  });
});
