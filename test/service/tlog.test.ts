/**
 * The transparency log on real PostgreSQL: receipts become leaves in commit
 * order, one integrator per database, served proofs verify offline, tenants
 * are isolated, and `auditLog` finds receipts removed or rewritten behind
 * the service's back, and split views.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cosignatureSigner, cosignedMessage } from '../../src/protocol/cosignature.js';
import { leafHash, rootOf } from '../../src/protocol/merkle.js';
import { formatEntryBundle } from '../../src/protocol/tiles.js';
import { request as httpRequest } from 'node:http';
import { serve } from '@hono/node-server';
import {
  COSIGNATURE_V1,
  ed25519NoteSigner,
  formatVerifierKey,
  NOTE_ED25519,
  parseNote,
  signNote,
  verifierKey,
} from '../../src/protocol/note.js';
import { publicKeyFromSeed, signEd25519 } from '../../src/protocol/ed25519.js';
import {
  auditLog,
  serviceReceiptLeafHash,
  verifyCheckpointConsistency,
  verifyServiceReceiptInclusion,
  type DecisionCheckOptions,
  type LogTrust,
} from '../../src/sdk/audit.js';
import { startServer } from '../../src/server.js';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { logNameOf, signCheckpoint } from '../../src/service/log-tree.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { silentLogger } from '../../src/service/log.js';
import { openStore, type Store } from '../../src/store/db.js';
import { rows } from '../../src/store/rows.js';
import { tryIntegratorLock } from '../../src/store/log.js';
import { createDatabase, freshPglite } from '../setup/db.js';
import { loadConfig } from '../../src/config.js';
import {
  callerOf,
  createTenantKey,
  serverConfigOf,
  setupTenant,
  startTestService,
  type TestService,
  type TestTenant,
} from '../support/service.js';
import { createApp } from '../../src/service/app.js';
import { createServiceDeps } from '../../src/service/deps.js';

let svc: TestService;
let tenant: TestTenant;
let other: TestTenant;

beforeAll(async () => {
  svc = await startTestService({ env: { BATON_TLOG_NAME: 'baton.test' }, pool: 6 });
  tenant = await setupTenant(svc, 'acme');
  other = await setupTenant(svc, 'globex');
});
afterAll(() => svc.close());

const integrator = () => ({ store: svc.store, signer: svc.deps.signer, log: silentLogger, logName: 'baton.test' });

// Denials naming no chain: signed receipts like any other, with no decision records for the audit to fetch.
/** A denial's service receipt in `tenantId`, signed at `at` (default the service's clock). */
async function receipt(tenantId: string, n = 0, db = svc.store.db, at = svc.clock.now) {
  return recordServiceReceipt(db, svc.deps.signer, {
    tenantId,
    kind: 'invocation.denied',
    subject: `inv:${n}`,
    data: { n },
    now: at,
  });
}

async function trustOf(t: TestTenant): Promise<LogTrust> {
  const info = await svc.call('GET', '/v1/log', { key: t.keys.audit });
  expect(info.status).toBe(200);
  return { origin: info.body.origin, logKeys: info.body.verifier_keys };
}

async function leafOrder(tenantId: string): Promise<number[]> {
  const found = await rows<{ receipt_id: string | number }>(
    svc.store.db,
    sql`select receipt_id from log_leaves where tenant_id = ${tenantId} order by leaf_index`,
  );
  return found.map((r) => Number(r.receipt_id));
}

const appFetch = (url: string, init: { headers: Record<string, string> }) => Promise.resolve(svc.app.request(url, init));

describe('integration', () => {
  it('turns every committed service receipt into a leaf, signs a checkpoint, and proofs verify offline', async () => {
    const made: Awaited<ReturnType<typeof receipt>>[] = [];
    for (let i = 0; i < 300; i++) made.push(await receipt(tenant.id, i));
    const round = await integrateOnce(integrator());
    expect(round.locked).toBe(true);
    expect(await leafOrder(tenant.id)).toEqual(made.map((r) => r.id));

    const trust = await trustOf(tenant);
    expect(trust.origin).toBe(`baton.test/baton/${tenant.id}`);
    const cp = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    expect(cp.body).toContain(`\n300\n`);
    const root = parseNote(cp.body).text.split('\n')[2];
    expect(root).toBe(Buffer.from(rootOf(made.map((r) => serviceReceiptLeafHash(r.jws)))).toString('base64'));

    for (const r of [made[0]!, made[255]!, made[256]!, made[299]!]) {
      const p = await svc.call('GET', `/v1/log/service-receipts/${r.id}/proof`, { key: tenant.keys.audit });
      expect(p.status).toBe(200);
      expect(verifyServiceReceiptInclusion(r.jws, p.body.proof, trust, svc.clock.now).index).toBe(p.body.leaf_index);
      // Another receipt does not pass with this proof.
      expect(() => verifyServiceReceiptInclusion(made[1]!.jws, p.body.proof, trust, svc.clock.now)).toThrow();
    }
  });

  it('keeps tenants apart: another tenant gets a 404 for a service receipt, and its own log', async () => {
    const r = await receipt(tenant.id, 1000);
    await integrateOnce(integrator());
    const theirs = await svc.call('GET', `/v1/log/service-receipts/${r.id}/proof`, { key: other.keys.audit });
    expect(theirs.status).toBe(404);
    const info = await svc.call('GET', '/v1/log', { key: other.keys.audit });
    expect(info.body).toMatchObject({ origin: `baton.test/baton/${other.id}`, tree_size: 0 });
    const noScope = await svc.call('GET', '/v1/log', { key: tenant.keys.verify });
    expect(noScope.status).toBe(403);
    expect((await svc.call('GET', '/v1/log')).status).toBe(401);
  });

  it('answers 404 pending before integration, then the proof', async () => {
    const r = await receipt(tenant.id, 2000);
    const before = await svc.call('GET', `/v1/log/service-receipts/${r.id}/proof`, { key: tenant.keys.audit });
    expect(before.status).toBe(404);
    expect(before.body.error.details).toEqual({ status: 'pending' });
    await integrateOnce(integrator());
    expect((await svc.call('GET', `/v1/log/service-receipts/${r.id}/proof`, { key: tenant.keys.audit })).status).toBe(200);
  });

  it('indexes a late commit after the leaves integrated before it: readers paging by index never skip', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let lateId = 0;
    const late = svc.store.db.transaction(async (tx) => {
      lateId = (await receipt(tenant.id, 3000, tx)).id;
      await gate;
    });
    while (lateId === 0) await new Promise((r) => setTimeout(r, 5));
    const early = await receipt(tenant.id, 3001);
    expect(early.id).toBeGreaterThan(lateId);
    await integrateOnce(integrator());
    const order1 = await leafOrder(tenant.id);
    expect(order1.at(-1)).toBe(early.id);
    expect(order1).not.toContain(lateId);
    release();
    await late;
    await integrateOnce(integrator());
    const order2 = await leafOrder(tenant.id);
    expect(order2.slice(0, order1.length)).toEqual(order1);
    expect(order2.at(-1)).toBe(lateId);
  });

  it('runs one integrator per database: a second node skips while the first holds the lock', async () => {
    const second = await openStore({ databaseUrl: svc.url, max: 3 });
    try {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let held = false;
      const holder = svc.store.db.transaction(async (tx) => {
        held = await tryIntegratorLock(tx);
        await gate;
      });
      while (!held) await new Promise((r) => setTimeout(r, 5));
      await receipt(tenant.id, 4000);
      expect(await integrateOnce({ ...integrator(), store: second })).toEqual({ locked: false, leaves: 0, tenants: 0 });
      release();
      await holder;
      // Two nodes racing over many receipts: every receipt gets exactly one index, 0..n-1, and no
      // round fails (a node that took the lock as another's round committed once read the state
      // from before that round and appended the same indexes again).
      for (let race = 0; race < 4; race++) {
        await Promise.all(Array.from({ length: 40 }, (_, i) => receipt(tenant.id, 5000 + 100 * race + i)));
        await Promise.all([
          ...Array.from({ length: 5 }, () => integrateOnce(integrator())),
          ...Array.from({ length: 5 }, () => integrateOnce({ ...integrator(), store: second })),
        ]);
      }
      await integrateOnce(integrator());
      const [count] = await rows<{ n: number; max: number; receipts: number }>(
        svc.store.db,
        sql`select count(*)::int as n, max(leaf_index)::int as max,
          (select count(*)::int from receipts where tenant_id = ${tenant.id}) as receipts
          from log_leaves where tenant_id = ${tenant.id}`,
      );
      expect(count).toEqual({ n: count!.receipts, max: count!.receipts - 1, receipts: count!.receipts });
    } finally {
      await second.close();
    }
  });

  it('serves consistency proofs between sizes, and tiles that rebuild the root', async () => {
    const trust = await trustOf(tenant);
    const old = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    for (let i = 0; i < 20; i++) await receipt(tenant.id, 6000 + i);
    await integrateOnce(integrator());
    const neu = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const oldSize = Number(old.body.split('\n')[1]);
    const newSize = Number(neu.body.split('\n')[1]);
    const proof = await svc.call('GET', `/v1/log/consistency?from=${oldSize}&to=${newSize}`, { key: tenant.keys.audit });
    expect(proof.status).toBe(200);
    expect(verifyCheckpointConsistency(old.body, neu.body, proof.body.proof, trust, svc.clock.now).consistent).toBe(true);
    const full = await svc.app.request('/v1/log/tile/0/000', { headers: { authorization: `Bearer ${tenant.keys.audit}` } });
    expect(full.status).toBe(200);
    expect(full.headers.get('cache-control')).toContain('immutable');
    expect(full.headers.get('vary')).toBe('Authorization');
    // A partial tile never changes at its path either (C2SP tlog-tiles): the path names its width.
    const partialWidth = newSize % 256;
    if (partialWidth > 0) {
      const partial = await svc.app.request(`/v1/log/tile/0/${String(Math.floor(newSize / 256)).padStart(3, '0')}.p/${partialWidth}`, {
        headers: { authorization: `Bearer ${tenant.keys.audit}` },
      });
      expect(partial.status).toBe(200);
      expect(partial.headers.get('cache-control')).toContain('immutable');
    }
    expect((await full.arrayBuffer()).byteLength).toBe(256 * 32);
    const beyond = await svc.call('GET', '/v1/log/tile/2/000', { key: tenant.keys.audit });
    expect(beyond.status).toBe(404);
    expect((await svc.call('GET', '/v1/log/tile/0/0', { key: tenant.keys.audit })).status).toBe(400);
    // A query is refused, as on the log's other routes.
    const queried = await svc.call('GET', '/v1/log/tile/0/000?x=1', { key: tenant.keys.audit });
    expect(queried.status).toBe(400);
    expect(queried.body.error).toMatchObject({ code: 'INVALID_REQUEST', message: 'A tile path takes no query parameters.' });
  });

  it('serves a tile only at its canonical path, judged as sent: no escaped or dotted spelling', async () => {
    await receipt(tenant.id, 9000);
    await integrateOnce(integrator());
    const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
      const s = serve({ fetch: svc.app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
    });
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    // node's http client sends the path as given (fetch would normalise the dots).
    const get = (path: string) =>
      new Promise<{ status: number; cache: string | undefined }>((resolve, reject) => {
        const req = httpRequest({ host: '127.0.0.1', port, path, headers: { authorization: `Bearer ${tenant.keys.audit}` } }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, cache: res.headers['cache-control'] }));
        });
        req.on('error', reject);
        req.end();
      });
    try {
      expect((await get('/v1/log/tile/0/000.p/1')).status).toBe(200);
      expect((await get('/v1/log/tile/entries/000.p/1')).status).toBe(200);
      for (const path of [
        '/v1/log/tile/0%2F000.p/1',
        '/v1/log/tile/%30/000.p/1',
        '/v1/log/tile/0/%30%30%30.p/1',
        '/v1/log/tile/0/000.p%2F1',
        '/v1/log/tile/0/000%2Ep/1',
        '/v1/log/tile/entries%2F000.p/1',
        '/v1/log/tile/0/x001/../000.p/1',
        '/v1/log/tile/0/000.p/1#x',
      ]) {
        const res = await get(path);
        expect(res.status, path).toBe(400);
        expect(res.cache ?? '', path).not.toMatch(/immutable/);
      }
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('refuses bad parameters in the envelope every route uses: INVALID_REQUEST, details.issues by field', async () => {
    const key = tenant.keys.audit;
    const fields = (res: { body: { error: { details: { issues: { field: string }[] } } } }) =>
      res.body.error.details.issues.map((i) => i.field).sort();
    const query = await svc.call('GET', '/v1/log/consistency?from=01&to=x', { key });
    expect(query.status).toBe(400);
    expect(query.body.error).toMatchObject({ code: 'INVALID_REQUEST', details: { what: 'query' } });
    expect(query.body.error.message).toMatch(/^The query is not valid: from /);
    expect(fields(query)).toEqual(['from', 'to']);
    const param = await svc.call('GET', '/v1/log/checkpoints/01', { key });
    expect(param.body.error).toMatchObject({ code: 'INVALID_REQUEST', details: { what: 'path' } });
    expect(fields(param)).toEqual(['size']);
    // In Baton's words, as every route says it: a missing parameter is required, not zod's "Invalid input".
    const missing = await svc.call('GET', '/v1/log/consistency?old=1&new=2', { key });
    expect(missing.body.error.details.issues).toEqual(
      expect.arrayContaining([
        { field: 'from', message: 'is required (string)' },
        { field: 'old', message: 'is not a field Baton accepts here' },
      ]),
    );
    expect(JSON.stringify(missing.body.error)).not.toMatch(/Invalid input|expected string/);
    // The same mistake on a route outside the log gets the same shape.
    const receipts = await svc.call('GET', '/v1/service-receipts?after=01', { key });
    expect(receipts.body.error).toMatchObject({ code: 'INVALID_REQUEST', details: { what: 'query' } });
    expect(fields(receipts)).toEqual(['after']);
  });
});

describe('append-only', () => {
  it('refuses UPDATE, DELETE and TRUNCATE on every log table, even of no rows', async () => {
    // drizzle wraps the database error; its cause carries the trigger's message.
    const refusal = async (text: string) => {
      try {
        await svc.store.db.execute(sql.raw(text));
        return 'accepted';
      } catch (e) {
        return String((e as { cause?: unknown }).cause ?? e);
      }
    };
    for (const table of ['log_leaves', 'log_hashes', 'log_checkpoints', 'log_cosignatures']) {
      expect(await refusal(`delete from ${table} where false`)).toMatch(/append-only: DELETE refused/);
      expect(await refusal(`update ${table} set tenant_id = tenant_id where false`)).toMatch(/append-only: UPDATE refused/);
      expect(await refusal(`truncate ${table}`)).toMatch(/append-only: TRUNCATE refused/);
    }
    expect(await refusal(`update log_name set name = name where false`)).toMatch(/append-only: UPDATE refused/);
    expect(await refusal(`delete from log_name where false`)).toMatch(/append-only: DELETE refused/);
  });
});

describe('witnesses', () => {
  it('stores a cosignature of a checkpoint the log signed, and clients can require it', async () => {
    await receipt(tenant.id, 8000);
    await integrateOnce(integrator());
    const trust = await trustOf(tenant);
    const cp = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const seed = randomBytes(32);
    const witnessKey = verifierKey('witness.example', COSIGNATURE_V1, publicKeyFromSeed(seed));
    const cosigned = signNote(parseNote(cp.body), [cosignatureSigner('witness.example', seed, svc.clock.now)]);
    const sent = await svc.call('POST', '/v1/log/cosignatures', {
      key: tenant.keys.audit,
      json: { witness_key: formatVerifierKey(witnessKey), checkpoint: cosigned },
    });
    expect(sent.status).toBe(201);
    const again = await svc.call('POST', '/v1/log/cosignatures', {
      key: tenant.keys.audit,
      json: { witness_key: formatVerifierKey(witnessKey), checkpoint: cosigned },
    });
    expect(again.status).toBe(200);
    const served = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const need1 = { ...trust, witnesses: [formatVerifierKey(witnessKey)], requiredCosignatures: 1 };
    const someReceipt = await rows<{ id: string | number; jws: string }>(
      svc.store.db,
      sql`select r.id, r.jws from receipts r join log_leaves l on l.receipt_id = r.id where r.tenant_id = ${tenant.id} limit 1`,
    );
    const size = served.body.split('\n')[1];
    const p = await svc.call('GET', `/v1/log/service-receipts/${someReceipt[0]!.id}/proof?tree_size=${size}`, { key: tenant.keys.audit });
    expect(p.status, JSON.stringify(p.body)).toBe(200);
    expect(verifyServiceReceiptInclusion(someReceipt[0]!.jws, p.body.proof, need1, svc.clock.now).checkpoint.cosignatures).toHaveLength(1);
    // A size the log never signed says so, and names the latest, rather than blame the identifier.
    const unsigned = await svc.call('GET', `/v1/log/service-receipts/${someReceipt[0]!.id}/proof?tree_size=${Number(size) + 1000}`, {
      key: tenant.keys.audit,
    });
    expect(unsigned.status).toBe(404);
    expect(unsigned.body.error).toMatchObject({
      message: `This log never signed a checkpoint of size ${Number(size) + 1000}; its latest is of size ${size}.`,
      details: { tree_size: Number(size) },
      suggestion: expect.stringMatching(/Omit tree_size/),
    });
    const other = verifierKey('witness2.example', COSIGNATURE_V1, publicKeyFromSeed(randomBytes(32)));
    expect(() =>
      verifyServiceReceiptInclusion(
        someReceipt[0]!.jws,
        p.body.proof,
        { ...trust, witnesses: [formatVerifierKey(other)], requiredCosignatures: 1 },
        svc.clock.now,
      ),
    ).toThrow(/witness/i);

    // A checkpoint this log never signed is refused.
    const forged = signNote(parseNote(signCheckpoint(svc.deps.signer, trust.origin, 999_999, new Uint8Array(32))), [
      cosignatureSigner('witness.example', seed, svc.clock.now),
    ]);
    const refused = await svc.call('POST', '/v1/log/cosignatures', {
      key: tenant.keys.audit,
      json: { witness_key: formatVerifierKey(witnessKey), checkpoint: forged },
    });
    expect(refused.status).toBe(404);
  });

  it('a cosignature dated past 2^53 is refused as dated in the future, not as a bad signature', async () => {
    await receipt(tenant.id, 8050);
    await integrateOnce(integrator());
    const cp = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const seed = randomBytes(32);
    const witnessKey = verifierKey('far-future.example', COSIGNATURE_V1, publicKeyFromSeed(seed));
    const t = 2n ** 62n; // past 2^53, within 2^63 - 1 (past that it is no cosignature: log-witness-refusals.test.ts)
    const time = new Uint8Array(8);
    new DataView(time.buffer).setBigUint64(0, t);
    const cosigned = signNote(parseNote(cp.body), [
      { key: witnessKey, sign: (text) => new Uint8Array([...time, ...signEd25519(seed, cosignedMessage(t, text))]) },
    ]);
    const refused = await svc.call('POST', '/v1/log/cosignatures', {
      key: tenant.keys.audit,
      json: { witness_key: formatVerifierKey(witnessKey), checkpoint: cosigned },
    });
    expect(refused.status, JSON.stringify(refused.body)).toBe(403);
    expect(refused.body.error).toMatchObject({ code: 'NOTE_NOT_VERIFIED', message: 'The cosignature is dated in the future.' });
  });

  it("a witness needs only the SDK's exports to cosign a checkpoint, and its cosignature then counts", async () => {
    const sdk = await import('../../src/sdk/index.js');
    await receipt(tenant.id, 8050);
    await integrateOnce(integrator());
    const cp = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const witness = sdk.generateKeyPair();
    const vkey = sdk.formatVerifierKey(sdk.verifierKey('sdk-witness.example', sdk.COSIGNATURE_V1, witness.publicKey));
    const posted = await svc.call('POST', '/v1/log/cosignatures', {
      key: tenant.keys.audit,
      json: {
        witness_key: vkey,
        checkpoint: sdk.signNote(sdk.parseNote(cp.body), [sdk.cosignatureSigner('sdk-witness.example', witness.seed, svc.clock.now)]),
      },
    });
    expect(posted.status, JSON.stringify(posted.body)).toBe(201);
    const trust = { ...(await trustOf(tenant)), witnesses: [vkey], requiredCosignatures: 1 };
    const served = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const report = await sdk.auditLog({
      baseUrl: 'http://baton.test',
      apiKey: tenant.keys.audit,
      fetch: appFetch,
      now: svc.clock.now,
      trust,
    });
    expect(served.body).toContain('\u2014 sdk-witness.example ');
    expect(report.checkpoint).toBe(served.body);
  });

  it('one audit key cannot take the slots of a checkpoint the other witnesses need, nor name a witness as the log', async () => {
    await receipt(tenant.id, 8100);
    await integrateOnce(integrator());
    const cp = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const post = (key: string, name: string, seed = randomBytes(32)) =>
      svc.call('POST', '/v1/log/cosignatures', {
        key,
        json: {
          witness_key: formatVerifierKey(verifierKey(name, COSIGNATURE_V1, publicKeyFromSeed(seed))),
          checkpoint: signNote(parseNote(cp.body), [cosignatureSigner(name, seed, svc.clock.now)]),
        },
      });
    const keptSeed = randomBytes(32);
    expect((await post(tenant.keys.audit, 'w1.example', keptSeed)).status).toBe(201);
    expect((await post(tenant.keys.audit, 'w2.example')).status).toBe(201);
    const third = await post(tenant.keys.audit, 'w3.example');
    expect(third.status).toBe(409);
    expect(third.body.error.message).toMatch(/already posted 2 cosignatures on this checkpoint/);
    // The same cosignature again is still answered as stored.
    expect((await post(tenant.keys.audit, 'w1.example', keptSeed)).status).toBe(200);
    // Another witness, with its own audit key, still gets a slot.
    const other = await createTenantKey(svc, tenant.id, ['audit'], 'second witness');
    expect((await post(other, 'w4.example')).status).toBe(201);
    // A witness key named as the log itself is refused.
    const origin = cp.body.split('\n')[0] as string;
    const impostor = await post(other, origin);
    expect(impostor.status).toBe(400);
    expect(impostor.body.error.code).toBe('INVALID_VERIFIER_KEY');
    // So is one named as another tenant's log of this service: a person would read it as that log's line.
    // And one named as the service's log name itself, `<name>/baton`, or any name under it, as a
    // person reads it: a host's trailing dot, repeated or trailing slashes (outside probe, review).
    const logName = origin.replace(/\/baton\/[^/]+$/, '');
    const tenantPart = origin.slice(logName.length);
    for (const name of [
      origin.replace(/\/baton\/[^/]+$/, '/baton/ten_someone_else'),
      origin.toUpperCase(),
      logName,
      `${logName}/baton`,
      `${logName.toUpperCase()}/Baton`,
      `${logName}.`,
      `${logName}/`,
      `${logName}/${tenantPart}`,
      `${logName}.${tenantPart}`,
      `${logName}/witness`,
    ]) {
      const neighbour = await post(other, name);
      expect(neighbour.status, name).toBe(400);
      expect(neighbour.body.error).toMatchObject({
        code: 'INVALID_VERIFIER_KEY',
        message: expect.stringMatching(/the name of this service's log/),
      });
    }
    // A witness whose host merely starts as the log's is its own.
    const thirdWitness = await createTenantKey(svc, tenant.id, ['audit'], 'third witness');
    expect((await post(thirdWitness, `${logName}-witness.example`)).status).toBe(201);
    // A line so named, stored before the rule, is kept but no longer served.
    const impostorLine = `\u2014 ${logName} ${Buffer.alloc(72).toString('base64')}`;
    await svc.store.db.execute(
      sql`insert into log_cosignatures (tenant_id, tree_size, witness_key, line, posted_by_key)
          values (${tenant.id}, ${Number(cp.body.split('\n')[1])}, ${`${logName}+00000000+AQ==`}, ${impostorLine}, null)`,
    );
    const served = (await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit })).body as string;
    expect(served).toContain('\u2014 w1.example ');
    expect(served).not.toContain(impostorLine);
    // A name the served note could not carry readably: too long, or printing as another name.
    for (const name of ['w'.repeat(257), 'w5.example\u202e', 'w6\u200b.example']) {
      const refused = await post(other, name);
      expect(refused.status, name.slice(0, 20)).toBe(400);
      expect(refused.body.error.code).toBe('INVALID_VERIFIER_KEY');
    }
    expect((await post(other, 'w'.repeat(256))).status).toBe(201);
  });

  it('refuses a cosignature dated before the log signed the checkpoint, and serves no stored line whose witness name it would refuse now', async () => {
    await receipt(tenant.id, 8300);
    await integrateOnce(integrator());
    const cp = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const seed = randomBytes(32);
    const post = (at: number) =>
      svc.call('POST', '/v1/log/cosignatures', {
        key: tenant.keys.audit,
        json: {
          witness_key: formatVerifierKey(verifierKey('early.example', COSIGNATURE_V1, publicKeyFromSeed(seed))),
          checkpoint: signNote(parseNote(cp.body), [cosignatureSigner('early.example', seed, at)]),
        },
      });
    const signedAt = Math.floor(Date.now() / 1000);
    for (const at of [0, signedAt - 3_600]) {
      const refused = await post(at);
      expect(refused.status, String(at)).toBe(403);
      expect(refused.body.error.code).toBe('NOTE_NOT_VERIFIED');
      expect(refused.body.error.message).toMatch(/before the log signed that checkpoint/);
    }
    expect((await post(signedAt)).status).toBe(201);

    // Lines stored before witness names were limited: kept, but served no more (one made the note unreadable).
    const size = Number(cp.body.split('\n')[1]);
    for (const name of ['x'.repeat(130_000), 'spoof.example\u202e']) {
      await svc.store.db.execute(
        sql`insert into log_cosignatures (tenant_id, tree_size, witness_key, line, posted_by_key)
            values (${tenant.id}, ${size}, ${`${name.slice(0, 20)}+legacy`}, ${`\u2014 ${name} AAAA`}, null)`,
      );
    }
    const served = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const lines = served.body.split('\n').filter((l: string) => l.startsWith('\u2014 '));
    expect(lines.map((l: string) => l.split(' ')[1])).toEqual([cp.body.split('\n')[0], 'early.example']);
    expect(parseNote(served.body).signatures).toHaveLength(2);
  });

  it("refuses a witness name that is not printable ASCII (one that reads as the log's own), and a second key under a stored (name, key ID)", async () => {
    await receipt(tenant.id, 8400);
    await integrateOnce(integrator());
    const cp = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const post = (name: string, seed = randomBytes(32)) =>
      svc.call('POST', '/v1/log/cosignatures', {
        key: tenant.keys.audit,
        json: {
          witness_key: formatVerifierKey(verifierKey(name, COSIGNATURE_V1, publicKeyFromSeed(seed))),
          checkpoint: signNote(parseNote(cp.body), [cosignatureSigner(name, seed, svc.clock.now)]),
        },
      });
    const origin = cp.body.split('\n')[0] as string;
    for (const name of [origin.replace('o', '\u043e'), 'w\u00e9.example']) {
      const refused = await post(name);
      expect(refused.status, name).toBe(400);
      expect(refused.body.error).toMatchObject({ code: 'INVALID_VERIFIER_KEY', message: expect.stringContaining('printable ASCII') });
    }
    // The rule refuses new posts only: a cosignature stored under another script before it is still served.
    const stored = `\u2014 w\u00e9.example ${Buffer.alloc(72).toString('base64')}`;
    await svc.store.db.execute(
      sql`insert into log_cosignatures (tenant_id, tree_size, witness_key, line, posted_by_key)
          values (${tenant.id}, ${Number(cp.body.split('\n')[1])}, ${'w\u00e9.example+00000000+AQ=='}, ${stored}, null)`,
    );
    expect((await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit })).body).toContain(`${stored}\n`);
    // A key under the name and key ID of a stored cosignature (a 4-byte key ID can be ground): stored,
    // every client trusting the first would meet a signature line of it that fails, and refuse the note.
    const size = Number(cp.body.split('\n')[1]);
    const seed = randomBytes(32);
    const genuine = verifierKey('twin.example', COSIGNATURE_V1, publicKeyFromSeed(seed));
    const [name, keyId] = formatVerifierKey(genuine).split('+');
    const twin = `${name}+${keyId}+${Buffer.concat([Buffer.of(COSIGNATURE_V1), publicKeyFromSeed(randomBytes(32))]).toString('base64')}`;
    await svc.store.db.execute(
      sql`insert into log_cosignatures (tenant_id, tree_size, witness_key, line, posted_by_key)
          values (${tenant.id}, ${size}, ${twin}, ${'\u2014 twin.example AAAA'}, null)`,
    );
    const second = await post('twin.example', seed);
    expect(second.status, JSON.stringify(second.body)).toBe(409);
    expect(second.body.error).toMatchObject({ code: 'CONFLICT', message: expect.stringContaining('key ID') });
  });

  it('the caps hold for posts that arrive together', async () => {
    await receipt(tenant.id, 8200);
    await integrateOnce(integrator());
    const cp = await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit });
    const post = (key: string, name: string) => {
      const seed = randomBytes(32);
      return svc.call('POST', '/v1/log/cosignatures', {
        key,
        json: {
          witness_key: formatVerifierKey(verifierKey(name, COSIGNATURE_V1, publicKeyFromSeed(seed))),
          checkpoint: signNote(parseNote(cp.body), [cosignatureSigner(name, seed, svc.clock.now)]),
        },
      });
    };
    const statuses = (answers: { status: number }[]) => answers.map((a) => a.status).sort();
    // One key, twelve witnesses at once: counted side by side, 8 were stored where 2 may be.
    const one = await createTenantKey(svc, tenant.id, ['audit'], 'eager witness');
    const byOne = await Promise.all(Array.from({ length: 12 }, (_, i) => post(one, `eager${i}.example`)));
    expect(statuses(byOne)).toEqual([...Array(2).fill(201), ...Array(10).fill(409)]);
    // Twenty more keys, two witnesses each, at once: the checkpoint serves at most 32.
    const keys = await Promise.all(Array.from({ length: 20 }, (_, i) => createTenantKey(svc, tenant.id, ['audit'], `witness ${i}`)));
    const byMany = await Promise.all(keys.flatMap((k, i) => [post(k, `a${i}.example`), post(k, `b${i}.example`)]));
    expect(byMany.filter((a) => a.status === 201)).toHaveLength(32 - 2);
    expect(byMany.filter((a) => a.status !== 201).every((a) => a.status === 409)).toBe(true);
    const served = await svc.call('GET', `/v1/log/checkpoint`, { key: tenant.keys.audit });
    expect(served.body.split('\n').filter((l: string) => l.startsWith('\u2014 ')).length).toBe(1 + 32);
  });
});

describe('auditLog', () => {
  it('passes on an intact log, then reports a service receipt deleted and one rewritten behind the service', async () => {
    for (let i = 0; i < 5; i++) await receipt(tenant.id, 7000 + i);
    await integrateOnce(integrator());
    const progress: number[] = [];
    const clean = await auditLog({
      baseUrl: 'http://baton.test',
      apiKey: tenant.keys.audit,
      fetch: appFetch,
      now: svc.clock.now,
      onProgress: (d) => progress.push(d),
    });
    expect(clean.findings).toEqual([]);
    expect(clean.ok).toBe(true);
    expect(progress.at(-1)).toBe(clean.treeSize);

    // Leaves in different entry bundles (tiles 0 and 1), and two more beside the deleted one in tile 0.
    const leaves = await rows<{ receipt_id: string | number; leaf_index: string | number }>(
      svc.store.db,
      sql`select receipt_id, leaf_index from log_leaves where tenant_id = ${tenant.id} and leaf_index in (10, 20, 21, 300) order by leaf_index`,
    );
    const [victim, swappedA, swappedB, changed] = leaves.map((l) => ({ id: Number(l.receipt_id), index: Number(l.leaf_index) }));
    // A superuser, bypassing the append-only triggers.
    const su = postgres(svc.url, { max: 1, onnotice: () => {} });
    try {
      await su.begin(async (tx) => {
        await tx`set local session_replication_role = replica`;
        await tx`delete from receipts where id = ${victim!.id}`;
        await tx`update receipts set jws = jws || 'x' where id = ${changed!.id}`;
        // Two receipts of the same bundle exchanged: found only if the deletion beside them hides nothing.
        await tx`update receipts r set jws = o.jws from receipts o
                  where (r.id, o.id) in ((${swappedA!.id}, ${swappedB!.id}), (${swappedB!.id}, ${swappedA!.id}))`;
      });
    } finally {
      await su.end();
    }
    const report = await auditLog({ baseUrl: 'http://baton.test', apiKey: tenant.keys.audit, fetch: appFetch, now: svc.clock.now });
    expect(report.ok).toBe(false);
    expect(report.findings).toContainEqual(expect.objectContaining({ kind: 'missing', index: victim!.index }));
    expect(report.findings).toContainEqual(expect.objectContaining({ kind: 'rewritten', index: changed!.index }));
    expect(report.findings).toContainEqual(expect.objectContaining({ kind: 'reordered', index: swappedA!.index }));
    expect(report.findings).toContainEqual(expect.objectContaining({ kind: 'reordered', index: swappedB!.index }));
    // Every other entry of the damaged bundle was still checked, one by one.
    expect(report.entriesChecked).toBe(report.treeSize - 1);
    // The listing's copy of the changed receipt is not the logged one either; nothing else is reported.
    expect(report.findings).toContainEqual(expect.objectContaining({ kind: 'not-in-log', serviceReceiptId: changed!.id }));
    expect(new Set(report.findings.map((f) => ('index' in f ? f.index : f.kind)))).toEqual(
      new Set([victim!.index, swappedA!.index, swappedB!.index, changed!.index, 'not-in-log']),
    );
  });

  it('reports a split view: a newer checkpoint of the same size with another root', async () => {
    const trust = await trustOf(other);
    await receipt(other.id, 1);
    await receipt(other.id, 2);
    await integrateOnce(integrator());
    const real = await svc.call('GET', '/v1/log/checkpoint', { key: other.keys.audit });
    const fake = signCheckpoint(svc.deps.signer, trust.origin, 2, new Uint8Array(32).fill(7));
    const result = verifyCheckpointConsistency(real.body, fake, [], trust, svc.clock.now);
    expect(result.consistent).toBe(false);
    const report = await auditLog({
      baseUrl: 'http://baton.test',
      apiKey: other.keys.audit,
      fetch: appFetch,
      now: svc.clock.now,
      previousCheckpoint: fake,
    });
    expect(report.findings.map((f) => f.kind)).toContain('split-view');
  });

  it('reports a rollback, with both notes, when the log is smaller than a checkpoint seen before and its tiles do not hold it', async () => {
    const t = await setupTenant(svc, 'rolled-back');
    const trust = await trustOf(t);
    for (let i = 0; i < 3; i++) await receipt(t.id, i);
    await integrateOnce(integrator());
    for (let i = 3; i < 8; i++) await receipt(t.id, i);
    await integrateOnce(integrator());
    const seen = (await svc.call('GET', '/v1/log/checkpoint', { key: t.keys.audit })).body as string;
    expect(seen.split('\n')[1]).toBe('8');
    // The log now serves a checkpoint of 3 leaves it signed over another tree: the tiles of the 8
    // seen before rebuild that note's root and do not hold it, so it is no stale view.
    const smaller = signCheckpoint(svc.deps.signer, trust.origin, 3, new Uint8Array(32).fill(9));
    const servingSmaller = async (url: string, init: { headers: Record<string, string> }) =>
      new URL(url).pathname === '/v1/log/checkpoint' ? new Response(smaller) : svc.app.request(url, init);
    const options = { baseUrl: 'http://baton.test', apiKey: t.keys.audit, now: svc.clock.now, previousCheckpoint: seen };
    const report = await auditLog({ ...options, fetch: servingSmaller });
    expect(report.ok).toBe(false);
    const rollback = report.findings.find((f) => f.kind === 'rollback');
    expect(rollback).toMatchObject({ detail: expect.stringContaining('shrank from 8 to 3 leaves, and not to a prefix') });
    expect(rollback && 'finding' in rollback ? [rollback.finding.older.note, rollback.finding.newer.note] : undefined).toEqual([
      seen,
      smaller,
    ]);
    // A larger checkpoint seen before that the log has no tiles for: a stale view or a rollback, which
    // only a failed read can say (its 404s and its refusal of the proof are anyone's to forge).
    const larger = signCheckpoint(svc.deps.signer, trust.origin, 13, new Uint8Array(32).fill(9));
    await expect(auditLog({ ...options, fetch: appFetch, previousCheckpoint: larger })).rejects.toMatchObject({ status: 404 });
  });

  it('a receipt that commits after a later one was logged is pending, not missing, until a late commit cannot explain it', async () => {
    const t = await setupTenant(svc, 'late-commit');
    // Its id is drawn at the insert, its row seen only at the commit: one verify's transaction
    // still open while another's receipt is committed and logged.
    let release = () => {};
    const held = new Promise<void>((r) => (release = r));
    let inserted = () => {};
    const insertedFirst = new Promise<void>((r) => (inserted = r));
    let early: { id: number } | undefined;
    const open = svc.store.db.transaction(async (tx) => {
      early = await receipt(t.id, 1, tx as unknown as typeof svc.store.db);
      inserted();
      await held;
    });
    await insertedFirst;
    const later = await receipt(t.id, 2);
    expect(later.id).toBeGreaterThan(early!.id);
    await integrateOnce(integrator());
    release();
    await open;
    const audit = (now: number) => auditLog({ baseUrl: 'http://baton.test', apiKey: t.keys.audit, fetch: appFetch, now });
    const fresh = await audit(svc.clock.now);
    expect(fresh.findings).toEqual([]);
    expect(fresh.pendingServiceReceipts).toBe(1);
    // Two minutes on, still outside while a later one is in: no commit and round take that long, so it was left out.
    expect((await audit(svc.clock.now + 110)).findings).toEqual([]);
    const after = await audit(svc.clock.now + 121);
    expect(after.findings).toEqual([
      expect.objectContaining({ kind: 'not-in-log', serviceReceiptId: early!.id, detail: expect.stringContaining('is not in the log') }),
    ]);
    await integrateOnce(integrator());
  });

  it('counts service receipts after the checkpoint as pending, and reports one left out longer than the log ever takes', async () => {
    const t = await setupTenant(svc, 'stale-log');
    await receipt(t.id, 1);
    await integrateOnce(integrator());
    const late = await receipt(t.id, 2); // committed after the checkpoint: not integrated
    const audit = (now: number, decisions?: DecisionCheckOptions) =>
      auditLog({ baseUrl: 'http://baton.test', apiKey: t.keys.audit, fetch: appFetch, now, ...(decisions ? { decisions } : {}) });
    const fresh = await audit(svc.clock.now);
    expect(fresh.findings).toEqual([]);
    expect(fresh.pendingServiceReceipts).toBe(1);
    // Ten minutes on, the same checkpoint and the same receipt outside it: the log stopped, or the view is stale.
    const stale = await audit(svc.clock.now + 601);
    expect(stale.ok).toBe(false);
    expect(stale.findings).toEqual([
      expect.objectContaining({ kind: 'not-in-log', serviceReceiptId: late.id, detail: expect.stringContaining('still not in the log') }),
    ]);
    // One listed after the checkpoint that does not verify is reported at once, not counted as pending.
    const forgedListing = async (url: string, init: { headers: Record<string, string> }) => {
      const res = await svc.app.request(url, init);
      if (new URL(url).pathname !== '/v1/service-receipts') return res;
      const page = (await res.json()) as { service_receipts: { id: number; jws: string }[] };
      const [h, p] = late.jws.split('.');
      page.service_receipts.push({ ...page.service_receipts.at(-1)!, id: late.id + 1000, jws: `${h}.${p}.${'A'.repeat(86)}` });
      return Response.json(page);
    };
    const forged = await auditLog({ baseUrl: 'http://baton.test', apiKey: t.keys.audit, fetch: forgedListing, now: svc.clock.now });
    expect(forged.findings).toEqual([
      expect.objectContaining({ kind: 'not-in-log', serviceReceiptId: late.id + 1000, detail: expect.stringContaining('does not verify') }),
    ]);
    expect(forged.pendingServiceReceipts).toBe(1);
    // One dated a day ahead would never grow old enough to be reported: it is reported now.
    const ahead = await receipt(t.id, 3, undefined, svc.clock.now + 86_400);
    const withAhead = await audit(svc.clock.now);
    expect(withAhead.findings).toEqual([
      expect.objectContaining({ kind: 'not-in-log', serviceReceiptId: ahead.id, detail: expect.stringContaining('86400 s in the future') }),
    ]);
    // One a little ahead (two clocks) is pending, even when the service allows no skew itself.
    await receipt(t.id, 4, undefined, svc.clock.now + 30);
    const noSkew = await audit(svc.clock.now, { clockSkewSeconds: 0 });
    expect(noSkew.findings).toEqual([expect.objectContaining({ kind: 'not-in-log', serviceReceiptId: ahead.id })]);
    // Unless the auditor allows that much skew (baton audit --clock-skew): then it is pending.
    const skewed = await audit(svc.clock.now, { clockSkewSeconds: 90_000 });
    expect(skewed.findings).toEqual([]);
    await integrateOnce(integrator());
  });

  it('reports a leaf logged twice, and an entry of the tenant the service does not list; an honest log neither', async () => {
    const t = await setupTenant(svc, 'repeated-leaf');
    const trust = await trustOf(t);
    const [r0, r1, r2] = [await receipt(t.id, 1), await receipt(t.id, 2), await receipt(t.id, 3)];
    await integrateOnce(integrator());
    const options = { baseUrl: 'http://baton.test', apiKey: t.keys.audit, now: svc.clock.now };
    expect((await auditLog({ ...options, fetch: appFetch })).findings).toEqual([]);
    // A log [r0, r1, r1, r2], signed by the log's own key: every listed receipt is in it.
    const entries = [r0, r1, r1, r2].map((r) => new TextEncoder().encode(r.jws));
    const leaves = entries.map((e) => leafHash(e));
    const note = signCheckpoint(svc.deps.signer, trust.origin, 4, rootOf(leaves));
    const repeated = async (url: string, init: { headers: Record<string, string> }) => {
      const path = new URL(url).pathname;
      if (path === '/v1/log/checkpoint') return new Response(note);
      if (path === '/v1/log/tile/0/000.p/4') return new Response(Buffer.concat(leaves));
      if (path === '/v1/log/tile/entries/000.p/4') return new Response(formatEntryBundle(entries));
      return svc.app.request(url, init);
    };
    const twice = await auditLog({ ...options, fetch: repeated });
    expect(twice.ok).toBe(false);
    expect(twice.findings).toEqual([
      expect.objectContaining({ kind: 'duplicate', index: 2, detail: expect.stringContaining('the leaf logged at index 1 again') }),
    ]);
    // The real log, with the listing leaving r1 out: the entry is this tenant's, signed, and hidden.
    const hiding = async (url: string, init: { headers: Record<string, string> }) => {
      const res = await svc.app.request(url, init);
      if (new URL(url).pathname !== '/v1/service-receipts') return res;
      const page = (await res.json()) as { service_receipts: { id: number }[] };
      return Response.json({ ...page, service_receipts: page.service_receipts.filter((r) => r.id !== r1.id) });
    };
    const hidden = await auditLog({ ...options, fetch: hiding });
    expect(hidden.findings).toEqual([expect.objectContaining({ kind: 'not-listed', index: 1 })]);
  });

  it('audits under the checkpoint of a given size: the one witnesses cosigned, while the log grew past it', async () => {
    const t = await setupTenant(svc, 'cosigned-size');
    for (let i = 0; i < 3; i++) await receipt(t.id, i);
    await integrateOnce(integrator());
    const cp = await svc.call('GET', '/v1/log/checkpoint', { key: t.keys.audit });
    const seed = randomBytes(32);
    const witness = formatVerifierKey(verifierKey('quorum.example', COSIGNATURE_V1, publicKeyFromSeed(seed)));
    const posted = await svc.call('POST', '/v1/log/cosignatures', {
      key: t.keys.audit,
      json: { witness_key: witness, checkpoint: signNote(parseNote(cp.body), [cosignatureSigner('quorum.example', seed, svc.clock.now)]) },
    });
    expect(posted.status).toBe(201);
    for (let i = 3; i < 5; i++) await receipt(t.id, i);
    await integrateOnce(integrator());
    const trust = { ...(await trustOf(t)), witnesses: [witness], requiredCosignatures: 1 };
    const options = { baseUrl: 'http://baton.test', apiKey: t.keys.audit, fetch: appFetch, now: svc.clock.now, trust };
    // The head moved past the cosigned checkpoint: the latest is not cosigned.
    await expect(auditLog(options)).rejects.toMatchObject({ code: 'COSIGNATURES_INSUFFICIENT' });
    const sized = await auditLog({ ...options, treeSize: 3 });
    expect(sized.findings).toEqual([]);
    expect(sized).toMatchObject({ ok: true, treeSize: 3, entriesChecked: 3, serviceReceiptsChecked: 5, pendingServiceReceipts: 2 });
    expect(sized.checkpoint).toContain('\u2014 quorum.example ');
    expect(sized.latestCheckpoint).toContain('\n5\n');
    // Long after, the two logged since are still not "left out": they are in the latest tree.
    expect((await auditLog({ ...options, treeSize: 3, now: svc.clock.now + 3_600 })).findings).toEqual([]);
    // A latest checkpoint that the tiles after the one audited do not rebuild is reported.
    const forgedLatest = signCheckpoint(svc.deps.signer, trust.origin, 5, new Uint8Array(32).fill(3));
    const forked = await auditLog({
      ...options,
      treeSize: 3,
      fetch: async (url, init) =>
        new URL(url).pathname === '/v1/log/checkpoint' ? new Response(forgedLatest) : svc.app.request(url, init),
    });
    // Its tiles rebuild no note of 5 the auditor holds, and the proof the log serves joins 3 to its
    // own tree of 5, not the forged one: a proof answer alone is no split view, but a failed read.
    expect(forked.findings.map((f) => f.kind)).toEqual(['root-mismatch']);
    expect(forked.incomplete).toEqual([
      expect.objectContaining({ source: 'GET /v1/log/consistency?from=3&to=5', code: 'UNEXPECTED_RESPONSE' }),
    ]);
  });

  it("a verifier key the log serves that cannot be read is a malformed finding, not the caller's bad input", async () => {
    const garbled = async (url: string, init: { headers: Record<string, string> }) => {
      const res = await svc.app.request(url, init);
      if (new URL(url).pathname !== '/v1/log') return res;
      return Response.json({ ...((await res.json()) as object), verifier_keys: ['not+a+key'] });
    };
    const options = { baseUrl: 'http://baton.test', apiKey: other.keys.audit, now: svc.clock.now };
    const report = await auditLog({ ...options, fetch: garbled });
    expect(report).toMatchObject({ ok: false, checkpointRead: false, treeSize: 0 });
    expect(report.findings).toEqual([
      expect.objectContaining({ kind: 'malformed', source: 'GET /v1/log', detail: expect.stringContaining('a verifier key') }),
    ]);
    // The caller's own treeSize that is no size is its mistake.
    await expect(auditLog({ ...options, fetch: appFetch, treeSize: 0 })).rejects.toMatchObject({ code: 'INVALID_REQUEST' });
  });

  it('a log that will not prove two of its checkpoints consistent is no split view on its own: a failed read', async () => {
    const t = await setupTenant(svc, 'no-proof');
    await receipt(t.id, 1);
    await integrateOnce(integrator());
    const older = (await svc.call('GET', '/v1/log/checkpoint', { key: t.keys.audit })).body as string;
    await receipt(t.id, 2);
    await integrateOnce(integrator());
    // A hostile log shows a checkpoint of 9 it signed, then answers, as the service it is, that it holds
    // 2 leaves. Anyone in the path could forge that refusal, so it is a failed read; what the log owes
    // under its note of 9 (the tile it does not serve) is the finding (test/sdk/audit-evidence.test.ts).
    const origin = older.split('\n')[0]!;
    const forgedLatest = signCheckpoint(svc.deps.signer, origin, 9, new Uint8Array(32).fill(7));
    const showingNine = async (url: string, init: { headers: Record<string, string> }) =>
      new URL(url).pathname === '/v1/log/checkpoint'
        ? new Response(forgedLatest, { headers: { 'content-type': 'text/plain; charset=utf-8' } })
        : svc.app.request(url, init);
    const report = await auditLog({
      baseUrl: 'http://baton.test',
      apiKey: t.keys.audit,
      fetch: showingNine,
      now: svc.clock.now,
      previousCheckpoint: older,
    });
    expect(report.ok).toBe(false);
    expect(report.findings.map((f) => f.kind)).not.toContain('split-view');
    expect(report.findings).toContainEqual(expect.objectContaining({ kind: 'malformed', source: 'GET /v1/log/tile/0/000.p/9' }));
    expect(report.incomplete).toContainEqual(
      expect.objectContaining({
        source: 'GET /v1/log/consistency?from=1&to=9',
        status: 404,
        notChecked: expect.stringMatching(/a proof answer alone is no evidence/) as unknown,
      }),
    );
  });

  it('without pinned keys, refuses a log whose verifier key the service does not publish', async () => {
    const trust = await trustOf(other);
    const rogueSeed = randomBytes(32);
    const rogueKey = formatVerifierKey(verifierKey(trust.origin, NOTE_ED25519, publicKeyFromSeed(rogueSeed)));
    const real = await svc.call('GET', '/v1/log/checkpoint', { key: other.keys.audit });
    const text = String(real.body).slice(0, String(real.body).indexOf('\n\n') + 1);
    const forged = signNote(text, [ed25519NoteSigner(trust.origin, rogueSeed)]);
    // A proxy between the auditor and the service, naming its own key and signing the checkpoint with it.
    const proxied = async (url: string, init: { headers: Record<string, string> }) => {
      const path = new URL(url).pathname;
      if (path === '/v1/log') return Response.json({ origin: trust.origin, verifier_keys: [rogueKey] });
      if (path === '/v1/log/checkpoint') return new Response(forged, { headers: { 'content-type': 'text/plain' } });
      return svc.app.request(url, init);
    };
    const audit = auditLog({ baseUrl: 'http://baton.test', apiKey: other.keys.audit, fetch: proxied, now: svc.clock.now });
    await expect(audit).rejects.toMatchObject({ code: 'NOTE_NOT_VERIFIED', message: expect.stringContaining('published keys') });
    // Pinned to the real key, the same proxy fails on the signature instead.
    await expect(
      auditLog({ baseUrl: 'http://baton.test', apiKey: other.keys.audit, fetch: proxied, now: svc.clock.now, trust }),
    ).rejects.toMatchObject({ code: 'NOTE_NOT_VERIFIED' });
  });

  it("with the service's keys pinned, refuses a proxy that publishes its own key in /v1/keys too", async () => {
    const trust = await trustOf(other);
    const realKeys = (await svc.call('GET', '/v1/keys')).body as { keys: { kid: string; public_key: string }[] };
    const serviceKeys = realKeys.keys.map((k) => ({ kid: k.kid, publicKey: new Uint8Array(Buffer.from(k.public_key, 'base64url')) }));
    const rogueSeed = randomBytes(32);
    const roguePublic = publicKeyFromSeed(rogueSeed);
    const rogueKey = formatVerifierKey(verifierKey(trust.origin, NOTE_ED25519, roguePublic));
    const real = await svc.call('GET', '/v1/log/checkpoint', { key: other.keys.audit });
    const forged = signNote(String(real.body).slice(0, String(real.body).indexOf('\n\n') + 1), [
      ed25519NoteSigner(trust.origin, rogueSeed),
    ]);
    const proxied = async (url: string, init: { headers: Record<string, string> }) => {
      const path = new URL(url).pathname;
      if (path === '/v1/log') return Response.json({ origin: trust.origin, verifier_keys: [rogueKey] });
      if (path === '/v1/log/checkpoint') return new Response(forged, { headers: { 'content-type': 'text/plain' } });
      if (path === '/v1/keys')
        return Response.json({
          keys: [...realKeys.keys, { kid: 'svc_rogue', public_key: Buffer.from(roguePublic).toString('base64url') }],
        });
      return svc.app.request(url, init);
    };
    const options = { baseUrl: 'http://baton.test', apiKey: other.keys.audit, fetch: proxied, now: svc.clock.now };
    // Unpinned, the proxy is the only source of keys: the report says it trusted them on first use.
    expect((await auditLog(options)).trustedOnFirstUse).toBe(true);
    await expect(auditLog({ ...options, serviceKeys })).rejects.toMatchObject({
      code: 'NOTE_NOT_VERIFIED',
      message: expect.stringContaining('published keys'),
    });
    // Pinned and genuine: the same audit passes and says nothing was taken on trust.
    const genuine = await auditLog({ ...options, fetch: appFetch, serviceKeys });
    expect(genuine.findings).toEqual([]);
    expect(genuine.trustedOnFirstUse).toBe(false);
  });
});

describe('the server', () => {
  it('runs the integrator at its interval and stops it on close', async () => {
    const config = serverConfigOf(svc, { BATON_TLOG_INTERVAL_MS: '50', BATON_TLOG_NAME: 'baton.test' });
    const server = await startServer(config, silentLogger, () => {});
    const inLog = async (id: number) =>
      (await rows<{ n: number }>(svc.store.db, sql`select count(*)::int as n from log_leaves where receipt_id = ${id}`))[0]!.n === 1;
    let closed = false;
    try {
      const r = await receipt(tenant.id, 9000);
      const until = Date.now() + 10_000;
      while (!(await inLog(r.id)) && Date.now() < until) await new Promise((x) => setTimeout(x, 20));
      expect(await inLog(r.id)).toBe(true);
      await server.close();
      closed = true;
      const after = await receipt(tenant.id, 9001);
      await new Promise((x) => setTimeout(x, 300));
      expect(await inLog(after.id)).toBe(false);
    } finally {
      if (!closed) await server.close();
    }
    await integrateOnce(integrator());
  });

  it('with BATON_TLOG_INTERVAL_MS=0 it says at start that this node puts nothing in the log', async () => {
    const idle = await warningsOfStart({ BATON_TLOG_INTERVAL_MS: '0', BATON_TLOG_NAME: 'baton.test' });
    expect(idle.map((w) => w.msg)).toContainEqual(
      expect.stringMatching(/^this node integrates no service receipts into the transparency log/),
    );
    const integrating = await warningsOfStart({ BATON_TLOG_INTERVAL_MS: '60000', BATON_TLOG_NAME: 'baton.test' });
    expect(integrating.filter((w) => w.msg.includes('transparency log'))).toEqual([]);
  });
});

/** The warnings a server on this test's database logs while it starts (it is stopped again). */
async function warningsOfStart(env: Record<string, string>): Promise<{ msg: string; fields?: Record<string, unknown> }[]> {
  const warned: { msg: string; fields?: Record<string, unknown> }[] = [];
  const log = {
    ...silentLogger,
    warn: (msg: string, fields?: Record<string, unknown>) => void warned.push({ msg, ...(fields ? { fields } : {}) }),
  };
  const server = await startServer(serverConfigOf(svc, env), log, () => {});
  await server.close();
  return warned;
}

describe("the logs' name", () => {
  it('a start that would rename the stored logs fails, naming the name they have', async () => {
    await receipt(tenant.id, 9100);
    await integrateOnce(integrator());
    for (const renamed of ['renamed.example', 'localhost']) {
      const start = startServer(serverConfigOf(svc, { BATON_TLOG_INTERVAL_MS: '0', BATON_TLOG_NAME: renamed }), silentLogger, () => {});
      await expect(start).rejects.toThrow(
        `BATON_TLOG_NAME is "${renamed}", but the transparency logs in this database were last written under the name "baton.test"`,
      );
    }
    const same = await startServer(
      serverConfigOf(svc, { BATON_TLOG_INTERVAL_MS: '0', BATON_TLOG_NAME: 'baton.test' }),
      silentLogger,
      () => {},
    );
    await same.close();
  });

  it('a node under another name than the first checkpoint fixed signs no checkpoint (two nodes started together on a new database)', async () => {
    await receipt(tenant.id, 9150);
    await integrateOnce(integrator());
    const [fixed] = await rows<{ name: string }>(svc.store.db, sql`select name from log_name`);
    expect(fixed?.name).toBe('baton.test');
    const before = await rows<{ n: number }>(svc.store.db, sql`select count(*)::int as n from log_checkpoints`);
    await receipt(tenant.id, 9151);
    await expect(integrateOnce({ ...integrator(), logName: 'two.example' })).rejects.toThrow(
      'BATON_TLOG_NAME is "two.example", but this database\'s transparency logs are named "baton.test" (fixed by their first checkpoint)',
    );
    expect(await rows<{ n: number }>(svc.store.db, sql`select count(*)::int as n from log_checkpoints`)).toEqual(before);
    // The node under the fixed name integrates what the other left pending.
    expect((await integrateOnce(integrator())).leaves).toBe(1);
  });

  it('a node under another name serves the logs under the fixed one, and says to restart it', async () => {
    await receipt(tenant.id, 9160);
    await integrateOnce(integrator());
    const warned: string[] = [];
    const other = await createServiceDeps({
      store: svc.store,
      config: loadConfig({
        BATON_ADMIN_KEY: svc.adminKey,
        BATON_MASTER_KEY: Buffer.from(svc.deps.masterKey).toString('hex'),
        BATON_TLOG_NAME: 'two.example',
      }),
      log: { ...silentLogger, warn: (m: string) => void warned.push(m) },
      masterKey: svc.deps.masterKey,
      now: svc.deps.now,
    });
    const callOther = callerOf(createApp(other));
    const idle = await setupTenant(svc, 'no receipts yet');
    for (const t of [tenant, idle]) {
      const [here, there] = await Promise.all([svc.call, callOther].map((call) => call('GET', '/v1/log', { key: t.keys.audit })));
      expect(there!.body.origin).toBe(`baton.test/baton/${t.id}`);
      expect(there!.body).toEqual(here!.body);
      // The size-0 checkpoint of a log with no receipt is signed on demand: the same note on both nodes.
      const notes = await Promise.all([svc.call, callOther].map((call) => call('GET', '/v1/log/checkpoint', { key: t.keys.audit })));
      expect(notes[1]!.body).toBe(notes[0]!.body);
    }
    expect(warned).toEqual([expect.stringContaining('Restart it with BATON_TLOG_NAME=baton.test.')]);
  });

  it('a start reads the fixed name too: refused under another even before any checkpoint of its own', async () => {
    const fresh = await createDatabase();
    try {
      const start = (name: string) =>
        startServer(
          loadConfig({
            DATABASE_URL: fresh.url,
            BATON_MASTER_KEY: Buffer.from(svc.deps.masterKey).toString('hex'),
            BATON_ADMIN_KEY: svc.adminKey,
            PORT: '0',
            BATON_TLOG_INTERVAL_MS: '0',
            BATON_TLOG_NAME: name,
          }),
          silentLogger,
          () => {},
        );
      await (await start('first.example')).close(); // migrates the new database
      // As a node under the first name leaves it once its round fixed the name (no checkpoint read yet here).
      const db = await openStore({ databaseUrl: fresh.url, migrate: false });
      try {
        await db.db.execute(sql`insert into log_name (name) values ('first.example')`);
      } finally {
        await db.close();
      }
      await expect(start('second.example')).rejects.toThrow(
        'BATON_TLOG_NAME is "second.example", but this database\'s transparency logs are named "first.example" (fixed by their first checkpoint)',
      );
      await (await start('first.example')).close();
    } finally {
      await fresh.drop();
    }
  });

  it('a first start on PostgreSQL with the default name says to choose one before the logs are named for good', async () => {
    const fresh = await createDatabase();
    try {
      const warnings = async (env: Record<string, string>) => {
        const warned: string[] = [];
        const config = loadConfig({
          DATABASE_URL: fresh.url,
          BATON_MASTER_KEY: Buffer.from(svc.deps.masterKey).toString('hex'),
          BATON_ADMIN_KEY: svc.adminKey,
          PORT: '0',
          BATON_TLOG_INTERVAL_MS: '60000',
          ...env,
        });
        const server = await startServer(config, { ...silentLogger, warn: (m: string) => void warned.push(m) }, () => {});
        await server.close();
        return warned.filter((m) => m.startsWith('BATON_TLOG_NAME is not set'));
      };
      expect(await warnings({})).toHaveLength(1);
      expect(await warnings({ BATON_TLOG_NAME: 'logs.example.org' })).toEqual([]);
    } finally {
      await fresh.drop();
    }
  });

  it('logs left under an older name by a rename before this check: the start goes on only under the name written last, and says so', async () => {
    const stale = await setupTenant(svc, 'renamed-before');
    // An idle tenant whose log kept the old name: its latest checkpoint is older than every other.
    await svc.store.db.execute(
      sql`insert into log_checkpoints (tenant_id, tree_size, root_hash, note, created_at)
          values (${stale.id}, 1, ${Buffer.alloc(32, 7)}, ${`old.example/baton/${stale.id}\n1\nBwcH\n\n— old.example/baton/${stale.id} AAAA\n`}, now() - interval '1 day')`,
    );
    // The log only grows: the row stays, always older than the logs the other tests write.
    await expect(
      startServer(serverConfigOf(svc, { BATON_TLOG_INTERVAL_MS: '0', BATON_TLOG_NAME: 'old.example' }), silentLogger, () => {}),
    ).rejects.toThrow('were last written under the name "baton.test" (and 1 under "old.example")');
    const warned = await warningsOfStart({ BATON_TLOG_INTERVAL_MS: '0', BATON_TLOG_NAME: 'baton.test' });
    expect(warned.find((w) => w.msg.startsWith("some tenants' transparency logs carry another name"))?.fields).toEqual({
      others: [{ name: 'old.example', tenants: 1 }],
    });
  });

  it('reads the name back from any origin, whatever the tenant id holds', () => {
    expect(logNameOf('baton.test/baton/ten_1')).toBe('baton.test');
    expect(logNameOf('example.org/logs/baton/ten_x')).toBe('example.org/logs');
    expect(logNameOf('baton/ten_1')).toBeUndefined();
  });
});

describe('on PGlite', () => {
  it('queues and integrates service receipts the same way', { timeout: 120_000 }, async () => {
    const lite = await freshPglite();
    try {
      const store: Store = lite.store;
      const [t] = await rows<{ id: string }>(store.db, sql`insert into tenants (id, name) values ('ten_lite', 'lite') returning id`);
      await store.db.execute(
        sql`insert into service_keys (kid, public_key, encrypted_seed) values (${svc.deps.signer.kid}, 'pk', 'sealed')`,
      );
      for (let i = 0; i < 3; i++) await receipt(t!.id, i, store.db);
      const round = await integrateOnce({ ...integrator(), store });
      expect(round).toEqual({ locked: true, leaves: 3, tenants: 1 });
      const [cp] = await rows<{ tree_size: number }>(store.db, sql`select tree_size::int from log_checkpoints`);
      expect(cp?.tree_size).toBe(3);
    } finally {
      await lite.drop();
    }
  });
});
