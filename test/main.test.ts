// src/main.ts (npm start): configured by the environment only; an argument is refused, never ignored.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const MAIN = resolve(__dirname, '../src/main.ts');
const TSX = resolve(__dirname, '../node_modules/.bin/tsx');

function runMain(args: string[], env: Record<string, string> = {}) {
  // An empty folder as the working directory: a server started by mistake would create .baton here.
  const cwd = mkdtempSync(join(tmpdir(), 'baton-main-'));
  try {
    const r = spawnSync(TSX, [MAIN, ...args], { cwd, encoding: 'utf8', timeout: 30_000, env: { ...process.env, ...env } });
    return { code: r.status, out: r.stdout, err: r.stderr, files: readdirSync(cwd) };
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
}

describe('main.js', () => {
  it('--help says where the options are and starts nothing', () => {
    const r = runMain(['--help']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/configured by environment variables/);
    expect(r.out).toMatch(/npx baton serve --help/);
    expect(r.files).toEqual([]);
  });

  it('refuses any other argument with exit 2, naming it, and starts nothing', () => {
    const r = runMain(['serve', '--port', '9']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('main.js takes no arguments (got ["serve","--port","9"])');
    expect(r.files).toEqual([]);
  });

  it('exits as baton serve does: 2 for a configuration it refuses, 3 for a start that fails', () => {
    const config = runMain([], { PORT: 'not-a-port' });
    expect(config.code, config.err).toBe(2);
    expect(config.err).toMatch(/invalid configuration[\s\S]*PORT/);
    // Nothing listens on port 9 of this host: PostgreSQL cannot be reached.
    const start = runMain([], { DATABASE_URL: 'postgres://postgres@127.0.0.1:9/none', BATON_MASTER_KEY: 'a'.repeat(64) });
    expect(start.code, start.err).toBe(3);
    expect(start.err).toMatch(/Baton failed to start/);
    // A misspelled setting is said before the start, not taken for its default in silence.
    const misspelled = runMain([], {
      DATABASE_URL: 'postgres://postgres@127.0.0.1:9/none',
      BATON_MASTER_KEY: 'a'.repeat(64),
      BATON_WORKER: '4',
    });
    expect(misspelled.out + misspelled.err).toMatch(
      /BATON_WORKER is set but is no setting of Baton's: it is ignored \(did you mean BATON_WORKERS\?\)/,
    );
    // The same with worker processes: the supervisor passes on its worker's code, not a plain 1.
    const workers = runMain([], {
      PORT: '0',
      BATON_WORKERS: '2',
      DATABASE_URL: 'postgres://postgres@127.0.0.1:9/none',
      BATON_MASTER_KEY: 'a'.repeat(64),
    });
    expect(workers.code, workers.err).toBe(3);
    expect(workers.out + workers.err).toMatch(/a worker failed to start; stopping/);
  });
});
