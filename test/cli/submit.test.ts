/** `baton submit`: chain and JWS files, idempotency, refusals, --json, unusable input. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, createSubDelegation } from '../../src/sdk/records.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { answeringServer, run, tempDir } from './helpers.js';
import { shortDid } from '../../src/cli/basics.js';
import { recordHash } from '../../src/protocol/hash.js';

let live: LiveService;
let dir: string;
let S: string[];
beforeAll(async () => {
  live = await startLiveService();
  dir = tempDir();
  S = ['--server', live.baseUrl];
});
afterAll(async () => {
  await live?.close();
});

function records() {
  const a = generateKeyPair();
  const root = createRootDelegation({ issuer: live.tenant.root, audience: a.did, policy: { allowed_tools: ['search'] } });
  const sub = createSubDelegation({ parent: root, issuer: a, audience: generateKeyPair().did, policy: { allowed_tools: ['search'] } });
  return { root, sub };
}

describe('baton submit', () => {
  it('stores a chain file, then says it was already stored', async () => {
    const { root, sub } = records();
    const file = join(dir, 'chain.json');
    writeFileSync(file, JSON.stringify({ receipts: [root.jws, sub.jws] }));
    const r = await run(['submit', file, ...S]);
    expect(r.code, r.err).toBe(0);
    // Keyless: the service names no tenant, and shows no status (nothing stored about a record).
    expect(r.out).toMatch(/^STORED: 2 delegation record\(s\)\n/);
    expect(r.out).toContain(`${root.hash}  depth 0  ${shortDid(root.payload.iss)} -> `);
    expect(r.out).toContain(`${sub.hash}  depth 1  ${shortDid(sub.payload.iss)} -> `);
    expect(r.out).toContain(`baton chain ${sub.hash}`);
    expect(r.err).toMatch(/submitting 2 record\(s\)/);
    const again = await run(['submit', file, ...S]);
    expect(again.code).toBe(0);
    expect(again.out).toMatch(/^ALREADY STORED/);
    // The leaf alone, keyless: where it sits is the store's to know, so no depth is printed.
    writeFileSync(join(dir, 'leaf.json'), JSON.stringify({ receipts: [sub.jws] }));
    const leafOnly = await run(['submit', join(dir, 'leaf.json'), ...S]);
    expect(leafOnly.code, leafOnly.err).toBe(0);
    expect(leafOnly.out).toContain(`${sub.hash}  ${shortDid(sub.payload.iss)} -> `);
    expect(leafOnly.out).not.toMatch(/depth/);
  });

  it('reads JWS files in order (root first) and prints the service answer with --json', async () => {
    const { root, sub } = records();
    writeFileSync(join(dir, 'r.jws'), root.jws);
    writeFileSync(join(dir, 's.jws'), `${sub.jws}\n`);
    const r = await run(['submit', join(dir, 'r.jws'), join(dir, 's.jws'), '--json', ...S, '--api-key', live.tenant.keys.issue]);
    expect(r.code, r.err).toBe(0);
    const j = JSON.parse(r.out);
    expect(j).toMatchObject({ created: true, tenant_id: live.tenant.id });
    expect(j.delegations.map((d: { hash: string }) => d.hash)).toEqual([root.hash, sub.hash]);
  });

  it('refusals exit 1: an untrusted root, a sub-DR whose parent is not stored', async () => {
    const stranger = createRootDelegation({ issuer: generateKeyPair(), audience: generateKeyPair().did, policy: {} });
    writeFileSync(join(dir, 'u.jws'), stranger.jws);
    const r = await run(['submit', join(dir, 'u.jws'), ...S]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/REFUSED: baton submit: UNTRUSTED_ROOT/);
    expect(r.err).toMatch(/register the root DID/);

    const { sub } = records();
    writeFileSync(join(dir, 'orphan.jws'), sub.jws);
    const o = await run(['submit', join(dir, 'orphan.jws'), ...S, '--json']);
    expect(o.code).toBe(1);
    expect(JSON.parse(o.out)).toMatchObject({ error: { code: 'BUNDLE_INCOMPLETE' }, status: 422, request_id: expect.any(String) });
  });

  it('unusable input exits 2: no file, a missing file, not records, a malformed JWS (400 from the service)', async () => {
    expect((await run(['submit', ...S])).code).toBe(2);
    expect((await run(['submit', join(dir, 'nope.json'), ...S])).code).toBe(2);
    writeFileSync(join(dir, 'x.json'), '{"hello": 1}');
    const notRecords = await run(['submit', join(dir, 'x.json'), ...S]);
    expect(notRecords.code).toBe(2);
    expect(notRecords.err).toMatch(/must hold signed records/);
    writeFileSync(join(dir, 'bad.jws'), 'eyJhIjoxfQ.eyJiIjoyfQ.c2ln');
    const bad = await run(['submit', join(dir, 'bad.jws'), ...S]);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/\[HTTP 400\]/);
  });

  it('an answer about other records than those sent is refused (exit 1), none of it shown as theirs', async () => {
    const { root, sub } = records();
    const other = records().root;
    // Answers every submit with the stored view of `answered`: another record, or too few.
    let answered: string[] = [];
    const server = await answeringServer(() => ({
      status: 201,
      json: {
        created: true,
        delegations: answered.map((jws, depth) => ({
          hash: recordHash(jws),
          jws,
          ...{ iss: 'did:key:z6MkI', aud: 'did:key:z6MkA', sub: 's', cmd: '/', policy: {}, nbf: 0, exp: null, parent_hash: null },
          depth,
          service_receipt: null,
        })),
      },
    }));
    try {
      const file = join(dir, 'sent.json');
      writeFileSync(file, JSON.stringify({ receipts: [root.jws, sub.jws] }));
      answered = [root.jws, other.jws];
      const swapped = await run(['submit', file, '--server', server.url]);
      expect(swapped.code, swapped.err).toBe(1);
      expect(swapped.out).toMatch(
        new RegExp(`^NOT THESE RECORDS: .*: delegations\\[1\\] is "${other.hash}", but the record sent there hashes to ${sub.hash}\\.`),
      );
      expect(swapped.out).not.toMatch(/STORED/);
      const json = await run(['submit', file, '--server', server.url, '--json']);
      expect(json.code).toBe(1);
      expect(JSON.parse(json.out)).toMatchObject({ error: { code: 'UNEXPECTED_RESPONSE' } });
      answered = [root.jws];
      expect((await run(['submit', file, '--server', server.url])).out).toContain('it lists 1 record(s) for the 2 sent');
      answered = [root.jws, sub.jws];
      expect((await run(['submit', file, '--server', server.url])).code).toBe(0);
    } finally {
      await server.close();
    }
  });
});
