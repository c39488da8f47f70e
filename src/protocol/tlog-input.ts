/**
 * Input checks and text encodings shared by the transparency-log modules
 * (merkle, note, checkpoint, tiles, tlog-proof, cosignature).
 *
 * The C2SP formats use standard, padded base64 (RFC 4648 section 4) and
 * decimal numbers without leading zeros. Like base64url.ts, decoding accepts
 * exactly one spelling per value: anything a lenient decoder would also
 * accept (missing padding, whitespace, non-zero trailing bits, "+5", "007")
 * is refused, so a signed text has one meaning and one encoding.
 *
 * Pure module: no I/O, no clock.
 */
import { BatonError, type ErrorCode } from './errors.js';

/** The one input-check helper of the log modules: refuse with a stable code. */
export function check(ok: boolean, code: ErrorCode, message: string, details?: Record<string, unknown>): asserts ok {
  if (!ok) throw new BatonError(code, { message, details });
}

/** A non-negative integer a JavaScript number holds exactly (below 2^53). */
export function isSafeUint(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}

/** Standard base64 with padding. */
export function encodeBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

/**
 * Canonical standard padded base64, or undefined. Node's decoder skips junk
 * and ignores trailing bits, so the input is canonical only if re-encoding
 * the decoded bytes gives it back exactly.
 */
export function decodeBase64(s: string): Uint8Array | undefined {
  if (s.length % 4 !== 0) return undefined;
  const decoded = Buffer.from(s, 'base64');
  if (decoded.toString('base64') !== s) return undefined;
  // A copy over its own ArrayBuffer, never a view of Node's shared pool.
  return Uint8Array.from(decoded);
}

const DECIMAL = /^(0|[1-9][0-9]*)$/;

/** ASCII decimal without leading zeros, as a safe integer; undefined otherwise. */
export function parseDecimal(s: string): number | undefined {
  if (!DECIMAL.test(s) || s.length > 16) return undefined;
  const n = Number(s);
  return Number.isSafeInteger(n) ? n : undefined;
}

const encoder = new TextEncoder();

export function utf8(s: string): Uint8Array {
  return encoder.encode(s);
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

export function concatBytes(...parts: readonly Uint8Array[]): Uint8Array {
  let length = 0;
  for (const p of parts) length += p.length;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}
