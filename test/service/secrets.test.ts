import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { decodeBase64url, encodeBase64url } from '../../src/protocol/base64url.js';
import { batonErrorOf } from '../support/errors.js';
import { openSecret, sealSecret } from '../../src/service/secrets.js';

const masterKey = () => new Uint8Array(randomBytes(32));

describe('sealSecret / openSecret', () => {
  it('round-trips, in the versioned format, with a fresh nonce each time', () => {
    const key = masterKey();
    const plain = new Uint8Array(randomBytes(32));
    const a = sealSecret(plain, key, 'service-key:svc_1');
    const b = sealSecret(plain, key, 'service-key:svc_1');
    expect(a).toMatch(/^v1\.[A-Za-z0-9_-]+$/);
    expect(a).not.toBe(b);
    // nonce(12) + ciphertext(32) + tag(16)
    expect(decodeBase64url(a.slice(3), 'sealed')).toHaveLength(60);
    expect(openSecret(a, key, 'service-key:svc_1')).toEqual(plain);
    expect(openSecret(b, key, 'service-key:svc_1')).toEqual(plain);
  });

  it('round-trips empty and larger values', () => {
    const key = masterKey();
    for (const plain of [new Uint8Array(0), new Uint8Array(randomBytes(1000))]) {
      expect(openSecret(sealSecret(plain, key, 'c'), key, 'c')).toEqual(plain);
    }
  });

  it('never contains the plaintext', () => {
    const key = masterKey();
    const plain = new Uint8Array(randomBytes(32));
    const sealed = sealSecret(plain, key, 'custodial:ten_a');
    for (const spelling of [Buffer.from(plain).toString('hex'), encodeBase64url(plain), Buffer.from(plain).toString('base64')]) {
      expect(sealed).not.toContain(spelling);
    }
  });

  it('refuses the wrong master key, saying what to check', () => {
    const sealed = sealSecret(new Uint8Array(randomBytes(32)), masterKey(), 'service-key:svc_1');
    const e = batonErrorOf(() => openSecret(sealed, masterKey(), 'service-key:svc_1'));
    expect(e.code).toBe('INTERNAL');
    expect(e.message).toMatch(/BATON_MASTER_KEY does not match the master key that sealed the data/);
    expect(e.suggestion).toMatch(/same BATON_MASTER_KEY/);
  });

  it('refuses another context (a sealed value moved to another row)', () => {
    const key = masterKey();
    const sealed = sealSecret(new Uint8Array(randomBytes(32)), key, 'custodial:ten_a');
    for (const other of ['custodial:ten_b', 'custodial:ten_a ', 'service-key:ten_a', 'custodial:ten_']) {
      expect(batonErrorOf(() => openSecret(sealed, key, other)).code).toBe('INTERNAL');
    }
  });

  it('refuses a flipped bit in any byte: nonce, ciphertext or tag', () => {
    const key = masterKey();
    const sealed = sealSecret(new Uint8Array(randomBytes(32)), key, 'c');
    const bytes = decodeBase64url(sealed.slice(3), 'sealed');
    for (let i = 0; i < bytes.length; i++) {
      const tampered = bytes.slice();
      tampered[i] = tampered[i]! ^ 0x01;
      expect(batonErrorOf(() => openSecret(`v1.${encodeBase64url(tampered)}`, key, 'c')).code).toBe('INTERNAL');
    }
  });

  it('refuses truncation, extension, another version, garbage and non-canonical base64url', () => {
    const key = masterKey();
    const sealed = sealSecret(new Uint8Array(randomBytes(32)), key, 'c');
    const bytes = decodeBase64url(sealed.slice(3), 'sealed');
    const cases = [
      `v1.${encodeBase64url(bytes.subarray(0, bytes.length - 1))}`,
      `v1.${encodeBase64url(new Uint8Array([...bytes, 0]))}`,
      `v1.${encodeBase64url(bytes.subarray(0, 27))}`,
      `v2.${sealed.slice(3)}`,
      sealed.slice(3),
      '',
      'v1.',
      'v1.!!!!',
      `${sealed}=`,
      `v1.${'A'.repeat(10_000)}`,
    ];
    for (const c of cases) expect(batonErrorOf(() => openSecret(c, key, 'c')).code).toBe('INTERNAL');
  });

  it('refuses a master key that is not 32 bytes, and an empty context', () => {
    const plain = new Uint8Array(32);
    expect(batonErrorOf(() => sealSecret(plain, new Uint8Array(16), 'c')).message).toMatch(/32 bytes/);
    expect(batonErrorOf(() => sealSecret(plain, masterKey(), '')).code).toBe('INTERNAL');
    const key = masterKey();
    const sealed = sealSecret(plain, key, 'c');
    expect(batonErrorOf(() => openSecret(sealed, key.subarray(0, 31), 'c')).code).toBe('INTERNAL');
  });

  it('puts neither the plaintext nor the master key in the error', () => {
    const key = masterKey();
    const plain = new Uint8Array(randomBytes(32));
    const sealed = sealSecret(plain, key, 'c');
    const e = batonErrorOf(() => openSecret(sealed, masterKey(), 'c'));
    const text = JSON.stringify({ m: e.message, s: e.suggestion, d: e.details });
    expect(text).not.toContain(Buffer.from(plain).toString('hex'));
    expect(text).not.toContain(Buffer.from(key).toString('hex'));
    expect(text).not.toContain(sealed.slice(3, 20));
  });
});
