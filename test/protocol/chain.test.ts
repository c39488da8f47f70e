/** Adversarial cases: one or more per verification code of DESIGN section 4. */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  bindingDifference,
  commandCovers,
  DelegationCache,
  verifyChain,
  verifyDelegationSegment,
  verifyDelegations,
  type ChainDecision,
  type ChainOptions,
} from '../../src/protocol/chain.js';
import { encodeBase58btc } from '../../src/protocol/base58.js';
import { encodeBase64url } from '../../src/protocol/base64url.js';
import { signJws } from '../../src/protocol/jws.js';
import { recordHash } from '../../src/protocol/hash.js';
import { canonicalJson, utf8Encode } from '../../src/protocol/jcs.js';
import { signEd25519 } from '../../src/protocol/ed25519.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, makeBundle, subDelegationViolations, type SignedDelegation } from '../../src/sdk/records.js';
import { buildChain, createSubDelegationUnchecked, ARGS, T0 } from '../support/fixtures.js';

const policy = { allowed_tools: ['web_search', 'file_read'], max_cost_usd: 10, pii_access: false, write_access: false };
const narrower = { allowed_tools: ['web_search'], max_cost_usd: 5, pii_access: false, write_access: false };

function verify(bundle: unknown, chainRoot: string, extra: Partial<ChainOptions> = {}): ChainDecision {
  return verifyChain(bundle, { now: T0 + 10, trustedRoots: [chainRoot], ...extra });
}

function codes(decision: ChainDecision): string[] {
  return decision.valid ? [] : decision.violations.map((v) => v.code);
}

function expectDenied(decision: ChainDecision, code: string, block: string): void {
  expect(decision.valid, JSON.stringify(decision)).toBe(false);
  if (decision.valid) return;
  expect(decision.error.code).toBe(code);
  expect(decision.error.block).toBe(block);
  expect(decision.error.message.length).toBeGreaterThan(10);
  expect(decision.error.suggestion.length).toBeGreaterThan(10);
}

/** Re-signs arbitrary payload text (possibly non-canonical) with a given header. */
function rawJws(headerText: string, payloadText: string, seed: Uint8Array): string {
  const input = `${encodeBase64url(utf8Encode(headerText))}.${encodeBase64url(utf8Encode(payloadText))}`;
  return `${input}.${encodeBase64url(signEd25519(seed, utf8Encode(input)))}`;
}

describe("verifyChain: DRS's optional trace fields", () => {
  /** A one-hop chain whose root and invocation carry `drExtra` and `invExtra`, signed as DRS's tools sign them. */
  function withExtras(drExtra: Record<string, unknown>, invExtra: Record<string, unknown>) {
    const chain = buildChain([policy]);
    const root = signJws({ ...chain.drs[0]!.payload, ...drExtra }, chain.keys[0]!.seed);
    const { invocation: inv } = chain.invoke();
    const invocation = signJws({ ...inv.payload, dr_chain: [recordHash(root)], ...invExtra }, chain.invoker.seed);
    return { bundle: { bundle_version: '4.0', invocation, receipts: [root] }, root: chain.keys[0]!.did };
  }

  it('verifies records carrying correlation_id, budget, result_hash and policy_evaluation (drs-verify accepts them)', () => {
    const { bundle, root } = withExtras(
      { correlation_id: 'workflow-42', budget: { max_tokens: 1000, max_cost_usd: 5 } },
      { correlation_id: 'workflow-42', result_hash: `sha256:${'ab'.repeat(32)}`, policy_evaluation: 'pass' },
    );
    const decision = verify(bundle, root);
    expect(decision.valid, JSON.stringify(decision)).toBe(true);
  });

  it('bounds them, and still refuses a field DRS does not define', () => {
    for (const [dr, invocation] of [
      [{ correlation_id: 'x'.repeat(257) }, {}],
      [{}, { policy_evaluation: '' }],
      [{ budget: [1] }, {}],
      [{ surprise: 1 }, {}],
      [{}, { surprise: 1 }],
    ] as const) {
      const { bundle, root } = withExtras(dr, invocation);
      expectDenied(verify(bundle, root), 'INVALID_FIELD', 'A');
    }
  });
});

describe('verifyChain: allow', () => {
  it('allows a valid 3-hop chain and reports context', () => {
    const chain = buildChain([policy, narrower, narrower]);
    const { bundle } = chain.invoke();
    const decision = verify(bundle, chain.keys[0]!.did);
    expect(decision.valid).toBe(true);
    if (!decision.valid) return;
    expect(decision.context.chain_depth).toBe(3);
    expect(decision.context.tool).toBe('web_search');
    expect(decision.context.effective_limits.max_cost_usd).toBe(5);
    expect(decision.context.binding).toBe('absent');
  });

  it('resolves a chain by reference and reuses the verified-DR cache', () => {
    const chain = buildChain([policy, narrower]);
    const { invocation } = chain.invoke();
    const byHash = new Map(chain.drs.map((d) => [d.hash, d.jws]));
    const cache = new DelegationCache();
    const opts = { resolveDelegation: (h: string) => byHash.get(h as never), cache };
    expect(verify(makeBundle(invocation, chain.drs, 'reference'), chain.keys[0]!.did, opts).valid).toBe(true);
    expect(cache.size).toBe(2);
    expect(verify(makeBundle(invocation, chain.drs, 'reference'), chain.keys[0]!.did, opts).valid).toBe(true);
  });

  it('does not cache a DR whose signature failed', () => {
    const chain = buildChain([policy]);
    const { bundle } = chain.invoke();
    const cache = new DelegationCache();
    const forged = chain.drs[0]!.jws.slice(0, -4) + (chain.drs[0]!.jws.endsWith('AAAA') ? 'BAAA' : 'AAAA');
    verify({ ...bundle, receipts: [forged] }, chain.keys[0]!.did, { cache });
    expect(cache.size).toBe(0);
  });
});

describe('verifyChain: block A (shape)', () => {
  const chain = buildChain([policy]);
  const root = chain.keys[0]!.did;
  const { bundle } = chain.invoke();

  it('MALFORMED_JWS for a two-part invocation', () => {
    expectDenied(verify({ ...bundle, invocation: 'abc.def' }, root), 'MALFORMED_JWS', 'A');
  });
  it('UNSUPPORTED_ALG for alg none', () => {
    const [, payload] = bundle.invocation.split('.');
    const header = encodeBase64url(utf8Encode('{"alg":"none","typ":"JWT"}'));
    expectDenied(verify({ ...bundle, invocation: `${header}.${payload}.` }, root), 'UNSUPPORTED_ALG', 'A');
  });
  it('NON_CANONICAL_JSON for a correctly signed payload with whitespace or duplicate keys', () => {
    const text = JSON.stringify(JSON.parse(Buffer.from(bundle.invocation.split('.')[1]!, 'base64url').toString()), null, 1);
    const spaced = rawJws('{"alg":"EdDSA","typ":"JWT"}', text, chain.invoker.seed);
    expectDenied(verify({ ...bundle, invocation: spaced }, root), 'NON_CANONICAL_JSON', 'A');
    const dup = rawJws('{"alg":"EdDSA","typ":"JWT"}', '{"a":1,"a":2}', chain.invoker.seed);
    expectDenied(verify({ ...bundle, invocation: dup }, root), 'NON_CANONICAL_JSON', 'A');
  });
  it('INVALID_FIELD for a "__proto__" key anywhere in a signed payload, which JavaScript readers drop', () => {
    const payload = JSON.parse(Buffer.from(bundle.invocation.split('.')[1]!, 'base64url').toString()) as { args: object };
    const canonical = canonicalJson(payload);
    // The args of an approved call, plus a member a reader would lose or take as the prototype.
    const text = canonical.replace('"args":{', '"args":{"__proto__":{"amount":5000},');
    expect(JSON.parse(text).args).toHaveProperty('__proto__');
    const d = verify({ ...bundle, invocation: rawJws('{"alg":"EdDSA","typ":"JWT"}', text, chain.invoker.seed) }, root);
    expectDenied(d, 'INVALID_FIELD', 'A');
    expect(JSON.stringify(d)).toContain('__proto__');
  });
  it('NUMBER_OUT_OF_RANGE for an integer beyond 2^53-1', () => {
    const big = rawJws('{"alg":"EdDSA","typ":"JWT"}', '{"iat":9007199254740993}', chain.invoker.seed);
    expectDenied(verify({ ...bundle, invocation: big }, root), 'NUMBER_OUT_OF_RANGE', 'A');
  });
  it('INVALID_FIELD for a missing or unknown payload field, naming it', () => {
    const { invocation } = chain.invoke();
    const p = { ...invocation.payload } as Record<string, unknown>;
    delete p['tool_server'];
    const d = verify({ ...bundle, invocation: signJws(p, chain.invoker.seed) }, root);
    expectDenied(d, 'INVALID_FIELD', 'A');
    expect(JSON.stringify(d)).toContain('tool_server');
    const extra = signJws({ ...invocation.payload, surprise: true }, chain.invoker.seed);
    expectDenied(verify({ ...bundle, invocation: extra }, root), 'INVALID_FIELD', 'A');
  });
  it('INVALID_FIELD for a bundle of the wrong shape', () => {
    expectDenied(verify({ bundle_version: '3.0', invocation: bundle.invocation, receipts: [] }, root), 'INVALID_FIELD', 'A');
    expectDenied(verify('not a bundle', root), 'INVALID_FIELD', 'A');
  });
  it('BUNDLE_INCOMPLETE when receipts are missing', () => {
    const two = buildChain([policy, narrower]);
    const inv = two.invoke();
    expectDenied(verify({ ...inv.bundle, receipts: [two.drs[0]!.jws] }, two.keys[0]!.did), 'BUNDLE_INCOMPLETE', 'A');
    expectDenied(verify({ ...inv.bundle, receipts: [] }, two.keys[0]!.did), 'BUNDLE_INCOMPLETE', 'A');
  });
  it('CHAIN_TOO_DEEP past 16, and past a configured lower limit', () => {
    const deep = buildChain(Array.from({ length: 17 }, () => policy));
    expect(() => deep.invoke()).toThrow(); // the SDK refuses to sign a dr_chain over 16
    const three = buildChain([policy, policy, policy]);
    expectDenied(verify(three.invoke().bundle, three.keys[0]!.did, { maxDepth: 2 }), 'CHAIN_TOO_DEEP', 'A');
    const receipts = [...deep.drs.map((d) => d.jws)];
    expectDenied(verify({ ...three.invoke().bundle, receipts }, three.keys[0]!.did), 'CHAIN_TOO_DEEP', 'A');
  });
  it('SIGNATURE_INVALID for a signature that is not 64 bytes', () => {
    const short = bundle.invocation.slice(0, bundle.invocation.lastIndexOf('.') + 1) + encodeBase64url(new Uint8Array(63));
    expectDenied(verify({ ...bundle, invocation: short }, root), 'SIGNATURE_INVALID', 'C');
  });
});

describe('verifyChain: block B (linkage)', () => {
  it('CHAIN_HASH_MISMATCH when a sub-DR points elsewhere', () => {
    const chain = buildChain([policy]);
    const bad = createSubDelegationUnchecked(
      chain.drs[0]!,
      { issuer: chain.keys[1]!, audience: chain.keys[1]!.did, policy: narrower },
      { prev_dr_hash: `sha256:${'0'.repeat(64)}` },
    );
    const inv = createInvocation({ chain: [chain.drs[0]!, bad], invoker: chain.keys[1]!, args: ARGS, toolServer: 't', iat: T0 });
    expectDenied(verify(makeBundle(inv, [chain.drs[0]!, bad]), chain.keys[0]!.did), 'CHAIN_HASH_MISMATCH', 'B');
  });
  it('ISSUER_AUDIENCE_GAP when someone other than the holder sub-delegates or invokes', () => {
    const chain = buildChain([policy]);
    const mallory = generateKeyPair();
    const stolen = createSubDelegationUnchecked(chain.drs[0]!, { issuer: mallory, audience: mallory.did, policy: narrower });
    const inv = createInvocation({ chain: [chain.drs[0]!, stolen], invoker: mallory, args: ARGS, toolServer: 't', iat: T0 });
    expectDenied(verify(makeBundle(inv, [chain.drs[0]!, stolen]), chain.keys[0]!.did), 'ISSUER_AUDIENCE_GAP', 'B');
    const direct = createInvocation({ chain: chain.drs, invoker: mallory, args: ARGS, toolServer: 't', iat: T0 });
    expectDenied(verify(makeBundle(direct, chain.drs), chain.keys[0]!.did), 'ISSUER_AUDIENCE_GAP', 'B');
  });
  it('SUBJECT_MISMATCH when sub changes along the chain', () => {
    const chain = buildChain([policy]);
    const sub = createSubDelegationUnchecked(
      chain.drs[0]!,
      { issuer: chain.keys[1]!, audience: chain.keys[1]!.did, policy: narrower },
      { sub: generateKeyPair().did },
    );
    const inv = createInvocation({ chain: [chain.drs[0]!, sub], invoker: chain.keys[1]!, args: ARGS, toolServer: 't', iat: T0 });
    expectDenied(verify(makeBundle(inv, [chain.drs[0]!, sub]), chain.keys[0]!.did), 'SUBJECT_MISMATCH', 'B');
  });
  it('DR_CHAIN_MISMATCH when receipts are reordered', () => {
    const chain = buildChain([policy, narrower]);
    const { bundle } = chain.invoke();
    const d = verify({ ...bundle, receipts: [...bundle.receipts].reverse() }, chain.keys[0]!.did);
    expect(d.valid).toBe(false);
    expect(codes(d)).toContain('DR_CHAIN_MISMATCH');
  });
  it('COMMAND_MISMATCH when the cmd names a tool the args do not call', () => {
    const chain = buildChain([{}]); // no allowed_tools: the cmd is the grant's only narrowing
    const narrowed = createSubDelegationUnchecked(
      chain.drs[0]!,
      { issuer: chain.keys[1]!, audience: chain.keys[1]!.did, policy: {} },
      { cmd: '/mcp/tools/call/web_search' },
    );
    const drs = [chain.drs[0]!, narrowed];
    const call = (args: Record<string, unknown>) =>
      verify(
        makeBundle(createInvocation({ chain: drs, invoker: chain.keys[1]!, args, toolServer: 't', iat: T0 }), drs),
        chain.keys[0]!.did,
      );
    const other = call({ ...ARGS, tool: 'delete_everything' });
    expectDenied(other, 'COMMAND_MISMATCH', 'B');
    expect(other.valid ? [] : other.violations).toContainEqual(
      expect.objectContaining({ code: 'COMMAND_MISMATCH', field: 'args.tool', required: 'web_search', actual: 'delete_everything' }),
    );
    const { tool: _omitted, ...noTool } = ARGS as Record<string, unknown>;
    expectDenied(call(noTool), 'COMMAND_MISMATCH', 'B');
    expect(call({ ...ARGS, tool: 'web_search' }).valid).toBe(true);
  });
  it('COMMAND_MISMATCH when a cmd naming a tool is narrowed further: that names another tool (names may hold /)', () => {
    const chain = buildChain([{}]); // no allowed_tools: the cmd is the grant's only narrowing
    const grant = (cmd: string) =>
      createSubDelegationUnchecked(chain.drs[0]!, { issuer: chain.keys[1]!, audience: chain.keys[1]!.did, policy: {} }, { cmd });
    const call = (drs: SignedDelegation[], cmd: string, tool: string) =>
      verify(
        makeBundle(createInvocation({ chain: drs, invoker: chain.keys[1]!, args: { ...ARGS, tool }, cmd, toolServer: 't', iat: T0 }), drs),
        chain.keys[0]!.did,
      );
    const fs = [chain.drs[0]!, grant('/mcp/tools/call/fs')];
    const deeper = call(fs, '/mcp/tools/call/fs/delete_all', 'fs/delete_all');
    expectDenied(deeper, 'COMMAND_MISMATCH', 'B');
    expect(deeper.valid ? [] : deeper.violations).toContainEqual(
      expect.objectContaining({ field: 'invocation.cmd', required: '/mcp/tools/call/fs exactly (it names one tool)' }),
    );
    expect(call(fs, '/mcp/tools/call/fs', 'fs').valid).toBe(true);
    // A namespaced tool granted by its whole name is called by it.
    const namespaced = [chain.drs[0]!, grant('/mcp/tools/call/github/delete_repo')];
    expect(call(namespaced, '/mcp/tools/call/github/delete_repo', 'github/delete_repo').valid).toBe(true);
    // Nor may a delegation below such a grant name another tool, and the SDK will not sign one.
    const below = createSubDelegationUnchecked(
      fs[1]!,
      { issuer: chain.keys[1]!, audience: chain.keys[1]!.did, policy: {} },
      { cmd: '/mcp/tools/call/fs/delete_all' },
    );
    expectDenied(call([...fs, below], '/mcp/tools/call/fs/delete_all', 'fs/delete_all'), 'COMMAND_MISMATCH', 'B');
    expect(subDelegationViolations(fs[1]!.payload, below.payload)).toContainEqual(
      expect.objectContaining({ code: 'COMMAND_MISMATCH', field: 'cmd' }),
    );
  });
  it('a cmd naming a tool covers exactly that tool, whatever the names hold (property)', () => {
    const name = fc.stringMatching(/^[A-Za-z0-9_][A-Za-z0-9_./-]{0,15}$/).filter((n) => !n.includes('//') && !n.endsWith('/'));
    fc.assert(fc.property(name, name, (a, b) => commandCovers(`/mcp/tools/call/${a}`, `/mcp/tools/call/${b}`) === (a === b)));
    // The pairs random names rarely make: one tool's name inside another's namespace.
    fc.assert(fc.property(name, name, (a, rest) => !commandCovers(`/mcp/tools/call/${a}`, `/mcp/tools/call/${a}/${rest}`)));
    fc.assert(
      fc.property(name, (a) => commandCovers('/mcp/tools/call', `/mcp/tools/call/${a}`) && commandCovers('/mcp', `/mcp/tools/call/${a}`)),
    );
  });
  it('COMMAND_MISMATCH when a child widens cmd', () => {
    const chain = buildChain([policy]);
    const sub = createSubDelegationUnchecked(
      chain.drs[0]!,
      { issuer: chain.keys[1]!, audience: chain.keys[1]!.did, policy: narrower },
      { cmd: '/admin' },
    );
    const inv = createInvocation({ chain: [chain.drs[0]!, sub], invoker: chain.keys[1]!, args: ARGS, toolServer: 't', iat: T0 });
    expectDenied(verify(makeBundle(inv, [chain.drs[0]!, sub]), chain.keys[0]!.did), 'COMMAND_MISMATCH', 'B');
  });
});

describe('verifyChain: block C (signatures, trust)', () => {
  it('SIGNATURE_INVALID for a tampered payload', () => {
    const chain = buildChain([policy]);
    const { bundle, invocation } = chain.invoke();
    const tamperedPayload = encodeBase64url(
      utf8Encode(JSON.stringify({ ...invocation.payload, args: { ...ARGS, tool: 'file_read' } }, Object.keys(invocation.payload).sort())),
    );
    const [h, , s] = bundle.invocation.split('.');
    const d = verify({ ...bundle, invocation: `${h}.${tamperedPayload}.${s}` }, chain.keys[0]!.did);
    expect(codes(d)).toContain('SIGNATURE_INVALID');
  });
  it('UNTRUSTED_ROOT when the root key is not trusted', () => {
    const chain = buildChain([policy]);
    expectDenied(verify(chain.invoke().bundle, generateKeyPair().did), 'UNTRUSTED_ROOT', 'C');
  });
  it('WEAK_KEY: the forged identity-key invocation (R = identity, S = 0) is refused for any message', () => {
    const identity = new Uint8Array(32);
    identity[0] = 1;
    const weakDid = `did:key:z${encodeBase58btc(Uint8Array.from([0xed, 0x01, ...identity]))}`;
    const chain = buildChain([policy]);
    // The root delegates to the weak key; then anyone can "sign" as it.
    const toWeak = createSubDelegationUnchecked(chain.drs[0]!, { issuer: chain.keys[1]!, audience: weakDid, policy: narrower });
    const drs = [chain.drs[0]!, toWeak];
    const payload = {
      iss: weakDid,
      sub: chain.drs[0]!.payload.sub,
      drs_v: '4.0',
      drs_type: 'invocation-receipt',
      cmd: '/mcp/tools/call',
      args: ARGS,
      dr_chain: drs.map((d) => d.hash),
      tool_server: 't',
      iat: T0,
      jti: 'inv:forged',
    };
    const signingInput = `${encodeBase64url(utf8Encode('{"alg":"EdDSA","typ":"JWT"}'))}.${encodeBase64url(utf8Encode(JSON.stringify(payload, Object.keys(payload).sort())))}`;
    const forgedSig = new Uint8Array(64);
    forgedSig.set(identity, 0); // R = identity point, S = 0
    const forged = `${signingInput}.${encodeBase64url(forgedSig)}`;
    const d = verify({ bundle_version: '4.0', invocation: forged, receipts: drs.map((x) => x.jws) }, chain.keys[0]!.did);
    expectDenied(d, 'WEAK_KEY', 'C');
  });
});

describe('verifyChain: block D (attenuation, policy)', () => {
  it('POLICY_ESCALATION when a child raises a ceiling or adds a tool, listing every escalation', () => {
    const chain = buildChain([policy, { ...policy, allowed_tools: ['web_search', 'delete_db'], max_cost_usd: 20 }]);
    const d = verify(chain.invoke().bundle, chain.keys[0]!.did);
    expectDenied(d, 'POLICY_ESCALATION', 'D');
    if (d.valid) return;
    const fields = d.violations.filter((v) => v.code === 'POLICY_ESCALATION').map((v) => v.field);
    expect(fields).toEqual(expect.arrayContaining(['policy.allowed_tools', 'policy.max_cost_usd']));
  });
  it('POLICY_ESCALATION when a child outlives its parent', () => {
    const chain = buildChain([policy]);
    const longer = createSubDelegationUnchecked(chain.drs[0]!, {
      issuer: chain.keys[1]!,
      audience: chain.keys[1]!.did,
      policy: narrower,
      exp: null,
    });
    const inv = createInvocation({ chain: [chain.drs[0]!, longer], invoker: chain.keys[1]!, args: ARGS, toolServer: 't', iat: T0 });
    const d = verify(makeBundle(inv, [chain.drs[0]!, longer]), chain.keys[0]!.did);
    expectDenied(d, 'POLICY_ESCALATION', 'D');
  });
  it('POLICY_VIOLATION lists every unmet condition across every DR', () => {
    const chain = buildChain([policy, narrower]);
    const d = verify(
      chain.invoke({ tool: 'file_read', estimated_cost_usd: 7, pii_access: false, write_access: false }).bundle,
      chain.keys[0]!.did,
    );
    expectDenied(d, 'POLICY_VIOLATION', 'D');
    if (d.valid) return;
    const where = d.violations.map((v) => `${v.dr_index}:${v.field}`).sort();
    expect(where).toEqual(['1:args.estimated_cost_usd', '1:args.tool']);
  });
  it('BINDING_MISMATCH when the body differs and binding is required', () => {
    const chain = buildChain([policy]);
    const { bundle } = chain.invoke();
    const ok = verify(bundle, chain.keys[0]!.did, { body: { ...ARGS }, requireBinding: true });
    expect(ok.valid).toBe(true);
    const bad = verify(bundle, chain.keys[0]!.did, { body: { ...ARGS, tool: 'x' }, requireBinding: true });
    expectDenied(bad, 'BINDING_MISMATCH', 'D');
    const reported = verify(bundle, chain.keys[0]!.did, { body: { ...ARGS, tool: 'x' } });
    expect(reported.valid && reported.context.binding).toBe('mismatch');
  });

  it('a BINDING_MISMATCH names the members that differ, not their values', () => {
    const chain = buildChain([policy]);
    const { bundle } = chain.invoke();
    const { tool: _tool, pii_access: _pii, ...bodyOnly } = ARGS as Record<string, unknown>;
    const bad = verify(bundle, chain.keys[0]!.did, { body: { ...bodyOnly, estimated_cost_usd: 99, page: 2 }, requireBinding: true });
    expect(bad.valid).toBe(false);
    const message = !bad.valid ? bad.violations.find((v) => v.code === 'BINDING_MISMATCH')?.message : undefined;
    expect(message).toBe(
      'The request body differs from the signed invocation args under JCS: the body lacks "pii_access", "tool"; the body has "page", which the args do not; "estimated_cost_usd" differs.',
    );
    expect(bindingDifference({ a: 1 }, [1])).toBe('the body is an array, the signed args an object');
    expect(bindingDifference({ a: 1 }, 'x')).toBe('the body is a string, the signed args an object');
  });
});

describe('verifyChain: block E (time) and F (status)', () => {
  const chain = buildChain([policy, narrower]);
  const root = chain.keys[0]!.did;
  const { bundle } = chain.invoke();
  it('RECEIPT_EXPIRED after exp, valid at exp', () => {
    expect(verify(bundle, root, { now: T0 + 3600, invocationMaxAgeSeconds: 1e6 }).valid).toBe(true);
    expectDenied(verify(bundle, root, { now: T0 + 3601, invocationMaxAgeSeconds: 1e6 }), 'RECEIPT_EXPIRED', 'E');
  });
  it('RECEIPT_NOT_YET_VALID before nbf', () => {
    expectDenied(verify(bundle, root, { now: T0 - 101, clockSkewSeconds: 1e6 }), 'RECEIPT_NOT_YET_VALID', 'E');
  });
  it('INVOCATION_STALE when too old or too far in the future', () => {
    expectDenied(verify(bundle, root, { now: T0 + 301 }), 'INVOCATION_STALE', 'E');
    expectDenied(verify(bundle, root, { now: T0 - 61 }), 'INVOCATION_STALE', 'E');
  });
  it('a missing or non-finite now is refused, never read as "no deadline" (plain JavaScript callers)', () => {
    const jwsList = chain.drs.map((d) => d.jws);
    for (const now of [undefined, Number.NaN, Number.POSITIVE_INFINITY, '1700000000', null]) {
      const opts = { now: now as unknown as number, trustedRoots: [root] };
      expect(() => verifyChain(bundle, opts), String(now)).toThrow(/options\.now must be the current time in Unix seconds/);
      expect(() => verifyDelegations(jwsList, opts), String(now)).toThrow(TypeError);
      expect(() => verifyDelegationSegment(jwsList, opts), String(now)).toThrow(TypeError);
    }
  });
  it('RECEIPT_REVOKED when any DR in the chain is revoked', () => {
    const revoked = new Set([chain.drs[0]!.hash]);
    const d = verify(bundle, root, { isRevoked: (h) => revoked.has(h) });
    expectDenied(d, 'RECEIPT_REVOKED', 'F');
    if (!d.valid) expect(d.violations[0]!.dr_index).toBe(0);
  });
});

describe('verifyDelegationSegment: records judged on their own', () => {
  it('accepts a list that starts below the root; the full-chain check would call it incomplete', () => {
    const c = buildChain([policy, narrower, narrower]);
    const below = c.drs.slice(1).map((d) => d.jws);
    expect(verifyDelegationSegment(below, { now: T0 }).valid).toBe(true);
    const full = verifyDelegations(below, { now: T0, trustedRoots: [c.keys[0]!.did] });
    expect(full.valid ? [] : full.violations.map((v) => v.code)).toContain('CHAIN_HASH_MISMATCH');
  });

  it('still checks signatures, linkage and attenuation among the records given, and nothing else', () => {
    const c = buildChain([policy, narrower]);
    const stranger = generateKeyPair();
    const forged = createSubDelegationUnchecked(c.drs[1]!, { issuer: c.keys[2]!, audience: stranger.did, policy: narrower });
    const reSigned = { ...forged, jws: signJws(forged.payload, stranger.seed) };
    const wider = createSubDelegationUnchecked(c.drs[1]!, { issuer: c.keys[2]!, audience: stranger.did, policy });
    const gap = createSubDelegationUnchecked(c.drs[1]!, { issuer: stranger, audience: stranger.did, policy: narrower });
    const codesOf = (list: string[]) => {
      const d = verifyDelegationSegment(list, { now: T0 });
      return d.valid ? [] : d.violations.map((v) => v.code);
    };
    expect(codesOf([c.drs[1]!.jws, reSigned.jws])).toEqual(['SIGNATURE_INVALID']);
    expect(codesOf([c.drs[1]!.jws, wider.jws])).toEqual(['POLICY_ESCALATION', 'POLICY_ESCALATION']);
    expect(codesOf([c.drs[1]!.jws, gap.jws])).toEqual(['ISSUER_AUDIENCE_GAP']);
    // A lone child is judged without its parent: nothing to compare it with.
    expect(codesOf([wider.jws])).toEqual([]);
  });
});
