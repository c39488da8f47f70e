// vitest globalSetup: one real PostgreSQL server for the whole run. Tests get
// its superuser URL with inject('pgAdminUrl') and make their own databases
// (see ./db.ts), so files stay isolated and can run in parallel.
import postgres from 'postgres';
import type { TestProject } from 'vitest/node';
import { redactUrl } from '../../src/store/migrate.js';
import { HOW_TO_FIX, startPgCluster, type PgCluster } from '../../bench/lib/pg-cluster.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Superuser URL of the test server (a database every test may CREATE DATABASE from). */
    pgAdminUrl: string;
  }
}

let cluster: PgCluster | undefined;

export async function setup(project: TestProject): Promise<void> {
  const started = performance.now();
  const given = process.env.BATON_TEST_DATABASE_URL;
  let url: string;
  if (given) {
    url = given;
  } else {
    cluster = await startPgCluster();
    url = cluster.url;
    // If vitest dies without calling teardown, still stop the server.
    process.once('exit', () => cluster?.destroySync());
  }
  await checkReachable(url);
  project.provide('pgAdminUrl', url);
  const ms = Math.round(performance.now() - started);
  const where = cluster ? `throwaway cluster on 127.0.0.1:${cluster.port}` : 'BATON_TEST_DATABASE_URL';
  console.error(`[baton tests] PostgreSQL ready (${where}) in ${ms} ms`);
}

export async function teardown(): Promise<void> {
  await cluster?.destroy();
  cluster = undefined;
}

async function checkReachable(url: string): Promise<void> {
  const sql = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    const [row] = await sql<{ v: string }[]>`select current_setting('server_version') as v`;
    if (!row) throw new Error('no answer');
  } catch (err) {
    const fix = cluster
      ? HOW_TO_FIX
      : 'BATON_TEST_DATABASE_URL is set: start that server or correct the URL, or unset it to let the tests start a throwaway cluster from local PostgreSQL binaries.';
    throw new Error(`PostgreSQL at ${redactUrl(url)} is not reachable: ${String(err)}\n${fix}`);
  } finally {
    await sql.end({ timeout: 2 });
  }
}
