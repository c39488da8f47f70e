/**
 * What the log refuses of a witness, and says when it does: a name that reads as the log's own in
 * any spelling (a port, a scheme, a user@, percent-escapes, look-alike letters), the empty tree's
 * checkpoint, and a cosignature dated out of range or in the future (outside probe, fixF of s52).
 * Then (review of fixF, fixF2 of s52): what prints as nothing, other dots, punycode, a log name
 * with a scheme, and verdicts remembered rather than read again on every GET.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { cosignatureSigner, cosignedMessage } from '../../src/protocol/cosignature.js';
import { publicKeyFromSeed, signEd25519 } from '../../src/protocol/ed25519.js';
import { COSIGNATURE_V1, formatVerifierKey, parseNote, signNote, verifierKey } from '../../src/protocol/note.js';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { readsAsTheLog } from '../../src/service/log-tree.js';
import { silentLogger } from '../../src/service/log.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';

const ORIGIN = 'baton.test/baton/ten_x';

describe('readsAsTheLog', () => {
  it('reads a name as a person does: a port, a scheme, a user@, percent-escapes and look-alike letters make no other name', () => {
    for (const name of [
      'baton.test:443/baton/ten_x',
      'baton.test:/baton/ten_x',
      'baton.test:8443',
      'baton.test.:443./baton/ten_x',
      'https://baton.test/baton/ten_x',
      'HTTPS://Baton.Test:443/baton/ten_x',
      'x@baton.test/baton/ten_x',
      'baton.test@witness.example/baton/ten_x',
      'baton%2Etest/baton/ten_x',
      'baton.test%2Fbaton%2Ften_x',
      '%62aton.test',
      '%2562aton.test',
      'bat0n.test/baton/ten_x',
      'baton.tes\u0442/baton/ten_x', // Cyrillic т
      'b\u0430ton.test', // Cyrillic а
      '\uff42aton.test', // fullwidth b
      'bat\u00f3n.test', // an accent
      'baton.test\\baton\\ten_x',
      'baton.test /baton/ten_x',
      // A URL parser reads these as host baton.test too: a scheme without slashes, a query, a fragment, parameters.
      'https:baton.test/baton/ten_x',
      'baton.test?x/baton',
      'baton.test#x',
      'baton.test;x',
    ]) {
      expect(readsAsTheLog(name, ORIGIN), name).toBe(true);
    }
    expect(readsAsTheLog('IDENTITY.EXAMPLE/x', 'identity.example/baton/ten_x')).toBe(true);
    expect(readsAsTheLog('ldentity.example', 'identity.example/baton/ten_x')).toBe(true);
    expect(readsAsTheLog('exarnple.com', 'example.com/baton/ten_x')).toBe(true);
    // Names of their own stay theirs.
    for (const name of [
      'witness.example',
      'baton.test-witness.example',
      'baton.testing/baton/ten_x',
      'witness.example/baton.test',
      'witness.example:443/baton/ten_x',
      'https://witness.example/baton.test',
      'baton.test.witness.example',
      'witness.example/a?b',
      'witness.example:8443',
    ]) {
      expect(readsAsTheLog(name, ORIGIN), name).toBe(false);
    }
  });

  it('reads what prints as nothing as nothing, other dots as dots, and punycode as the letters it stands for', () => {
    // Names stored before checkWitnessName refused `%` (and other scripts) are still judged here.
    for (const name of [
      'baton%E2%80%8B.test/baton/ten_x', // a zero-width space
      'baton\u200b.test',
      'baton%C2%AD.test/x', // a soft hyphen
      'baton.test%00/x', // NUL
      'bat\u2060on.test', // a word joiner
      'bat%D6%85n.test/x', // Armenian օ
      'baton%E3%80%82test/x', // ideographic full stop
      'baton\uff61test',
      'baton\uff0etest',
      'baton,test/x',
      'baton..test',
      'baton.%E2%80%8B.test',
      '.baton.test/baton/ten_x',
      'xn--bton-53d.test/baton/ten_x', // bаton.test, Cyrillic а
      'XN--BTON-53D.test',
      'witness@xn--bton-53d.test',
      'xn--batn-sqa.test', // batón.test
    ]) {
      expect(readsAsTheLog(name, ORIGIN), name).toBe(true);
    }
    for (const name of [
      'xn--witness.example',
      'witness.example/xn--bton-53d',
      'batontest',
      'baton-test.example',
      'baton.test,witness.example',
    ]) {
      expect(readsAsTheLog(name, ORIGIN), name).toBe(false);
    }
  });

  it("compares with every reading of the log's name: a scheme in BATON_TLOG_NAME does not shield its host", () => {
    for (const origin of ['https://baton.test/baton/ten_x', 'HTTPS://baton.test:443/baton/ten_x', 'baton.test:8443/baton/ten_x']) {
      for (const name of ['baton.test/x', 'baton.test', 'https://baton.test/baton/ten_x', 'baton.test:443/baton/ten_y']) {
        expect(readsAsTheLog(name, origin), `${name} under ${origin}`).toBe(true);
      }
      expect(readsAsTheLog('witness.example', origin), origin).toBe(false);
      expect(readsAsTheLog('witness.example/baton.test', origin), origin).toBe(false);
    }
    // Under the default name, a local witness on a port reads as the log too (docs/transparency-log.md).
    expect(readsAsTheLog('localhost:9000', 'localhost/baton/ten_x')).toBe(true);
    expect(readsAsTheLog('witness.localhost:9000', 'localhost/baton/ten_x')).toBe(false);
  });

  it("reads each witness name once per log name, and the log's name once, however often a checkpoint is served", () => {
    const normalize = vi.spyOn(String.prototype, 'normalize');
    try {
      const origin = 'memo-a.example/baton/ten_x';
      const calls = (name: string, o = origin) => {
        normalize.mockClear();
        const verdict = readsAsTheLog(name, o);
        return { verdict, reads: normalize.mock.calls.length };
      };
      const first = calls('memo-witness-1.example');
      expect(first).toMatchObject({ verdict: false });
      expect(first.reads).toBeGreaterThan(0);
      // The same name again: the verdict is remembered, nothing is read.
      expect(calls('memo-witness-1.example')).toEqual({ verdict: false, reads: 0 });
      expect(calls('memo-a.example/x')).toMatchObject({ verdict: true });
      expect(calls('memo-a.example/x')).toEqual({ verdict: true, reads: 0 });
      // Another name under a log name already read: only the witness's name is read.
      const second = calls('memo-witness-2.example');
      expect(second.reads).toBeLessThan(first.reads);
      // Another tenant's log of the same name shares the log's reading and the verdicts.
      expect(calls('memo-witness-1.example', 'memo-a.example/baton/ten_y')).toEqual({ verdict: false, reads: 0 });
    } finally {
      normalize.mockRestore();
    }
  });
});

describe('the cosignature route', () => {
  let svc: TestService;
  let tenant: TestTenant;
  beforeAll(async () => {
    svc = await startTestService({ env: { BATON_TLOG_NAME: 'baton.test' }, pool: 3 });
    tenant = await setupTenant(svc, 'acme');
  });
  afterAll(() => svc.close());

  const integrate = () => integrateOnce({ store: svc.store, signer: svc.deps.signer, log: silentLogger, logName: 'baton.test' });
  async function grownCheckpoint(n: number): Promise<string> {
    await recordServiceReceipt(svc.store.db, svc.deps.signer, {
      tenantId: tenant.id,
      kind: 'invocation.denied',
      subject: `inv:${n}`,
      data: { n },
      now: svc.clock.now,
    });
    await integrate();
    return (await svc.call('GET', '/v1/log/checkpoint', { key: tenant.keys.audit })).body as string;
  }
  const post = (key: string, name: string, checkpoint: string, at = svc.clock.now, seed = randomBytes(32)) =>
    svc.call('POST', '/v1/log/cosignatures', {
      key,
      json: {
        witness_key: formatVerifierKey(verifierKey(name, COSIGNATURE_V1, publicKeyFromSeed(seed))),
        checkpoint: signNote(parseNote(checkpoint), [cosignatureSigner(name, seed, at)]),
      },
    });

  it("refuses the empty tree's checkpoint, which it serves as size 0 always, with a clear 400", async () => {
    const empty = await setupTenant(svc, 'empty');
    const latest = await svc.call('GET', '/v1/log/checkpoint', { key: empty.keys.audit });
    expect(latest.body.split('\n')[1]).toBe('0');
    const refused = await post(empty.keys.audit, 'witness.example', latest.body);
    expect(refused.status, JSON.stringify(refused.body)).toBe(400);
    expect(refused.body.error).toMatchObject({
      code: 'INVALID_REQUEST',
      message: expect.stringMatching(/size 0 \(the empty tree\) takes no cosignature/),
      suggestion: expect.stringMatching(/size 1 or more/),
      details: { tree_size: 0 },
    });
    // checkpoints/0 is the empty tree's note, whatever the log's size, and carries no cosignature.
    const zero = await svc.call('GET', '/v1/log/checkpoints/0', { key: empty.keys.audit });
    expect(zero.status).toBe(200);
    expect(zero.body).toBe(latest.body);
    await grownCheckpoint(1);
    const zeroOfGrown = await svc.call('GET', '/v1/log/checkpoints/0', { key: tenant.keys.audit });
    expect(zeroOfGrown.body.split('\n').slice(1, 3)).toEqual(['0', latest.body.split('\n')[2]]);
    expect((await post(tenant.keys.audit, 'witness.example', zeroOfGrown.body)).status).toBe(400);
  });

  it('refuses a witness named as the log behind a port, a scheme or a user@, and no longer serves such a stored line', async () => {
    const cp = await grownCheckpoint(2);
    const origin = cp.split('\n')[0]!;
    for (const name of [
      origin.replace('baton.test', 'baton.test:443'),
      origin.replace('baton.test', 'baton.test:'),
      `https://${origin}`,
      `x@${origin}`,
      origin.replace('baton.test', 'bat0n.test'),
      origin.replace('baton.test', 'baton,test'),
      origin.replace('baton.test', 'baton..test'),
      origin.replace('baton.test', 'xn--bton-53d.test'),
    ]) {
      const refused = await post(tenant.keys.audit, name, cp);
      expect(refused.status, name).toBe(400);
      expect(refused.body.error).toMatchObject({
        code: 'INVALID_VERIFIER_KEY',
        message: expect.stringMatching(/the name of this service's log/),
      });
    }
    // A line so named, stored before the rule, is kept but not served; a witness of its own still is.
    expect((await post(tenant.keys.audit, 'witness.example:443', cp)).status).toBe(201);
    const size = Number(cp.split('\n')[1]);
    const portLine = `\u2014 ${origin.replace('baton.test', 'baton.test:443')} ${Buffer.alloc(72).toString('base64')}`;
    await svc.store.db.execute(
      sql`insert into log_cosignatures (tenant_id, tree_size, witness_key, line, posted_by_key)
          values (${tenant.id}, ${size}, ${'baton.test:443+00000000+AQ=='}, ${portLine}, null)`,
    );
    const served = (await svc.call('GET', `/v1/log/checkpoints/${size}`, { key: tenant.keys.audit })).body as string;
    expect(served).toContain('\u2014 witness.example:443 ');
    expect(served).not.toContain(portLine);
  });

  it('refuses a witness name holding `%`, whatever it decodes to, and serves no stored line whose name prints as nothing in places', async () => {
    const cp = await grownCheckpoint(4);
    const origin = cp.split('\n')[0]!;
    for (const name of [
      origin.replace('baton.test', 'baton%E2%80%8B.test'), // a zero-width space
      'baton%C2%AD.test/x', // a soft hyphen
      'bat%D6%85n.test/x', // Armenian օ
      'baton%E3%80%82test/x', // ideographic full stop
      'baton.test%00/x',
      'baton%2etest/x',
      'witness.example/100%25', // an escape of nothing alike is refused too: no name needs one
      'witness.example/50%',
    ]) {
      const refused = await post(tenant.keys.audit, name, cp);
      expect(refused.status, name).toBe(400);
      expect(refused.body.error, name).toMatchObject({
        code: 'INVALID_VERIFIER_KEY',
        message: expect.stringMatching(/^A witness name holds no `%`: a percent-escape .* could read as another\./),
      });
    }
    // Lines stored before these rules: judged as a person reads them.
    const size = Number(cp.split('\n')[1]);
    const signature = Buffer.alloc(72).toString('base64');
    const storedNames = [
      'baton%E2%80%8B.test/baton/ten_x',
      'baton%C2%AD.test/x',
      'bat%D6%85n.test/x',
      'baton%E3%80%82test/x',
      'baton.test%00/x',
      'baton,test/x',
      'xn--bton-53d.test/x',
      'bat\u0585n.test/x', // Armenian օ
    ];
    for (const name of storedNames) {
      await svc.store.db.execute(
        sql`insert into log_cosignatures (tenant_id, tree_size, witness_key, line, posted_by_key)
            values (${tenant.id}, ${size}, ${`${name}+00000000+AQ==`}, ${`\u2014 ${name} ${signature}`}, null)`,
      );
    }
    expect((await post(tenant.keys.audit, 'witness-own.example', cp)).status).toBe(201);
    const served = (await svc.call('GET', `/v1/log/checkpoints/${size}`, { key: tenant.keys.audit })).body as string;
    expect(served).toContain('\u2014 witness-own.example ');
    for (const name of storedNames) expect(served, name).not.toContain(`\u2014 ${name} `);
  });

  it('says a timestamp past 2^63 - 1 is no cosignature, and points a future-dated one at its clock', async () => {
    const cp = await grownCheckpoint(3);
    const dated = (t: bigint) => {
      const seed = randomBytes(32);
      const key = verifierKey('clock.example', COSIGNATURE_V1, publicKeyFromSeed(seed));
      const time = new Uint8Array(8);
      new DataView(time.buffer).setBigUint64(0, t);
      const cosigned = signNote(parseNote(cp), [
        { key, sign: (text) => new Uint8Array([...time, ...signEd25519(seed, cosignedMessage(t, text))]) },
      ]);
      return svc.call('POST', '/v1/log/cosignatures', {
        key: tenant.keys.audit,
        json: { witness_key: formatVerifierKey(key), checkpoint: cosigned },
      });
    };
    for (const t of [2n ** 64n - 1n, 2n ** 63n]) {
      const refused = await dated(t);
      expect(refused.status, String(t)).toBe(403);
      expect(refused.body.error).toMatchObject({
        code: 'NOTE_NOT_VERIFIED',
        message: expect.stringMatching(/timestamp is past 9223372036854775807 \(2\^63 - 1\).*no cosignature at all/),
        suggestion: expect.stringMatching(/witness's clock/),
      });
    }
    for (const t of [2n ** 63n - 1n, 2n ** 60n, BigInt(svc.clock.now + 3_600)]) {
      const refused = await dated(t);
      expect(refused.status, String(t)).toBe(403);
      expect(refused.body.error).toMatchObject({
        code: 'NOTE_NOT_VERIFIED',
        message: 'The cosignature is dated in the future.',
        suggestion: expect.stringMatching(/^Check the witness's clock/),
        details: { log_time: svc.clock.now },
      });
    }
  });
});
