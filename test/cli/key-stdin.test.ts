/**
 * `baton context add --key-stdin`: piped, stdin is read as it always was; at a terminal the key is
 * typed after a prompt on stderr, never echoed (raw mode, restored however the reading ends).
 * The terminal is a stream of the test's own that says it is one.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli/main.js';
import type { CliStdin } from '../../src/cli/io.js';
import { tempDir } from './helpers.js';

const KEY = 'bt_admin_' + 't'.repeat(39) + 'TYPE';

/** A stream that says it is a terminal, recording every raw-mode change. */
function fakeTerminal(): PassThrough & CliStdin & { modes: boolean[] } {
  const modes: boolean[] = [];
  const t = new PassThrough() as PassThrough & CliStdin & { modes: boolean[]; isRaw: boolean };
  Object.assign(t, {
    isTTY: true,
    isRaw: false,
    modes,
    setRawMode(mode: boolean) {
      modes.push(mode);
      t.isRaw = mode;
      return t;
    },
  });
  return t;
}

async function add(stdin: CliStdin, type?: (t: CliStdin) => void) {
  const home = tempDir();
  let out = '';
  let err = '';
  const prompts: string[] = [];
  const spy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    prompts.push(String(chunk));
    return true;
  });
  try {
    const running = main(['context', 'add', 'typed', '--server', 'http://127.0.0.1:9', '--key-stdin'], {
      out: (t) => (out += `${t}\n`),
      err: (t) => (err += `${t}\n`),
      env: { XDG_CONFIG_HOME: home },
      stdin,
    });
    // Typed once the command waits for it, as a person would.
    await new Promise((r) => setTimeout(r, 20));
    type?.(stdin);
    const code = await running;
    return { code, out, err, prompt: prompts.join(''), file: join(home, 'baton', 'contexts.json') };
  } finally {
    spy.mockRestore();
  }
}

const savedKey = (file: string) =>
  (JSON.parse(readFileSync(file, 'utf8')) as { contexts: Record<string, { api_key?: string }> }).contexts['typed']?.api_key;

afterEach(() => vi.restoreAllMocks());

describe('--key-stdin at a terminal', () => {
  it('prompts on stderr, reads one line without echo, and restores the mode', async () => {
    const tty = fakeTerminal();
    // A typo fixed with Backspace, an arrow key pressed: neither lands in the key.
    const r = await add(tty, (t) => (t as PassThrough).write(`${KEY}x\u007f\u001b[D\r`));
    expect(r.code, r.err).toBe(0);
    expect(savedKey(r.file)).toBe(KEY);
    expect(r.prompt).toContain('API key: ');
    expect(r.prompt).not.toContain(KEY);
    expect(r.out + r.err).not.toContain(KEY);
    expect(tty.modes).toEqual([true, false]);
    expect(tty.isRaw).toBe(false);
  });

  it('Ctrl-C stops without saving anything, and the mode is restored', async () => {
    const tty = fakeTerminal();
    const r = await add(tty, (t) => (t as PassThrough).write('bt_half\u0003rest\r'));
    expect(r.code).toBe(2);
    expect(r.err).toContain('interrupted (Ctrl-C)');
    expect(() => readFileSync(r.file)).toThrow();
    expect(tty.modes).toEqual([true, false]);
  });

  it('Enter or Ctrl-D on an empty line says no key was typed', async () => {
    for (const end of ['\r', '\u0004']) {
      const tty = fakeTerminal();
      const r = await add(tty, (t) => (t as PassThrough).write(end));
      expect(r.code).toBe(2);
      expect(r.err).toContain('no key was typed');
      expect(tty.modes).toEqual([true, false]);
    }
  });
});

describe('--key-stdin at a terminal, typed as people type', () => {
  it('Ctrl-D after characters were typed is ignored, as a terminal ignores it mid-line', async () => {
    const tty = fakeTerminal();
    const r = await add(tty, (t) => (t as PassThrough).write(`${KEY.slice(0, 10)}\u0004${KEY.slice(10)}\r`));
    expect(r.code, r.err).toBe(0);
    expect(savedKey(r.file)).toBe(KEY);
    expect(tty.modes).toEqual([true, false]);
  });

  it('a character whose bytes come in two chunks is one character (Backspace removes it whole)', async () => {
    const tty = fakeTerminal();
    const e = Buffer.from('é'); // two bytes
    const r = await add(tty, (t) => {
      const p = t as PassThrough;
      p.write(Buffer.concat([Buffer.from(KEY), e.subarray(0, 1)]));
      setTimeout(() => {
        p.write(e.subarray(1));
        setTimeout(() => p.write('\u007f\r'), 5);
      }, 5);
    });
    expect(r.code, r.err).toBe(0);
    expect(savedKey(r.file)).toBe(KEY);
  });

  it('Esc not starting a key sequence is dropped alone: the next character counts', async () => {
    const tty = fakeTerminal();
    const r = await add(tty, (t) => (t as PassThrough).write(`${KEY.slice(0, -1)}\u001b${KEY.slice(-1)}\r`));
    expect(r.code, r.err).toBe(0);
    expect(savedKey(r.file)).toBe(KEY);
  });

  it('SIGHUP while reading restores the mode, then ends the process as SIGHUP would', async () => {
    const before = new Set(process.listeners('SIGHUP'));
    const kill = vi.spyOn(process, 'kill').mockImplementation(() => true);
    const tty = fakeTerminal();
    let added: NodeJS.SignalsListener[] = [];
    const r = await add(tty, (t) => {
      added = process.listeners('SIGHUP').filter((l) => !before.has(l));
      for (const l of added) l('SIGHUP');
      if (added.length === 0) (t as PassThrough).end(); // no handler: end the reading rather than wait
    });
    expect(added).toHaveLength(1);
    expect(r.code).toBe(2);
    expect(r.err).toContain('interrupted (SIGHUP)');
    expect(() => readFileSync(r.file)).toThrow();
    expect(tty.modes).toEqual([true, false]);
    expect(kill).toHaveBeenCalledWith(process.pid, 'SIGHUP');
    // Its handler is gone, so the signal re-raised does what it would have (the kill is mocked here).
    expect(process.listeners('SIGHUP').filter((l) => !before.has(l))).toEqual([]);
  });

  it('the signal handlers are gone once the key is read', async () => {
    const counts = () => ['SIGHUP', 'SIGTERM', 'SIGQUIT'].map((s) => process.listenerCount(s));
    const before = counts();
    let during: number[] = [];
    const r = await add(fakeTerminal(), (t) => {
      during = counts();
      (t as PassThrough).write(`${KEY}\r`);
    });
    expect(r.code, r.err).toBe(0);
    expect(during).toEqual(before.map((n) => n + 1));
    expect(counts()).toEqual(before);
  });
});

describe('--key-stdin from a pipe', () => {
  it('reads stdin whole, with no prompt and no raw mode', async () => {
    const pipe = new PassThrough();
    const r = await add(pipe, (p) => (p as PassThrough).end(`${KEY}\n`));
    expect(r.code, r.err).toBe(0);
    expect(savedKey(r.file)).toBe(KEY);
    expect(r.prompt).toBe('');
  });
});
