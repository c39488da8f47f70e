/**
 * Every route × every kind of wrong caller, on real PostgreSQL.
 *
 * Callers: no key, malformed keys, a key of the route's tenant without the
 * route's scope, a key of ANOTHER tenant with the right scope, the admin key
 * on a tenant route, a revoked key. Each must be refused with the right status
 * (401 no/bad/revoked key, 403 wrong scope or admin on a tenant route, 404 for
 * another tenant's object), in the one envelope, storing nothing, and never
 * showing tenant A's data (hashes, JWS, jtis, ids, receipts) to anyone but A.
 * Another tenant's object must be indistinguishable from one that does not
 * exist: same status, same code, same message up to the identifier.
 *
 * The route list comes from the Hono app itself (createApp(deps).routes): a
 * new route without an entry in MATRIX fails here until someone decides who
 * may call it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cosignatureSigner } from '../../src/protocol/cosignature.js';
import { createApprovalDecision } from '../../src/sdk/tools.js';
import { publicKeyFromSeed } from '../../src/protocol/ed25519.js';
import { COSIGNATURE_V1, formatVerifierKey, signNote, verifierKey } from '../../src/protocol/note.js';
import { sql } from 'drizzle-orm';
import { createApp } from '../../src/service/app.js';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { silentLogger } from '../../src/service/log.js';
import { rows } from '../../src/store/rows.js';
import type { ServiceDeps } from '../../src/service/types.js';
import {
  ABSENT_APPROVAL,
  ABSENT_HASH,
  ABSENT_JTI,
  ACTUAL_BASE,
  CATALOG_A,
  CHAIN_A,
  DECISION,
  ISSUE_BASE,
  KEYS,
  bundle,
  drA0,
  drA1,
  drHeld,
  drLive,
  fixedKey,
  invConsumed,
  invocation,
  invocationPayload,
  recordHash,
  signPayload,
  subDr,
} from './support/fixtures.js';
import {
  appRoutes,
  buildWorld,
  describeReq,
  describeRes,
  envelopeProblems,
  leaked,
  send,
  snapshot,
  storageChanges,
  TENANT_SCOPES,
  type Req,
  type Res,
  type TenantScope,
  type World,
} from './support/harness.js';
import { deepEqual } from './support/json.js';

// ---------------------------------------------------------------- the matrix

type Access =
  | { readonly kind: 'public' }
  /** Tenant keys with one of `scopes`; `admin` also lets the admin key in; `noKey` says what a keyless call is. */
  | { readonly kind: 'tenant'; readonly scopes: readonly TenantScope[]; readonly admin?: boolean; readonly noKey?: 'signature-path' }
  /** The admin key only; `tenantParam` when the path names a tenant. */
  | { readonly kind: 'admin'; readonly tenantParam?: boolean };

interface Call {
  readonly method: string;
  readonly path: string;
  readonly body?: unknown;
}

interface Entry {
  readonly access: Access;
  /** A call for tenant A that the right key would have succeed (so refusals are about the caller only). */
  readonly call: (w: Ctx) => Call;
  /** For a call naming one tenant-owned object: the same call naming one that does not exist. */
  readonly absent?: (w: Ctx) => Call;
  /** The identifiers to mask when comparing the two. */
  readonly ids?: (w: Ctx) => readonly [string, string][];
  /** Another tenant's key reads only its own data here (a list), rather than being refused. */
  readonly otherTenantReadsOwn?: boolean;
  /** What another tenant's key gets for A's object when that is not a plain 404 (the same as for a missing object). */
  readonly otherTenantStatus?: readonly number[];
  /** A public route's answer to `call` when that is not 200 (the same whatever credentials come with it). */
  readonly publicStatus?: readonly number[];
}

interface Ctx extends World {
  readonly spareRootDid: string;
  readonly spareKeyId: string;
  /** A receipt of tenant A in its transparency log. */
  readonly logReceiptA: number;
  /** A key only the rotate route touches (the DELETE route revokes spareKeyId). */
  readonly rotatableKeyId: string;
}

const matrixDr = subDr(drA0, KEYS.a1, KEYS.a3.did, 'dr:sec-matrix-fresh');
const orphanDr = subDr({ ...drA0, hash: ABSENT_HASH }, KEYS.a1, KEYS.a3.did, 'dr:sec-matrix-orphan');
const matrixInv = invocation(CHAIN_A, KEYS.a2, 'inv:sec-matrix');
const absentChainInv = signPayload(
  { ...invocationPayload(CHAIN_A, KEYS.a2, 'inv:sec-matrix-absent'), dr_chain: [ABSENT_HASH, recordHash('absent-leaf')] },
  KEYS.a2,
);

/** The three verify paths: a deny (403 BUNDLE_INCOMPLETE) for another tenant, whose store knows A's chain no more than a chain nobody stored. */
function verifyEntry(path: string): Entry {
  return {
    otherTenantStatus: [403],
    access: { kind: 'tenant', scopes: ['verify'] },
    call: () => post(path, bundle(matrixInv, 'reference')),
    absent: () => post(path, { bundle_version: '4.0', invocation: absentChainInv, receipts: [] }),
    ids: () => [
      [drA0.hash, ABSENT_HASH],
      [drA1.hash, recordHash('absent-leaf')],
      [matrixInv.hash, recordHash(absentChainInv)],
      ['inv:sec-matrix', 'inv:sec-matrix-absent'],
    ],
  };
}

const MATRIX_WITNESS_SEED = new Uint8Array(32).fill(3);
const MATRIX_COSIGNATURE = {
  witness_key: formatVerifierKey(verifierKey('matrix.witness', COSIGNATURE_V1, publicKeyFromSeed(MATRIX_WITNESS_SEED))),
  checkpoint: signNote(`matrix.example/baton/ten_none\n1\n${Buffer.alloc(32).toString('base64')}\n`, [
    cosignatureSigner('matrix.witness', MATRIX_WITNESS_SEED, 1),
  ]),
};

const get = (path: string): Call => ({ method: 'GET', path });
const post = (path: string, body: unknown): Call => ({ method: 'POST', path, body });
const del = (path: string): Call => ({ method: 'DELETE', path });
const ABSENT_TENANT = 'ten_00000000000000000000000000000000';
const READERS: readonly TenantScope[] = ['issue', 'verify', 'report', 'audit'];
/** Who may read the tool catalog and ask for an explanation: everyone but the usage reporter. */
/** An approver DID no tenant lists. */
const MATRIX_OUTSIDER = (({ did, seed, publicKey }) => ({ did, seed, publicKey }))(fixedKey('matrix-outsider-approver'));
const CATALOG_READERS: readonly TenantScope[] = ['issue', 'verify', 'audit', 'approve'];
/** Who may see approvals and held grants: the humans deciding them and auditors. */
const APPROVAL_READERS: readonly TenantScope[] = ['approve', 'audit'];
const PUBLIC: Entry = { access: { kind: 'public' }, call: () => get('/') };

const publicAt = (path: string): Entry => ({ ...PUBLIC, call: () => get(path) });

const hashRead = (suffix: string): Entry => ({
  access: { kind: 'tenant', scopes: READERS },
  call: () => get(`/v1/delegations/${drA1.hash}${suffix}`),
  absent: () => get(`/v1/delegations/${ABSENT_HASH}${suffix}`),
  ids: () => [[drA1.hash, ABSENT_HASH]],
});

const MATRIX: Readonly<Record<string, Entry>> = {
  'GET /healthz': publicAt('/healthz'),
  'GET /readyz': publicAt('/readyz'),
  'GET /metrics': { access: { kind: 'admin' }, call: () => get('/metrics') },
  'GET /v1/keys': publicAt('/v1/keys'),
  'GET /.well-known/jwks.json': publicAt('/.well-known/jwks.json'),
  'GET /openapi.yaml': publicAt('/openapi.yaml'),
  'GET /openapi.json': publicAt('/openapi.json'),
  'GET /docs': publicAt('/docs'),

  'POST /v1/admin/tenants': { access: { kind: 'admin' }, call: () => post('/v1/admin/tenants', { name: 'matrix' }) },
  'GET /v1/admin/tenants': { access: { kind: 'admin' }, call: () => get('/v1/admin/tenants') },
  'POST /v1/admin/tenants/:tenant/roots': {
    access: { kind: 'admin', tenantParam: true },
    call: (w) => post(`/v1/admin/tenants/${w.A.id}/roots`, { did: KEYS.newRoot.did }),
    absent: () => post(`/v1/admin/tenants/${ABSENT_TENANT}/roots`, { did: KEYS.newRoot.did }),
    ids: (w) => [[w.A.id, ABSENT_TENANT]],
  },
  'GET /v1/admin/tenants/:tenant/roots': {
    access: { kind: 'admin', tenantParam: true },
    call: (w) => get(`/v1/admin/tenants/${w.A.id}/roots`),
    absent: () => get(`/v1/admin/tenants/${ABSENT_TENANT}/roots`),
    ids: (w) => [[w.A.id, ABSENT_TENANT]],
  },
  'DELETE /v1/admin/tenants/:tenant/roots/:did': {
    access: { kind: 'admin', tenantParam: true },
    call: (w) => del(`/v1/admin/tenants/${w.A.id}/roots/${w.spareRootDid}`),
    absent: (w) => del(`/v1/admin/tenants/${ABSENT_TENANT}/roots/${w.spareRootDid}`),
    ids: (w) => [[w.A.id, ABSENT_TENANT]],
  },
  'POST /v1/admin/tenants/:tenant/api-keys': {
    access: { kind: 'admin', tenantParam: true },
    call: (w) => post(`/v1/admin/tenants/${w.A.id}/api-keys`, { scopes: ['audit'], name: 'matrix' }),
    absent: () => post(`/v1/admin/tenants/${ABSENT_TENANT}/api-keys`, { scopes: ['audit'], name: 'matrix' }),
    ids: (w) => [[w.A.id, ABSENT_TENANT]],
  },
  'GET /v1/admin/tenants/:tenant/api-keys': {
    access: { kind: 'admin', tenantParam: true },
    call: (w) => get(`/v1/admin/tenants/${w.A.id}/api-keys`),
    absent: () => get(`/v1/admin/tenants/${ABSENT_TENANT}/api-keys`),
    ids: (w) => [[w.A.id, ABSENT_TENANT]],
  },
  'DELETE /v1/admin/api-keys/:id': { access: { kind: 'admin' }, call: (w) => del(`/v1/admin/api-keys/${w.spareKeyId}`) },
  'POST /v1/admin/api-keys/:id/rotate': {
    access: { kind: 'admin' },
    call: (w) => post(`/v1/admin/api-keys/${w.rotatableKeyId}/rotate`, { grace_seconds: 3600 }),
  },

  'POST /v1/delegations': {
    access: { kind: 'tenant', scopes: ['issue'], noKey: 'signature-path' },
    call: () => post('/v1/delegations', { receipt: matrixDr.jws }),
    // Another tenant's key extending A's chain must fare exactly as extending a chain nobody holds.
    absent: () => post('/v1/delegations', { receipt: orphanDr.jws }),
    // A submission, not a read: its parent is unknown to the caller's tenant, exactly as if it did not exist.
    otherTenantStatus: [422],
    ids: () => [
      [drA0.hash, ABSENT_HASH],
      [matrixDr.hash, orphanDr.hash],
    ],
  },
  'POST /v1/delegations/issue': {
    access: { kind: 'tenant', scopes: ['issue'] },
    call: () => post('/v1/delegations/issue', { ...ISSUE_BASE, jti: 'dr:sec-matrix-issue' }),
  },
  'GET /v1/delegations/:hash': hashRead(''),
  'GET /v1/delegations/:hash/chain': hashRead('/chain'),
  'GET /v1/delegations/:hash/tree': hashRead('/tree'),
  'GET /v1/delegations/:hash/invocations': hashRead('/invocations'),
  'POST /v1/delegations/:hash/revoke': {
    access: { kind: 'tenant', scopes: ['issue'], admin: true },
    call: () => post(`/v1/delegations/${drLive.hash}/revoke`, { confirm: true, reason: 'matrix' }),
    absent: () => post(`/v1/delegations/${ABSENT_HASH}/revoke`, { confirm: true, reason: 'matrix' }),
    ids: () => [[drLive.hash, ABSENT_HASH]],
  },
  'POST /v1/verify': verifyEntry('/v1/verify'),
  'POST /v1/verify/dry-run': verifyEntry('/v1/verify/dry-run'),
  'POST /verify': verifyEntry('/verify'),
  'POST /v1/invocations/:jti/actuals': {
    access: { kind: 'tenant', scopes: ['report'] },
    call: () => post('/v1/invocations/inv:sec-unmetered/actuals', ACTUAL_BASE),
    absent: () => post(`/v1/invocations/${ABSENT_JTI}/actuals`, ACTUAL_BASE),
    ids: () => [['inv:sec-unmetered', ABSENT_JTI]],
  },
  // Allowed invocations only: B's own denials hold the hashes B's caller sent (A's chain, in the
  // matrix's own verify variants), which the leak check cannot tell from A's data. Denials across
  // tenants are covered by test/service/invocation-filters.test.ts.
  'GET /v1/invocations': {
    access: { kind: 'tenant', scopes: ['audit'] },
    call: () => get('/v1/invocations?limit=200&outcome=allowed'),
    otherTenantReadsOwn: true,
  },
  'GET /v1/invocations/:jti': {
    access: { kind: 'tenant', scopes: READERS },
    call: () => get(`/v1/invocations/${String(invConsumed.payload['jti'])}`),
    absent: () => get(`/v1/invocations/${ABSENT_JTI}`),
    ids: () => [[String(invConsumed.payload['jti']), ABSENT_JTI]],
  },
  'GET /v1/service-receipts': {
    access: { kind: 'tenant', scopes: ['audit'] },
    call: () => get('/v1/service-receipts?limit=500'),
    otherTenantReadsOwn: true,
  },
  // The transparency log (both tenants' receipts integrated in beforeAll): each audit key reads
  // its own tenant's log; A's receipt is a 404 for B, as a missing one. The cosignature names a
  // log no tenant has: A and B get 404.
  'GET /v1/log': { access: { kind: 'tenant', scopes: ['audit'] }, call: () => get('/v1/log'), otherTenantReadsOwn: true },
  'GET /v1/log/checkpoint': {
    access: { kind: 'tenant', scopes: ['audit'] },
    call: () => get('/v1/log/checkpoint'),
    otherTenantReadsOwn: true,
  },
  'GET /v1/log/checkpoints/:size': {
    access: { kind: 'tenant', scopes: ['audit'] },
    call: () => get('/v1/log/checkpoints/0'),
    otherTenantReadsOwn: true,
  },
  'GET /v1/log/tile/:path{.+}': {
    access: { kind: 'tenant', scopes: ['audit'] },
    call: () => get('/v1/log/tile/0/000.p/1'),
    otherTenantReadsOwn: true,
  },
  'GET /v1/log/service-receipts/:id/proof': {
    access: { kind: 'tenant', scopes: ['audit'] },
    call: (w) => get(`/v1/log/service-receipts/${w.logReceiptA}/proof`),
    absent: () => get('/v1/log/service-receipts/999999999/proof'),
    ids: (w) => [[String(w.logReceiptA), '999999999']],
  },
  'GET /v1/log/consistency': {
    access: { kind: 'tenant', scopes: ['audit'] },
    call: () => get('/v1/log/consistency?from=1&to=1'),
    otherTenantReadsOwn: true,
  },
  'POST /v1/log/cosignatures': {
    access: { kind: 'tenant', scopes: ['audit'] },
    call: () => post('/v1/log/cosignatures', MATRIX_COSIGNATURE),
  },

  // Issue 13: tool catalogs, approvals, held grants, explain.
  'POST /v1/admin/tenants/:tenant/tools': {
    access: { kind: 'admin', tenantParam: true },
    call: (w) => post(`/v1/admin/tenants/${w.A.id}/tools`, { ...CATALOG_A[1], base_version: CATALOG_A.length }),
    absent: () => post(`/v1/admin/tenants/${ABSENT_TENANT}/tools`, { ...CATALOG_A[1], base_version: CATALOG_A.length }),
    ids: (w) => [[w.A.id, ABSENT_TENANT]],
  },
  'GET /v1/admin/tenants/:tenant/tools': {
    access: { kind: 'admin', tenantParam: true },
    call: (w) => get(`/v1/admin/tenants/${w.A.id}/tools`),
    absent: () => get(`/v1/admin/tenants/${ABSENT_TENANT}/tools`),
    ids: (w) => [[w.A.id, ABSENT_TENANT]],
  },
  'GET /v1/tools': {
    access: { kind: 'tenant', scopes: CATALOG_READERS },
    call: () => get('/v1/tools'),
    // B has a catalog of its own (the harness publishes one), so this is a 200 that must show none of A's.
    otherTenantReadsOwn: true,
  },
  'GET /v1/tools/versions/:version': {
    access: { kind: 'tenant', scopes: CATALOG_READERS },
    // Versions are numbered per tenant: A has two, B one, so B asking for 2 must fare as asking for 99.
    call: () => get(`/v1/tools/versions/${CATALOG_A.length}`),
    absent: () => get('/v1/tools/versions/99'),
    ids: () => [[String(CATALOG_A.length), '99']],
  },
  'GET /v1/approvals': {
    access: { kind: 'tenant', scopes: APPROVAL_READERS },
    call: () => get('/v1/approvals'),
    otherTenantReadsOwn: true,
  },
  'GET /v1/approvals/:id': {
    access: { kind: 'tenant', scopes: APPROVAL_READERS },
    call: (w) => get(`/v1/approvals/${w.approvalId}`),
    absent: () => get(`/v1/approvals/${ABSENT_APPROVAL}`),
    ids: (w) => [[w.approvalId, ABSENT_APPROVAL]],
  },
  'POST /v1/approvals/:id/approve': decision('approvals', 'approve'),
  'POST /v1/approvals/:id/reject': decision('approvals', 'reject'),
  // Keyless: the signature is the authority and any key is ignored. Signed by a DID tenant A does not list, so
  // every caller must get the same 404 that an unknown approval gets, decide nothing and see nothing of A.
  'POST /v1/approvals/:id/signed-decision': {
    access: { kind: 'public' },
    publicStatus: [404],
    call: (w) =>
      post(`/v1/approvals/${w.approvalId}/signed-decision`, {
        signed_decision: createApprovalDecision({
          signer: MATRIX_OUTSIDER,
          approvalId: w.approvalId,
          decision: 'approve',
          reason: 'matrix',
          iat: w.svc.clock.now,
          jti: 'apd:matrix',
        }).jws,
      }),
  },
  'GET /v1/grants': {
    access: { kind: 'tenant', scopes: APPROVAL_READERS },
    call: () => get('/v1/grants'),
    otherTenantReadsOwn: true,
  },
  'POST /v1/grants/:hash/approve': decision('grants', 'approve'),
  'POST /v1/grants/:hash/reject': decision('grants', 'reject'),
  'POST /v1/explain': {
    access: { kind: 'tenant', scopes: CATALOG_READERS },
    call: () => post('/v1/explain', { dr_chain: [drA0.hash, drA1.hash], args: { tool: 'web_search', estimated_cost_usd: 0.5 } }),
    absent: () =>
      post('/v1/explain', { dr_chain: [ABSENT_HASH, recordHash('absent-leaf')], args: { tool: 'web_search', estimated_cost_usd: 0.5 } }),
    ids: () => [
      [drA0.hash, ABSENT_HASH],
      [drA1.hash, recordHash('absent-leaf')],
    ],
  },
};

/** Approving or rejecting tenant A's pending approval or held grant: the approve scope only. */
function decision(what: 'approvals' | 'grants', verb: 'approve' | 'reject'): Entry {
  const target = (w: Ctx) => (what === 'approvals' ? w.approvalId : drHeld.hash);
  const absent = what === 'approvals' ? ABSENT_APPROVAL : ABSENT_HASH;
  return {
    access: { kind: 'tenant', scopes: ['approve'] },
    call: (w) => post(`/v1/${what}/${target(w)}/${verb}`, DECISION),
    absent: () => post(`/v1/${what}/${absent}/${verb}`, DECISION),
    ids: (w) => [[target(w), absent]],
  };
}

// ---------------------------------------------------------------- callers

type Variant = 'no key' | 'malformed key' | 'wrong-scope key' | "another tenant's key" | 'admin key on a tenant route' | 'revoked key';
const VARIANTS: readonly Variant[] = [
  'no key',
  'malformed key',
  'wrong-scope key',
  "another tenant's key",
  'admin key on a tenant route',
  'revoked key',
];

function malformedHeaders(w: Ctx): string[] {
  const k = w.A.keys.all;
  return [
    '',
    'Bearer',
    'Bearer ',
    `Basic ${Buffer.from(`user:${k}`).toString('base64')}`,
    `Token ${k}`,
    k,
    `Bearer ${k} extra`,
    `Bearer ${k}x`,
    `Bearer ${k.slice(0, -1)}`,
    `Bearer ${k.slice(0, -1)}${k.endsWith('A') ? 'B' : 'A'}`,
    `Bearer bt_${'A'.repeat(43)}`,
    `Bearer ${k.replace('bt_', 'bt_admin_')}`,
    `Bearer ${w.svc.adminKey}x`,
    `Bearer ${'x'.repeat(600)}`,
    `Bearer ${k}, Bearer ${k}`,
  ];
}

/** A tenant-A key holding none of `scopes` (null when every tenant scope is accepted). */
function wrongScopeKey(w: Ctx, scopes: readonly TenantScope[]): string | null {
  const other = TENANT_SCOPES.find((s) => !scopes.includes(s));
  return other ? w.A.keys[other] : null;
}

interface Plan {
  /** Authorization header values to try (undefined: none). */
  readonly headers: readonly (string | undefined)[];
  readonly expect: readonly number[];
  /** Another tenant addressing A's object: compare with the absent object. */
  readonly compareAbsent?: boolean;
  readonly why?: string;
}

/** Why a caller does not apply to a route, or null when it does (decided without a world). */
function naReason(e: Entry, v: Variant): string | null {
  const a = e.access;
  if (a.kind === 'public') return null;
  if (v === 'no key' && a.kind === 'tenant' && a.noKey === 'signature-path') {
    return 'without a key this route takes self-authenticating signed records (DESIGN 1: agents prove themselves by signature)';
  }
  if (v === 'wrong-scope key' && a.kind === 'tenant' && a.scopes.length === TENANT_SCOPES.length)
    return 'every tenant scope may call this route';
  if (v === "another tenant's key" && a.kind === 'tenant' && !e.otherTenantReadsOwn && !e.absent) {
    return 'the route names no tenant-owned object: another tenant acts on its own data';
  }
  if (v === 'admin key on a tenant route' && a.kind === 'admin') return 'an admin route';
  if (v === 'admin key on a tenant route' && a.kind === 'tenant' && a.admin) return 'the admin key may revoke any DR (DESIGN 5)';
  return null;
}

/** What each caller must get on a route where it applies. */
function plan(e: Entry, v: Variant, w: Ctx): Plan {
  const a = e.access;
  const bearer = (k: string) => `Bearer ${k}`;
  if (a.kind === 'public') {
    // Public routes ignore credentials entirely, good or bad, and show no tenant data.
    const header = {
      'no key': undefined,
      'malformed key': 'Bearer ',
      'wrong-scope key': bearer(w.A.keys.audit),
      "another tenant's key": bearer(w.B.keys.all),
      'admin key on a tenant route': bearer(w.svc.adminKey),
      'revoked key': bearer(w.A.revokedKey),
    }[v];
    return { headers: [header], expect: e.publicStatus ?? [200] };
  }
  switch (v) {
    case 'no key':
      return { headers: [undefined], expect: [401] };
    case 'malformed key':
      return { headers: malformedHeaders(w), expect: [401] };
    case 'revoked key':
      return { headers: [bearer(w.A.revokedKey)], expect: [401] };
    case 'wrong-scope key': {
      if (a.kind === 'admin') return { headers: [bearer(w.A.keys.all)], expect: [403] };
      return { headers: [bearer(wrongScopeKey(w, a.scopes)!)], expect: [403] };
    }
    case "another tenant's key": {
      if (a.kind === 'admin') {
        // B's key on a route naming tenant A: A does not exist for B.
        return a.tenantParam
          ? { headers: [bearer(w.B.keys.all)], expect: [404], compareAbsent: true }
          : { headers: [bearer(w.B.keys.all)], expect: [403] };
      }
      const k = bearer(w.B.keys[a.scopes[0]!]);
      if (e.otherTenantReadsOwn) return { headers: [k], expect: [200], why: 'lists only its own tenant' };
      return { headers: [k], expect: e.otherTenantStatus ?? [404], compareAbsent: true };
    }
    case 'admin key on a tenant route':
      return { headers: [bearer(w.svc.adminKey)], expect: [403] };
  }
}

// ---------------------------------------------------------------- running

let ctx: Ctx;

beforeAll(async () => {
  const world = await buildWorld();
  const admin = { key: world.svc.adminKey };
  // A root and a key that exist only to be the targets of the DELETE routes.
  const spareRoot = fixedKey('matrix-spare-root');
  const r = await world.svc.call('POST', `/v1/admin/tenants/${world.A.id}/roots`, { ...admin, json: { did: spareRoot.did } });
  const k = await world.svc.call('POST', `/v1/admin/tenants/${world.A.id}/api-keys`, {
    ...admin,
    json: { scopes: ['audit'], name: 'matrix spare' },
  });
  const rk = await world.svc.call('POST', `/v1/admin/tenants/${world.A.id}/api-keys`, {
    ...admin,
    json: { scopes: ['audit'], name: 'matrix rotatable' },
  });
  if (r.status !== 201 || k.status !== 201 || rk.status !== 201) throw new Error(`matrix setup: ${r.status} ${k.status} ${rk.status}`);
  await integrateOnce({
    store: world.svc.store,
    signer: world.svc.deps.signer,
    log: silentLogger,
    logName: world.svc.deps.config.tlogName,
  });
  const [first] = await rows<{ id: number }>(
    world.svc.store.db,
    sql`select r.id::int as id from receipts r join log_leaves l on l.receipt_id = r.id where r.tenant_id = ${world.A.id} order by r.id limit 1`,
  );
  if (!first) throw new Error('matrix setup: tenant A has no logged receipt');
  ctx = {
    ...world,
    spareRootDid: spareRoot.did,
    spareKeyId: k.body.id,
    secretsA: [...world.secretsA, k.body.id, rk.body.id],
    logReceiptA: first.id,
    rotatableKeyId: rk.body.id,
  };
}, 120_000);

afterAll(async () => ctx?.svc.close());

function request(c: Call, header: string | undefined): Req {
  const headers: Record<string, string> = {};
  if (header !== undefined) headers['authorization'] = header;
  if (c.body !== undefined) headers['content-type'] = 'application/json';
  return { method: c.method, path: c.path, headers, ...(c.body !== undefined ? { body: JSON.stringify(c.body) } : {}) };
}

/** A refusal without its request id and with identifiers masked, for "indistinguishable from absent". */
function masked(res: Res, ids: readonly [string, string][]): unknown {
  const { request_id: _rid, ...body } = (res.json ?? {}) as Record<string, unknown>;
  let text = JSON.stringify(body);
  for (const [a, b] of ids) text = text.replaceAll(a, '<id>').replaceAll(b, '<id>');
  return { status: res.status, body: JSON.parse(text) as unknown };
}

const isVerify = (route: string) => route === 'POST /v1/verify' || route === 'POST /v1/verify/dry-run' || route === 'POST /verify';

async function runVariant(route: string, e: Entry, v: Variant): Promise<void> {
  const p = plan(e, v, ctx);
  const c = e.call(ctx);
  const problems: string[] = [];
  const refusals: unknown[] = [];
  let last = '';
  for (const header of p.headers) {
    const req = request(c, header);
    const before = await snapshot(ctx.svc);
    const res = await send(ctx.svc, req);
    const after = await snapshot(ctx.svc);
    last = `${describeReq(req)}\n${describeRes(res)}`;
    const where = `[${header === undefined ? 'no Authorization' : header.slice(0, 40)}]`;
    if (!p.expect.includes(res.status)) problems.push(`${where} status ${res.status}, expected ${p.expect.join(' or ')}\n${last}`);
    if (res.status >= 400) {
      problems.push(...envelopeProblems(req, res, { verifyRoute: isVerify(route) }).map((x) => `${where} envelope: ${x}`));
      refusals.push((res.json as { error?: unknown } | undefined)?.error);
    }
    // Only tenant A (and the admin) may see A's data; public routes show no tenant's data.
    const secrets = e.access.kind === 'public' ? [...ctx.secretsA, ...ctx.secretsB] : ctx.secretsA;
    const shown = leaked(res.text, secrets, req);
    if (shown.length > 0)
      problems.push(`${where} response shows tenant data it must not: ${shown.map((s) => s.slice(0, 40)).join(', ')}\n${last}`);
    problems.push(...storageChanges(before, after, { allowDenials: isVerify(route) }).map((x) => `${where} stored: ${x}`));
    if (p.compareAbsent && e.absent) {
      const absentReq = request(e.absent(ctx), header);
      const absentRes = await send(ctx.svc, absentReq);
      const ids = e.ids?.(ctx) ?? [];
      if (!deepEqual(masked(res, ids), masked(absentRes, ids))) {
        problems.push(
          `${where} another tenant's object is distinguishable from a missing one:\n  theirs: ${JSON.stringify(masked(res, ids))}\n  absent: ${JSON.stringify(masked(absentRes, ids))}`,
        );
      }
    }
  }
  // No oracle: every unusable key gets the very same 401.
  if (v === 'malformed key' && e.access.kind !== 'public') {
    for (const r of refusals)
      if (!deepEqual(r, refusals[0]))
        problems.push(`401 bodies differ between malformed keys: ${JSON.stringify(r)} vs ${JSON.stringify(refusals[0])}`);
  }
  if (problems.length > 0) throw new Error(`${route} × ${v}\n${problems.join('\n')}`);
}

// Collected from the app itself, before any world exists: route registration touches no dependency.
const ROUTES = [
  ...new Set(
    createApp({} as ServiceDeps)
      .routes.filter((r) => !(r.method === 'ALL' && (r.path === '/*' || r.path === '*')))
      .map((r) => `${r.method} ${r.path}`),
  ),
];

describe('auth matrix', () => {
  it('has an entry for every route of the app, and none for routes that do not exist', () => {
    expect(
      ROUTES.filter((r) => !(r in MATRIX)),
      'routes without an auth-matrix entry',
    ).toEqual([]);
    expect(
      Object.keys(MATRIX).filter((r) => !ROUTES.includes(r)),
      'matrix entries for missing routes',
    ).toEqual([]);
    expect(appRoutes(ctx).sort()).toEqual([...ROUTES].sort());
  });

  for (const route of ROUTES) {
    const e = MATRIX[route];
    describe(route, () => {
      if (!e) {
        it('has an auth-matrix entry', () => {
          throw new Error(`${route} has no entry in MATRIX: decide who may call it`);
        });
        return;
      }
      for (const v of VARIANTS) {
        // Which combinations apply is decided without a world: keys only fill in the headers.
        const na = naReason(e, v);
        if (na) it.skip(`${v}: n/a, ${na}`, () => {});
        else it(v, () => runVariant(route, e, v));
      }
    });
  }
});

describe('owner positive controls (the 404s above are not vacuous)', () => {
  for (const [route, e] of Object.entries(MATRIX)) {
    if (e.access.kind !== 'tenant' || !route.startsWith('GET ')) continue;
    it(route, async () => {
      const c = e.call(ctx);
      const res = await send(ctx.svc, request(c, `Bearer ${ctx.A.keys.all}`));
      expect(res.status, describeRes(res)).toBe(200);
      const id = e.ids?.(ctx)[0]?.[0];
      if (id) expect(res.text).toContain(id);
    });
  }
});
