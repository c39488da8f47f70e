// The embedded database's data folder belongs to one process. PGlite keeps no
// lock of its own, and a second process writing the same folder would corrupt
// it, so the store holds the folder through a file naming its holder.
import { randomBytes } from 'node:crypto';
import { linkSync, lstatSync, readFileSync, readlinkSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { Worker } from 'node:worker_threads';
import { join } from 'node:path';

/** The file that says which process holds an embedded data folder. */
export const DATA_FOLDER_LOCK = 'baton.pid';

export interface DataFolderLockOptions {
  /**
   * How long a lock whose holder this process cannot judge may go without a heartbeat before it
   * is taken over (default 10 s). The holder touches the file every fifth of it.
   */
  readonly leaseMs?: number;
  /** Told when a start waits to see whether such a holder is alive (a wait of up to `leaseMs`). */
  readonly onWait?: (message: string) => void;
  /**
   * Called once if the lock stops being this process's while it holds it (another process took
   * it over after this one missed its heartbeats; a removed lock is put back while nobody else has
   * taken it). Another process may then write the folder, so without it the heartbeat thread ends
   * this process at once (a line on stderr, then SIGKILL): the main thread may be too busy to hear.
   */
  readonly onLost?: (message: string) => void;
}

/**
 * Holds the folder for this process until the returned release is called.
 *
 * The lock file appears whole (written aside under a random name, then linked into place, which
 * fails if one exists). It names the holder's pid and start time and where the pid means something:
 * the host's name, its boot and the pid namespace (Linux: /proc). A holder is judged by its pid only
 * from the same host, boot and pid namespace. Containers sharing the folder's volume, even with one
 * host name, and other machines, cannot see each other's pids: there the holder proves it is alive
 * by touching the file (its heartbeat), and a lock that goes `leaseMs` without one is stale.
 *
 * Where pids can be judged, a pid that is gone, or that now is a process started at another time,
 * is no holder, nor is a lock naming this very process's pid that this process does not hold (a
 * former holder's: the pid was reused). A stale lock is taken over by one process at a time:
 * removing it takes a second file, created exclusively, and the lock is read again first, so two
 * starts finding it cannot each remove the other's new lock. The release removes the file only
 * while it is still this process's.
 */
export function lockDataFolder(dataDir: string, options: DataFolderLockOptions = {}): () => void {
  const lock = join(realpathSync(dataDir), DATA_FOLDER_LOCK);
  const guard = `${lock}.takeover`;
  const leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
  const me = whereThisRuns();
  const mine = holderText({ pid: process.pid, start: startTimeOf(process.pid), ...me, nonce: randomBytes(8).toString('hex') });
  // One deadline for the whole start: long enough to watch a lease and outwait a stale guard.
  const deadline = performance.now() + leaseMs + STALE_TAKEOVER_MS + LOCK_TAKEOVER_WAIT_MS;
  let guardSeen: { text: string | undefined; mtime: number | undefined; since: number } | undefined;
  for (;;) {
    if (createWhole(lock, mine)) {
      heldHere.add(lock);
      return holdWithHeartbeat(lock, mine, leaseMs, options.onLost);
    }
    const holder = readHolder(lock);
    if (holder === undefined) {
      // Removed meanwhile: try again, for a while (a file that exists for link but not for read is no lock).
      if (performance.now() > deadline) throw new Error(`the data folder lock ${lock} cannot be read although it exists; delete it.`);
      continue;
    }
    let verdict: Verdict | 'changed' = judge(lock, holder, me);
    if (verdict === 'watch') {
      options.onWait?.(
        `the data folder ${dataDir} is held by process ${holder.pid} on host ${holder.host ?? '?'}, whose pid cannot be checked from here: waiting up to ${Math.ceil(leaseMs / 1000)} s for its heartbeat`,
      );
      verdict = watchHeartbeat(lock, holder, leaseMs);
      if (verdict === 'changed') continue;
    }
    if (verdict === 'alive') {
      throw new Error(
        `the data folder ${dataDir} is in use by process ${holder.pid}${holder.host && holder.host !== me.host ? ` on host ${holder.host}` : ''} (another Baton?). Stop it, or use another folder (BATON_DATA_DIR, baton serve --data-dir); if no Baton runs there, delete ${lock}.`,
      );
    }
    // Its process is gone: take it over, one process at a time.
    if (!createWhole(guard, mine)) {
      if (performance.now() > deadline) {
        throw new Error(
          `the data folder ${dataDir} is being taken over by another process (${guard}); try again, or delete that file if none is starting.`,
        );
      }
      // A guard left by a process that died while taking over stays as it is: removed once it has not
      // changed for a while, as watched here (never judged by its time against this host's clock).
      const seen = { text: readOrUndefined(() => readFileSync(guard, 'utf8')), mtime: mtimeOf(guard) };
      if (guardSeen === undefined || guardSeen.text !== seen.text || guardSeen.mtime !== seen.mtime) {
        guardSeen = { ...seen, since: performance.now() };
      } else if (performance.now() - guardSeen.since > STALE_TAKEOVER_MS) {
        if (readOrUndefined(() => readFileSync(guard, 'utf8')) === seen.text) rmSync(guard, { force: true });
        guardSeen = undefined;
      }
      sleepSync(20);
      continue;
    }
    try {
      // Only a guard holder removes the lock, so it still holds what was read unless it is gone.
      if (readHolder(lock)?.text === holder.text) rmSync(lock, { force: true });
    } finally {
      rmSync(guard, { force: true });
    }
  }
}

const DEFAULT_LEASE_MS = 10_000;
/** How long a start waits for another process's takeover of a stale lock before giving up. */
const LOCK_TAKEOVER_WAIT_MS = 5_000;
/** A takeover guard unchanged this long was left by a process that died taking over. */
const STALE_TAKEOVER_MS = 10_000;
/** Locks this process holds (by real path): a file naming this pid that is not among them is a former holder's. */
const heldHere = new Set<string>();

/** Where a pid means something: two processes can compare pids only when all three are equal and known. */
interface Where {
  readonly host: string;
  /** Linux: /proc/sys/kernel/random/boot_id. */
  readonly boot: string | undefined;
  /** Linux: the pid namespace, as /proc/self/ns/pid links it (e.g. `pid:[4026531836]`). */
  readonly pidns: string | undefined;
}

interface Holder extends Partial<Where> {
  readonly pid: number;
  readonly start: string | undefined;
  /** False for a lock written by a Baton before heartbeats (its fields end at the host, or sooner). */
  readonly beats: boolean;
  readonly text: string;
}

function whereThisRuns(): Where {
  return {
    host: hostname(),
    boot: readOrUndefined(() => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim()),
    pidns: readOrUndefined(() => readlinkSync('/proc/self/ns/pid')),
  };
}

/** `pid start host boot pidns nonce`, `-` for what is unknown; the nonce makes each lock's text its own. */
function holderText(h: { pid: number; start: string | undefined; nonce: string } & Where): string {
  return [h.pid, h.start ?? '-', h.host, h.boot ?? '-', h.pidns ?? '-', h.nonce].join(' ');
}

/** The lock's holder; undefined when there is no file (any other failure to read it is thrown). */
function readHolder(lock: string): Holder | undefined {
  let text: string;
  try {
    if (!lstatSync(lock).isFile()) throw new Error(`the data folder lock ${lock} is not a regular file; delete it.`);
    text = readFileSync(lock, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  const fields = text.trim().split(/\s+/);
  const known = (s: string | undefined) => (s === undefined || s === '-' ? undefined : s);
  const n = Number(fields[0]);
  return {
    pid: Number.isInteger(n) && n > 0 ? n : 0,
    start: known(fields[1]),
    host: fields[2],
    boot: known(fields[3]),
    pidns: known(fields[4]),
    beats: fields.length >= 6,
    text,
  };
}

type Verdict = 'alive' | 'gone' | 'watch';

function judge(lock: string, holder: Holder, me: Where): Verdict {
  if (holder.pid <= 0) return 'gone'; // no pid at all: nobody's lock
  if (!holder.beats) {
    // Written by an earlier Baton, which kept no heartbeat and did not say where its pid lives: a
    // pid alive here may be it (or another container's), so it stands until a person deletes it.
    if (holder.host !== undefined && holder.host !== me.host) return 'alive';
    return holder.pid === process.pid || processIsAlive(holder.pid) ? 'alive' : 'gone';
  }
  const samePidSpace =
    holder.host === me.host && me.boot !== undefined && holder.boot === me.boot && me.pidns !== undefined && holder.pidns === me.pidns;
  if (!samePidSpace) return 'watch';
  if (holder.pid === process.pid) return heldHere.has(lock) ? 'alive' : 'gone';
  if (!processIsAlive(holder.pid)) return 'gone';
  // The pid is someone's: the holder's only if it started when the holder did (where that is known).
  const start = startTimeOf(holder.pid);
  return holder.start === undefined || start === undefined || start === holder.start ? 'alive' : 'gone';
}

/**
 * Watches a lock whose holder cannot be judged by pid: alive once its heartbeat moves the file's
 * modification time, gone after `leaseMs` without one, `changed` when the file is no longer it.
 * Only the change is compared, never a time against this host's clock (another host's may differ).
 */
function watchHeartbeat(lock: string, holder: Holder, leaseMs: number): 'alive' | 'gone' | 'changed' {
  const seen = mtimeOf(lock);
  const until = performance.now() + leaseMs;
  while (performance.now() < until) {
    sleepSync(Math.min(200, leaseMs / 10));
    if (readHolder(lock)?.text !== holder.text) return 'changed';
    if (mtimeOf(lock) !== seen) return 'alive';
  }
  return 'gone';
}

/** The heartbeat thread's states, in a shared Int32Array: the release waits while a beat is under way. */
const BEATING = 0;
const STOPPED = 1;
const IN_BEAT = 2;

/**
 * The heartbeat, on a thread of its own: PGlite runs each query on the main thread, and a chain of
 * awaited queries (a long migration, a bulk job) never lets that thread's timers run, so a beat
 * there went missing for as long as the chain ran (a review: 36,782 queries in 3 s, no beat), and
 * a start in another pid namespace took the folder over while this process still wrote to it.
 * Plain JavaScript, evaluated: the thread imports nothing of Baton, so it starts in milliseconds
 * from the sources and from the built package alike. Every fifth of the lease it touches the lock
 * while the lock is this process's, and puts it back if it was removed while nobody else took it.
 * When the lock is another's, it ends this process at once (SIGKILL, after a line on stderr): the
 * main thread may be too busy to hear it, and another process may be writing the folder. With an
 * `onLost` (tests) it tells the main thread instead.
 */
const HEARTBEAT_THREAD = `
const { workerData, parentPort } = require('node:worker_threads');
const fs = require('node:fs');
const { randomBytes } = require('node:crypto');
const { lock, mine, intervalMs, state, endOnLoss } = workerData;
const flags = new Int32Array(state);
function putBack() {
  const aside = lock + '.' + randomBytes(8).toString('hex') + '.tmp';
  try {
    fs.writeFileSync(aside, mine, { flag: 'wx' });
    fs.linkSync(aside, lock);
    return 'back';
  } catch (e) {
    return e.code === 'ENOENT' ? 'folder-gone' : 'not-now';
  } finally {
    try { fs.rmSync(aside, { force: true }); } catch {}
  }
}
function beat() {
  if (Atomics.compareExchange(flags, 0, ${BEATING}, ${IN_BEAT}) !== ${BEATING}) return clearInterval(timer);
  let outcome = 'beat';
  try {
    let text;
    try {
      text = fs.readFileSync(lock, 'utf8');
    } catch (e) {
      if (e.code === 'ENOENT' && putBack() === 'folder-gone') outcome = 'folder-gone';
      return;
    }
    if (text !== mine) outcome = 'lost';
    else {
      const now = new Date();
      try { fs.utimesSync(lock, now, now); } catch {}
    }
  } finally {
    Atomics.store(flags, 0, outcome === 'beat' ? ${BEATING} : ${STOPPED});
    Atomics.notify(flags, 0);
    if (outcome !== 'beat') clearInterval(timer);
    if (outcome === 'lost') {
      const message = 'the data folder lock ' + lock + " is no longer this process's (another process took it over after this one missed its heartbeats): it may be writing the folder, so this process must stop";
      if (endOnLoss) {
        try { fs.writeSync(2, 'baton: ' + message + '\\n'); } catch {}
        process.kill(process.pid, 'SIGKILL');
      } else parentPort.postMessage(message);
    }
  }
}
const timer = setInterval(beat, intervalMs);
`;

/** Touches the lock every fifth of the lease while it is this process's (on its own thread); returns the release. */
function holdWithHeartbeat(lock: string, mine: string, leaseMs: number, onLost: ((message: string) => void) | undefined): () => void {
  const state = new SharedArrayBuffer(4);
  const flags = new Int32Array(state);
  let held = true;
  let thread: Worker;
  try {
    thread = new Worker(HEARTBEAT_THREAD, {
      eval: true,
      // Nothing of the parent's flags (a TypeScript loader, say, whose set-up would wait on the main
      // thread), and no environment: a NODE_OPTIONS preload that fails on a thread would end this one.
      execArgv: [],
      env: {},
      workerData: { lock, mine, intervalMs: leaseMs / 5, state, endOnLoss: onLost === undefined },
    });
  } catch (err) {
    // Without a heartbeat the lock cannot be held safely: give it back, as if never taken.
    heldHere.delete(lock);
    if (readHolder(lock)?.text === mine) rmSync(lock, { force: true });
    throw err;
  }
  let told = false;
  const lost = (message: string) => {
    if (!held || told) return; // a release raced the thread's last word, or it was told already
    told = true;
    heldHere.delete(lock);
    if (onLost) return onLost(message);
    process.stderr.write(`baton: ${message}\n`);
    process.kill(process.pid, 'SIGKILL');
  };
  thread.on('message', lost);
  // A heartbeat thread that ended on its own while the lock is held (it stops only once the lock is
  // lost, told above, or its folder is gone) leaves the lock to be taken over a lease later by a
  // start in another pid namespace, while this process still writes the folder: stop as if lost.
  const ended = (why: string) => {
    if (Atomics.load(flags, 0) === STOPPED) return;
    lost(
      `the data folder lock ${lock}'s heartbeat thread ended (${why}): without it another process may take the folder over, so this process must stop`,
    );
  };
  thread.on('error', (err: Error) => ended(err.message));
  thread.on('exit', (code: number) => ended(`exit code ${code}`));
  // After the listeners, which would otherwise hold the process open: the lock must not keep it alive.
  thread.unref();
  return () => {
    if (!held) return;
    held = false;
    heldHere.delete(lock);
    // Stop the beats first, waiting out one under way, so none puts the lock back after it is removed.
    while (Atomics.compareExchange(flags, 0, BEATING, STOPPED) === IN_BEAT) Atomics.wait(flags, 0, IN_BEAT, 50);
    void thread.terminate();
    if (readHolder(lock)?.text === mine) rmSync(lock, { force: true });
  };
}

/** Creates `file` holding `text`, whole or not at all; false when it exists. */
function createWhole(file: string, text: string): boolean {
  const aside = `${file}.${randomBytes(8).toString('hex')}.tmp`;
  writeFileSync(aside, text, { flag: 'wx' });
  try {
    linkSync(aside, file);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  } finally {
    rmSync(aside, { force: true });
  }
}

/** The process's start time in clock ticks since boot (Linux), or undefined where /proc does not tell. */
function startTimeOf(pid: number): string | undefined {
  return readOrUndefined(() => {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which may hold spaces and parentheses: the 22nd field is the 20th here.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  });
}

function readOrUndefined(read: () => string | undefined): string | undefined {
  try {
    return read() || undefined;
  } catch {
    return undefined;
  }
}

function mtimeOf(file: string): number | undefined {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
  // A process killed but not yet reaped by its parent (a zombie, Linux state Z) still takes signal
  // 0, and holds nothing: a restart right after kill -9 was refused until its parent reaped it.
  return !isZombie(pid);
}

function isZombie(pid: number): boolean {
  const state = readOrUndefined(() => {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  });
  return state === 'Z' || state === 'X';
}
