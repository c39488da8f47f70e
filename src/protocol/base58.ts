/**
 * base58btc (the Bitcoin alphabet), as used by multibase 'z' and did:key.
 *
 * Leading zero bytes map one-to-one to leading '1' characters, the rest is a
 * plain base conversion. Inputs here are short (a did:key is 34 bytes), so
 * the simple quadratic digit-array conversion is the clearest choice.
 */
import { BatonError } from './errors.js';

const ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';

/** char code -> digit value, -1 for characters outside the alphabet. */
const DIGIT_OF: Int8Array = (() => {
  const table = new Int8Array(128).fill(-1);
  for (let i = 0; i < ALPHABET.length; i++) table[ALPHABET.charCodeAt(i)] = i;
  return table;
})();

/**
 * Re-expresses big-endian `digits` (each < fromBase) in toBase, returning
 * big-endian digits with no leading zeros (empty for the value zero).
 */
function convertBase(digits: ArrayLike<number>, fromBase: number, toBase: number): number[] {
  const out: number[] = []; // little-endian while building
  for (let i = 0; i < digits.length; i++) {
    let carry = digits[i]!;
    for (let j = 0; j < out.length; j++) {
      carry += out[j]! * fromBase;
      out[j] = carry % toBase;
      carry = Math.floor(carry / toBase);
    }
    while (carry > 0) {
      out.push(carry % toBase);
      carry = Math.floor(carry / toBase);
    }
  }
  return out.reverse();
}

function countLeading<T>(items: ArrayLike<T>, value: T): number {
  let n = 0;
  while (n < items.length && items[n] === value) n++;
  return n;
}

export function encodeBase58btc(bytes: Uint8Array): string {
  const zeros = countLeading(bytes, 0);
  const digits = convertBase(bytes.subarray(zeros), 256, 58);
  let out = '1'.repeat(zeros);
  for (const d of digits) out += ALPHABET[d]!;
  return out;
}

/** Throws BatonError('INVALID_FIELD') on any character outside the base58btc alphabet. */
export function decodeBase58btc(s: string): Uint8Array {
  const values = new Array<number>(s.length);
  for (let i = 0; i < s.length; i++) {
    const code = s.charCodeAt(i);
    const value = code < 128 ? DIGIT_OF[code]! : -1;
    if (value < 0) {
      throw new BatonError('INVALID_FIELD', {
        message: `Not base58btc: character ${JSON.stringify(s[i])} at index ${i} is outside the alphabet.`,
        details: { index: i },
      });
    }
    values[i] = value;
  }
  const zeros = countLeading(values, 0);
  const bytes = convertBase(values.slice(zeros), 58, 256);
  const out = new Uint8Array(zeros + bytes.length);
  out.set(bytes, zeros);
  return out;
}
