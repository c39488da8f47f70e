/**
 * The published packages, used as a stranger would: build them, `npm pack`
 * each, install the tarballs OFFLINE (from the npm cache `npm ci` filled) into
 * a plain-JS ESM project and into a strict TypeScript project, type-check and
 * run a small program against each. Prints the sizes.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitForListeningLine } from '../cli/helpers.js';
import { createDatabase } from '../setup/db.js';
import { writeConsumerProject, type PackedTarball } from './consumer-lock.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');
/**
 * The SDK installed with its noble libraries. It stood 2.5 kB under 2 MiB at 37b5620; checking the
 * shape of every answer and the chains getChain returns (stop 45) added 22 kB. Most of the package
 * is type declarations: zod's (about 580 kB, vendored for the record schemas' types) and the wire
 * types (260 kB). A budget, so that growth is seen and decided, not a size anyone promised.
 */
const MAX_SDK_INSTALLED_BYTES = 2.25 * 1024 * 1024;

/** The environment without npm's run-script variables (they would steer the child npm) or Baton settings. */
function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !/^npm_/i.test(k) && !k.startsWith('BATON_') && k !== 'DATABASE_URL' && k !== 'PORT') env[k] = v;
  }
  return { ...env, ...extra };
}

interface Run {
  code: number;
  out: string;
  err: string;
}

function run(cmd: string, args: string[], cwd: string, env: Record<string, string> = cleanEnv(), timeout = 240_000): Promise<Run> {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd, env, timeout, maxBuffer: 32 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
      resolve({ code, out: stdout, err: stderr });
    });
  });
}

async function ok(cmd: string, args: string[], cwd: string, env?: Record<string, string>): Promise<string> {
  const r = await run(cmd, args, cwd, env);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} (in ${cwd}) exited ${r.code}:\n${r.out}\n${r.err}`);
  return r.out;
}

function bytesUnder(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) total += bytesUnder(p);
    else if (entry.isFile()) total += statSync(p).size;
  }
  return total;
}

const kb = (n: number) => `${(n / 1024).toFixed(0)} kB`;

let work: string;
const tarballs: Partial<Record<'sdk' | 'mcp' | 'server', PackedTarball>> = {};
const sizes: string[] = [];
const packedFiles: Partial<Record<'sdk' | 'mcp' | 'server', string[]>> = {};

function packed(pkg: 'sdk' | 'mcp' | 'server'): PackedTarball {
  const t = tarballs[pkg];
  if (!t) throw new Error(`${pkg} was not packed`);
  return t;
}

/**
 * A fresh project with the tarballs (and `registryDeps`) installed offline;
 * `strict` adds the strictest tsconfig a consumer might use.
 */
async function project(name: string, install: PackedTarball[], strict: boolean, registryDeps: string[] = []): Promise<string> {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  writeConsumerProject(dir, ROOT, install, registryDeps);
  if (strict) {
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          // fetch, Response, AbortSignal: the DOM library, not @types/node (types: []).
          lib: ['ES2022', 'DOM'],
          types: [],
          strict: true,
          exactOptionalPropertyTypes: true,
          noUncheckedIndexedAccess: true,
          skipLibCheck: false,
          outDir: 'out',
        },
        include: ['program.ts'],
      }),
    );
  }
  await ok('npm', ['ci', '--offline', '--no-audit', '--no-fund', '--ignore-scripts'], dir);
  const installed = bytesUnder(join(dir, 'node_modules'));
  if (!strict) sizes.push(`${name}: installed ${kb(installed)} (${readdirSync(join(dir, 'node_modules')).join(', ')})`);
  return dir;
}

/** Type-checks program.ts under the strict tsconfig, then runs the emitted JavaScript. */
async function typeCheckAndRun(dir: string, program: string): Promise<string> {
  writeFileSync(join(dir, 'program.ts'), program);
  await ok(process.execPath, [TSC, '-p', 'tsconfig.json'], dir);
  return ok(process.execPath, ['out/program.js'], dir);
}

beforeAll(async () => {
  await ok(process.execPath, [join(ROOT, 'scripts/build.mjs'), '--if-stale'], ROOT);
  work = mkdtempSync(join(tmpdir(), 'baton-packages-'));
  for (const pkg of ['sdk', 'mcp', 'server'] as const) {
    const out = await ok('npm', ['pack', '--json', '--pack-destination', work], join(ROOT, 'dist/packages', pkg));
    const [info] = JSON.parse(out) as {
      filename: string;
      integrity: string;
      size: number;
      unpackedSize: number;
      files: { path: string }[];
    }[];
    packedFiles[pkg] = info!.files.map((f) => f.path);
    const manifest = JSON.parse(readFileSync(join(ROOT, 'dist/packages', pkg, 'package.json'), 'utf8')) as PackedTarball['manifest'];
    tarballs[pkg] = { filename: info!.filename, integrity: info!.integrity, manifest };
    sizes.push(`${info!.filename}: packed ${kb(info!.size)}, unpacked ${kb(info!.unpackedSize)}, ${info!.files.length} files`);
  }
}, 600_000);

afterAll(async () => {
  console.log(`[packaging] sizes\n  ${sizes.join('\n  ')}`);
  // Six installed projects: tens of thousands of files, slow to delete on a busy machine.
  if (work) await rm(work, { recursive: true, force: true });
}, 300_000);

const SDK_PROGRAM = `import { createInvocation, createRootDelegation, generateKeyPair, makeBundle, verifyChain } from '@baton-drs/sdk';

const operator = generateKeyPair();
const agent = generateKeyPair();
const root = createRootDelegation({ issuer: operator, audience: agent.did, policy: { allowed_tools: ['search'], max_calls: 5 } });
const args = { tool: 'search', query: 'weather', estimated_cost_usd: 0.01, pii_access: false, write_access: false };
const call = createInvocation({ chain: [root], invoker: agent, args, toolServer: 'mcp://search' });
const bundle = makeBundle(call, [root]);
const now = Math.floor(Date.now() / 1000);
const allowed = verifyChain(bundle, { now, trustedRoots: [operator.did] });
const untrusted = verifyChain(bundle, { now, trustedRoots: [agent.did] });
if (!allowed.valid || untrusted.valid) throw new Error('offline verification gave the wrong answer');
console.log(\`sdk ok: \${allowed.context.tool} allowed for \${allowed.context.invoker.slice(0, 16)}…, untrusted root denied with \${untrusted.error.code}\`);
`;

const MCP_PROGRAM = `import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { withBaton } from '@baton-drs/mcp';
import { BatonClient } from '@baton-drs/sdk';

const server = new McpServer({ name: 'search', version: '1.0.0' });
// A client from the SDK package is the middleware's client: one class, one copy.
const gated = withBaton(server, { baton: new BatonClient({ baseUrl: 'http://127.0.0.1:9', apiKey: 'verify-key' }), toolServer: 'mcp://search' });
console.log(\`mcp ok: \${gated === server ? 'wrapped in place' : 'wrapped'}\`);
`;

// The same in a CommonJS file of a TypeScript project (a .cts file, as in a project without
// "type": "module"): its McpServer and Client are the MCP SDK's CommonJS build, other classes than
// the ESM ones the middleware's types were written against. Both must type-check, and the gate must
// be installed: a call without a bundle is refused and the tool does not run. What the CommonJS
// Client throws is the CommonJS build's McpError, another class than the ESM one: refusalOf and
// explainRefusal read the refusal in it all the same (UNGATED_REQUEST, a protocol-error refusal).
const MCP_CJS_PROGRAM = `import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { callToolWithBundle, explainRefusal, invokeTool, refusalOf, withBaton } from '@baton-drs/mcp';
import { BatonClient } from '@baton-drs/sdk';

async function connected(server: McpServer): Promise<Client> {
  const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'agent', version: '1.0.0' });
  await client.connect(clientSide);
  return client;
}

/** What the promise rejected with; a fulfilled promise is a failure of this program. */
async function thrown(what: string, promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error(\`\${what} was served\`);
    },
    (e: unknown) => e,
  );
}

async function main(): Promise<void> {
  const baton = new BatonClient({ baseUrl: 'http://127.0.0.1:9', apiKey: 'verify-key' });
  const server = new McpServer({ name: 'search', version: '1.0.0' });
  withBaton(server, { baton, toolServer: 'mcp://search' });
  let ran = 0;
  server.registerTool('search', { description: 'search' }, async () => {
    ran++;
    return { content: [{ type: 'text', text: 'ran' }] };
  });
  const client = await connected(server);
  // The CommonJS Client is what the agent-side helpers take, too.
  const helpers: [typeof callToolWithBundle, typeof invokeTool] = [callToolWithBundle, invokeTool];
  const takesClient: Parameters<(typeof helpers)[1]>[0] = client;
  const result = await client.callTool({ name: 'search', arguments: { tool: 'search' } });
  const refusal = refusalOf(result);
  if (ran !== 0 || refusal?.code !== 'BUNDLE_MISSING' || takesClient !== client) throw new Error('the CommonJS server ran a call Baton never saw');
  console.log(\`mcp cjs ok: \${refusal.code}, the tool did not run\`);
  await client.close();

  // Refused with protocol errors: thrown to the agent as the CommonJS build's McpError.
  const strict = new McpServer({ name: 'files', version: '1.0.0' });
  withBaton(strict, { baton, toolServer: 'mcp://files', refuseAs: 'protocol-error' });
  strict.registerResource('secret', 'file:///secret', {}, async (uri) => {
    ran++;
    return { contents: [{ uri: uri.href, text: 'TOP SECRET' }] };
  });
  strict.registerPrompt('brief', { description: 'brief' }, () => {
    ran++;
    return { messages: [{ role: 'user', content: { type: 'text', text: 'brief' } }] };
  });
  strict.registerTool('write', { description: 'write' }, async () => {
    ran++;
    return { content: [{ type: 'text', text: 'written' }] };
  });
  const agent = await connected(strict);
  const resource = await thrown('resources/read', agent.readResource({ uri: 'file:///secret' }));
  const prompt = await thrown('prompts/get', agent.getPrompt({ name: 'brief' }));
  const call = await thrown('tools/call', agent.callTool({ name: 'write', arguments: { tool: 'write' } }));
  const codes = [resource, prompt, call].map((e) => refusalOf(e)?.code ?? \`none in \${String(e)}\`);
  if (ran !== 0 || codes.join(' ') !== 'UNGATED_REQUEST UNGATED_REQUEST BUNDLE_MISSING') {
    throw new Error(\`a CommonJS client's McpError was not read as Baton's refusal: \${codes.join(' ')}, ran \${ran}\`);
  }
  // Plain JavaScript may hand explainRefusal the error itself.
  const explained = explainRefusal(call as Parameters<typeof explainRefusal>[0]);
  if (!explained.startsWith('This call to "write" was refused: BUNDLE_MISSING.')) throw new Error(\`explainRefusal: \${explained}\`);
  console.log(\`mcp cjs errors ok: \${codes.join(' ')}, nothing ran\`);
  await agent.close();
}
// A rejection is unhandled, so Node exits 1 with it (the program has no Node types for process).
void main();
`;

const SERVER_PROGRAM = `import { ConfigError, createLogger, loadConfig, startServer, type RunningServer } from '@baton-drs/server';

// An embedder starts Baton from code: configuration from an environment of its own, a quiet logger.
try {
  loadConfig({ PORT: 'eighty' });
  throw new Error('a bad PORT was accepted');
} catch (e) {
  if (!(e instanceof ConfigError)) throw e;
}
const config = loadConfig({
  PORT: '0',
  HOST: '127.0.0.1',
  BATON_DATA_DIR: 'embedded-data', // in the project's folder, a fresh one per project
  BATON_MASTER_KEY: '11'.repeat(32),
  BATON_ADMIN_KEY: 'embedded-admin-key-0123456789abcdef',
});
const server: RunningServer = await startServer(config, createLogger('error'), () => {});
const ready = (await (await fetch(\`\${server.url}/readyz\`)).json()) as { status: string };
await server.close();
console.log(\`server ok: \${ready.status} on \${server.store.kind}\`);
`;

describe('packages', () => {
  it('each package carries the licence its manifest names', () => {
    const licence = readFileSync(join(ROOT, 'LICENSE'), 'utf8');
    expect(licence).toMatch(/Apache License\s+Version 2\.0/);
    for (const pkg of ['sdk', 'mcp', 'server'] as const) {
      expect(packed(pkg).manifest).toMatchObject({ license: 'Apache-2.0' });
      expect(packedFiles[pkg], pkg).toContain('LICENSE');
      expect(readFileSync(join(ROOT, 'dist/packages', pkg, 'LICENSE'), 'utf8')).toBe(licence);
    }
  });

  it('SDK: plain JS and strict TypeScript consumers sign and verify offline; noble libraries only, <= 2.25 MiB installed', async () => {
    const js = await project('sdk-js', [packed('sdk')], false);
    const deps = readdirSync(join(js, 'node_modules')).filter((d) => !d.startsWith('.'));
    expect(deps.sort()).toEqual(['@baton-drs', '@noble']);
    const installed = bytesUnder(join(js, 'node_modules'));
    expect(installed, `installed size ${kb(installed)}`).toBeLessThanOrEqual(MAX_SDK_INSTALLED_BYTES);
    writeFileSync(join(js, 'program.mjs'), SDK_PROGRAM);
    expect(await ok(process.execPath, ['program.mjs'], js)).toMatch(/^sdk ok: search allowed .* denied with UNTRUSTED_ROOT/);

    const strict = await project('sdk-ts', [packed('sdk')], true);
    expect(await typeCheckAndRun(strict, SDK_PROGRAM)).toMatch(/^sdk ok/);
  }, 600_000);

  it('MCP middleware: installs next to the tool server’s own MCP SDK (a peer) and wraps a server', async () => {
    const js = await project('mcp-js', [packed('sdk'), packed('mcp')], false, ['@modelcontextprotocol/sdk']);
    writeFileSync(join(js, 'program.mjs'), MCP_PROGRAM);
    expect(await ok(process.execPath, ['program.mjs'], js)).toMatch(/^mcp ok/);

    const strict = await project('mcp-ts', [packed('sdk'), packed('mcp')], true, ['@modelcontextprotocol/sdk']);
    expect(await typeCheckAndRun(strict, MCP_PROGRAM)).toMatch(/^mcp ok/);

    // A CommonJS file of the same project, under the same strict options.
    writeFileSync(join(strict, 'program.cts'), MCP_CJS_PROGRAM);
    writeFileSync(join(strict, 'tsconfig.cjs.json'), JSON.stringify({ extends: './tsconfig.json', include: ['program.cts'] }));
    await ok(process.execPath, [TSC, '-p', 'tsconfig.cjs.json'], strict);
    const cjs = await ok(process.execPath, ['out/program.cjs'], strict);
    expect(cjs).toMatch(/^mcp cjs ok: BUNDLE_MISSING, the tool did not run$/m);
    expect(cjs).toMatch(/^mcp cjs errors ok: UNGATED_REQUEST UNGATED_REQUEST BUNDLE_MISSING, nothing ran$/m);

    // TypeScript's node10 resolution (the default with module commonjs) reads no `exports`: the
    // middleware's types must still reach the SDK's (typesVersions), not turn into `any`, where the
    // expected error below would be missing (TS2578) or the imports unresolved (TS2307).
    writeFileSync(
      join(strict, 'program-node10.ts'),
      [
        "import type { InvokeToolInput } from '@baton-drs/mcp';",
        '// @ts-expect-error an invoker is a key pair: an error only while the types resolve',
        "export const wrong: InvokeToolInput['invoker'] = 'not a key pair';",
        '',
      ].join('\n'),
    );
    writeFileSync(
      join(strict, 'tsconfig.node10.json'),
      JSON.stringify({
        extends: './tsconfig.json',
        compilerOptions: { module: 'CommonJS', moduleResolution: 'Node10', esModuleInterop: true, noEmit: true },
        include: ['program-node10.ts'],
      }),
    );
    await ok(process.execPath, [TSC, '-p', 'tsconfig.node10.json'], strict);
  }, 600_000);

  it('server: the baton CLI runs; the service serves on PGlite and on PostgreSQL, and refuses an unguarded driver', async () => {
    const js = await project('server-js', [packed('server')], false);
    const baton = join(js, 'node_modules/.bin/baton');
    const version = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    expect((await ok(baton, ['--version'], js)).trim()).toContain(version.version);

    const env = cleanEnv({
      BATON_MASTER_KEY: randomBytes(32).toString('hex'),
      BATON_ADMIN_KEY: `pkg-admin-${randomBytes(16).toString('hex')}`,
    });
    const serve = (args: string[]) => serveUntilReady(baton, ['serve', '--port', '0', '--host', '127.0.0.1', ...args], js, env);
    expect(await serve(['--data-dir', join(js, 'data')])).toEqual({ ready: true, database: 'pglite' });

    const db = await createDatabase();
    try {
      expect(await serve(['--database-url', db.url])).toEqual({ ready: true, database: 'postgres' });
      // Take the guard out of the installed copy: the service must refuse, not run unguarded.
      const index = join(js, 'node_modules/@baton-drs/server/vendor/postgres/src/index.js');
      const text = readFileSync(index, 'utf8');
      const unguarded = text.replace(/^export \{ batonClosedSocketGuard \}.*$/m, '');
      expect(unguarded).not.toBe(text);
      writeFileSync(index, unguarded);
      const refused = await run(baton, ['serve', '--port', '0', '--host', '127.0.0.1', '--database-url', db.url], js, env, 60_000);
      expect(refused.code).not.toBe(0);
      expect(refused.err).toMatch(/refuses to use PostgreSQL: the postgres.js driver it loaded lacks the closed-socket guard/);
    } finally {
      await db.drop();
    }

    const strict = await project('server-ts', [packed('server')], true);
    expect(await typeCheckAndRun(strict, SERVER_PROGRAM)).toMatch(/^server ok: ready on pglite/);
  }, 600_000);
});

/** Starts `baton serve`, waits for its listening line, asks /readyz, then stops it with SIGTERM (exit 0 expected). */
async function serveUntilReady(
  bin: string,
  args: string[],
  cwd: string,
  env: Record<string, string>,
): Promise<{ ready: boolean; database: string }> {
  const child = spawn(bin, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    const { url, database } = await waitForListeningLine(child, 60_000);
    const body = (await (await fetch(`${url}/readyz`)).json()) as { status: string };
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    return { ready: body.status === 'ready', database };
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
}

describe('Dockerfile', () => {
  // Docker cannot run on the build machines; this keeps the image consistent with the build.
  it('runs the built server package with plain Node on a current LTS base', () => {
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    const base = /^ARG NODE_IMAGE=node:(\d+)-/m.exec(dockerfile);
    expect(Number(base?.[1]), 'Node 20 reached end of life in April 2026').toBeGreaterThanOrEqual(22);
    const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
    expect(runtime).not.toMatch(/tsx/);
    expect(runtime).toMatch(/^COPY --from=build \/app\/dist\/packages\/server \.\/$/m);
    expect(runtime).toMatch(/^WORKDIR \/app$/m);
    const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(runtime)?.[1] ?? '[]') as string[];
    expect(cmd[0]).toBe('node');
    // The file the image starts is a file the build puts in the server package.
    expect(statSync(join(ROOT, 'dist/packages/server', cmd[1]!)).isFile()).toBe(true);
    const manifest = JSON.parse(readFileSync(join(ROOT, 'dist/packages/server/package.json'), 'utf8')) as { files: string[] };
    expect(manifest.files).toContain(cmd[1]!.split('/')[0]);
  });
});
