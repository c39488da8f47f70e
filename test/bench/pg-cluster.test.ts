import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { settingOption } from '../../bench/lib/pg-cluster.js';

/** The arguments a shell makes of `text` on a command line, as pg_ctl's -o string reaches postgres. */
const shellWords = (text: string): string[] =>
  execFileSync('sh', ['-c', `printf '%s\\0' ${text}`])
    .toString()
    .split('\0')
    .slice(0, -1);

describe('settingOption (a --pg setting on the postgres command line)', () => {
  it.each(['fsync=off', 'log_line_prefix=%m [%p] ', "log_line_prefix=it's %m", 'search_path="$user", public'])(
    'stays one argument through the shell: %s',
    (setting) => {
      expect(shellWords(settingOption(setting))).toEqual(['-c', setting]);
    },
  );

  it('is needed: unquoted, a value with spaces splits', () => {
    expect(shellWords('-c log_line_prefix=%m [%p] ')).not.toEqual(['-c', 'log_line_prefix=%m [%p] ']);
  });
});
