// The enumerated lists of src/protocol/lists.ts against the check constraints
// the migrations actually created: a list changed without a migration (or a
// migration that drifts from the schema) fails here.
import { sql } from 'drizzle-orm';
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
  receipts_kind_known: SERVICE_RECEIPT_KINDS,
  approvals_status_known: APPROVAL_STATUSES,
  grant_approvals_status_known: GRANT_STATUSES,
};

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

  beforeAll(async () => {
    ({ store, drop } = await open());
    const found = await rows<{ name: string; definition: string }>(
      store.db,
      sql`select c.conname::text as name, pg_get_constraintdef(c.oid) as definition
            from pg_constraint c join pg_namespace n on n.oid = c.connamespace
           where n.nspname = 'public' and c.contype = 'c'`,
    );
    live = new Map(found.map((r) => [r.name, r.definition]));
  });
  afterAll(() => drop());

  it.each(Object.entries(LIST_CONSTRAINTS))('%s holds exactly its list', (name, list) => {
    const definition = live.get(name);
    expect(definition, `no check constraint ${name} in the migrated database`).toBeDefined();
    expect(literalsOf(definition!)).toEqual([...list]);
  });

  it('has exactly the check constraints the drizzle schema declares', () => {
    expect([...live.keys()].sort()).toEqual(declaredChecks);
  });
});
