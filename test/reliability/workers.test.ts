/**
 * Multi-core (issue 10): BATON_WORKERS=2 runs one supervisor and two service
 * processes sharing one port and one database. Both serve, and a shared
 * ceiling still holds exactly across them; a worker that dies is replaced.
 */
import { get as httpGet } from 'node:http';
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
let adminKey: string;

beforeAll(async () => {
  database = await createDatabase();
  const cfg = nodeConfig(database.url, { pool: 4, env: { BATON_WORKERS: '2' } });
  node = await startNode('workers', cfg, { readyTimeoutMs: 60_000 });
  adminKey = cfg.adminKey;
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
    // The supervisor says which worker it replaced.
    const exited = node!
      .output(400)
      .split('\n')
      .filter((l) => l.includes('"msg":"worker exited; starting another"'))
      .map((l) => JSON.parse(l) as { pid?: number; worker?: number; signal?: string });
    expect(exited).toContainEqual(expect.objectContaining({ pid: victim, signal: 'SIGKILL', worker: expect.any(Number) }));
    for (let i = 0; i < 10; i++) expect((await request(node!.url, 'GET', '/healthz')).status).toBe(200);
  }, 60_000);

  it("/metrics shows every worker's counts in every scrape", async () => {
    expect(await workers(2)).toHaveLength(2);
    const healthzCount = async () => {
      const r = await get('/metrics', adminKey);
      expect(r.status).toBe(200);
      expect(r.text).toMatch(/^baton_workers_listening 2$/m);
      return Number(/^baton_http_requests_total\{method="GET",route="\/healthz",status="200"\} (\d+)$/m.exec(r.text)?.[1] ?? 0);
    };
    // A worker replaced by the test before may still be starting: it is summed once it listens.
    for (let i = 0; i < 75 && !/^baton_workers_listening 2$/m.test((await get('/metrics', adminKey)).text); i++) await sleep(200);
    const before = await healthzCount();
    for (let i = 0; i < 20; i++) expect((await get('/healthz')).status).toBe(200);
    const scrapes: number[] = [];
    for (let i = 0; i < 4; i++) scrapes.push(await healthzCount());
    expect(scrapes).toEqual([before + 20, before + 20, before + 20, before + 20]);
  }, 60_000);

  it('a scrape fails, rather than show a partial sum, while a listening worker does not answer', async () => {
    const pids = await workers(2);
    expect(pids).toHaveLength(2);
    for (let i = 0; i < 75 && !/^baton_workers_listening 2$/m.test((await scrape()).text); i++) await sleep(200);
    process.kill(pids[0]!, 'SIGSTOP');
    let both: Promise<unknown> | undefined;
    try {
      // Two new connections at once: the cluster hands them out in turn, so one reaches the
      // worker that still runs. It asks the supervisor, which waits for the stopped one in vain.
      const first = scrape();
      const second = scrape();
      both = Promise.allSettled([first, second]);
      const answered = await Promise.race([first, second, sleep(20_000).then(() => undefined)]);
      expect(answered, 'a scrape on the running worker answers within the supervisor wait').toBeDefined();
      expect(answered!.status).toBe(500);
      expect(answered!.text).not.toMatch(/^baton_http_requests_total/m);
    } finally {
      process.kill(pids[0]!, 'SIGCONT');
    }
    // Resumed, the worker serves the connection it was handed, and scrapes sum both workers again.
    await both;
    let again = await scrape();
    for (let i = 0; i < 20 && again.status !== 200; i++) again = await scrape();
    expect(again.status).toBe(200);
    expect(again.text).toMatch(/^baton_workers_listening 2$/m);
    expect(workerPidsOf(node!)).toEqual(expect.arrayContaining(pids));
  }, 60_000);
});

describe('BATON_WORKERS=2: a replaced worker', () => {
  it("takes none of its counts out of /metrics: the node's counters never go down", async () => {
    const pids = await workers(2);
    expect(pids).toHaveLength(2);
    const listeningBoth = async () => {
      for (let i = 0; i < 100; i++) {
        const r = await scrape();
        if (r.status === 200 && /^baton_workers_listening 2$/m.test(r.text)) return r.text;
        await sleep(200);
      }
      throw new Error('the node did not list two listening workers again');
    };
    const count = (text: string, series: RegExp) => Number(series.exec(text)?.[1] ?? NaN);
    const healthz = /^baton_http_requests_total\{method="GET",route="\/healthz",status="200"\} (\d+)$/m;
    const durations = /^baton_http_request_duration_seconds_count\{method="GET",route="\/healthz"\} (\d+)$/m;
    await listeningBoth();
    // Each new connection goes to the next worker: both count some of these.
    for (let i = 0; i < 20; i++) expect((await get('/healthz')).status).toBe(200);
    const before = await listeningBoth();
    process.kill(pids[0]!, 'SIGKILL');
    for (let i = 0; i < 150 && (workerPidsOf(node!).length !== 2 || workerPidsOf(node!).includes(pids[0]!)); i++) await sleep(200);
    const after = await listeningBoth();
    // Every scrape answered on a surviving or a new worker; the sum still holds the killed one's counts.
    expect(count(before, healthz)).toBeGreaterThanOrEqual(20);
    expect(count(after, healthz)).toBeGreaterThanOrEqual(count(before, healthz));
    expect(count(after, durations)).toBeGreaterThanOrEqual(count(before, durations));
    // What was a gauge of the killed worker is not kept: the node's listening workers are the two alive.
    expect(after).toMatch(/^baton_workers_listening 2$/m);
  }, 90_000);
});

/** A GET on a new connection, so the cluster hands each to the next worker in turn. */
function get(path: string, key?: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpGet(new URL(path, node!.url), { agent: false, headers: key ? { authorization: `Bearer ${key}` } : {} }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
  });
}

/** GET /metrics with the admin key, on a new connection. */
const scrape = () => get('/metrics', adminKey);
