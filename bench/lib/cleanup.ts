/**
 * What a bench run started, stopped on the way out: on normal completion, and
 * on SIGINT/SIGTERM, so an interrupted run leaves no PostgreSQL, service
 * process or data folder behind.
 */
import { rmSync } from 'node:fs';
import type postgres from 'postgres';
import { liveChildren } from './child.js';
import type { PgCluster } from './pg-cluster.js';

export interface BenchResources {
  readonly pg?: PgCluster | undefined;
  readonly sql?: postgres.Sql | undefined;
  readonly dataDir?: string | undefined;
}

/** Returns the cleanup to await at the end; `current` is read when it runs, so late starts are included. */
export function stopOnExit(current: () => BenchResources, log: (line: string) => void): () => Promise<void> {
  const cleanup = async () => {
    const { pg, sql, dataDir } = current();
    await sql?.end({ timeout: 2 }).catch(() => {});
    for (const c of liveChildren()) await c.stop().catch(() => {});
    await pg?.destroy();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  };
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      log(`${sig}: stopping everything`);
      void cleanup().finally(() => process.exit(130));
    });
  }
  return cleanup;
}
