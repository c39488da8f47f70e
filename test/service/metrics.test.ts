// GET /metrics follows Prometheus conventions: base units, HELP and TYPE for
// every family, _total counters, process/runtime/pool metrics and build info.
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { silentLogger } from '../../src/service/log.js';
import { countPending } from '../../src/store/log.js';
import { verifyBatcherOf } from '../../src/store/verify-batch.js';
import { scratchFolders } from '../support/scratch.js';
import { setupTenant, startTestService, storeTwoLeaves, verifyInvocation, type TestService } from '../support/service.js';

const execFileAsync = promisify(execFile);
const scratch = scratchFolders('baton-cluster-');
let svc: TestService;
let text: string;
const METRICS_TOKEN = `metrics-${'t'.repeat(24)}`;
const adminAuth = () => ({ authorization: `Bearer ${svc.adminKey}` });

/** Metric families as exposed: name → { type, help, samples }. */
function families(exposition: string): Map<string, { type?: string; help?: string; samples: string[] }> {
  const out = new Map<string, { type?: string; help?: string; samples: string[] }>();
  const get = (name: string) => out.get(name) ?? out.set(name, { samples: [] }).get(name)!;
  for (const line of exposition.split('\n')) {
    const meta = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
    if (meta) {
      const fam = get(meta[2]!);
      if (meta[1] === 'HELP') fam.help = meta[3];
      else fam.type = meta[3];
    } else if (line.trim() !== '') {
      const name = /^([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(line)![1]!;
      const base = [...out.keys()].find(
        (f) => name === f || (out.get(f)!.type === 'histogram' && /^(_bucket|_sum|_count)$/.test(name.slice(f.length))),
      );
      get(base ?? name).samples.push(line);
    }
  }
  return out;
}

beforeAll(async () => {
  svc = await startTestService({ env: { BATON_METRICS_TOKEN: METRICS_TOKEN } });
  await svc.call('GET', '/healthz');
  await svc.call('GET', '/v1/delegations/sha256:nothing', {});
  const res = await svc.app.request('/metrics', { headers: adminAuth() });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  text = await res.text();
});

afterAll(async () => {
  await svc?.close();
});

describe('GET /metrics', () => {
  it('every family has HELP and TYPE, counters end in _total, and no unit is milliseconds', () => {
    const all = families(text);
    expect(all.size).toBeGreaterThan(10);
    for (const [name, fam] of all) {
      expect(fam.help, name).toBeTruthy();
      expect(fam.type, name).toMatch(/^(counter|gauge|histogram|summary)$/);
      if (fam.type === 'counter') expect(name, name).toMatch(/_total$/);
      expect(name, name).not.toMatch(/_(ms|milliseconds|msec|kb|mb)(_|$)/);
    }
  });

  it('request latency is a histogram in seconds with the requests seen', () => {
    const fam = families(text).get('baton_http_request_duration_seconds');
    expect(fam?.type).toBe('histogram');
    const healthz = fam!.samples.filter((s) => s.includes('route="/healthz"'));
    expect(healthz.some((s) => /_bucket\{.*le="0\.0005"/.test(s))).toBe(true);
    expect(healthz.find((s) => s.startsWith('baton_http_request_duration_seconds_count'))).toMatch(/ 1$/);
    expect(text).toMatch(/baton_http_requests_total\{method="GET",route="\/healthz",status="200"\} 1/);
  });

  it('group commit: verifies per statement and its round trip, as many statements as the batcher sent', async () => {
    const tenant = await setupTenant(svc);
    const [A, B, C] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
    const { root, leafA } = await storeTwoLeaves(svc, tenant, { allowed_tools: ['web_search'], max_calls: 10 }, A, B, C);
    const sample = (exposition: string, line: string) => Number(new RegExp(`^${line} (\\S+)$`, 'm').exec(exposition)?.[1] ?? 0);
    const scrape = async () => {
      const now = await (await svc.app.request('/metrics', { headers: adminAuth() })).text();
      return {
        statements: sample(now, 'baton_verify_batch_items_count\\{outcome="ok"\\}'),
        items: sample(now, 'baton_verify_batch_items_sum\\{outcome="ok"\\}'),
        timed: sample(now, 'baton_verify_batch_duration_seconds_count\\{outcome="ok"\\}'),
        seconds: sample(now, 'baton_verify_batch_duration_seconds_sum\\{outcome="ok"\\}'),
      };
    };
    const before = await scrape();
    const batcher = verifyBatcherOf(svc.store.query).stats();
    const answers = await Promise.all([1, 2, 3].map(async () => (await verifyInvocation(svc, tenant.keys.verify, [root, leafA], B)).res));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    const after = await scrape();
    const sent = verifyBatcherOf(svc.store.query).stats();
    expect(after.items - before.items).toBe(3);
    expect(after.statements - before.statements).toBe(sent.batches - batcher.batches);
    expect(after.timed - before.timed).toBe(after.statements - before.statements);
    expect(after.seconds).toBeGreaterThan(before.seconds);
    expect(text).toMatch(/^# TYPE baton_verify_batch_items histogram$/m);
  });

  it('exposes process, Node.js runtime, pool and build metrics', () => {
    const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    for (const name of [
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
      'process_start_time_seconds',
      'nodejs_eventloop_lag_seconds',
      'nodejs_heap_size_used_bytes',
      'baton_http_requests_in_flight',
      'baton_db_pool_max_connections',
    ]) {
      expect(text, name).toMatch(new RegExp(`^${name}(\\{[^}]*\\})? `, 'm'));
    }
    expect(text).toContain(`baton_build_info{version="${version}",node_version="${process.versions.node}"} 1`);
  });

  it("the transparency log's backlog: receipts not yet in a log and how long the oldest has waited, from the database", async () => {
    // This test service runs no integrator: every service receipt it signed waits, and one round takes them all.
    const gauge = (exposition: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(exposition)?.[1]);
    const scrape = async () => (await svc.app.request('/metrics', { headers: adminAuth() })).text();
    await new Promise((r) => setTimeout(r, 1_100)); // past the reuse window of an earlier scrape's read
    const waiting = await scrape();
    const pending = await countPending(svc.store.db);
    expect(pending).toBeGreaterThan(0);
    expect(gauge(waiting, 'baton_tlog_pending_receipts')).toBe(pending);
    expect(gauge(waiting, 'baton_tlog_oldest_pending_age_seconds')).toBeGreaterThan(0);
    expect(families(waiting).get('baton_tlog_pending_receipts')?.type).toBe('gauge');

    while (
      (await integrateOnce({ store: svc.store, signer: svc.deps.signer, log: silentLogger, logName: svc.deps.config.tlogName })).leaves > 0
    );
    await new Promise((r) => setTimeout(r, 1_100));
    const drained = await scrape();
    expect(gauge(drained, 'baton_tlog_pending_receipts')).toBe(0);
    expect(gauge(drained, 'baton_tlog_oldest_pending_age_seconds')).toBe(0);
  });

  it("a node:cluster worker that Baton's supervisor did not fork (PM2's cluster mode, say) serves its own metrics", async () => {
    // A primary that forks one worker as another cluster host would: without BATON_SUPERVISED_WORKER.
    const script = `
      import cluster from 'node:cluster';
      if (cluster.isPrimary) {
        const worker = cluster.fork({ BATON_SUPERVISED_WORKER: '' });
        worker.on('message', (m) => { console.log(JSON.stringify(m)); process.exit(0); });
        worker.on('exit', (code) => { console.log(JSON.stringify({ exited: code })); process.exit(0); });
      } else {
        const { metrics } = await import(${JSON.stringify(new URL('../../src/service/metrics.ts', import.meta.url).pathname)});
        const text = await metrics.render();
        process.send({ served: text.includes('baton_build_info') });
      }`;
    const file = join(scratch(), 'host.mjs');
    writeFileSync(file, script);
    const { stdout } = await execFileAsync(process.execPath, ['--import', 'tsx', file], {
      cwd: new URL('../..', import.meta.url).pathname,
      timeout: 30_000,
    });
    expect(JSON.parse(stdout.trim().split('\n').pop()!)).toEqual({ served: true });
  }, 40_000);

  // promtool is Prometheus's own checker (Debian package "prometheus"); the
  // conventions above are checked either way, this adds Prometheus's verdict.
  const promtool = ['/usr/bin/promtool', '/usr/local/bin/promtool'].find((p) => existsSync(p));
  it.skipIf(promtool === undefined)('promtool check metrics finds nothing (SKIPPED when promtool is not installed)', () => {
    const out = execFileSync(promtool!, ['check', 'metrics'], { input: text, encoding: 'utf8' });
    expect(out.trim()).toBe('');
  });
});

// The counters span every tenant (decisions by code, requests by route and status): a keyless
// caller, or one tenant, must not read how the others use the service.
describe('GET /metrics: who may read it', () => {
  const read = (authorization?: string) => svc.app.request('/metrics', authorization === undefined ? {} : { headers: { authorization } });

  it('the metrics token reads it, and so does the admin key', async () => {
    const byToken = await read(`Bearer ${METRICS_TOKEN}`);
    expect(byToken.status).toBe(200);
    expect(await byToken.text()).toContain('baton_verify_decisions_total');
    expect((await read(`Bearer ${svc.adminKey}`)).status).toBe(200);
  });

  it('no key, a wrong token or a garbled header: 401 and not one metric', async () => {
    for (const authorization of [
      undefined,
      `Bearer ${METRICS_TOKEN}x`,
      `Bearer ${METRICS_TOKEN.slice(0, -1)}`,
      `Basic ${METRICS_TOKEN}`,
      'Bearer',
    ]) {
      const res = await read(authorization);
      expect(res.status, String(authorization)).toBe(401);
      const body = await res.text();
      expect(JSON.parse(body).error.code).toBe('UNAUTHORIZED');
      expect(body).not.toMatch(/baton_|nodejs_|process_/);
    }
  });

  it("a tenant key of any scope: 403, the metrics are the operator's", async () => {
    const tenant = await setupTenant(svc);
    for (const [scope, key] of Object.entries(tenant.keys)) {
      const res = await read(`Bearer ${key}`);
      expect(res.status, scope).toBe(403);
      expect(await res.text()).not.toMatch(/baton_http|nodejs_/);
    }
  });

  it('the metrics token opens nothing else', async () => {
    const res = await svc.app.request('/v1/admin/tenants', { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
    expect(res.status).toBe(401);
  });
});
