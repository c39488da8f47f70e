/**
 * The embedded database on a disk that fills up: PostgreSQL PANICs when it cannot write its WAL,
 * which aborts PGlite's WebAssembly instance, and the next statement used to spin in it for good
 * (the event loop blocked: no 503, no /healthz, a CPU busy until kill -9). Now every statement
 * after the abort fails at once with a storage error, and the process is told (by default it ends
 * with a message saying to free space and start again).
 *
 * Needs a small disk: a tmpfs mounted here, so root. The store runs in a child process, because a
 * statement spinning in WebAssembly blocks the event loop of the process it runs in, timers too:
 * only another process can see the hang and end it.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/db.js';

/** Mounts a small tmpfs; the reason it could not, or null. */
function mountSmallDisk(at: string): string | null {
  if (process.platform !== 'linux') return `not Linux (${process.platform})`;
  if (process.getuid?.() !== 0) return 'not root: mounting a small tmpfs needs root';
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=96m', 'tmpfs', at], { encoding: 'utf8' });
  if (r.status !== 0) return `mount -t tmpfs failed: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim()}`;
  return null;
}

const disk = mkdtempSync(join(tmpdir(), 'baton-disk-full-'));
const cannotMount = mountSmallDisk(disk);
if (cannotMount !== null) {
  console.warn(`[pglite-disk-full] SKIPPED: the disk-full tests need a small tmpfs, and ${cannotMount}`);
}
afterAll(() => {
  if (cannotMount === null && spawnSync('umount', [disk]).status !== 0) spawnSync('umount', ['-l', disk]);
  rmSync(disk, { recursive: true, force: true });
});

const DB_TS = new URL('../../src/store/db.ts', import.meta.url).href;
const ERRORS_TS = new URL('../../src/store/errors.ts', import.meta.url).href;

/**
 * The child: opens the store on argv[1], fills the disk with argv[2], then updates one row with
 * 1.5 kB that does not compress (WAL, but no new heap pages) until PostgreSQL must start a WAL
 * segment it has no room for. Prints a JSON line per failure and every 200 updates, and, once the
 * store said it stopped, tries a few more statements and prints how each went.
 */
const CHILD = `
import { openSync, writeSync, closeSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { openStore } from ${JSON.stringify(DB_TS)};
import { isStorageUnavailable } from ${JSON.stringify(ERRORS_TS)};
const [dataDir, filler, mode] = process.argv.slice(1);
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
let stopped;
const store = await openStore({ dataDir, ...(mode === 'told' ? { onStopped: (m) => { stopped = m; say({ stopped: m }); } } : {}) });
await store.query('create table disk_full_probe (id int primary key, n int not null, v text not null)', []);
await store.query("insert into disk_full_probe values (1, 0, '')", []);
const fd = openSync(filler, 'w');
for (const size of [1 << 20, 4096, 1]) {
  try { for (;;) writeSync(fd, Buffer.alloc(size)); } catch (e) { if (e.code !== 'ENOSPC') throw e; }
}
closeSync(fd);
say({ filled: true });
const outcome = async (run) => {
  const t = Date.now();
  try { await run(); return { ok: true, ms: Date.now() - t }; }
  catch (e) { return { ok: false, ms: Date.now() - t, storage: isStorageUnavailable(e), error: String(e?.cause?.message ?? e?.message ?? e).slice(0, 300) }; }
};
let lastOk = 0;
for (let n = 1; n <= 60000 && stopped === undefined; n++) {
  const o = await outcome(() => store.query('update disk_full_probe set n = $1, v = $2 where id = 1', [n, randomBytes(750).toString('hex')]));
  if (o.ok) lastOk = n;
  if (!o.ok || n % 200 === 0) say({ n, ...o });
  if (!o.ok) await new Promise((r) => setImmediate(r)); // lets the store's word arrive
}
say({ lastOk });
if (stopped !== undefined) {
  const after = [];
  after.push(await outcome(() => store.query('update disk_full_probe set n = $1 where id = 1', [-1])));
  after.push(await outcome(() => store.query('select n from disk_full_probe where id = 1', [])));
  after.push(await outcome(() => store.db.transaction(async (tx) => { await tx.execute('select 1'); })));
  after.push(await outcome(() => store.ping()));
  say({ after });
  await store.close();
  say({ closed: true });
}
`;

interface Line {
  filled?: boolean;
  stopped?: string;
  n?: number;
  ok?: boolean;
  ms?: number;
  storage?: boolean;
  error?: string;
  lastOk?: number;
  after?: { ok: boolean; ms: number; storage?: boolean; error?: string }[];
  closed?: boolean;
}

/**
 * Runs the child until it exits; ends it (and says so) when it prints nothing for `quietMs` once it
 * has begun, or for `startMs` before its first line: opening the store (tsx, PGlite, every migration)
 * takes longer than any statement, most on a busy machine, and is no hang of the aborted database.
 */
async function runChild(dataDir: string, filler: string, mode: 'told' | 'default', quietMs = 15_000, startMs = 90_000) {
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', CHILD, dataDir, filler, mode]);
  const lines: Line[] = [];
  let out = '';
  let err = '';
  let hung = false;
  let quiet: NodeJS.Timeout | undefined;
  let begun = false;
  const arm = () => {
    clearTimeout(quiet);
    quiet = setTimeout(
      () => {
        hung = true;
        child.kill('SIGKILL');
      },
      begun ? quietMs : startMs,
    );
    begun = true;
  };
  arm();
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
    for (let i = out.indexOf('\n'); i >= 0; i = out.indexOf('\n')) {
      lines.push(JSON.parse(out.slice(0, i)) as Line);
      out = out.slice(i + 1);
    }
    arm(); // after the first output, the shorter wait
  });
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  try {
    const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
    return { code, lines, err, hung };
  } finally {
    clearTimeout(quiet);
    child.kill('SIGKILL'); // a child left spinning would outlive a failed test
  }
}

function hangReport(lines: Line[], err: string): string {
  return `the store stopped answering (no line for 15 s): a statement spun in the aborted database. Last lines: ${JSON.stringify(lines.slice(-3))} stderr: ${err.slice(-500)}`;
}

describe('the embedded database on a disk that fills up', () => {
  it.skipIf(cannotMount !== null)(
    'answers every statement after PostgreSQL aborted with a storage error at once, never a success, and keeps what was committed',
    { timeout: 180_000 },
    async () => {
      const dataDir = join(disk, 'told');
      const filler = join(disk, 'filler-told');
      mkdirSync(dataDir);
      const { code, lines, err, hung } = await runChild(dataDir, filler, 'told');
      rmSync(filler, { force: true });
      expect(hung, hangReport(lines, err)).toBe(false);
      expect(code, err).toBe(0);
      expect(lines.some((l) => l.filled)).toBe(true);
      // The store said it stopped, and what to do.
      const stopped = lines.find((l) => l.stopped !== undefined)?.stopped;
      expect(stopped, JSON.stringify(lines.slice(-5))).toMatch(/cannot go on in this process.*Free space.*start Baton again/);
      // Every failed update was a storage error (a 503, never an allow), and each answered quickly.
      const failed = lines.filter((l) => l.n !== undefined && l.ok === false);
      expect(failed.length).toBeGreaterThan(0);
      for (const f of failed) {
        expect(f.storage, f.error).toBe(true);
        expect(f.ms).toBeLessThan(5_000);
      }
      // No update succeeded after the one that aborted the database.
      const lastOk = lines.find((l) => l.lastOk !== undefined)!.lastOk!;
      expect(lastOk).toBeLessThan(failed[failed.length - 1]!.n!);
      // After the stop: writes, reads, transactions and the ping fail at once, as storage errors.
      const after = lines.find((l) => l.after)!.after!;
      expect(after).toHaveLength(4);
      for (const a of after) {
        expect(a.ok, JSON.stringify(a)).toBe(false);
        expect(a.storage, a.error).toBe(true);
        expect(a.ms).toBeLessThan(1_000);
      }
      expect(lines.some((l) => l.closed)).toBe(true);
      // With room again, a new store recovers what was committed: the last acknowledged update,
      // or a later one whose answer was an error (its commit may have reached the WAL).
      const store = await openStore({ dataDir });
      try {
        const [row] = await store.query('select n from disk_full_probe where id = 1', []);
        const n = Number(row!['n']);
        expect(n === lastOk || failed.some((f) => f.n === n), `stored ${n}, last acknowledged ${lastOk}`).toBe(true);
      } finally {
        await store.close();
      }
    },
  );

  it.skipIf(cannotMount !== null)(
    'by default ends the process with a message saying to free space and start again, rather than hang',
    { timeout: 180_000 },
    async () => {
      const dataDir = join(disk, 'default');
      const filler = join(disk, 'filler-default');
      mkdirSync(dataDir);
      const { code, lines, err, hung } = await runChild(dataDir, filler, 'default');
      rmSync(filler, { force: true });
      expect(hung, hangReport(lines, err)).toBe(false);
      expect(lines.some((l) => l.filled)).toBe(true);
      expect(code, err).toBe(1);
      expect(err).toMatch(
        /^baton: the embedded database in .* cannot go on in this process \(PostgreSQL aborted: .*No space left on device\).*Free space.*start Baton again/m,
      );
      // It ended in the loop, not after it.
      expect(lines.some((l) => l.lastOk !== undefined)).toBe(false);
    },
  );
});

// A tmpfs left mounted would hold its memory: unmount even if vitest stops early.
process.once('exit', () => {
  if (cannotMount === null) spawnSync('umount', ['-l', disk]);
});
