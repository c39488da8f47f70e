/** `baton serve` through the real bin: starts on a real PostgreSQL, answers, stops cleanly on SIGTERM. */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/sdk/client.js';
import { createDatabase } from '../setup/db.js';
import { BIN, runBin, waitForListening } from './helpers.js';

describe('baton serve', () => {
  it('runs the service until SIGTERM, then exits 0', async () => {
    const db = await createDatabase();
    const adminKey = `serve-admin-${randomBytes(16).toString('hex')}`;
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env))
      if (v !== undefined && !k.startsWith('BATON_') && k !== 'DATABASE_URL' && k !== 'PORT') env[k] = v;
    const child = spawn(process.execPath, [BIN, 'serve', '--port', '0', '--host', '127.0.0.1', '--database-url', db.url], {
      env: { ...env, BATON_ADMIN_KEY: adminKey, BATON_MASTER_KEY: randomBytes(32).toString('hex'), BATON_LOG_LEVEL: 'error' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const url = await waitForListening(child, 30_000);
      const client = new BatonClient({ baseUrl: url, apiKey: adminKey });
      expect(await client.ready()).toEqual({ status: 'ready', database: 'postgres' });
      expect(await client.admin.createTenant('served')).toMatchObject({ name: 'served' });
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      await db.drop();
    }
  }, 90_000);

  it('invalid configuration is a usage error (exit 2) naming the setting', async () => {
    const r = await runBin(['serve', '--port', '99999']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/PORT must be a whole number from 0 to 65535/);
    const url = await runBin(['serve', '--database-url', 'mysql://x']);
    expect(url.code).toBe(2);
    expect(url.err).toMatch(/DATABASE_URL must start with postgres/);
  }, 90_000);
});

describe('npm start', () => {
  // npm start builds dist/packages first when the sources changed (tens of seconds
  // on a loaded machine), hence the long wait for the listening line.
  // npm runs the script through sh; without `exec` the service was orphaned when
  // npm got SIGTERM (a container stop, a process manager) and kept serving.
  it('stops the service when npm itself gets SIGTERM', async () => {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env))
      if (v !== undefined && !k.startsWith('BATON_') && !k.startsWith('npm_') && k !== 'DATABASE_URL' && k !== 'PORT') env[k] = v;
    const npm = spawn('npm', ['start', '--silent'], {
      cwd: new URL('../..', import.meta.url).pathname,
      env: {
        ...env,
        PORT: '0',
        BATON_DATA_DIR: 'memory://',
        BATON_ADMIN_KEY: `start-admin-${randomBytes(16).toString('hex')}`,
        BATON_MASTER_KEY: randomBytes(32).toString('hex'),
        BATON_LOG_LEVEL: 'error',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const url = await waitForListening(npm, 200_000);
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
      const exited = new Promise<void>((resolve) => npm.on('exit', () => resolve()));
      npm.kill('SIGTERM');
      await exited;
      // The service must be gone too: nothing answers on its port any more.
      let stillServing = true;
      for (let i = 0; i < 50 && stillServing; i++) {
        stillServing = await fetch(`${url}/healthz`).then(
          () => true,
          () => false,
        );
        if (stillServing) await new Promise((r) => setTimeout(r, 200));
      }
      expect(stillServing, 'the service outlived npm').toBe(false);
    } finally {
      if (npm.exitCode === null) npm.kill('SIGKILL');
    }
  }, 240_000);
});
