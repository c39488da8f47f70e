// Configuration: unsafe combinations refuse to start and name what to set.
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';

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
    expect(loadConfig({ DATABASE_URL: '' }).masterKey).toBeUndefined();
  });

  it('lists every problem at once', () => {
    expect(() => loadConfig({ DATABASE_URL: 'postgres://x/y', PORT: '70000' })).toThrow(
      /PORT must be a whole number[\s\S]*BATON_MASTER_KEY/,
    );
  });

  it('refuses several workers on the embedded database at start, as a configuration error naming what to set', () => {
    expect(() => loadConfig({ BATON_WORKERS: '2' })).toThrow(ConfigError);
    expect(() => loadConfig({ BATON_WORKERS: '2' })).toThrow(/BATON_WORKERS: more than 1 needs DATABASE_URL[\s\S]*--database-url/);
    expect(loadConfig({ BATON_WORKERS: '1' }).workers).toBe(1);
    expect(loadConfig({ BATON_WORKERS: '2', DATABASE_URL: 'postgres://x/y', BATON_MASTER_KEY: MASTER }).workers).toBe(2);
  });

  it('gives writes their own deadline, never shorter than the verify deadline', () => {
    expect(loadConfig({}).writeDeadlineMs).toBe(30_000);
    expect(loadConfig({ BATON_WRITE_DEADLINE_MS: '8000' }).writeDeadlineMs).toBe(8_000);
    // A write waiting less than a verify would cut the verify's own answer short.
    expect(loadConfig({ BATON_VERIFY_DEADLINE_MS: '9000', BATON_WRITE_DEADLINE_MS: '2000' }).writeDeadlineMs).toBe(9_000);
    expect(() => loadConfig({ BATON_WRITE_DEADLINE_MS: '10' })).toThrow(/BATON_WRITE_DEADLINE_MS/);
  });
});
