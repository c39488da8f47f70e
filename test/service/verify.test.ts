/** POST /v1/verify and /verify on real PostgreSQL: allow, deny, replay, dry run, binding, DRS transport. */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, count, eq, sql } from 'drizzle-orm';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import { encodeBase64url } from '../../src/protocol/base64url.js';
import { utf8Encode } from '../../src/protocol/jcs.js';
import { signJws } from '../../src/protocol/jws.js';
import { observeVerifyBatches, type BatchObservation } from '../../src/store/verify-batch.js';
import { delegations, denials, invocations, serviceReceipts } from '../../src/store/schema/index.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { T0 } from '../support/fixtures.js';

let svc: TestService;
let tenant: TestTenant;
let a: KeyPair;
let b: KeyPair;
let root: SignedDelegation;
let leaf: SignedDelegation;

const ARGS = { tool: 'web_search', estimated_cost_usd: 0.25, pii_access: false, write_access: false };

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
  a = generateKeyPair();
  b = generateKeyPair();
  root = makeRoot();
  leaf = makeLeaf();
});
afterAll(async () => svc?.close());

/** The chain every test uses: a root over web_search/file_read (10 calls), a leaf narrowed to web_search (5 calls). */
function makeRoot(jti?: string): SignedDelegation {
  const policy = { allowed_tools: ['web_search', 'file_read'], max_cost_usd: 1, max_calls: 10 };
  return createRootDelegation({ issuer: tenant.root, audience: a.did, policy, iat: T0, nbf: T0 - 10, ...(jti ? { jti } : {}) });
}

function makeLeaf(jti?: string): SignedDelegation {
  const policy = { allowed_tools: ['web_search'], max_cost_usd: 0.5, max_calls: 5 };
  return createSubDelegation({ parent: root, issuer: a, audience: b.did, policy, iat: T0, ...(jti ? { jti } : {}) });
}

function invoke(args: Record<string, unknown> = ARGS, o: { jti?: string; iat?: number; toolServer?: string } = {}) {
  return createInvocation({
    chain: [root, leaf],
    invoker: b,
    args,
    toolServer: o.toolServer ?? 'mcp://tools.example.com',
    iat: o.iat ?? T0,
    ...(o.jti ? { jti: o.jti } : {}),
  });
}

async function tableCount(table: typeof invocations | typeof denials | typeof delegations): Promise<number> {
  const [r] = await svc.store.db.select({ n: count() }).from(table);
  return r!.n;
}

describe('verify: allow', () => {
  it('allows, counts against every max_calls in the chain, stores unknown delegation receipts, signs a service receipt', async () => {
    const inv = invoke();
    const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(inv, [root, leaf]) });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ valid: true, invocation_id: inv.payload.jti, dry_run: false });
    expect(r.body.context).toMatchObject({ chain_depth: 2, tool: 'web_search', root_principal: tenant.root.did });
    expect(r.body.counters).toEqual([
      { dr: root.hash, calls_used: 1, max_calls: 10 },
      { dr: leaf.hash, calls_used: 1, max_calls: 5 },
    ]);
    expect(r.body.service_receipt.jws.split('.')).toHaveLength(3);
    expect(await tableCount(delegations)).toBe(2); // DRS clients never pre-register
  });

  it('accepts a chain by reference (empty receipts, a DRS bundle by reference) once stored', async () => {
    const inv = invoke();
    const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(inv, [root, leaf], 'reference') });
    expect(r.status).toBe(200);
    expect(r.body.counters[1].calls_used).toBe(2);
  });

  it('a body that is not one JSON value says what to send, not to check details it does not have', async () => {
    for (const [body, type] of [
      ['{"bundle_version":', 'application/json'],
      [JSON.stringify(makeBundle(invoke(), [root, leaf])), 'text/plain'],
      ['bundle_version=4.0', 'application/x-www-form-urlencoded'],
    ] as const) {
      const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, body, headers: { 'content-type': type } });
      expect(r.status, type).toBe(400);
      expect(r.body.error.code).toBe('INVALID_REQUEST');
      expect(r.body.error.details).toBeUndefined();
      expect(r.body.error.suggestion).toContain('Content-Type: application/json');
      expect(r.body.error.suggestion).not.toContain('details');
    }
  });

  it('a body declared in a charset other than UTF-8, or with a Content-Encoding, is refused: Baton reads it as sent, in UTF-8', async () => {
    const before = { denials: await tableCount(denials), invocations: await tableCount(invocations) };
    const send = (headers: Record<string, string>) =>
      svc.call('POST', '/v1/verify/dry-run', {
        key: tenant.keys.verify,
        body: JSON.stringify(makeBundle(invoke(), [root, leaf])),
        headers: { 'content-type': 'application/json', ...headers },
      });
    for (const headers of <Record<string, string>[]>[
      { 'content-type': 'application/json; charset=latin1' },
      { 'content-type': 'application/json;charset="utf-16"' },
      { 'content-encoding': 'gzip' },
      { 'content-encoding': 'identity, gzip' },
    ]) {
      const r = await send(headers);
      expect(r.status, JSON.stringify(headers)).toBe(400);
      expect(r.body.error.code).toBe('INVALID_REQUEST');
    }
    expect({ denials: await tableCount(denials), invocations: await tableCount(invocations) }).toEqual(before);
    for (const headers of <Record<string, string>[]>[
      { 'content-type': 'application/json; charset=UTF-8' },
      { 'content-type': 'application/json; charset="utf-8"' },
      { 'content-encoding': 'identity' },
    ])
      expect((await send(headers)).status, JSON.stringify(headers)).toBe(200);
  });

  it('an option Baton does not know is refused on /v1/verify: a misspelled one would go unapplied', async () => {
    const before = { denials: await tableCount(denials), invocations: await tableCount(invocations) };
    // require_bindings: the body does not match the signed args, so require_binding would deny.
    const misspelled = { ...makeBundle(invoke(), [root, leaf]), body: { tool: 'other' }, require_bindings: true };
    const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: misspelled });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error.code).toBe('INVALID_REQUEST');
    expect(JSON.stringify(r.body.error)).toContain('require_bindings');
    expect({ denials: await tableCount(denials), invocations: await tableCount(invocations) }).toEqual(before);
  });

  it("a dry run is its own path: an agent's dry_run: true in a forwarded bundle is refused, and counts nothing", async () => {
    // A chain of its own, so the counts below are this test's.
    const policy = { allowed_tools: ['web_search'], max_cost_usd: 1, max_calls: 10 };
    const ownRoot = createRootDelegation({ issuer: tenant.root, audience: a.did, policy, iat: T0, nbf: T0 - 10 });
    const ownLeaf = createSubDelegation({ parent: ownRoot, issuer: a, audience: b.did, policy, iat: T0 });
    const inv = createInvocation({ chain: [ownRoot, ownLeaf], invoker: b, args: ARGS, toolServer: 'mcp://tools.example.com', iat: T0 });
    const bundle = makeBundle(inv, [ownRoot, ownLeaf]);
    const counted = async () =>
      (await svc.store.db.select({ n: count() }).from(invocations).where(eq(invocations.leafHash, ownLeaf.hash)))[0]!.n;
    const deniedBefore = await tableCount(denials);
    // What a DRS client pointed at /v1/verify forwards: the agent's bundle, members and all.
    for (const [what, path, json] of [
      ['dry_run: true in the body', '/v1/verify', { ...bundle, dry_run: true }],
      ['dry_run: false in the body', '/v1/verify', { ...bundle, dry_run: false }],
      ['dry_run in the body of the dry run', '/v1/verify/dry-run', { ...bundle, dry_run: true }],
      // A query parameter a proxy could strip, making the dry run a counted call: no such option.
      ['a dry_run query parameter', '/v1/verify?dry_run=true', bundle],
      ['a query parameter on the dry run', '/v1/verify/dry-run?dry_run=true', bundle],
      ['a dry run on the DRS path', '/verify?dry_run=true', bundle],
      ['a dry run on the DRS path, twice', '/verify?dry_run=true&dry_run=false', bundle],
    ] as const) {
      const r = await svc.call('POST', path, { key: tenant.keys.verify, json });
      expect(r.status, `${what}: ${JSON.stringify(r.body)}`).toBe(400);
      expect(r.body.valid, what).toBeUndefined();
      expect(r.body.error.code, what).toBe('INVALID_REQUEST');
    }
    const inBody = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: { ...bundle, dry_run: true } });
    expect(inBody.body.error.details.issues[0].message).toContain('POST /v1/verify/dry-run');
    expect([await counted(), await tableCount(denials)]).toEqual([0, deniedBefore]);
    // The tool server's own URL asks for one.
    const dry = await svc.call('POST', '/v1/verify/dry-run', { key: tenant.keys.verify, json: bundle });
    expect(dry.body).toMatchObject({ valid: true, dry_run: true, service_receipt: null });
    expect(await counted()).toBe(0);
    // /verify ignores query parameters it does not know, as drs-verify does, repeated or not; the real call is counted once.
    const real = await svc.call('POST', '/verify?trace=1&trace=2', { key: tenant.keys.verify, json: bundle });
    expect(real.body).toMatchObject({ valid: true, dry_run: false, retry: false });
    expect(await counted()).toBe(1);
  });

  it("/verify takes none of Baton's options: its body may be the agent's bundle, and dry_run: true answered valid with nothing counted", async () => {
    const before = { denials: await tableCount(denials), invocations: await tableCount(invocations) };
    // What DRS's middleware forwards: the bundle as the agent attached it, members and all.
    for (const [option, value] of [
      ['dry_run', true],
      ['require_binding', false],
      ['approval_id', 'apr_x'],
    ] as const) {
      const smuggled = { ...makeBundle(invoke(), [root, leaf]), [option]: value };
      const r = await svc.call('POST', '/verify', { key: tenant.keys.verify, json: smuggled });
      expect(r.status, `${option}: ${JSON.stringify(r.body)}`).toBe(400);
      expect(r.body.valid).toBeUndefined();
      expect(r.body.error.message).toContain(option);
      expect(r.body.error.details.issues[0].message).toContain('POST /v1/verify only');
    }
    expect({ denials: await tableCount(denials), invocations: await tableCount(invocations) }).toEqual(before);
    // The same option is /v1/verify's to take.
    const known = await svc.call('POST', '/v1/verify/dry-run', {
      key: tenant.keys.verify,
      json: { ...makeBundle(invoke(), [root, leaf]) },
    });
    expect(known.status).toBe(200);
  });

  it('the DRS-compatible /verify takes the bundle in X-DRS-Bundle', async () => {
    const inv = invoke();
    const header = encodeBase64url(utf8Encode(JSON.stringify(makeBundle(inv, [root, leaf]))));
    const r = await svc.call('POST', '/verify', { key: tenant.keys.verify, json: { body: ARGS }, headers: { 'x-drs-bundle': header } });
    expect(r.status).toBe(200);
    expect(r.body.valid).toBe(true);
    expect(r.body.binding).toBe('match');
  });

  it('a bundle in X-DRS-Bundle is read as strictly as one in the body: refused 400, nothing stored', async () => {
    const bundle = JSON.stringify(makeBundle(invoke(), [root, leaf]));
    const refusedTexts = [
      bundle.replace('"bundle_version"', '"note":"a\\u0000b","bundle_version"'), // U+0000, escaped
      bundle.replace('"bundle_version"', '"note":"\\ud800","bundle_version"'), // a lone surrogate
      bundle.replace('"bundle_version"', '"receipts":[],"bundle_version"'), // a repeated key
      `${'['.repeat(70)}${']'.repeat(70)}`, // nested too deep
      '[]', // not an object, as a body would be refused
      '"bundle"',
      'null',
    ];
    const before = { denials: await tableCount(denials), invocations: await tableCount(invocations) };
    for (const text of refusedTexts) {
      const header = encodeBase64url(utf8Encode(text));
      const r = await svc.call('POST', '/verify', { key: tenant.keys.verify, headers: { 'x-drs-bundle': header } });
      expect(r.status, text.slice(0, 60)).toBe(400);
      expect(r.body.error.code).toBe('INVALID_REQUEST');
      expect(r.body.error.message).toMatch(/^The X-DRS-Bundle header /);
      expect(r.body.error.message).not.toContain('\u0000');
    }
    expect({ denials: await tableCount(denials), invocations: await tableCount(invocations) }).toEqual(before);
  });

  it('/verify accepts X-DRS-Bundle with no body at all, as DRS clients send it', async () => {
    const own = makeLeaf('dr:drs-header-only');
    const inv = createInvocation({ chain: [root, own], invoker: b, args: ARGS, toolServer: 'mcp://tools.example.com', iat: T0 });
    const header = encodeBase64url(utf8Encode(JSON.stringify(makeBundle(inv, [root, own]))));
    const r = await svc.call('POST', '/verify', { key: tenant.keys.verify, headers: { 'x-drs-bundle': header } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ valid: true, binding: 'absent' });
  });
});

describe('verify: deny', () => {
  it('403 with code, block, message, suggestion and every violation; records the denial, consumes no jti', async () => {
    const before = await tableCount(denials);
    const inv = invoke({ tool: 'delete_db', estimated_cost_usd: 2, pii_access: false, write_access: false });
    const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(inv, [root, leaf]) });
    expect(r.status).toBe(403);
    expect(r.body.valid).toBe(false);
    expect(r.body.error).toMatchObject({ code: 'POLICY_VIOLATION', block: 'D' });
    expect(r.body.error.suggestion).toBeTruthy();
    const where = r.body.violations.map((v: { dr_index: number; field: string }) => `${v.dr_index}:${v.field}`).sort();
    expect(where).toEqual(['0:args.estimated_cost_usd', '0:args.tool', '1:args.estimated_cost_usd', '1:args.tool']);
    expect(await tableCount(denials)).toBe(before + 1);
    const [denial] = await svc.store.db.select().from(denials).where(eq(denials.jti, inv.payload.jti));
    expect(denial).toMatchObject({ code: 'POLICY_VIOLATION', block: 'D', violations: r.body.violations });
    const [row] = await svc.store.db.select().from(invocations).where(eq(invocations.jti, inv.payload.jti));
    expect(row).toBeUndefined();
  });

  it('the same invocation re-sent by the same key is a retry: the original service receipt, nothing counted again', async () => {
    const own = makeLeaf('dr:retry-same-key');
    const inv = createInvocation({ chain: [root, own], invoker: b, args: ARGS, toolServer: 'mcp://tools.example.com', iat: T0 });
    const bundle = makeBundle(inv, [root, own]);
    const first = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
    expect(first.status).toBe(200);
    expect(first.body.retry).toBe(false);
    const again = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({
      valid: true,
      retry: true,
      invocation_id: inv.payload.jti,
      service_receipt: first.body.service_receipt,
    });
    expect(again.body.counters).toEqual(first.body.counters);
    const [ownRow] = await svc.store.db.select().from(delegations).where(eq(delegations.hash, own.hash));
    expect(ownRow!.callsUsed).toBe(1);
    const allowed = await svc.store.db
      .select()
      .from(serviceReceipts)
      .where(and(eq(serviceReceipts.subject, inv.payload.jti), eq(serviceReceipts.kind, 'invocation.allowed')));
    expect(allowed).toHaveLength(1);
  });

  it("a human root's consent record and session id are in the context, as DRS verifiers report them", async () => {
    const consent = { method: 'explicit-click', timestamp: '2027-01-15T10:00:00Z', session_id: 'sess-42' };
    const human = createRootDelegation({
      issuer: tenant.root,
      audience: a.did,
      policy: { allowed_tools: ['web_search'], max_cost_usd: 1, max_calls: 10 },
      iat: T0,
      nbf: T0 - 10,
      rootType: 'human',
      consent,
    });
    const sub = createSubDelegation({
      parent: human,
      issuer: a,
      audience: b.did,
      policy: { allowed_tools: ['web_search'], max_cost_usd: 0.5, max_calls: 5 },
      iat: T0,
    });
    const inv = createInvocation({ chain: [human, sub], invoker: b, args: ARGS, toolServer: 'mcp://tools.example.com', iat: T0 });
    const r = await svc.call('POST', '/verify', { key: tenant.keys.verify, json: makeBundle(inv, [human, sub]) });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.context).toMatchObject({ root_type: 'human', consent_record: consent, session_id: 'sess-42' });
    expect(r.body.context).not.toHaveProperty('regulatory');
    // An organisation's root carries none of them, and the context says nothing of them.
    const org = await svc.call('POST', '/v1/verify/dry-run', {
      key: tenant.keys.verify,
      json: { ...makeBundle(invoke(), [root, leaf]) },
    });
    expect(Object.keys(org.body.context)).not.toEqual(expect.arrayContaining(['consent_record']));
    expect(org.body.context).not.toHaveProperty('session_id');
  });

  it('on the DRS route a re-send by the same key is a replay: DRS clients read only valid', async () => {
    // A root of its own: the shared one's 10 calls are the other tests'.
    const ownRoot = makeRoot('dr:drs-route-root');
    const own = createSubDelegation({
      parent: ownRoot,
      issuer: a,
      audience: b.did,
      policy: { allowed_tools: ['web_search'], max_cost_usd: 0.5, max_calls: 5 },
      iat: T0,
    });
    const inv = createInvocation({ chain: [ownRoot, own], invoker: b, args: ARGS, toolServer: 'mcp://tools.example.com', iat: T0 });
    const bundle = makeBundle(inv, [ownRoot, own]);
    const first = await svc.call('POST', '/verify', { key: tenant.keys.verify, json: bundle });
    expect(first.status).toBe(200);
    for (let i = 0; i < 2; i++) {
      const again = await svc.call('POST', '/verify', { key: tenant.keys.verify, json: bundle });
      expect(again.status).toBe(403);
      expect(again.body).toMatchObject({ valid: false, error: { code: 'REPLAY_DETECTED', block: 'G' } });
    }
    // The same re-send on /v1/verify still gets its original allow back.
    const retry = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
    expect(retry.body).toMatchObject({ valid: true, retry: true, service_receipt: first.body.service_receipt });
    const [rootRow] = await svc.store.db.select().from(delegations).where(eq(delegations.hash, ownRoot.hash));
    expect(rootRow!.callsUsed).toBe(1);
  });

  it('a retry re-checks what may have changed: a revoked chain refuses the re-send', async () => {
    const own = makeLeaf('dr:retry-then-revoked');
    const inv = createInvocation({ chain: [root, own], invoker: b, args: ARGS, toolServer: 'mcp://tools.example.com', iat: T0 });
    const bundle = makeBundle(inv, [root, own]);
    expect((await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle })).status).toBe(200);
    const [ownRow] = await svc.store.db.select().from(delegations).where(eq(delegations.hash, own.hash));
    await svc.store.db.update(delegations).set({ revokedAt: new Date() }).where(eq(delegations.hash, ownRow!.hash));
    const again = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
    expect(again.status).toBe(403);
    expect(again.body.error.code).toBe('RECEIPT_REVOKED');
  });

  it('any other caller gets REPLAY_DETECTED: another key, or a different invocation reusing the jti; nothing counted', async () => {
    const own = makeLeaf('dr:replay-other-callers');
    const on = (args: Record<string, unknown>, jti?: string) =>
      createInvocation({ chain: [root, own], invoker: b, args, toolServer: 'mcp://tools.example.com', iat: T0, ...(jti ? { jti } : {}) });
    const inv = on(ARGS);
    const bundle = makeBundle(inv, [root, own]);
    const first = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
    expect(first.status).toBe(200);
    const used = first.body.counters[1].calls_used;
    const other = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
      key: svc.adminKey,
      json: { scopes: ['verify'], name: 'second verifier' },
    });
    expect(other.status).toBe(201);
    const byOtherKey = await svc.call('POST', '/v1/verify', { key: other.body.key, json: bundle });
    expect(byOtherKey.status).toBe(403);
    expect(byOtherKey.body.error).toMatchObject({ code: 'REPLAY_DETECTED', block: 'G' });
    // Same jti, different invocation (other args, so another hash), same key.
    const sameJti = on({ ...ARGS, estimated_cost_usd: 0.2 }, inv.payload.jti);
    const reused = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(sameJti, [root, own], 'reference') });
    expect(reused.status).toBe(403);
    expect(reused.body.error).toMatchObject({ code: 'REPLAY_DETECTED', block: 'G' });
    const [ownRow] = await svc.store.db.select().from(delegations).where(eq(delegations.hash, own.hash));
    expect(ownRow!.callsUsed).toBe(used);
  });

  it('a denied invocation can be retried under the same jti once fixed? no: a denial never consumes it', async () => {
    const jti = 'inv:denied-then-fine';
    const denied = invoke({ ...ARGS, tool: 'file_read' }, { jti });
    expect((await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(denied, [root, leaf]) })).status).toBe(403);
    const fine = invoke(ARGS, { jti });
    expect((await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(fine, [root, leaf]) })).status).toBe(200);
  });

  it('a tool name longer than any a policy may hold is refused INVALID_FIELD and recorded, and fails no verify batched with it', async () => {
    // A chain that allows every tool, so only the name's length can refuse it (the statement
    // stores and indexes the name: 3,000 random characters failed the insert of the whole batch).
    const holder = generateKeyPair();
    const open = createRootDelegation({
      issuer: tenant.root,
      audience: holder.did,
      policy: { allowed_tools: ['*'], max_calls: 100 },
      iat: T0,
      nbf: T0 - 10,
    });
    const signedRaw = (tool: string) => {
      const payload = {
        iss: holder.did,
        sub: open.payload.sub,
        drs_v: '4.0',
        drs_type: 'invocation-receipt',
        cmd: open.payload.cmd,
        args: { tool, pii_access: false, write_access: false },
        dr_chain: [open.hash],
        tool_server: 'mcp://tools.example.com',
        iat: T0,
        jti: `inv:long-tool-${Math.random().toString(36).slice(2)}`,
      };
      return signJws(payload, holder.seed);
    };
    expect(() => createInvocation({ chain: [open], invoker: holder, args: { tool: 'x'.repeat(257) }, toolServer: 'mcp://t' })).toThrow(
      /args\.tool must be a tool name of at most 256 characters/,
    );
    const longest = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(signedRaw('t'.repeat(256)), [open]) });
    expect(longest.status).toBe(200);

    const seen: BatchObservation[] = [];
    const stop = observeVerifyBatches((b) => seen.push(b));
    const deniedBefore = await tableCount(denials);
    const honest = Array.from({ length: 4 }, () => makeBundle(signedRaw('web_search'), [open]));
    // Random hex: a repetitive name compresses under the index's row limit, and would show nothing.
    const hostile = Array.from({ length: 4 }, () => makeBundle(signedRaw(randomBytes(1500).toString('hex')), [open]));
    const answers = await Promise.all(
      [...honest, ...hostile].map((json) => svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json })),
    );
    stop();
    expect(answers.slice(0, 4).map((r) => r.status)).toEqual([200, 200, 200, 200]);
    for (const r of answers.slice(4)) {
      expect(r.status).toBe(403);
      expect(r.body.error.code).toBe('INVALID_FIELD');
      expect(r.body.violations[0]).toMatchObject({
        code: 'INVALID_FIELD',
        message: 'The invocation payload is not valid: args.tool must be a tool name of at most 256 characters.',
      });
    }
    expect(await tableCount(denials)).toBe(deniedBefore + 4);
    expect(seen.filter((b) => b.failed)).toEqual([]);
  });

  it('a stale invocation is denied INVOCATION_STALE', async () => {
    const inv = invoke(ARGS, { iat: T0 - 3600 });
    const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(inv, [root, leaf]) });
    expect(r.body.error.code).toBe('INVOCATION_STALE');
  });

  it('an unknown chain by reference is BUNDLE_INCOMPLETE', async () => {
    const other = createRootDelegation({ issuer: tenant.root, audience: b.did, policy: {}, iat: T0 });
    const inv = createInvocation({ chain: [other], invoker: b, args: ARGS, toolServer: 't', iat: T0 });
    const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(inv, [other], 'reference') });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('BUNDLE_INCOMPLETE');
  });
});

describe('verify: dry run and binding', () => {
  it('dry_run runs every check, reports counters, consumes nothing', async () => {
    leaf = makeLeaf('dr:dry-run-leaf');
    const inv = invoke();
    const before = await svc.store.db.select().from(delegations).where(eq(delegations.hash, leaf.hash));
    const invBefore = await tableCount(invocations);
    const r = await svc.call('POST', '/v1/verify/dry-run', { key: tenant.keys.verify, json: { ...makeBundle(inv, [root, leaf]) } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ valid: true, dry_run: true, service_receipt: null });
    expect(r.body.counters[1].calls_used).toBe(before[0]?.callsUsed ?? 0);
    const after = await svc.store.db.select().from(delegations).where(eq(delegations.hash, leaf.hash));
    expect(after[0]?.callsUsed).toBe(before[0]?.callsUsed);
    expect(await tableCount(invocations)).toBe(invBefore);
    // the same jti is still fresh
    expect((await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(inv, [root, leaf]) })).status).toBe(200);
  });

  it('body is compared with args under JCS; require_binding makes a mismatch a deny', async () => {
    const inv = invoke();
    const reordered = { write_access: false, pii_access: false, estimated_cost_usd: 0.25, tool: 'web_search' };
    const m = await svc.call('POST', '/v1/verify/dry-run', {
      key: tenant.keys.verify,
      json: { ...makeBundle(inv, [root, leaf]), body: reordered },
    });
    expect(m.body.binding).toBe('match');
    const mm = await svc.call('POST', '/v1/verify', {
      key: tenant.keys.verify,
      json: { ...makeBundle(inv, [root, leaf]), body: { ...ARGS, tool: 'file_read' }, require_binding: true },
    });
    expect(mm.status).toBe(403);
    expect(mm.body.error.code).toBe('BINDING_MISMATCH');
  });

  it('a dry run reports a call that would be refused: exhausted counter, used jti', async () => {
    const used = invoke();
    expect((await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(used, [root, leaf]) })).status).toBe(200);
    const sameJti = invoke({ ...ARGS, estimated_cost_usd: 0.2 }, { jti: used.payload.jti });
    const replay = await svc.call('POST', '/v1/verify/dry-run', {
      key: tenant.keys.verify,
      json: { ...makeBundle(sameJti, [root, leaf]) },
    });
    expect(replay.body.error.code).toBe('REPLAY_DETECTED');
    // The same invocation by the same key would be answered as a retry: the dry run says so.
    const retry = await svc.call('POST', '/v1/verify/dry-run', {
      key: tenant.keys.verify,
      json: { ...makeBundle(used, [root, leaf]) },
    });
    expect(retry.body).toMatchObject({ valid: true, dry_run: true, retry: true });
  });

  it('NEAR_LIMIT once a counter passes 80%, then CALLS_EXHAUSTED naming the DR', async () => {
    root = makeRoot('dr:near-limit-root');
    leaf = makeLeaf('dr:near-limit-leaf');
    await svc.call('POST', '/v1/delegations', { json: { receipts: [root.jws, leaf.jws] } });
    let last;
    const warned: number[] = [];
    for (let i = 0; i < 5; i++) {
      last = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(invoke(), [root, leaf], 'reference') });
      expect(last.status).toBe(200);
      if (last.body.warnings.some((w: { code: string; dr: string }) => w.code === 'NEAR_LIMIT' && w.dr === leaf.hash)) warned.push(i + 1);
    }
    expect(warned).toEqual([5]); // 5/5 > 80%; 4/5 is exactly 80%
    const exhausted = await svc.call('POST', '/v1/verify', {
      key: tenant.keys.verify,
      json: makeBundle(invoke(), [root, leaf], 'reference'),
    });
    expect(exhausted.status).toBe(403);
    expect(exhausted.body.error.code).toBe('CALLS_EXHAUSTED');
    expect(exhausted.body.violations[0]).toMatchObject({ dr_hash: leaf.hash, field: 'policy.max_calls' });
  });
});

describe('verify: auth', () => {
  it('needs a verify key; another scope is 403; another tenant cannot use this chain', async () => {
    const bundle = makeBundle(invoke(), [root, leaf]);
    expect((await svc.call('POST', '/v1/verify', { json: bundle })).status).toBe(401);
    expect((await svc.call('POST', '/v1/verify', { key: tenant.keys.audit, json: bundle })).status).toBe(403);
    const other = await setupTenant(svc, 'other');
    const r = await svc.call('POST', '/v1/verify', { key: other.keys.verify, json: bundle });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('UNTRUSTED_ROOT');
  });

  it('a key bound to a tool server only verifies invocations naming it', async () => {
    root = makeRoot('dr:bound-root');
    const k = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
      key: svc.adminKey,
      json: { scopes: ['verify'], tool_server: 'mcp://only-this' },
    });
    const fresh = makeLeaf('dr:bound-test');
    const other = createInvocation({ chain: [root, fresh], invoker: b, args: ARGS, toolServer: 'mcp://elsewhere', iat: T0 });
    const denied = await svc.call('POST', '/v1/verify', { key: k.body.key, json: makeBundle(other, [root, fresh]) });
    expect(denied.body.error.code).toBe('TOOL_SERVER_MISMATCH');
    const mine = createInvocation({ chain: [root, fresh], invoker: b, args: ARGS, toolServer: 'mcp://only-this', iat: T0 });
    expect((await svc.call('POST', '/v1/verify', { key: k.body.key, json: makeBundle(mine, [root, fresh]) })).status).toBe(200);
  });

  it('malformed bodies are 400 in the envelope and store nothing', async () => {
    const before = await tableCount(denials);
    const r = await svc.call('POST', '/v1/verify', {
      key: tenant.keys.verify,
      body: '{"invocation":',
      headers: { 'content-type': 'application/json' },
    });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('INVALID_REQUEST');
    expect(await tableCount(denials)).toBe(before);
  });
});

describe('verify: the DRS path', () => {
  /**
   * A chain of the test's own, so the calls it counts change no other test's counters: the bundle of a
   * fresh invocation through it, and how many of its calls were counted.
   */
  function ownChain() {
    const policy = { allowed_tools: ['web_search'], max_cost_usd: 1, max_calls: 10 };
    const ownRoot = createRootDelegation({ issuer: tenant.root, audience: a.did, policy, iat: T0, nbf: T0 - 10 });
    const ownLeaf = createSubDelegation({ parent: ownRoot, issuer: a, audience: b.did, policy, iat: T0 });
    return {
      bundle: () =>
        makeBundle(
          createInvocation({ chain: [ownRoot, ownLeaf], invoker: b, args: ARGS, toolServer: 'mcp://tools.example.com', iat: T0 }),
          [ownRoot, ownLeaf],
        ),
      used: async () => (await svc.store.db.select({ n: count() }).from(invocations).where(eq(invocations.leafHash, ownLeaf.hash)))[0]!.n,
    };
  }

  it('ignores members Baton does not know, as DRS clients may send any (include_timestamps, say)', async () => {
    const { bundle } = ownChain();
    const drs = await svc.call('POST', '/verify', {
      key: tenant.keys.verify,
      json: { body: ARGS, include_timestamps: true },
      headers: { 'x-drs-bundle': encodeBase64url(utf8Encode(JSON.stringify(bundle()))) },
    });
    expect(drs.status, JSON.stringify(drs.body)).toBe(200);
    expect(drs.body).toMatchObject({ valid: true, dry_run: false, binding: 'match' });
  });

  it('a body that is not the signed args is a deny on /verify (a DRS client that reads only valid would run it); no body is judged without', async () => {
    const { bundle, used } = ownChain();
    // What DRS's VerifyClient sends: {...bundle, body}, the body being what the tool server will run.
    const executed = { ...ARGS, tool: 'file_write', write_access: true };
    const mismatch = await svc.call('POST', '/verify', {
      key: tenant.keys.verify,
      json: { ...bundle(), body: executed },
    });
    expect(mismatch.status, JSON.stringify(mismatch.body)).toBe(403);
    expect(mismatch.body.valid).toBe(false);
    expect(mismatch.body.error.code).toBe('BINDING_MISMATCH');
    expect(await used()).toBe(0);
    for (const body of [{ body: ARGS }, {}]) {
      const r = await svc.call('POST', '/verify', {
        key: tenant.keys.verify,
        json: { ...bundle(), ...body },
      });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.binding).toBe('body' in body ? 'match' : 'absent');
    }
    expect(await used()).toBe(2);
  });

  it('a body and an X-DRS-Bundle header that carry different bundles are refused; the same one in both is judged once', async () => {
    const { bundle, used } = ownChain();
    const header = (sent: unknown) => ({ 'x-drs-bundle': encodeBase64url(utf8Encode(JSON.stringify(sent))) });
    const one = bundle();
    const other = bundle();
    const { receipts, bundle_version } = one as { receipts: unknown; bundle_version: unknown };
    const refused: [string, Record<string, unknown>, Record<string, string>][] = [
      ['another invocation', one, header(other)],
      // Part of a bundle in the body, the rest in the header: which receipts were judged?
      ['only the records in the body', { receipts, bundle_version }, header(one)],
      ['the same invocation, other records', { ...one, receipts: [] }, header(one)],
    ];
    for (const path of ['/verify', '/v1/verify']) {
      for (const [what, json, headers] of refused) {
        const r = await svc.call('POST', path, { key: tenant.keys.verify, json, headers });
        expect(r.status, `${path}, ${what}: ${JSON.stringify(r.body)}`).toBe(400);
        expect(r.body.error.message).toContain('carry different bundles');
      }
      // A header that is there is read, whatever the body holds.
      const unreadable = await svc.call('POST', path, { key: tenant.keys.verify, json: one, headers: { 'x-drs-bundle': '!!!' } });
      expect(unreadable.status, JSON.stringify(unreadable.body)).toBe(400);
      expect(unreadable.body.error.message).toContain('X-DRS-Bundle header is not base64url');
    }
    expect(await used()).toBe(0);
    // As DRS's VerifyClient sends it: the bundle in both, counted once.
    const both = await svc.call('POST', '/verify', { key: tenant.keys.verify, json: { ...one, body: ARGS }, headers: header(one) });
    expect(both.status, JSON.stringify(both.body)).toBe(200);
    expect(await used()).toBe(1);
    // An empty header is no header: the body's bundle is judged.
    const empty = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: other, headers: { 'x-drs-bundle': '' } });
    expect(empty.status, JSON.stringify(empty.body)).toBe(200);
    expect(await used()).toBe(2);
    // ...and with no body either, the request carries no bundle: a 400, as without the header.
    const nothing = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, headers: { 'x-drs-bundle': ' ' } });
    expect(nothing.status, JSON.stringify(nothing.body)).toBe(400);
    expect(nothing.body.error.message).toContain('empty');
  });

  it('a bundle in the X-DRS-Bundle header is held to the rules of a body on the same path, and what they refuse stores nothing', async () => {
    const { bundle, used } = ownChain();
    const viaHeader = (path: string, header: object) =>
      svc.call('POST', path, {
        key: tenant.keys.verify,
        json: {},
        headers: { 'x-drs-bundle': encodeBase64url(utf8Encode(JSON.stringify(header))) },
      });
    const deniedBefore = await tableCount(denials);
    // An option there is no option, on either path: 400, as in a /verify body.
    for (const path of ['/verify', '/v1/verify']) {
      const r = await viaHeader(path, { ...bundle(), dry_run: true, approval_id: 'apr_x' });
      expect(r.status, `${path}: ${JSON.stringify(r.body)}`).toBe(400);
      expect(r.body.error.code).toBe('INVALID_REQUEST');
      expect(r.body.error.details.members).toEqual(['dry_run', 'approval_id']);
    }
    // ... and is not waved through because the body carries a copy of the bundle.
    for (const path of ['/verify', '/v1/verify']) {
      const one = bundle();
      const r = await svc.call('POST', path, {
        key: tenant.keys.verify,
        json: one,
        headers: { 'x-drs-bundle': encodeBase64url(utf8Encode(JSON.stringify({ ...one, dry_run: true }))) },
      });
      expect(r.status, `${path}: ${JSON.stringify(r.body)}`).toBe(400);
      expect(r.body.error.details.members).toEqual(['dry_run']);
    }
    // A body in the header is the agent's: on /verify it would choose what binding compares.
    const chosen = await viaHeader('/verify', { ...bundle(), body: { tool: 'other' } });
    expect(chosen.status, JSON.stringify(chosen.body)).toBe(400);
    // Another member: 400 on /v1/verify, as in its body; ignored on /verify, as in its body, with
    // or without a copy of the bundle in the body (DRS's VerifyClient sends both).
    const v1 = await viaHeader('/v1/verify', { ...bundle(), include_timestamps: true });
    expect(v1.status, JSON.stringify(v1.body)).toBe(400);
    expect([await used(), await tableCount(denials)]).toEqual([0, deniedBefore]);
    const drs = await viaHeader('/verify', { ...bundle(), include_timestamps: true });
    expect(drs.status, JSON.stringify(drs.body)).toBe(200);
    const copy = bundle();
    const both = await svc.call('POST', '/verify', {
      key: tenant.keys.verify,
      json: { ...copy, include_timestamps: true },
      headers: { 'x-drs-bundle': encodeBase64url(utf8Encode(JSON.stringify({ ...copy, include_timestamps: true }))) },
    });
    expect(both.status, JSON.stringify(both.body)).toBe(200);
    expect(await used()).toBe(2);
  });
});

describe('verify: a 503 at the deadline says how to learn the outcome on the path asked', () => {
  const DEADLINE_MS = 1_000;
  const POOL = 2;
  let slow: TestService;
  let own: TestTenant;

  beforeAll(async () => {
    slow = await startTestService({ pool: POOL, env: { BATON_VERIFY_DEADLINE_MS: String(DEADLINE_MS) } });
    own = await setupTenant(slow, 'deadline');
  });
  afterAll(async () => slow?.close());

  /** A fresh invocation through a chain of its own, as a bundle. */
  function bundle() {
    const policy = { allowed_tools: ['web_search'], max_cost_usd: 1, max_calls: 10 };
    const holder = generateKeyPair();
    const dr = createRootDelegation({ issuer: own.root, audience: holder.did, policy, iat: T0, nbf: T0 - 10 });
    return makeBundle(createInvocation({ chain: [dr], invoker: holder, args: ARGS, toolServer: 'mcp://tools.example.com', iat: T0 }), [dr]);
  }

  const send = (path: '/v1/verify' | '/verify', json: unknown) => slow.call('POST', path, { key: own.keys.verify, json });

  /**
   * Each path's answer while transactions hold every connection of the service's pool: a verify
   * that must store its chain waits for one in the service, past its deadline (a lock wait would
   * end in the database's lock_timeout, derived from the same deadline, and race it).
   */
  async function whilePoolHeld(bundles: Record<'/v1/verify' | '/verify', unknown>) {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const holding: Promise<void>[] = [];
    const taken: Promise<void>[] = [];
    for (let i = 0; i < POOL; i++) {
      let took!: () => void;
      taken.push(new Promise<void>((r) => (took = r)));
      holding.push(
        slow.store.db.transaction(async (tx) => {
          await tx.execute(sql`select 1`);
          took();
          await held;
        }),
      );
    }
    try {
      await Promise.all(taken);
      const [v1, drs] = await Promise.all([send('/v1/verify', bundles['/v1/verify']), send('/verify', bundles['/verify'])]);
      return { v1: v1!, drs: drs! };
    } finally {
      release();
      await Promise.all(holding);
    }
  }

  it('on /v1/verify: re-send with the same key (retry: true); on /verify: a re-send there is REPLAY_DETECTED if counted, so ask /v1/verify', async () => {
    // Warm the key cache on both paths: each verify below then waits only to store its chain.
    expect((await send('/v1/verify', bundle())).status).toBe(200);
    expect((await send('/verify', bundle())).status).toBe(200);

    const late = { '/v1/verify': bundle(), '/verify': bundle() };
    const { v1, drs } = await whilePoolHeld(late);
    for (const r of [v1, drs]) {
      expect(r.status, JSON.stringify(r.body)).toBe(503);
      expect(r.body.error.code).toBe('STORAGE_UNAVAILABLE');
      expect(r.body.error.message).toContain(`within the ${DEADLINE_MS} ms deadline`);
    }
    expect(v1.body.error.message).toContain(
      'Re-send the same invocation with the same key to learn whether the database counted it anyway (retry: true)',
    );
    expect(drs.body.error.message).not.toContain('Re-send the same invocation with the same key');
    expect(drs.body.error.message).toContain('refused REPLAY_DETECTED if the database counted it anyway');
    expect(drs.body.error.message).toContain('POST /v1/verify');

    // What each message promises: neither was counted (the statement refused to commit past its
    // deadline), so each re-sent on its own path is decided afresh.
    const again = { v1: await send('/v1/verify', late['/v1/verify']), drs: await send('/verify', late['/verify']) };
    expect(again.v1.status, JSON.stringify(again.v1.body)).toBe(200);
    expect(again.v1.body.retry).toBe(false);
    expect(again.drs.status, JSON.stringify(again.drs.body)).toBe(200);
    // Now counted: the DRS path answers a re-send REPLAY_DETECTED, /v1/verify the original allow.
    expect((await send('/verify', late['/verify'])).body.error?.code).toBe('REPLAY_DETECTED');
    const learnt = await send('/v1/verify', late['/verify']);
    expect(learnt.status, JSON.stringify(learnt.body)).toBe(200);
    expect(learnt.body.retry).toBe(true);
  });
});
