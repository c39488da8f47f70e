import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // One real PostgreSQL for the run (BATON_TEST_DATABASE_URL, or a throwaway cluster).
    globalSetup: ['test/setup/postgres.ts'],
  },
});
