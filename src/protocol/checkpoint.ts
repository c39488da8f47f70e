/**
 * C2SP tlog-checkpoint bodies (c2sp.org/tlog-checkpoint): the note text a
 * log signs to commit to its tree at one size.
 *
 *   <origin>\n
 *   <tree size, decimal, no leading zeros>\n
 *   <base64 RFC 6962 root hash>\n
 *   [<extension line>\n ...]
 *
 * Parsing is strict: one spelling per checkpoint (canonical padded base64,
 * no leading zeros, no empty lines, nothing after the last newline), so
 * parseCheckpoint(formatCheckpoint(c)) is c and the reverse holds for every
 * text parseCheckpoint accepts. Sizes are safe integers (below 2^53).
 * Signatures are note.ts's business; this module only reads the text.
 *
 * Pure module: no I/O, no clock.
 */
import { HASH_SIZE, type Hash } from './merkle.js';
import { check, decodeBase64, encodeBase64, isSafeUint, parseDecimal } from './tlog-input.js';

export interface Checkpoint {
  /** The log's identity, e.g. "baton.example/log/tenant-1". */
  readonly origin: string;
  readonly size: number;
  readonly rootHash: Hash;
  /** Opaque, non-empty; NOT RECOMMENDED by the spec and empty for Baton's own logs. */
  readonly extensions: readonly string[];
}

const CONTROL = /[\x00-\x1f]/;

function malformed(ok: boolean, message: string, details?: Record<string, unknown>): asserts ok {
  check(ok, 'MALFORMED_CHECKPOINT', message, details);
}

function checkLine(line: unknown, what: string): asserts line is string {
  malformed(
    typeof line === 'string' && line.length > 0 && !CONTROL.test(line),
    `The ${what} is not a non-empty line without control characters.`,
    {
      field: what,
    },
  );
}

/** Parses a checkpoint body (a note text, final newline included). */
export function parseCheckpoint(text: string): Checkpoint {
  malformed(typeof text === 'string' && text.endsWith('\n'), 'A checkpoint body ends in a newline.');
  const lines = text.slice(0, -1).split('\n');
  malformed(lines.length >= 3, 'A checkpoint body has at least three lines: origin, tree size, root hash.', { lines: lines.length });
  const [origin, sizeLine, rootLine, ...extensions] = lines as [string, string, string, ...string[]];
  checkLine(origin, 'origin');
  const size = parseDecimal(sizeLine);
  malformed(size !== undefined, 'The tree size is not a decimal number without leading zeros below 2^53.', {
    field: 'size',
    actual: sizeLine,
  });
  const rootHash = decodeBase64(rootLine);
  malformed(rootHash !== undefined && rootHash.length === HASH_SIZE, 'The root hash is not canonical base64 of 32 bytes.', {
    field: 'root',
    actual: rootLine,
  });
  extensions.forEach((line, i) => checkLine(line, `extension line ${i + 1}`));
  return { origin, size, rootHash, extensions };
}

/** Formats a checkpoint body; refuses what parseCheckpoint would refuse. */
export function formatCheckpoint(c: Checkpoint): string {
  checkLine(c.origin, 'origin');
  malformed(isSafeUint(c.size), 'The tree size is not a non-negative safe integer.', { field: 'size', actual: c.size });
  malformed(c.rootHash instanceof Uint8Array && c.rootHash.length === HASH_SIZE, 'The root hash is not 32 bytes.', { field: 'root' });
  c.extensions.forEach((line, i) => checkLine(line, `extension line ${i + 1}`));
  return [c.origin, String(c.size), encodeBase64(c.rootHash), ...c.extensions].map((line) => line + '\n').join('');
}
