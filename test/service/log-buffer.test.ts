/**
 * The default logger writes standard output once per turn of the event loop,
 * never once per line: a request's log lines must not each block the service
 * on a write to a pipe or file. Lines logged just before exit still get out.
 */
import { execFileSync } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../src/service/log.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

afterEach(() => {
  vi.restoreAllMocks();
});

describe('default logger output', () => {
  it('gathers the lines of one turn into one write, after the turn', async () => {
    const writes: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      writes.push(String(chunk));
      return true;
    });
    const log = createLogger('info');
    for (let i = 0; i < 50; i++) log.info('verify decision', { n: i });
    expect(writes).toHaveLength(0);
    await new Promise((r) => setImmediate(r));
    expect(writes).toHaveLength(1);
    const lines = writes[0]!.trimEnd().split('\n');
    expect(lines.map((l) => (JSON.parse(l) as { n: number }).n)).toEqual(Array.from({ length: 50 }, (_, i) => i));
  });

  it('writes what is pending when the process exits right after logging', () => {
    const script = `import { createLogger } from './src/service/log.ts';
      const log = createLogger('info');
      log.info('first');
      log.warn('last words');
      process.exit(0);`;
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' });
    expect(
      out
        .trimEnd()
        .split('\n')
        .map((l) => (JSON.parse(l) as { msg: string }).msg),
    ).toEqual(['first', 'last words']);
  });
});
