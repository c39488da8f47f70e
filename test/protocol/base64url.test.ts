import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeBase64url, encodeBase64url } from '../../src/protocol/base64url.js';
import { BatonError } from '../../src/protocol/errors.js';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const enc = new TextEncoder();

function malformed(s: string, what = 'signature of receipt 1'): BatonError {
  try {
    decodeBase64url(s, what);
  } catch (e) {
    if (!(e instanceof BatonError)) throw e;
    expect(e.code).toBe('MALFORMED_JWS');
    expect(e.message).toContain(what);
    expect(e.details?.['what']).toBe(what);
    return e;
  }
  throw new Error(`expected ${JSON.stringify(s)} to be rejected`);
}

describe('encodeBase64url', () => {
  it('RFC 4648 section 10 vectors, unpadded, URL alphabet', () => {
    const cases: [string, string][] = [
      ['', ''],
      ['f', 'Zg'],
      ['fo', 'Zm8'],
      ['foo', 'Zm9v'],
      ['foob', 'Zm9vYg'],
      ['fooba', 'Zm9vYmE'],
      ['foobar', 'Zm9vYmFy'],
    ];
    for (const [plain, b64] of cases) {
      expect(encodeBase64url(enc.encode(plain))).toBe(b64);
      expect(decodeBase64url(b64, 'x')).toEqual(enc.encode(plain));
    }
    expect(encodeBase64url(Uint8Array.of(0xfb, 0xff))).toBe('-_8');
    expect(encodeBase64url(Uint8Array.of(0xfb, 0xef, 0xbe))).toBe('----');
    expect(encodeBase64url(Uint8Array.of(0xff, 0xff, 0xff))).toBe('____');
  });

  it('encodes only the view, not the whole underlying buffer', () => {
    const backing = Uint8Array.of(1, 2, 3, 0x66, 0x6f, 0x6f, 9, 9);
    expect(encodeBase64url(backing.subarray(3, 6))).toBe('Zm9v');
  });
});

describe('decodeBase64url strictness', () => {
  it("decodes '' to zero bytes (callers check for empty segments)", () => {
    const out = decodeBase64url('', 'x');
    expect(out).toBeInstanceOf(Uint8Array);
    expect(out).toHaveLength(0);
  });

  it("rejects '=' padding anywhere", () => {
    for (const s of ['QQ==', 'QUI=', '=', '====', 'Zm9v====', 'Q=Q=', 'QQ=']) {
      const e = malformed(s);
      expect(['padding', 'length']).toContain(e.details?.['reason']);
    }
    expect(malformed('QUI=').details?.['reason']).toBe('padding');
  });

  it("rejects the standard alphabet's '+' and '/'", () => {
    for (const s of ['+', 'a+b/', '++++', '////', 'Zm9+', 'Zm9/']) malformed(s);
    expect(malformed('ab+d').details?.['position']).toBe(2);
  });

  it('rejects whitespace and other characters outside [A-Za-z0-9_-]', () => {
    for (const s of [' QQ', 'QQ ', 'Q Q', 'QQ\n', '\tQQ', 'QQ\r\n', 'Zm9v\u00a0', 'QQ\u0000', 'Zm9vé', 'Ｚm9v', 'Zm9v😂', '.QQ', 'QQ%3D']) {
      malformed(s);
    }
  });

  it('rejects a length of 1 modulo 4', () => {
    for (const s of ['Q', 'QUJDR', 'Zm9vYmFyZ']) expect(malformed(s).details?.['reason']).toBe('length');
  });

  it('rejects non-zero unused trailing bits (one spelling per byte string)', () => {
    // "A" is 0x41: QQ is canonical; QR..QZ, Qa.. differ only in the 4 unused bits.
    expect(decodeBase64url('QQ', 'x')).toEqual(Uint8Array.of(0x41));
    for (const c of 'RSTUVWXYZabcdef') expect(malformed(`Q${c}`).details?.['reason']).toBe('trailing-bits');
    // "AB" is QUI: the last character has 2 unused bits.
    expect(decodeBase64url('QUI', 'x')).toEqual(Uint8Array.of(0x41, 0x42));
    for (const s of ['QUJ', 'QUK', 'QUL']) expect(malformed(s).details?.['reason']).toBe('trailing-bits');
    // Node alone would accept all of these.
    expect(Buffer.from('QR', 'base64url')).toEqual(Buffer.from('QQ', 'base64url'));
  });

  it('names `what` in the message', () => {
    const e = malformed('a=', 'payload of the invocation');
    expect(e.message).toMatch(/^payload of the invocation /);
  });

  it('returns a plain Uint8Array that owns its memory (no shared Buffer pool)', () => {
    const out = decodeBase64url('Zm9vYmFy', 'x');
    expect(Object.getPrototypeOf(out)).toBe(Uint8Array.prototype);
    expect(out.byteOffset).toBe(0);
    expect(out.buffer.byteLength).toBe(6);
  });
});

describe('properties (fast-check)', () => {
  it('round trip: decode(encode(b)) equals b, and encode matches Node', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 512 }), (b) => {
        const s = encodeBase64url(b);
        expect(s).toBe(Buffer.from(b).toString('base64url'));
        expect(s).not.toMatch(/[=+/]/);
        expect(decodeBase64url(s, 'b')).toEqual(b);
      }),
      { numRuns: 1000 },
    );
  });

  it('canonical: anything accepted re-encodes to exactly the input; the rest is MALFORMED_JWS', () => {
    const unit = fc.oneof(
      { weight: 20, arbitrary: fc.constantFrom(...ALPHABET) },
      { weight: 1, arbitrary: fc.constantFrom('=', '+', '/', ' ', '\n', '.', 'é', '\u0000') },
    );
    fc.assert(
      fc.property(fc.string({ unit, maxLength: 40 }), (s) => {
        let bytes: Uint8Array;
        try {
          bytes = decodeBase64url(s, 's');
        } catch (e) {
          expect(e).toBeInstanceOf(BatonError);
          expect((e as BatonError).code).toBe('MALFORMED_JWS');
          return;
        }
        expect(encodeBase64url(bytes)).toBe(s);
      }),
      { numRuns: 3000 },
    );
  });

  it('setting any unused trailing bit of a valid encoding makes it rejected', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.nat(), (b, flip) => {
        const s = encodeBase64url(b);
        if (s.length % 4 === 0) return;
        // Set one unused trailing bit: must now be rejected.
        const unused = s.length % 4 === 2 ? 4 : 2;
        const last = ALPHABET.indexOf(s.charAt(s.length - 1));
        const tampered = s.slice(0, -1) + ALPHABET.charAt(last | (1 << (flip % unused)));
        expect(() => decodeBase64url(tampered, 't')).toThrow(BatonError);
      }),
      { numRuns: 1000 },
    );
  });
});
