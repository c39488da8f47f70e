import { randomBytes } from 'node:crypto';
import { eq, isNull, isNotNull } from 'drizzle-orm';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeBase64url, encodeBase64url } from '../../src/protocol/base64url.js';
import { didKeyFromPublicKey } from '../../src/protocol/did-key.js';
import { publicKeyFromSeed, signEd25519 } from '../../src/protocol/ed25519.js';
import { BatonError } from '../../src/protocol/errors.js';
import { sha256Hex } from '../../src/protocol/hash.js';
import { canonicalJson, utf8Encode } from '../../src/protocol/jcs.js';
import { signJws } from '../../src/protocol/jws.js';
import { serviceKid } from '../../src/protocol/service-receipt.js';
import { createLogger, silentLogger } from '../../src/service/log.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { openSecret } from '../../src/service/secrets.js';
import {
  loadServiceSigner,
  publishedServiceKeys,
  rotateServiceKey,
  verifyServiceReceipt,
  type ServiceSigner,
} from '../../src/service/signer.js';
import { openStore, type Store } from '../../src/store/db.js';
import { serviceKeys } from '../../src/store/schema/index.js';
import { freshDatabase } from '../setup/db.js';
import { seedTenant } from '../support/fixtures.js';
import { startTestService, type TestService } from '../support/service.js';

const cleanup: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const f of cleanup.reverse()) await f();
});

async function fresh(max = 10): Promise<{ store: Store; url: string }> {
  const db = await freshDatabase({ max });
  cleanup.push(db.drop);
  return db;
}

const newMasterKey = () => new Uint8Array(randomBytes(32));

async function rejection(p: Promise<unknown>): Promise<BatonError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(BatonError);
    return err as BatonError;
  }
  throw new Error('expected a rejection');
}

describe('loadServiceSigner', () => {
  it('creates one key on first start, sealed at rest, and loads the same key afterwards', async () => {
    const { store } = await fresh();
    const masterKey = newMasterKey();
    const lines: string[] = [];
    const log = createLogger('debug', (l) => lines.push(l));
    const first = await loadServiceSigner(store.db, masterKey, log);
    const again = await loadServiceSigner(store.db, masterKey, log);
    expect(again.kid).toBe(first.kid);
    expect(again.did).toBe(first.did);
    expect(first.kid).toBe(`svc_${sha256Hex(first.publicKey).slice(0, 16)}`);
    expect(first.kid).toBe(serviceKid(first.publicKey));
    expect(first.did).toBe(didKeyFromPublicKey(first.publicKey));

    const rows = await store.db.select().from(serviceKeys);
    expect(rows).toHaveLength(1);
    const row = rows[0]!;
    expect(row.kid).toBe(first.kid);
    expect(row.retiredAt).toBeNull();
    expect(row.publicKey).toBe(encodeBase64url(first.publicKey));
    // The stored seed is sealed: not the plaintext in any spelling, and it opens only with the master key and its kid.
    expect(row.encryptedSeed).toMatch(/^v1\./);
    const seed = openSecret(row.encryptedSeed, masterKey, `service-key:${row.kid}`);
    expect(publicKeyFromSeed(seed)).toEqual(first.publicKey);
    for (const spelling of [Buffer.from(seed).toString('hex'), encodeBase64url(seed), Buffer.from(seed).toString('base64')]) {
      expect(row.encryptedSeed).not.toContain(spelling);
      expect(lines.join('')).not.toContain(spelling);
    }
    expect(lines.join('')).not.toContain(row.encryptedSeed);
    expect(lines.some((l) => l.includes('service signing key created') && l.includes(first.kid))).toBe(true);
  });

  it('converges on one key when several nodes start together on one database', async () => {
    const { store, url } = await fresh();
    const masterKey = newMasterKey();
    const others = await Promise.all(Array.from({ length: 3 }, () => openStore({ databaseUrl: url, max: 3 })));
    cleanup.push(...others.map((s) => s.close));
    for (let round = 0; round < 3; round++) {
      // After a rotation the racers must all load the new key.
      if (round > 0) await rotateServiceKey(store.db, masterKey, 1_800_000_000 + round);
      const signers = await Promise.all([
        loadServiceSigner(store.db, masterKey, silentLogger),
        loadServiceSigner(store.db, masterKey, silentLogger),
        ...others.map((s) => loadServiceSigner(s.db, masterKey, silentLogger)),
      ]);
      expect(new Set(signers.map((s) => s.kid)).size).toBe(1);
      expect(await store.db.select().from(serviceKeys).where(isNull(serviceKeys.retiredAt))).toHaveLength(1);
    }
  });

  it('converges from an empty table many times over', async () => {
    for (let round = 0; round < 3; round++) {
      const { store, url } = await fresh();
      const masterKey = newMasterKey();
      const other = await openStore({ databaseUrl: url, max: 5 });
      cleanup.push(other.close);
      let created = 0;
      const log = createLogger('info', (l) => {
        if (l.includes('service signing key created')) created++;
      });
      const signers = await Promise.all(Array.from({ length: 8 }, (_, i) => loadServiceSigner((i % 2 ? other : store).db, masterKey, log)));
      expect(new Set(signers.map((s) => s.kid)).size).toBe(1);
      expect(await store.db.select().from(serviceKeys)).toHaveLength(1);
      expect(created).toBe(1);
    }
  });

  it("reads the winner's key when another node inserts between its read and its insert", async () => {
    const { store } = await fresh();
    const masterKey = newMasterKey();
    let winner: ServiceSigner | undefined;
    // A Db whose first insert is preceded by another node creating the key: a deterministic lost race.
    const racing = new Proxy(store.db, {
      get(target, prop, receiver) {
        if (prop !== 'insert' || winner) return Reflect.get(target, prop, receiver);
        return (table: typeof serviceKeys) => ({
          values: (row: typeof serviceKeys.$inferInsert) => ({
            returning: async () => {
              winner = await loadServiceSigner(store.db, masterKey, silentLogger);
              return target.insert(table).values(row).returning();
            },
          }),
        });
      },
    }) as unknown as Store['db'];
    const loser = await loadServiceSigner(racing, masterKey, silentLogger);
    expect(winner).toBeDefined();
    expect(loser.kid).toBe(winner!.kid);
    expect(await store.db.select().from(serviceKeys)).toHaveLength(1);
  });

  it('refuses to start with another master key, and does not mint a second key', async () => {
    const { store } = await fresh();
    await loadServiceSigner(store.db, newMasterKey(), silentLogger);
    const e = await rejection(loadServiceSigner(store.db, newMasterKey(), silentLogger));
    expect(e.code).toBe('INTERNAL');
    expect(e.message).toMatch(/BATON_MASTER_KEY/);
    expect(await store.db.select().from(serviceKeys)).toHaveLength(1);
  });

  it('refuses a sealed seed moved onto another key row (the kid is bound in)', async () => {
    const { store } = await fresh();
    const masterKey = newMasterKey();
    const old = await loadServiceSigner(store.db, masterKey, silentLogger);
    const current = await rotateServiceKey(store.db, masterKey, 1_800_000_000);
    const [oldRow] = await store.db.select().from(serviceKeys).where(eq(serviceKeys.kid, old.kid));
    await store.db.update(serviceKeys).set({ encryptedSeed: oldRow!.encryptedSeed }).where(eq(serviceKeys.kid, current.kid));
    const e = await rejection(loadServiceSigner(store.db, masterKey, silentLogger));
    expect(e.code).toBe('INTERNAL');
  });

  it('refuses a row whose published public key does not match its seed', async () => {
    const { store } = await fresh();
    const masterKey = newMasterKey();
    const signer = await loadServiceSigner(store.db, masterKey, silentLogger);
    const other = publicKeyFromSeed(new Uint8Array(randomBytes(32)));
    await store.db
      .update(serviceKeys)
      .set({ publicKey: encodeBase64url(other) })
      .where(eq(serviceKeys.kid, signer.kid));
    const e = await rejection(loadServiceSigner(store.db, masterKey, silentLogger));
    expect(e.code).toBe('INTERNAL');
    expect(e.message).toMatch(/does not match the published public key/);
  });
});

describe('ServiceSigner.sign and verifyServiceReceipt', () => {
  let signer: ServiceSigner;
  let keys: { kid: string; publicKey: Uint8Array }[];

  it('signs a compact JWS with exactly the JCS kid header and a JCS payload', async () => {
    const { store } = await fresh();
    signer = await loadServiceSigner(store.db, newMasterKey(), silentLogger);
    keys = [{ kid: signer.kid, publicKey: signer.publicKey }];
    const jws = signer.sign({ z: 1, a: 'x', iss: signer.did, kid: signer.kid });
    const [h, p, s] = jws.split('.') as [string, string, string];
    expect(Buffer.from(decodeBase64url(h, 'h')).toString('utf8')).toBe(`{"alg":"EdDSA","kid":"${signer.kid}","typ":"JWT"}`);
    expect(Buffer.from(decodeBase64url(p, 'p')).toString('utf8')).toBe(canonicalJson({ a: 'x', iss: signer.did, kid: signer.kid, z: 1 }));
    expect(decodeBase64url(s, 's')).toHaveLength(64);
    expect(verifyServiceReceipt(jws, keys)).toEqual({
      valid: true,
      kid: signer.kid,
      payload: { a: 'x', iss: signer.did, kid: signer.kid, z: 1 },
    });
    // publicKey is a copy
    signer.publicKey.fill(0);
    expect(verifyServiceReceipt(jws, [{ kid: signer.kid, publicKey: signer.publicKey }]).valid).toBe(true);
  });

  it('imports the key for a log name once: every checkpoint of that log reuses its note signer', () => {
    const first = signer.noteSigner('baton.example/log/t1');
    expect(signer.noteSigner('baton.example/log/t1')).toBe(first);
    const other = signer.noteSigner('baton.example/log/t2');
    expect(other).not.toBe(first);
    expect(other.key.name).toBe('baton.example/log/t2');
  });

  it('refuses tampering, unknown kids, wrong keys and the kid-less DRS header', () => {
    const jws = signer.sign({ iss: signer.did, kid: signer.kid, n: 1 });
    const [h, p, s] = jws.split('.') as [string, string, string];
    const forgedPayload = encodeBase64url(utf8Encode(canonicalJson({ iss: signer.did, kid: signer.kid, n: 2 })));
    const otherSeed = new Uint8Array(randomBytes(32));
    const otherKey = publicKeyFromSeed(otherSeed);
    const cases: [string, string | RegExp][] = [
      [`${h}.${forgedPayload}.${s}`, /signature/],
      [`${h}.${p}.${encodeBase64url(new Uint8Array(64))}`, /signature/],
      [`${h}.${p}`, /3 dot-separated/],
      [`${h}.${p}.${s}.x`, /3 dot-separated/],
      ['', /compact JWS/],
      [signJws({ iss: signer.did }, otherSeed), /no kid/], // DRS header without kid
      [`${encodeBase64url(utf8Encode('{"alg":"EdDSA","kid":"' + signer.kid + '","typ":"JWT","x":1}'))}.${p}.${s}`, /exactly/],
      [`${encodeBase64url(utf8Encode('{"typ":"JWT","kid":"' + signer.kid + '","alg":"EdDSA"}'))}.${p}.${s}`, /canonical/],
      [`${encodeBase64url(utf8Encode('{"alg":"none","kid":"' + signer.kid + '","typ":"JWT"}'))}.${p}.`, /exactly/],
    ];
    for (const [bad, why] of cases) {
      const r = verifyServiceReceipt(bad, keys);
      expect(r.valid, bad).toBe(false);
      expect(r.payload).toBeNull();
      expect(r.reason).toMatch(why);
    }
    expect(verifyServiceReceipt(jws, [{ kid: 'svc_other', publicKey: signer.publicKey }])).toMatchObject({
      valid: false,
      kid: signer.kid,
      reason: /no published key/,
    });
    expect(verifyServiceReceipt(jws, [{ kid: signer.kid, publicKey: otherKey }])).toMatchObject({ valid: false, reason: /signature/ });
    expect(verifyServiceReceipt(jws, [])).toMatchObject({ valid: false });
    expect(verifyServiceReceipt(42 as unknown as string, keys)).toMatchObject({ valid: false });
  });

  it('refuses a payload whose kid or iss names another key, even when signed', () => {
    expect(verifyServiceReceipt(signer.sign({ kid: 'svc_0000000000000000' }), keys)).toMatchObject({ valid: false, reason: /payload kid/ });
    const otherDid = didKeyFromPublicKey(publicKeyFromSeed(new Uint8Array(randomBytes(32))));
    expect(verifyServiceReceipt(signer.sign({ iss: otherDid }), keys)).toMatchObject({ valid: false, reason: /iss/ });
  });

  it('accepts a service receipt signed by hand with the same rule (independent of sign())', async () => {
    const seed = new Uint8Array(randomBytes(32));
    const publicKey = publicKeyFromSeed(seed);
    const kid = serviceKid(publicKey);
    const input = `${encodeBase64url(utf8Encode(`{"alg":"EdDSA","kid":"${kid}","typ":"JWT"}`))}.${encodeBase64url(utf8Encode('{"a":1}'))}`;
    const jws = `${input}.${encodeBase64url(signEd25519(seed, utf8Encode(input)))}`;
    expect(verifyServiceReceipt(jws, [{ kid, publicKey }])).toEqual({ valid: true, kid, payload: { a: 1 } });
  });
});

describe('rotation and the published keys', () => {
  let svc: TestService;

  it('publishes the current key at /v1/keys and /.well-known/jwks.json without auth', async () => {
    svc = await startTestService();
    cleanup.push(svc.close);
    const signer = svc.deps.signer;
    const keys = await svc.call('GET', '/v1/keys');
    expect(keys.status).toBe(200);
    expect(keys.headers.get('cache-control')).toMatch(/max-age/);
    expect(keys.body).toEqual({
      keys: [
        {
          kid: signer.kid,
          did: signer.did,
          alg: 'EdDSA',
          public_key: encodeBase64url(signer.publicKey),
          status: 'current',
          created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
          retired_at: null,
        },
      ],
    });
    const jwks = await svc.call('GET', '/.well-known/jwks.json');
    expect(jwks.status).toBe(200);
    expect(jwks.body).toEqual({
      keys: [{ kty: 'OKP', crv: 'Ed25519', x: encodeBase64url(signer.publicKey), kid: signer.kid, use: 'sig', alg: 'EdDSA' }],
    });
    // Nothing secret leaks into the published form.
    expect(JSON.stringify(keys.body)).not.toMatch(/seed|encrypted|v1\./);
  });

  it('keeps the old key published as retired, and its service receipts still verify', async () => {
    const db = svc.store.db;
    const tenantId = await seedTenant(db);
    const before = await recordServiceReceipt(db, svc.deps.signer, {
      tenantId,
      kind: 'delegation.accepted',
      subject: 'sha256:aa',
      data: { n: 1 },
      now: svc.clock.now,
    });

    svc.clock.now += 3600;
    const next = await rotateServiceKey(db, svc.deps.config.masterKey!, svc.clock.now);
    expect(next.kid).not.toBe(svc.deps.signer.kid);
    const after = await recordServiceReceipt(db, next, {
      tenantId,
      kind: 'delegation.revoked',
      subject: 'sha256:aa',
      data: {},
      now: svc.clock.now,
    });

    const keys = await svc.call('GET', '/v1/keys');
    expect(keys.body.keys.map((k: { kid: string; status: string }) => [k.kid, k.status])).toEqual([
      [next.kid, 'current'],
      [svc.deps.signer.kid, 'retired'],
    ]);
    expect(keys.body.keys[1].retired_at).toBe(new Date(svc.clock.now * 1000).toISOString());
    const jwks = await svc.call('GET', '/.well-known/jwks.json');
    expect(jwks.body.keys.map((k: { kid: string }) => k.kid)).toEqual([next.kid, svc.deps.signer.kid]);

    // An auditor re-verifies offline from the published JWKS alone.
    const published = jwks.body.keys.map((k: { kid: string; x: string }) => ({ kid: k.kid, publicKey: decodeBase64url(k.x, 'x') }));
    const old = verifyServiceReceipt(before.jws, published);
    expect(old).toMatchObject({
      valid: true,
      kid: svc.deps.signer.kid,
      payload: { baton_receipt: 'delegation.accepted', iss: svc.deps.signer.did },
    });
    expect(verifyServiceReceipt(after.jws, published)).toMatchObject({ valid: true, kid: next.kid, payload: { iss: next.did } });
    // …and the same from /v1/keys.
    const fromKeys = keys.body.keys.map((k: { kid: string; public_key: string }) => ({
      kid: k.kid,
      publicKey: decodeBase64url(k.public_key, 'pk'),
    }));
    expect(verifyServiceReceipt(before.jws, fromKeys).valid).toBe(true);

    // A restart loads the new key.
    const reloaded = await loadServiceSigner(db, svc.deps.config.masterKey!, silentLogger);
    expect(reloaded.kid).toBe(next.kid);
    expect((await publishedServiceKeys(db)).map((k) => k.status)).toEqual(['current', 'retired']);
    expect(await db.select().from(serviceKeys).where(isNotNull(serviceKeys.retiredAt))).toHaveLength(1);
  });

  it('leaves exactly one active key when rotations race; a loser gets CONFLICT', async () => {
    const { store } = await fresh();
    const masterKey = newMasterKey();
    await loadServiceSigner(store.db, masterKey, silentLogger);
    const results = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => rotateServiceKey(store.db, masterKey, 1_800_000_000 + i)));
    expect(results.some((r) => r.status === 'fulfilled')).toBe(true);
    for (const r of results) {
      if (r.status === 'rejected') expect(r.reason).toMatchObject({ code: 'CONFLICT' });
    }
    expect(await store.db.select().from(serviceKeys).where(isNull(serviceKeys.retiredAt))).toHaveLength(1);
    const active = await loadServiceSigner(store.db, masterKey, silentLogger);
    const fulfilled = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.kid] : []));
    expect(fulfilled).toContain(active.kid);
  });
});
