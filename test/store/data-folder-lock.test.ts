/**
 * The embedded database belongs to one process: a second store on the same
 * data folder is refused while the first holds it, and a lock left by a
 * process that is gone is taken over.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DATA_FOLDER_LOCK, lockDataFolder } from '../../src/store/data-folder-lock.js';
import { DATABASE_MARKER_FILE, openStore } from '../../src/store/db.js';
import { freshPglite } from '../setup/db.js';
import { scratchFolders } from '../support/scratch.js';

const folder = scratchFolders('baton-lock-');

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

  it.skipIf(!existsSync('/proc/self/stat'))(
    'takes over a lock whose process was killed but not yet reaped (a zombie still takes signal 0; skipped without /proc)',
    async () => {
      const dir = folder();
      // A child that exits at once and stays a zombie: its parent (perl, which Debian always has)
      // prints its pid and never waits for it. (A shell may reap its background job before exec.)
      const parent = spawn('perl', ['-e', '$| = 1; my $pid = fork(); if ($pid == 0) { exit 0 } print "$pid\n"; sleep 30']);
      try {
        const zombie = Number(
          await new Promise<string>((resolve) => parent.stdout.once('data', (b: Buffer) => resolve(b.toString().trim()))),
        );
        const stateOf = () => readFileSync(`/proc/${zombie}/stat`, 'utf8').split(') ')[1]!.split(' ')[0];
        for (let i = 0; i < 200 && stateOf() !== 'Z'; i++) await new Promise((r) => setTimeout(r, 10));
        expect(stateOf()).toBe('Z');
        const start = readFileSync(`/proc/${zombie}/stat`, 'utf8').split(') ')[1]!.split(' ')[19]!;
        writeFileSync(lockOf(dir), lockText({ pid: zombie, start }));
        const release = lockDataFolder(dir);
        expect(holderPid(dir)).toBe(process.pid);
        release();
      } finally {
        parent.kill('SIGKILL');
      }
    },
  );

  it('in its own pid space, takes over a lock naming a pid that is now another process (a restarted container is pid 1 again)', () => {
    const dir = folder();
    // A former holder with this very pid: this process holds no lock there, so it is not the holder.
    writeFileSync(lockOf(dir), lockText({ pid: process.pid }));
    lockDataFolder(dir)();
    // A live pid whose process started at another time than the one recorded.
    if (existsSync('/proc/self/stat')) {
      writeFileSync(lockOf(dir), lockText({ pid: process.ppid, start: '1' }));
      const release = lockDataFolder(dir);
      expect(holderPid(dir)).toBe(process.pid);
      release();
    }
  });

  it('keeps refusing a live holder whose pid space is another (a container sharing the volume, even with this host name)', async () => {
    const dir = folder();
    // The lock names this very pid and host, but another pid namespace: without the heartbeat
    // rule this process took it for a former holder of its own pid.
    for (const where of [{ pidns: 'pid:[1]' }, { host: 'another-container' }, { boot: 'another-boot' }]) {
      writeFileSync(lockOf(dir), lockText({ pid: process.pid, ...where }));
      const beating = await heartbeatOf(lockOf(dir));
      try {
        const waits: string[] = [];
        expect(() => lockDataFolder(dir, { leaseMs: 3_000, onWait: (m) => waits.push(m) })).toThrow(/in use by process \d+.*delete/);
        expect(waits.join()).toMatch(/cannot be checked from here: waiting up to 3 s for its heartbeat/);
      } finally {
        beating.kill();
      }
    }
  });

  it('takes over such a lock once it has gone a lease without a heartbeat', () => {
    const dir = folder();
    for (const where of [
      { pid: process.pid, pidns: 'pid:[1]' },
      { pid: deadPid(), host: 'another-container' },
    ]) {
      writeFileSync(lockOf(dir), lockText(where));
      const t0 = performance.now();
      const release = lockDataFolder(dir, { leaseMs: 600 });
      expect(performance.now() - t0).toBeGreaterThanOrEqual(550);
      expect(holderPid(dir)).toBe(process.pid);
      release();
    }
  });

  it('touches its lock while it holds it, and says so when the lock stops being its own', async () => {
    const dir = folder();
    const lost: string[] = [];
    const release = lockDataFolder(dir, { leaseMs: 500, onLost: (m) => lost.push(m) });
    const before = statSync(lockOf(dir)).mtimeMs;
    expect(await eventually(() => statSync(lockOf(dir)).mtimeMs > before)).toBe(true);
    expect(lost).toEqual([]);
    const other = lockText({ pid: process.ppid });
    writeFileSync(lockOf(dir), other); // taken over by another process
    expect(await eventually(() => lost.length > 0)).toBe(true);
    await sleep(300); // the thread then ends: told once, not again as a thread that died
    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatch(/no longer this process's/);
    release();
    expect(readFileSync(lockOf(dir), 'utf8')).toBe(other);
  });

  it('beats on its own thread: a main thread busy for longer than the lease does not stop the heartbeat', async () => {
    const dir = folder();
    const release = lockDataFolder(dir, { leaseMs: 500, onLost: () => {} });
    try {
      const started = statSync(lockOf(dir)).mtimeMs;
      expect(await eventually(() => statSync(lockOf(dir)).mtimeMs > started)).toBe(true); // the heartbeat thread is up
      const before = statSync(lockOf(dir)).mtimeMs;
      // As a chain of PGlite queries does: the main thread never reaches its timers.
      const until = performance.now() + 1_500;
      while (performance.now() < until) {
        /* busy */
      }
      expect(statSync(lockOf(dir)).mtimeMs).toBeGreaterThan(before);
    } finally {
      release();
    }
  });

  it('without onLost, a lock taken from it ends the process at once, from the heartbeat thread', { timeout: 60_000 }, async () => {
    const dir = folder();
    // A child holding the lock whose main thread is busy for good: only the heartbeat thread can end it.
    const script = `
      import { lockDataFolder } from ${JSON.stringify(new URL('../../src/store/data-folder-lock.ts', import.meta.url).href)};
      lockDataFolder(process.argv[1], { leaseMs: 500 });
      process.stdout.write('held');
      setTimeout(() => { for (;;) {} }, 50);
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script, dir]);
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    await new Promise((resolve) => child.stdout.once('data', resolve));
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
    try {
      writeFileSync(lockOf(dir), lockText({ pid: process.ppid })); // taken over by another process
      expect(await exited).toBe('SIGKILL');
      expect(err).toMatch(/no longer this process's .* this process must stop/);
    } finally {
      child.kill('SIGKILL'); // a child left spinning would outlive a failed test
    }
  });

  it(
    'keeps beating when a NODE_OPTIONS preload would fail on a thread (the heartbeat thread gets no environment)',
    { timeout: 60_000 },
    async () => {
      const dir = folder();
      const preload = join(dir, 'fails-on-threads.cjs');
      // It fails on the heartbeat thread only (known by its workerData): the TypeScript loader has a thread too.
      writeFileSync(preload, "if (require('node:worker_threads').workerData?.lock) throw new Error('this preload fails on threads');");
      const script = `
      import { lockDataFolder } from ${JSON.stringify(new URL('../../src/store/data-folder-lock.ts', import.meta.url).href)};
      lockDataFolder(process.argv[1], { leaseMs: 500 });
      process.stdout.write('held');
      setInterval(() => {}, 1000);
    `;
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script, dir], {
        env: { ...process.env, NODE_OPTIONS: `--require ${preload}` },
      });
      let err = '';
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      let exited = false;
      child.once('exit', () => (exited = true));
      try {
        await new Promise((resolve) => child.stdout.once('data', resolve));
        const before = statSync(lockOf(dir)).mtimeMs;
        expect(await eventually(() => statSync(lockOf(dir)).mtimeMs > before), err).toBe(true);
        await sleep(500);
        expect(exited, err).toBe(false);
      } finally {
        child.kill('SIGKILL');
      }
    },
  );

  it(
    'a takeover guard left behind, even dated ahead of this clock, holds a start up only until it has not changed for a while',
    { timeout: 60_000 },
    () => {
      const dir = folder();
      writeFileSync(lockOf(dir), lockText({ pid: deadPid(), host: 'another-container' }));
      const guard = `${lockOf(dir)}.takeover`;
      writeFileSync(guard, 'a start that died taking over');
      const anHourAhead = new Date(Date.now() + 3_600_000);
      utimesSync(guard, anHourAhead, anHourAhead);
      const release = lockDataFolder(dir, { leaseMs: 600 });
      expect(holderPid(dir)).toBe(process.pid);
      expect(existsSync(guard)).toBe(false);
      release();
    },
  );

  it('puts back a lock removed while it holds it, and stops quietly once the folder itself is gone', async () => {
    const dir = folder();
    const lost: string[] = [];
    const release = lockDataFolder(dir, { leaseMs: 500, onLost: (m) => lost.push(m) });
    const mine = readFileSync(lockOf(dir), 'utf8');
    rmSync(lockOf(dir));
    expect(await eventually(() => existsSync(lockOf(dir)))).toBe(true);
    expect(readFileSync(lockOf(dir), 'utf8')).toBe(mine);
    rmSync(dir, { recursive: true });
    await sleep(300);
    expect(lost).toEqual([]);
    release();
  });

  it('refuses a lock left by an earlier Baton while a process with its pid lives here, and names the file to delete', () => {
    const dir = folder();
    // Such a lock does not say where its pid lives, nor beats: its pid alive here (this one, even) may be it.
    for (const text of [String(process.pid), `${process.pid} 1 ${hostname()}`, `${process.ppid} - ${hostname()}`]) {
      writeFileSync(lockOf(dir), text);
      expect(() => lockDataFolder(dir)).toThrow(/in use by process \d+.*delete/);
    }
    writeFileSync(lockOf(dir), `${process.pid} 1 another-host`);
    expect(() => lockDataFolder(dir)).toThrow(/on host another-host.*delete/);
    writeFileSync(lockOf(dir), `${deadPid()} - ${hostname()}`);
    lockDataFolder(dir)();
  });

  it('refuses a lock that is not a regular file at once, rather than spin on it', () => {
    const dir = folder();
    symlinkSync(join(dir, 'nowhere', 'x'), lockOf(dir));
    expect(() => lockDataFolder(dir)).toThrow(/not a regular file; delete it/);
  });

  it('releases only its own lock: a file another process wrote since is left alone', () => {
    const dir = folder();
    const release = lockDataFolder(dir);
    writeFileSync(lockOf(dir), lockText({ pid: process.ppid }));
    release();
    expect(holderPid(dir)).toBe(process.ppid);
  });

  it(
    'gives a stale lock to one of several processes taking it over at once, judged by pid or by heartbeat',
    { timeout: 90_000 },
    async () => {
      // Each says whether it got the lock, then holds what it got until the test has heard from all.
      const script = `
      import { existsSync } from 'node:fs';
      import { lockDataFolder } from ${JSON.stringify(new URL('../../src/store/data-folder-lock.ts', import.meta.url).href)};
      const [dir, at, leaseMs] = process.argv.slice(1);
      while (Date.now() < Number(at)) {}
      let got = false;
      try { lockDataFolder(dir, { leaseMs: Number(leaseMs) }); got = true; } catch {}
      process.stdout.write(got ? 'got' : 'refused');
      const wait = setInterval(() => existsSync(dir + '/done') && clearInterval(wait), 20);
    `;
      for (let trial = 0; trial < 6; trial++) {
        const dir = folder();
        // Even trials: a gone pid of this pid space; odd ones: a holder in another, without a heartbeat.
        writeFileSync(lockOf(dir), trial % 2 === 0 ? String(deadPid()) : lockText({ pid: deadPid(), pidns: 'pid:[1]' }));
        const at = Date.now() + 1_000;
        const children = Array.from({ length: 4 }, () =>
          spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script, dir, String(at), '600']),
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
    },
  );
});

const lockOf = (dir: string) => join(dir, DATA_FOLDER_LOCK);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Whether `cond` holds within `ms` (polled): the heartbeat runs on its own thread, on a machine that may be busy. */
async function eventually(cond: () => boolean, ms = 10_000): Promise<boolean> {
  const end = performance.now() + ms;
  while (!cond() && performance.now() < end) await sleep(20);
  return cond();
}

/**
 * A lock's text as this process writes it (pid, start time, host, boot, pid namespace, nonce),
 * with some fields replaced: read off a real lock, so the test follows the format.
 */
function lockText(change: { pid?: number; start?: string; host?: string; boot?: string; pidns?: string }): string {
  const dir = folder();
  const release = lockDataFolder(dir);
  const [pid, start, host, boot, pidns, nonce] = readFileSync(lockOf(dir), 'utf8').split(' ');
  release();
  return [change.pid ?? pid, change.start ?? start, change.host ?? host, change.boot ?? boot, change.pidns ?? pidns, `${nonce}0`].join(' ');
}

/** Another process touching `file` every 100 ms, as a live holder's heartbeat does. */
async function heartbeatOf(file: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [
    '-e',
    `const fs = require('node:fs'); process.stdout.write('on'); setInterval(() => { const t = new Date(); fs.utimesSync(${JSON.stringify(file)}, t, t); }, 100);`,
  ]);
  await new Promise((resolve) => child.stdout.once('data', resolve));
  return child;
}

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

  it('a folder PGlite cannot open is named, with what to do, and is given back', { timeout: 90_000 }, async () => {
    const dir = folder();
    writeFileSync(join(dir, 'PG_VERSION'), 'not a database\n');
    const opening = openStore({ dataDir: dir });
    await expect(opening).rejects.toThrow(`the embedded database in ${dir} could not be opened`);
    await expect(opening).rejects.toThrow(/move it aside.*BATON_DATA_DIR/);
    expect(existsSync(join(dir, DATA_FOLDER_LOCK))).toBe(false);
  });

  it(
    'a first start cut short (cluster files, no PG_VERSION, no marker) is created again, as PGlite does',
    { timeout: 90_000 },
    async () => {
      const dir = folder();
      // PGlite copies a new cluster in no set order: global/pg_control may be there before PG_VERSION.
      mkdirSync(join(dir, 'global'));
      writeFileSync(join(dir, 'global', 'pg_control'), Buffer.alloc(8192));
      const store = await openStore({ dataDir: dir });
      try {
        await store.ping();
        expect(existsSync(join(dir, DATABASE_MARKER_FILE))).toBe(true);
      } finally {
        await store.close();
      }
    },
  );

  it(
    'a folder an earlier build migrated (no marker) that lost its PG_VERSION is refused too; a start writes the marker',
    { timeout: 90_000 },
    async () => {
      const { dataDir, store, drop } = await freshPglite();
      try {
        await store.query(`insert into tenants (id, name) values ('ten_earlier', 'earlier')`, []);
        await store.close();
        rmSync(join(dataDir, DATABASE_MARKER_FILE)); // as an earlier build left it
        const version = readFileSync(join(dataDir, 'PG_VERSION'));
        rmSync(join(dataDir, 'PG_VERSION'));
        await expect(openStore({ dataDir })).rejects.toThrow(/PG_VERSION file is missing/);
        writeFileSync(join(dataDir, 'PG_VERSION'), version);
        const again = await openStore({ dataDir });
        try {
          expect(await again.query(`select name from tenants where id = 'ten_earlier'`, [])).toEqual([{ name: 'earlier' }]);
          expect(existsSync(join(dataDir, DATABASE_MARKER_FILE))).toBe(true);
        } finally {
          await again.close();
        }
      } finally {
        await drop();
      }
    },
  );

  it('a database that lost its PG_VERSION is refused as damaged, never created again empty over it', { timeout: 90_000 }, async () => {
    const { dataDir, store, drop } = await freshPglite();
    try {
      await store.query(`insert into tenants (id, name) values ('ten_kept', 'kept')`, []);
      await store.close();
      const version = readFileSync(join(dataDir, 'PG_VERSION'));
      rmSync(join(dataDir, 'PG_VERSION'));
      const opening = openStore({ dataDir });
      await expect(opening).rejects.toThrow(/could not be opened \(it holds a database whose PG_VERSION file is missing\)/);
      expect(existsSync(join(dataDir, DATA_FOLDER_LOCK))).toBe(false);
      // Nothing was written over it: put the file back and the tenant is there.
      writeFileSync(join(dataDir, 'PG_VERSION'), version);
      const again = await openStore({ dataDir });
      try {
        expect(await again.query(`select name from tenants where id = 'ten_kept'`, [])).toEqual([{ name: 'kept' }]);
      } finally {
        await again.close();
      }
    } finally {
      await drop();
    }
  });
});
