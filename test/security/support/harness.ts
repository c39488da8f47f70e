/**
 * The security suite's world and oracle.
 *
 * buildWorld() starts a service on a fresh real PostgreSQL database and stores
 * the fixture records through the public API (two tenants, keys of every
 * scope, a revoked key, chains, allowed invocations, an actual, a revocation,
 * a custodial root). The oracle then judges every response: status class, the
 * one error envelope (or the verify deny body), no internals in the text, no
 * hang, nothing stored (a digest of every table before and after), and an
 * untouched Object.prototype.
 */
import { connect } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { sql } from 'drizzle-orm';
import { SERVICE_ERROR_CODES, type ErrorCode } from '../../../src/protocol/errors.js';
import { ERROR_STATUS } from '../../../src/service/error-status.js';
import { createApp } from '../../../src/service/app.js';
import { rows } from '../../../src/store/rows.js';
import { startTestService, type TestService } from '../../support/service.js';
import {
  ACTUAL_BASE,
  CATALOG_A,
  CATALOG_B,
  CHAIN_A,
  ISSUE_BASE,
  KEYS,
  T0,
  bundle,
  drA0,
  drA1,
  drB0,
  drGated,
  drHeld,
  drLive,
  drRevoked,
  invB,
  invGated,
  invConsumed,
  invMetered,
  invUnmetered,
  recordHash,
  revRevoked,
} from './fixtures.js';

export const REQUEST_TIMEOUT_MS = 5_000;
/** A refusal never needs to be this large; a bigger body means input is being reflected. */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;

export type TenantScope = 'issue' | 'verify' | 'report' | 'audit' | 'approve';
export const TENANT_SCOPES: readonly TenantScope[] = ['issue', 'verify', 'report', 'audit', 'approve'];

export interface TenantKeys {
  readonly id: string;
  /** One key per scope, one with every tenant scope ('all'). */
  readonly keys: Record<TenantScope | 'all', string>;
  readonly keyIds: Record<TenantScope | 'all', string>;
}

export interface World {
  readonly svc: TestService;
  readonly A: TenantKeys & {
    /** Had every tenant scope; revoked through the admin API. */
    readonly revokedKey: string;
    readonly revokedKeyId: string;
  };
  readonly B: TenantKeys;
  /** Strings of tenant A's stored data another tenant must never be shown. */
  readonly secretsA: readonly string[];
  readonly secretsB: readonly string[];
  /** The custodial root DR issued from ISSUE_BASE in tenant A. */
  readonly issuedHash: string;
  readonly issuedJws: string;
  /** Tenant A's pending approval (a call of the organisation-wide tool through drGated). */
  readonly approvalId: string;
}

async function must(
  svc: TestService,
  what: string,
  status: number[],
  method: string,
  path: string,
  opts: Parameters<TestService['call']>[2],
) {
  const r = await svc.call(method, path, opts);
  if (!status.includes(r.status)) throw new Error(`world setup: ${what}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

async function makeTenant(svc: TestService, name: string, root: string): Promise<TenantKeys> {
  const admin = { key: svc.adminKey };
  const t = await must(svc, 'tenant', [201], 'POST', '/v1/admin/tenants', { ...admin, json: { name } });
  await must(svc, 'root', [201], 'POST', `/v1/admin/tenants/${t.id}/roots`, { ...admin, json: { did: root, label: `${name} root` } });
  const keys: Record<string, string> = {};
  const keyIds: Record<string, string> = {};
  for (const scope of [...TENANT_SCOPES, 'all'] as const) {
    const scopes = scope === 'all' ? [...TENANT_SCOPES] : [scope];
    const k = await must(svc, 'api key', [201], 'POST', `/v1/admin/tenants/${t.id}/api-keys`, {
      ...admin,
      json: { scopes, name: `${name}-${scope}` },
    });
    keys[scope] = k.key;
    keyIds[scope] = k.id;
  }
  return { id: t.id, keys: keys as TenantKeys['keys'], keyIds: keyIds as TenantKeys['keyIds'] };
}

export async function buildWorld(): Promise<World> {
  const svc = await startTestService();
  svc.clock.now = T0;
  const admin = { key: svc.adminKey };
  const A = await makeTenant(svc, 'sec-a', KEYS.rootA.did);
  const B = await makeTenant(svc, 'sec-b', KEYS.rootB.did);

  // A root once trusted, then removed (a DELETE target that no longer exists).
  await must(svc, 'old root', [201], 'POST', `/v1/admin/tenants/${A.id}/roots`, { ...admin, json: { did: KEYS.rootOld.did } });
  await must(svc, 'remove old root', [204], 'DELETE', `/v1/admin/tenants/${A.id}/roots/${KEYS.rootOld.did}`, admin);

  const revoked = await must(svc, 'revoked key', [201], 'POST', `/v1/admin/tenants/${A.id}/api-keys`, {
    ...admin,
    json: { scopes: [...TENANT_SCOPES], name: 'revoked' },
  });
  await must(svc, 'revoke key', [204], 'DELETE', `/v1/admin/api-keys/${revoked.id}`, admin);

  await must(svc, 'chain A', [201], 'POST', '/v1/delegations', { json: { receipts: CHAIN_A.map((d) => d.jws) } });
  await must(svc, 'revoked DR', [201], 'POST', '/v1/delegations', { json: { receipt: drRevoked.jws } });
  await must(svc, 'live DR', [201], 'POST', '/v1/delegations', { json: { receipt: drLive.jws } });
  await must(svc, 'revocation', [200], 'POST', `/v1/delegations/${drRevoked.hash}/revoke`, { json: { revocation: revRevoked.jws } });
  // Used by another key than the verify key the hostile cases send them with, so that a
  // re-send is a replay (REPLAY_DETECTED), not the retry of the same key's allow.
  for (const inv of [invConsumed, invMetered, invUnmetered]) {
    await must(svc, `verify ${inv.payload['jti']}`, [200], 'POST', '/v1/verify', { key: A.keys.all, json: bundle(inv, CHAIN_A) });
  }
  await must(svc, 'actual', [201], 'POST', `/v1/invocations/${invMetered.payload['jti']}/actuals`, {
    key: A.keys.report,
    json: ACTUAL_BASE,
  });
  const issued = await must(svc, 'issue', [201], 'POST', '/v1/delegations/issue', { key: A.keys.issue, json: ISSUE_BASE });

  await must(svc, 'chain B', [201], 'POST', '/v1/delegations', { json: { receipt: drB0.jws } });
  await must(svc, 'verify B', [200], 'POST', '/v1/verify', { key: B.keys.verify, json: bundle(invB, [drB0]) });

  // Tool catalogs (two versions for A, one for B), then what they make wait for a human in A:
  // a delegation held for the trifecta and a pending approval of one call.
  for (const doc of CATALOG_A)
    await must(svc, `catalog A v${doc.base_version + 1}`, [201], 'POST', `/v1/admin/tenants/${A.id}/tools`, { ...admin, json: doc });
  await must(svc, 'catalog B', [201], 'POST', `/v1/admin/tenants/${B.id}/tools`, { ...admin, json: CATALOG_B });
  await must(svc, 'held DR', [201], 'POST', '/v1/delegations', { json: { receipt: drHeld.jws } });
  await must(svc, 'gated DR', [201], 'POST', '/v1/delegations', { json: { receipt: drGated.jws } });
  const waiting = await must(svc, 'gated call', [403], 'POST', '/v1/verify', { key: A.keys.verify, json: bundle(invGated, [drGated]) });
  const approvalId = (waiting.approval as { id?: unknown } | undefined)?.id;
  if (typeof approvalId !== 'string') throw new Error(`world setup: gated call got no approval: ${JSON.stringify(waiting)}`);
  const catalogHashes = async (key: string): Promise<string[]> => {
    const r = await must(svc, 'catalog', [200], 'GET', '/v1/tools', { key });
    return [r.hash as string, r.catalog_hash as string];
  };

  const serviceReceiptsOf = async (key: string): Promise<string[]> => {
    const r = await must(svc, 'service receipts', [200], 'GET', '/v1/service-receipts?limit=500', { key });
    return (r.service_receipts as { jws: string }[]).map((x) => x.jws);
  };
  const custodial = issued.custodial_did as string;
  const secretsA = [
    A.id,
    ...Object.values(A.keyIds),
    revoked.id,
    custodial,
    issued.delegation.hash,
    issued.delegation.jws,
    ISSUE_BASE.jti,
    ...[drA0, drA1, drRevoked, drLive, drHeld, drGated].flatMap((d) => [d.hash, d.jws, d.payload['jti'] as string]),
    ...[invConsumed, invMetered, invUnmetered, invGated].flatMap((i) => [i.hash, i.jws, i.payload['jti'] as string]),
    approvalId,
    ...(await catalogHashes(A.keys.audit)),
    ...(await serviceReceiptsOf(A.keys.audit)),
  ];
  const secretsB = [
    B.id,
    ...Object.values(B.keyIds),
    drB0.hash,
    drB0.jws,
    'dr:sec-b0',
    invB.hash,
    invB.jws,
    'inv:sec-b',
    ...(await catalogHashes(B.keys.audit)),
    ...(await serviceReceiptsOf(B.keys.audit)),
  ];
  return {
    svc,
    A: { ...A, revokedKey: revoked.key, revokedKeyId: revoked.id },
    B,
    secretsA,
    secretsB,
    issuedHash: issued.delegation.hash,
    issuedJws: issued.delegation.jws,
    approvalId,
  };
}

/** The registered routes, "METHOD /pattern", from a fresh app on the world's deps, without middleware. */
export function appRoutes(w: World): string[] {
  const app = createApp(w.svc.deps);
  return [
    ...new Set(app.routes.filter((r) => !(r.method === 'ALL' && (r.path === '/*' || r.path === '*'))).map((r) => `${r.method} ${r.path}`)),
  ];
}

// ---------------------------------------------------------------- requests

export interface Req {
  readonly method: string;
  readonly path: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: Uint8Array | string;
  /** A streamed body without Content-Length; the byte counter tells how much the service read. */
  readonly stream?: { readonly chunkBytes: number; readonly totalBytes: number; readonly fill: number };
  /** Exact bytes over a real socket (GET with a body, lying Content-Length). */
  readonly rawHttp?: Uint8Array;
}

export interface Res {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
  readonly json: unknown;
  readonly ms: number;
  /** For streamed bodies: bytes the service pulled before answering. */
  readonly bytesPulled?: number;
}

export class Hang extends Error {}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Hang(`no answer within ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

const parseJson = (text: string): unknown => {
  try {
    return text ? (JSON.parse(text) as unknown) : undefined;
  } catch {
    return undefined;
  }
};

let socketServer: { server: ServerType; port: number } | undefined;

async function socketPort(svc: TestService): Promise<number> {
  if (!socketServer) {
    const server: ServerType = await new Promise((resolve) => {
      const s = serve({ fetch: svc.app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
    });
    const addr = server.address();
    socketServer = { server, port: typeof addr === 'object' && addr ? addr.port : 0 };
  }
  return socketServer.port;
}

export async function closeSocketServer(): Promise<void> {
  const s = socketServer;
  socketServer = undefined;
  if (s) await new Promise<void>((resolve) => s.server.close(() => resolve()));
}

/** Sends exact bytes and reads one HTTP/1.1 response (Content-Length framed). */
async function rawExchange(port: number, bytes: Uint8Array): Promise<{ status: number; headers: Headers; text: string }> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    const done = (r: { status: number; headers: Headers; text: string } | Error) => {
      sock.destroy();
      if (r instanceof Error) reject(r);
      else resolve(r);
    };
    sock.on('error', (e) => done(e));
    sock.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = buf.subarray(0, end).toString('latin1').split('\r\n');
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head[0] ?? '')?.[1]);
      const headers = new Headers();
      for (const line of head.slice(1)) {
        const i = line.indexOf(':');
        if (i > 0) headers.append(line.slice(0, i).trim(), line.slice(i + 1).trim());
      }
      const length = Number(headers.get('content-length') ?? '0');
      const body = buf.subarray(end + 4);
      if (body.length >= length) done({ status, headers, text: body.subarray(0, length).toString('utf8') });
    });
    sock.on('end', () => done(new Error('connection closed before a full response')));
    sock.write(bytes);
  });
}

export async function send(svc: TestService, req: Req, timeoutMs = REQUEST_TIMEOUT_MS): Promise<Res> {
  const started = performance.now();
  const what = `${req.method} ${req.path.slice(0, 200)}`;
  if (req.rawHttp) {
    const port = await socketPort(svc);
    const r = await withTimeout(rawExchange(port, req.rawHttp), timeoutMs, what);
    return { ...r, json: parseJson(r.text), ms: performance.now() - started };
  }
  let pulled = 0;
  let body: RequestInit['body'];
  if (req.stream) {
    const { chunkBytes, totalBytes, fill } = req.stream;
    body = new ReadableStream<Uint8Array>({
      pull(ctrl) {
        if (pulled >= totalBytes) return ctrl.close();
        pulled += chunkBytes;
        ctrl.enqueue(new Uint8Array(chunkBytes).fill(fill));
      },
    });
  } else if (req.body !== undefined) {
    body = typeof req.body === 'string' ? req.body : Buffer.from(req.body);
  }
  const init: RequestInit & { duplex?: 'half' } = {
    method: req.method,
    headers: { ...(req.headers ?? {}) },
    ...(body !== undefined ? { body } : {}),
  };
  if (req.stream) init.duplex = 'half';
  const exchange = (async () => {
    const res = await svc.app.request(req.path, init);
    const text = await res.text();
    return { status: res.status, headers: res.headers, text };
  })();
  const r = await withTimeout(exchange, timeoutMs, what);
  return { ...r, json: parseJson(r.text), ms: performance.now() - started, ...(req.stream ? { bytesPulled: pulled } : {}) };
}

/** A request as a reproduction for a report: exact, and short enough to read. */
export function describeReq(req: Req): string {
  const lines = [`${req.method} ${req.path.length > 300 ? `${req.path.slice(0, 300)}… (${req.path.length} chars)` : req.path}`];
  for (const [k, v] of Object.entries(req.headers ?? {})) {
    const shown = /^authorization$/i.test(k) ? v.replace(/(Bearer\s+)(\S{6})\S+/i, '$1$2…') : v;
    lines.push(`${k}: ${shown.length > 300 ? `${shown.slice(0, 300)}… (${shown.length} chars)` : shown}`);
  }
  if (req.stream) lines.push(`<streamed body, no Content-Length: ${req.stream.totalBytes} bytes of 0x${req.stream.fill.toString(16)}>`);
  else if (req.rawHttp) lines.push(`<raw HTTP, base64> ${Buffer.from(req.rawHttp).toString('base64').slice(0, 600)}`);
  else if (req.body !== undefined) {
    const bytes = typeof req.body === 'string' ? Buffer.from(req.body) : Buffer.from(req.body);
    const text = bytes.toString('utf8');
    const printable = Buffer.from(text, 'utf8').equals(bytes) && !/[\u0000-\u0008\u000e-\u001f]/.test(text);
    if (printable && bytes.length <= 3000) lines.push('', text);
    else lines.push('', `<${bytes.length} bytes, base64> ${bytes.subarray(0, 1500).toString('base64')}${bytes.length > 1500 ? '…' : ''}`);
  }
  return lines.join('\n');
}

export const describeRes = (res: Res): string => `→ ${res.status} (${Math.round(res.ms)} ms) ${res.text.slice(0, 600)}`;

// ---------------------------------------------------------------- storage

export type Snapshot = Readonly<Record<string, string>>;

/** Tables whose rows a verify deny writes on purpose (recorded for auditors). */
export const DENIAL_TABLES = ['denials', 'receipts:invocation.denied'] as const;

/**
 * Row count and a digest of every row of every table, in one round trip.
 * Denials and 'invocation.denied' receipts are only counted (they grow on
 * every verify deny), every other table is digested in full so updates show.
 */
export async function snapshot(svc: TestService): Promise<Snapshot> {
  // An order-independent digest: the sum of a 64-bit hash of every row's text (no sort, no string building).
  const digest = (table: string, where = 'true', name = table) =>
    `select '${name}' as t, count(*)::text || ':' || coalesce(sum(hashtextextended(x::text, 0)::numeric), 0)::text as d from ${table} x where ${where}`;
  const counted = (name: string, table: string, where: string) =>
    `select '${name}' as t, count(*)::text as d from ${table} x where ${where}`;
  const query = [
    digest('tenants'),
    // last_used_at is the key's own bookkeeping, written in the background whenever a key is
    // presented (even on a refused request): not something a request stored.
    digest(
      '(select id, tenant_id, secret_hash, scopes, name, tool_server, created_at, revoked_at, expires_at, rotated_from from api_keys)',
      'true',
      'api_keys',
    ),
    digest('custodial_keys'),
    digest('service_keys'),
    digest('trusted_roots'),
    digest('delegations'),
    digest('invocations'),
    digest('actuals'),
    digest('tool_catalogs'),
    digest('approvals'),
    digest('grant_approvals'),
    digest('tool_rate_windows'),
    digest('receipts', "kind <> 'invocation.denied'", 'receipts'),
    counted('receipts:invocation.denied', 'receipts', "kind = 'invocation.denied'"),
    counted('denials', 'denials', 'true'),
  ].join(' union all ');
  const result = await rows<{ t: string; d: string }>(svc.store.db, sql.raw(query));
  return Object.fromEntries(result.map((r) => [r.t, r.d]));
}

export function storageChanges(before: Snapshot, after: Snapshot, opts: { allowDenials: boolean }): string[] {
  const out: string[] = [];
  for (const table of Object.keys(before)) {
    if (opts.allowDenials && (DENIAL_TABLES as readonly string[]).includes(table)) continue;
    if (before[table] !== after[table]) out.push(`${table} changed (${before[table]} → ${after[table]})`);
  }
  return out;
}

// ---------------------------------------------------------------- responses

/** The codes the service may answer with: those of ERROR_TABLE that have an HTTP status. */
const CODES = new Set<string>(SERVICE_ERROR_CODES);
const REQUEST_ID = /^[\w=-]{1,64}$/;
/** Text that must never reach a client: stack frames, driver and SQL errors. */
const INTERNALS = [
  /\bat [^\s]+ \(?[^\s]*\.(?:ts|js|mjs|cjs):\d+/,
  /node_modules/,
  /PostgresError/i,
  /syntax error at or near/i,
  /violates (?:unique|check|foreign key) constraint/i,
  /invalid byte sequence/i,
  /ECONNREFUSED/,
];

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const nonEmpty = (v: unknown) => typeof v === 'string' && v.trim().length > 0;

/** Problems with a refusal's body, or [] when it is the standard envelope (or, on verify, the deny body). */
export function envelopeProblems(req: Req, res: Res, opts: { verifyRoute: boolean }): string[] {
  const p: string[] = [];
  if (req.method === 'HEAD') return p;
  if (!(res.headers.get('content-type') ?? '').startsWith('application/json')) p.push(`content-type is ${res.headers.get('content-type')}`);
  if (res.text.length > MAX_ERROR_BODY_BYTES) p.push(`refusal body is ${res.text.length} bytes (input reflected?)`);
  for (const re of INTERNALS) if (re.test(res.text)) p.push(`body shows internals (${re})`);
  const b = res.json;
  if (!isObj(b)) return [...p, 'body is not a JSON object'];
  if (opts.verifyRoute && res.status === 403 && b['valid'] === false) {
    const e = b['error'];
    if (!isObj(e)) return [...p, 'deny error is not an object'];
    // A call waiting for a human also carries the pending approval it can be retried with.
    const expected = e['code'] === 'APPROVAL_REQUIRED' ? 'approval,error,valid,violations' : 'error,valid,violations';
    const keys = Object.keys(b).sort().join(',');
    if (keys !== expected) p.push(`deny body has keys ${keys}`);
    if (Object.keys(e).sort().join(',') !== 'block,code,message,suggestion') p.push(`deny error has keys ${Object.keys(e).join(',')}`);
    if (!CODES.has(String(e['code']))) p.push(`deny code ${String(e['code'])} is not in ERROR_TABLE`);
    if (!(e['block'] === null || (typeof e['block'] === 'string' && /^[A-G]$/.test(e['block']))))
      p.push(`deny block ${String(e['block'])}`);
    if (!nonEmpty(e['message']) || !nonEmpty(e['suggestion'])) p.push('deny message/suggestion empty');
    const v = b['violations'];
    if (!Array.isArray(v) || v.length === 0) p.push('deny without violations');
    else
      for (const x of v)
        if (!isObj(x) || !CODES.has(String(x['code'])) || typeof x['field'] !== 'string')
          p.push(`bad violation ${JSON.stringify(x).slice(0, 200)}`);
    return p;
  }
  const keys = Object.keys(b).sort().join(',');
  if (keys !== 'error,request_id') p.push(`envelope has keys ${keys}`);
  const e = b['error'];
  if (!isObj(e)) return [...p, 'error is not an object'];
  const extra = Object.keys(e).filter((k) => !['code', 'message', 'suggestion', 'details'].includes(k));
  if (extra.length > 0) p.push(`error has extra keys ${extra.join(',')}`);
  if (!CODES.has(String(e['code']))) p.push(`code ${String(e['code'])} is not in ERROR_TABLE`);
  else {
    // The one status map decides; a refused submission turns its 403s into 422 (SubmissionRefusal).
    const mapped = ERROR_STATUS[e['code'] as ErrorCode];
    if (res.status !== mapped && !(res.status === 422 && mapped === 403))
      p.push(`code ${String(e['code'])} answered ${res.status}, mapped ${mapped}`);
  }
  if (e['code'] === 'INTERNAL' || e['code'] === 'STORAGE_UNAVAILABLE') p.push(`code ${String(e['code'])} on a refusal`);
  if (!nonEmpty(e['message'])) p.push('message empty');
  if (!nonEmpty(e['suggestion'])) p.push('suggestion empty');
  if (e['details'] !== undefined && !isObj(e['details'])) p.push('details is not an object');
  const rid = b['request_id'];
  if (typeof rid !== 'string' || !REQUEST_ID.test(rid)) p.push(`request_id ${JSON.stringify(rid)?.slice(0, 80)} is not a safe id`);
  else if (res.headers.get('x-request-id') !== null && res.headers.get('x-request-id') !== rid)
    p.push('request_id differs from X-Request-Id');
  return p;
}

// ---------------------------------------------------------------- prototype pollution

const PROTO_NAMES = Object.getOwnPropertyNames(Object.prototype).sort().join(',');

export function prototypeProblems(): string[] {
  const out: string[] = [];
  if (Object.getOwnPropertyNames(Object.prototype).sort().join(',') !== PROTO_NAMES) out.push('Object.prototype gained properties');
  const probe: Record<string, unknown> = {};
  for (const k of ['polluted', 'admin', 'isAdmin', 'scopes', 'valid']) if (probe[k] !== undefined) out.push(`({}).${k} is set`);
  return out;
}

/**
 * Strings of `secrets` in `text` that the request itself did not carry. What a
 * request carries includes what its JWS encode (payloads decoded, e.g. the
 * dr_chain hashes of an invocation) and the hashes of those JWS: echoing them
 * back tells the caller nothing new.
 */
export function leaked(text: string, secrets: readonly string[], req: Req): string[] {
  const raw = [
    req.path,
    JSON.stringify(req.headers ?? {}),
    typeof req.body === 'string' ? req.body : req.body ? Buffer.from(req.body).toString('utf8') : '',
  ].join('\n');
  const parts = [raw];
  for (const jws of raw.match(/[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/g) ?? []) {
    parts.push(recordHash(jws));
    for (const p of jws.split('.').slice(0, 2)) parts.push(Buffer.from(p, 'base64url').toString('utf8'));
  }
  const sent = parts.join('\n');
  return secrets.filter((s) => s.length >= 8 && text.includes(s) && !sent.includes(s));
}
