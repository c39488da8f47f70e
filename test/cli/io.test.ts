/** What the CLI prints: terminal controls from untrusted text arrive as visible escapes. */
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { terminalSafe, terminalSafeIo } from '../../src/cli/io.js';
import { BIN } from './helpers.js';

const CONTROLS = ['\u0000', '\u0007', '\u001b', '\r', '\u007f', '\u0085', '\u009b', '\u061c', '\u200e', '\u202e', '\u2066', '\u2069'];

describe('terminalSafe', () => {
  it('turns every terminal control into a visible \\u escape, keeping newlines, tabs and other text', () => {
    expect(terminalSafe('t\u001b[2J\u001b[31mPWNED\u0007')).toBe('t\\u001b[2J\\u001b[31mPWNED\\u0007');
    expect(terminalSafe('hash \u202eabc\u202c')).toBe('hash \\u202eabc\\u202c');
    expect(terminalSafe('line one\n\tline two: é, 名前, 🙂')).toBe('line one\n\tline two: é, 名前, 🙂');
    for (const c of CONTROLS)
      expect(terminalSafe(`a${c}b`), JSON.stringify(c)).toBe(`a\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}b`);
  });

  it('leaves JSON output meaning the same values', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.array(fc.constantFrom(...CONTROLS)), (value, extra) => {
        const doc = { value, name: `x${extra.join('')}y` };
        const printed = terminalSafe(JSON.stringify(doc, null, 2));
        expect(printed).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/);
        expect(JSON.parse(printed)).toEqual(JSON.parse(JSON.stringify(doc)));
      }),
    );
  });

  it('guards both streams of an io', () => {
    const seen: string[] = [];
    const io = terminalSafeIo({ out: (t) => seen.push(`out ${t}`), err: (t) => seen.push(`err ${t}`) });
    io.out('\u001b[2J');
    io.err('\u009b31m');
    expect(seen).toEqual(['out \\u001b[2J', 'err \\u009b31m']);
  });
});

describe('a reader that goes away (baton … | head)', () => {
  /** Runs the CLI with one of its output pipes closed before it writes: its exit code and stderr (or stdout). */
  const withClosed = (stream: 'stdout' | 'stderr', argv: string[]) =>
    new Promise<{ code: number | null; other: string }>((resolve) => {
      const child = spawn(process.execPath, [BIN, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] });
      child[stream].destroy();
      let other = '';
      child[stream === 'stdout' ? 'stderr' : 'stdout'].on('data', (d: Buffer) => (other += d.toString()));
      child.on('close', (code) => resolve({ code, other }));
    });

  it('ends the command quietly with its own exit code, not with an EPIPE stack trace', { timeout: 60_000 }, async () => {
    const help = await withClosed('stdout', ['--help']);
    expect(help.other).not.toMatch(/EPIPE|Unhandled/);
    expect(help.code).toBe(0);
    const unknown = await withClosed('stderr', ['no-such-command']);
    expect(unknown.other).not.toMatch(/EPIPE|Unhandled/);
    expect(unknown.code).toBe(2);
  });
});
