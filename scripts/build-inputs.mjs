// Whether dist/packages is current: a fingerprint of every build input
// (names, sizes, modification times), so edits, additions and deletions all
// count. Kept apart from build.mjs so checking costs a few stat calls, not
// loading the TypeScript compiler (bin/baton.mjs checks on every run).
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const PACKAGES_DIR = join(ROOT, 'dist', 'packages');
export const STAMP = join(PACKAGES_DIR, '.inputs');

const INPUT_FOLDERS = ['src', 'migrations'];
const INPUT_FILES = [
  'LICENSE',
  'openapi.yaml',
  'package.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'scripts/build.mjs',
  'scripts/build-inputs.mjs',
  'scripts/postgres-guard.mjs',
];

/** Every path the build reads from the repository (folders and files): the image's build stage copies each (Dockerfile). */
export const BUILD_INPUTS = [...INPUT_FOLDERS, ...INPUT_FILES];

export function walkFiles(dir, out = []) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) walkFiles(p, out);
    else out.push(p);
  }
  return out;
}

export function inputsFingerprint() {
  const files = [...INPUT_FOLDERS.flatMap((d) => walkFiles(join(ROOT, d), [])), ...INPUT_FILES.map((f) => join(ROOT, f))];
  const hash = createHash('sha256');
  for (const f of files.sort()) {
    const s = statSync(f);
    hash.update(`${relative(ROOT, f)}\0${s.size}\0${s.mtimeMs}\n`);
  }
  return hash.digest('hex');
}

export function builtPackagesAreCurrent() {
  return existsSync(STAMP) && readFileSync(STAMP, 'utf8') === inputsFingerprint();
}
