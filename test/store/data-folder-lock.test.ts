/**
 * The embedded database belongs to one process: a second store on the same
 * data folder is refused while the first holds it, and a lock left by a
 * process that is gone is taken over.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawn, spawnSync } from 'node:child_process';
import { hostname, tmpdir } from 'node:os';
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
    expect(holderPid(dir)).toBe(process.pid);
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
    expect(holderPid(dir)).toBe(process.pid);
    release();
  });

  it('on this host, takes over a lock naming a pid that is now another process (a restarted container is pid 1 again)', () => {
    const dir = folder();
    // A former holder with this very pid: this process holds no lock there, so it is not the holder.
    writeFileSync(join(dir, DATA_FOLDER_LOCK), `${process.pid} - ${hostname()}`);
    lockDataFolder(dir)();
    // A live pid whose process started at another time than the one recorded.
    if (existsSync('/proc/self/stat')) {
      writeFileSync(join(dir, DATA_FOLDER_LOCK), `${process.ppid} 1 ${hostname()}`);
      const release = lockDataFolder(dir);
      expect(holderPid(dir)).toBe(process.pid);
      release();
    }
  });

  it("refuses a lock written on another host, whatever its pid (containers sharing the folder's volume)", () => {
    const dir = folder();
    for (const pid of [process.pid, deadPid()]) {
      writeFileSync(join(dir, DATA_FOLDER_LOCK), `${pid} 1 another-container`);
      expect(() => lockDataFolder(dir)).toThrow(new RegExp(`in use by process ${pid} on host another-container.*delete`));
    }
  });

  it('releases only its own lock: a file another process wrote since is left alone', () => {
    const dir = folder();
    const release = lockDataFolder(dir);
    writeFileSync(join(dir, DATA_FOLDER_LOCK), `${process.ppid} - ${hostname()}`);
    release();
    expect(holderPid(dir)).toBe(process.ppid);
  });

  it('gives a stale lock to one of several processes taking it over at once', { timeout: 60_000 }, async () => {
    // Each says whether it got the lock, then holds what it got until the test has heard from all.
    const script = `
      import { existsSync } from 'node:fs';
      import { lockDataFolder } from ${JSON.stringify(new URL('../../src/store/db.ts', import.meta.url).href)};
      const [dir, at] = process.argv.slice(1);
      while (Date.now() < Number(at)) {}
      let got = false;
      try { lockDataFolder(dir); got = true; } catch {}
      process.stdout.write(got ? 'got' : 'refused');
      const wait = setInterval(() => existsSync(dir + '/done') && clearInterval(wait), 20);
    `;
    for (let trial = 0; trial < 6; trial++) {
      const dir = folder();
      writeFileSync(join(dir, DATA_FOLDER_LOCK), String(deadPid()));
      const at = Date.now() + 1_000;
      const children = Array.from({ length: 4 }, () =>
        spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script, dir, String(at)]),
      );
      const outcomes = await Promise.all(
        children.map((c) => new Promise<string>((resolve) => c.stdout.once('data', (d: Buffer) => resolve(d.toString())))),
      );
      writeFileSync(join(dir, 'done'), '');
      await Promise.all(children.map((c) => new Promise((resolve) => c.once('exit', resolve))));
      expect(
        outcomes.filter((o) => o === 'got'),
        `trial ${trial}: ${outcomes.join(', ')}`,
      ).toHaveLength(1);
    }
  });
});

/** The pid the lock file names. */
function holderPid(dir: string): number {
  return Number(readFileSync(join(dir, DATA_FOLDER_LOCK), 'utf8').trim().split(/\s+/)[0]);
}

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
