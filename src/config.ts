/**
 * Configuration from the environment (DESIGN section 8). Invalid values stop
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
        ctx.addIssue({ code: 'custom', message: `${name} must be a whole number from ${min} to ${max}, got "${raw}"` });
        return z.NEVER;
      }
      return n;
    });

const EnvSchema = z.object({
  PORT: int('PORT', 0, 65535, 8080),
  HOST: z.string().min(1).default('127.0.0.1'),
  DATABASE_URL: z
    .string()
    .optional()
    .refine(
      (v) => v === undefined || v === '' || /^postgres(ql)?:\/\//.test(v),
      'DATABASE_URL must start with postgres:// or postgresql://',
    ),
  BATON_ADMIN_KEY: z.string().min(24, 'BATON_ADMIN_KEY must be at least 24 characters').optional(),
  BATON_DATA_DIR: z.string().min(1).default('./.baton/data'),
  BATON_MASTER_KEY: z
    .string()
    .optional()
    .refine((v) => v === undefined || decodeMasterKey(v) !== null, 'BATON_MASTER_KEY must be 32 bytes as 64 hex digits or base64'),
  BATON_MAX_BODY_BYTES: int('BATON_MAX_BODY_BYTES', 1024, 16 * 1024 * 1024, 256 * 1024),
  BATON_MAX_CHAIN_DEPTH: int('BATON_MAX_CHAIN_DEPTH', 1, 16, 16),
  BATON_INVOCATION_MAX_AGE: int('BATON_INVOCATION_MAX_AGE', 1, 86_400, 300),
  BATON_CLOCK_SKEW: int('BATON_CLOCK_SKEW', 0, 3_600, 60),
  BATON_DB_POOL: int('BATON_DB_POOL', 1, 200, 10),
  BATON_VERIFY_DEADLINE_MS: int('BATON_VERIFY_DEADLINE_MS', 50, 60_000, 5_000),
  BATON_WORKERS: int('BATON_WORKERS', 1, 256, 1),
  BATON_LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).default('info'),
});

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly databaseUrl: string | undefined;
  readonly adminKey: string | undefined;
  readonly dataDir: string;
  /** 32 bytes, or undefined when a dev run must generate one. */
  readonly masterKey: Uint8Array | undefined;
  readonly maxBodyBytes: number;
  readonly maxChainDepth: number;
  readonly invocationMaxAgeSeconds: number;
  readonly clockSkewSeconds: number;
  readonly dbPoolSize: number;
  /** A verify answers 503 past this, and its statement refuses to commit (ms). */
  readonly verifyDeadlineMs: number;
  /** Service processes (node:cluster), one per core; 1 = no cluster. */
  readonly workers: number;
  readonly logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
}

export function decodeMasterKey(raw: string): Uint8Array | null {
  const text = raw.trim();
  if (/^[0-9a-fA-F]{64}$/.test(text)) return Uint8Array.from(Buffer.from(text, 'hex'));
  const bytes = Buffer.from(text, 'base64');
  return bytes.length === 32 ? Uint8Array.from(bytes) : null;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = EnvSchema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  - ${i.path.join('.') || 'environment'}: ${i.message}`);
    throw new ConfigError(
      `Baton cannot start: invalid configuration.\n${lines.join('\n')}\nFix the variables above (see README, "Configuration") and start again.`,
    );
  }
  const e = parsed.data;
  return {
    port: e.PORT,
    host: e.HOST,
    databaseUrl: e.DATABASE_URL || undefined,
    adminKey: e.BATON_ADMIN_KEY,
    dataDir: e.BATON_DATA_DIR,
    masterKey: e.BATON_MASTER_KEY ? (decodeMasterKey(e.BATON_MASTER_KEY) ?? undefined) : undefined,
    maxBodyBytes: e.BATON_MAX_BODY_BYTES,
    maxChainDepth: e.BATON_MAX_CHAIN_DEPTH,
    invocationMaxAgeSeconds: e.BATON_INVOCATION_MAX_AGE,
    clockSkewSeconds: e.BATON_CLOCK_SKEW,
    dbPoolSize: e.BATON_DB_POOL,
    verifyDeadlineMs: e.BATON_VERIFY_DEADLINE_MS,
    workers: e.BATON_WORKERS,
    logLevel: e.BATON_LOG_LEVEL,
  };
}
