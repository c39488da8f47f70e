/** C2SP tlog-checkpoint bodies: the spec's example, strict refusals, round trips. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatCheckpoint, parseCheckpoint, type Checkpoint } from '../../src/protocol/checkpoint.js';
import { parseNote } from '../../src/protocol/note.js';
import { codeOf } from '../support/tlog.js';

const examples = JSON.parse(readFileSync(join(import.meta.dirname, '../vectors/c2sp-tlog/examples.json'), 'utf8')) as {
  checkpoint: { example: string };
};

const ROOT = 'CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=';

describe('checkpoint bodies', () => {
  it('reads the C2SP example and writes it back byte for byte', () => {
    const { text } = parseNote(examples.checkpoint.example);
    const c = parseCheckpoint(text);
    expect(c.origin).toBe('example.com/behind-the-sofa');
    expect(c.size).toBe(20852163);
    expect(Buffer.from(c.rootHash).toString('base64')).toBe(ROOT);
    expect(c.extensions).toEqual([]);
    expect(formatCheckpoint(c)).toBe(text);
  });

  it('keeps extension lines', () => {
    const text = `log.example\n5\n${ROOT}\nextension one\nsecond — line\n`;
    expect(parseCheckpoint(text).extensions).toEqual(['extension one', 'second — line']);
    expect(formatCheckpoint(parseCheckpoint(text))).toBe(text);
  });

  const malformed: [string, string][] = [
    ['two lines', `log.example\n5\n`],
    ['no final newline', `log.example\n5\n${ROOT}`],
    ['empty origin', `\n5\n${ROOT}\n`],
    ['tab in origin', `log\texample\n5\n${ROOT}\n`],
    ['leading zero', `log.example\n05\n${ROOT}\n`],
    ['plus sign', `log.example\n+5\n${ROOT}\n`],
    ['negative size', `log.example\n-1\n${ROOT}\n`],
    ['size with space', `log.example\n5 \n${ROOT}\n`],
    ['size beyond 2^53', `log.example\n9007199254740993\n${ROOT}\n`],
    ['hex root', `log.example\n5\n${Buffer.from(ROOT, 'base64').toString('hex')}\n`],
    ['unpadded root', `log.example\n5\n${ROOT.slice(0, -1)}\n`],
    ['base64url root', `log.example\n5\n${ROOT.replace('/', '_')}\n`],
    ['31-byte root', `log.example\n5\n${Buffer.alloc(31).toString('base64')}\n`],
    ['33-byte root', `log.example\n5\n${Buffer.alloc(33).toString('base64')}\n`],
    ['non-canonical trailing bits', `log.example\n5\n${ROOT.slice(0, -2)}J=\n`],
    ['empty extension line', `log.example\n5\n${ROOT}\n\nmore\n`],
    ['trailing blank line', `log.example\n5\n${ROOT}\n\n`],
    ['carriage return', `log.example\r\n5\n${ROOT}\n`],
  ];
  it.each(malformed)('refuses %s with MALFORMED_CHECKPOINT', (_name, text) => {
    expect(codeOf(() => parseCheckpoint(text))).toBe('MALFORMED_CHECKPOINT');
  });

  it('formatCheckpoint refuses what parseCheckpoint refuses', () => {
    const ok: Checkpoint = { origin: 'log.example', size: 5, rootHash: new Uint8Array(32), extensions: [] };
    expect(codeOf(() => formatCheckpoint({ ...ok, origin: 'a\nb' }))).toBe('MALFORMED_CHECKPOINT');
    expect(codeOf(() => formatCheckpoint({ ...ok, size: -1 }))).toBe('MALFORMED_CHECKPOINT');
    expect(codeOf(() => formatCheckpoint({ ...ok, size: 2 ** 53 }))).toBe('MALFORMED_CHECKPOINT');
    expect(codeOf(() => formatCheckpoint({ ...ok, rootHash: new Uint8Array(31) }))).toBe('MALFORMED_CHECKPOINT');
    expect(codeOf(() => formatCheckpoint({ ...ok, extensions: [''] }))).toBe('MALFORMED_CHECKPOINT');
  });

  it('parseCheckpoint(formatCheckpoint(c)) is c', () => {
    const lineArb = fc.string({ unit: fc.constantFrom('a', '/', '.', ' ', '+', 'é', '—'), minLength: 1, maxLength: 20 });
    fc.assert(
      fc.property(
        fc.record({
          origin: lineArb,
          size: fc.maxSafeNat(),
          rootHash: fc.uint8Array({ minLength: 32, maxLength: 32 }),
          extensions: fc.array(lineArb, { maxLength: 3 }),
        }),
        (c) => {
          expect(parseCheckpoint(formatCheckpoint(c))).toEqual(c);
        },
      ),
    );
  });
});
