/**
 * Configuration from the environment (docs/design.md, storage and running). Invalid values stop
 * the start with a message naming the variable and what it accepts.
 */
import { z } from 'zod';

const int = (name: string, min: number, max: number, fallback: number) =>
  z
    .string()
    .optional()
    .transform((raw, ctx) => {
      if (raw === undefined || raw === '') return fallback;
      const n = Number(raw);
      if (!/^\d+$/.test(raw) || n < min || n > max) {
        ctx.addIssue({ code: 'custom', message: `${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}` });
        return z.NEVER;
      }
      return n;
    });

/** The longest bearer token the service reads from an Authorization header. */
export const BEARER_TOKEN_MAX_LENGTH = 512;

/** A secret presented as `Authorization: Bearer <token>`: only what that header can carry (printable ASCII, no spaces). */
const bearerToken = (name: string) =>
  z
    .string()
    .regex(
      new RegExp(`^[\\x21-\\x7e]{24,${BEARER_TOKEN_MAX_LENGTH}}$`),
      `${name} must be 24 to ${BEARER_TOKEN_MAX_LENGTH} printable ASCII characters without spaces (an Authorization: Bearer header carries no other); check for a trailing space or carriage return`,
    );

/** The transparency logs' name when BATON_TLOG_NAME is unset: fit for a development machine only. */
export const DEFAULT_TLOG_NAME = 'localhost';

const GENERATE_MASTER_KEY = `Generate one with: node -e "console.log(require('crypto').randomBytes(32).toString('hex'))"`;
const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;

const EnvSchema = z.object({
  PORT: int('PORT', 0, 65535, 8080),
  HOST: z.string().min(1).default('127.0.0.1'),
  DATABASE_URL: z
    .string()
    .optional()
    // Set but empty (a missing secret in a manifest) is not unset: it would run a node on an empty
    // embedded database while its operator believes it is on PostgreSQL.
    .refine((v) => v !== '', 'DATABASE_URL is set but empty: give a postgres:// URL, or unset it to run on the embedded database')
    .refine(
      (v) => v === undefined || v === '' || /^postgres(ql)?:\/\//.test(v),
      'DATABASE_URL must start with postgres:// or postgresql://',
    )
    .refine(
      (v) => v === undefined || !/^postgres(ql)?:\/\//.test(v) || readableDatabaseUrl(v),
      'DATABASE_URL is not a URL the PostgreSQL client can read: check its host and port, and percent-encode the special characters of its user name and password (% as %25, @ as %40, : as %3A, / as %2F)',
    ),
  // A key that no Authorization header can carry would revoke the generated admin key and log in
  // nowhere, leaving no admin key at all: refused at start, as the bearer reader would refuse it.
  BATON_ADMIN_KEY: bearerToken('BATON_ADMIN_KEY').optional(),
  // A bearer token that reads /metrics and nothing else, for a Prometheus scraper.
  BATON_METRICS_TOKEN: bearerToken('BATON_METRICS_TOKEN').optional(),
  // A folder, or memory:// (nothing kept). Any other URL PGlite may still open as a folder (file://)
  // while Baton, taking it for no folder, would skip the folder's lock, checks and permissions.
  BATON_DATA_DIR: z
    .string()
    .min(1)
    .default('./.baton/data')
    .refine(
      (v) => !v.includes('://') || v.startsWith('memory://'),
      'BATON_DATA_DIR must be a folder path (or memory:// for a database kept in memory only); give a file:// URL as a plain path',
    ),
  BATON_MASTER_KEY: z
    .string()
    .optional()
    .refine(
      (v) => v === undefined || decodeMasterKey(v) !== null,
      `BATON_MASTER_KEY must be 32 random bytes as 64 hex digits or base64 (43 characters, or 44 ending in =). ${GENERATE_MASTER_KEY}`,
    ),
  BATON_MAX_BODY_BYTES: int('BATON_MAX_BODY_BYTES', 1024, 16 * 1024 * 1024, 256 * 1024),
  // The request body bytes one process holds at once while they arrive, over every request: the
  // time a body takes is the client's, so stalled uploads would otherwise grow memory with connections.
  BATON_MAX_BODY_BUFFER_BYTES: int('BATON_MAX_BODY_BUFFER_BYTES', 1024, 16 * 1024 * 1024 * 1024, 64 * 1024 * 1024),
  BATON_MAX_CHAIN_DEPTH: int('BATON_MAX_CHAIN_DEPTH', 1, 16, 16),
  BATON_INVOCATION_MAX_AGE: int('BATON_INVOCATION_MAX_AGE', 1, 86_400, 300),
  BATON_CLOCK_SKEW: int('BATON_CLOCK_SKEW', 0, 3_600, 60),
  BATON_DB_POOL: int('BATON_DB_POOL', 1, 200, 10),
  BATON_VERIFY_DEADLINE_MS: int('BATON_VERIFY_DEADLINE_MS', 50, 60_000, 5_000),
  BATON_WRITE_DEADLINE_MS: int('BATON_WRITE_DEADLINE_MS', 50, 600_000, 30_000),
  BATON_WORKERS: int('BATON_WORKERS', 1, 256, 1),
  // Transparency log: how often the integrator runs (0 = never on this node), and the name that
  // starts every tenant log's origin (<name>/baton/<tenant>); set it once, to a host name you own.
  BATON_TLOG_INTERVAL_MS: int('BATON_TLOG_INTERVAL_MS', 0, 60_000, 250),
  BATON_TLOG_NAME: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9.:/_-]{0,199}$/, 'BATON_TLOG_NAME must be a host name or path (letters, digits, . : / _ -)')
    .default(DEFAULT_TLOG_NAME),
  // Any case (INFO is info), and a refusal that names the value, as the other variables' do.
  BATON_LOG_LEVEL: z
    .string()
    .default('info')
    .transform((v) => v.toLowerCase())
    .pipe(
      z.enum(LOG_LEVELS, {
        error: (issue) => `BATON_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${String(issue.input)}"`,
      }),
    ),
  // HTTP timeouts: an idle keep-alive connection outlives common load-balancer idle timeouts (60 s),
  // so the balancer, never the service, closes it first; see README "Running behind a load balancer".
  BATON_KEEP_ALIVE_TIMEOUT_MS: int('BATON_KEEP_ALIVE_TIMEOUT_MS', 1_000, 3_600_000, 65_000),
  BATON_HEADERS_TIMEOUT_MS: int('BATON_HEADERS_TIMEOUT_MS', 1_000, 3_600_000, 66_000),
  BATON_REQUEST_TIMEOUT_MS: int('BATON_REQUEST_TIMEOUT_MS', 1_000, 3_600_000, 120_000),
});

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly databaseUrl: string | undefined;
  readonly adminKey: string | undefined;
  /** A bearer token that reads /metrics and nothing else (BATON_METRICS_TOKEN). */
  readonly metricsToken: string | undefined;
  readonly dataDir: string;
  /** 32 bytes, or undefined when a dev run must generate one. */
  readonly masterKey: Uint8Array | undefined;
  readonly maxBodyBytes: number;
  /** Request body bytes this process holds at once while they arrive; a body past it answers 503 SERVICE_BUSY. */
  readonly maxBodyBufferBytes: number;
  readonly maxChainDepth: number;
  readonly invocationMaxAgeSeconds: number;
  readonly clockSkewSeconds: number;
  readonly dbPoolSize: number;
  /** A verify answers 503 past this, and its statement refuses to commit (ms). */
  readonly verifyDeadlineMs: number;
  /**
   * A write (any method but GET and HEAD, verify aside) that waits longer for the database answers
   * 503, and its work rolls back rather than commit later (ms; never less than verifyDeadlineMs).
   */
  readonly writeDeadlineMs: number;
  /** Service processes (node:cluster), one per core; 1 = no cluster. */
  readonly workers: number;
  /** Transparency log integrator interval in ms; 0 = this node never integrates. */
  readonly tlogIntervalMs: number;
  /** Origin prefix of every tenant's transparency log. */
  readonly tlogName: string;
  readonly logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  readonly http: HttpTimeouts;
}

/** Node HTTP server timeouts, in milliseconds. */
export interface HttpTimeouts {
  /** How long an idle keep-alive connection stays open. */
  readonly keepAliveTimeoutMs: number;
  /** How long a client may take to send a request's headers; above keepAliveTimeoutMs. */
  readonly headersTimeoutMs: number;
  /** How long a client may take to send a whole request; at least headersTimeoutMs. */
  readonly requestTimeoutMs: number;
}

/**
 * A master key as written: 64 hex digits, or 32 bytes of base64 (either alphabet, 43 characters
 * or 44 ending in `=`, with the last character's unused bits zero), surrounding whitespace
 * aside. Anything else is null, as is the all-zero key: Buffer's base64 reader skips characters
 * outside its alphabet, so `$$ key $$` and `key` read as one key, and a mistyped or templated
 * value must not start a node with a key nobody chose.
 */
export function decodeMasterKey(raw: string): Uint8Array | null {
  const text = raw.trim();
  let bytes: Buffer;
  if (/^[0-9a-fA-F]{64}$/.test(text)) bytes = Buffer.from(text, 'hex');
  else if (/^(?:[A-Za-z0-9+/]{43}|[A-Za-z0-9_-]{43})=?$/.test(text)) {
    const unpadded = text.replace(/=$/, '').replace(/\+/g, '-').replace(/\//g, '_');
    bytes = Buffer.from(unpadded, 'base64url');
    if (bytes.toString('base64url') !== unpadded) return null;
  } else return null;
  return bytes.length === 32 && bytes.some((b) => b !== 0) ? Uint8Array.from(bytes) : null;
}

/**
 * Whether postgres.js can read `url`, read its way (its parseUrl: the hosts after the user info
 * percent-decoded, the first of a list put in the URL, then the user name and password
 * percent-decoded): a stray % in a password otherwise ended the start with only "URI malformed".
 */
function readableDatabaseUrl(url: string): boolean {
  try {
    const authority = url.slice(url.indexOf('://') + 3).split(/[?/]/)[0]!;
    const hosts = decodeURIComponent(authority.slice(authority.indexOf('@') + 1));
    const parsed = new URL(url.replace(hosts, hosts.split(',')[0]!));
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
    return true;
  } catch {
    return false;
  }
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Environment variables (process.env by default); not NodeJS.ProcessEnv, so the published types need no @types/node. */
export type Environment = Readonly<Record<string, string | undefined>>;

/**
 * Combinations that would start but fail later, request by request: refused
 * at start instead, as `variable: problem` lines.
 */
function unsafeCombinations(env: Environment): string[] {
  const problems: string[] = [];
  if (env['DATABASE_URL'] && !env['BATON_MASTER_KEY']) {
    // A generated development key lives in one node's data folder: a second node on the same
    // database could not open the signing keys the first one sealed there.
    problems.push(
      'BATON_MASTER_KEY: is required with DATABASE_URL: every node sharing the database must use the same master key to open the keys sealed in it. ' +
        `${GENERATE_MASTER_KEY} and set the same value on every node`,
    );
  }
  // Only a value BATON_WORKERS itself accepts: any other is refused as such, once.
  const workers = EnvSchema.shape.BATON_WORKERS.safeParse(env['BATON_WORKERS']);
  if (workers.success && workers.data > 1 && !env['DATABASE_URL']) {
    problems.push(
      'BATON_WORKERS: more than 1 needs DATABASE_URL: the embedded database belongs to one process. Set DATABASE_URL (baton serve --database-url), or run 1 worker',
    );
  }
  return problems;
}

/**
 * BATON_ variables something other than the service reads: the CLI (its server, key, context and
 * stack traces), the supervisor's mark on its workers, and the test and CI tools.
 */
const READ_ELSEWHERE = new Set([
  'BATON_URL',
  'BATON_API_KEY',
  'BATON_CONTEXT',
  'BATON_DEBUG',
  'BATON_SUPERVISED_WORKER',
  'BATON_PG_BIN',
  'BATON_TEST_DATABASE_URL',
  'BATON_TEST_RESULTS',
  'BATON_CI_PG_PORT',
  'BATON_TRACE_FILE',
]);

/**
 * One line for each BATON_ variable set that no setting reads: a misspelled setting (BATON_WORKER=4)
 * would otherwise start with its default in silence. Warned, not refused: a variable meant for
 * another version, or another tool, stops no start.
 */
export function unreadSettings(env: Environment = process.env): string[] {
  const settings = Object.keys(EnvSchema.shape);
  return Object.keys(env)
    .filter((name) => name.startsWith('BATON_') && !settings.includes(name) && !READ_ELSEWHERE.has(name))
    .filter((name) => !isKubernetesServiceLink(name, env[name]))
    .sort()
    .map((name) => {
      // BATON_DATABASE_URL means DATABASE_URL: the settings without the prefix are compared bare.
      const near = closestName(name, settings) ?? closestName(name.slice('BATON_'.length), UNPREFIXED);
      return `${name} is set but is no setting of Baton's: it is ignored${near === undefined ? '' : ` (did you mean ${near}?)`}`;
    });
}

/**
 * One line for each setting given a value the start raises rather than refuses: a write deadline
 * below the verify deadline is served as the verify deadline (a write is never given less time than
 * a verify), which an operator who set it would otherwise not learn.
 */
export function raisedSettings(env: Environment = process.env): string[] {
  const parsed = EnvSchema.safeParse(env);
  if (!parsed.success || env['BATON_WRITE_DEADLINE_MS'] === undefined) return [];
  const { BATON_WRITE_DEADLINE_MS: write, BATON_VERIFY_DEADLINE_MS: verify } = parsed.data;
  return write < verify
    ? [
        `BATON_WRITE_DEADLINE_MS (${write}) is below BATON_VERIFY_DEADLINE_MS (${verify}): writes wait up to ${verify} ms, as a write is never given less time than a verify`,
      ]
    : [];
}

/** The settings without the BATON_ prefix. */
const UNPREFIXED = Object.keys(EnvSchema.shape).filter((name) => !name.startsWith('BATON_'));

/**
 * What Kubernetes sets in every pod for a Service named `baton` or `baton-<x>` (BATON_SERVICE_HOST,
 * BATON_SERVICE_PORT[_<name>], BATON_PORT=tcp://..., BATON_PORT_<n>_TCP[_PROTO|_PORT|_ADDR], and the
 * same with BATON_<X>_ before them): no
 * setting misspelled, and warned about at every start of every pod it would teach operators to
 * read past the warning.
 */
function isKubernetesServiceLink(name: string, value: string | undefined): boolean {
  // Any Service whose name starts with baton (baton-db, a Helm release's baton-baton): <NAME>_SERVICE_HOST, ...
  if (/^BATON_(?:[A-Z0-9_]+_)?SERVICE_(HOST|PORT(_.+)?)$/.test(name)) return true;
  if (/^BATON_(?:[A-Z0-9_]+_)?PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?$/.test(name)) return true;
  return /^BATON_(?:[A-Z0-9_]+_)?PORT$/.test(name) && /^(tcp|udp|sctp):\/\//.test(value ?? '');
}

/** The setting nearest to `name` by edit distance, if one is near enough to be a misspelling of it. */
function closestName(name: string, settings: readonly string[]): string | undefined {
  let best: { name: string; distance: number } | undefined;
  for (const s of settings) {
    const distance = editDistance(name, s);
    if (best === undefined || distance < best.distance) best = { name: s, distance };
  }
  return best !== undefined && best.distance <= Math.max(2, Math.floor(name.length / 4)) ? best.name : undefined;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = row;
  }
  return previous[b.length]!;
}

/** `VARIABLE: problem`, the variable named once (most messages begin with it already). */
function issueLine(issue: { readonly path: readonly PropertyKey[]; readonly message: string }): string {
  const variable = issue.path.map(String).join('.') || 'environment';
  return issue.message.startsWith(`${variable} `) ? issue.message : `${variable}: ${issue.message}`;
}

export function loadConfig(env: Environment = process.env): Config {
  const parsed = EnvSchema.safeParse(env);
  const unsafe = unsafeCombinations(env);
  if (!parsed.success || unsafe.length > 0) {
    const lines = [...(parsed.success ? [] : parsed.error.issues.map(issueLine)), ...unsafe].map((line) => `  - ${line}`);
    // A misspelled setting is often why one is missing: said here, where the start stops.
    const unread = unreadSettings(env).map((line) => `  - ${line}`);
    const misspelled = unread.length === 0 ? '' : `\nNot read (a misspelling?):\n${unread.join('\n')}`;
    throw new ConfigError(
      `Baton cannot start: invalid configuration.\n${lines.join('\n')}${misspelled}\nFix the settings above (an environment variable, or its baton serve flag) and start again ("baton serve --help" lists every variable with its default, as does the README's "Configuration" section).`,
    );
  }
  const e = parsed.data;
  const http = {
    keepAliveTimeoutMs: e.BATON_KEEP_ALIVE_TIMEOUT_MS,
    headersTimeoutMs: e.BATON_HEADERS_TIMEOUT_MS,
    requestTimeoutMs: e.BATON_REQUEST_TIMEOUT_MS,
  };
  // Node requires headers <= request; headers above keep-alive is the usual advice, so a
  // connection is never cut by the header timer while it may still be reused.
  if (!(http.keepAliveTimeoutMs < http.headersTimeoutMs && http.headersTimeoutMs <= http.requestTimeoutMs)) {
    throw new ConfigError(
      `Baton cannot start: invalid configuration.\n  - BATON_KEEP_ALIVE_TIMEOUT_MS (${http.keepAliveTimeoutMs}) must be below ` +
        `BATON_HEADERS_TIMEOUT_MS (${http.headersTimeoutMs}), which must be at most BATON_REQUEST_TIMEOUT_MS (${http.requestTimeoutMs}).`,
    );
  }
  // Keyless bodies hold half the budget at most (body.ts): a smaller one would refuse every keyless
  // body of the largest size accepted, whatever the load.
  if (e.BATON_MAX_BODY_BUFFER_BYTES < 2 * e.BATON_MAX_BODY_BYTES) {
    throw new ConfigError(
      `Baton cannot start: invalid configuration.\n  - BATON_MAX_BODY_BUFFER_BYTES (${e.BATON_MAX_BODY_BUFFER_BYTES}) must be at least ` +
        `twice BATON_MAX_BODY_BYTES (${2 * e.BATON_MAX_BODY_BYTES}): keyless bodies hold half of it at most, and a body of the largest size accepted must fit in that half.`,
    );
  }
  return {
    port: e.PORT,
    host: e.HOST,
    databaseUrl: e.DATABASE_URL || undefined,
    adminKey: e.BATON_ADMIN_KEY,
    metricsToken: e.BATON_METRICS_TOKEN,
    dataDir: e.BATON_DATA_DIR,
    masterKey: e.BATON_MASTER_KEY ? (decodeMasterKey(e.BATON_MASTER_KEY) ?? undefined) : undefined,
    maxBodyBytes: e.BATON_MAX_BODY_BYTES,
    maxBodyBufferBytes: e.BATON_MAX_BODY_BUFFER_BYTES,
    maxChainDepth: e.BATON_MAX_CHAIN_DEPTH,
    invocationMaxAgeSeconds: e.BATON_INVOCATION_MAX_AGE,
    clockSkewSeconds: e.BATON_CLOCK_SKEW,
    dbPoolSize: e.BATON_DB_POOL,
    verifyDeadlineMs: e.BATON_VERIFY_DEADLINE_MS,
    writeDeadlineMs: Math.max(e.BATON_WRITE_DEADLINE_MS, e.BATON_VERIFY_DEADLINE_MS),
    workers: e.BATON_WORKERS,
    tlogIntervalMs: e.BATON_TLOG_INTERVAL_MS,
    tlogName: e.BATON_TLOG_NAME,
    logLevel: e.BATON_LOG_LEVEL,
    http,
  };
}
