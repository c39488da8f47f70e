/** The running Baton's version, from its package.json (read once). */
import { readFileSync } from 'node:fs';

let cached: { version: string } | undefined;

export function batonVersionInfo(): { version: string } {
  if (cached === undefined) {
    // src/version.ts → ../package.json: the package root in a checkout and in the image.
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version?: unknown };
    cached = { version: typeof pkg.version === 'string' ? pkg.version : 'unknown' };
  }
  return cached;
}
