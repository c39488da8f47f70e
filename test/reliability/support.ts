/**
 * Shared helpers of the reliability suite (issue 5): real service processes
 * (`node --import tsx src/main.ts`), a PostgreSQL cluster a test may stop and
 * start, an HTTP client with timeouts, a bounded load runner, pre-signed
 * chains and invocations, and the invariants read back from the database.
 *
 * Every wait is bounded. Every child process is tracked, and killed on exit
 * of the test worker even when a test forgets to (or fails before) its
 * afterAll. Traffic goes only to 127.0.0.1.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Agent, request as httpRequest, type ClientRequest } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Duplex } from 'node:stream';
import postgres from 'postgres';
import { generateKeyPair, type KeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle, type SignedDelegation } from '../../src/sdk/records.js';
import type { Policy } from '../../src/protocol/policy.js';
import type { Bundle } from '../../src/protocol/records.js';
import { freePort, startPgCluster, type PgCluster } from '../../bench/lib/pg-cluster.js';
import { childrenOf } from '../../bench/lib/proc.js';
import { ARGS, TOOL_SERVER } from '../support/fixtures.js';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export const nowSeconds = (): number => Math.floor(Date.now() / 1000);

// ---------------------------------------------------------------------------
// Service processes
// ---------------------------------------------------------------------------

/** Every child this worker started and has not seen exit. */
const liveChildren = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of liveChildren) {
    try {
      child.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
});

export interface NodeConfig {
  readonly databaseUrl: string;
  readonly adminKey: string;
  /** 64 hex digits. */
  readonly masterKey: string;
  /** BATON_DB_POOL. */
  readonly pool?: number;
  readonly env?: Readonly<Record<string, string>>;
}

export interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface ServiceNode {
  readonly name: string;
  readonly port: number;
  readonly url: string;
  readonly pid: number;
  alive(): boolean;
  /** How it ended (code or signal), or null while it runs. */
  exit(): ExitInfo | null;
  /** The last lines the process wrote (stdout and stderr), for failure messages. */
  output(lines?: number): string;
  /** `kill -9`, and wait (bounded) until the kernel reaped it. */
  kill9(): Promise<ExitInfo | null>;
  /** SIGTERM (graceful), then SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<ExitInfo | null>;
}

/** Fresh configuration shared by every node of one test: same database, same admin and master keys. */
export function nodeConfig(databaseUrl: string, extra: Partial<Omit<NodeConfig, 'databaseUrl'>> = {}): NodeConfig {
  return {
    databaseUrl,
    adminKey: `reliability-admin-${randomBytes(16).toString('hex')}`,
    masterKey: randomBytes(32).toString('hex'),
    ...extra,
  };
}

function spawnNode(name: string, cfg: NodeConfig, port: number): ServiceNode {
  const dataDir = mkdtempSync(join(tmpdir(), `baton-${name}-`));
  // A clean environment: nothing of the vitest worker (NODE_OPTIONS, loaders) leaks in.
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
    HOME: process.env.HOME ?? tmpdir(),
    TMPDIR: tmpdir(),
    PORT: String(port),
    HOST: '127.0.0.1',
    DATABASE_URL: cfg.databaseUrl,
    BATON_ADMIN_KEY: cfg.adminKey,
    BATON_MASTER_KEY: cfg.masterKey,
    BATON_LOG_LEVEL: 'warn',
    BATON_DATA_DIR: dataDir,
    BATON_DB_POOL: String(cfg.pool ?? 10),
    ...(cfg.env ?? {}),
  };
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: REPO_ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  liveChildren.add(child);
  const lines: string[] = [];
  const keep = (chunk: Buffer) => {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (line.length === 0) continue;
      lines.push(line.length > 600 ? `${line.slice(0, 600)}…` : line);
      if (lines.length > 300) lines.shift();
    }
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  let exitInfo: ExitInfo | null = null;
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once('exit', (code, signal) => {
      exitInfo = { code, signal };
      liveChildren.delete(child);
      rmSync(dataDir, { recursive: true, force: true });
      resolve(exitInfo);
    });
  });
  const waitExit = async (ms: number): Promise<ExitInfo | null> => {
    if (exitInfo) return exitInfo;
    return Promise.race([exited, sleep(ms).then(() => null)]);
  };
  return {
    name,
    port,
    url: `http://127.0.0.1:${port}`,
    pid: child.pid ?? -1,
    alive: () => exitInfo === null,
    exit: () => exitInfo,
    output: (n = 40) => lines.slice(-n).join('\n'),
    kill9: async () => {
      if (exitInfo) return exitInfo;
      child.kill('SIGKILL');
      return waitExit(10_000);
    },
    stop: async (graceMs = 5_000) => {
      if (exitInfo) return exitInfo;
      child.kill('SIGTERM');
      const done = await waitExit(graceMs);
      if (done) return done;
      child.kill('SIGKILL');
      return waitExit(10_000);
    },
  };
}

/** Polls GET /readyz until 200; fails early (with the process output) if the process exits. */
export async function waitReady(node: ServiceNode, timeoutMs = 30_000): Promise<number> {
  const started = performance.now();
  const deadline = started + timeoutMs;
  let last = 'no answer yet';
  while (performance.now() < deadline) {
    if (!node.alive()) throw new Error(`${node.name} exited before it was ready:\n${node.output()}`);
    const r = await request(node.url, 'GET', '/readyz', { timeoutMs: 1_000 });
    if (r.status === 200) return performance.now() - started;
    last = r.error ?? `HTTP ${r.status}`;
    await sleep(100);
  }
  throw new Error(`${node.name} not ready within ${timeoutMs} ms (last: ${last}):\n${node.output()}`);
}

/**
 * Spawns a service process and waits until /readyz answers 200. Without a
 * port, picks a free one (and retries if another process took it meanwhile);
 * with a port (a restart), uses exactly that one.
 */
export async function startNode(
  name: string,
  cfg: NodeConfig,
  opts: { port?: number; readyTimeoutMs?: number } = {},
): Promise<ServiceNode> {
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = opts.port ?? (await freePort());
    const node = spawnNode(name, cfg, port);
    try {
      await waitReady(node, opts.readyTimeoutMs ?? 30_000);
      return node;
    } catch (e) {
      lastError = e;
      await node.kill9();
      if (opts.port !== undefined || !/EADDRINUSE/.test(node.output(300))) throw e;
    }
  }
  throw lastError;
}

/** Stops every node that is still running (afterAll): SIGKILL, bounded. Never throws. */
export async function killAll(nodes: readonly (ServiceNode | undefined)[]): Promise<void> {
  await Promise.all(nodes.map((n) => n?.kill9().catch(() => null)));
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

export interface Reply {
  /** HTTP status, or 0 when no response came (refused, reset, timed out). */
  readonly status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests inspect arbitrary JSON
  readonly body: any;
  /** performance.now() when sent and when answered (or failed). */
  readonly sentAt: number;
  readonly doneAt: number;
  readonly ms: number;
  readonly error?: string;
}

/**
 * How long after it last sent on a keep-alive connection the client may send
 * on it again. The service closes a connection idle for its keep-alive
 * timeout (65 s by default, never below this: checked on every answer), and
 * its idle time cannot exceed the time since our last send, so the service
 * never closes, for idleness, a connection the client reuses. The old client
 * (fetch) relied on its own idle timer firing before the service's 5 s one;
 * on a busy machine it fired late, and a request went out on a socket the
 * service had just closed (UND_ERR_SOCKET, a spurious lost answer).
 */
export const CLIENT_REUSE_MS = 2_000;

const lastSendOn = new WeakMap<Duplex, number>();

/** Keep-alive, but a pooled socket is handed out only within CLIENT_REUSE_MS of its last send, even if timers run late. */
class RecentSocketAgent extends Agent {
  override reuseSocket(socket: Duplex, req: ClientRequest): void {
    // Too old to trust: closed before a byte of this request is written, so the attempt fails retry-safe.
    if (performance.now() - (lastSendOn.get(socket) ?? -Infinity) >= CLIENT_REUSE_MS) socket.destroy();
    super.reuseSocket(socket, req);
  }
}

const agent = new RecentSocketAgent({ keepAlive: true, timeout: CLIENT_REUSE_MS });

type Attempt = { status: number; body: unknown } | { error: string; retrySafe: boolean };

function attempt(
  url: URL,
  method: string,
  headers: Record<string, string>,
  payload: string | undefined,
  timeoutMs: number,
): Promise<Attempt> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (a: Attempt) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(a);
    };
    let written = false;
    const req = httpRequest(url, { method, headers, agent });
    const timer = setTimeout(() => req.destroy(Object.assign(new Error('no answer in time'), { name: 'TimeoutError' })), timeoutMs);
    req.on('socket', (socket) => lastSendOn.set(socket, performance.now()));
    req.on('finish', () => (written = true));
    req.on('response', (res) => {
      const hint = /timeout=(\d+)/.exec(String(res.headers['keep-alive'] ?? ''))?.[1];
      if (hint !== undefined && Number(hint) * 1000 < CLIENT_REUSE_MS) {
        res.resume();
        done({ error: `misconfigured test: the service keeps idle connections ${hint} s, below CLIENT_REUSE_MS`, retrySafe: false });
        return;
      }
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', (e) => done({ error: `${e.name}: ${(e as { code?: string }).code ?? e.message}`, retrySafe: false }));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown = text;
        try {
          body = text ? JSON.parse(text) : undefined;
        } catch {
          /* not JSON: keep the text */
        }
        done({ status: res.statusCode ?? 0, body });
      });
    });
    req.on('error', (e) => {
      // Retry-safe only when the service cannot have read the request: a pooled
      // socket that failed before the whole request was written. Any other
      // failure may be a lost answer, and the caller must see it as one.
      const retrySafe = req.reusedSocket && !written;
      const code = (e as { code?: string }).code ?? e.message;
      done({ error: `${e.name}: ${code}${req.reusedSocket ? ' (reused connection)' : ''}`, retrySafe });
    });
    req.end(payload);
  });
}

export async function request(
  baseUrl: string,
  method: string,
  path: string,
  opts: { key?: string; json?: unknown; timeoutMs?: number } = {},
): Promise<Reply> {
  const headers: Record<string, string> = {};
  if (opts.key) headers['authorization'] = `Bearer ${opts.key}`;
  const payload = opts.json !== undefined ? JSON.stringify(opts.json) : undefined;
  if (payload !== undefined) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(Buffer.byteLength(payload));
  }
  const sentAt = performance.now();
  const deadline = sentAt + (opts.timeoutMs ?? 10_000);
  for (;;) {
    const a = await attempt(new URL(path, baseUrl), method, headers, payload, Math.max(1, deadline - performance.now()));
    const doneAt = performance.now();
    if ('status' in a) return { status: a.status, body: a.body, sentAt, doneAt, ms: doneAt - sentAt };
    // Each retry-safe failure drops one stale pooled socket (after slow answers there may be many).
    if (a.retrySafe && doneAt < deadline) continue;
    return { status: 0, body: undefined, sentAt, doneAt, ms: doneAt - sentAt, error: a.error };
  }
}

/** Runs `fn` over `items` with at most `concurrency` in flight; results in item order. */
export async function runBounded<T, R>(items: readonly T[], concurrency: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) out[i] = await fn(items[i]!, i);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return out;
}

// ---------------------------------------------------------------------------
// Tenants, chains, invocations
// ---------------------------------------------------------------------------

export interface Tenant {
  readonly id: string;
  /** A trusted root key of the tenant. */
  readonly root: KeyPair;
  readonly keys: { readonly issue: string; readonly verify: string };
}

function expectStatus(what: string, r: Reply, ...ok: number[]): void {
  if (!ok.includes(r.status)) throw new Error(`${what}: HTTP ${r.status} ${r.error ?? JSON.stringify(r.body)}`);
}

/** A tenant, one trusted root and an issue and a verify key, made through the admin API. */
export async function setupTenant(baseUrl: string, adminKey: string, name: string): Promise<Tenant> {
  const t = await request(baseUrl, 'POST', '/v1/admin/tenants', { key: adminKey, json: { name } });
  expectStatus('create tenant', t, 201);
  const id = t.body.id as string;
  const root = generateKeyPair();
  const r = await request(baseUrl, 'POST', `/v1/admin/tenants/${id}/roots`, {
    key: adminKey,
    json: { did: root.did, label: 'reliability root' },
  });
  expectStatus('trust root', r, 201);
  const keys: Record<string, string> = {};
  for (const scope of ['issue', 'verify']) {
    const k = await request(baseUrl, 'POST', `/v1/admin/tenants/${id}/api-keys`, {
      key: adminKey,
      json: { scopes: [scope], name: `reliability-${scope}` },
    });
    expectStatus(`create ${scope} key`, k, 201);
    keys[scope] = k.body.key as string;
  }
  return { id, root, keys: { issue: keys['issue']!, verify: keys['verify']! } };
}

/** One DR and the key of its holder (its aud), who may sub-delegate it or invoke through it. */
export interface Held {
  readonly dr: SignedDelegation;
  readonly holder: KeyPair;
  /** Root first, this DR last. */
  readonly chain: readonly SignedDelegation[];
}

export function grantRoot(tenant: Tenant, policy: Policy): Held {
  const holder = generateKeyPair();
  const iat = nowSeconds();
  const dr = createRootDelegation({ issuer: tenant.root, audience: holder.did, policy, iat, nbf: iat - 30, exp: iat + 3600 });
  return { dr, holder, chain: [dr] };
}

export function grantSub(parent: Held, policy: Policy): Held {
  const holder = generateKeyPair();
  const dr = createSubDelegation({ parent: parent.dr, issuer: parent.holder, audience: holder.did, policy, iat: nowSeconds() });
  return { dr, holder, chain: [...parent.chain, dr] };
}

/** Stores DRs (parents before children) through POST /v1/delegations with the tenant's issue key. */
export async function registerDelegations(baseUrl: string, tenant: Tenant, drs: readonly SignedDelegation[]): Promise<void> {
  for (const dr of drs) {
    const r = await request(baseUrl, 'POST', '/v1/delegations', { key: tenant.keys.issue, json: { receipt: dr.jws } });
    expectStatus(`store ${dr.hash}`, r, 201, 200);
  }
}

export interface PreSigned {
  readonly jti: string;
  /** By reference (receipts: []): the chain is stored. */
  readonly bundle: Bundle;
  /** Index of the leaf it goes through, for bookkeeping. */
  readonly leaf: number;
}

/** `n` distinct invocations, round-robin over `leaves`, signed now so the load measures the service only. */
export function preSign(leaves: readonly Held[], n: number, tag = 'r'): PreSigned[] {
  const iat = nowSeconds();
  return Array.from({ length: n }, (_, i) => {
    const leaf = i % leaves.length;
    const h = leaves[leaf]!;
    const jti = `inv:${tag}-${i}-${randomBytes(6).toString('hex')}`;
    const inv = createInvocation({ chain: h.chain, invoker: h.holder, args: ARGS, toolServer: TOOL_SERVER, iat, jti });
    return { jti, bundle: makeBundle(inv, h.chain, 'reference'), leaf };
  });
}

export function verify(baseUrl: string, tenant: Tenant, bundle: Bundle, timeoutMs = 10_000): Promise<Reply> {
  return request(baseUrl, 'POST', '/v1/verify', { key: tenant.keys.verify, json: bundle, timeoutMs });
}

/** Error code of a reply: the deny's error.code (403) or the envelope's (4xx/5xx). */
export function codeOf(r: Reply): string | undefined {
  const code = (r.body as { error?: { code?: unknown } } | undefined)?.error?.code;
  return typeof code === 'string' ? code : undefined;
}

// ---------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export interface Tally {
  requests: number;
  allowed: number;
  denied: number;
  unavailable: number;
  noResponse: number;
  other: number;
  deniedBy: Record<string, number>;
  p50ms: number;
  p99ms: number;
  maxMs: number;
}

export function tally(replies: readonly Reply[]): Tally {
  const t: Tally = {
    requests: replies.length,
    allowed: 0,
    denied: 0,
    unavailable: 0,
    noResponse: 0,
    other: 0,
    deniedBy: {},
    p50ms: 0,
    p99ms: 0,
    maxMs: 0,
  };
  for (const r of replies) {
    if (r.status === 200) t.allowed++;
    else if (r.status === 403) {
      t.denied++;
      const c = codeOf(r) ?? '?';
      t.deniedBy[c] = (t.deniedBy[c] ?? 0) + 1;
    } else if (r.status === 503) t.unavailable++;
    else if (r.status === 0) t.noResponse++;
    else t.other++;
  }
  const ms = replies.map((r) => r.ms).sort((a, b) => a - b);
  t.p50ms = Math.round(percentile(ms, 50));
  t.p99ms = Math.round(percentile(ms, 99));
  t.maxMs = Math.round(ms[ms.length - 1] ?? 0);
  return t;
}

/** One line per scenario in the CI log. */
export function report(label: string, replies: readonly Reply[], durationMs: number, extra: Record<string, unknown> = {}): Tally {
  const t = tally(replies);
  const denied = Object.entries(t.deniedBy)
    .map(([c, n]) => `${c}=${n}`)
    .join(',');
  const errors = [...new Set(replies.filter((r) => r.status === 0).map((r) => r.error ?? '?'))].slice(0, 3);
  if (errors.length > 0) extra = { ...extra, no_response_errors: errors.join(' | ') };
  const more = Object.entries(extra)
    .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join(' ');
  console.log(
    `[reliability] ${label}: requests=${t.requests} allowed=${t.allowed} denied=${t.denied}${denied ? `(${denied})` : ''} ` +
      `503=${t.unavailable} no_response=${t.noResponse} other=${t.other} duration=${Math.round(durationMs)}ms ` +
      `p50=${t.p50ms}ms p99=${t.p99ms}ms max=${t.maxMs}ms${more ? ` ${more}` : ''}`,
  );
  return t;
}

// ---------------------------------------------------------------------------
// What the database holds
// ---------------------------------------------------------------------------

export interface CounterRow {
  readonly hash: string;
  readonly depth: number;
  readonly callsUsed: number;
  readonly maxCalls: number | null;
  /** Stored (allowed) invocations whose chain passes through this DR. */
  readonly stored: number;
}

export interface DbAudit {
  readonly counters: readonly CounterRow[];
  /** Counted DRs whose calls_used differs from the invocations stored through them. */
  readonly counterMismatches: readonly CounterRow[];
  readonly storedJtis: ReadonlySet<string>;
  /** jti -> the 'invocation.allowed' receipts stored for it. */
  readonly allowReceipts: ReadonlyMap<string, readonly { id: number; jws: string }[]>;
  /** Stored (counted) invocations with no 'invocation.allowed' receipt. */
  readonly invocationsWithoutReceipt: readonly string[];
  /** 'invocation.allowed' receipts with no stored invocation. */
  readonly receiptsWithoutInvocation: readonly string[];
}

/** Reads counters, invocations and allow receipts of one tenant, and what disagrees. */
export async function auditDatabase(databaseUrl: string, tenantId: string): Promise<DbAudit> {
  const sql = postgres(databaseUrl, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    const counters = await sql<{ hash: string; depth: number; calls_used: number; max_calls: number | null; stored: number }[]>`
      select d.hash, d.depth, d.calls_used::int as calls_used, d.max_calls::int as max_calls,
             (select count(*)::int from invocations i
               where i.tenant_id = d.tenant_id and i.dr_chain @> array[d.hash]::text[]) as stored
        from delegations d
       where d.tenant_id = ${tenantId}
       order by d.depth, d.hash`;
    const invs = await sql<{ jti: string }[]>`select jti from invocations where tenant_id = ${tenantId}`;
    const rcpts = await sql<{ id: number; subject: string; jws: string }[]>`
      select id::int as id, subject, jws from receipts where tenant_id = ${tenantId} and kind = 'invocation.allowed'`;
    const rows: CounterRow[] = counters.map((c) => ({
      hash: c.hash,
      depth: c.depth,
      callsUsed: c.calls_used,
      maxCalls: c.max_calls,
      stored: c.stored,
    }));
    const storedJtis = new Set(invs.map((r) => r.jti));
    const allowReceipts = new Map<string, { id: number; jws: string }[]>();
    for (const r of rcpts) {
      const list = allowReceipts.get(r.subject) ?? [];
      list.push({ id: r.id, jws: r.jws });
      allowReceipts.set(r.subject, list);
    }
    return {
      counters: rows,
      counterMismatches: rows.filter((r) => r.maxCalls !== null && r.callsUsed !== r.stored),
      storedJtis,
      allowReceipts,
      invocationsWithoutReceipt: [...storedJtis].filter((j) => !allowReceipts.has(j)).sort(),
      receiptsWithoutInvocation: [...allowReceipts.keys()].filter((j) => !storedJtis.has(j)).sort(),
    };
  } finally {
    await sql.end({ timeout: 5 });
  }
}

export interface ClientViewCheck {
  /** 200s whose invocation row is missing. */
  readonly allowedNotStored: string[];
  /** 200s without the receipt they returned (same id and JWS) stored as 'invocation.allowed'. */
  readonly allowedWithoutReceipt: string[];
  /** 403s other than REPLAY_DETECTED whose jti is stored anyway (a deny that consumed). */
  readonly deniedButStored: string[];
}

/** Holds every response the client saw against the database. */
export function checkClientView(audit: DbAudit, seen: readonly { jti: string; reply: Reply }[]): ClientViewCheck {
  const out: ClientViewCheck = { allowedNotStored: [], allowedWithoutReceipt: [], deniedButStored: [] };
  for (const { jti, reply } of seen) {
    if (reply.status === 200) {
      if (!audit.storedJtis.has(jti)) out.allowedNotStored.push(jti);
      const rc = reply.body?.service_receipt as { id?: number; jws?: string } | null | undefined;
      const stored = audit.allowReceipts.get(jti) ?? [];
      if (!rc || !stored.some((s) => s.id === Number(rc.id) && s.jws === rc.jws)) out.allowedWithoutReceipt.push(jti);
    } else if (reply.status === 403 && codeOf(reply) !== 'REPLAY_DETECTED' && audit.storedJtis.has(jti)) {
      out.deniedButStored.push(jti);
    }
  }
  return out;
}

/** Runs `fn` with a short-lived connection to `databaseUrl`. */
export async function withSql<T>(databaseUrl: string, fn: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = postgres(databaseUrl, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    return await fn(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/**
 * A PostgreSQL cluster of the test's own, to stop and start. Unlike the
 * suite's shared server it keeps synchronous_commit on: a test that kills
 * PostgreSQL must not lose commits it acknowledged. Deleted when the worker
 * exits, even without afterAll.
 */
export async function startOwnCluster(): Promise<PgCluster> {
  const cluster = await startPgCluster({ synchronousCommit: true });
  process.once('exit', () => cluster.destroySync());
  return cluster;
}

/**
 * The worker processes of a BATON_WORKERS supervisor: its node children. Not every child: tsx runs
 * an esbuild child while it compiles, so with a cold cache a bare child count read three.
 */
export function workerPidsOf(node: ServiceNode): number[] {
  return childrenOf(node.pid).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'node';
    } catch {
      return false; // gone meanwhile
    }
  });
}
