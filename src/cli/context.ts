/**
 * Operator contexts: named (server, API key) pairs saved in the user's config
 * directory, so operator commands need no --server/--api-key on every line.
 *
 *   baton context add prod --server https://baton.example --key-stdin < admin.key
 *   baton context use prod
 *   baton tenants list                # talks to prod with its key
 *
 * The file is $XDG_CONFIG_HOME/baton/contexts.json (else
 * ~/.config/baton/contexts.json), written atomically with mode 0600 in a
 * 0700 directory. Keys are never printed back in full.
 */
import { chmodSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseCliArgs, groupHelp, runSubcommand, type Subcommand } from './args.js';
import { readText } from './basics.js';
import { UsageError, type CliIo } from './io.js';

export interface SavedContext {
  readonly server: string;
  readonly api_key?: string | undefined;
}

interface ContextsFile {
  current: string | null;
  contexts: Record<string, SavedContext>;
}

const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

type Env = Readonly<Record<string, string | undefined>>;
const envOf = (io: CliIo): Env => io.env ?? process.env;

/** Where contexts live, or undefined when the environment names no home (then there are none). */
export function contextsPath(env: Env): string | undefined {
  const base = env['XDG_CONFIG_HOME'] || (env['HOME'] ? join(env['HOME'], '.config') : undefined);
  return base === undefined ? undefined : join(base, 'baton', 'contexts.json');
}

function emptyFile(): ContextsFile {
  return { current: null, contexts: Object.create(null) as Record<string, SavedContext> };
}

function loadContexts(env: Env): ContextsFile {
  const path = contextsPath(env);
  if (path === undefined) return emptyFile();
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return emptyFile();
    throw new UsageError(`cannot read the contexts file ${path}: ${(e as Error).message}`);
  }
  const broken = () => new UsageError(`the contexts file ${path} is not one Baton wrote; fix or remove it`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw broken();
  }
  const v = value as Partial<ContextsFile> | null;
  if (!v || typeof v !== 'object' || !v.contexts || typeof v.contexts !== 'object') throw broken();
  const file = emptyFile();
  for (const [name, c] of Object.entries(v.contexts)) {
    if (!NAME_PATTERN.test(name) || !c || typeof c.server !== 'string') throw broken();
    file.contexts[name] = { server: c.server, ...(typeof c.api_key === 'string' ? { api_key: c.api_key } : {}) };
  }
  file.current = typeof v.current === 'string' && Object.hasOwn(file.contexts, v.current) ? v.current : null;
  return file;
}

function saveContexts(env: Env, file: ContextsFile): string {
  const path = contextsPath(env);
  if (path === undefined) throw new UsageError('cannot save contexts: neither XDG_CONFIG_HOME nor HOME is set');
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  // Written whole to a private temporary file, then renamed: a reader never sees half a file,
  // and the key is never readable by others, whatever the umask.
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(file, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
  return path;
}

/** A key as it may be shown: its kind prefix and last four characters. */
export function maskKey(key: string | undefined): string {
  if (!key) return '(no key)';
  const prefix = /^bt_(?:admin_)?/.exec(key)?.[0] ?? '';
  return key.length < 16 ? `${prefix}****` : `${prefix}…${key.slice(-4)}`;
}

function requireName(raw: string | undefined, help: string): string {
  if (raw === undefined) throw new UsageError('give the context name', help);
  if (!NAME_PATTERN.test(raw)) throw new UsageError(`a context name is 1-64 letters, digits, ".", "_" or "-", got "${raw}"`, help);
  return raw;
}

function unknownContext(name: string, file: ContextsFile): UsageError {
  const names = Object.keys(file.contexts);
  return new UsageError(
    `no context named "${name}"${names.length > 0 ? ` (saved: ${names.join(', ')})` : ' (none saved yet: baton context add <name> --server <url> --key-stdin)'}`,
  );
}

/**
 * Where an online command sends its requests, and with which key. A context
 * gives server and key together, so a saved key never goes to another server:
 *   1. --context <name> or $BATON_CONTEXT: that context (flags still override each field);
 *   2. else --server, $BATON_URL or $BATON_API_KEY: the flags and environment, no saved key;
 *   3. else --api-key alone or nothing: the current context (with --api-key replacing its key);
 *   4. else the built-in default server.
 */
export function resolveTarget(
  values: { server?: string | undefined; 'api-key'?: string | undefined; context?: string | undefined },
  io: CliIo,
  defaultServer: string,
): { server: string; apiKey: string | undefined; context: string | undefined } {
  const env = envOf(io);
  const named = values.context ?? (env['BATON_CONTEXT'] || undefined);
  const flagKey = values['api-key'];
  if (named !== undefined) {
    const file = loadContexts(env);
    const ctx = Object.hasOwn(file.contexts, named) ? file.contexts[named] : undefined;
    if (!ctx) throw unknownContext(named, file);
    return { server: values.server ?? ctx.server, apiKey: flagKey ?? ctx.api_key, context: named };
  }
  const envServer = env['BATON_URL'] || undefined;
  const envKey = env['BATON_API_KEY'] || undefined;
  if (values.server !== undefined || envServer !== undefined || envKey !== undefined) {
    return { server: values.server ?? envServer ?? defaultServer, apiKey: flagKey ?? envKey, context: undefined };
  }
  const file = loadContexts(env);
  const current = file.current === null ? undefined : file.contexts[file.current];
  if (current) return { server: current.server, apiKey: flagKey ?? current.api_key, context: file.current ?? undefined };
  return { server: defaultServer, apiKey: flagKey, context: undefined };
}

// ---------------------------------------------------------------- commands

const ADD_HELP = `Usage: baton context add <name> --server <url> [--key <key> | --key-stdin] [options]

Saves a context: the Baton server and the API key to use with it (for
operators, the admin key). The first context saved becomes the current one.
Adding a name again replaces it.

Prefer --key-stdin: a key typed on the command line stays in the shell's
history and is visible to other users in the process list.

Options:
  --server <url>     the Baton service, e.g. https://baton.example
  --key <key>        the API key
  --key-stdin        read the API key from stdin (one line)
  --use              make it the current context
  -h, --help         show this help

The file: $XDG_CONFIG_HOME/baton/contexts.json (else ~/.config/baton/contexts.json), mode 0600.
Exit codes: 0 saved, 2 bad flags.`;

async function runAdd(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('context add', {
    args: argv,
    allowPositionals: true,
    options: {
      server: { type: 'string' },
      key: { type: 'string' },
      'key-stdin': { type: 'boolean', default: false },
      use: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    io.out(ADD_HELP);
    return 0;
  }
  if (positionals.length > 1) throw new UsageError(`unexpected argument "${positionals[1]}"`, ADD_HELP);
  const name = requireName(positionals[0], ADD_HELP);
  if (!values.server) throw new UsageError('give --server <url>', ADD_HELP);
  let server: URL;
  try {
    server = new URL(values.server);
  } catch {
    throw new UsageError(`--server must be an absolute http(s) URL, got "${values.server}"`, ADD_HELP);
  }
  if (server.protocol !== 'http:' && server.protocol !== 'https:')
    throw new UsageError(`--server must be an http(s) URL, got "${values.server}"`, ADD_HELP);
  if (values.key !== undefined && values['key-stdin']) throw new UsageError('give --key or --key-stdin, not both', ADD_HELP);
  const key = values['key-stdin'] ? (await readText('-', 'API key from stdin')).trim() : values.key?.trim();
  if (key !== undefined && !/^[\x21-\x7e]{1,512}$/.test(key))
    throw new UsageError('the API key must be one word of printable characters (at most 512)', ADD_HELP);

  const env = envOf(io);
  const file = loadContexts(env);
  file.contexts[name] = { server: server.toString().replace(/\/+$/, ''), ...(key ? { api_key: key } : {}) };
  if (values.use || file.current === null) file.current = name;
  const path = saveContexts(env, file);
  io.out(`SAVED: context "${name}": ${file.contexts[name]!.server} with key ${maskKey(key)}${file.current === name ? ' (current)' : ''}`);
  io.err(`in ${path}`);
  return 0;
}

const USE_HELP = `Usage: baton context use <name>

Makes a saved context the current one: online commands use its server and
key unless --context, --server, $BATON_CONTEXT, $BATON_URL or $BATON_API_KEY
say otherwise.

Exit codes: 0 done, 2 no such context.`;

async function runUse(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('context use', {
    args: argv,
    allowPositionals: true,
    options: { help: { type: 'boolean', short: 'h', default: false } },
  });
  if (values.help) {
    io.out(USE_HELP);
    return 0;
  }
  const name = requireName(positionals[0], USE_HELP);
  const env = envOf(io);
  const file = loadContexts(env);
  if (!Object.hasOwn(file.contexts, name)) throw unknownContext(name, file);
  file.current = name;
  saveContexts(env, file);
  io.out(`CURRENT: context "${name}" (${file.contexts[name]!.server})`);
  return 0;
}

const LIST_HELP = `Usage: baton context list [--json]

Lists saved contexts; the current one is marked "*". Keys are shown masked.

Exit codes: 0 listed.`;

async function runList(argv: string[], io: CliIo): Promise<number> {
  const { values } = parseCliArgs('context list', {
    args: argv,
    options: { json: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h', default: false } },
  });
  if (values.help) {
    io.out(LIST_HELP);
    return 0;
  }
  const file = loadContexts(envOf(io));
  const rows = Object.entries(file.contexts).map(([name, c]) => ({
    name,
    current: name === file.current,
    server: c.server,
    key: maskKey(c.api_key),
  }));
  if (values.json) {
    io.out(JSON.stringify({ current: file.current, contexts: rows }, null, 2));
    return 0;
  }
  if (rows.length === 0) {
    io.out('No contexts saved. Add one: baton context add <name> --server <url> --key-stdin');
    return 0;
  }
  const width = Math.max(...rows.map((r) => r.name.length));
  for (const r of rows) io.out(`${r.current ? '*' : ' '} ${r.name.padEnd(width)}  ${r.server}  ${r.key}`);
  return 0;
}

const REMOVE_HELP = `Usage: baton context remove <name>

Forgets a saved context and its key. Removing the current context leaves
none current.

Exit codes: 0 removed, 2 no such context.`;

async function runRemove(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('context remove', {
    args: argv,
    allowPositionals: true,
    options: { help: { type: 'boolean', short: 'h', default: false } },
  });
  if (values.help) {
    io.out(REMOVE_HELP);
    return 0;
  }
  const name = requireName(positionals[0], REMOVE_HELP);
  const env = envOf(io);
  const file = loadContexts(env);
  if (!Object.hasOwn(file.contexts, name)) throw unknownContext(name, file);
  delete file.contexts[name];
  if (file.current === name) file.current = null;
  saveContexts(env, file);
  io.out(`REMOVED: context "${name}"${file.current === null ? ' (no context is current now)' : ''}`);
  return 0;
}

const SUBCOMMANDS: Record<string, Subcommand> = {
  add: { run: runAdd, summary: 'save a server and its API key under a name' },
  use: { run: runUse, summary: 'make a saved context the current one' },
  list: { run: runList, summary: 'list saved contexts (keys masked)' },
  remove: { run: runRemove, summary: 'forget a saved context' },
};

export const CONTEXT_HELP = groupHelp(
  'context',
  'Saved servers and keys for online commands (like kubectl or zed contexts).\nOnline commands take --context <name>; $BATON_CONTEXT does the same.',
  SUBCOMMANDS,
  'Exit codes: 0 done, 2 bad flags or no such context.',
);

export function runContext(argv: string[], io: CliIo): Promise<number> {
  return runSubcommand('context', argv, io, SUBCOMMANDS, CONTEXT_HELP);
}
