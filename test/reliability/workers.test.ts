/**
 * Multi-core (issue 10): BATON_WORKERS=2 runs one supervisor and two service
 * processes sharing one port and one database. Both serve, and a shared
 * ceiling still holds exactly across them; a worker that dies is replaced.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type FreshDatabase } from '../setup/db.js';
import {
  auditDatabase,
  grantRoot,
  grantSub,
  killAll,
  nodeConfig,
  preSign,
  registerDelegations,
  request,
  setupTenant,
  sleep,
  startNode,
  verify,
  workerPidsOf,
  type ServiceNode,
  type Tenant,
} from './support.js';

let database: FreshDatabase | undefined;
let node: ServiceNode | undefined;
let tenant: Tenant;

beforeAll(async () => {
  database = await createDatabase();
  const cfg = nodeConfig(database.url, { pool: 4, env: { BATON_WORKERS: '2' } });
  node = await startNode('workers', cfg, { readyTimeoutMs: 60_000 });
  tenant = await setupTenant(node.url, cfg.adminKey, 'reliability-workers');
}, 90_000);

afterAll(async () => {
  await killAll([node]);
  await database?.drop();
}, 30_000);

/** The worker pids, polled until there are `expected` of them (bounded). */
async function workers(expected: number): Promise<number[]> {
  for (let i = 0; i < 100; i++) {
    const pids = workerPidsOf(node!);
    if (pids.length === expected) return pids;
    await sleep(200);
  }
  return workerPidsOf(node!);
}

describe('BATON_WORKERS=2', () => {
  it('two worker processes serve one port; a shared ceiling holds exactly across them', async () => {
    expect(await workers(2)).toHaveLength(2);
    const k = 25;
    const root = grantRoot(tenant, { max_calls: k });
    const leaves = [grantSub(root, { max_calls: k }), grantSub(root, { max_calls: k })];
    await registerDelegations(node!.url, tenant, [root.dr, ...leaves.map((l) => l.dr)]);
    const signed = preSign(leaves, 60, 'workers');
    const replies = await Promise.all(signed.map((s) => verify(node!.url, tenant, s.bundle, 30_000)));
    expect(replies.filter((r) => r.status === 200)).toHaveLength(k);
    expect(replies.filter((r) => r.status === 403 && r.body?.error?.code === 'CALLS_EXHAUSTED')).toHaveLength(60 - k);
    const audit = await auditDatabase(database!.url, tenant.id);
    expect(audit.counterMismatches).toEqual([]);
    expect(audit.counters.find((c) => c.hash === root.dr.hash)).toMatchObject({ callsUsed: k, stored: k });
  }, 60_000);

  it('a worker killed with SIGKILL is replaced, and the service keeps answering', async () => {
    const [victim] = await workers(2);
    process.kill(victim!, 'SIGKILL');
    let replaced: number[] = [];
    for (let i = 0; i < 150; i++) {
      replaced = workerPidsOf(node!);
      if (replaced.length === 2 && !replaced.includes(victim!)) break;
      await sleep(200);
    }
    expect(replaced).toHaveLength(2);
    expect(replaced).not.toContain(victim);
    for (let i = 0; i < 10; i++) expect((await request(node!.url, 'GET', '/healthz')).status).toBe(200);
  }, 60_000);
});
