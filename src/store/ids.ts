import { randomBytes } from 'node:crypto';

/** Opaque row ids such as 'ten_…' and 'key_…': 128 random bits, hex. */
export function newId(prefix: 'ten' | 'key'): string {
  return `${prefix}_${randomBytes(16).toString('hex')}`;
}
