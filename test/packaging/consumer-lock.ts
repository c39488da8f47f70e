/**
 * A consumer project that installs packed tarballs OFFLINE. `npm install
 * --offline <name>` needs the registry's full metadata documents, which `npm
 * ci` never caches; `npm ci --offline` with a lockfile needs only the
 * tarballs, which it does cache. So the consumer gets a lockfile: the
 * tarballs, plus every package they need at the exact version and integrity
 * the repository's own package-lock.json pins (the versions the tests ran).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

interface LockEntry {
  version?: string;
  resolved?: string;
  integrity?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  dev?: boolean;
  devOptional?: boolean;
  peer?: boolean;
  optional?: boolean;
  [key: string]: unknown;
}

export interface PackedTarball {
  /** The tarball's file name, in the folder above the consumer project. */
  readonly filename: string;
  readonly integrity: string;
  /** The package.json inside the tarball. */
  readonly manifest: {
    name: string;
    version: string;
    bin?: Record<string, string>;
    dependencies?: Record<string, string>;
    peerDependencies?: Record<string, string>;
  };
}

/** Writes package.json and package-lock.json for `dir`: `tarballs` plus `registryDeps` (names the repository locks). */
export function writeConsumerProject(
  dir: string,
  repoRoot: string,
  tarballs: readonly PackedTarball[],
  registryDeps: readonly string[] = [],
): void {
  const repoLock = JSON.parse(readFileSync(join(repoRoot, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };
  const packages: Record<string, LockEntry> = {};
  const direct: Record<string, string> = {};

  /** Node's lookup in the repository's tree: nested under `from` first, then each folder up. */
  const locate = (from: string, name: string): string | undefined => {
    for (let base = from; ; base = base.slice(0, Math.max(0, base.lastIndexOf('/node_modules/')))) {
      const path = `${base ? `${base}/` : ''}node_modules/${name}`;
      if (repoLock.packages[path]) return path;
      if (!base) return undefined;
    }
  };
  const visit = (from: string, name: string, optional: boolean) => {
    if (tarballs.some((t) => t.manifest.name === name)) return;
    const path = locate(from, name);
    if (path === undefined) {
      // Optional dependencies for other platforms are not in the tree.
      if (optional) return;
      throw new Error(`package-lock.json has no ${name} reachable from ${from || 'the root'}`);
    }
    if (packages[path]) return;
    const { dev: _dev, devOptional: _devOptional, peer: _peer, ...entry } = repoLock.packages[path]!;
    // The repository's lock may omit registry addresses (npm's omit-lockfile-registry-resolved).
    // Without one, an offline install asks for the package's registry metadata, which a fresh
    // cache filled by `npm ci` may lack; with one, the tarball comes from the cache by integrity.
    packages[path] = entry.resolved === undefined ? { ...entry, resolved: registryTarball(path, entry) } : entry;
    for (const dep of Object.keys(entry.dependencies ?? {})) visit(path, dep, false);
    for (const dep of Object.keys(entry.optionalDependencies ?? {})) visit(path, dep, true);
    for (const dep of Object.keys(entry.peerDependencies ?? {})) visit(path, dep, entry.peerDependenciesMeta?.[dep]?.optional === true);
  };

  for (const t of tarballs) {
    const spec = `file:../${t.filename}`;
    direct[t.manifest.name] = spec;
    packages[`node_modules/${t.manifest.name}`] = {
      version: t.manifest.version,
      resolved: spec,
      integrity: t.integrity,
      // npm ci links bins from the lockfile's entry, not from the tarball.
      ...(t.manifest.bin ? { bin: t.manifest.bin } : {}),
      ...(t.manifest.dependencies ? { dependencies: t.manifest.dependencies } : {}),
      ...(t.manifest.peerDependencies ? { peerDependencies: t.manifest.peerDependencies } : {}),
    };
  }
  for (const t of tarballs) for (const dep of Object.keys(t.manifest.dependencies ?? {})) visit('', dep, false);
  for (const dep of registryDeps) {
    const path = locate('', dep);
    if (path === undefined) throw new Error(`package-lock.json has no ${dep}`);
    direct[dep] = repoLock.packages[path]!.version!;
    visit('', dep, false);
  }
  const name = dir.split('/').pop()!;
  const manifest = { name, private: true, type: 'module', dependencies: direct };
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  const lock = { name, lockfileVersion: 3, requires: true, packages: { '': { name, dependencies: direct }, ...packages } };
  writeFileSync(join(dir, 'package-lock.json'), `${JSON.stringify(lock, null, 2)}\n`);
}

/** The default registry's address of a locked package's tarball. */
function registryTarball(path: string, entry: LockEntry): string {
  const name = path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length);
  const base = name.startsWith('@') ? name.slice(name.indexOf('/') + 1) : name;
  return `https://registry.npmjs.org/${name}/-/${base}-${entry.version}.tgz`;
}
