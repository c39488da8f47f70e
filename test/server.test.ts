/**
 * src/server.ts: the embedded database's data folder is its owner's alone. PGlite writes its files
 * world-writable (postgresql.conf and the catalogs among them), so the folder's own mode is what
 * keeps other local users out.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/service/log.js';
import { dataFolderRefusal, keepKeyFileOnce, resolveMasterKey, restrictDataFolder, startServer } from '../src/server.js';
import { DATABASE_MARKER_FILE } from '../src/store/db.js';
import { scratchFolders } from './support/scratch.js';

const scratch = scratchFolders('baton-server-');
const modeOf = (path: string) => (statSync(path).mode & 0o777).toString(8);

/** A logger that keeps what it logs, as the JSON lines the service writes. */
function recordingLogger() {
  const lines: Record<string, unknown>[] = [];
  return { log: createLogger('info', (line) => lines.push(JSON.parse(line) as Record<string, unknown>)), lines };
}

describe('restrictDataFolder', () => {
  it('creates a missing folder (and its parents) for its owner only', () => {
    const dir = join(scratch(), '.baton', 'data');
    const { log, lines } = recordingLogger();
    restrictDataFolder(dir, log);
    expect(modeOf(dir)).toBe('700');
    expect(lines).toEqual([]);
  });

  it("restricts an existing folder of Baton's open to others, and says so; leaves a private one as it is", () => {
    const dir = join(scratch(), 'data');
    mkdirSync(dir);
    chmodSync(dir, 0o757);
    const { log, lines } = recordingLogger();
    restrictDataFolder(dir, log);
    expect(modeOf(dir)).toBe('700');
    expect(lines).toMatchObject([{ level: 'warn', data_dir: dir, mode: '757', mode_now: '700' }]);
    restrictDataFolder(dir, log);
    expect(lines).toHaveLength(1);
    // Holding the embedded database, with a set-group-id bit (a volume's group): the bit stays.
    writeFileSync(join(dir, 'PG_VERSION'), '16\n');
    chmodSync(dir, 0o2775);
    restrictDataFolder(dir, log);
    expect((statSync(dir).mode & 0o7777).toString(8)).toBe('2700');
  });

  it("leaves a folder that holds others' files as it is (a mistaken BATON_DATA_DIR such as /tmp), and says so", () => {
    const dir = join(scratch(), 'shared');
    mkdirSync(dir);
    writeFileSync(join(dir, 'notes.txt'), 'not Baton');
    chmodSync(dir, 0o1777);
    const { log, lines } = recordingLogger();
    restrictDataFolder(dir, log);
    expect((statSync(dir).mode & 0o7777).toString(8)).toBe('1777');
    expect(lines).toMatchObject([{ level: 'warn', data_dir: dir, mode: '1777' }]);
    expect(String(lines[0]!['msg'])).toMatch(/leaves it as it is because it holds files that are not Baton's/);
  });

  it.skipIf(process.getuid?.() !== 0)(
    "leaves a folder another user owns as it is (a volume's owner), and starts (skipped unless root)",
    () => {
      const dir = join(scratch(), 'volume');
      mkdirSync(dir);
      chmodSync(dir, 0o775);
      chownSync(dir, 65534, 65534);
      const { log, lines } = recordingLogger();
      restrictDataFolder(dir, log);
      expect(modeOf(dir)).toBe('775');
      expect(String(lines[0]!['msg'])).toMatch(/because another user owns it/);
    },
  );

  it('a start on the embedded database leaves its folder private, though PGlite writes its files open to all', async () => {
    const dir = join(scratch(), 'data');
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    const { log } = recordingLogger();
    const server = await startServer(
      loadConfig({ PORT: '0', BATON_DATA_DIR: dir, BATON_ADMIN_KEY: `folder-admin-${randomBytes(16).toString('hex')}` }),
      log,
      () => {},
    );
    try {
      expect(modeOf(dir)).toBe('700');
      // What the folder guards: PGlite's own configuration, writable by anyone who can reach it.
      expect(statSync(join(dir, 'postgresql.conf')).isFile()).toBe(true);
    } finally {
      await server.close();
    }
  }, 60_000);
});

describe('dataFolderRefusal', () => {
  const errno = (code: string, path: string) => Object.assign(new Error(`${code}: permission denied, open '${path}'`), { code, path });

  it('says what to do when the data folder cannot be written (the errno alone named only the file)', () => {
    for (const code of ['EACCES', 'EPERM', 'EROFS']) {
      const said = dataFolderRefusal(errno(code, '/srv/baton/data/baton.pid.tmp'), '/srv/baton/data') as Error;
      expect(said.message).toMatch(/^Baton cannot write its data folder \/srv\/baton\/data \(/);
      expect(said.message).toContain(code);
      expect(said.message).toMatch(/chown or chmod the folder.*BATON_DATA_DIR \(baton serve --data-dir\)/);
    }
  });

  it('leaves any other error as it is', () => {
    const other = errno('ENOSPC', '/srv/baton/data/x');
    expect(dataFolderRefusal(other, '/srv/baton/data')).toBe(other);
    expect(dataFolderRefusal('text', '/d')).toBe('text');
  });
});

describe('resolveMasterKey', () => {
  it('keeps the development key of a memory:// database in memory: no file, no folder named "memory:"', () => {
    const cwd = process.cwd();
    const here = scratch();
    process.chdir(here);
    try {
      const { log, lines } = recordingLogger();
      const config = loadConfig({ BATON_DATA_DIR: 'memory://' });
      const key = resolveMasterKey(config, log);
      expect(key).toHaveLength(32);
      expect(existsSync(join(here, 'memory:'))).toBe(false);
      expect(lines.map((l) => l['msg'])).toEqual([expect.stringMatching(/held in memory only/)]);
      // Another start keeps nothing either: a new key.
      expect(Buffer.from(resolveMasterKey(config, log)).equals(Buffer.from(key))).toBe(false);
    } finally {
      process.chdir(cwd);
    }
  });
  it('never generates a key into a folder holding a database the missing one sealed', () => {
    const dataDir = scratch();
    const { log } = recordingLogger();
    const config = loadConfig({ BATON_DATA_DIR: dataDir });
    const first = resolveMasterKey(config, log); // a new folder: a development key is generated
    writeFileSync(join(dataDir, DATABASE_MARKER_FILE), 'x'); // as a start writes once its database is made
    expect(Buffer.from(resolveMasterKey(config, log)).equals(Buffer.from(first))).toBe(true);
    rmSync(join(dataDir, 'master.key'));
    expect(() => resolveMasterKey(config, log)).toThrow(/master\.key is missing[\s\S]*restore master\.key from a backup/);
    expect(existsSync(join(dataDir, 'master.key'))).toBe(false);
  });

  it("two first starts on one folder keep one key: the second reads the first one's, never writes over it", () => {
    const dataDir = scratch();
    const file = join(dataDir, 'master.key');
    const first = randomBytes(32);
    const second = randomBytes(32);
    // The first start's key lands between the second's check for the file and its write.
    expect(keepKeyFileOnce(file, first)).toBe(first);
    expect(Buffer.from(keepKeyFileOnce(file, second)).equals(first)).toBe(true);
    expect(readFileSync(file, 'utf8')).toBe(`${first.toString('hex')}\n`);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    // No temporary file is left beside it.
    expect(readdirSync(dataDir)).toEqual(['master.key']);
  });

  it('on a file system without hard links, the key file is created exclusively instead, and still kept once', () => {
    const dataDir = scratch();
    const file = join(dataDir, 'master.key');
    const noLinks = () => {
      throw Object.assign(new Error('operation not permitted'), { code: 'EPERM' });
    };
    const first = randomBytes(32);
    expect(keepKeyFileOnce(file, first, noLinks)).toBe(first);
    expect(Buffer.from(keepKeyFileOnce(file, randomBytes(32), noLinks)).equals(first)).toBe(true);
    expect(readFileSync(file, 'utf8')).toBe(`${first.toString('hex')}\n`);
    expect(readdirSync(dataDir)).toEqual(['master.key']);
    // A file another start has not finished writing is never read as a key: 43 of its hex digits
    // would decode as base64 to 32 bytes of another key. Read again, then refused, never misread.
    const partial = join(dataDir, 'partial.key');
    writeFileSync(partial, first.toString('hex').slice(0, 43));
    expect(() => keepKeyFileOnce(partial, randomBytes(32), noLinks)).toThrow(/does not hold a 32-byte key/);
    rmSync(partial);
    // Another failure of the link is no such file system: it is said, not worked around.
    const full = () => {
      throw Object.assign(new Error('no space left'), { code: 'ENOSPC' });
    };
    expect(() => keepKeyFileOnce(join(dataDir, 'other.key'), randomBytes(32), full)).toThrow(/no space left/);
    expect(readdirSync(dataDir)).toEqual(['master.key']);
  });

  it('nor into a folder an older build migrated before it wrote the marker', () => {
    const dataDir = scratch();
    const { log } = recordingLogger();
    // What such a folder holds: a cluster with a table of its own (an object id past PostgreSQL's first 16384).
    mkdirSync(join(dataDir, 'base', '5'), { recursive: true });
    writeFileSync(join(dataDir, 'PG_VERSION'), '17\n');
    writeFileSync(join(dataDir, 'base', '5', '16384'), '');
    expect(() => resolveMasterKey(loadConfig({ BATON_DATA_DIR: dataDir }), log)).toThrow(/master\.key is missing/);
    expect(existsSync(join(dataDir, 'master.key'))).toBe(false);
  });
});
