import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeBase58btc, encodeBase58btc } from '../../src/protocol/base58.js';
import { didKeyFromPublicKey, publicKeyFromDidKey } from '../../src/protocol/did-key.js';
import { publicKeyFromSeed } from '../../src/protocol/ed25519.js';
import { BatonError, type ErrorCode } from '../../src/protocol/errors.js';

const hex = (h: string): Uint8Array => new Uint8Array(Buffer.from(h, 'hex'));
const toHex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);

/** The BatonError code and details.reason that `fn` throws. */
function refusal(fn: () => unknown): { code: ErrorCode; reason: unknown } {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(BatonError);
    const err = e as BatonError;
    return { code: err.code, reason: err.details?.['reason'] };
  }
  throw new Error('expected a BatonError, nothing was thrown');
}

/** did:key for arbitrary multicodec bytes, bypassing didKeyFromPublicKey's checks. */
const rawDid = (bytes: Uint8Array): string => 'did:key:z' + encodeBase58btc(bytes);
const ed25519Multicodec = (pub: Uint8Array): Uint8Array => new Uint8Array([0xed, 0x01, ...pub]);

// DRS 4.0 conformance principals (OkeyAmy/DRS fixtures); the keys are RFC 8032 TEST 1-3.
const CONFORMANCE = [
  {
    name: 'alice',
    pub: 'd75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a',
    did: 'did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw',
  },
  {
    name: 'bob',
    pub: '3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c',
    did: 'did:key:z6MkiaMbhXHNA4eJVCCj8dbzKzTgYDKf6crKgHVHid1F1WCT',
  },
  {
    name: 'charlie',
    pub: 'fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025',
    did: 'did:key:z6MkwSD8dBdqcXQzKJZQFPy2hh2izzxskndKCjdmC2dBpfME',
  },
] as const;
const ALICE = CONFORMANCE[0];

describe('base58btc', () => {
  it('encodes known values (leading zero bytes become leading 1s)', () => {
    expect(encodeBase58btc(utf8('Hello World!'))).toBe('2NEpo7TZRRrLZSi2U');
    expect(encodeBase58btc(hex('0000287fb4cd'))).toBe('11233QC4');
    expect(encodeBase58btc(new Uint8Array())).toBe('');
    expect(encodeBase58btc(new Uint8Array([0]))).toBe('1');
    expect(toHex(decodeBase58btc('11233QC4'))).toBe('0000287fb4cd');
  });

  it('round-trips any bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 80 }), (bytes) => {
        expect(toHex(decodeBase58btc(encodeBase58btc(bytes)))).toBe(toHex(bytes));
      }),
    );
  });

  it('throws on characters outside the alphabet', () => {
    for (const bad of ['0', 'O', 'I', 'l', '+', '/', ' ', 'é', '\u{1F600}', 'abc=']) {
      expect(refusal(() => decodeBase58btc(bad)).code).toBe('INVALID_FIELD');
    }
  });
});

describe('did:key round trip', () => {
  it.each(CONFORMANCE)('$name', ({ pub, did }) => {
    expect(didKeyFromPublicKey(hex(pub))).toBe(did);
    expect(toHex(publicKeyFromDidKey(did))).toBe(pub);
    expect(toHex(publicKeyFromDidKey(did))).toBe(pub); // memoised path
  });

  it('any generated key: 56 characters, z6Mk prefix, round-trips', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), (seed) => {
        const pub = publicKeyFromSeed(seed);
        const did = didKeyFromPublicKey(pub);
        expect(did).toMatch(/^did:key:z6Mk[1-9A-HJ-NP-Za-km-z]{44}$/);
        expect(toHex(publicKeyFromDidKey(did))).toBe(toHex(pub));
      }),
      { numRuns: 50 },
    );
  });

  it('a caller mutating the returned key cannot poison the memo', () => {
    const first = publicKeyFromDidKey(ALICE.did);
    first.fill(0);
    expect(toHex(publicKeyFromDidKey(ALICE.did))).toBe(ALICE.pub);
  });
});

describe('publicKeyFromDidKey refuses', () => {
  const pub = hex(ALICE.pub);
  const suffix = ALICE.did.slice('did:key:z'.length);

  it('wrong method or prefix (INVALID_DID)', () => {
    for (const did of ['', 'did:web:example.com', 'DID:key:z' + suffix, 'did:KEY:z' + suffix, ' ' + ALICE.did, 'key:z' + suffix]) {
      expect({ did, ...refusal(() => publicKeyFromDidKey(did)) }).toEqual({ did, code: 'INVALID_DID', reason: 'prefix' });
    }
  });

  it('a multibase other than z / base58btc (INVALID_DID)', () => {
    const base64url = 'u' + Buffer.from(ed25519Multicodec(pub)).toString('base64url');
    const base16 = 'f' + toHex(ed25519Multicodec(pub));
    for (const did of ['did:key:', 'did:key:' + base64url, 'did:key:' + base16, 'did:key:Z' + suffix]) {
      expect(refusal(() => publicKeyFromDidKey(did))).toEqual({ code: 'INVALID_DID', reason: 'multibase' });
    }
  });

  it('a character outside the base58btc alphabet (INVALID_DID)', () => {
    for (const ch of ['0', 'O', 'I', 'l', '_', '#']) {
      const did = ALICE.did.slice(0, 20) + ch + ALICE.did.slice(21);
      expect(refusal(() => publicKeyFromDidKey(did))).toEqual({ code: 'INVALID_DID', reason: 'base58' });
    }
    // DID URLs (fragment, query, path) are not bare DIDs.
    for (const tail of ['#z6Mk', '?x=1', '/path']) {
      expect(refusal(() => publicKeyFromDidKey(ALICE.did + tail)).code).toBe('INVALID_DID');
    }
  });

  it('leading 1s (zero bytes) added in front of the multicodec (INVALID_DID)', () => {
    for (const ones of ['1', '11', '1111']) {
      const did = 'did:key:z' + ones + suffix;
      expect(refusal(() => publicKeyFromDidKey(did))).toEqual({ code: 'INVALID_DID', reason: 'multicodec' });
    }
  });

  it('another multicodec (INVALID_DID)', () => {
    const x25519 = new Uint8Array([0xec, 0x01, ...pub]);
    const secp256k1 = new Uint8Array([0xe7, 0x01, 0x02, ...pub]);
    const ed25519Private = new Uint8Array([0x80, 0x26, ...pub]);
    for (const bytes of [x25519, secp256k1, ed25519Private, new Uint8Array([0xed]), new Uint8Array([0x01, 0xed, ...pub])]) {
      expect(refusal(() => publicKeyFromDidKey(rawDid(bytes)))).toEqual({ code: 'INVALID_DID', reason: 'multicodec' });
    }
    expect(refusal(() => publicKeyFromDidKey('did:key:z'))).toEqual({ code: 'INVALID_DID', reason: 'multicodec' });
  });

  it('the wrong key length (INVALID_DID)', () => {
    for (const bytes of [
      ed25519Multicodec(pub.subarray(0, 31)),
      ed25519Multicodec(new Uint8Array([...pub, 0])),
      new Uint8Array([0xed, 0x01]),
    ]) {
      expect(refusal(() => publicKeyFromDidKey(rawDid(bytes)))).toEqual({ code: 'INVALID_DID', reason: 'length' });
    }
    const huge = 'did:key:z' + '2'.repeat(10_000);
    expect(refusal(() => publicKeyFromDidKey(huge))).toEqual({ code: 'INVALID_DID', reason: 'length' });
  });

  it('the identity and every other small-order key (WEAK_KEY)', () => {
    const smallOrder = [
      '0100000000000000000000000000000000000000000000000000000000000000',
      '0000000000000000000000000000000000000000000000000000000000000000',
      '0000000000000000000000000000000000000000000000000000000000000080',
      '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
      '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85',
      'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
      'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa',
      'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
    ];
    for (const k of smallOrder) {
      expect(refusal(() => publicKeyFromDidKey(rawDid(ed25519Multicodec(hex(k)))))).toEqual({ code: 'WEAK_KEY', reason: 'small-order' });
    }
  });

  it('a non-canonical y or x = -0 (WEAK_KEY, reason non-canonical)', () => {
    const nonCanonical = [
      'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', // y = p, small order
      'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', // y = p + 1, the identity
      'f0ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', // y = p + 3, a large-order point
      '0100000000000000000000000000000000000000000000000000000000000080', // identity, x = -0
    ];
    for (const k of nonCanonical) {
      expect(refusal(() => publicKeyFromDidKey(rawDid(ed25519Multicodec(hex(k)))))).toEqual({ code: 'WEAK_KEY', reason: 'non-canonical' });
    }
  });

  it('32 bytes that are not a curve point (WEAK_KEY, reason not-on-curve)', () => {
    const did = rawDid(ed25519Multicodec(hex('02' + '00'.repeat(31))));
    expect(refusal(() => publicKeyFromDidKey(did))).toEqual({ code: 'WEAK_KEY', reason: 'not-on-curve' });
  });
});

describe('didKeyFromPublicKey refuses what publicKeyFromDidKey would refuse', () => {
  it('weak keys (WEAK_KEY) and wrong lengths (INVALID_DID)', () => {
    expect(refusal(() => didKeyFromPublicKey(hex('01' + '00'.repeat(31))))).toEqual({ code: 'WEAK_KEY', reason: 'small-order' });
    expect(refusal(() => didKeyFromPublicKey(hex('ed' + 'ff'.repeat(30) + '7f')))).toEqual({ code: 'WEAK_KEY', reason: 'non-canonical' });
    expect(refusal(() => didKeyFromPublicKey(new Uint8Array(31)))).toEqual({ code: 'INVALID_DID', reason: 'length' });
  });
});
