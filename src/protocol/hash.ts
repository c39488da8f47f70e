/**
 * Record hashes: `sha256:` + lowercase hex of SHA-256 over the exact JWS
 * string (docs/design.md, wire format). The exact string, not a re-encoding, so that two
 * encodings of the same claims are two different records.
 */
import { createHash } from 'node:crypto';

export type RecordHash = `sha256:${string}`;

const RECORD_HASH_PATTERN = /^sha256:[0-9a-f]{64}$/;

export function recordHash(jws: string): RecordHash {
  return `sha256:${createHash('sha256').update(jws, 'utf8').digest('hex')}`;
}

export function isRecordHash(value: unknown): value is RecordHash {
  return typeof value === 'string' && RECORD_HASH_PATTERN.test(value);
}

export function sha256Hex(data: string | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}
