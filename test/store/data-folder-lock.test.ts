/**
 * The embedded database belongs to one process: a second store on the same
 * data folder is refused while the first holds it, and a lock left by a
 * process that is gone is taken over.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DATA_FOLDER_LOCK, lockDataFolder, openStore } from '../../src/store/db.js';
import { freshPglite } from '../setup/db.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const folder = () => {
  const d = mkdtempSync(join(tmpdir(), 'baton-lock-'));
  dirs.push(d);
  return d;
};

/** The pid of a process that has exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']);
  return Number(child.stdout.toString());
}

describe('lockDataFolder', () => {
  it('holds the folder for this process until released', () => {
    const dir = folder();
    const release = lockDataFolder(dir);
    expect(readFileSync(join(dir, DATA_FOLDER_LOCK), 'utf8')).toBe(String(process.pid));
    expect(() => lockDataFolder(dir)).toThrow(/in use by process \d+.*BATON_DATA_DIR.*delete/);
    release();
    release(); // twice is harmless
    expect(existsSync(join(dir, DATA_FOLDER_LOCK))).toBe(false);
    lockDataFolder(dir)();
  });

  it('refuses a folder another live process holds, and takes over one whose process is gone', () => {
    const dir = folder();
    writeFileSync(join(dir, DATA_FOLDER_LOCK), String(process.ppid));
    expect(() => lockDataFolder(dir)).toThrow(new RegExp(`in use by process ${process.ppid}`));
    const gone = deadPid();
    writeFileSync(join(dir, DATA_FOLDER_LOCK), String(gone));
    const release = lockDataFolder(dir);
    expect(readFileSync(join(dir, DATA_FOLDER_LOCK), 'utf8')).toBe(String(process.pid));
    release();
  });
});

describe('the embedded store', () => {
  it('refuses a second store on a data folder in use, and opens it once the first closed', { timeout: 90_000 }, async () => {
    const { dataDir, store, drop } = await freshPglite();
    try {
      await expect(openStore({ dataDir })).rejects.toThrow(/in use by process/);
      await store.ping(); // the first is untouched
      await store.close();
      expect(existsSync(join(dataDir, DATA_FOLDER_LOCK))).toBe(false);
      const again = await openStore({ dataDir });
      await again.ping();
      await again.close();
    } finally {
      await drop();
    }
  });
});
