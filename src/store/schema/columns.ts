// Column helpers shared by the domain files, so every table spells
// tenants, money, record times and server times the same way.
import { bigint, text, timestamp } from 'drizzle-orm/pg-core';
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
