/**
 * GET /v1/delegations/{hash}/tree on real PostgreSQL: the answer is bounded by its policies' bytes
 * as well as by its records, since any holder of a delegation may store records with large policies
 * under it without a key. A truncated answer is still a tree: a parent always comes with its children.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getDelegationTreeRoute } from '../../src/api/delegations.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, type SignedDelegation } from '../../src/sdk/records.js';
import { TREE_POLICY_BYTES, TREE_RECORDS } from '../../src/service/delegations.handlers.js';
import { delegations, type Delegation, type NewDelegation } from '../../src/store/schema/index.js';
import { CMD, fakeHash, T0 } from '../support/fixtures.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';

let svc: TestService;
let tenant: TestTenant;

beforeAll(async () => {
  svc = await startTestService();
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

interface Node {
  hash: string;
  depth: number;
  parent_hash: string | null;
  policy: Record<string, unknown>;
  children: Node[];
}

/** Every node of the answer, parents first; each child names its parent and sits one level below it. */
function nodesOf(tree: Node): Node[] {
  const out: Node[] = [];
  const walk = (n: Node) => {
    out.push(n);
    for (const c of n.children) {
      expect(c.parent_hash).toBe(n.hash);
      expect(c.depth).toBe(n.depth + 1);
      walk(c);
    }
  };
  walk(tree);
  return out;
}

/** A policy of about 48 KB, as a keyless agent may sign one: 256 long tool names. */
function largePolicy(seed: number): Record<string, unknown> {
  return { allowed_tools: Array.from({ length: 256 }, (_, i) => `tool_${seed}_${i}_${'x'.repeat(180)}`), max_calls: 5 };
}

/** A stored root of the tenant, through the API. */
async function storedRoot(): Promise<SignedDelegation> {
  const root = createRootDelegation({
    issuer: tenant.root,
    audience: generateKeyPair().did,
    policy: { allowed_tools: ['web_search'] },
    iat: T0,
    nbf: T0 - 10,
    exp: T0 + 3600,
  });
  const r = await svc.call('POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipt: root.jws } });
  expect(r.status).toBe(201);
  return root;
}

/** Rows under `parent`, inserted in one statement (faster than signing and submitting each). */
async function storeChildren(
  parent: Pick<Delegation, 'hash' | 'rootHash' | 'depth' | 'ancestors'>,
  policies: Record<string, unknown>[],
): Promise<Delegation[]> {
  const rows: NewDelegation[] = policies.map((policy, i) => ({
    tenantId: tenant.id,
    hash: fakeHash(),
    // Sized as a signed record holding this policy is (the tree measures records by their JWS).
    jws: `h.${Buffer.from(JSON.stringify({ policy })).toString('base64url')}.s`,
    jti: `dr:${parent.hash.slice(7, 19)}-${i}`,
    iss: generateKeyPair().did,
    sub: tenant.root.did,
    aud: generateKeyPair().did,
    cmd: CMD,
    policy,
    nbf: T0 - 10,
    exp: T0 + 3600,
    iat: T0,
    parentHash: parent.hash,
    rootHash: parent.rootHash,
    depth: parent.depth + 1,
    ancestors: [...parent.ancestors, parent.hash],
    maxCalls: 5,
  }));
  return svc.store.db.insert(delegations).values(rows).returning();
}

const rootRow = (root: SignedDelegation) => ({ hash: root.hash, rootHash: root.hash, depth: 0, ancestors: [] as string[] });

describe('GET /v1/delegations/{hash}/tree bounds', () => {
  it('stops at about TREE_POLICY_BYTES of policies, truncated, and is still a tree', async () => {
    const root = await storedRoot();
    const level1 = await storeChildren(
      rootRow(root),
      Array.from({ length: 40 }, (_, i) => largePolicy(i)),
    );
    for (const [i, child] of level1.entries()) await storeChildren(child, [largePolicy(100 + 2 * i), largePolicy(101 + 2 * i)]);
    // 121 records, about 5.8 MB of policies: above the budget, below the record bound.
    const r = await svc.call('GET', `/v1/delegations/${root.hash}/tree`, { key: tenant.keys.verify });
    expect(r.status).toBe(200);
    expect(r.body.truncated).toBe(true);
    const nodes = nodesOf(r.body.tree);
    // Every record counted is in the tree: none was left without its parent.
    expect(nodes).toHaveLength(r.body.count);
    const policyBytes = nodes.reduce((n, node) => n + Buffer.byteLength(JSON.stringify(node.policy)), 0);
    expect(policyBytes).toBeLessThanOrEqual(TREE_POLICY_BYTES);
    // Most of the budget is used: each record is measured by its JWS, about 4/3 of its policy.
    expect(policyBytes).toBeGreaterThan(TREE_POLICY_BYTES * 0.6);
    expect(Buffer.byteLength(JSON.stringify(r.body))).toBeLessThan(TREE_POLICY_BYTES + nodes.length * 1024);
    // Shallowest first: every record one level down is in before any two levels down.
    expect(nodes.filter((n) => n.depth === 1)).toHaveLength(40);
    expect(r.body.tree.children).toHaveLength(40);
    // The rest is read where the answer says: the subtree of a child.
    const partial = r.body.tree.children.find((c: Node) => c.children.length < 2) as Node;
    const below = await svc.call('GET', `/v1/delegations/${partial.hash}/tree`, { key: tenant.keys.verify });
    expect(below.body).toMatchObject({ count: 3, truncated: false });
  });

  it('answers a small subtree whole, as before', async () => {
    const root = await storedRoot();
    const level1 = await storeChildren(rootRow(root), [{ max_calls: 3 }, { allowed_tools: ['web_search'] }, {}]);
    const level2 = await storeChildren(level1[0]!, [{ max_calls: 1 }, { max_calls: 2 }]);
    const r = await svc.call('GET', `/v1/delegations/${root.hash}/tree`, { key: tenant.keys.verify });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ count: 6, truncated: false });
    const nodes = nodesOf(r.body.tree);
    expect(nodes.map((n) => n.hash).sort()).toEqual([root.hash, ...level1.map((d) => d.hash), ...level2.map((d) => d.hash)].sort());
    const first = r.body.tree.children.find((c: Node) => c.hash === level1[0]!.hash);
    expect(first.policy).toEqual({ max_calls: 3 });
    expect(first.children.map((c: Node) => c.hash).sort()).toEqual(level2.map((d) => d.hash).sort());
    expect(first).toMatchObject({ calls_used: 0, max_calls: 5, status: 'active' });
    expect(first).not.toHaveProperty('jws');
  });

  it('stops at TREE_RECORDS records, truncated, and is still a tree', async () => {
    const root = await storedRoot();
    const level1 = await storeChildren(
      rootRow(root),
      Array.from({ length: 10 }, () => ({})),
    );
    await storeChildren(
      level1[3]!,
      Array.from({ length: TREE_RECORDS }, () => ({})),
    );
    const r = await svc.call('GET', `/v1/delegations/${root.hash}/tree`, { key: tenant.keys.verify });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ count: TREE_RECORDS, truncated: true });
    expect(nodesOf(r.body.tree)).toHaveLength(TREE_RECORDS);
    expect(r.body.tree.children).toHaveLength(10);
  });

  it('the route text states both bounds as the service applies them', () => {
    expect(getDelegationTreeRoute.description).toContain(
      `At most ${TREE_RECORDS} records and ${TREE_POLICY_BYTES / (1024 * 1024)} MiB of records, each measured by its signed JWS`,
    );
  });

  it('answers the record alone when its own policy is above the budget', async () => {
    // Not a record anyone can submit (a JWS is at most 64 KiB): the bound never drops the record asked for.
    const root = await storedRoot();
    const [big] = await storeChildren(rootRow(root), [{ allowed_tools: ['x'.repeat(64)], huge: 'y'.repeat(TREE_POLICY_BYTES) }]);
    await storeChildren(big!, [{}]);
    const r = await svc.call('GET', `/v1/delegations/${big!.hash}/tree`, { key: tenant.keys.verify });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ count: 1, truncated: true });
    expect(r.body.tree.children).toEqual([]);
  });
});
