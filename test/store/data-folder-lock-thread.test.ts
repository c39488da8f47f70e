/**
 * The data folder lock's heartbeat thread failing: a thread that cannot start gives the lock back,
 * and one that dies while the lock is held is a lost lock (another start could take the folder
 * over a lease later). Real threads cannot be made to fail on cue, so `node:worker_threads` is
 * replaced here by one whose Worker fails as each test says, or is the real one.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type * as WorkerThreads from 'node:worker_threads';
import { describe, expect, it, vi } from 'vitest';
import { scratchFolders } from '../support/scratch.js';

const thread = vi.hoisted(() => ({ fails: 'no' as 'no' | 'at-start' | 'later' | 'later-after-release' }));

vi.mock('node:worker_threads', async (importActual) => {
  const actual = await importActual<typeof WorkerThreads>();
  const { EventEmitter } = await import('node:events');
  class FailingWorker extends EventEmitter {
    constructor(...args: ConstructorParameters<typeof actual.Worker>) {
      super();
      if (thread.fails === 'no') return new actual.Worker(...args) as unknown as FailingWorker;
      if (thread.fails === 'at-start') throw new Error('no thread could be started');
      const delay = thread.fails === 'later' ? 0 : 200;
      setTimeout(() => {
        this.emit('error', new Error('the thread crashed'));
        this.emit('exit', 1);
      }, delay);
    }
    unref() {}
    terminate() {
      return Promise.resolve(0);
    }
  }
  return { ...actual, Worker: FailingWorker };
});

const { DATA_FOLDER_LOCK, lockDataFolder } = await import('../../src/store/data-folder-lock.js');

const folder = scratchFolders('baton-lock-thread-');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the data folder lock when its heartbeat thread fails', () => {
  it('gives the lock back when the thread cannot start, so the next start takes it', async () => {
    const dir = folder();
    thread.fails = 'at-start';
    expect(() => lockDataFolder(dir)).toThrow(/no thread could be started/);
    expect(existsSync(join(dir, DATA_FOLDER_LOCK))).toBe(false);
    thread.fails = 'no';
    const release = lockDataFolder(dir);
    try {
      expect(statSync(join(dir, DATA_FOLDER_LOCK)).isFile()).toBe(true);
    } finally {
      release();
    }
  });

  it('treats a thread that dies while the lock is held as a lost lock, told once', async () => {
    const dir = folder();
    thread.fails = 'later';
    const lost: string[] = [];
    const release = lockDataFolder(dir, { onLost: (m) => lost.push(m) });
    await sleep(100);
    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatch(/heartbeat thread ended \(the thread crashed\).*this process must stop/);
    release();
    expect(existsSync(join(dir, DATA_FOLDER_LOCK))).toBe(false);
  });

  it('says nothing of a thread that ends after the lock was released', async () => {
    const dir = folder();
    thread.fails = 'later-after-release';
    const lost: string[] = [];
    const release = lockDataFolder(dir, { onLost: (m) => lost.push(m) });
    release();
    await sleep(400);
    expect(lost).toEqual([]);
  });
});
