/**
 * BatonTools' paged lists (approvals, grants) follow next_cursor to the last page, and stop with
 * an error when the server hands back a cursor it already gave: client-side loop logic, so a fake
 * fetch plays the server.
 */
import { describe, expect, it } from 'vitest';
import { BatonApiError, BatonClient } from '../../src/sdk/client.js';

/** An item of the list `field` as the service answers it, named `id`. */
function listItem(field: string, id: string): Record<string, unknown> {
  if (field === 'grants') return { dr_hash: id, status: 'pending', explanation: 'trifecta', catalog_version: 1, decision: null };
  if (field === 'invocations') return { jti: id, decision: 'allowed', created_at: '2026-11-29T00:00:00.000000Z', dr_chain: [] };
  return { id, status: 'pending', tool_server: 'mcp://search', invocation_jti: `inv:${id}`, dr_chain: [], expires_at: 0, decision: null };
}

/** A server whose answer to each cursor (the first page: '') is `pages[cursor]`; it records the cursors asked. */
function pagedServer(field: string, pages: Record<string, { items: string[]; next: string | null }>) {
  const asked: string[] = [];
  const fetch = (input: string | URL | Request): Promise<Response> => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const cursor = url.searchParams.get('cursor') ?? '';
    asked.push(cursor);
    // A client that keeps paging in a circle is stopped here, so the test fails instead of hanging.
    if (asked.length > 20) return Promise.reject(new Error('the client kept paging in a circle'));
    const page = pages[cursor];
    if (page === undefined) return Promise.reject(new Error(`no page for cursor "${cursor}"`));
    const body = JSON.stringify({ [field]: page.items.map((id) => listItem(field, id)), next_cursor: page.next });
    return Promise.resolve(new Response(body, { status: 200, headers: { 'content-type': 'application/json', 'x-request-id': 'req_p' } }));
  };
  return { asked, client: new BatonClient({ baseUrl: 'http://baton.test', apiKey: 'bt_x', fetch }) };
}

describe('BatonTools: every page of a list', () => {
  it('follows next_cursor until it is null, in order', async () => {
    const { asked, client } = pagedServer('approvals', {
      '': { items: ['apr_1'], next: 'c1' },
      c1: { items: ['apr_2'], next: 'c2' },
      c2: { items: ['apr_3'], next: null },
    });
    const { approvals } = await client.tools.approvals('pending');
    expect(approvals.map((a) => a.id)).toEqual(['apr_1', 'apr_2', 'apr_3']);
    expect(asked).toEqual(['', 'c1', 'c2']);
  });

  it.each([
    ['the same cursor again', { '': { items: ['i1'], next: 'c1' }, c1: { items: ['i2'], next: 'c1' } }, ['', 'c1']],
    [
      'an earlier cursor',
      { '': { items: ['i1'], next: 'c1' }, c1: { items: ['i2'], next: 'c2' }, c2: { items: ['i3'], next: 'c1' } },
      ['', 'c1', 'c2'],
    ],
  ])('a server that answers %s is refused, not followed forever', async (_what, pages, expectedAsked) => {
    for (const list of ['approvals', 'grants'] as const) {
      const { asked, client } = pagedServer(list, pages);
      const e = await (list === 'approvals' ? client.tools.approvals() : client.tools.grants()).then(
        () => {
          throw new Error('the list did not fail');
        },
        (err: unknown) => err,
      );
      expect(e, list).toBeInstanceOf(BatonApiError);
      expect(e, list).toMatchObject({ code: 'UNEXPECTED_RESPONSE', status: 200, method: 'GET', requestId: 'req_p' });
      expect((e as Error).message, list).toMatch(/as the next page, which it had answered before/);
      expect((e as Error).message, list).toContain('"c1"');
      // Each page asked once: the repeat is caught before asking for it again.
      expect(asked, list).toEqual(expectedAsked);
    }
  });
});

/** Reads `items` to the end; what it threw (an Error saying it did not, if it ended) and how many items came first. */
async function failureOf(items: AsyncIterable<unknown>): Promise<{ error: unknown; read: number }> {
  let read = 0;
  try {
    for await (const _ of items) read++;
  } catch (error) {
    return { error, read };
  }
  return { error: new Error('the iteration did not fail'), read };
}

describe('a page that holds nothing but names a next one', () => {
  it('is refused: a server handing out fresh cursors to empty pages would be followed forever', async () => {
    const endless = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [i === 0 ? '' : `c${i}`, { items: [], next: `c${i + 1}` }]));
    for (const list of ['approvals', 'grants'] as const) {
      const { asked, client } = pagedServer(list, endless);
      await expect(list === 'approvals' ? client.tools.approvals() : client.tools.grants()).rejects.toMatchObject({
        code: 'UNEXPECTED_RESPONSE',
        message: expect.stringMatching(/an empty page that names a next one/),
      });
      expect(asked).toEqual(['']);
    }
    const { asked, client } = pagedServer('invocations', endless);
    expect((await failureOf(client.iterateDecisions())).error).toMatchObject({ code: 'UNEXPECTED_RESPONSE' });
    expect((await failureOf(client.invocationPages(`sha256:${'a'.repeat(64)}`))).error).toMatchObject({ code: 'UNEXPECTED_RESPONSE' });
    expect(asked).toEqual(['', '']);
  });
});

describe('BatonClient: lazily paged lists refuse a repeated cursor too', () => {
  it('invocationPages: a cursor answered twice stops the iteration with UNEXPECTED_RESPONSE', async () => {
    const { asked, client } = pagedServer('invocations', {
      '': { items: ['i1'], next: 'c1' },
      c1: { items: ['i2'], next: 'c2' },
      c2: { items: ['i3'], next: 'c1' },
    });
    const { error, read } = await failureOf(client.invocationPages(`sha256:${'a'.repeat(64)}`));
    expect(error).toMatchObject({ code: 'UNEXPECTED_RESPONSE' });
    expect(read).toBe(3);
    expect(asked).toEqual(['', 'c1', 'c2']);
  });

  it('iterateDecisions: a cursor answered twice stops the iteration', async () => {
    const { asked, client } = pagedServer('invocations', { '': { items: ['i1'], next: 'c1' }, c1: { items: ['i2'], next: 'c1' } });
    expect((await failureOf(client.iterateDecisions())).error).toMatchObject({ code: 'UNEXPECTED_RESPONSE' });
    expect(asked).toEqual(['', 'c1']);
  });

  it('serviceReceiptPages: a next_after answered twice stops the iteration', async () => {
    const asked: string[] = [];
    const nextOf: Record<string, number | null> = { '': 5, '5': 9, '9': 5 };
    const fetch = (input: string | URL | Request): Promise<Response> => {
      const after = new URL(typeof input === 'string' || input instanceof URL ? input : input.url).searchParams.get('after') ?? '';
      asked.push(after);
      if (asked.length > 20) return Promise.reject(new Error('the client kept paging in a circle'));
      const receipt = { id: Number(after || 1), kind: 'verify.allowed', subject: 'inv:x', jws: 'a.b.c', kid: 'k' };
      const body = JSON.stringify({ service_receipts: [receipt], next_after: nextOf[after] ?? null });
      return Promise.resolve(new Response(body, { status: 200, headers: { 'content-type': 'application/json' } }));
    };
    const client = new BatonClient({ baseUrl: 'http://baton.test', apiKey: 'bt_x', fetch });
    expect((await failureOf(client.iterateServiceReceipts())).error).toMatchObject({ code: 'UNEXPECTED_RESPONSE' });
    expect(asked).toEqual(['', '5', '9']);
  });
});
