/**
 * Child processes of the bench (the Baton service): spawned with node (a
 * TypeScript script through tsx), awaited until they answer HTTP, and
 * stopped by their own pid (SIGTERM, then SIGKILL), never by name.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

export interface Child {
  readonly name: string;
  readonly pid: number;
  readonly url: string;
  /** The last lines it wrote to stderr/stdout (for error reports). */
  output(): string;
  /** How it exited, if it has (null while it runs). */
  exit(): string | null;
  stop(): Promise<void>;
  /** For exit handlers: signal only. */
  killSync(): void;
}

const live = new Set<Child>();

/** Children still running (the teardown path stops them all). */
export function liveChildren(): Child[] {
  return [...live];
}

/** The compiled service that `npm start` runs. */
const BUILT_SERVICE = 'dist/packages/server/lib/main.js';

/** Which service the benches run: `script` for startChild, `label` for their report. */
export interface ServiceEntry {
  readonly script: string;
  readonly label: string;
}

/**
 * The service a bench measures: what ships unless `--source` (or
 * BENCH_SOURCE=1) asks for the TypeScript. By default that is the compiled
 * server `npm start` runs, built first when an input changed, as `npm start`
 * does.
 */
export function serviceEntry(root: string, log: (line: string) => void): ServiceEntry {
  if (process.argv.includes('--source') || process.env['BENCH_SOURCE'] === '1')
    return { script: 'src/main.ts', label: 'node --import tsx src/main.ts (--source)' };
  log('  building the server package if src/ changed (node scripts/build.mjs --if-stale, as npm start does)...');
  execFileSync(process.execPath, [join(root, 'scripts', 'build.mjs'), '--if-stale'], {
    cwd: root,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  return { script: BUILT_SERVICE, label: `node ${BUILT_SERVICE} (what npm start runs)` };
}

export async function startChild(opts: {
  name: string;
  /** A .js file runs as is; anything else through tsx. */
  script: string;
  cwd: string;
  env: Record<string, string>;
  port: number;
  readyPath: string;
  timeoutMs?: number;
  /** Extra node flags (e.g. --cpu-prof). */
  nodeArgs?: readonly string[];
}): Promise<Child> {
  const proc: ChildProcess = spawn(
    process.execPath,
    [...(opts.nodeArgs ?? []), ...(opts.script.endsWith('.js') ? [] : ['--import', 'tsx']), opts.script],
    {
      cwd: opts.cwd,
      env: { PATH: process.env['PATH'] ?? '', HOME: process.env['HOME'] ?? '/root', ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let tail = '';
  const keep = (b: Buffer) => {
    tail = (tail + b.toString('utf8')).slice(-8000);
  };
  proc.stdout?.on('data', keep);
  proc.stderr?.on('data', keep);
  let exited = false;
  let how: string | null = null;
  let stopping = false;
  const exitedP = new Promise<void>((resolve) =>
    proc.once('exit', (code, signal) => {
      exited = true;
      how = signal ? `signal ${signal}` : `exit code ${code}`;
      if (!stopping && (signal !== null || code !== 0))
        process.stderr.write(
          `[bench] ${opts.name} (pid ${proc.pid}) exited unexpectedly: ${how}${signal === 'SIGKILL' ? ' (killed from outside this bench?)' : ''}\n`,
        );
      resolve();
    }),
  );
  const url = `http://127.0.0.1:${opts.port}`;
  const child: Child = {
    name: opts.name,
    pid: proc.pid ?? -1,
    url,
    output: () => tail,
    exit: () => how,
    stop: async () => {
      stopping = true;
      live.delete(child);
      if (exited) return;
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exitedP;
      clearTimeout(timer);
    },
    killSync: () => {
      stopping = true;
      if (!exited) proc.kill('SIGKILL');
    },
  };
  live.add(child);

  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  for (;;) {
    if (exited) throw new Error(`${opts.name} exited before it was ready:\n${tail}`);
    try {
      const res = await fetch(`${url}${opts.readyPath}`);
      await res.arrayBuffer();
      if (res.ok) return child;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await child.stop();
      throw new Error(`${opts.name} did not answer ${opts.readyPath} within ${(opts.timeoutMs ?? 60_000) / 1000}s:\n${tail}`);
    }
    await new Promise((r) => setTimeout(r, 150));
  }
}
