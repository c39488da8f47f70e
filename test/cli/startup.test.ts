/**
 * The offline commands of the compiled CLI load only what they need: files of
 * its bundle (cli/, scripts/build.mjs bundleCli), the one module it shares
 * with the service (lib/protocol/errors.js) and the noble libraries. Never
 * the server (hono, drizzle, PGlite, postgres.js, prom-client), the MCP SDK,
 * the HTTP client or zod's ~100 modules from node_modules; only the commands
 * that validate records load the bundle's subset of zod. That is what keeps
 * them starting fast; the test checks the module graph, not a time (times
 * depend on the machine).
 *
 * Each command runs in a child process of the built server package with a
 * module loader hook that writes down every file module it loads.
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from './helpers.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PACKAGE = join(ROOT, 'dist/packages/server');
const BIN = join(PACKAGE, 'bin/baton.js');

/** Everything an offline command may load. */
const OFFLINE = [
  pathToFileURL(BIN).href,
  new RegExp(`^${escape(pathToFileURL(join(PACKAGE, 'cli')).href)}/[\\w-]+\\.js$`),
  pathToFileURL(join(PACKAGE, 'lib/protocol/errors.js')).href,
  /\/node_modules\/@noble\/(ed25519|hashes)\//,
];
/** The legal comment that starts the bundle's zod subset (bundleCli), wherever esbuild put it. */
const ZOD_SUBSET = /^\/\/! zod [\d.]+ \(MIT, see LICENSE\.zod\): only z\.\{/m;

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

interface Loaded {
  code: number;
  out: string;
  err: string;
  modules: string[];
}

let dir: string;
let hook: string;

function runTraced(args: string[]): Promise<Loaded> {
  const trace = join(dir, `trace-${Math.random().toString(36).slice(2)}.txt`);
  writeFileSync(trace, '');
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', pathToFileURL(hook).href, BIN, ...args],
      { cwd: dir, env: { PATH: process.env['PATH'] ?? '', HOME: dir, BATON_TRACE_FILE: trace }, timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, out: stdout, err: stderr, modules: readFileSync(trace, 'utf8').split('\n').filter(Boolean) });
      },
    );
  });
}

function forbiddenIn(modules: readonly string[]): string[] {
  return modules.filter((m) => !OFFLINE.some((allowed) => (typeof allowed === 'string' ? m === allowed : allowed.test(m))));
}

/** Whether the bundle's zod subset was among the modules loaded. */
function loadsZod(modules: readonly string[]): boolean {
  return modules.some((m) => m.startsWith('file:') && ZOD_SUBSET.test(readFileSync(fileURLToPath(m), 'utf8')));
}

beforeAll(async () => {
  await new Promise<void>((resolve, reject) =>
    execFile(process.execPath, [join(ROOT, 'scripts/build.mjs'), '--if-stale'], { cwd: ROOT, timeout: 600_000 }, (e, _o, stderr) =>
      e ? reject(new Error(`build failed: ${stderr}`)) : resolve(),
    ),
  );
  dir = tempDir();
  const hooks = join(dir, 'trace-hooks.mjs');
  // The hooks run on their own thread; appendFileSync keeps every line even if the command exits at once.
  writeFileSync(
    hooks,
    `import { appendFileSync } from 'node:fs';
export async function load(url, context, next) {
  if (url.startsWith('file:')) appendFileSync(process.env.BATON_TRACE_FILE, url + '\\n');
  return next(url, context);
}
`,
  );
  hook = join(dir, 'trace-register.mjs');
  writeFileSync(hook, `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`);
}, 660_000);

describe('offline commands of the compiled CLI load only their bundle, not the server, the HTTP client or zod from node_modules', () => {
  it('every offline command, run for real, loads only the modules it needs', async () => {
    const operator = await runTraced(['keygen', '--out', 'operator.json']);
    const agent = await runTraced(['keygen', '--out', 'agent.json', '--json']);
    expect(operator.code, operator.err).toBe(0);
    const agentDid = JSON.parse(agent.out).did as string;
    const operatorDid = operator.out.trim();

    const cases: { args: string[]; zod: boolean }[] = [
      { args: ['--version'], zod: false },
      { args: ['--help'], zod: false },
      { args: ['keygen', '--out', 'third.json'], zod: false },
      {
        args: ['delegate', '--key', 'operator.json', '--to', agentDid, '--tools', 'search', '--max-calls', '3', '--out', 'a.chain.json'],
        zod: true,
      },
      {
        args: [
          'invoke',
          '--key',
          'agent.json',
          '--chain',
          'a.chain.json',
          '--tool',
          'search',
          '--tool-server',
          'mcp://s',
          '--out',
          'b.json',
        ],
        zod: true,
      },
      { args: ['inspect', 'b.json'], zod: false },
      { args: ['context', 'list'], zod: false },
      { args: ['verify', 'b.json', '--trust', operatorDid], zod: true },
    ];
    const loaded = [operator, agent];
    for (const c of cases) {
      const r = await runTraced(c.args);
      expect(r.code, `baton ${c.args.join(' ')}: ${r.err}`).toBe(0);
      // The trace saw the CLI itself: the check below is not vacuous.
      expect(r.modules).toContain(pathToFileURL(join(PACKAGE, 'cli/main.js')).href);
      expect(forbiddenIn(r.modules), `baton ${c.args.join(' ')}`).toEqual([]);
      expect(loadsZod(r.modules), `baton ${c.args.join(' ')} loads zod`).toBe(c.zod);
      loaded.push(r);
    }
    expect(forbiddenIn([...operator.modules, ...agent.modules])).toEqual([]);
    expect(loadsZod([...operator.modules, ...agent.modules])).toBe(false);
    // verify did verify: zod was loaded because it is needed, and the decision came out.
    expect(loaded.at(-1)!.out).toMatch(/^ALLOWED/);
  });

  it('the check would see the server: serve --help reaches past the offline set', async () => {
    // A control for the hook: a module of the service, loaded through the same trace, is reported.
    const r = await runTraced(['serve', '--help']);
    expect(r.code, r.err).toBe(0);
    expect(forbiddenIn(r.modules)).toContain(pathToFileURL(join(PACKAGE, 'lib/server.js')).href);
  });
});
