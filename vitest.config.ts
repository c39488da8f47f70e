import { defineConfig } from 'vitest/config';

// CI asks for a machine-readable copy of the results too (BATON_TEST_RESULTS), so a failure can be
// named in the last lines it prints, which are all that some CI views keep.
const resultsFile = process.env['BATON_TEST_RESULTS'];

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // One real PostgreSQL for the run (BATON_TEST_DATABASE_URL, or a throwaway cluster).
    globalSetup: ['test/setup/postgres.ts'],
    ...(resultsFile ? { reporters: ['default', 'json'], outputFile: { json: resultsFile } } : {}),
  },
});
