// The enumerated lists of src/protocol/lists.ts against the check constraints
// the migrations actually created (and the one list a trigger checks): a list
// changed without a migration (or a migration that drifts from the schema)
// fails here.
import { sql, type SQL } from 'drizzle-orm';
import { getTableConfig, PgTable } from 'drizzle-orm/pg-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACTUAL_SOURCES, API_KEY_SCOPES, APPROVAL_STATUSES, GRANT_STATUSES, SERVICE_RECEIPT_KINDS } from '../../src/protocol/lists.js';
import type { Store } from '../../src/store/db.js';
import { rows } from '../../src/store/rows.js';
import * as schema from '../../src/store/schema/index.js';
import { drivers } from '../setup/drivers.js';

/** Each list-valued check constraint and the list it must hold, exactly. */
const LIST_CONSTRAINTS: Record<string, readonly string[]> = {
  api_keys_scopes_known: API_KEY_SCOPES,
  actuals_source_known: ACTUAL_SOURCES,
  approvals_status_known: APPROVAL_STATUSES,
  grant_approvals_status_known: GRANT_STATUSES,
};

/** Lists checked by a trigger function instead (see its migration for why): function, constraint name it raises, list. */
const TRIGGER_LISTS = [{ fn: 'log_queue_receipt', constraint: 'receipts_kind_known', list: SERVICE_RECEIPT_KINDS }] as const;

/** The quoted literals of a constraint definition, in order. */
const literalsOf = (definition: string): string[] => [...definition.matchAll(/'([^']*)'/g)].map((m) => m[1]!);

const declaredChecks = (Object.values(schema) as unknown[])
  .filter((v): v is PgTable => v instanceof PgTable)
  .flatMap((table) => getTableConfig(table).checks.map((c) => c.name))
  .sort();

describe.each(drivers)('enumerated lists and the live check constraints ($name)', ({ open }) => {
  let store: Store;
  let drop: () => Promise<void>;
  let live: Map<string, string>;
  let functions: Map<string, string>;

  beforeAll(async () => {
    ({ store, drop } = await open());
    const byName = async (query: SQL) =>
      new Map((await rows<{ name: string; definition: string }>(store.db, query)).map((r) => [r.name, r.definition]));
    live = await byName(
      sql`select c.conname::text as name, pg_get_constraintdef(c.oid) as definition
            from pg_constraint c join pg_namespace n on n.oid = c.connamespace
           where n.nspname = 'public' and c.contype = 'c'`,
    );
    functions = await byName(
      sql`select p.proname::text as name, pg_get_functiondef(p.oid) as definition
            from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname = 'public' and p.prokind = 'f'`,
    );
  });
  afterAll(() => drop());

  it.each(Object.entries(LIST_CONSTRAINTS))('%s holds exactly its list', (name, list) => {
    const definition = live.get(name);
    expect(definition, `no check constraint ${name} in the migrated database`).toBeDefined();
    expect(literalsOf(definition!)).toEqual([...list]);
  });

  it.each(TRIGGER_LISTS)('$constraint (checked by $fn) holds exactly its list', ({ fn, constraint, list }) => {
    const definition = functions.get(fn);
    expect(definition, `no function ${fn} in the migrated database`).toBeDefined();
    const checked = /NOT IN \(([^)]*)\)/.exec(definition!);
    expect(checked, `${fn} has no NOT IN list`).not.toBeNull();
    expect(literalsOf(checked![1]!)).toEqual([...list]);
    expect(definition).toContain(`CONSTRAINT = '${constraint}'`);
    expect(live.has(constraint), `${constraint} is checked by ${fn}, not as a check constraint`).toBe(false);
  });

  it('has exactly the check constraints the drizzle schema declares', () => {
    expect([...live.keys()].sort()).toEqual(declaredChecks);
  });
});
