// Raw SQL results differ by driver: postgres.js returns an array of rows,
// PGlite an object with `rows`. Column values differ too (int8 is a string on
// postgres.js, a number on PGlite; timestamptz a string vs a Date), so cast in
// SQL (::int, ::text) or prefer the query builder, which maps by column type.
import { sql, type SQL } from 'drizzle-orm';
import type { Db } from './db.js';

export async function rows<T extends Record<string, unknown>>(db: Db, query: SQL): Promise<T[]> {
  const result: unknown = await db.execute(query);
  if (Array.isArray(result)) return result as T[];
  return (result as { rows: T[] }).rows;
}

/** A text[] parameter: one JSON value, where drizzle would spread a JS array into a list of parameters. */
export function textArray(values: readonly string[]): SQL {
  return sql`array(select jsonb_array_elements_text(${JSON.stringify(values)}::jsonb))`;
}
