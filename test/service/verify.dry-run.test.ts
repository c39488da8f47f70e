/**
 * A dry run (dry_run: true on /v1/verify) answers what the real call would,
 * without consuming anything: it never says allow where the real call then
 * refuses. Every pair below is a dry run immediately followed by the real
 * call, on real PostgreSQL, so the two see the same state.
 *
 * Also the scope of a DR's jti: unique per issuer within a tenant, so a
 * holder cannot block another issuer's DR by storing its own DR under that
 * DR's jti first.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import { setupTenant, startTestService, type CallResult, type TestService, type TestTenant } from '../support/service.js';
import { T0, TOOL_SERVER } from '../support/fixtures.js';

let svc: TestService;
let tenant: TestTenant;
/** A verify key of the tenant bound to another tool server than the invocations name. */
let boundKey: string;

let seq = 0;
const fresh = (prefix: string) => `${prefix}:${Date.now().toString(36)}-${(seq++).toString(36)}`;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc, 'dry-run');
  const k = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/api-keys`, {
    key: svc.adminKey,
    json: { scopes: ['verify'], tool_server: 'mcp://another-server' },
  });
  boundKey = k.body.key;
});
afterAll(async () => svc?.close());

function root(opts: { audience: KeyPair; policy?: Policy; jti?: string }): SignedDelegation {
  return createRootDelegation({
    issuer: tenant.root,
    audience: opts.audience.did,
    policy: opts.policy ?? {},
    iat: T0,
    nbf: T0 - 100,
    exp: T0 + 3600,
    jti: opts.jti ?? fresh('dr'),
  });
}

function sub(parent: SignedDelegation, issuer: KeyPair, audience: KeyPair, opts: { policy?: Policy; jti?: string } = {}) {
  return createSubDelegation({ parent, issuer, audience: audience.did, policy: opts.policy ?? {}, iat: T0, jti: opts.jti ?? fresh('dr') });
}

function bundleFor(chain: readonly SignedDelegation[], invoker: KeyPair, estimate = 0.1, jti = fresh('inv')) {
  const args = { tool: 'web_search', estimated_cost_usd: estimate, pii_access: false, write_access: false };
  return makeBundle(createInvocation({ chain, invoker, args, toolServer: TOOL_SERVER, iat: T0, jti }), chain);
}

async function store(drs: readonly SignedDelegation[]): Promise<CallResult> {
  return svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipts: drs.map((d) => d.jws) } });
}

const codeOf = (r: CallResult): string | undefined => r.body?.error?.code;
const outcome = (r: CallResult) => ({ status: r.status, code: codeOf(r) ?? null });

/** The dry run, then the real call with the same bundle and key; both answers. */
async function dryThenReal(bundle: object, key = tenant.keys.verify) {
  const dry = await svc.call('POST', '/v1/verify/dry-run', { key, json: { ...bundle } });
  const real = await svc.call('POST', '/v1/verify', { key, json: bundle });
  if (dry.status === 200) expect(dry.body).toMatchObject({ valid: true, dry_run: true, service_receipt: null });
  return { dry, real };
}

describe('dry run: refusals of storing the embedded records', () => {
  it('an embedded DR whose (iss, jti) a different stored DR uses: the dry run answers the 409 the real call does', async () => {
    const holder = generateKeyPair();
    const stored = root({ audience: holder });
    expect((await store([stored])).status).toBe(201);
    const invoker = generateKeyPair();
    const clash = root({ audience: invoker, jti: stored.payload.jti }); // same issuer, same jti, another record
    const { dry, real } = await dryThenReal(bundleFor([clash], invoker));
    expect(outcome(real)).toEqual({ status: 409, code: 'CONFLICT' });
    expect(outcome(dry)).toEqual(outcome(real));
  });

  it('an embedded DR under a stored DR revoked since this node cached it: refused 403 (block F) and recorded, as the dry run says', async () => {
    const holder = generateKeyPair();
    const top = root({ audience: holder });
    expect((await store([top])).status).toBe(201);
    // A real call through the root puts it in this node's cache, as active.
    const first = generateKeyPair();
    expect(
      (await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundleFor([top, sub(top, holder, first)], first) })).status,
    ).toBe(200);
    const revoked = await svc.call('POST', `/v1/delegations/${top.hash}/revoke`, {
      key: tenant.keys.issue,
      json: { confirm: true, reason: 'stale cache test' },
    });
    expect(revoked.status).toBe(200);
    // A chain the node has never seen under it: storing it finds the root revoked.
    const invoker = generateKeyPair();
    const jti = fresh('inv');
    const bundle = bundleFor([top, sub(top, holder, invoker)], invoker, 0.1, jti);
    const real = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
    expect(outcome(real)).toEqual({ status: 403, code: 'RECEIPT_REVOKED' });
    expect(real.body).toMatchObject({ valid: false, error: { block: 'F' }, violations: [{ code: 'RECEIPT_REVOKED', dr_hash: top.hash }] });
    // Recorded as a denial, with its service receipt, as every refused verify is.
    const [denied] = await svc.store.query(
      `select count(*)::int as n from denials d join receipts r on r.subject = d.jti and r.kind = 'invocation.denied' where d.jti = $1`,
      [jti],
    );
    expect(Number(denied!['n'])).toBe(1);
    const dry = await svc.call('POST', '/v1/verify/dry-run', { key: tenant.keys.verify, json: { ...bundle } });
    expect(outcome(dry)).toEqual(outcome(real));
  });

  it('an embedded DR under a root no longer trusted since this node cached it: refused 403 UNTRUSTED_ROOT, as the dry run says', async () => {
    const other = await setupTenant(svc, 'dry-run-roots');
    const holder = generateKeyPair();
    const top = createRootDelegation({ issuer: other.root, audience: holder.did, policy: {}, iat: T0, nbf: T0 - 100, exp: T0 + 3600 });
    const call = (json: object, query = '') => svc.call('POST', `/v1/verify${query}`, { key: other.keys.verify, json });
    expect((await svc.call('POST', '/v1/delegations', { key: other.keys.issue, json: { receipts: [top.jws] } })).status).toBe(201);
    const first = generateKeyPair();
    expect((await call(bundleFor([top, sub(top, holder, first)], first))).status).toBe(200); // the roots are cached now
    const removed = await svc.call('DELETE', `/v1/admin/tenants/${other.id}/roots/${other.root.did}`, { key: svc.adminKey });
    expect(removed.status).toBeLessThan(300);
    const invoker = generateKeyPair();
    const bundle = bundleFor([top, sub(top, holder, invoker)], invoker);
    const real = await call(bundle);
    expect(outcome(real)).toEqual({ status: 403, code: 'UNTRUSTED_ROOT' });
    expect(outcome(await call(bundle, '/dry-run'))).toEqual(outcome(real));
  });

  it('two embedded DRs of one issuer under one jti: the dry run answers the 409 the real call does', async () => {
    // The root holder delegates to itself first, so the chain has the same issuer twice.
    const self = root({ audience: tenant.root });
    const invoker = generateKeyPair();
    const again = sub(self, tenant.root, invoker, { jti: self.payload.jti });
    const { dry, real } = await dryThenReal(bundleFor([self, again], invoker));
    expect(outcome(real)).toEqual({ status: 409, code: 'CONFLICT' });
    expect(outcome(dry)).toEqual(outcome(real));
  });
});

describe('DR jti is unique per issuer, not per tenant', () => {
  it('a sibling holder storing its own DR under another issuer’s unstored jti does not block that DR', async () => {
    const alice = generateKeyPair();
    const mallory = generateKeyPair();
    const aliceRoot = root({ audience: alice });
    const malloryRoot = root({ audience: mallory });
    expect((await store([aliceRoot])).status).toBe(201);
    expect((await store([malloryRoot])).status).toBe(201);
    // Alice signs a DR for Bob; Bob will present it embedded, so it is not stored yet.
    const bob = generateKeyPair();
    const forBob = sub(aliceRoot, alice, bob);
    // Mallory learns its jti and stores a DR of her own under it first.
    const squat = sub(malloryRoot, mallory, generateKeyPair(), { jti: forBob.payload.jti });
    expect((await store([squat])).status).toBe(201);
    // Bob's DR is still usable: its issuer never used that jti.
    const { dry, real } = await dryThenReal(bundleFor([aliceRoot, forBob], bob));
    expect(outcome(real)).toEqual({ status: 200, code: null });
    expect(outcome(dry)).toEqual(outcome(real));
    // And the same issuer still cannot reuse its own jti for another record.
    const reuse = sub(aliceRoot, alice, generateKeyPair(), { jti: forBob.payload.jti });
    const refused = await store([reuse]);
    expect(outcome(refused)).toEqual({ status: 409, code: 'CONFLICT' });
    expect(refused.body.error.details).toMatchObject({ iss: alice.did, jti: forBob.payload.jti, hash: reuse.hash });
  });
});

// ------------------------------------------------------------------ property

type Clash = 'none' | 'same-issuer' | 'other-issuer' | 'twice-in-chain';
type Step = 'fresh' | 'replay' | 'revoke' | 'wrong-server' | 'big-estimate';

interface Scenario {
  readonly limits: readonly { readonly maxCalls?: number; readonly maxSpend?: number }[];
  /** How many DRs, root first, are stored before the first verify; the others come embedded. */
  readonly storedPrefix: number;
  readonly clash: Clash;
  readonly steps: readonly Step[];
}

/** Policies that narrow along the chain (a wider child is refused alike by both, which proves little). */
function policiesOf(limits: Scenario['limits']): Policy[] {
  let calls: number | undefined;
  let spend: number | undefined;
  return limits.map((l) => {
    calls = calls === undefined ? l.maxCalls : Math.min(calls, l.maxCalls ?? calls);
    spend = spend === undefined ? l.maxSpend : Math.min(spend, l.maxSpend ?? spend);
    return { ...(calls !== undefined ? { max_calls: calls } : {}), ...(spend !== undefined ? { max_spend_usd: spend } : {}) };
  });
}

/** Builds the chain and the stored state of a scenario; returns the chain and its invoker. */
async function arrange(s: Scenario): Promise<{ chain: SignedDelegation[]; invoker: KeyPair }> {
  const policies = policiesOf(s.limits);
  const depth = policies.length;
  const twice = s.clash === 'twice-in-chain' && depth >= 2;
  const keys: KeyPair[] = [tenant.root, ...policies.map(() => generateKeyPair())];
  if (twice) keys[1] = tenant.root;
  const chain: SignedDelegation[] = [];
  policies.forEach((policy, i) => {
    const jti = twice && i === 1 ? chain[0]!.payload.jti : fresh('dr');
    chain.push(i === 0 ? root({ audience: keys[1]!, policy, jti }) : sub(chain[i - 1]!, keys[i]!, keys[i + 1]!, { policy, jti }));
  });
  const storedCount = twice ? 0 : Math.min(s.storedPrefix, depth);
  if (storedCount > 0) expect((await store(chain.slice(0, storedCount))).status).toBe(201);

  const first = chain[storedCount]; // the first embedded-only DR
  if (first && (s.clash === 'same-issuer' || s.clash === 'other-issuer')) {
    const jti = first.payload.jti;
    let squat: SignedDelegation[];
    if (s.clash === 'same-issuer') {
      // Its own issuer signed another record under the jti.
      squat =
        storedCount === 0
          ? [root({ audience: generateKeyPair(), jti })]
          : [sub(chain[storedCount - 1]!, keys[storedCount]!, generateKeyPair(), { jti, policy: first.payload.policy })];
    } else if (storedCount === 0) {
      const holder = generateKeyPair();
      const other = root({ audience: holder });
      squat = [other, sub(other, holder, generateKeyPair(), { jti })];
    } else {
      squat = [root({ audience: generateKeyPair(), jti })]; // issued by the root, not by the first embedded DR's issuer
    }
    expect((await store(squat)).status).toBe(201);
  }
  return { chain, invoker: keys[depth]! };
}

const scenario: fc.Arbitrary<Scenario> = fc.record({
  limits: fc.array(fc.record({ maxCalls: fc.constantFrom(0, 1, 2, 5), maxSpend: fc.constantFrom(0.3, 1) }, { requiredKeys: [] }), {
    minLength: 1,
    maxLength: 3,
  }),
  storedPrefix: fc.integer({ min: 0, max: 3 }),
  clash: fc.constantFrom<Clash>('none', 'same-issuer', 'other-issuer', 'twice-in-chain'),
  steps: fc.array(fc.constantFrom<Step>('fresh', 'replay', 'revoke', 'wrong-server', 'big-estimate'), { minLength: 1, maxLength: 5 }),
});

/** One scenario per way the real call can refuse, so that each is always covered. */
const EXAMPLES: Scenario[] = [
  { limits: [{}, {}], storedPrefix: 1, clash: 'same-issuer', steps: ['fresh'] }, // embedded DR's jti taken: 409
  { limits: [{}, {}], storedPrefix: 0, clash: 'twice-in-chain', steps: ['fresh'] }, // same (iss, jti) twice: 409
  { limits: [{}, {}], storedPrefix: 0, clash: 'other-issuer', steps: ['fresh'] }, // another issuer's jti: no conflict
  { limits: [{}], storedPrefix: 0, clash: 'none', steps: ['fresh', 'replay'] }, // REPLAY_DETECTED
  { limits: [{ maxCalls: 2 }, { maxCalls: 1 }], storedPrefix: 0, clash: 'none', steps: ['fresh', 'fresh'] }, // CALLS_EXHAUSTED
  { limits: [{ maxCalls: 0 }], storedPrefix: 0, clash: 'none', steps: ['fresh'] }, // exhausted before any call, unstored
  { limits: [{ maxSpend: 1 }, { maxSpend: 0.3 }], storedPrefix: 1, clash: 'none', steps: ['fresh', 'big-estimate'] }, // BUDGET_EXHAUSTED
  { limits: [{}, {}], storedPrefix: 2, clash: 'none', steps: ['revoke', 'fresh'] }, // RECEIPT_REVOKED
  { limits: [{}, {}], storedPrefix: 0, clash: 'none', steps: ['fresh', 'revoke', 'fresh'] },
  { limits: [{}], storedPrefix: 0, clash: 'none', steps: ['wrong-server'] }, // TOOL_SERVER_MISMATCH
];

describe('dry run agrees with the real call', () => {
  it('over random chains, stored states and call sequences: same status and code, dry run first', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async (s) => {
        const { chain, invoker } = await arrange(s);
        let last: object | undefined;
        for (const [i, step] of s.steps.entries()) {
          if (step === 'revoke') {
            const target = chain[i % chain.length]!;
            await svc.call('POST', `/v1/delegations/${target.hash}/revoke`, {
              key: tenant.keys.issue,
              json: { confirm: true, reason: 'dry-run agreement test' },
            }); // 404 while it is not stored: nothing to revoke yet
            continue;
          }
          const bundle = step === 'replay' && last ? last : bundleFor(chain, invoker, step === 'big-estimate' ? 0.5 : 0.1);
          last = bundle;
          const { dry, real } = await dryThenReal(bundle, step === 'wrong-server' ? boundKey : tenant.keys.verify);
          const why = `step ${i} (${step}) of ${JSON.stringify(s)}: real answered ${JSON.stringify(real.body)}`;
          // A dry run reads the chain fresh while the real call may first judge blocks A-F on
          // cached DRs (its statement re-checks revocation before anything is counted). Both
          // refuse then, but a revoked DR may be named by one and another refusal by the other.
          const revokedEarlier = s.steps.slice(0, i).includes('revoke');
          const codes = [outcome(dry).code, outcome(real).code];
          if (revokedEarlier && dry.status === 403 && real.status === 403 && codes.includes('RECEIPT_REVOKED')) continue;
          expect(outcome(dry), why).toEqual(outcome(real));
        }
      }),
      { numRuns: 25, examples: EXAMPLES.map((e) => [e]) },
    );
  }, 120_000);
});
