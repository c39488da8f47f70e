/**
 * postgres.js needs Baton's closed-socket guard (scripts/postgres-guard.mjs):
 * without it a database outage under load can crash the process from a timer.
 * The patch that adds the guard also exports a marker from the driver; reading
 * it here, through the same specifier the store imports, proves the copy that
 * actually runs is guarded, so a missing guard stops the start instead of
 * going unnoticed.
 */
export const DRIVER_GUARD_EXPORT = 'batonClosedSocketGuard';

export const MISSING_DRIVER_GUARD =
  'Baton refuses to use PostgreSQL: the postgres.js driver it loaded lacks the closed-socket guard ' +
  '(a database outage under load could crash the service). In a source checkout run `node scripts/patch-postgres.mjs` ' +
  '(npm install runs it); an installed @baton-drs/server ships a guarded copy, so reinstall it if its vendor/postgres was changed.';

/** True when the driver module (resolved exactly as the store resolves it) carries the guard. */
export async function postgresDriverGuarded(): Promise<boolean> {
  const driver = (await import('postgres')) as Record<string, unknown>;
  return driver[DRIVER_GUARD_EXPORT] === true;
}
