import { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import { errorForLog, errorText, isStorageUnavailable, isUniqueViolation, pgError } from '../../src/store/errors.js';
import { DrizzleQueryError } from 'drizzle-orm/errors';
import { tenants } from '../../src/store/schema/index.js';
import { freePort } from '../../bench/lib/pg-cluster.js';
import { freshDatabase } from '../setup/db.js';

async function failure(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a failure');
}

describe('storage errors', () => {
  let store: Store;
  let drop: () => Promise<void>;
  beforeAll(async () => ({ store, drop } = await freshDatabase({ max: 2 })));
  afterAll(() => drop());

  it('treat a refused connection as unavailable', async () => {
    const client = postgres(`postgres://postgres@127.0.0.1:${await freePort()}/x`, { max: 1, connect_timeout: 2 });
    const err = await failure(drizzlePostgres({ client }).execute(sql`select 1`));
    await client.end();
    expect(isStorageUnavailable(err)).toBe(true);
  });

  it('treat a statement timeout as unavailable', async () => {
    const err = await failure(
      store.db.transaction(async (tx) => {
        await tx.execute(sql`set local statement_timeout = 10`);
        await tx.execute(sql`select pg_sleep(1)`);
      }),
    );
    expect(pgError(err)?.code).toBe('57014');
    expect(isStorageUnavailable(err)).toBe(true);
  });

  it('treat a read-only database (a standby, a failover under way) as unavailable', async () => {
    const err = await failure(
      store.db.transaction(async (tx) => {
        await tx.execute(sql`set transaction read only`);
        await tx.insert(tenants).values({ id: 'ten_read_only', name: 'a' });
      }),
    );
    expect(pgError(err)?.code).toBe('25006');
    expect(isStorageUnavailable(err)).toBe(true);
  });

  it('treat a closed PGlite as unavailable', async () => {
    const client = await PGlite.create();
    await client.close();
    const err = await failure(drizzlePglite({ client }).execute(sql`select 1`));
    expect(isStorageUnavailable(err)).toBe(true);
  });

  it('do not treat a constraint violation as unavailable', async () => {
    await store.db.insert(tenants).values({ id: 'ten_dup', name: 'a' });
    const err = await failure(store.db.insert(tenants).values({ id: 'ten_dup', name: 'b' }));
    expect(isStorageUnavailable(err)).toBe(false);
    expect(isUniqueViolation(err, 'tenants_pkey')).toBe(true);
  });
});

describe('errorForLog', () => {
  it("names the failed query and the driver's cause, never the query's parameters", () => {
    const cause = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    const err = new DrizzleQueryError('select "id" from "api_keys" where "secret_hash" = $1', ['9f86d081884c7d65'], cause);
    const line = errorForLog(err, true);
    expect(line.error).toBe('Failed query: select "id" from "api_keys" where "secret_hash" = $1');
    expect(line.cause).toBe('Error: connect ECONNREFUSED 127.0.0.1:5432 (ECONNREFUSED)');
    expect(line.stack?.split('\n')[0]).toBe(line.error);
    expect(line.stack).toMatch(/\n\s+at /);
    expect(JSON.stringify(line)).not.toContain('9f86d081884c7d65');
  });

  it('as one line for a failed start: the query and its cause, no parameters; any other error its message', () => {
    const cause = Object.assign(new Error('relation "api_keys" does not exist'), { code: '42P01' });
    const err = new DrizzleQueryError('update "api_keys" set "revoked_at" = now() where "secret_hash" = $1', ['9f86d081884c7d65'], cause);
    expect(errorText(err)).toBe(
      'Failed query: update "api_keys" set "revoked_at" = now() where "secret_hash" = $1 (Error: relation "api_keys" does not exist (42P01))',
    );
    expect(errorText(new Error('could not listen on 127.0.0.1:8080: port in use'))).toBe('could not listen on 127.0.0.1:8080: port in use');
    expect(errorText('boom')).toBe('boom');
    // PGlite's file system throws Emscripten's ErrnoError (no Error, no message): a full disk on a
    // first start printed "[object Object]".
    class ErrnoError {
      readonly name = 'ErrnoError';
      constructor(readonly errno: number) {}
    }
    expect(errorText(new ErrnoError(51))).toBe(
      'the embedded database could not use its data folder: no space left on the device (ENOSPC): free space where the data folder is, or set BATON_DATA_DIR to a folder with room',
    );
    expect(errorText(new ErrnoError(12))).toBe('the embedded database could not use its data folder: file system error number 12 (WASI)');
    // As the start wraps it (naming the folder), the cause is told too, not "([object Object])".
    const wrapped = new Error('the embedded database in /d could not be opened', { cause: new ErrnoError(51) });
    expect(errorText(wrapped)).toBe(
      'the embedded database in /d could not be opened (the embedded database could not use its data folder: no space left on the device (ENOSPC): free space where the data folder is, or set BATON_DATA_DIR to a folder with room)',
    );
    expect(errorForLog(wrapped).cause).toMatch(/ENOSPC/);
    // Thrown as it is, to a request's log line.
    expect(errorForLog(new ErrnoError(51)).error).toMatch(/ENOSPC/);
    // Another non-Error object: its kind and field names, never their values (they may hold a secret).
    expect(errorText({ status: 'odd', url: 'postgres://user:secret@db/baton' })).toBe('a thrown Object with the fields status, url');
  });

  it('keeps any other error as it is, and a thrown non-error as text', () => {
    expect(errorForLog(new TypeError('x is not a function'))).toEqual({ error: 'TypeError: x is not a function' });
    expect(errorForLog('boom')).toEqual({ error: 'boom' });
  });
});
