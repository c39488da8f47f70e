/**
 * Summary of a V8 .cpuprofile (the service run with BENCH_PROFILE_DIR):
 * where the main thread's busy time went, grouped into a few buckets.
 * Self time only, idle excluded. A sampling profile counts wall time on the
 * thread, so on an overloaded machine a syscall that gets preempted (socket
 * writes waking PostgreSQL) looks larger than its CPU cost.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

interface CallFrame {
  functionName: string;
  url: string;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const BUCKETS: [string, (f: CallFrame) => boolean][] = [
  ['idle', (f) => f.functionName === '(idle)'],
  ['socket writes (writeBuffer/writev syscalls)', (f) => f.functionName === 'writeBuffer' || f.functionName === 'writev'],
  ['node:crypto (Ed25519, key import, hashing)', (f) => f.url.includes('internal/crypto')],
  ['garbage collector', (f) => f.functionName === '(garbage collector)'],
  ['postgres.js', (f) => f.url.includes('node_modules/postgres/')],
  ['drizzle-orm', (f) => f.url.includes('node_modules/drizzle-orm/')],
  ['zod', (f) => f.url.includes('node_modules/zod/')],
  ['hono + @hono/node-server', (f) => /node_modules\/(hono|@hono)\//.test(f.url)],
  ['node http/net/streams', (f) => /node:(_http|net|internal\/streams|events|buffer|internal\/buffer)/.test(f.url)],
  ['Baton src/protocol', (f) => f.url.includes('/src/protocol/')],
  ['Baton src/service + src/store', (f) => /\/src\/(service|store)\//.test(f.url)],
  ['module loading (tsx, esm)', (f) => /tsx|modules\/esm|modules\/cjs|bootstrap/.test(f.url)],
  ['other', () => true],
];

export function summarizeProfile(file: string): { busyMs: number; rows: [string, number][] } {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const frames = new Map(p.nodes.map((n) => [n.id, n.callFrame]));
  const totals = new Map<string, number>();
  for (let i = 0; i < p.samples.length; i++) {
    const f = frames.get(p.samples[i]!)!;
    const bucket = BUCKETS.find(([, match]) => match(f))![0];
    totals.set(bucket, (totals.get(bucket) ?? 0) + (p.timeDeltas[i] ?? 0));
  }
  totals.delete('idle');
  const busy = [...totals.values()].reduce((a, b) => a + b, 0);
  const rows = [...totals].sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, v / busy] as [string, number]);
  return { busyMs: busy / 1000, rows };
}

/** The largest .cpuprofile of a pid in dir (the main thread's is the big one). */
export function profileOf(dir: string, pid: number): string | undefined {
  const files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile') && f.includes(`.${pid}.`));
  return files.map((f) => join(dir, f)).sort((a, b) => statSync(b).size - statSync(a).size)[0];
}
