/**
 * CPU accounting from /proc (Linux): per-process user+system ticks, the
 * PostgreSQL process tree, and the whole machine, so a phase can say which
 * process burned how much of the 2 cores while the load ran.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';

export const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

export const CORES = cpus().length;

interface Stat {
  readonly ppid: number;
  /** utime + stime, in clock ticks. */
  readonly ticks: number;
  /** stime alone (kernel: syscalls, loopback TCP). */
  readonly sys: number;
}

/** Fields after the last ')' of /proc/<pid>/stat: state(3) ppid(4) ... utime(14) stime(15). */
function readStat(pid: number, file = `/proc/${pid}/stat`): Stat | undefined {
  try {
    const text = readFileSync(file, 'utf8');
    const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
    // rest[0] is field 3 (state), so field n is rest[n - 3].
    return { ppid: Number(rest[1]), ticks: Number(rest[11]) + Number(rest[12]), sys: Number(rest[12]) };
  } catch {
    return undefined; // exited
  }
}

/**
 * CPU ticks (user + system) a process has used so far, all its threads, and
 * its main thread alone (a Node process's event loop); NaN once it exited.
 */
export function processTicks(pid: number): { all: number; main: number } {
  return { all: readStat(pid)?.ticks ?? NaN, main: readStat(pid, `/proc/${pid}/task/${pid}/stat`)?.ticks ?? NaN };
}

/** Every live pid whose parent is `pid` (one level). */
export function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const s = readStat(Number(name));
    if (s && s.ppid === pid) out.push(Number(name));
  }
  return out;
}

/** The postmaster (first line of postmaster.pid) and all its backends and helpers. */
export function postgresPids(dataDir: string): number[] {
  const file = join(dataDir, 'postmaster.pid');
  if (!existsSync(file)) return [];
  const postmaster = Number(readFileSync(file, 'utf8').split('\n')[0]);
  if (!Number.isFinite(postmaster) || postmaster <= 0) return [];
  return [postmaster, ...childrenOf(postmaster)];
}

/**
 * Busy, stolen and total ticks of the whole machine (all cores), from the first line of
 * /proc/stat. Steal is time a virtual CPU was ready to run while the host ran something
 * else: not work done here, so not busy; a phase with much of it was slowed from outside.
 */
function machineTicks(): { busy: number; steal: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  const idle = (f[3] ?? 0) + (f[4] ?? 0); // idle + iowait
  const steal = f[7] ?? 0;
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0); // without guest (already in user)
  return { busy: total - idle - steal, steal, total };
}

export type PidGroups = Record<string, () => number[]>;

export interface CpuSample {
  /** Wall-clock seconds covered. */
  readonly seconds: number;
  /** Cores used per group (1.0 = one core fully busy for the whole sample). */
  readonly cores: Record<string, number>;
  /** Of that, the share spent in the kernel (system time), per group. */
  readonly sysShare: Record<string, number>;
  /** Cores busy on the whole machine, anything included (steal excluded). */
  readonly machineBusy: number;
  /** Cores the host took from this machine's virtual CPUs while they had work (steal time). */
  readonly machineSteal: number;
}

/**
 * Starts a CPU sample over named groups of processes. A pid first seen at
 * the end counts from zero (it started during the sample); one that exited
 * during it is lost (its ticks went with it), which pools never do here.
 */
export function startCpuSample(groups: PidGroups): () => CpuSample {
  const t0 = performance.now();
  const m0 = machineTicks();
  const before = new Map<string, Map<number, Stat>>();
  for (const [name, pids] of Object.entries(groups)) {
    const m = new Map<number, Stat>();
    for (const pid of pids()) {
      const s = readStat(pid);
      if (s) m.set(pid, s);
    }
    before.set(name, m);
  }
  return () => {
    const seconds = (performance.now() - t0) / 1000;
    const m1 = machineTicks();
    const cores: Record<string, number> = {};
    const sysShare: Record<string, number> = {};
    for (const [name, pids] of Object.entries(groups)) {
      const start = before.get(name)!;
      let ticks = 0;
      let sys = 0;
      for (const pid of pids()) {
        const s = readStat(pid);
        if (s) {
          ticks += s.ticks - (start.get(pid)?.ticks ?? 0);
          sys += s.sys - (start.get(pid)?.sys ?? 0);
        }
      }
      cores[name] = ticks / CLK_TCK / seconds;
      sysShare[name] = ticks > 0 ? sys / ticks : 0;
    }
    const share = (d: number) => (m1.total > m0.total ? (d / (m1.total - m0.total)) * CORES : 0);
    return { seconds, cores, sysShare, machineBusy: share(m1.busy - m0.busy), machineSteal: share(m1.steal - m0.steal) };
  };
}

/** Samples of one load taken in slices, as one: each slice weighs by its length. */
export function joinCpuSamples(samples: readonly CpuSample[]): CpuSample {
  const seconds = samples.reduce((n, s) => n + s.seconds, 0);
  const mean = (f: (s: CpuSample) => number) => samples.reduce((n, s) => n + f(s) * s.seconds, 0) / seconds;
  const groups = Object.keys(samples[0]?.cores ?? {});
  const cores = Object.fromEntries(groups.map((g) => [g, mean((s) => s.cores[g] ?? 0)]));
  // A share of each slice's cores, so weighted by them too.
  const sysShare = Object.fromEntries(
    groups.map((g) => [g, cores[g]! > 0 ? mean((s) => (s.sysShare[g] ?? 0) * (s.cores[g] ?? 0)) / cores[g]! : 0]),
  );
  return { seconds, cores, sysShare, machineBusy: mean((s) => s.machineBusy), machineSteal: mean((s) => s.machineSteal) };
}
