/**
 * Reading a secret (an API key) from stdin. Piped in (`--key-stdin < admin.key`), stdin is read
 * whole, as every other file. At a terminal the key is typed: a short prompt goes to stderr and
 * the terminal is put in raw mode so nothing typed is echoed, then put back as it was, however
 * the reading ends.
 */
import { StringDecoder } from 'node:string_decoder';
import { readText } from './basics.js';
import { UsageError, type CliStdin } from './io.js';

/** What readSecret uses of stdin (process.stdin's shape; a test passes a stream of its own). */
export type SecretInput = CliStdin;

export interface SecretInputOptions {
  /** Default process.stdin. */
  readonly input?: SecretInput;
  /** Where the prompt goes; default stderr (stdout may be a file or a pipe to a script). */
  readonly write?: (text: string) => void;
}

/** Typed at a terminal (true) or read from a pipe or file (false). */
export function secretIsTyped(input: SecretInput = process.stdin): boolean {
  return input.isTTY === true && typeof input.setRawMode === 'function';
}

/**
 * The secret on stdin: piped, everything stdin holds (the caller trims it); at a terminal, one
 * line typed without echo after the prompt `${what}: `.
 */
export async function readSecret(what: string, options: SecretInputOptions = {}): Promise<string> {
  const input = options.input ?? process.stdin;
  if (!secretIsTyped(input)) return input === process.stdin ? readText('-', `${what} from stdin`) : readAll(input, what);
  return readHiddenLine(input, `${what}: `, options.write ?? ((text) => process.stderr.write(text)));
}

/** A given stream, read whole as readText reads process.stdin. */
async function readAll(input: SecretInput, what: string): Promise<string> {
  try {
    const chunks: Buffer[] = [];
    for await (const chunk of input) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
    return Buffer.concat(chunks).toString('utf8');
  } catch (e) {
    throw new UsageError(`cannot read ${what} from stdin: ${(e as Error).message}`);
  }
}

const ENTER = new Set(['\r', '\n']);
const CTRL_C = '\u0003';
const CTRL_D = '\u0004';
const CTRL_U = '\u0015';
const BACKSPACE = new Set(['\u007f', '\b']);
const ESC = '\u001b';

/** Signals whose default action ends the process: while a key is read, they put the terminal back first. */
const ENDING_SIGNALS: readonly NodeJS.Signals[] = ['SIGHUP', 'SIGTERM', 'SIGQUIT'];

/**
 * One line typed at a terminal in raw mode, not echoed. Enter (or the end of input) ends it;
 * Ctrl-D ends it on an empty line (as a terminal ends input, giving '') and is ignored after
 * characters were typed; Backspace removes the last character and Ctrl-U the whole line; Ctrl-C
 * stops with a UsageError (nothing is read). Other control characters and the escape sequences of
 * cursor and function keys (ESC [ … or ESC O …) are dropped; ESC followed by anything else is
 * dropped alone (Esc pressed, or Alt with a key: the key counts). Bytes are decoded as UTF-8 across
 * chunks. The terminal's mode is restored in every case: SIGHUP, SIGTERM or SIGQUIT during the
 * reading restore it, then end the process as the signal would have.
 */
function readHiddenLine(input: SecretInput, prompt: string, write: (text: string) => void): Promise<string> {
  const wasRaw = input.isRaw === true;
  write(prompt);
  input.setRawMode!(true);
  return new Promise<string>((resolve, reject) => {
    let typed: string[] = [];
    /** 0: plain text; 1: after ESC; 2: inside a CSI/SS3 sequence, until its final byte. */
    let escape = 0;
    let done = false;
    const decoder = new StringDecoder('utf8');
    const finish = (outcome: () => void) => {
      if (done) return;
      done = true;
      input.removeListener('data', onData);
      input.removeListener('end', onEnd);
      input.removeListener('error', onError);
      for (const signal of ENDING_SIGNALS) process.removeListener(signal, onSignal);
      try {
        input.setRawMode!(wasRaw);
      } finally {
        input.pause();
        write('\n'); // the Enter typed was not echoed either
        outcome();
      }
    };
    const onData = (chunk: Buffer | string) => {
      // A character's bytes may come in two chunks: the decoder keeps a partial one for the next.
      const text = typeof chunk === 'string' ? chunk : decoder.write(chunk);
      for (const ch of text) {
        if (escape === 1) {
          escape = 0;
          if (ch === '[' || ch === 'O') {
            escape = 2;
            continue;
          }
          // Not a key's sequence: the ESC alone is dropped, this character is read as typed.
        } else if (escape === 2) {
          if (ch >= '@' && ch <= '~') escape = 0;
          continue;
        }
        if (ENTER.has(ch)) return finish(() => resolve(typed.join('')));
        if (ch === CTRL_D) {
          if (typed.length === 0) return finish(() => resolve(''));
          continue; // a terminal ends input on Ctrl-D only at an empty line
        }
        if (ch === CTRL_C) return finish(() => reject(new UsageError('interrupted (Ctrl-C): no key was read, nothing was saved')));
        if (BACKSPACE.has(ch)) typed = typed.slice(0, -1);
        else if (ch === CTRL_U) typed = [];
        else if (ch === ESC) escape = 1;
        else if (!/\p{Cc}/u.test(ch)) typed.push(ch);
      }
    };
    const onEnd = () => finish(() => resolve(typed.join('')));
    const onError = (e: Error) => finish(() => reject(new UsageError(`cannot read the key from the terminal: ${e.message}`)));
    const onSignal = (signal: NodeJS.Signals) => {
      finish(() => reject(new UsageError(`interrupted (${signal}): no key was read, nothing was saved`)));
      // The terminal is back as it was and this handler removed: the signal now does what it would have.
      process.kill(process.pid, signal);
    };
    for (const signal of ENDING_SIGNALS) process.once(signal, onSignal);
    input.on('data', onData);
    input.on('end', onEnd);
    input.on('error', onError);
    input.resume();
  });
}
