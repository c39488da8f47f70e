/**
 * What every command shares that needs no server: the output flags, reading
 * key, record and JSON files, flag values, and formatting. Kept apart from
 * common.ts (the HTTP client, refusals) so the offline commands load only
 * this: see test/cli/startup.test.ts.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, renameSync, rmSync } from 'node:fs';
import { chmod, readFile, readlink, realpath, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { isRecordHash } from '../protocol/hash.js';
import type { Policy } from '../protocol/policy.js';
import { DOCUMENT_MAX_NESTING, jsonAmbiguity } from '../protocol/strict-json.js';
import type { BatonClient } from '../sdk/client.js';
import { keyPairFromFile, type KeyPair } from '../sdk/keys.js';
import { UsageError, type CliIo } from './io.js';

export const DEFAULT_SERVER = 'http://127.0.0.1:8080';

/** parseArgs options every online command takes. */
export const SERVER_OPTIONS = {
  server: { type: 'string' },
  'api-key': { type: 'string' },
  context: { type: 'string' },
  timeout: { type: 'string' },
} as const;

export const SERVER_HELP = `Server options (each from its flag, else its variable, else the context):
  --server <url>       the Baton service (default: $BATON_URL, else the
                       context's server, else ${DEFAULT_SERVER})
  --api-key <key>      API key sent as a Bearer token (default: $BATON_API_KEY,
                       else the context's key, which goes only to the context's
                       own server: not to another --server or $BATON_URL)
  --context <name>     the saved context (default: $BATON_CONTEXT, else the
                       current one; see baton context --help). Given as a flag,
                       it outranks $BATON_URL and $BATON_API_KEY: its server
                       and key are used unless --server or --api-key is given
  --timeout <ms>       per-request timeout in milliseconds (default 10000)`;

export const COMMON_OPTIONS = {
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

export const EXIT_HELP = `Exit codes: 0 ok, 1 refused or denied, 2 bad flags or unusable input,
3 server unreachable, timed out, failing or answering unexpectedly.`;

// ---------------------------------------------------------------- input

/** Reads a file a flag names, now; one that cannot be read is a usage error (exit 2) naming the flag. */
export function readLocalText(path: string, what: string, help?: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    const why = (e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message;
    throw new UsageError(`${what}: cannot read ${path}: ${why}`, help);
  }
}

/** Writes an output file the user named; a path that cannot be written is a usage error (exit 2) naming its flag. */
export async function writeOutputFile(path: string, text: string, flag: string, help?: string): Promise<void> {
  try {
    await writeFile(path, text);
  } catch (e) {
    throw new UsageError(`${flag}: cannot write ${path}: ${(e as Error).message}`, help);
  }
}

/** `--out -`: the output goes to stdout, as "-" reads stdin for inputs. */
export const STDOUT_PATH = '-';

/**
 * Refuses "-" for a flag that saves a file for a later run (--save-keys, --save-trust, --save,
 * --save-checkpoint): written, it would be a file named "-", which no later --keys, --trust or
 * --previous is given. Called when the flags are read, before any work.
 */
export function refuseStdoutPath(path: string | undefined, flag: string, help?: string): void {
  if (path === STDOUT_PATH) throw new UsageError(`${flag} writes a file for a later run to read: give its path, not "-".`, help);
}

/** An output file written beside its place and put there later: see stageOutputFile. */
export interface StagedOutputFile {
  /** Puts the file in place. */
  commit(): Promise<void>;
  /** Drops the file. */
  discard(): Promise<void>;
  /**
   * From now on a SIGINT, SIGTERM or SIGHUP puts the file in place rather than dropping it, then calls
   * `onKept` with where the content is (the temporary file, if it could not be moved): for while
   * the work it records may be done with no answer seen.
   */
  keepIfInterrupted(onKept: (where: string) => void): void;
}

/** The signals that end a staged output's wait: a terminal closed (SIGHUP) as well as Ctrl-C or kill. */
const INTERRUPTS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/**
 * An output file for work that is sent after it is made (`delegate --out --submit`): the content
 * is written now to a temporary file beside `path`, so a path that cannot be written is refused
 * before anything is stored; `commit` puts it in place once the work is done, `discard` drops it
 * when the work failed (no file then claims what was not stored). A SIGINT, SIGTERM or SIGHUP while
 * it is staged drops it too (or keeps it: keepIfInterrupted), so no temporary file is left behind. A
 * symbolic link at `path` is written through, as writeFile does, not replaced by the file.
 */
export async function stageOutputFile(path: string, text: string, flag: string, help?: string): Promise<StagedOutputFile> {
  const cannot = (e: unknown) => new UsageError(`${flag}: cannot write ${path}: ${(e as Error).message}`, help);
  const target = await writtenPath(path);
  const staged = join(dirname(target), `.${basename(target)}.${randomBytes(6).toString('hex')}.tmp`);
  let onInterrupt = () => rmSync(staged, { force: true });
  const interrupted = (signal: NodeJS.Signals) => {
    stopWatching();
    try {
      onInterrupt();
    } catch {
      // The process ends all the same; keepIfInterrupted names what is left.
    }
    // With no listener left, the signal ends the process as it would have without this one.
    process.kill(process.pid, signal);
  };
  const stopWatching = () => {
    for (const signal of INTERRUPTS) process.off(signal, interrupted);
  };
  const discard = async () => {
    stopWatching();
    await unlink(staged).catch(() => undefined);
  };
  try {
    const existing = await stat(target).catch(() => undefined);
    if (existing?.isDirectory()) throw new Error('it is a directory');
    await writeFile(staged, text, { flag: 'wx' });
    // A file replaced keeps the access its owner gave it (a 0600 file stays 0600): only the
    // permission bits, only when it is this user's own (root replacing a user's 0600 file would
    // leave the user unable to read it), and never at the cost of the write (a file system that
    // refuses chmod).
    if (existing && existing.uid === process.getuid?.()) await chmod(staged, existing.mode & 0o777).catch(() => undefined);
  } catch (e) {
    await discard();
    throw cannot(e);
  }
  for (const signal of INTERRUPTS) process.on(signal, interrupted);
  return {
    commit: async () => {
      stopWatching();
      try {
        await rename(staged, target);
      } catch (e) {
        await discard();
        throw cannot(e);
      }
    },
    discard,
    keepIfInterrupted: (onKept) => {
      onInterrupt = () => {
        let where = path;
        try {
          renameSync(staged, target);
        } catch {
          where = staged;
        }
        onKept(where);
      };
    },
  };
}

/** Where writing `path` lands: through a symbolic link (even one to a file not made yet), its target. */
async function writtenPath(path: string): Promise<string> {
  try {
    return await realpath(path);
  } catch {
    const link = await readlink(path).catch(() => undefined);
    return link === undefined ? path : resolve(dirname(path), link);
  }
}

/** What a delegation stored "held" waits for, and how to act on it. */
export const HELD_ADVICE =
  'held: a held delegation grants tools that together form the lethal trifecta (or sits below one that does), and ' +
  'allows no call until a person approves that grant. See why: baton approvals grants; decide: ' +
  'baton approvals approve <hash> --actor <name> --reason <text> (an approve-scope key).';

export async function readText(path: string, what: string): Promise<string> {
  try {
    if (path === '-') {
      const chunks: Buffer[] = [];
      for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    }
    return await readFile(path, 'utf8');
  } catch (e) {
    throw new UsageError(
      `cannot read ${what} ${path}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message}`,
    );
  }
}

/**
 * JSON.parse for a document handed to the CLI. Text that is not JSON is a usage error (`notJson`
 * says it), and so is a key repeated in one object or nesting past DOCUMENT_MAX_NESTING: tools
 * disagree on which of two equal keys counts, so the service refuses such a document and so does
 * every offline check, rather than judge a value another reader would not see.
 */
export function parseJsonDocument(
  text: string,
  name: string,
  notJson: (e: Error) => UsageError = (e) => new UsageError(`${name} is not valid JSON: ${e.message}`),
): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw notJson(e as Error);
  }
  const ambiguity = jsonAmbiguity(text, DOCUMENT_MAX_NESTING);
  if (ambiguity !== undefined) throw new UsageError(`${name} ${ambiguity}: readers disagree on which value it holds, so it is not read`);
  return value;
}

export async function readKeyFile(path: string): Promise<KeyPair> {
  const text = await readText(path, 'key file');
  const json = parseJsonDocument(
    text,
    path,
    () => new UsageError(`${path} is not a key file: it is not JSON (make one with "baton keygen --out ${path}")`),
  );
  try {
    return keyPairFromFile(json);
  } catch (e) {
    throw new UsageError(`${path}: ${(e as Error).message}`);
  }
}

/** A JSON value given inline ('{...}' / '[...]') or as a file name. */
export async function readJsonArg(raw: string, flag: string): Promise<unknown> {
  const trimmed = raw.trim();
  const inline = trimmed.startsWith('{') || trimmed.startsWith('[');
  const text = inline ? trimmed : await readText(raw, `${flag} file`);
  return parseJsonDocument(text, `${flag} ${inline ? 'value' : raw}`);
}

/**
 * Signed records from a file: one compact JWS (as `baton delegate` prints),
 * a JSON array of them, or an object with them under "receipts" (a chain file
 * written by `baton delegate --out`, or GET /v1/delegations/{hash}/chain), or
 * under "jws" (`baton delegate --json`).
 */
export function parseRecordList(text: string, name: string): string[] {
  const trimmed = text.trim();
  if (trimmed === '') throw new UsageError(`${name} is empty`);
  if (!trimmed.startsWith('{') && !trimmed.startsWith('[')) {
    const lines = trimmed.split(/\s+/);
    if (lines.every((l) => /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(l))) return lines;
    throw new UsageError(`${name} holds neither compact JWS records nor JSON`);
  }
  const value = parseJsonDocument(trimmed, name);
  const list = Array.isArray(value)
    ? value
    : value && typeof value === 'object'
      ? ((value as { receipts?: unknown }).receipts ??
        ((value as { jws?: unknown }).jws !== undefined ? [(value as { jws: unknown }).jws] : undefined))
      : undefined;
  if (!Array.isArray(list) || list.length === 0 || !list.every((r) => typeof r === 'string' && r.length > 0)) {
    throw new UsageError(`${name} must hold signed records: a JWS, a JSON array of JWS, or {"receipts": [...]} root first`);
  }
  return list as string[];
}

export async function readRecordFile(path: string): Promise<string[]> {
  return parseRecordList(await readText(path, 'record file'), path);
}

export function requireHash(raw: string | undefined, what: string, help: string): string {
  if (!raw) throw new UsageError(`give the ${what}`, help);
  if (!isRecordHash(raw)) throw new UsageError(`${what} must be "sha256:" followed by 64 lowercase hex digits, got "${raw}"`, help);
  return raw;
}

export function integerFlag(name: string, raw: string, min = 0): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min)
    throw new UsageError(`${name} takes a whole number${min > 0 ? ` of at least ${min}` : ''}, got "${raw}"`);
  return n;
}

export function moneyFlag(name: string, raw: string): number {
  const n = Number(raw.replace(/^\$/, ''));
  if (!/^\$?\d+(\.\d+)?$/.test(raw) || !Number.isFinite(n))
    throw new UsageError(`${name} takes an amount in US dollars such as 0.25, got "${raw}"`);
  return n;
}

export function listFlag(raw: string): string[] {
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/** "90", "90s", "30m", "12h", "7d" -> seconds. */
export function durationFlag(name: string, raw: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(raw.trim());
  if (!m) throw new UsageError(`${name} takes a duration such as 3600, 30m, 12h or 7d, got "${raw}"`);
  const n = Number(m[1]) * UNITS[m[2] || 's']!;
  if (!Number.isSafeInteger(n) || n <= 0) throw new UsageError(`${name} must be a positive duration, got "${raw}"`);
  return n;
}

// ---------------------------------------------------------------- output

export function shortDid(did: string, full = false): string {
  if (full || did.length <= 32) return did;
  return `${did.slice(0, 20)}…${did.slice(-6)}`;
}

export function shortHash(hash: string, full = false): string {
  if (full || hash.length <= 24) return hash;
  return `${hash.slice(0, 15)}…${hash.slice(-4)}`;
}

/** US dollars to the micro-dollar, at least cents: $1.00, $0.50, $0.125. */
const usd = (n: number): string => {
  const [int, frac = ''] = n.toFixed(6).replace(/0+$/, '').split('.');
  return `$${int}.${frac.padEnd(2, '0')}`;
};
export { usd as formatUsd };

/** One line per policy: every field set, and pii/write spelled out (absent means false). */
export function formatPolicy(policy: Policy): string {
  const parts: string[] = [];
  const list = (xs: readonly string[]) => (xs.length === 1 && xs[0] === '*' ? '*' : `[${xs.join(', ')}]`);
  if (policy.allowed_tools) parts.push(`tools ${list(policy.allowed_tools)}`);
  if (policy.max_cost_usd !== undefined) parts.push(`max_cost ${usd(policy.max_cost_usd)}/call`);
  if (policy.max_calls !== undefined) parts.push(`max_calls ${policy.max_calls}`);
  if (policy.max_spend_usd !== undefined) parts.push(`max_spend ${usd(policy.max_spend_usd)}`);
  if (policy.max_depth !== undefined) parts.push(`max_depth ${policy.max_depth}`);
  if (policy.allowed_resources) parts.push(`resources ${list(policy.allowed_resources)}`);
  if (policy.allowed_data_classes) parts.push(`data_classes ${list(policy.allowed_data_classes)}`);
  parts.push(`pii ${policy.pii_access ? 'yes' : 'no'}`, `write ${policy.write_access ? 'yes' : 'no'}`);
  return parts.join(' · ');
}

export function printJson(io: CliIo, value: unknown): void {
  io.out(JSON.stringify(value, null, 2));
}

/**
 * The HTTP client for a command that works offline unless asked to reach the
 * service (--submit, a parent given by hash): loaded only then.
 */
export async function lazyClientFrom(values: ServerValues, io: CliIo): Promise<BatonClient> {
  const { clientFrom } = await import('./common.js');
  return clientFrom(values, io);
}

export type ServerValues = {
  server?: string | undefined;
  'api-key'?: string | undefined;
  context?: string | undefined;
  timeout?: string | undefined;
};

/**
 * A record's time (unix seconds) as an ISO instant, or undefined where no calendar date exists: a
 * record may carry any time up to 2^53 - 1, and a Date past year 275760 throws.
 */
export function calendarIso(seconds: number): string | undefined {
  const ms = seconds * 1000;
  return Number.isFinite(ms) && Math.abs(ms) <= 8.64e15 ? new Date(ms).toISOString() : undefined;
}

/** A record's time as UTC, or as the number itself where no calendar date exists (calendarIso). */
export function unixTimeText(seconds: number): string {
  return calendarIso(seconds)?.replace(/\.\d{3}Z$/, 'Z') ?? `${seconds} (unix seconds, past any calendar date)`;
}
