/**
 * While the database is down every request fails alike: the log tells the first failure of each
 * second with its cause and counts the rest in one line, so an outage at a few thousand requests a
 * second neither fills the disk nor buries the rest of the log. Other server errors are each logged.
 */
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { BatonError, ERROR_TABLE } from '../../src/protocol/errors.js';
import { handleError, shownToCaller, STORAGE_LOG_INTERVAL_MS } from '../../src/service/http.js';
import type { Logger } from '../../src/service/log.js';
import type { AppEnv } from '../../src/service/types.js';

function appLogging(): { app: Hono<AppEnv>; lines: { msg: string; fields: Record<string, unknown> }[] } {
  const lines: { msg: string; fields: Record<string, unknown> }[] = [];
  const capture = (msg: string, fields: Record<string, unknown> = {}) => void lines.push({ msg, fields });
  const log: Logger = { debug: () => {}, info: capture, warn: capture, error: capture };
  const app = new Hono<AppEnv>();
  app.use(async (c, next) => {
    c.set('requestId', randomUUID());
    await next();
  });
  // A connection refused (SQLSTATE class 08), as postgres.js reports a database that went away.
  app.get('/down', () => {
    throw Object.assign(new Error('connection refused'), { code: '08006' });
  });
  app.get('/bug', () => {
    throw new TypeError('a bug');
  });
  app.get('/documented', () => {
    throw shownToCaller(
      new BatonError('INTERNAL', { message: 'Entries of tile/entries/000 cannot be served.', details: { missing_indexes: [3] } }),
    );
  });
  app.get('/sealed', () => {
    throw new BatonError('INTERNAL', {
      message: 'A secret stored by Baton (custodial:ten_x) cannot be opened: BATON_MASTER_KEY does not match.',
      suggestion: 'Start Baton with the same BATON_MASTER_KEY as the nodes that sealed it.',
      details: { context: 'custodial:ten_x', reason: 'authentication failed' },
    });
  });
  app.onError((err, c) => handleError(err, c, log));
  return { app, lines };
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function requestIdsOf(app: Hono<AppEnv>, path: string, times: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < times; i++) {
    const res = await app.request(path);
    const body = (await res.json()) as { request_id: string; error: { code: string } };
    expect([res.status, body.error.code]).toEqual(path === '/down' ? [503, 'STORAGE_UNAVAILABLE'] : [500, 'INTERNAL']);
    ids.push(body.request_id);
  }
  return ids;
}

describe('storage errors in the log', () => {
  it('the first of a burst is logged with its cause, the others counted in one line after the interval', async () => {
    const { app, lines } = appLogging();
    const ids = await requestIdsOf(app, '/down', 12);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ msg: 'storage unavailable', fields: { request_id: ids[0], error: 'Error: connection refused' } });

    await pause(STORAGE_LOG_INTERVAL_MS + 200);
    expect(lines).toHaveLength(2);
    expect(lines[1]?.msg).toMatch(/^storage unavailable: 11 more request\(s\) answered 503/);
    expect(lines[1]?.fields).toEqual({ requests: 11, request_ids: ids.slice(1, 6), sqlstates: { '08006': 11 } });

    // A new interval: the next failure is logged with its cause again, and a lone one has no summary.
    const [next] = await requestIdsOf(app, '/down', 1);
    await pause(STORAGE_LOG_INTERVAL_MS + 200);
    expect(lines.slice(2)).toEqual([{ msg: 'storage unavailable', fields: expect.objectContaining({ request_id: next }) }]);
  });

  it('every other server error is logged, each with its request id', async () => {
    const { app, lines } = appLogging();
    const ids = await requestIdsOf(app, '/bug', 5);
    expect(lines.map((l) => [l.msg, l.fields.request_id])).toEqual(ids.map((id) => ['unhandled error', id]));
  });

  it("an internal error's own text (the operator's: keys, backups) goes to the log, the caller gets the general one", async () => {
    const { app, lines } = appLogging();
    const res = await app.request('/sealed');
    const body = (await res.json()) as { request_id: string; error: Record<string, unknown> };
    expect(res.status).toBe(500);
    expect(body.error).toEqual({ code: 'INTERNAL', message: ERROR_TABLE.INTERNAL.message, suggestion: ERROR_TABLE.INTERNAL.suggestion });
    expect(JSON.stringify(body)).not.toMatch(/MASTER_KEY|custodial|authentication/);
    expect(lines).toHaveLength(1);
    // One its route documents for callers (a log entry bundle naming the entries still there) keeps them.
    const documented = (await (await app.request('/documented')).json()) as { error: Record<string, unknown> };
    expect(documented.error).toMatchObject({ message: 'Entries of tile/entries/000 cannot be served.', details: { missing_indexes: [3] } });
    expect(lines[0]?.fields).toMatchObject({
      request_id: body.request_id,
      error: expect.stringMatching(/BATON_MASTER_KEY does not match/),
      suggestion: expect.stringMatching(/same BATON_MASTER_KEY/),
      details: { context: 'custodial:ten_x', reason: 'authentication failed' },
    });
  });
});
