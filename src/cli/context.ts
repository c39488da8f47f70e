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
import { COMMON_OPTIONS, printJson } from './basics.js';
import { UsageError, type CliIo } from './io.js';
import { readSecret, secretIsTyped } from './secret-input.js';
import { urlWithoutUserInfo } from '../sdk/server-url.js';

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

/** Where an online command sends its requests, with which key, and where each came from. */
export interface Target {
  readonly server: string;
  /** Where the server came from, to name in a message about it: --server, $BATON_URL, a context, the default. */
  readonly serverFrom: string;
  readonly apiKey: string | undefined;
  /** The context whose server or key is used, if any. */
  readonly context: string | undefined;
  /** Why no key is sent although the context holds one (its key is saved for another server). */
  readonly keyWithheld?: string | undefined;
  /** Which environment variables an explicit --context set aside, said so a set one is not a mystery. */
  readonly envSetAside?: string | undefined;
}

/** Two server URLs name the same service: compared as URLs (case of the host, a trailing slash). */
function sameServer(a: string, b: string): boolean {
  const normal = (url: string) => {
    try {
      return new URL(url).href.replace(/\/+$/, '');
    } catch {
      return url;
    }
  };
  return normal(a) === normal(b);
}

/**
 * Where an online command sends its requests, and with which key. Each setting is taken from the
 * first that gives it: its flag, its environment variable, the context (--context, else
 * $BATON_CONTEXT, else the current one), the default:
 *   server: --server, $BATON_URL, the context's server, else `defaultServer`;
 *   key:    --api-key, $BATON_API_KEY, the context's key.
 * A --context flag outranks $BATON_URL and $BATON_API_KEY: a context named on the command line is
 * meant for this command, and an ambient variable must not send it (or its key) elsewhere; only
 * --server and --api-key replace its server and key. $BATON_CONTEXT is a variable like the others.
 * A context's key is saved for its server and is sent nowhere else: when --server or $BATON_URL
 * names another server, the context's key is left out (keyWithheld says so).
 */
export function resolveTarget(
  values: { server?: string | undefined; 'api-key'?: string | undefined; context?: string | undefined },
  io: CliIo,
  defaultServer: string,
): Target {
  const env = envOf(io);
  const contextFlag = values.context;
  const fromEnv = (name: string) => (contextFlag === undefined ? env[name] || undefined : undefined);
  const givenServer = values.server ?? fromEnv('BATON_URL');
  const givenFrom = values.server !== undefined ? '--server' : '$BATON_URL';
  const givenKey = values['api-key'] ?? fromEnv('BATON_API_KEY');
  const named = contextFlag ?? (env['BATON_CONTEXT'] || undefined);
  // Only what the environment would have given here: a variable a flag replaces anyway goes unsaid.
  const setAside =
    contextFlag === undefined
      ? []
      : [
          ...(values.server === undefined && env['BATON_URL'] ? ["$BATON_URL (--server replaces the context's server)"] : []),
          ...(values['api-key'] === undefined && env['BATON_API_KEY'] ? ['$BATON_API_KEY (--api-key gives a key)'] : []),
        ];
  const envSetAside =
    setAside.length === 0
      ? undefined
      : `a --context flag outranks the environment: ${setAside.join(' and ')} not read with --context ${contextFlag}`;

  let name: string | undefined;
  let ctx: SavedContext | undefined;
  // A named context is always read (an unknown name is an error); the current one only when it fills something in.
  if (named !== undefined || givenServer === undefined || givenKey === undefined) {
    const file = loadContexts(env);
    name = named ?? file.current ?? undefined;
    ctx = name !== undefined && Object.hasOwn(file.contexts, name) ? file.contexts[name] : undefined;
    if (named !== undefined && !ctx) throw unknownContext(named, file);
  }
  if (!ctx || name === undefined) {
    return {
      server: givenServer ?? defaultServer,
      serverFrom: givenServer !== undefined ? givenFrom : 'the default server',
      apiKey: givenKey,
      context: undefined,
      ...(envSetAside !== undefined ? { envSetAside } : {}),
    };
  }
  const server = givenServer ?? ctx.server;
  const ownServer = sameServer(server, ctx.server);
  const apiKey = givenKey ?? (ownServer ? ctx.api_key : undefined);
  const keyWithheld =
    givenKey === undefined && ctx.api_key !== undefined && !ownServer
      ? `the key of context "${name}" is saved for ${urlWithoutUserInfo(ctx.server)}, so it is not sent to ${urlWithoutUserInfo(server)} (${givenFrom}); ` +
        `give that server's key with --api-key${contextFlag === undefined ? ' or $BATON_API_KEY' : ''}`
      : undefined;
  return {
    server,
    serverFrom: givenServer !== undefined ? givenFrom : `context "${name}"`,
    apiKey,
    context: givenServer === undefined || (givenKey === undefined && apiKey !== undefined) ? name : undefined,
    ...(keyWithheld !== undefined ? { keyWithheld } : {}),
    ...(envSetAside !== undefined ? { envSetAside } : {}),
  };
}

// ---------------------------------------------------------------- commands

const ADD_HELP = `Usage: baton context add <name> --server <url> [--key <key> | --key-stdin] [--use] [--json]

Saves a context: the Baton server and the API key to use with it (for
operators, the admin key). The first context saved becomes the current one.
Adding a name again replaces it.

Prefer --key-stdin: a key typed on the command line stays in the shell's
history and is visible to other users in the process list.

Options:
  --server <url>     the Baton service, e.g. https://baton.example
  --key <key>        the API key
  --key-stdin        read the API key from stdin (one line); at a terminal it
                     is typed after a prompt, not echoed
  --use              make it the current context
  --json             print {name, server, key (masked), current, file}
  -h, --help         show this help

The file: $XDG_CONFIG_HOME/baton/contexts.json (else
~/.config/baton/contexts.json), mode 0600.
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
      ...COMMON_OPTIONS,
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
  const shown = urlWithoutUserInfo(values.server);
  try {
    server = new URL(values.server);
  } catch {
    throw new UsageError(`--server must be an absolute http(s) URL, got "${shown}"`, ADD_HELP);
  }
  if (server.protocol !== 'http:' && server.protocol !== 'https:')
    throw new UsageError(`--server must be an http(s) URL, got "${shown}"`, ADD_HELP);
  // Saved, it would be printed by every list and refused at every use (the API key goes in --key).
  if (server.username || server.password)
    throw new UsageError(`--server must not carry a user name or password ("${shown}"): give the API key with --key-stdin`, ADD_HELP);
  if (values.key !== undefined && values['key-stdin']) throw new UsageError('give --key or --key-stdin, not both', ADD_HELP);
  const stdin = io.stdin ?? process.stdin;
  const key = values['key-stdin'] ? (await readSecret('API key', { input: stdin })).trim() : values.key?.trim();
  if (values['key-stdin'] && key === '')
    throw new UsageError(
      `${secretIsTyped(stdin) ? 'no key was typed: type it at the prompt, or pipe it in' : 'stdin was empty: pipe the key in'}, as in baton context add ${name} --server <url> --key-stdin < admin.key`,
      ADD_HELP,
    );
  if (key !== undefined && !/^[\x21-\x7e]{1,512}$/.test(key))
    throw new UsageError('the API key must be one word of printable characters (at most 512)', ADD_HELP);

  const env = envOf(io);
  const file = loadContexts(env);
  file.contexts[name] = { server: server.toString().replace(/\/+$/, ''), ...(key ? { api_key: key } : {}) };
  if (values.use || file.current === null) file.current = name;
  const path = saveContexts(env, file);
  const saved = file.contexts[name]!;
  if (values.json) printJson(io, { name, server: saved.server, key: maskKey(key), current: file.current === name, file: path });
  else {
    io.out(`SAVED: context "${name}": ${saved.server} with key ${maskKey(key)}${file.current === name ? ' (current)' : ''}`);
    io.err(`in ${path}`);
  }
  return 0;
}

const USE_HELP = `Usage: baton context use <name> [--json]

Makes a saved context the current one: online commands take its server and
key for what no flag or variable gives (--server, $BATON_URL, --api-key,
$BATON_API_KEY), unless --context or $BATON_CONTEXT names another. Its key
goes only to its own server.

Options:
  --json             print {current, server}
  -h, --help         show this help

Exit codes: 0 done, 2 no such context.`;

async function runUse(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('context use', {
    args: argv,
    allowPositionals: true,
    options: COMMON_OPTIONS,
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
  // Shown without user information: a context saved before add refused it may hold a password.
  const server = urlWithoutUserInfo(file.contexts[name]!.server);
  if (values.json) printJson(io, { current: name, server });
  else io.out(`CURRENT: context "${name}" (${server})`);
  return 0;
}

const LIST_HELP = `Usage: baton context list [--json]

Lists saved contexts; the current one is marked "*". Keys are shown masked.

Exit codes: 0 listed.`;

async function runList(argv: string[], io: CliIo): Promise<number> {
  const { values } = parseCliArgs('context list', {
    args: argv,
    options: COMMON_OPTIONS,
  });
  if (values.help) {
    io.out(LIST_HELP);
    return 0;
  }
  const file = loadContexts(envOf(io));
  const rows = Object.entries(file.contexts).map(([name, c]) => ({
    name,
    current: name === file.current,
    server: urlWithoutUserInfo(c.server),
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

const REMOVE_HELP = `Usage: baton context remove <name> [--json]

Forgets a saved context and its key. Removing the current context leaves
none current.

Options:
  --json             print {removed, current}
  -h, --help         show this help

Exit codes: 0 removed, 2 no such context.`;

async function runRemove(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('context remove', {
    args: argv,
    allowPositionals: true,
    options: COMMON_OPTIONS,
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
  if (values.json) printJson(io, { removed: name, current: file.current });
  else io.out(`REMOVED: context "${name}"${file.current === null ? ' (no context is current now)' : ''}`);
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
  'Saved servers and keys for online commands (like kubectl or zed contexts).\n' +
    'Online commands take --context <name> (else $BATON_CONTEXT), else the current\n' +
    'context. Each setting comes from its flag, else its variable ($BATON_URL,\n' +
    '$BATON_API_KEY), else the context; but a --context flag outranks $BATON_URL\n' +
    'and $BATON_API_KEY: its server and key are used unless --server or --api-key\n' +
    "is given. A context's key goes only to the context's own server, never to\n" +
    'another --server or $BATON_URL.',
  SUBCOMMANDS,
  'Exit codes: 0 done, 2 bad flags or no such context.',
);

export function runContext(argv: string[], io: CliIo): Promise<number> {
  return runSubcommand('context', argv, io, SUBCOMMANDS, CONTEXT_HELP);
}
