/**
 * BatonClient against the real service over a real socket (real PostgreSQL):
 * every method, the mapping of errors (code, suggestion, details, request
 * id), deny returned rather than thrown, network errors and timeouts.
 */
import { createServer as createHttpServer } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import { createRevocation } from '../../src/sdk/revocation.js';
import { type BatonApiError, BatonClient, isBatonApiError, type VerifyResult } from '../../src/sdk/client.js';
import { closedPortUrl, nowSeconds, startLiveService, startSilentServer, type LiveService } from './live-service.js';
import { ARGS } from './chains.js';

let live: LiveService;
let clients: {
  admin: BatonClient;
  issue: BatonClient;
  verify: BatonClient;
  report: BatonClient;
  audit: BatonClient;
  anonymous: BatonClient;
};

beforeAll(async () => {
  live = await startLiveService();
  const make = (apiKey?: string) => new BatonClient({ baseUrl: live.baseUrl, ...(apiKey ? { apiKey } : {}) });
  const k = live.tenant.keys;
  clients = {
    admin: make(live.svc.adminKey),
    issue: make(k.issue),
    verify: make(k.verify),
    report: make(k.report),
    audit: make(k.audit),
    anonymous: make(),
  };
});
afterAll(async () => {
  await live?.close();
});

/** operator (trusted root) -> agent A -> agent B, submitted; B can invoke. */
async function storedChain(
  rootPolicy = { allowed_tools: ['search', 'fetch'], max_calls: 10, max_cost_usd: 1 },
  subPolicy = { allowed_tools: ['search'], max_calls: 5, max_cost_usd: 1 },
) {
  const a = generateKeyPair();
  const b = generateKeyPair();
  const root = createRootDelegation({ issuer: live.tenant.root, audience: a.did, policy: rootPolicy });
  const sub = createSubDelegation({ parent: root, issuer: a, audience: b.did, policy: subPolicy });
  await clients.anonymous.submit([root, sub]);
  return { a, b, root, sub, chain: [root, sub] as SignedDelegation[] };
}

function bundleFor(
  invoker: KeyPair,
  chain: SignedDelegation[],
  args: Record<string, unknown> = ARGS,
  mode: 'value' | 'reference' = 'reference',
) {
  const inv = createInvocation({ chain, invoker, args, toolServer: 'mcp://search' });
  return { inv, bundle: makeBundle(inv, chain, mode) };
}

async function rejection(p: Promise<unknown>): Promise<BatonApiError> {
  try {
    await p;
  } catch (e) {
    expect(isBatonApiError(e)).toBe(true);
    return e as BatonApiError;
  }
  throw new Error('expected the call to throw');
}

describe('admin', () => {
  it('creates tenants, trusts and removes roots, creates, lists and revokes API keys', async () => {
    const { admin } = clients.admin;
    const tenant = await admin.createTenant('globex');
    expect(tenant).toMatchObject({ id: expect.any(String), name: 'globex' });
    expect((await admin.listTenants()).tenants.map((t) => t.id)).toContain(tenant.id);

    const rootKey = generateKeyPair();
    const root = await admin.addRoot(tenant.id, rootKey.did, 'ops root');
    expect(root).toMatchObject({ tenant_id: tenant.id, did: rootKey.did, label: 'ops root' });
    expect(await admin.addRoot(tenant.id, rootKey.did)).toMatchObject({ did: rootKey.did }); // idempotent
    expect((await admin.listRoots(tenant.id)).roots.map((r) => r.did)).toEqual([rootKey.did]);

    const key = await admin.createApiKey(tenant.id, { scopes: ['verify'], name: 'tool server', tool_server: 'mcp://search' });
    expect(key).toMatchObject({
      id: expect.any(String),
      key: expect.stringMatching(/^bt_/),
      scopes: ['verify'],
      tool_server: 'mcp://search',
    });
    expect((await admin.listApiKeys(tenant.id)).api_keys.map((k) => k.id)).toContain(key.id);

    // The new key works, then stops working once revoked.
    const tool = new BatonClient({ baseUrl: live.baseUrl, apiKey: key.key });
    const { bundle } = bundleFor(
      generateKeyPair(),
      [createRootDelegation({ issuer: rootKey, audience: generateKeyPair().did, policy: {} })],
      ARGS,
      'value',
    );
    expect((await tool.verify(bundle, { dryRun: true })).valid).toBe(false); // an answer: the invoker is not the holder
    await admin.revokeApiKey(key.id);
    const revoked = await rejection(tool.verify(bundle));
    expect(revoked).toMatchObject({ status: 401, code: 'UNAUTHORIZED' });

    await admin.removeRoot(tenant.id, rootKey.did);
    expect((await admin.listRoots(tenant.id)).roots).toEqual([]);
    const gone = await rejection(admin.removeRoot(tenant.id, rootKey.did));
    expect(gone).toMatchObject({ status: 404, code: 'NOT_FOUND' });
  });

  it('a tenant key on an admin route is FORBIDDEN with the scope it lacks', async () => {
    const e = await rejection(clients.issue.admin.createTenant('nope'));
    expect(e).toMatchObject({ status: 403, code: 'FORBIDDEN' });
    expect(e.details).toMatchObject({ required_scopes: ['admin'] });
  });
});

describe('issuance', () => {
  it('submits one record or a chain; resubmitting is idempotent', async () => {
    const a = generateKeyPair();
    const root = createRootDelegation({ issuer: live.tenant.root, audience: a.did, policy: { allowed_tools: ['search'] } });
    const first = await clients.anonymous.submit(root);
    // Keyless answers name no tenant, so they carry neither tenant_id nor service receipts, nor anything stored about a record.
    expect(first.created).toBe(true);
    expect(first.tenant_id).toBeUndefined();
    expect(first.delegations[0]).toMatchObject({ hash: root.hash, depth: 0, service_receipt: null });
    expect(first.delegations[0]!.status).toBeUndefined();
    const again = await clients.issue.submit(root.jws);
    expect(again).toMatchObject({ created: false, tenant_id: live.tenant.id });
    expect(again.delegations[0]!.status).toBe('active');
    expect(again.delegations[0]!.service_receipt).toMatchObject({ id: expect.any(Number) });

    const b = generateKeyPair();
    const sub = createSubDelegation({ parent: root, issuer: a, audience: b.did, policy: { allowed_tools: ['search'] } });
    const chain = await clients.issue.submit([root, sub]);
    expect(chain.delegations.map((d) => d.depth)).toEqual([0, 1]);
  });

  it('an escalation submitted anyway is a 422 with the protocol code, every violation and a request id', async () => {
    const a = generateKeyPair();
    const root = createRootDelegation({ issuer: live.tenant.root, audience: a.did, policy: { allowed_tools: ['search'], max_calls: 2 } });
    await clients.anonymous.submit(root);
    // Signed below the SDK's check, as a misbehaving client would.
    const { signJws } = await import('../../src/protocol/jws.js');
    const bad = signJws(
      {
        ...createSubDelegation({
          parent: root,
          issuer: a,
          audience: generateKeyPair().did,
          policy: { allowed_tools: ['search'], max_calls: 1 },
        }).payload,
        policy: { allowed_tools: ['search', 'shell'], max_calls: 9 },
      },
      a.seed,
    );
    const e = await rejection(clients.anonymous.submit(bad));
    expect(e).toMatchObject({ status: 422, code: 'POLICY_ESCALATION', block: 'D' });
    expect(e.suggestion).toMatch(/Narrow the child policy/);
    expect(e.violations.map((v) => v.field).sort()).toEqual(['policy.allowed_tools', 'policy.max_calls']);
    expect(e.requestId).toMatch(/\S+/);
    expect(e.message).toBeTruthy();
  });

  it('createSubDelegation by the wrong key names the wrong key first (block B), before a wider policy (block D)', () => {
    const a = generateKeyPair();
    const root = createRootDelegation({ issuer: live.tenant.root, audience: a.did, policy: { allowed_tools: ['search'] } });
    let thrown: unknown;
    try {
      createSubDelegation({ parent: root, issuer: generateKeyPair(), audience: a.did, policy: { allowed_tools: ['search', 'shell'] } });
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toMatchObject({ code: 'ISSUER_AUDIENCE_GAP' });
    const codes = (thrown as { violations: { code: string }[] }).violations.map((v) => v.code);
    expect(codes).toEqual(['ISSUER_AUDIENCE_GAP', 'POLICY_ESCALATION']);
  });

  it('createSubDelegation names a command outside the parent (block B) before a wider policy (block D)', () => {
    const a = generateKeyPair();
    const root = createRootDelegation({ issuer: live.tenant.root, audience: a.did, policy: { allowed_tools: ['search'] } });
    let thrown: unknown;
    try {
      createSubDelegation({
        parent: root,
        issuer: a,
        audience: generateKeyPair().did,
        cmd: '/mcp/prompts/get',
        policy: { allowed_tools: ['search', 'shell'] },
      });
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toMatchObject({ code: 'COMMAND_MISMATCH' });
    const codes = (thrown as { violations: { code: string }[] }).violations.map((v) => v.code);
    expect(codes).toEqual(['COMMAND_MISMATCH', 'POLICY_ESCALATION']);
  });

  it('issues a custodial root (issue scope)', async () => {
    const agent = generateKeyPair();
    const issued = await clients.issue.issue({ audience: agent.did, policy: { allowed_tools: ['search'], max_calls: 3 } });
    expect(issued.tenant_id).toBe(live.tenant.id);
    expect(issued.custodial_did).toMatch(/^did:key:z6Mk/);
    expect(issued.delegation).toMatchObject({ iss: issued.custodial_did, aud: agent.did, depth: 0, status: 'active' });
  });
});

describe('verify', () => {
  it('allows, with counters, warnings and a signed service receipt that verifies offline', async () => {
    const { b, chain, root, sub } = await storedChain();
    const { inv, bundle } = bundleFor(b, chain);
    const result = await clients.verify.verify(bundle, { body: ARGS, requireBinding: true });
    expect(result.valid).toBe(true);
    if (!result.valid) throw new Error('unreachable');
    expect(result).toMatchObject({
      dry_run: false,
      invocation_id: inv.payload.jti,
      binding: 'match',
      context: { tool: 'search', chain_depth: 2 },
    });
    expect(result.counters).toEqual([
      { dr: root.hash, calls_used: 1, max_calls: 10 },
      { dr: sub.hash, calls_used: 1, max_calls: 5 },
    ]);
    expect(result.request_id).toMatch(/\S+/);
    const checked = await clients.anonymous.verifyServiceReceipt(result.service_receipt!.jws);
    expect(checked).toMatchObject({
      valid: true,
      payload: expect.objectContaining({ baton_receipt: 'invocation.allowed', subject: inv.payload.jti }),
    });
    const tampered = result.service_receipt!.jws.slice(0, -4) + (result.service_receipt!.jws.endsWith('AAAA') ? 'BBBB' : 'AAAA');
    expect((await clients.anonymous.verifyServiceReceipt(tampered)).valid).toBe(false);
  });

  it('returns a deny (403) instead of throwing, with the error and every violation', async () => {
    const { b, chain } = await storedChain();
    const { bundle } = bundleFor(b, chain, { tool: 'shell', pii_access: true, write_access: false });
    let result: VerifyResult | undefined;
    await expect((async () => (result = await clients.verify.verify(bundle)))()).resolves.toBeDefined();
    expect(result!.valid).toBe(false);
    if (result!.valid) throw new Error('unreachable');
    expect(result!.error).toMatchObject({ code: 'POLICY_VIOLATION', block: 'D', suggestion: expect.any(String) });
    expect(result!.violations.length).toBeGreaterThanOrEqual(3); // tool x2 DRs, pii, estimated cost
    expect(result!.request_id).toMatch(/\S+/);
  });

  it('dry runs consume nothing; a binding mismatch with requireBinding is a deny', async () => {
    const { b, chain, sub } = await storedChain();
    const { bundle } = bundleFor(b, chain);
    const dry = await clients.verify.verify(bundle, { dryRun: true });
    expect(dry).toMatchObject({ valid: true, dry_run: true, service_receipt: null });
    expect((await clients.audit.getDelegation(sub.hash)).usage.calls_used).toBe(0);
    const mismatch = await clients.verify.verify(bundle, { body: { ...ARGS, tool: 'fetch' }, requireBinding: true });
    expect(mismatch).toMatchObject({ valid: false, error: { code: 'BINDING_MISMATCH' } });
    // A body JSON would carry as another (Infinity as null, an undefined member dropped) is not sent at all.
    for (const lossy of [
      { ...ARGS, limit: Infinity },
      { ...ARGS, extra: undefined },
      { ...ARGS, at: new Date(0) },
    ])
      await expect(clients.verify.verify(bundle, { body: lossy, requireBinding: true })).rejects.toThrow(/body is not JSON as it is/);
    // Nothing consumed: the real call still goes through, once.
    const real = await clients.verify.verify(bundle);
    expect(real).toMatchObject({ valid: true, retry: false });
    // Sent again by the same key (a lost answer): the original allow, counted once.
    const again = await clients.verify.verify(bundle);
    expect(again).toMatchObject({ valid: true, retry: true });
    expect(again.valid && real.valid && again.service_receipt?.id === real.service_receipt?.id).toBe(true);
    expect((await clients.audit.getDelegation(sub.hash)).usage.calls_used).toBe(1);
  });

  it('a key without verify scope throws FORBIDDEN (not a decision); no key says how to send one', async () => {
    const { b, chain } = await storedChain();
    const { bundle } = bundleFor(b, chain);
    const forbidden = await rejection(clients.audit.verify(bundle));
    expect(forbidden).toMatchObject({ status: 403, code: 'FORBIDDEN' });
    const anonymous = await rejection(clients.anonymous.verify(bundle));
    expect(anonymous).toMatchObject({ status: 401, code: 'UNAUTHORIZED' });
    expect(anonymous.suggestion).toMatch(/no API key.*apiKey.*a context's key is never sent to another server/);
  });
});

describe('actuals and reads', () => {
  it('reports actuals (idempotent, 409 on a different one) and reads them back everywhere', async () => {
    const { b, chain, root, sub } = await storedChain();
    const jtis: string[] = [];
    for (let i = 0; i < 3; i++) {
      const { inv, bundle } = bundleFor(b, chain);
      expect((await clients.verify.verify(bundle)).valid).toBe(true);
      jtis.push(inv.payload.jti);
    }
    const actual = await clients.report.reportActual(jtis[0]!, { cost_usd: 0.4, tokens_in: 100, tokens_out: 20, source: 'api-usage' });
    expect(actual).toMatchObject({
      jti: jtis[0],
      cost_usd: 0.4,
      declared_usd: 0.5,
      source: 'api-usage',
      service_receipt: { id: expect.any(Number) },
    });
    expect(await clients.report.reportActual(jtis[0]!, { cost_usd: 0.4, tokens_in: 100, tokens_out: 20, source: 'api-usage' })).toEqual(
      actual,
    );
    const conflict = await rejection(clients.report.reportActual(jtis[0]!, { cost_usd: 0.9, source: 'api-usage' }));
    expect(conflict).toMatchObject({ status: 409, code: 'CONFLICT' });
    const noProvenance = await rejection(clients.report.reportActual(jtis[1]!, { cost_usd: 0.1 } as never));
    expect(noProvenance).toMatchObject({ status: 400, code: 'INVALID_REQUEST' });
    await clients.report.reportActual(jtis[1]!, { source: 'unavailable', unavailable_reason: 'no meter' });

    const detail = await clients.audit.getDelegation(root.hash);
    expect(detail).toMatchObject({ hash: root.hash, depth: 0, status: 'active', jws: root.jws });
    expect(detail.usage).toMatchObject({ calls_used: 3, max_calls: 10, declared_usd: 1.5, metered_usd: 0.4, metered_invocations: 1 });

    const chainResult = await clients.audit.getChain(sub.hash);
    expect(chainResult.receipts).toEqual([root.jws, sub.jws]);
    expect(chainResult.records.map((r) => r.depth)).toEqual([0, 1]);
    const tree = await clients.audit.getTree(root.hash);
    expect(tree).toMatchObject({ count: 2, truncated: false, tree: { hash: root.hash, children: [{ hash: sub.hash, calls_used: 3 }] } });

    const inv = await clients.audit.getInvocation(jtis[0]!);
    expect(inv).toMatchObject({ jti: jtis[0], decision: 'allowed', actual: { cost_usd: 0.4 } });

    const page = await clients.audit.listInvocations(root.hash, { limit: 2 });
    expect(page.invocations).toHaveLength(2);
    expect(page.next_cursor).toEqual(expect.any(String));
    const all: string[] = [];
    for await (const i of clients.audit.iterateInvocations(root.hash, { limit: 1 })) all.push(i.jti);
    expect(all.sort()).toEqual([...jtis].sort());
    let pages = 0;
    for await (const p of clients.audit.invocationPages(sub.hash, { limit: 2 })) pages += p.invocations.length > 0 ? 1 : 0;
    expect(pages).toBe(2);
  });

  it('pages through service receipts, one page or lazily across pages', async () => {
    await storedChain();
    const first = await clients.audit.listServiceReceipts({ limit: 2 });
    expect(first.service_receipts).toHaveLength(2);
    expect(first.next_after).toBe(first.service_receipts[1]!.id);
    const everything = await clients.audit.listServiceReceipts({ limit: 500 });
    const iterated: number[] = [];
    for await (const r of clients.audit.iterateServiceReceipts({ limit: 3 })) iterated.push(r.id);
    expect(iterated).toEqual(everything.service_receipts.map((r) => r.id));
    expect(new Set(everything.service_receipts.map((r) => r.kind))).toContain('delegation.accepted');
    const later = await clients.audit.listServiceReceipts({ after: first.next_after!, limit: 1 });
    expect(later.service_receipts[0]!.id).toBeGreaterThan(first.next_after!);
  });

  it('publishes the service keys as a list and a JWKS; health and readiness', async () => {
    const { keys } = await clients.anonymous.keys();
    expect(keys[0]).toMatchObject({ kid: expect.stringMatching(/^svc_/), alg: 'EdDSA', status: 'current' });
    const jwks = await clients.anonymous.jwks();
    expect(jwks.keys[0]).toMatchObject({ kty: 'OKP', crv: 'Ed25519', kid: keys[0]!.kid, x: keys[0]!.public_key });
    expect(await clients.anonymous.health()).toEqual({ status: 'ok' });
    expect(await clients.anonymous.ready()).toMatchObject({ status: 'ready' });
  });

  it('an unknown record is NOT_FOUND with the request id of the X-Request-Id header', async () => {
    let seen: string | null = null;
    const spy = new BatonClient({
      baseUrl: live.baseUrl,
      apiKey: live.tenant.keys.audit,
      fetch: async (input, init) => {
        const res = await fetch(input, init);
        seen = res.headers.get('x-request-id');
        return res;
      },
    });
    const e = await rejection(spy.getDelegation(`sha256:${'0'.repeat(64)}`));
    expect(e).toMatchObject({ status: 404, code: 'NOT_FOUND', method: 'GET' });
    expect(e.requestId).toBe(seen);
    expect(e.url).toContain('/v1/delegations/sha256');
    expect(e.retryable).toBe(false);
  });
});

describe('revocation', () => {
  it('by API key, cascading to descendants; idempotent', async () => {
    const { b, chain, root } = await storedChain();
    const r = await clients.issue.revoke(root.hash, 'compromised agent');
    expect(r).toMatchObject({
      hash: root.hash,
      status: 'revoked',
      reason: 'compromised agent',
      descendants: 1,
      already_revoked: false,
      revoked_by: { kind: 'api_key' },
    });
    expect((await clients.issue.revoke(root.hash, 'again')).already_revoked).toBe(true);
    const { bundle } = bundleFor(b, chain);
    expect(await clients.verify.verify(bundle)).toMatchObject({ valid: false, error: { code: 'RECEIPT_REVOKED' } });
  });

  it('by signed revocation record: signed here, or already signed; a holder cannot revoke its own grant', async () => {
    const { a, b, sub, root } = await storedChain();
    const refused = await rejection(clients.anonymous.revokeSigned({ signer: b, target: sub.hash }));
    expect(refused).toMatchObject({ status: 403, code: 'FORBIDDEN' });
    expect(refused.message).toMatch(/cannot revoke the grant it received/);

    // The client's own key is never sent on this path (it would switch the service to the key path).
    const r = await clients.issue.revokeSigned({ signer: a, target: sub.hash, reason: 'A withdraws' });
    expect(r).toMatchObject({ hash: sub.hash, reason: 'A withdraws', revoked_by: { kind: 'did', id: a.did } });

    const presigned = createRevocation({ signer: live.tenant.root, target: root, reason: 'operator' });
    expect(presigned.payload).toMatchObject({ drs_type: 'revocation', target: root.hash, jti: expect.stringMatching(/^rev:/) });
    const r2 = await clients.anonymous.revokeSigned({ revocation: presigned.jws });
    expect(r2).toMatchObject({ hash: root.hash, descendants: 1, revoked_by: { kind: 'did', id: live.tenant.root.did } });
  });

  it('createRevocation refuses a target that is not a record hash and a blank reason', () => {
    expect(() => createRevocation({ signer: generateKeyPair(), target: 'dr:123' })).toThrow(/record hash/);
    expect(() => createRevocation({ signer: generateKeyPair(), target: `sha256:${'a'.repeat(64)}`, reason: '   ' })).toThrow(/reason/);
  });
});

describe('transport failures', () => {
  it('nothing listening: NETWORK_ERROR naming the URL and what to check', async () => {
    const url = await closedPortUrl();
    const e = await rejection(new BatonClient({ baseUrl: url }).health());
    expect(e).toMatchObject({ status: 0, code: 'NETWORK_ERROR', retryable: true });
    expect(e.message).toContain(url);
    expect(e.message).toMatch(/ECONNREFUSED/);
    expect(e.suggestion).toMatch(/baton serve/);
  });

  it('a server that never answers: TIMEOUT after timeoutMs, not a hang', async () => {
    const silent = await startSilentServer();
    try {
      const started = Date.now();
      const e = await rejection(
        new BatonClient({ baseUrl: silent.url, apiKey: 'bt_x', timeoutMs: 300 }).verify({
          bundle_version: '4.0',
          invocation: 'a.b.c',
          receipts: [],
        }),
      );
      const took = Date.now() - started;
      expect(e).toMatchObject({ status: 0, code: 'TIMEOUT', method: 'POST' });
      expect(e.message).toMatch(/did not answer POST \/v1\/verify within 300 ms/);
      expect(e.suggestion).toMatch(/not allowed/);
      expect(took).toBeGreaterThanOrEqual(250);
      expect(took).toBeLessThan(5000);
    } finally {
      await silent.close();
    }
  });

  it('a stalled body counts against the timeout too; a caller abort is ABORTED', async () => {
    const stall = createHttpServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"status":'); // and never the rest
    });
    await new Promise<void>((resolve) => stall.listen(0, '127.0.0.1', resolve));
    const port = (stall.address() as { port: number }).port;
    try {
      const client = new BatonClient({ baseUrl: `http://127.0.0.1:${port}`, timeoutMs: 300 });
      expect(await rejection(client.health())).toMatchObject({ code: 'TIMEOUT' });
      const controller = new AbortController();
      const pending = client.health({ signal: controller.signal, timeoutMs: 5000 });
      setTimeout(() => controller.abort(), 50);
      expect(await rejection(pending)).toMatchObject({ code: 'ABORTED', status: 0 });
    } finally {
      stall.closeAllConnections();
      await new Promise<void>((resolve) => stall.close(() => resolve()));
    }
  });

  it('a redirect is UNEXPECTED_RESPONSE whatever envelope it carries; a dropped connection says so', async () => {
    // A proxy's 3xx taken at its word would pass as Baton's refusal, with any code its sender chose.
    const fake = createHttpServer((req, res) => {
      if (req.url?.includes('a'.repeat(64))) return req.socket.destroy();
      res.writeHead(req.url === '/healthz' ? 302 : 307, { 'content-type': 'application/json', location: 'http://127.0.0.1:1/elsewhere' });
      res.end(JSON.stringify({ valid: false, error: { code: 'NOT_FOUND', message: 'as the redirect says' } }));
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    const client = new BatonClient({ baseUrl: `http://127.0.0.1:${(fake.address() as { port: number }).port}`, apiKey: 'bt_x' });
    try {
      for (const call of [client.health(), client.verify({ bundle_version: '4.0', invocation: 'a.b.c', receipts: [] })]) {
        const e = await rejection(call);
        expect(e.code).toBe('UNEXPECTED_RESPONSE');
        expect(e.message).toMatch(/with a redirect \(HTTP 30[27]\), which Baton never sends; it was not followed/);
      }
      const dropped = await rejection(client.getDelegation('sha256:' + 'a'.repeat(64)));
      expect(dropped).toMatchObject({ code: 'NETWORK_ERROR', retryable: true });
      expect(dropped.message).toMatch(/UND_ERR_SOCKET, the server closed the connection\.$/);
    } finally {
      fake.closeAllConnections();
      await new Promise<void>((resolve) => fake.close(() => resolve()));
    }
  });

  it('a connection closed halfway through the body is not said to have closed before the answer', async () => {
    // The status and headers came: the hint must hold for a drop during the body too.
    const fake = createHttpServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' });
      res.write('{"status":"ok"', () => req.socket.destroy());
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    try {
      const dropped = await rejection(
        new BatonClient({ baseUrl: `http://127.0.0.1:${(fake.address() as { port: number }).port}` }).health(),
      );
      expect(dropped).toMatchObject({ code: 'NETWORK_ERROR', retryable: true });
      expect(dropped.message).toMatch(/UND_ERR_SOCKET, the server closed the connection\.$/);
      expect(dropped.message).not.toMatch(/before it answered/);
    } finally {
      fake.closeAllConnections();
      await new Promise<void>((resolve) => fake.close(() => resolve()));
    }
  });

  it("an answer a caller's fetch got by following a redirect is UNEXPECTED_RESPONSE, not the target's answer", async () => {
    // A caller's fetch may drop `redirect` and follow it: the answer is then the target's (a 503 here).
    const fake = createHttpServer((req, res) => {
      // The target's 503 is not Baton's: retried, the redirect would lead there again.
      if (req.url?.startsWith('/elsewhere')) {
        res.writeHead(503, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ status: 'ok', valid: true, error: { code: 'NOT_FOUND', message: 'the target says' } }));
      }
      res.writeHead(302, { location: `/elsewhere${req.url ?? ''}` });
      res.end();
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    const following: typeof fetch = async (input, init) => {
      const { redirect: _dropped, ...rest } = init ?? {};
      return fetch(input, { ...rest, redirect: 'follow' });
    };
    const client = new BatonClient({
      baseUrl: `http://127.0.0.1:${(fake.address() as { port: number }).port}`,
      apiKey: 'bt_x',
      fetch: following,
    });
    try {
      for (const call of [
        () => client.health(),
        () => client.getDelegation('sha256:' + 'a'.repeat(64)),
        () => client.verify({ bundle_version: '4.0', invocation: 'a.b.c', receipts: [] }),
      ]) {
        const e = await rejection(call());
        // No answer of Baton's: status 0, never retryable, whatever the target answered.
        expect(e).toMatchObject({ code: 'UNEXPECTED_RESPONSE', status: 0, retryable: false });
        expect(e.message).toMatch(
          /through a redirect, which Baton never sends; the fetch used followed it, and the answer it got there \(HTTP 503\)/,
        );
        expect(e.suggestion).toMatch(/must not follow redirects/);
      }
    } finally {
      fake.closeAllConnections();
      await new Promise<void>((resolve) => fake.close(() => resolve()));
    }
  });

  it("an answer saying valid that is not Baton's allow of this call is UNEXPECTED_RESPONSE, so no tool runs on it", async () => {
    const { b, chain } = await storedChain();
    const { inv, bundle } = bundleFor(b, chain);
    const allow = { valid: true, invocation_id: inv.payload.jti, dry_run: false, retry: false, counters: [], warnings: [] };
    // Each answer a proxy, a wrong base URL or a cache could give; the fake answers them in turn.
    const answers: { status: number; type?: string; body?: unknown; location?: string }[] = [
      { status: 200, body: { valid: true } },
      { status: 202, body: allow },
      { status: 200, body: { ...allow, invocation_id: 'inv:another-call' } },
      { status: 200, body: { ...allow, dry_run: true } },
      { status: 200, body: { ...allow, retry: undefined } },
      { status: 200, type: 'text/html', body: allow },
      { status: 307, location: '/elsewhere' },
    ];
    let next = 0;
    const fake = createHttpServer((req, res) => {
      if (req.url === '/elsewhere') {
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(JSON.stringify(allow));
      }
      const a = answers[next++]!;
      res.writeHead(a.status, { 'content-type': a.type ?? 'application/json', ...(a.location ? { location: a.location } : {}) });
      res.end(a.body === undefined ? '' : JSON.stringify(a.body));
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    const client = new BatonClient({ baseUrl: `http://127.0.0.1:${(fake.address() as { port: number }).port}`, apiKey: 'bt_x' });
    try {
      for (const a of answers) {
        const e = await rejection(client.verify(bundle));
        expect(e.code, JSON.stringify(a)).toBe('UNEXPECTED_RESPONSE');
      }
      // The allow itself, as Baton gives it, is taken.
      answers.push({ status: 200, body: allow });
      expect((await client.verify(bundle)).valid).toBe(true);
    } finally {
      await new Promise<void>((resolve) => fake.close(() => resolve()));
    }
  });

  it("with serviceDids, an allow counts only with a pinned key's signed receipt for this very invocation", async () => {
    const { b, chain } = await storedChain();
    const { keys } = await clients.anonymous.keys();
    const serviceDid = keys.find((k) => k.status === 'current')!.did;
    const pin = { serviceDids: [serviceDid], tenantId: live.tenant.id };
    const pinned = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify, ...pin });
    const other = new BatonClient({ ...pin, baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify, serviceDids: [generateKeyPair().did] });
    // The service signs for every tenant: a client of another tenant takes none of this one's allows.
    const elsewhere = new BatonClient({ ...pin, baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify, tenantId: 'ten_another' });

    // Baton's own answers are taken: the allow, a dry run (it signs nothing) and a retry's original allow.
    const first = bundleFor(b, chain);
    expect(await pinned.verify(first.bundle, { dryRun: true })).toMatchObject({ valid: true, dry_run: true });
    const allowed = await pinned.verify(first.bundle);
    expect(allowed).toMatchObject({ valid: true, retry: false });
    expect(await pinned.verify(first.bundle)).toMatchObject({ valid: true, retry: true });
    expect(await pinned.verifyServiceReceipt((allowed as { service_receipt: { jws: string } }).service_receipt.jws)).toMatchObject({
      valid: true,
    });
    // The same real allow, to a client that pins another key: not Baton's as far as it knows.
    const unpinned = await rejection(other.verify(bundleFor(b, chain).bundle));
    expect(unpinned.code).toBe('UNEXPECTED_RESPONSE');
    expect(unpinned.message).toMatch(/no pinned service key signed/);
    const otherTenant = await rejection(elsewhere.verify(bundleFor(b, chain).bundle));
    expect(otherTenant.code).toBe('UNEXPECTED_RESPONSE');
    expect(otherTenant.message).toContain(`the signed allow of another tenant ("${live.tenant.id}"), not of ten_another`);

    // A forger who holds earlier real allows, answering new calls with them (a replayed allow, the
    // same jti signed again over other arguments, a tampered signature, none at all).
    const sameJti = createInvocation({
      chain,
      invoker: b,
      args: { ...ARGS, query: 'something else' },
      toolServer: 'mcp://search',
      jti: first.inv.payload.jti,
    });
    const next = bundleFor(b, chain);
    const body = allowed as unknown as Record<string, unknown> & { service_receipt: { jws: string } };
    const forged: { bundle: ReturnType<typeof makeBundle>; answer: unknown; why: RegExp }[] = [
      { bundle: next.bundle, answer: { ...body, invocation_id: next.inv.payload.jti }, why: /another invocation/ },
      { bundle: makeBundle(sameJti, chain, 'reference'), answer: body, why: /another invocation/ },
      {
        bundle: next.bundle,
        answer: {
          ...body,
          invocation_id: next.inv.payload.jti,
          service_receipt: {
            ...body.service_receipt,
            jws: body.service_receipt.jws.slice(0, -2) + (body.service_receipt.jws.endsWith('AA') ? 'BA' : 'AA'),
          },
        },
        why: /no pinned service key signed/,
      },
      { bundle: next.bundle, answer: { ...body, invocation_id: next.inv.payload.jti, service_receipt: null }, why: /no service receipt/ },
    ];
    let turn = 0;
    const fake = createHttpServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(forged[turn++]!.answer));
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    const baseUrl = `http://127.0.0.1:${(fake.address() as { port: number }).port}`;
    try {
      const forgedTo = new BatonClient({ baseUrl, apiKey: 'bt_x', ...pin });
      for (const f of forged) {
        const e = await rejection(forgedTo.verify(f.bundle));
        expect(e.code).toBe('UNEXPECTED_RESPONSE');
        expect(e.message).toMatch(f.why);
      }
      // Without pins, the first forgery passes: the answer's word is all such a client has.
      turn = 0;
      expect(await new BatonClient({ baseUrl, apiKey: 'bt_x' }).verify(forged[0]!.bundle)).toMatchObject({ valid: true });
    } finally {
      await new Promise<void>((resolve) => fake.close(() => resolve()));
    }

    expect(() => new BatonClient({ baseUrl: live.baseUrl, tenantId: live.tenant.id, serviceDids: [] })).toThrow(/at least one did:key/);
    expect(() => new BatonClient({ baseUrl: live.baseUrl, tenantId: live.tenant.id, serviceDids: ['did:key:z6Mk-not-a-key'] })).toThrow(
      /not an Ed25519 did:key/,
    );
    expect(() => new BatonClient({ baseUrl: live.baseUrl, serviceDids: [serviceDid] })).toThrow(/serviceDids needs tenantId/);
  });

  it('with requireBinding, an allow of a body that is not the signed args is refused by the client itself', async () => {
    const { b, chain } = await storedChain();
    const { inv, bundle } = bundleFor(b, chain);
    // A forwarder that dropped the body got Baton's real allow of the signed args (binding absent)
    // and hands it back; `binding` is not signed, so the client compares for itself.
    const fake = createHttpServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          valid: true,
          invocation_id: inv.payload.jti,
          dry_run: false,
          retry: false,
          binding: 'match',
          counters: [],
          warnings: [],
        }),
      );
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    try {
      const client = new BatonClient({ baseUrl: `http://127.0.0.1:${(fake.address() as { port: number }).port}`, apiKey: 'bt_x' });
      const e = await rejection(client.verify(bundle, { body: { ...ARGS, query: 'rm -rf /' }, requireBinding: true }));
      expect(e.code).toBe('UNEXPECTED_RESPONSE');
      expect(e.message).toMatch(/body is not the signed args/);
      // The signed args themselves, and no binding asked: taken.
      expect(await client.verify(bundle, { body: ARGS, requireBinding: true })).toMatchObject({ valid: true });
      expect(await client.verify(bundle, { body: { other: 1 } })).toMatchObject({ valid: true });
    } finally {
      await new Promise<void>((resolve) => fake.close(() => resolve()));
    }
  });

  it('a non-Baton answer is UNEXPECTED_RESPONSE, with the status', async () => {
    const proxy = createHttpServer((_req, res) => {
      res.writeHead(502, { 'content-type': 'text/html' });
      res.end('<html>Bad Gateway</html>');
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const port = (proxy.address() as { port: number }).port;
    try {
      const e = await rejection(new BatonClient({ baseUrl: `http://127.0.0.1:${port}` }).keys());
      expect(e).toMatchObject({ status: 502, code: 'UNEXPECTED_RESPONSE' });
      expect(e.message).toMatch(/Bad Gateway/);
    } finally {
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });

  it('an injected fetch sees every request: key, user agent, JSON body, path prefix kept', async () => {
    const seen: { url: string; auth: string | null; ua: string | null; type: string | null }[] = [];
    const client = new BatonClient({
      baseUrl: 'http://baton.invalid/prefix/',
      apiKey: 'bt_secret',
      fetch: async (input, init) => {
        const h = new Headers(init?.headers);
        seen.push({ url: String(input), auth: h.get('authorization'), ua: h.get('user-agent'), type: h.get('content-type') });
        const body = String(input).includes('/v1/keys') ? { keys: [] } : { service_receipts: [], next_after: null };
        return new Response(JSON.stringify(body), {
          status: 200,
          headers: { 'content-type': 'application/json' },
        });
      },
    });
    await client.listServiceReceipts({ after: 5, limit: 2 });
    await client.keys();
    expect(seen[0]).toEqual({
      url: 'http://baton.invalid/prefix/v1/service-receipts?after=5&limit=2',
      auth: 'Bearer bt_secret',
      ua: expect.stringMatching(/^baton-sdk\//),
      type: null,
    });
    expect(seen[1]!.auth).toBeNull(); // public routes get no key
  });

  it('refuses an unusable baseUrl or timeout at construction', () => {
    expect(() => new BatonClient({ baseUrl: 'localhost:8080' })).toThrow(/absolute http\(s\) URL/);
    expect(() => new BatonClient({ baseUrl: 'ftp://x' })).toThrow(/absolute http\(s\) URL/);
    expect(() => new BatonClient({ baseUrl: 'http://x', timeoutMs: 0 })).toThrow(/timeoutMs/);
  });
});

describe('the package entry point', () => {
  it('exports the SDK: keys, records, client, revocation, offline verification', async () => {
    const sdk = await import('../../src/sdk/index.js');
    for (const name of [
      'generateKeyPair',
      'createRootDelegation',
      'createSubDelegation',
      'createInvocation',
      'makeBundle',
      'createRevocation',
      'BatonClient',
      'BatonApiError',
      'verifyChain',
      'verifyDelegations',
      'verifyServiceReceipt',
      'BatonError',
      'ERROR_TABLE',
    ]) {
      expect(typeof (sdk as Record<string, unknown>)[name], name).not.toBe('undefined');
    }
    // Offline verification of what the client stored agrees with the service.
    const { b, chain } = await storedChain();
    const { bundle } = bundleFor(b, chain, ARGS, 'value');
    const decision = sdk.verifyChain(bundle, { now: nowSeconds(), trustedRoots: [live.tenant.root.did] });
    expect(decision.valid).toBe(true);
  });
});
