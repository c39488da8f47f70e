/**
 * A block-G refusal in one statement: once a node has seen a DR's max_calls
 * used up (calls_used never goes down), the next verify through it signs the
 * refusal's receipt in advance and the one statement both decides and stores
 * the refusal. The prediction never decides: a chain wrongly predicted
 * exhausted is still allowed, and counted once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import { hotPathCacheOf } from '../../src/service/hot-cache.js';
import { verifyBatcherOf } from '../../src/store/verify-batch.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { T0, ARGS } from '../support/fixtures.js';

let svc: TestService;
let tenant: TestTenant;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

async function counted(maxCalls: number) {
  const agent = generateKeyPair();
  const root = createRootDelegation({
    issuer: tenant.root,
    audience: agent.did,
    policy: { allowed_tools: ['web_search'], max_calls: maxCalls },
    iat: T0,
    nbf: T0 - 10,
  });
  expect((await svc.call('POST', '/v1/delegations', { json: { receipt: root.jws } })).status).toBe(201);
  return { agent, root };
}

/** Verifies one new invocation; returns the answer and how many statements it cost. */
async function verifyCounting(agent: ReturnType<typeof generateKeyPair>, root: SignedDelegation) {
  const inv = createInvocation({ chain: [root], invoker: agent, args: ARGS, toolServer: 'mcp://t', iat: T0 });
  const before = verifyBatcherOf(svc.store.query).stats().batches;
  const res = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: makeBundle(inv, [root], 'reference') });
  return { res, jti: inv.payload.jti, statements: verifyBatcherOf(svc.store.query).stats().batches - before };
}

const denialOf = async (jti: string) =>
  (await svc.store.query('select code, block, violations from denials where jti = $1', [jti])).map((r) => ({
    code: r['code'],
    block: r['block'],
    violations: typeof r['violations'] === 'string' ? JSON.parse(r['violations']) : r['violations'],
  }));
const deniedReceipts = async (jti: string) =>
  (await svc.store.query("select count(*)::int as n from receipts where kind = 'invocation.denied' and subject = $1", [jti]))[0]!['n'];

describe('block-G refusal in one statement', () => {
  it('after a node has seen max_calls used up, the next refusal is decided and stored by one statement', async () => {
    const { agent, root } = await counted(1);
    const allowed = await verifyCounting(agent, root);
    expect([allowed.res.status, allowed.statements]).toEqual([200, 1]);
    const learnt = await verifyCounting(agent, root); // not predicted yet: decided, then stored
    expect([learnt.res.status, learnt.res.body.error.code, learnt.statements]).toEqual([403, 'CALLS_EXHAUSTED', 2]);
    const predicted = await verifyCounting(agent, root);
    expect([predicted.res.status, predicted.res.body.error.code, predicted.statements]).toEqual([403, 'CALLS_EXHAUSTED', 1]);

    // The same answer and the same stored refusal either way.
    expect(predicted.res.body.violations).toEqual(learnt.res.body.violations);
    expect(predicted.res.body.violations[0]).toMatchObject({ code: 'CALLS_EXHAUSTED', dr_hash: root.hash, actual: 1 });
    expect(await denialOf(predicted.jti)).toEqual([{ code: 'CALLS_EXHAUSTED', block: 'G', violations: predicted.res.body.violations }]);
    expect(await denialOf(learnt.jti)).toEqual([{ code: 'CALLS_EXHAUSTED', block: 'G', violations: learnt.res.body.violations }]);
    expect([await deniedReceipts(predicted.jti), await deniedReceipts(learnt.jti)]).toEqual([1, 1]);
    const [row] = await svc.store.query('select calls_used from delegations where hash = $1', [root.hash]);
    expect(Number(row!['calls_used'])).toBe(1);
  });

  it('a retry through a chain predicted exhausted answers with the original allow and its service receipt', async () => {
    // The crash suite's case: an allow whose answer was lost, re-sent after the node has seen the
    // ceiling used up. The node signs a refusal, the statement finds the jti already allowed.
    const { agent, root } = await counted(1);
    const inv = createInvocation({ chain: [root], invoker: agent, args: ARGS, toolServer: 'mcp://t', iat: T0 });
    const bundle = makeBundle(inv, [root], 'reference');
    const first = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
    expect([first.status, first.body.retry]).toEqual([200, false]);
    const learnt = await verifyCounting(agent, root);
    expect(learnt.res.body.error.code).toBe('CALLS_EXHAUSTED');
    expect(hotPathCacheOf(svc.deps).isExhausted(tenant.id, root.hash)).toBe(true);

    const again = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
    expect([again.status, again.body.retry, again.body.dry_run]).toEqual([200, true, false]);
    expect(again.body.service_receipt).toEqual(first.body.service_receipt);
    expect(await denialOf(inv.payload.jti)).toEqual([]);
    const [row] = await svc.store.query('select calls_used from delegations where hash = $1', [root.hash]);
    expect(Number(row!['calls_used'])).toBe(1);
  });

  it('a wrong prediction never decides: the invocation is allowed, counted once, and no refusal is stored', async () => {
    const { agent, root } = await counted(3);
    hotPathCacheOf(svc.deps).markExhausted(tenant.id, root.hash);
    const v = await verifyCounting(agent, root);
    expect([v.res.status, v.res.body.retry, v.statements]).toEqual([200, false, 2]);
    expect(await denialOf(v.jti)).toEqual([]);
    expect(await deniedReceipts(v.jti)).toBe(0);
    const [row] = await svc.store.query('select calls_used from delegations where hash = $1', [root.hash]);
    expect(Number(row!['calls_used'])).toBe(1);
  });
});
