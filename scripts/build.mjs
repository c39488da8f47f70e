// Builds what ships: src/ compiled by tsc (tsconfig.build.json) into
// dist/tsc, then one folder per package under dist/packages, each with its own
// package.json, README and exactly the compiled files its entry points reach.
//
//   node scripts/build.mjs             build
//   node scripts/build.mjs --if-stale  build only when an input changed (npm start)
//
// The file set of each package is the import graph of its entries (static
// imports, re-exports and literal dynamic imports, in both the .js and the
// .d.ts files, since type-only imports survive only in declarations), so it
// stays right as code moves. Every bare import a package reaches must be one
// of its declared dependencies, peers or vendored copies, else the build
// fails: the SDK cannot grow a heavy dependency by accident.
import { execFileSync } from 'node:child_process';
import { builtinModules } from 'node:module';
import { cpSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, posix, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { patchPostgresDriver } from './postgres-guard.mjs';

import { builtPackagesAreCurrent, inputsFingerprint, PACKAGES_DIR, ROOT, STAMP, walkFiles } from './build-inputs.mjs';

const COMPILED = join(ROOT, 'dist', 'tsc');
// Loaded only when building: `--if-stale` on current output must cost milliseconds (npm start).
let ts;
let esbuild;
export const SCOPE = '@baton-drs';

const rootPkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));

/** The version range the repository itself uses for an external package. */
function rangeOf(name) {
  const range = rootPkg.dependencies?.[name] ?? rootPkg.devDependencies?.[name];
  if (!range) throw new Error(`build: ${name} is not a dependency of the repository`);
  return range;
}

/**
 * Packages by role, in dependency order. `uses`: earlier packages whose files
 * this one imports from the installed package instead of carrying copies (one
 * BatonClient class for SDK and MCP users). `vendor`: packages copied into
 * the package instead of depended on (zod keeps the SDK's dependencies to the
 * noble libraries; postgres.js ships with Baton's guard applied).
 */
export const PACKAGES = [
  {
    dir: 'sdk',
    name: `${SCOPE}/sdk`,
    description: 'Baton SDK: did:key keys, DRS 4.0 delegation records and bundles, offline verification, service receipts, HTTP client.',
    entries: { '.': 'sdk/index' },
    allowed: ['@noble/ed25519', '@noble/hashes'],
    vendor: { zod: { from: 'node_modules/zod', js: 'index.js', dts: 'index.d.ts', namespace: 'z' } },
    // Sibling packages import these internals at the exact same version.
    internalExports: true,
  },
  {
    dir: 'mcp',
    name: `${SCOPE}/mcp`,
    description: 'Baton middleware for MCP tool servers and agents: withBaton, batonCall, invokeTool.',
    entries: { '.': existsSync(join(ROOT, 'src/mcp/index.ts')) ? 'mcp/index' : 'mcp/middleware' },
    uses: ['sdk'],
    peers: ['@modelcontextprotocol/sdk'],
  },
  {
    dir: 'server',
    name: `${SCOPE}/server`,
    description: 'Baton service and the baton CLI: verifies DRS delegation chains fail-closed with atomic call counting.',
    entries: { '.': 'server' },
    // The log integrator's thread entry is started by URL, not imported: the import graph cannot see it.
    extraEntries: ['main', 'service/log-integrator-worker'],
    // The bin runs cli/, a bundle of src/cli (bundleCli); lib/ keeps what the CLI shares with the service.
    cli: { entry: 'cli/main', inside: ['cli/', 'protocol/', 'sdk/', 'version'], share: ['protocol/errors'] },
    allowed: Object.keys(rootPkg.dependencies ?? {}),
    vendor: {
      postgres: {
        from: 'node_modules/postgres',
        js: 'src/index.js',
        dts: 'types/index.d.ts',
        copy: ['package.json', 'src', 'types'],
        patch: patchPostgresDriver,
      },
    },
    // drizzle-orm/postgres-js imports the driver itself (it never opens
    // Baton's connections, which come from the guarded copy).
    alsoDepend: ['postgres'],
    bin: { baton: 'bin/baton.js' },
    assets: ['migrations', 'openapi.yaml'],
  },
];

// ---------------------------------------------------------------- import graph

const BUILTINS = new Set(builtinModules);

/** The package an external specifier names: `a/b/c` → a, `@s/a/b` → @s/a. */
function packageOf(specifier) {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

function isBuiltin(specifier) {
  return specifier.startsWith('node:') || BUILTINS.has(specifier.split('/')[0]);
}

/**
 * Import specifiers of a JS or declaration file, with the positions of their
 * text (inside the quotes): import/export ... from, `export * as ns from`,
 * literal dynamic import() and import("...") types. A parse, not a scan, so
 * every form is seen (ts.preProcessFile misses `export * as ns from`).
 */
function importsOf(text, fileName = 'module.ts') {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true);
  const found = [];
  const literal = (node) => {
    if (node && ts.isStringLiteral(node)) found.push({ fileName: node.text, pos: node.getStart(source) + 1, end: node.getEnd() - 1 });
  };
  const visit = (node) => {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) literal(node.moduleSpecifier);
    else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) literal(node.arguments[0]);
    else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) literal(node.argument.literal);
    else if (ts.isExternalModuleReference(node)) literal(node.expression);
    ts.forEachChild(node, visit);
  };
  visit(source);
  for (const ref of source.referencedFiles)
    throw new Error(`build: /// <reference path="${ref.fileName}"> in ${fileName} is not supported`);
  return found;
}

/** Module key (path without .js / .d.ts) → its files present in `base`. */
function moduleFiles(base, key, extensions = ['.js', '.d.ts']) {
  return extensions.map((ext) => `${key}${ext}`).filter((f) => existsSync(join(base, f)));
}

/**
 * Every module reachable from `keys` in `base` through relative imports.
 * `visit(file, specifier, resolvedKey | undefined)` sees every import; return
 * false to stop the walk there (a module owned by another package).
 */
function reach(base, keys, visit, extensions) {
  const seen = new Set();
  const stack = [...keys];
  while (stack.length > 0) {
    const key = stack.pop();
    if (seen.has(key)) continue;
    const files = moduleFiles(base, key, extensions);
    if (files.length === 0) throw new Error(`build: ${key} not found in ${relative(ROOT, base)}`);
    seen.add(key);
    for (const file of files) {
      for (const imp of importsOf(readFileSync(join(base, file), 'utf8'), file)) {
        if (imp.fileName.startsWith('.')) {
          const target = posix.normalize(posix.join(posix.dirname(file), imp.fileName)).replace(/(\.d\.ts|\.js)$/, '');
          if (visit(file, imp.fileName, target) !== false) stack.push(target);
        } else {
          visit(file, imp.fileName, undefined);
        }
      }
    }
  }
  return seen;
}

// ---------------------------------------------------------------- assembling

function relativeSpecifier(fromFile, toFile) {
  const r = posix.relative(posix.dirname(fromFile), toFile);
  return r.startsWith('.') ? r : `./${r}`;
}

/** Writes `text` with the import literals at `edits` ({ pos, end, to }) replaced. */
function applyEdits(text, edits) {
  let out = text;
  for (const e of [...edits].sort((a, b) => b.pos - a.pos)) out = out.slice(0, e.pos) + e.to + out.slice(e.end);
  return out;
}

/**
 * A module exporting `namespace` (`z`) as only the members of library `name`
 * that `files` use (`z.object`, `z.string`, …), for esbuild to bundle: zod's
 * full namespace would bring every locale, ~1 MB and ~100 modules to load.
 */
function subsetModule(name, namespace, files, license) {
  const members = new Set();
  const usage = new RegExp(`\\b${namespace}\\.([A-Za-z_$][\\w$]*)`, 'g');
  for (const file of files) for (const m of readFileSync(file, 'utf8').matchAll(usage)) members.add(m[1]);
  const picks = [...members].sort();
  const version = JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')).version;
  return {
    contents: `import * as all from '${name}';\nexport const ${namespace} = Object.freeze({\n${picks.map((m) => `  ${m}: all.${m},`).join('\n')}\n});\n`,
    note: `${name} ${version} (MIT, see ${license}): only ${namespace}.{${picks.join(', ')}}, bundled by scripts/build.mjs.`,
  };
}

/** The runtime of a vendored library as one bundle of the members the package's files use (subsetModule). */
function bundleVendorRuntime(pkgDir, name, spec, target) {
  const users = [];
  for (const file of walkFiles(join(pkgDir, 'lib')).filter((f) => f.endsWith('.js'))) {
    const text = readFileSync(file, 'utf8');
    if (!text.includes(`/vendor/${name}/`)) continue;
    if (!new RegExp(`import \\{ ${spec.namespace} \\} from '[./]+vendor/${name}/`).test(text)) {
      throw new Error(`build: ${relative(ROOT, file)} must import the vendored ${name} as { ${spec.namespace} }`);
    }
    users.push(file);
  }
  const subset = subsetModule(name, spec.namespace, users, 'LICENSE');
  const result = esbuild.buildSync({
    stdin: { contents: subset.contents, resolveDir: ROOT, loader: 'js' },
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    write: false,
    legalComments: 'inline',
  });
  mkdirSync(target, { recursive: true });
  writeFileSync(join(target, spec.js), `// ${subset.note}\n${result.outputFiles[0].text}`);
}

function copyVendor(pkgDir, name, spec) {
  const source = join(ROOT, spec.from);
  const target = join(pkgDir, 'vendor', name);
  if (spec.namespace) {
    bundleVendorRuntime(pkgDir, name, spec, target);
    const keys = reach(
      source,
      [spec.dts.replace(/\.d\.ts$/, '')],
      (file, specifier) => {
        if (!specifier.startsWith('.') && !isBuiltin(specifier)) {
          throw new Error(`build: vendored ${name} imports ${specifier} (${file}); vendor it too or depend on it`);
        }
      },
      ['.d.ts'],
    );
    for (const key of keys) for (const f of moduleFiles(source, key, ['.d.ts'])) cpSync(join(source, f), join(target, f));
  } else {
    for (const part of spec.copy) cpSync(join(source, part), join(target, part), { recursive: true });
  }
  for (const license of ['LICENSE', 'LICENSE.md']) {
    if (existsSync(join(source, license))) cpSync(join(source, license), join(target, license));
  }
  if (spec.patch) {
    const problems = spec.patch(target);
    if (problems.length > 0) throw new Error(`build: cannot patch vendored ${name}:\n  ${problems.join('\n  ')}`);
  }
}

/**
 * The `baton` command as an esbuild bundle in cli/, split per command (a
 * command's chunks load when it runs), holding only the zod members its
 * records use: an offline command loads a few files instead of ~100 modules
 * of zod and Baton (issue 12: offline commands start in <= 0.3 s). What the
 * CLI shares with the service is imported from lib/, not copied: the service
 * itself (`serve` runs it, with the one zod @hono/zod-openapi extends) and
 * the `share` modules whose classes cross between them (the CLI's
 * `instanceof BatonError` must match the service's errors).
 * `depend(specifier, importer)` checks a bare import like lib's.
 */
async function bundleCli(pkg, pkgDir, libKeys, depend) {
  const { entry, inside, share } = pkg.cli;
  const out = join(pkgDir, 'cli');
  const bundles = (key) => inside.some((prefix) => key.startsWith(prefix)) && !share.includes(key);
  const held = reach(COMPILED, [entry], (_file, _specifier, key) => (key === undefined ? undefined : bundles(key)), ['.js']);
  const zodUsers = [...held].map((k) => join(COMPILED, `${k}.js`)).filter((f) => readFileSync(f, 'utf8').includes("from 'zod'"));
  const zod = subsetModule('zod', 'z', zodUsers, 'LICENSE.zod');
  // Async: esbuild runs plugins only there.
  await esbuild.build({
    entryPoints: [join(COMPILED, `${entry}.js`)],
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    outdir: out,
    legalComments: 'inline',
    plugins: [
      {
        name: 'baton-cli',
        setup(b) {
          b.onResolve({ filter: /.*/ }, (args) => {
            // Imports inside zod resolve as usual: bundled.
            if (args.kind === 'entry-point' || !args.importer.startsWith(COMPILED)) return undefined;
            if (args.path === 'zod') return { path: 'zod', namespace: 'zod-subset' };
            if (!args.path.startsWith('.')) {
              depend(args.path, relative(COMPILED, args.importer));
              return { external: true };
            }
            const key = relative(COMPILED, resolve(args.resolveDir, args.path)).replace(/\.js$/, '');
            if (bundles(key)) return undefined;
            if (!libKeys.has(key)) throw new Error(`build: the CLI imports ${key}, which lib/ of ${pkg.name} lacks`);
            return { path: `../lib/${key}.js`, external: true };
          });
          // A legal comment: esbuild keeps it, so the chunk holding zod names it (test/cli/startup.test.ts looks for it).
          b.onLoad({ filter: /.*/, namespace: 'zod-subset' }, () => ({
            contents: `//! ${zod.note}\n${zod.contents}`,
            resolveDir: ROOT,
            loader: 'js',
          }));
        },
      },
    ],
  });
  cpSync(join(ROOT, 'node_modules/zod/LICENSE'), join(out, 'LICENSE.zod'));
}

const README = {
  sdk: (p) => `# ${p.name}

Baton SDK: make did:key Ed25519 keys, sign DRS 4.0 delegation records,
sub-delegations and invocations, build bundles, verify them offline (the
service's own pipeline), verify the service's signed service receipts, and call a
Baton service over HTTP (\`BatonClient\`).

    npm install ${p.name}

\`\`\`js
import { generateKeyPair, createRootDelegation } from '${p.name}';
\`\`\`

Its only dependencies are the noble cryptography libraries. It carries a copy
of zod (MIT, vendor/zod) for validating records.

The package is ESM only. CommonJS code can \`require()\` it on Node 20.19+
(require of ESM), or load it with \`await import('${p.name}')\`, which
TypeScript compiled to CommonJS with \`module: node16\` needs.
`,
  mcp: (p) => `# ${p.name}

Baton middleware for Model Context Protocol tool servers (\`withBaton\`,
\`batonCall\`) and agents (\`invokeTool\`, \`callToolWithBundle\`).

    npm install ${p.name} @modelcontextprotocol/sdk

\`@modelcontextprotocol/sdk\` is a peer dependency: the middleware uses the
tool server's own copy. The package is ESM only, like ${SCOPE}/sdk: from
CommonJS use Node 20.19+ (require of ESM) or \`await import('${p.name}')\`.
`,
  server: (p) => `# ${p.name}

The Baton service and the \`baton\` command line.

    npm install ${p.name}
    npx baton serve            # embedded PGlite in ./.baton/data
    npx baton --help

On PostgreSQL (\`DATABASE_URL\`) set \`BATON_MASTER_KEY\`. The package ships a
copy of the postgres.js driver (vendor/postgres, Unlicense) with Baton's
closed-socket guard applied; the service refuses PostgreSQL without it.
The \`baton\` command runs from cli/, a bundle carrying the parts of zod it
uses (MIT, cli/LICENSE.zod).

## Configuration

The service reads its settings from environment variables (\`PORT\`, \`HOST\`,
\`DATABASE_URL\`, \`BATON_MASTER_KEY\`, ...). \`npx baton serve --help\` lists
every variable it reads, with what it does and its default; an invalid value
stops the start with a message naming the variable.
`,
};

async function assemble(pkg, built, outDir) {
  const pkgDir = join(outDir, pkg.dir);
  const used = (pkg.uses ?? []).map((d) => built.get(d));
  const owner = (key) => used.find((u) => u.keys.has(key));
  const reached = new Set();
  const edits = new Map(); // package-relative file → edits
  // A file that imports one module twice (a type import and a value import) is visited once per
  // import, and each visit finds both literals: keep one edit per position.
  const addEdit = (file, edit) => {
    const list = edits.get(file) ?? [];
    if (!list.some((e) => e.pos === edit.pos)) edits.set(file, [...list, edit]);
  };
  const lib = (f) => `lib/${f}`;
  const entryKeys = [...Object.values(pkg.entries), ...(pkg.extraEntries ?? [])];

  const depend = (specifier, file) => {
    if (isBuiltin(specifier)) return;
    const name = packageOf(specifier);
    if (!(pkg.allowed ?? []).includes(name) && !(pkg.peers ?? []).includes(name)) {
      throw new Error(`build: ${pkg.name} may not depend on ${name} (imported by src/${file.replace(/\.(d\.ts|js)$/, '.ts')})`);
    }
    reached.add(name);
  };

  const keys = reach(COMPILED, entryKeys, (file, specifier, target) => {
    const imports = importsOf(readFileSync(join(COMPILED, file), 'utf8'), file).filter((i) => i.fileName === specifier);
    if (target !== undefined) {
      const from = owner(target);
      if (!from) return true;
      for (const i of imports) addEdit(lib(file), { pos: i.pos, end: i.end, to: `${from.name}/internal/${target}.js` });
      return false;
    }
    if (isBuiltin(specifier)) return;
    const name = packageOf(specifier);
    const vendored = pkg.vendor?.[name];
    if (vendored) {
      if (specifier !== name) throw new Error(`build: ${pkg.name} imports ${specifier}; only the vendored ${name} entry is available`);
      const to = `vendor/${name}/${file.endsWith('.d.ts') ? vendored.dts.replace(/\.d\.ts$/, '.js') : vendored.js}`;
      for (const i of imports) addEdit(lib(file), { pos: i.pos, end: i.end, to: relativeSpecifier(lib(file), to) });
      return;
    }
    depend(specifier, file);
  });

  for (const key of keys) {
    for (const f of moduleFiles(COMPILED, key)) {
      const target = join(pkgDir, lib(f));
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(target, applyEdits(readFileSync(join(COMPILED, f), 'utf8'), edits.get(lib(f)) ?? []));
    }
  }
  for (const [name, spec] of Object.entries(pkg.vendor ?? {})) copyVendor(pkgDir, name, spec);
  if (pkg.cli) await bundleCli(pkg, pkgDir, keys, depend);
  for (const asset of pkg.assets ?? []) cpSync(join(ROOT, asset), join(pkgDir, asset), { recursive: true });
  if (pkg.bin) {
    mkdirSync(join(pkgDir, 'bin'), { recursive: true });
    writeFileSync(
      join(pkgDir, pkg.bin.baton),
      "#!/usr/bin/env node\nimport { main } from '../cli/main.js';\n\nprocess.exitCode = await main(process.argv.slice(2));\n",
      { mode: 0o755 },
    );
  }

  const exportsField = {};
  for (const [path, key] of Object.entries(pkg.entries)) exportsField[path] = { types: `./lib/${key}.d.ts`, default: `./lib/${key}.js` };
  if (pkg.internalExports) exportsField['./internal/*.js'] = { types: './lib/*.d.ts', default: './lib/*.js' };
  exportsField['./package.json'] = './package.json';
  const dependencies = {};
  for (const d of used) dependencies[d.name] = rootPkg.version;
  for (const name of [...reached, ...(pkg.alsoDepend ?? [])].sort()) {
    if (!(pkg.peers ?? []).includes(name)) dependencies[name] = rangeOf(name);
  }
  const manifest = {
    name: pkg.name,
    version: rootPkg.version,
    description: pkg.description,
    type: 'module',
    license: rootPkg.license,
    engines: rootPkg.engines,
    exports: exportsField,
    types: exportsField['.'].types,
    // TypeScript's node10 resolution (the default with module commonjs) reads no `exports`: the MCP
    // middleware's declarations import the SDK's internal/ paths, whose types became `any` there
    // (an outside probe). typesVersions maps each to its .d.ts for it (a .js target would be read as
    // an untyped module); node16, nodenext and bundler use exports.
    ...(pkg.internalExports ? { typesVersions: { '*': { 'internal/*.js': ['lib/*.d.ts'] } } } : {}),
    ...(pkg.bin ? { bin: pkg.bin } : {}),
    files: ['lib', 'cli', 'vendor', 'bin', ...(pkg.assets ?? [])].filter((f) => existsSync(join(pkgDir, f))),
    sideEffects: false,
    ...(Object.keys(dependencies).length > 0 ? { dependencies } : {}),
    ...(pkg.peers ? { peerDependencies: Object.fromEntries(pkg.peers.map((p) => [p, rangeOf(p)])) } : {}),
  };
  writeFileSync(join(pkgDir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  writeFileSync(join(pkgDir, 'README.md'), README[pkg.dir](pkg));
  // The licence the manifest names, in each package (npm packs a LICENSE file whatever `files` says).
  cpSync(join(ROOT, 'LICENSE'), join(pkgDir, 'LICENSE'));
  return { name: pkg.name, keys, dir: pkgDir };
}

/** Compiles and assembles every package into `outDir` (replaced). */
export async function build(outDir) {
  ts = (await import('typescript')).default;
  esbuild = await import('esbuild');
  progress('compiling src/ with tsc (the longest step)');
  execFileSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(ROOT, 'tsconfig.build.json')], {
    stdio: 'inherit',
  });
  rmSync(outDir, { recursive: true, force: true });
  const built = new Map();
  for (const pkg of PACKAGES) {
    progress(`assembling ${pkg.name}`);
    built.set(pkg.dir, await assemble(pkg, built, outDir));
  }
}

/** One line per step on stderr: a first build takes 20-50 s on a busy 2-core machine, and silence reads as a hang. */
function progress(step) {
  process.stderr.write(`[baton] ${step}...\n`);
}

/**
 * One build at a time (the test runner starts `npm start` and the packaging
 * test in parallel): a lock folder holding the builder's pid; a lock whose
 * process is gone is taken over.
 */
async function withBuildLock(work) {
  const lock = join(ROOT, 'dist', '.build-lock');
  mkdirSync(dirname(lock), { recursive: true });
  let told = false;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(join(lock, 'pid'), String(process.pid));
      break;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
      let holder = NaN;
      try {
        holder = Number(readFileSync(join(lock, 'pid'), 'utf8'));
      } catch {
        // Just created, pid not written yet.
      }
      if (Number.isInteger(holder) && holder > 0 && !isAlive(holder)) rmSync(lock, { recursive: true, force: true });
      else {
        if (!told) progress(`waiting for another build (process ${holder}) to finish`);
        told = true;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }
  try {
    return await work();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}

const main = fileURLToPath(import.meta.url) === resolve(process.argv[1] ?? '');
if (main) {
  const ifStale = process.argv.includes('--if-stale');
  if (ifStale && builtPackagesAreCurrent()) process.exit(0);
  await withBuildLock(async () => {
    // Another build may have finished while this one waited.
    if (ifStale && builtPackagesAreCurrent()) return;
    const fingerprint = inputsFingerprint();
    const started = performance.now();
    progress(`building ${PACKAGES.map((p) => p.name).join(', ')} into dist/packages (src/ changed, or the first run; 20-50 s)`);
    // Built aside and swapped in, so a failed build never leaves half a package set to run.
    const staging = `${PACKAGES_DIR}.new`;
    await build(staging);
    writeFileSync(join(staging, relative(PACKAGES_DIR, STAMP)), fingerprint);
    rmSync(PACKAGES_DIR, { recursive: true, force: true });
    renameSync(staging, PACKAGES_DIR);
    process.stderr.write(
      `[baton] built ${PACKAGES.map((p) => p.name).join(', ')} in dist/packages (${Math.round(performance.now() - started)} ms)\n`,
    );
  });
}
