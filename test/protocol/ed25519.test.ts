/**
 * THE RULE (see src/protocol/ed25519.ts) on every public vector, three ways:
 * native (OpenSSL + pre-checks), noble (Point API) and an independent, slow
 * BigInt reference written here from the rule's text. All three must agree on
 * every case, and the per-suite accept/reject counts are pinned.
 */
import { createHash, createPublicKey, verify as nodeVerify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as ed from '@noble/ed25519';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  checkPublicKey,
  defaultEd25519Backend,
  generateSeed,
  isSmallOrderPointEncoding,
  publicKeyFromSeed,
  signEd25519,
  verifyEd25519,
  type Ed25519Backend,
} from '../../src/protocol/ed25519.js';

const BACKENDS: readonly Ed25519Backend[] = ['native', 'noble'];

const hex = (h: string): Uint8Array => new Uint8Array(Buffer.from(h, 'hex'));
const toHex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);
const readVectors = (rel: string): unknown => JSON.parse(readFileSync(new URL(`../vectors/${rel}`, import.meta.url), 'utf8'));

// ---------------------------------------------------------------------------
// Independent reference: edwards25519 in BigInt, extended coordinates, written
// from RFC 8032 section 5.1 and the rule. Shares no code with noble or OpenSSL.

const P = 2n ** 255n - 19n;
const L = 2n ** 252n + 27742317777372353535851937790883648493n;
const mod = (a: bigint, m: bigint = P): bigint => ((a % m) + m) % m;
function powMod(base: bigint, exp: bigint): bigint {
  let result = 1n;
  let b = mod(base);
  for (let e = exp; e > 0n; e >>= 1n) {
    if (e & 1n) result = mod(result * b);
    b = mod(b * b);
  }
  return result;
}
const inv = (a: bigint): bigint => powMod(a, P - 2n);
const D = mod(-121665n * inv(121666n));
const SQRT_M1 = powMod(2n, (P - 1n) / 4n);

interface RefPoint {
  X: bigint;
  Y: bigint;
  Z: bigint;
  T: bigint;
}
const IDENTITY: RefPoint = { X: 0n, Y: 1n, Z: 1n, T: 0n };

/** Unified twisted-Edwards addition for a = -1 (complete since d is a non-square). */
function add(p: RefPoint, q: RefPoint): RefPoint {
  const a = mod((p.Y - p.X) * (q.Y - q.X));
  const b = mod((p.Y + p.X) * (q.Y + q.X));
  const c = mod(2n * D * p.T * q.T);
  const d = mod(2n * p.Z * q.Z);
  const e = b - a,
    f = d - c,
    g = d + c,
    h = b + a;
  return { X: mod(e * f), Y: mod(g * h), Z: mod(f * g), T: mod(e * h) };
}
const negate = (p: RefPoint): RefPoint => ({ X: mod(-p.X), Y: p.Y, Z: p.Z, T: mod(-p.T) });
function mul(p: RefPoint, k: bigint): RefPoint {
  let acc = IDENTITY;
  for (let i = BigInt(k.toString(2).length) - 1n; i >= 0n; i--) {
    acc = add(acc, acc);
    if ((k >> i) & 1n) acc = add(acc, p);
  }
  return acc;
}
const isIdentity = (p: RefPoint): boolean => mod(p.X) === 0n && mod(p.Y - p.Z) === 0n;
const isSmallOrder = (p: RefPoint): boolean => isIdentity(mul(p, 8n));

const leToBig = (b: Uint8Array): bigint => BigInt('0x' + (toHex(b.slice().reverse()) || '0'));
function encode(p: RefPoint): Uint8Array {
  const zi = inv(p.Z);
  const x = mod(p.X * zi),
    y = mod(p.Y * zi);
  const out = hex(y.toString(16).padStart(64, '0')).reverse();
  out[31] = out[31]! | (Number(x & 1n) << 7);
  return out;
}
/** strict: RFC 8032 (y < p, no x = -0). lenient: reduce y mod p and allow x = -0, to find every small-order encoding. */
function decode(bytes: Uint8Array, strict: boolean): RefPoint | undefined {
  const sign = bytes[31]! >> 7;
  const yRaw = leToBig(bytes) & ((1n << 255n) - 1n);
  if (strict && yRaw >= P) return undefined;
  const y = mod(yRaw);
  const u = mod(y * y - 1n),
    v = mod(D * y * y + 1n);
  const x2 = mod(u * inv(v));
  let x = powMod(x2, (P + 3n) / 8n);
  if (mod(x * x - x2) !== 0n) x = mod(x * SQRT_M1);
  if (mod(x * x - x2) !== 0n) return undefined;
  if (x === 0n && sign === 1 && strict) return undefined;
  if (Number(x & 1n) !== sign) x = mod(-x);
  return { X: x, Y: y, Z: 1n, T: mod(x * y) };
}
const BASE = decode(hex('5866666666666666666666666666666666666666666666666666666666666666'), true)!;

function referenceVerify(pub: Uint8Array, msg: Uint8Array, sig: Uint8Array): boolean {
  if (sig.length !== 64 || pub.length !== 32) return false;
  const r = sig.slice(0, 32);
  const s = leToBig(sig.slice(32));
  if (s >= L) return false; // 1
  const A = decode(pub, true);
  if (A === undefined || isSmallOrder(A)) return false; // 2
  const R = decode(r, false);
  if (R !== undefined && isSmallOrder(R)) return false; // 3
  const k = mod(leToBig(new Uint8Array(createHash('sha512').update(r).update(pub).update(msg).digest())), L);
  return toHex(encode(add(mul(BASE, s), negate(mul(A, k))))) === toHex(r); // 4
}

// ---------------------------------------------------------------------------
// Vector loading.

interface Case {
  id: string;
  pub: Uint8Array;
  msg: Uint8Array;
  sig: Uint8Array;
}

interface WycheproofFile {
  testGroups: {
    publicKey: { pk: string };
    tests: { tcId: number; msg: string; sig: string; result: 'valid' | 'invalid' | 'acceptable' }[];
  }[];
}
const wycheproof = readVectors('wycheproof/ed25519_test.json') as WycheproofFile;
const wycheproofCases = wycheproof.testGroups.flatMap((g) =>
  g.tests.map((t) => ({ id: `tcId ${t.tcId}`, pub: hex(g.publicKey.pk), msg: hex(t.msg), sig: hex(t.sig), result: t.result })),
);

const speccheckCases: Case[] = (
  readVectors('ed25519-speccheck/cases.json') as { message: string; pub_key: string; signature: string }[]
).map((c, i) => ({ id: `case ${i}`, pub: hex(c.pub_key), msg: hex(c.message), sig: hex(c.signature) }));

interface CctvVector {
  number: number;
  key: string;
  sig: string;
  msg: string;
  flags: string[] | null;
}
const cctvVectors = readVectors('cctv-ed25519/ed25519vectors.json') as CctvVector[];
const cctvCases = cctvVectors.map((v) => ({
  id: `number ${v.number}`,
  pub: hex(v.key),
  msg: utf8(v.msg),
  sig: hex(v.sig),
  flags: v.flags ?? [],
}));

interface Rfc8032Vector {
  name: string;
  secretKey: string;
  publicKey: string;
  message: string;
  signature: string;
}
const rfc8032 = (readVectors('rfc8032/rfc8032_ed25519_7_1.json') as { vectors: Rfc8032Vector[] }).vectors;
const rfcCases = rfc8032.map((v) => ({ id: v.name, pub: hex(v.publicKey), msg: hex(v.message), sig: hex(v.signature) }));

/** node:crypto with no pre-checks at all (a key OpenSSL cannot import counts as a reject). */
function rawNativeVerify(pub: Uint8Array, msg: Uint8Array, sig: Uint8Array): boolean {
  try {
    const key = createPublicKey({ key: Buffer.concat([hex('302a300506032b6570032100'), pub]), format: 'der', type: 'spki' });
    return nodeVerify(null, msg, key, sig);
  } catch {
    return false;
  }
}

/** Rules 2 and 3, the pre-checks that OpenSSL does not do itself. */
const preCheckRejects = (c: Case): boolean =>
  c.pub.length !== 32 || checkPublicKey(c.pub) !== 'ok' || (c.sig.length === 64 && isSmallOrderPointEncoding(c.sig.subarray(0, 32)));

/**
 * Verdict per case from all three implementations; fails on the first disagreement.
 * Also checks the claim the native backend rests on: raw OpenSSL never rejects what
 * the rule accepts, and whenever it accepts what the rule rejects, a pre-check fired.
 */
function verdicts(suite: string, cases: readonly Case[]): Map<string, boolean> {
  const out = new Map<string, boolean>();
  let rawAccepted = 0;
  let nobleBuiltinAccepted = 0;
  for (const c of cases) {
    const native = verifyEd25519(c.pub, c.msg, c.sig, 'native');
    const noble = verifyEd25519(c.pub, c.msg, c.sig, 'noble');
    const reference = referenceVerify(c.pub, c.msg, c.sig);
    expect({ id: c.id, native, noble }).toEqual({ id: c.id, native: reference, noble: reference });
    const raw = rawNativeVerify(c.pub, c.msg, c.sig);
    if (reference) expect({ id: c.id, raw }).toEqual({ id: c.id, raw: true });
    if (raw && !reference) expect({ id: c.id, preCheckRejects: preCheckRejects(c) }).toEqual({ id: c.id, preCheckRejects: true });
    rawAccepted += Number(raw);
    nobleBuiltinAccepted += Number(nobleBuiltinVerify(c));
    out.set(c.id, reference);
  }
  const accepted = [...out.values()].filter(Boolean).length;
  console.info(
    `${suite}: ${cases.length} cases, rule accepts ${accepted}, rejects ${cases.length - accepted}` +
      ` (raw node:crypto would accept ${rawAccepted}, noble's own zip215 verify ${nobleBuiltinAccepted})`,
  );
  return out;
}

/** noble's built-in (cofactored, ZIP-215) verify, for the log line only: it is not THE RULE. */
function nobleBuiltinVerify(c: Case): boolean {
  try {
    return ed.verify(c.sig, c.msg, c.pub);
  } catch {
    return false;
  }
}
const countAccepted = (v: Map<string, boolean>): number => [...v.values()].filter(Boolean).length;

// ---------------------------------------------------------------------------

describe('backends', () => {
  it('defaults to native on this Node', () => {
    expect(defaultEd25519Backend).toBe('native');
  });
});

describe('differential: native === noble === reference on every vector', () => {
  it('Wycheproof ed25519_test.json: every valid accepted, every invalid rejected', () => {
    const v = verdicts('Wycheproof', wycheproofCases);
    for (const c of wycheproofCases) expect({ id: c.id, accepted: v.get(c.id) }).toEqual({ id: c.id, accepted: c.result === 'valid' });
    expect(wycheproofCases.some((c) => c.result === 'acceptable')).toBe(false);
    expect([wycheproofCases.length, countAccepted(v)]).toEqual([151, 88]);
  });

  it('ed25519-speccheck cases.json: only case 3 (mixed A and R, cofactorless) passes', () => {
    const v = verdicts('ed25519-speccheck', speccheckCases);
    expect([...v.entries()].filter(([, ok]) => ok).map(([id]) => id)).toEqual(['case 3']);
    expect(speccheckCases.length).toBe(12);
  });

  it('CCTV ed25519vectors.json: accepted iff no low-order/non-canonical point and no low-order residue', () => {
    const v = verdicts('CCTV', cctvCases);
    // The vector flags predict the rule independently of any implementation.
    const rejectingFlags = ['low_order_A', 'low_order_R', 'non_canonical_A', 'non_canonical_R', 'low_order_residue'];
    for (const c of cctvCases) {
      expect({ id: c.id, accepted: v.get(c.id) }).toEqual({ id: c.id, accepted: !c.flags.some((f) => rejectingFlags.includes(f)) });
    }
    expect([cctvCases.length, countAccepted(v)]).toEqual([914, 43]);
  });

  it('RFC 8032 section 7.1: all accepted, and signing reproduces every signature', () => {
    const v = verdicts('RFC 8032 7.1', rfcCases);
    expect(countAccepted(v)).toBe(rfcCases.length);
    expect(rfcCases.length).toBe(5);
    for (const vec of rfc8032) {
      expect(toHex(publicKeyFromSeed(hex(vec.secretKey)))).toBe(vec.publicKey);
      expect(toHex(signEd25519(hex(vec.secretKey), hex(vec.message)))).toBe(vec.signature);
      expect(toHex(ed.sign(hex(vec.message), hex(vec.secretKey)))).toBe(vec.signature);
    }
  });
});

describe('the forged identity-key signature', () => {
  const identity = hex('01' + '00'.repeat(31));
  const forged = hex('01' + '00'.repeat(31) + '00'.repeat(32)); // R = identity, S = 0
  const messages = fc.sample(fc.uint8Array({ maxLength: 64 }), { numRuns: 8, seed: 42 });

  // Raw node:crypto.verify accepts it for any message on Node 20 and 22 (Node 24 refuses it
  // itself), so on those the pre-check is what protects us. The verdict that matters is ours,
  // on every Node: it must not depend on what the platform's crypto happens to check.
  it('raw node:crypto.verify and Baton: Baton refuses it whatever the platform says', () => {
    const key = createPublicKey({ key: Buffer.concat([hex('302a300506032b6570032100'), identity]), format: 'der', type: 'spki' });
    const raw = new Set(messages.map((msg) => nodeVerify(null, msg, key, forged)));
    expect(raw.size, 'raw node:crypto gives one verdict for every message').toBe(1);
    for (const msg of messages) expect(verifyEd25519(identity, msg, forged, 'native')).toBe(false);
  });

  it('is rejected on both backends', () => {
    expect(checkPublicKey(identity)).toBe('small-order');
    for (const msg of messages) for (const b of BACKENDS) expect(verifyEd25519(identity, msg, forged, b)).toBe(false);
  });
});

describe('checkPublicKey', () => {
  it('classifies each failure', () => {
    const rfcPub = hex(rfc8032[0]!.publicKey);
    expect(checkPublicKey(rfcPub)).toBe('ok');
    expect(checkPublicKey(rfcPub.subarray(1))).toBe('bad-length');
    expect(checkPublicKey(new Uint8Array(33))).toBe('bad-length');
    expect(checkPublicKey(hex('ed' + 'ff'.repeat(30) + '7f'))).toBe('non-canonical'); // y = p
    expect(checkPublicKey(hex('ef' + 'ff'.repeat(30) + '7f'))).toBe('non-canonical'); // y = p + 2, not a point either
    expect(checkPublicKey(hex('01' + '00'.repeat(30) + '80'))).toBe('non-canonical'); // identity with x = -0
    expect(checkPublicKey(hex('02' + '00'.repeat(31)))).toBe('not-on-curve');
    expect(checkPublicKey(hex('00'.repeat(32)))).toBe('small-order');
  });

  it('matches the reference on every key in the vectors', () => {
    const keys = new Set([...wycheproofCases, ...speccheckCases, ...cctvCases, ...rfcCases].map((c) => toHex(c.pub)));
    for (const k of keys) {
      const A = decode(hex(k), true);
      const expected = A === undefined ? 'not ok' : isSmallOrder(A) ? 'small-order' : 'ok';
      const actual = checkPublicKey(hex(k));
      expect({ k, actual: actual === 'ok' || actual === 'small-order' ? actual : 'not ok' }).toEqual({ k, actual: expected });
    }
  });
});

describe('small-order encodings (rule 3 blocklist)', () => {
  /** Every encoding, canonical or not, of each point of order dividing 8, derived from the reference. */
  function deriveSmallOrderEncodings(): Set<string> {
    // [L]Q of a point Q lands in the torsion subgroup; search for one of order exactly 8.
    let generator: RefPoint | undefined;
    for (let y = 2n; generator === undefined; y++) {
      const q = decode(hex(y.toString(16).padStart(64, '0')).reverse(), true);
      if (q === undefined) continue;
      const t = mul(q, L);
      if (!isIdentity(mul(t, 4n))) generator = t;
    }
    const found = new Set<string>();
    let t = IDENTITY;
    for (let i = 0; i < 8; i++, t = add(t, generator)) {
      const canonical = encode(t);
      found.add(toHex(canonical));
      const zi = inv(t.Z);
      const x = mod(t.X * zi),
        y = mod(t.Y * zi);
      const withSign = (yy: bigint, sign: number): string => {
        const b = hex(yy.toString(16).padStart(64, '0')).reverse();
        b[31] = b[31]! | (sign << 7);
        return toHex(b);
      };
      if (y + P < 2n ** 255n) found.add(withSign(y + P, Number(x & 1n))); // y >= p
      if (x === 0n) {
        found.add(withSign(y, 1)); // x = -0
        if (y + P < 2n ** 255n) found.add(withSign(y + P, 1));
      }
    }
    return found;
  }

  it('is exactly the 14 encodings the reference derives, and each is rejected as R', () => {
    const derived = deriveSmallOrderEncodings();
    expect(derived.size).toBe(14);
    for (const e of derived) {
      expect(isSmallOrderPointEncoding(hex(e))).toBe(true);
      const point = decode(hex(e), false);
      expect(point !== undefined && isSmallOrder(point)).toBe(true);
    }
    // Every non-canonical (y >= p) encoding of a small-order point is in the set. Some
    // other y >= p values decode to large-order points; those are caught by the bytewise
    // compare of rule 4 (as R) and by the canonical check of rule 2 (as A), not by the list.
    for (let dy = 0n; dy < 19n; dy++) {
      for (const sign of [0, 1]) {
        const b = hex((P + dy).toString(16).padStart(64, '0')).reverse();
        b[31] = b[31]! | (sign << 7);
        const point = decode(b, false);
        expect(point !== undefined && isSmallOrder(point)).toBe(derived.has(toHex(b)));
        if (point !== undefined) expect(checkPublicKey(b)).toBe('non-canonical');
      }
    }
  });

  it('a real signature whose R is replaced by a small-order encoding is rejected', () => {
    const seed = hex(rfc8032[1]!.secretKey);
    const pub = publicKeyFromSeed(seed);
    const sig = signEd25519(seed, utf8('m'));
    for (const e of deriveSmallOrderEncodings()) {
      const bad = sig.slice();
      bad.set(hex(e), 0);
      for (const b of BACKENDS) expect(verifyEd25519(pub, utf8('m'), bad, b)).toBe(false);
    }
  });
});

describe('rule 1 edges', () => {
  const seed = hex(rfc8032[2]!.secretKey);
  const pub = publicKeyFromSeed(seed);
  const msg = utf8('rule 1');
  const sig = signEd25519(seed, msg);

  it('rejects S + L (same scalar mod L) and S = L, on both backends', () => {
    const s = leToBig(sig.slice(32));
    for (const bigS of [s + L, L, 2n ** 256n - 1n]) {
      const bad = sig.slice();
      bad.set(hex(bigS.toString(16).padStart(64, '0')).reverse(), 32);
      for (const b of BACKENDS) expect(verifyEd25519(pub, msg, bad, b)).toBe(false);
    }
  });

  it('rejects wrong lengths without throwing', () => {
    for (const b of BACKENDS) {
      expect(verifyEd25519(pub, msg, sig.subarray(0, 63), b)).toBe(false);
      expect(verifyEd25519(pub, msg, new Uint8Array([...sig, 0]), b)).toBe(false);
      expect(verifyEd25519(pub.subarray(0, 31), msg, sig, b)).toBe(false);
      expect(verifyEd25519(pub, msg, sig, b)).toBe(true);
    }
  });
});

describe('properties (fast-check)', () => {
  const seedArb = fc.uint8Array({ minLength: 32, maxLength: 32 });
  const msgArb = fc.uint8Array({ minLength: 0, maxLength: 200 });

  it('sign then verify round-trips on both backends; native and noble sign identically', () => {
    fc.assert(
      fc.property(seedArb, msgArb, (seed, msg) => {
        const pub = publicKeyFromSeed(seed);
        expect(toHex(pub)).toBe(toHex(ed.getPublicKey(seed)));
        const sig = signEd25519(seed, msg);
        expect(toHex(sig)).toBe(toHex(ed.sign(msg, seed)));
        for (const b of BACKENDS) expect(verifyEd25519(pub, msg, sig, b)).toBe(true);
      }),
      { numRuns: 100 },
    );
  });

  it('any single bit flip in signature, message or public key is rejected on both backends', () => {
    const target = fc.constantFrom('sig', 'msg', 'pub');
    fc.assert(
      fc.property(seedArb, fc.uint8Array({ minLength: 1, maxLength: 64 }), target, fc.nat(), (seed, msg, which, bitSeed) => {
        const pub = publicKeyFromSeed(seed);
        const sig = signEd25519(seed, msg);
        const victim = { sig, msg, pub }[which].slice();
        const bit = bitSeed % (victim.length * 8);
        victim[bit >> 3] = victim[bit >> 3]! ^ (1 << (bit & 7));
        const args = { sig, msg, pub, [which]: victim };
        for (const b of BACKENDS) expect(verifyEd25519(args.pub, args.msg, args.sig, b)).toBe(false);
      }),
      { numRuns: 300 },
    );
  });
});

describe('generateSeed', () => {
  it('returns 32 fresh bytes that make a usable key', () => {
    const a = generateSeed();
    const b = generateSeed();
    expect(a.length).toBe(32);
    expect(toHex(a)).not.toBe(toHex(b));
    const pub = publicKeyFromSeed(a);
    expect(checkPublicKey(pub)).toBe('ok');
    expect(verifyEd25519(pub, utf8('x'), signEd25519(a, utf8('x')))).toBe(true);
  });
});

describe('signEd25519 reuses the key it imported for a seed array, never a stale one', () => {
  it('an array overwritten in place signs with the key it now holds', () => {
    const seed = generateSeed();
    const first = Uint8Array.from(seed);
    const msg = utf8('same array, new key');
    const before = signEd25519(seed, msg);
    expect(signEd25519(seed, msg)).toEqual(before); // the reused signer gives the same bytes
    seed.set(generateSeed()); // refilled with another key
    const after = signEd25519(seed, msg);
    expect(verifyEd25519(publicKeyFromSeed(seed), msg, after)).toBe(true);
    expect(verifyEd25519(publicKeyFromSeed(first), msg, after)).toBe(false);
    seed.fill(0); // wiped: signs with the all-zero seed, as a fresh array of it would
    expect(signEd25519(seed, msg)).toEqual(signEd25519(new Uint8Array(32), msg));
  });

  it('matches RFC 8032 whatever array the same seed arrives in, and refuses a wrong length every time', () => {
    const vec = rfc8032[2]!;
    for (let i = 0; i < 3; i++) expect(toHex(signEd25519(hex(vec.secretKey), hex(vec.message)))).toBe(vec.signature);
    const short = new Uint8Array(31);
    for (let i = 0; i < 2; i++) expect(() => signEd25519(short, utf8('m'))).toThrow(/32 bytes/);
  });
});
