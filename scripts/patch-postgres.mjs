// postinstall of the Baton repository (a private package, never installed as
// a dependency): guards this checkout's own postgres.js driver, which the
// tests and `tsx` runs load. See postgres-guard.mjs for the bug. Packages
// never patch anything at install: the server package ships its own patched
// copy (scripts/build.mjs), and the server refuses PostgreSQL without the guard.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { patchPostgresDriver } from './postgres-guard.mjs';

const problems = patchPostgresDriver(join(dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', 'postgres'));
for (const p of problems) console.warn(`[baton] WARNING: could not guard the postgres.js driver: ${p}.`);
if (problems.length > 0) {
  console.warn('[baton] Baton refuses to start on PostgreSQL until the guard is applied: see scripts/postgres-guard.mjs.');
}
