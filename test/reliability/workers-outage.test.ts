/**
 * BATON_WORKERS with a database outage, on a PostgreSQL cluster of its own
 * (it is stopped here). A worker that crashes while PostgreSQL is down gets a
 * replacement that cannot start (no database to migrate against). That must
 * not stop the service: the supervisor tries again with a growing pause, and
 * once PostgreSQL is back the service answers with two workers again. Before,
 * the supervisor took the failed replacement for a failed start, stopped the
 * healthy worker and exited: nothing listened once the database returned.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PgCluster } from '../../bench/lib/pg-cluster.js';
import {
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
  startOwnCluster,
  verify,
  workerPidsOf,
  type ServiceNode,
  type Tenant,
} from './support.js';

let cluster: PgCluster | undefined;
let node: ServiceNode | undefined;
let tenant: Tenant;

beforeAll(async () => {
  cluster = await startOwnCluster();
  const url = await cluster.createDatabase();
  const cfg = nodeConfig(url, { pool: 4, env: { BATON_WORKERS: '2' } });
  node = await startNode('workers-outage', cfg, { readyTimeoutMs: 60_000 });
  tenant = await setupTenant(node.url, cfg.adminKey, 'reliability-workers-outage');
}, 120_000);

afterAll(async () => {
  await killAll([node]);
  await cluster?.destroy();
}, 60_000);

async function until(what: string, check: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await sleep(200);
  }
  throw new Error(`not within ${ms} ms: ${what}\n${node!.output(40)}`);
}

describe('BATON_WORKERS=2 during a database outage', () => {
  it('a worker crashing while PostgreSQL is down is replaced once it is back; the service never stops', async () => {
    // Both listening (the supervisor's line), not only forked: a first worker still starting when
    // the database stops fails its start, which stops the service by design.
    await until('two workers listening', () => workerPidsOf(node!).length === 2 && /Baton is listening on/.test(node!.output(400)), 30_000);
    await cluster!.stop('immediate');
    try {
      const [victim] = workerPidsOf(node!);
      process.kill(victim!, 'SIGKILL');
      await until('a replacement failed to start', () => /a replacement worker failed to start/.test(node!.output(200)), 30_000);
      // The supervisor and the surviving worker are still there, answering what needs no database.
      await sleep(1_500);
      expect(node!.alive(), node!.output(40)).toBe(true);
      expect((await request(node!.url, 'GET', '/healthz')).status).toBe(200);
    } finally {
      await cluster!.start();
    }
    await until('two workers again', () => workerPidsOf(node!).length === 2, 60_000);
    await until('ready', async () => (await request(node!.url, 'GET', '/readyz')).status === 200, 30_000);
    const root = grantRoot(tenant, { max_calls: 5 });
    const leaf = grantSub(root, { max_calls: 5 });
    await registerDelegations(node!.url, tenant, [root.dr, leaf.dr]);
    const [call] = preSign([leaf], 1, 'after-outage');
    expect((await verify(node!.url, tenant, call!.bundle, 30_000)).status).toBe(200);
  }, 180_000);
});
