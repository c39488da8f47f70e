// Configuration: unsafe combinations refuse to start and name what to set.
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ConfigError, decodeMasterKey, loadConfig, raisedSettings, unreadSettings } from '../src/config.js';

const MASTER = randomBytes(32).toString('hex');

describe('loadConfig', () => {
  it('refuses PostgreSQL without BATON_MASTER_KEY, saying what to set and how to make one', () => {
    let error: unknown;
    try {
      loadConfig({ DATABASE_URL: 'postgres://db.internal/baton' });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const message = (error as Error).message;
    expect(message).toMatch(/BATON_MASTER_KEY: is required with DATABASE_URL/);
    expect(message).toContain("randomBytes(32).toString('hex')");
    expect(message).toContain('same value on every node');
  });

  it('accepts PostgreSQL with a master key, and the embedded default without one (a dev key is generated)', () => {
    expect(loadConfig({ DATABASE_URL: 'postgres://db.internal/baton', BATON_MASTER_KEY: MASTER }).databaseUrl).toBe(
      'postgres://db.internal/baton',
    );
    expect(loadConfig({}).databaseUrl).toBeUndefined();
    expect(loadConfig({}).masterKey).toBeUndefined();
  });

  it('refuses a DATABASE_URL set but empty (a missing secret), rather than run on the embedded database', () => {
    for (const empty of ['', ' ']) {
      expect(() => loadConfig({ DATABASE_URL: empty }), JSON.stringify(empty)).toThrow(/DATABASE_URL/);
    }
    expect(() => loadConfig({ DATABASE_URL: '' })).toThrow(/set but empty: give a postgres:\/\/ URL, or unset it/);
  });

  it('reads a master key as 64 hex digits or canonical base64 of 32 bytes, nothing looser, and never the all-zero key', () => {
    const key = randomBytes(32);
    for (const written of [
      key.toString('hex'),
      key.toString('hex').toUpperCase(),
      key.toString('base64'),
      key.toString('base64url'),
      ` ${key.toString('base64')}\n`,
    ]) {
      expect(Buffer.from(decodeMasterKey(written)!).equals(key), written).toBe(true);
    }
    const b64 = key.toString('base64url');
    // The last of 43 characters carries two unused bits, zero when written canonically (its index a
    // multiple of 4): the next character in the alphabet sets one, and Buffer reads the same key.
    const sloppy = b64.slice(0, 42) + String.fromCharCode(b64.charCodeAt(42) + 1);
    expect(Buffer.from(sloppy, 'base64url').equals(key)).toBe(true);
    const refused = [
      `$$ ${b64} $$`, // characters outside the alphabet, which Buffer's reader skips
      `${b64.slice(0, 20)} ${b64.slice(20)}`,
      b64.slice(0, 42),
      `${b64}==`,
      `${b64}A`,
      'A'.repeat(43),
      '0'.repeat(64),
      `${b64.slice(0, 10)}+${b64.slice(11, 20)}_${b64.slice(21)}`, // both alphabets at once
      sloppy,
      '',
    ];
    for (const written of refused) expect(decodeMasterKey(written), JSON.stringify(written)).toBeNull();
    expect(() => loadConfig({ DATABASE_URL: 'postgres://x/y', BATON_MASTER_KEY: 'A'.repeat(43) })).toThrow(
      /BATON_MASTER_KEY must be 32 random bytes/,
    );
  });

  it('lists every problem at once', () => {
    expect(() => loadConfig({ DATABASE_URL: 'postgres://x/y', PORT: '70000' })).toThrow(
      /PORT must be a whole number[\s\S]*BATON_MASTER_KEY/,
    );
  });

  it('takes a folder or memory:// as BATON_DATA_DIR, and refuses any other URL (file:// would skip the folder lock and checks)', () => {
    expect(loadConfig({ BATON_DATA_DIR: '/var/lib/baton' }).dataDir).toBe('/var/lib/baton');
    expect(loadConfig({ BATON_DATA_DIR: 'memory://' }).dataDir).toBe('memory://');
    for (const url of ['file:///var/lib/baton', 'idb://baton', 'opfs-ahp://baton']) {
      expect(() => loadConfig({ BATON_DATA_DIR: url }), url).toThrow(ConfigError);
      expect(() => loadConfig({ BATON_DATA_DIR: url }), url).toThrow(/BATON_DATA_DIR must be a folder path/);
    }
  });

  it('takes BATON_LOG_LEVEL in any case, and refuses another value naming it', () => {
    expect(loadConfig({ BATON_LOG_LEVEL: 'INFO' }).logLevel).toBe('info');
    expect(loadConfig({}).logLevel).toBe('info');
    expect(() => loadConfig({ BATON_LOG_LEVEL: 'verbose' })).toThrow(
      /- BATON_LOG_LEVEL must be one of debug, info, warn, error, silent, got "verbose"/,
    );
    // The variable is named once: its own message begins with it.
    expect(() => loadConfig({ BATON_LOG_LEVEL: 'verbose' })).not.toThrow(/BATON_LOG_LEVEL: BATON_LOG_LEVEL/);
  });

  it('an invalid BATON_MASTER_KEY is refused with how to make one', () => {
    expect(() => loadConfig({ BATON_MASTER_KEY: 'deadbeef' })).toThrow(/must be 32 random bytes[\s\S]*randomBytes\(32\)/);
  });

  it('refuses several workers on the embedded database at start, as a configuration error naming what to set', () => {
    expect(() => loadConfig({ BATON_WORKERS: '2' })).toThrow(ConfigError);
    expect(() => loadConfig({ BATON_WORKERS: '2' })).toThrow(/BATON_WORKERS: more than 1 needs DATABASE_URL[\s\S]*--database-url/);
    expect(loadConfig({ BATON_WORKERS: '1' }).workers).toBe(1);
    expect(loadConfig({ BATON_WORKERS: '2', DATABASE_URL: 'postgres://x/y', BATON_MASTER_KEY: MASTER }).workers).toBe(2);
  });

  it('tells one problem once: a BATON_WORKERS it refuses is not also "more than 1 without DATABASE_URL"', () => {
    let message = '';
    try {
      loadConfig({ BATON_WORKERS: '2.0' });
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/- BATON_WORKERS must be a whole number from 1 to 256, got "2.0"/);
    expect(message).not.toMatch(/needs DATABASE_URL/);
    expect(() => loadConfig({ BATON_WORKERS: '300' })).toThrow(/^(?![\s\S]*needs DATABASE_URL)[\s\S]*from 1 to 256, got "300"/);
  });

  it('refuses a DATABASE_URL the PostgreSQL client could not read, saying to percent-encode (not only "URI malformed" at start)', () => {
    for (const url of ['postgres://baton:50%off@db.internal/baton', 'postgres://ba%ton@db.internal/baton', 'postgres://u@db%zz/baton']) {
      expect(() => loadConfig({ DATABASE_URL: url, BATON_MASTER_KEY: MASTER }), url).toThrow(/DATABASE_URL is not a URL[\s\S]*% as %25/);
    }
    for (const url of [
      'postgres://baton:50%25off@db.internal/baton',
      'postgres://db1,db2:5433/baton',
      'postgresql://[::1]:5432/baton?sslmode=require',
    ]) {
      expect(loadConfig({ DATABASE_URL: url, BATON_MASTER_KEY: MASTER }).databaseUrl, url).toBe(url);
    }
  });

  it('refuses an admin key or metrics token no Authorization header can carry (it would revoke the generated admin key and log in nowhere)', () => {
    const good = 'abcdefghijklmnopqrstuvwx-0123';
    expect(loadConfig({ BATON_ADMIN_KEY: good }).adminKey).toBe(good);
    for (const bad of ['my admin key with spaces 12345', `${good}\r`, `${good} `, `clé-${good}`, 'x'.repeat(513), 'short']) {
      expect(() => loadConfig({ BATON_ADMIN_KEY: bad }), JSON.stringify(bad)).toThrow(ConfigError);
      expect(() => loadConfig({ BATON_ADMIN_KEY: bad }), JSON.stringify(bad)).toThrow(
        /BATON_ADMIN_KEY must be 24 to 512 printable ASCII characters without spaces/,
      );
      expect(() => loadConfig({ BATON_METRICS_TOKEN: bad }), JSON.stringify(bad)).toThrow(/BATON_METRICS_TOKEN must be 24 to 512/);
    }
    expect(loadConfig({ BATON_ADMIN_KEY: 'x'.repeat(512) }).adminKey).toHaveLength(512);
  });

  it('gives writes their own deadline, never shorter than the verify deadline', () => {
    expect(loadConfig({}).writeDeadlineMs).toBe(30_000);
    expect(loadConfig({ BATON_WRITE_DEADLINE_MS: '8000' }).writeDeadlineMs).toBe(8_000);
    // A write waiting less than a verify would cut the verify's own answer short.
    expect(loadConfig({ BATON_VERIFY_DEADLINE_MS: '9000', BATON_WRITE_DEADLINE_MS: '2000' }).writeDeadlineMs).toBe(9_000);
    expect(() => loadConfig({ BATON_WRITE_DEADLINE_MS: '10' })).toThrow(/BATON_WRITE_DEADLINE_MS/);
  });
});

describe('raisedSettings', () => {
  it('says when a write deadline below the verify deadline is served as the verify deadline, and only then', () => {
    expect(raisedSettings({ BATON_WRITE_DEADLINE_MS: '1000' })).toEqual([
      'BATON_WRITE_DEADLINE_MS (1000) is below BATON_VERIFY_DEADLINE_MS (5000): writes wait up to 5000 ms, as a write is never given less time than a verify',
    ]);
    expect(loadConfig({ BATON_WRITE_DEADLINE_MS: '1000', BATON_MASTER_KEY: MASTER }).writeDeadlineMs).toBe(5000);
    expect(raisedSettings({ BATON_WRITE_DEADLINE_MS: '1000', BATON_VERIFY_DEADLINE_MS: '800' })).toEqual([]);
    expect(raisedSettings({})).toEqual([]); // the defaults are in order
    expect(raisedSettings({ BATON_WRITE_DEADLINE_MS: 'soon' })).toEqual([]); // refused by loadConfig, said there
  });
});

describe('unreadSettings', () => {
  it('names each BATON_ variable no setting reads, with the setting it may misspell', () => {
    expect(
      unreadSettings({
        BATON_WORKER: '4',
        BATON_DB_POOLSIZE: '3',
        BATON_FROBNICATE: '1',
        BATON_WORKERS: '2',
        BATON_API_KEY: 'bt_read_by_the_cli',
        PATH: '/usr/bin',
      }),
    ).toEqual([
      "BATON_DB_POOLSIZE is set but is no setting of Baton's: it is ignored (did you mean BATON_DB_POOL?)",
      "BATON_FROBNICATE is set but is no setting of Baton's: it is ignored",
      "BATON_WORKER is set but is no setting of Baton's: it is ignored (did you mean BATON_WORKERS?)",
    ]);
    // Every setting the service reads, and what the CLI and the tools read, pass in silence.
    expect(unreadSettings({ BATON_URL: 'x', BATON_CONTEXT: 'x', BATON_DEBUG: '1', BATON_DATA_DIR: 'x', BATON_TLOG_NAME: 'x' })).toEqual([]);
  });

  it('says nothing of a Kubernetes Service named baton, and names DATABASE_URL for BATON_DATABASE_URL', () => {
    const kubernetes = {
      BATON_SERVICE_HOST: '10.0.0.7',
      BATON_SERVICE_PORT: '8080',
      BATON_SERVICE_PORT_HTTP: '8080',
      BATON_PORT: 'tcp://10.0.0.7:8080',
      BATON_PORT_8080_TCP: 'tcp://10.0.0.7:8080',
      BATON_PORT_8080_TCP_PROTO: 'tcp',
      BATON_PORT_8080_TCP_PORT: '8080',
      BATON_PORT_8080_TCP_ADDR: '10.0.0.7',
    };
    expect(unreadSettings(kubernetes)).toEqual([]);
    // And for any Service whose name starts with baton (baton-db; a Helm release baton-baton).
    const others = {
      BATON_DB_SERVICE_HOST: '10.0.0.2',
      BATON_DB_SERVICE_PORT: '5432',
      BATON_DB_PORT: 'tcp://10.0.0.2:5432',
      BATON_DB_PORT_5432_TCP_ADDR: '10.0.0.2',
      BATON_BATON_SERVICE_PORT_HTTP: '8080',
    };
    expect(unreadSettings(others)).toEqual([]);
    expect(unreadSettings({ BATON_DATABASE_URL: 'postgres://db/baton', BATON_PORT: '9000' })).toEqual([
      "BATON_DATABASE_URL is set but is no setting of Baton's: it is ignored (did you mean DATABASE_URL?)",
      "BATON_PORT is set but is no setting of Baton's: it is ignored (did you mean PORT?)",
    ]);
  });

  it('names a misspelled setting where a refused configuration stops the start', () => {
    let message = '';
    try {
      loadConfig({ DATABASE_URL: 'postgres://db.internal/baton', BATON_MASTERKEY: MASTER });
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/BATON_MASTER_KEY: is required with DATABASE_URL/);
    expect(message).toContain(
      "Not read (a misspelling?):\n  - BATON_MASTERKEY is set but is no setting of Baton's: it is ignored (did you mean BATON_MASTER_KEY?)",
    );
  });
});
