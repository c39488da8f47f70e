/**
 * Ways to break a compact JWS, shared by the corpus builder and the fuzzer.
 *
 * ENCODING_ATTACKS rewrite the characters of an existing JWS (parts, padding,
 * alphabet, whitespace, trailing bits, signature bytes, header). Given the
 * signer's key, header rewrites are re-signed, so the header itself is what
 * must be refused, not a stale signature.
 *
 * signedPayloadAttacks() sign payload bytes that are valid Ed25519 but not the
 * one JCS encoding (whitespace, key order, 1.0, -0, 1e400, 2^53+1, escapes,
 * duplicate members, BOM, invalid UTF-8, deep nesting): a strict verifier must
 * refuse them although the signature checks.
 */
import { GROUP_ORDER, b64u, bigintToLe, jcs, leToBigint, rawJws, signBytes, unb64u, type Key } from './fixtures.js';

export const splitJws = (jws: string): [string, string, string] => {
  const [h = '', p = '', s = ''] = jws.split('.');
  return [h, p, s];
};

const B64U = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/** Sets unused low bits of the last character, when the part has any. */
export function dirtyTrailingBits(part: string): string | null {
  const rem = part.length % 4;
  if (rem !== 2 && rem !== 3) return null;
  const unused = rem === 2 ? 0b1111 : 0b11;
  const v = B64U.indexOf(part[part.length - 1]!);
  return part.slice(0, -1) + B64U[(v & ~unused) | 1]!;
}

function withSignature(jws: string, f: (sig: Uint8Array) => Uint8Array): string {
  const [h, p, s] = splitJws(jws);
  return `${h}.${p}.${b64u(f(Uint8Array.from(unb64u(s))))}`;
}

function withS(jws: string, s: (old: bigint) => bigint): string {
  return withSignature(jws, (sig) => Uint8Array.from([...sig.subarray(0, 32), ...bigintToLe(s(leToBigint(sig.subarray(32))), 32)]));
}

/** A new header over the same payload; re-signed when the key is known. */
function withHeader(jws: string, header: string, key?: Key): string {
  const [, p, s] = splitJws(jws);
  const h = b64u(header);
  return key ? `${h}.${p}.${b64u(signBytes(key, `${h}.${p}`))}` : `${h}.${p}.${s}`;
}

export type EncodingAttack = (jws: string, key?: Key) => string | null;

export const ENCODING_ATTACKS: Readonly<Record<string, EncodingAttack>> = {
  'two-parts': (j) => splitJws(j).slice(0, 2).join('.'),
  'four-parts': (j) => `${j}.${splitJws(j)[2]}`,
  'one-part': (j) => splitJws(j)[1],
  'only-dots': () => '..',
  'empty-signature': (j) => `${splitJws(j)[0]}.${splitJws(j)[1]}.`,
  'empty-payload': (j) => `${splitJws(j)[0]}..${splitJws(j)[2]}`,
  'padded-signature': (j) => `${j}==`,
  'padded-payload': (j) => {
    const [h, p, s] = splitJws(j);
    return `${h}.${p}${'='.repeat((4 - (p.length % 4)) % 4 || 1)}.${s}`;
  },
  'standard-base64-alphabet': (j) => (/[-_]/.test(j) ? j.replace(/-/g, '+').replace(/_/g, '/') : null),
  'leading-space': (j) => ` ${j}`,
  'newline-in-payload': (j) => {
    const [h, p, s] = splitJws(j);
    return `${h}.${p.slice(0, 8)}\n${p.slice(8)}.${s}`;
  },
  'tab-before-signature': (j) => {
    const [h, p, s] = splitJws(j);
    return `${h}.${p}.\t${s}`;
  },
  'trailing-crlf': (j) => `${j}\r\n`,
  'nonzero-trailing-bits-signature': (j) => {
    const [h, p, s] = splitJws(j);
    const d = dirtyTrailingBits(s);
    return d && `${h}.${p}.${d}`;
  },
  'nonzero-trailing-bits-payload': (j) => {
    const [h, p, s] = splitJws(j);
    const d = dirtyTrailingBits(p);
    return d && `${h}.${d}.${s}`;
  },
  'fullwidth-character': (j) => {
    const [h, p, s] = splitJws(j);
    return `${h}.\uFF21${p.slice(1)}.${s}`;
  },
  'header-payload-swapped': (j) => {
    const [h, p, s] = splitJws(j);
    return `${p}.${h}.${s}`;
  },
  'signature-bit-flipped': (j) => withSignature(j, (sig) => sig.map((b, i) => (i === 40 ? b ^ 0x01 : b))),
  'signature-R-bit-flipped': (j) => withSignature(j, (sig) => sig.map((b, i) => (i === 3 ? b ^ 0x80 : b))),
  'signature-all-zero': (j) => withSignature(j, () => new Uint8Array(64)),
  'signature-S-plus-L': (j) => withS(j, (s) => s + GROUP_ORDER),
  'signature-S-equals-L': (j) => withS(j, () => GROUP_ORDER),
  'signature-S-all-ones': (j) => withS(j, () => 2n ** 256n - 1n),
  'signature-63-bytes': (j) => withSignature(j, (sig) => sig.subarray(0, 63)),
  'signature-65-bytes': (j) => withSignature(j, (sig) => Uint8Array.from([...sig, 0])),
  'payload-claim-changed': (j) => {
    const [h, p, s] = splitJws(j);
    const payload = JSON.parse(unb64u(p).toString('utf8')) as Record<string, unknown>;
    payload['jti'] = `${String(payload['jti'])}x`;
    return `${h}.${b64u(jcs(payload))}.${s}`;
  },
  'alg-none-empty-signature': (j) => `${b64u('{"alg":"none","typ":"JWT"}')}.${splitJws(j)[1]}.`,
  'alg-none': (j) => withHeader(j, '{"alg":"none","typ":"JWT"}'),
  'alg-HS256': (j, k) => withHeader(j, '{"alg":"HS256","typ":"JWT"}', k),
  'alg-lowercase': (j, k) => withHeader(j, '{"alg":"eddsa","typ":"JWT"}', k),
  'alg-Ed25519': (j, k) => withHeader(j, '{"alg":"Ed25519","typ":"JWT"}', k),
  'typ-JWS': (j, k) => withHeader(j, '{"alg":"EdDSA","typ":"JWS"}', k),
  'typ-missing': (j, k) => withHeader(j, '{"alg":"EdDSA"}', k),
  'header-with-kid': (j, k) => withHeader(j, '{"alg":"EdDSA","kid":"did:key:z6Mk#0","typ":"JWT"}', k),
  'header-with-embedded-jwk': (j, k) =>
    withHeader(j, `{"alg":"EdDSA","jwk":{"crv":"Ed25519","kty":"OKP","x":"${b64u(new Uint8Array(32))}"},"typ":"JWT"}`, k),
  'header-crit-b64-false': (j, k) => withHeader(j, '{"alg":"EdDSA","b64":false,"crit":["b64"],"typ":"JWT"}', k),
  'header-keys-reordered': (j, k) => withHeader(j, '{"typ":"JWT","alg":"EdDSA"}', k),
  'header-with-whitespace': (j, k) => withHeader(j, '{"alg": "EdDSA", "typ": "JWT"}', k),
  'header-duplicate-alg': (j, k) => withHeader(j, '{"alg":"none","alg":"EdDSA","typ":"JWT"}', k),
};

/** The canonical payload text with one exact substitution; throws if `from` is absent. */
function substitute(text: string, from: string, to: string): string {
  if (!text.includes(from)) throw new Error(`attack template: ${from} not in ${text.slice(0, 80)}`);
  return text.replace(from, to);
}

function nested(depth: number): unknown {
  let v: unknown = 0;
  for (let i = 0; i < depth; i++) v = [v];
  return v;
}

/**
 * Properly signed records whose payload bytes are not the one canonical
 * encoding, keyed by attack name. `payload` must hold numeric `iat` and a
 * string `jti` (every DRS record does).
 */
export function signedPayloadAttacks(payload: Record<string, unknown>, key: Key, deepField: string): Record<string, string> {
  const canon = jcs(payload);
  const iat = String(payload['iat']);
  const jti = String(payload['jti']);
  const sign = (text: string | Uint8Array) => rawJws({ payload: text, key });
  const utf8 = (s: string) => Buffer.from(s, 'utf8');
  const reversed = `{${Object.keys(payload)
    .sort()
    .reverse()
    .map((k) => `${JSON.stringify(k)}:${jcs(payload[k])}`)
    .join(',')}}`;
  const deep = { ...payload, [deepField]: { n: nested(40) } };
  return {
    'payload-whitespace': sign(JSON.stringify(JSON.parse(canon), null, 1)),
    'payload-keys-reversed': sign(reversed),
    'payload-integer-as-1.0': sign(substitute(canon, `"iat":${iat}`, `"iat":${iat}.0`)),
    'payload-integer-exponent': sign(substitute(canon, `"iat":${iat}`, `"iat":${iat.slice(0, 2)}e${iat.length - 2}`)),
    'payload-negative-zero': sign(substitute(canon, `"iat":${iat}`, '"iat":-0')),
    'payload-1e400': sign(substitute(canon, `"iat":${iat}`, '"iat":1e400')),
    'payload-2^53+1': sign(substitute(canon, `"iat":${iat}`, '"iat":9007199254740993')),
    'payload-integer-as-string': sign(substitute(canon, `"iat":${iat}`, `"iat":"${iat}"`)),
    'payload-escaped-letter': sign(substitute(canon, `"jti":"${jti}"`, `"jti":"\\u00${jti.charCodeAt(0).toString(16)}${jti.slice(1)}"`)),
    'payload-escaped-dot': sign(substitute(canon, `"drs_v":"4.0"`, `"drs_v":"4\\u002e0"`)),
    'payload-duplicate-member': sign(substitute(canon, `"jti":"${jti}"`, `"jti":"${jti}","jti":"${jti}"`)),
    'payload-duplicate-member-conflicting': sign(substitute(canon, `"jti":"${jti}"`, `"jti":"${jti}x","jti":"${jti}"`)),
    'payload-bom': sign(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), utf8(canon)])),
    'payload-invalid-utf8': sign(
      Buffer.concat([utf8(canon.slice(0, canon.indexOf(jti))), Buffer.from([0xc3, 0x28]), utf8(canon.slice(canon.indexOf(jti)))]),
    ),
    'payload-overlong-utf8': sign(
      Buffer.concat([utf8(canon.slice(0, canon.indexOf(jti))), Buffer.from([0xc0, 0xaf]), utf8(canon.slice(canon.indexOf(jti)))]),
    ),
    'payload-nul-in-jti': sign(jcs({ ...payload, jti: `${jti}\u0000` })),
    'payload-lone-surrogate': sign(jcs({ ...payload, jti: `${jti}\ud800` })),
    'payload-deep-nesting': sign(jcs(deep)),
    'payload-top-level-array': sign(`[${canon}]`),
    'payload-proto-member': sign(substitute(canon, '{', '{"__proto__":{"polluted":"yes"},')),
    'payload-trailing-garbage': sign(`${canon} `),
    'payload-empty': sign(''),
  };
}
