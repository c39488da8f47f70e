// Column helpers shared by the domain files, so every table spells
// tenants, money, record times and server times the same way.
import { sql, type SQL } from 'drizzle-orm';
import { bigint, text, timestamp, type AnyPgColumn } from 'drizzle-orm/pg-core';
import { tenants } from './tenants.js';

/** Owning tenant; every row is keyed by one (per-tenant sharding stays possible). */
export const tenantId = () =>
  text('tenant_id')
    .notNull()
    .references(() => tenants.id);

/** Integer micro-dollars (1 USD = 1_000_000). Never floats. */
export const micros = (name: string) => bigint(name, { mode: 'number' });

/** Unix seconds copied from a signed record (nbf, exp, iat). */
export const unixSeconds = (name: string) => bigint(name, { mode: 'number' });

/** Server-side time; defaults to now(). */
export const createdAt = () => timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow();

export const serverTime = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });

/**
 * The SQL literals of an enumerated list from src/protocol/lists.ts, for a
 * check constraint built from the list itself. The lists hold plain names
 * only; anything else is a programming error, refused before it reaches SQL.
 */
export function sqlLiterals(values: readonly string[]): SQL {
  for (const v of values) if (!/^[a-z][a-z0-9_.-]*$/.test(v)) throw new Error(`not a plain list value: ${JSON.stringify(v)}`);
  return sql.raw(values.map((v) => `'${v}'`).join(','));
}

/** `column in (...values)`. */
export const oneOf = (column: AnyPgColumn, values: readonly string[]): SQL => sql`${column} in (${sqlLiterals(values)})`;
