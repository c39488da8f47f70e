/**
 * The image's build stage copies every path the build reads. Docker cannot run on the build
 * machines, so this reads the Dockerfile: `scripts/build.mjs` came to read LICENSE after the
 * Dockerfile was last changed, and `docker build` failed while every test passed (an outside probe).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The sources of the build stage's COPY lines that copy from the context (not `--from`), as written. */
function buildStageCopies(dockerfile: string): string[] {
  const stages = dockerfile.split(/^FROM /m);
  const build = stages.find((s) => /^\S+ AS build$/m.test(s.split('\n')[0]!));
  if (build === undefined) throw new Error('the Dockerfile has no stage named build');
  return build
    .split('\n')
    .filter((line) => /^COPY /.test(line) && !/--from=/.test(line))
    .flatMap((line) => line.trim().split(/\s+/).slice(1, -1))
    .map((source) => source.replace(/^\.\//, '').replace(/\/$/, ''));
}

describe('Dockerfile build stage', () => {
  it('copies every path the build reads (scripts/build-inputs.mjs), and the build scripts themselves', async () => {
    const { BUILD_INPUTS } = (await import(pathToFileURL(join(ROOT, 'scripts/build-inputs.mjs')).href)) as { BUILD_INPUTS: string[] };
    const copied = buildStageCopies(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
    expect(BUILD_INPUTS).toContain('LICENSE');
    const missing = BUILD_INPUTS.filter((input) => !copied.some((c) => input === c || input.startsWith(`${c}/`)));
    expect(missing, `copied: ${copied.join(' ')}`).toEqual([]);
  });

  it('reads the COPY lines of the build stage only', () => {
    const copies = buildStageCopies(
      ['FROM node AS build', 'COPY a.json b ./', 'COPY --from=x /y ./', 'COPY src ./src', 'FROM node AS run', 'COPY other ./'].join('\n'),
    );
    expect(copies).toEqual(['a.json', 'b', 'src']);
  });
});
