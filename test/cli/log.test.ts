/**
 * `baton log` over real HTTP: a service receipt's inclusion proof fetched, saved and checked again
 * offline; tampered proofs, answers and keys refused; checkpoints checked for consistency, online
 * and from a saved proof, a rollback and a fork the log's tiles show reported with both notes (a
 * proof answer alone is no evidence: a saved one that does not verify is unusable input, one served
 * could not be checked); trust files whose witness quorum cannot hold.
 */
import { join } from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cosignatureSigner } from '../../src/protocol/cosignature.js';
import { COSIGNATURE_V1, formatVerifierKey, verifierKey } from '../../src/protocol/note.js';
import { rootOf } from '../../src/protocol/merkle.js';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { signCheckpoint } from '../../src/service/log-tree.js';
import { silentLogger } from '../../src/service/log.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { setupTenant } from '../support/service.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { run, tempDir, witnessCosigned } from './helpers.js';

let live: LiveService;
let A: string[];
const ids: number[] = [];

async function record(n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const r = await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
      tenantId: live.tenant.id,
      kind: 'invocation.denied',
      subject: `inv:${ids.length}`,
      data: { i: ids.length },
      now: live.svc.clock.now,
    });
    ids.push(r.id);
  }
}

const integrate = () =>
  integrateOnce({ store: live.svc.store, signer: live.svc.deps.signer, log: silentLogger, logName: live.svc.deps.config.tlogName });

async function audited(path: string): Promise<Response> {
  return fetch(`${live.baseUrl}${path}`, { headers: { authorization: `Bearer ${live.tenant.keys.audit}` } });
}

beforeAll(async () => {
  live = await startLiveService();
  A = ['--server', live.baseUrl, '--api-key', live.tenant.keys.audit];
  await record(7);
  await integrate();
});
afterAll(async () => {
  await live?.close();
});

describe('baton log proof and check', () => {
  it('--help names the subcommands, and each says what it checks', async () => {
    const group = await run(['log', '--help']);
    expect(group.code).toBe(0);
    expect(group.out).toMatch(/proof .*\n.*check .*\n.*consistency/);
    expect((await run(['log', 'proof', '--help'])).out).toMatch(/details\.status "pending"/);
    expect((await run(['log', 'check', '--help'])).out).toMatch(/baton service-receipt verify/);
    expect((await run(['--help'])).out).toMatch(/\blog\b/);
  });

  it('fetches a proof, says when the keys came from the service itself, and saves proof and keys for an offline check', async () => {
    const dir = tempDir();
    const [proof, trust] = [join(dir, 'proof.json'), join(dir, 'trust.json')];
    const r = await run(['log', 'proof', String(ids[3]), ...A, '--save', proof, '--save-trust', trust]);
    expect(r.code, r.out + r.err).toBe(0);
    // Named by what its proven payload says; the answer's numeric id is not signed, and the output says so.
    expect(r.out).toMatch(
      new RegExp(`^INCLUDED  #${ids[3]}  invocation\\.denied inv:3 \\(jti \\S+\\) is entry 3 \\(counted from 0\\) of the 7 in \\S+`),
    );
    expect(r.out).toMatch(/service receipt ids the answers carry are not signed/);
    expect(r.out).toMatch(/taken from the service itself .*pin them with --trust/);
    expect(r.out).toMatch(/pass --jws <file>/);
    // The advice names the trust file just saved, so it runs as printed.
    expect(r.err).toContain(`check it again with baton log check ${proof} --trust ${trust}\n`);
    const offline = await run(['log', 'check', proof, '--trust', trust]);
    expect(offline.code, offline.out + offline.err).toBe(0);
    expect(offline.out).toMatch(
      /^INCLUDED {2}\S+proof\.json {2}invocation\.denied inv:3 \(jti \S+\) is entry 3 \(counted from 0\) of the 7/,
    );
    // Pinned, nothing is said about trusting the service.
    const pinned = await run(['log', 'proof', String(ids[0]), ...A, '--trust', trust, '--json']);
    expect(pinned.code, pinned.err).toBe(0);
    expect(JSON.parse(pinned.out)).toMatchObject({
      valid: true,
      results: [{ included: true, claimed_id: ids[0], kind: 'invocation.denied', subject: 'inv:0', leaf_index: 0, tree_size: 7 }],
    });
    expect(JSON.parse(pinned.out).note).toMatch(/--jws/);
  });

  it("the answer's id is not signed: a relabelled proof names the receipt it proves, and --jws pins the receipt held", async () => {
    const dir = tempDir();
    const [proof, trust] = [join(dir, 'proof.json'), join(dir, 'trust.json')];
    expect((await run(['log', 'proof', String(ids[4]), ...A, '--save', proof, '--save-trust', trust])).code).toBe(0);
    const saved = JSON.parse(readFileSync(proof, 'utf8')) as { service_receipt: { id: number; jws: string } };
    writeFileSync(join(dir, 'relabelled.json'), JSON.stringify({ ...saved, service_receipt: { ...saved.service_receipt, id: 999999 } }));
    const relabelled = await run(['log', 'check', join(dir, 'relabelled.json'), '--trust', trust]);
    expect(relabelled.code).toBe(0); // the proof holds, for the receipt it proves
    expect(relabelled.out).toMatch(/invocation\.denied inv:4 /);
    expect(relabelled.out).not.toMatch(/999999/);
    // The receipt the user holds, as a JWS or inside an answer: the proof must be for exactly it.
    const mine = (await (await audited(`/v1/log/service-receipts/${ids[1]}/proof`)).json()) as { service_receipt: { jws: string } };
    writeFileSync(join(dir, 'mine.jws'), `${mine.service_receipt.jws}\n`);
    writeFileSync(join(dir, 'answer.json'), JSON.stringify({ service_receipt: { id: ids[4], jws: saved.service_receipt.jws } }));
    const other = await run(['log', 'check', join(dir, 'relabelled.json'), '--trust', trust, '--jws', join(dir, 'mine.jws')]);
    expect(other.code, other.out).toBe(1);
    expect(other.out).toMatch(/^INVALID .*the proof is for another service receipt than the one given with --jws/);
    const same = await run(['log', 'check', proof, '--trust', trust, '--jws', join(dir, 'answer.json')]);
    expect(same.code, same.out + same.err).toBe(0);
    // A receipt's place holding what cannot be read counts: it is not passed over for the one that can.
    const unreadable = { service_receipt: { jws: ` ${saved.service_receipt.jws}` } };
    writeFileSync(join(dir, 'two.json'), JSON.stringify([{ service_receipt: { jws: saved.service_receipt.jws } }, unreadable]));
    const two = await run(['log', 'check', proof, '--trust', trust, '--jws', join(dir, 'two.json')]);
    expect(two.code).toBe(2);
    expect(two.err).toContain('holds 2 service receipts');
    writeFileSync(join(dir, 'unreadable.json'), JSON.stringify(unreadable));
    const none = await run(['log', 'check', proof, '--trust', trust, '--jws', join(dir, 'unreadable.json')]);
    expect(none.code).toBe(2);
    expect(none.err).toContain('service_receipt.jws is not a readable compact JWS');
    const online = await run(['log', 'proof', String(ids[4]), ...A, '--trust', trust, '--jws', join(dir, 'mine.jws')]);
    expect(online.code).toBe(1);
    expect((await run(['log', 'proof', String(ids[1]), ...A, '--trust', trust, '--jws', join(dir, 'mine.jws')])).code).toBe(0);
    // --jws with several proofs, stdin twice, a file that cannot be written: unusable input.
    expect((await run(['log', 'check', proof, proof, '--trust', trust, '--jws', join(dir, 'mine.jws')])).code).toBe(2);
    expect((await run(['log', 'check', '-', '-', '--trust', trust])).err).toMatch(/stdin \("-"\) can be read once/);
    const unwritable = await run([
      'log',
      'proof',
      String(ids[4]),
      ...A,
      '--trust',
      trust,
      '--save',
      join(dir, 'no', 'such', 'dir', 'p.json'),
    ]);
    expect(unwritable.code).toBe(2);
    expect(unwritable.err).toMatch(/--save: cannot write/);
    // The other commands that write a file the user names answer the same way.
    const nowhere = join(dir, 'no', 'such', 'dir', 'out');
    for (const args of [
      ['service-receipt', 'verify', '--fetch', ...A, '--save-keys', nowhere],
      ['audit', ...A, '--quiet', '--save-checkpoint', nowhere],
    ]) {
      const r = await run(args);
      expect(r.code, `${args.join(' ')}: ${r.err}`).toBe(2);
      expect(r.err, args.join(' ')).toMatch(/--save-(keys|checkpoint): cannot write/);
    }
  });

  it('refuses a proof whose service receipt, leaf index, tree size or log keys were changed', async () => {
    const dir = tempDir();
    const [proof, trust] = [join(dir, 'proof.json'), join(dir, 'trust.json')];
    expect((await run(['log', 'proof', String(ids[5]), ...A, '--save', proof, '--save-trust', trust])).code).toBe(0);
    const saved = JSON.parse(readFileSync(proof, 'utf8')) as {
      service_receipt: { id: number; jws: string };
      leaf_index: number;
      tree_size: number;
    };
    const other = (await (await audited(`/v1/log/service-receipts/${ids[2]}/proof`)).json()) as { service_receipt: { jws: string } };
    const variants: [string, unknown, RegExp][] = [
      ['swapped.json', { ...saved, service_receipt: { ...saved.service_receipt, jws: other.service_receipt.jws } }, /LOG_PROOF_INVALID/],
      ['index.json', { ...saved, leaf_index: 2 }, /the answer says leaf 2, the proof proves leaf 5/],
      ['size.json', { ...saved, tree_size: 9 }, /the answer says tree size 9, the checkpoint is of 7/],
    ];
    for (const [name, body, reason] of variants) {
      writeFileSync(join(dir, name), JSON.stringify(body));
      const r = await run(['log', 'check', join(dir, name), '--trust', trust]);
      expect(r.code, `${name}: ${r.out}${r.err}`).toBe(1);
      expect(r.out, name).toMatch(/^INVALID/);
      expect(r.out, name).toMatch(reason);
    }
    // A proof saved with CR LF line endings cannot be read: unusable input, not a verdict on the receipt.
    writeFileSync(
      join(dir, 'crlf.json'),
      JSON.stringify({ ...saved, proof: (saved as unknown as { proof: string }).proof.replace(/\n/g, '\r\n') }),
    );
    const crlf = await run(['log', 'check', join(dir, 'crlf.json'), '--trust', trust]);
    expect(crlf.code, crlf.out + crlf.err).toBe(2);
    expect(crlf.err).toMatch(/its proof cannot be read: MALFORMED_LOG_PROOF: .*CR LF/);
    // Keys of another log: the checkpoint does not open.
    const info = JSON.parse(readFileSync(trust, 'utf8')) as { origin: string; logKeys: string[] };
    writeFileSync(join(dir, 'other-origin.json'), JSON.stringify({ ...info, origin: `${info.origin}-elsewhere` }));
    const elsewhere = await run(['log', 'check', proof, '--trust', join(dir, 'other-origin.json')]);
    expect(elsewhere.code, elsewhere.out + elsewhere.err).toBe(1);
    expect(elsewhere.out).toMatch(/^INVALID/);
    expect(elsewhere.out).toContain(`The checkpoint names log ${info.origin}; the pinned keys are for ${info.origin}-elsewhere`);
    // One good file among bad ones still exits 1; every file is reported.
    const mixed = await run(['log', 'check', proof, join(dir, 'index.json'), '--trust', trust]);
    expect(mixed.code).toBe(1);
    expect(mixed.out.split('\n').filter((l) => /^(INCLUDED|INVALID)/.test(l))).toHaveLength(2);
  });

  it('unusable input is exit 2 with what to do: no --trust, not JSON, not a proof answer, a bad id', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'text.txt'), 'not json');
    writeFileSync(join(dir, 'other.json'), JSON.stringify({ hello: 'world' }));
    writeFileSync(join(dir, 'trust.json'), JSON.stringify({ origin: 'x' }));
    const cases: [string[], RegExp][] = [
      [['log', 'check', join(dir, 'other.json')], /give --trust <file>/],
      [['log', 'check', join(dir, 'text.txt'), '--trust', join(dir, 'trust.json')], /logKeys/],
      [['log', 'proof', 'seven', ...A], /whole number/],
      [['log', 'proof', ...A], /give one service receipt id/],
    ];
    for (const [args, message] of cases) {
      const r = await run(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.err, args.join(' ')).toMatch(message);
    }
    writeFileSync(join(dir, 'trust.json'), JSON.stringify({ origin: 'x', logKeys: [] }));
    const notJson = await run(['log', 'check', join(dir, 'text.txt'), '--trust', join(dir, 'trust.json')]);
    expect(notJson.code).toBe(2);
    expect(notJson.err).toMatch(/is not JSON/);
    const notProof = await run(['log', 'check', join(dir, 'other.json'), '--trust', join(dir, 'trust.json')]);
    expect(notProof.code).toBe(2);
    expect(notProof.err).toMatch(/is not a proof answer/);
  });

  it('INCLUDED under a trust that requires no witness says a split view is not ruled out; a witness quorum met drops the note', async () => {
    const dir = tempDir();
    const t = await setupTenant(live.svc, 'log-witnessed');
    for (let i = 0; i < 2; i++)
      await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
        tenantId: t.id,
        kind: 'invocation.denied',
        subject: `inv:w:${i}`,
        data: { i },
        now: live.svc.clock.now,
      });
    await integrate();
    const key = t.keys.audit;
    const read = async (path: string) => (await fetch(`${live.baseUrl}${path}`, { headers: { authorization: `Bearer ${key}` } })).text();
    // A witness cosigns the checkpoint of 2.
    const { witnessKey, cosigned } = witnessCosigned(await read('/v1/log/checkpoint'), live.svc.clock.now);
    expect(
      (await live.svc.call('POST', '/v1/log/cosignatures', { key, json: { witness_key: witnessKey, checkpoint: cosigned } })).status,
    ).toBe(201);
    const info = JSON.parse(await read('/v1/log')) as { origin: string; verifier_keys: string[] };
    const [none, witnessed, proof] = [join(dir, 'none.json'), join(dir, 'witnessed.json'), join(dir, 'proof.json')];
    writeFileSync(none, JSON.stringify({ origin: info.origin, logKeys: info.verifier_keys }));
    writeFileSync(
      witnessed,
      JSON.stringify({ origin: info.origin, logKeys: info.verifier_keys, witnesses: [witnessKey], requiredCosignatures: 1 }),
    );
    const id = (JSON.parse(await read('/v1/service-receipts?after=0&limit=1')) as { service_receipts: { id: number }[] })
      .service_receipts[0]!.id;
    const B = ['--server', live.baseUrl, '--api-key', key];
    const fetched = await run(['log', 'proof', String(id), ...B, '--trust', witnessed, '--tree-size', '2', '--save', proof]);
    expect(fetched.code, fetched.out + fetched.err).toBe(0);
    expect(fetched.out).not.toMatch(/split view/);
    const splitNote =
      /note: .*the trust requires no witness cosignatures.*does not rule out a split view.*baton log consistency <saved note> <newer note> --trust <file>.*require witnesses/;
    const unwitnessed = await run(['log', 'check', proof, '--trust', none]);
    expect(unwitnessed.code, unwitnessed.out + unwitnessed.err).toBe(0);
    expect(unwitnessed.out).toMatch(/^INCLUDED /);
    expect(unwitnessed.out).toMatch(splitNote);
    expect(JSON.parse((await run(['log', 'check', proof, '--trust', none, '--json'])).out).note).toMatch(/does not rule out a split view/);
    // The same proof under the witness quorum it meets: no such note.
    const quorum = await run(['log', 'check', proof, '--trust', witnessed]);
    expect(quorum.code, quorum.out + quorum.err).toBe(0);
    expect(quorum.out).not.toMatch(/split view/);
    expect(JSON.parse((await run(['log', 'check', proof, '--trust', witnessed, '--json'])).out).note).toBeUndefined();
    // baton log proof says the same under a trust without witnesses, beside its other notes.
    const online = await run(['log', 'proof', String(id), ...B, '--trust', none]);
    expect(online.code, online.out + online.err).toBe(0);
    expect(online.out).toMatch(/note: pass --jws <file> .*; the trust requires no witness cosignatures/);
    // A proof that does not hold gets no such note: nothing was said to be included.
    const saved = JSON.parse(readFileSync(proof, 'utf8')) as { leaf_index: number };
    writeFileSync(join(dir, 'moved.json'), JSON.stringify({ ...saved, leaf_index: saved.leaf_index + 1 }));
    const invalid = await run(['log', 'check', join(dir, 'moved.json'), '--trust', none]);
    expect(invalid.code, invalid.out + invalid.err).toBe(1);
    expect(invalid.out).toMatch(/^INVALID /);
    expect(invalid.out).not.toMatch(/split view/);
    expect((await run(['log', 'check', '--help'])).out).toMatch(/INCLUDED does not rule out a split view/);
  });

  it('a service receipt not yet in the log is refused by the service (pending), not reported as included', async () => {
    await record(1);
    const r = await run(['log', 'proof', String(ids[ids.length - 1]), ...A]);
    expect(r.code, r.out + r.err).toBe(1);
    expect(r.out + r.err).toMatch(/not integrated into the log yet/);
    expect(r.out + r.err).toMatch(/Ask again in a second/);
    await integrate();
    expect((await run(['log', 'proof', String(ids[ids.length - 1]), ...A])).code).toBe(0);
  });
});

describe('baton log consistency', () => {
  it('a later checkpoint extends an earlier one, online and from a saved proof; swapped, it is not checked (a stale view reads the same); a forged proof file is unusable input', async () => {
    const dir = tempDir();
    const trust = join(dir, 'trust.json');
    const info = (await (await audited('/v1/log')).json()) as { origin: string; verifier_keys: string[] };
    writeFileSync(trust, JSON.stringify(info)); // a saved GET /v1/log answer pins the keys as it is
    const older = join(dir, 'older.txt');
    writeFileSync(older, await (await audited('/v1/log/checkpoint')).text());
    await record(5);
    await integrate();
    const newer = join(dir, 'newer.txt');
    writeFileSync(newer, await (await audited('/v1/log/checkpoint')).text());
    const sizes = [older, newer].map((f) => Number(readFileSync(f, 'utf8').split('\n')[1]));
    expect(sizes[1]).toBe(sizes[0]! + 5);

    const online = await run(['log', 'consistency', older, newer, '--trust', trust, ...A]);
    expect(online.code, online.out + online.err).toBe(0);
    expect(online.out).toMatch(new RegExp(`^CONSISTENT .*${sizes[1]} leaves extends the one of ${sizes[0]}`));

    const proofFile = join(dir, 'proof.json');
    writeFileSync(proofFile, await (await audited(`/v1/log/consistency?from=${sizes[0]}&to=${sizes[1]}`)).text());
    const offline = await run([
      'log',
      'consistency',
      older,
      newer,
      '--trust',
      trust,
      '--proof',
      proofFile,
      '--server',
      'http://127.0.0.1:9',
    ]);
    expect(offline.code, offline.out + offline.err).toBe(0);

    // A proof for other sizes, or not even hashes, is unusable input, not a split view.
    writeFileSync(join(dir, 'other-sizes.json'), JSON.stringify({ ...JSON.parse(readFileSync(proofFile, 'utf8')), to: sizes[1]! + 1 }));
    const otherSizes = await run(['log', 'consistency', older, newer, '--trust', trust, '--proof', join(dir, 'other-sizes.json')]);
    expect(otherSizes.code, otherSizes.out).toBe(2);
    expect(otherSizes.err).toMatch(new RegExp(`not ${sizes[0]} to ${sizes[1]} as the two notes need`));
    writeFileSync(join(dir, 'not-hashes.json'), JSON.stringify(['not base64!!']));
    const notHashes = await run(['log', 'consistency', older, newer, '--trust', trust, '--proof', join(dir, 'not-hashes.json')]);
    expect(notHashes.code, notHashes.out).toBe(2);

    // Swapped, the proof shows the second a prefix of the first: a stale view reads the same as a
    // rollback, and the order is only the caller's, so it proves nothing (exit 3), online or not.
    for (const args of [['--proof', proofFile], A]) {
      const swapped = await run(['log', 'consistency', newer, older, '--trust', trust, ...args]);
      expect(swapped.code, swapped.out + swapped.err).toBe(3);
      expect(swapped.out).toMatch(
        new RegExp(`^NOT CHECKED {2}the second note \\(${sizes[0]} leaves\\) is smaller than the first \\(${sizes[1]}\\) and its prefix`),
      );
      expect(swapped.out).toMatch(/if you gave them the other way round, swap them/);
      expect(swapped.out).not.toMatch(/ROLLBACK|SPLIT VIEW|evidence\)/);
    }

    // A forged proof file accuses no one: it is unusable input (the next test has the details).
    const proof = JSON.parse(readFileSync(proofFile, 'utf8')) as { proof: string[] };
    writeFileSync(join(dir, 'forged.json'), JSON.stringify(proof.proof.map(() => Buffer.alloc(32, 7).toString('base64'))));
    const forged = await run(['log', 'consistency', older, newer, '--trust', trust, '--proof', join(dir, 'forged.json')]);
    expect(forged.code, forged.out + forged.err).toBe(2);
    expect(forged.out).not.toMatch(/SPLIT VIEW/);

    // A note that does not open under the pinned keys is unusable input, named.
    writeFileSync(
      join(dir, 'bad.txt'),
      readFileSync(newer, 'utf8').replace(/\n(\d+)\n/, (_m, n: string) => `\n${Number(n) + 1}\n`),
    );
    const bad = await run(['log', 'consistency', older, join(dir, 'bad.txt'), '--trust', trust, '--proof', proofFile]);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/bad\.txt does not open under the pinned log keys/);
  });

  it('a saved proof that does not link the notes is unusable input, a served one that does not is no evidence either: the tiles, or equal sizes with other roots, are', async () => {
    const dir = tempDir();
    const trust = join(dir, 'trust.json');
    const info = (await (await audited('/v1/log')).json()) as { origin: string; verifier_keys: string[] };
    writeFileSync(trust, JSON.stringify(info));
    const older = join(dir, 'older.txt');
    writeFileSync(older, await (await audited('/v1/log/checkpoint')).text());
    await record(3);
    await integrate();
    const newer = join(dir, 'newer.txt');
    writeFileSync(newer, await (await audited('/v1/log/checkpoint')).text());
    const [from, to] = [older, newer].map((f) => Number(readFileSync(f, 'utf8').split('\n')[1])) as [number, number];
    const served = (await (await audited(`/v1/log/consistency?from=${from}&to=${to}`)).json()) as { proof: string[] };
    writeFileSync(join(dir, 'good.json'), JSON.stringify(served));
    expect((await run(['log', 'consistency', older, newer, '--trust', trust, '--proof', join(dir, 'good.json')])).code).toBe(0);

    // Well-formed hashes edited by hand, or no hashes at all: the file is wrong, not the log.
    const flipped = (h: string) => Buffer.from(Buffer.from(h, 'base64').map((b) => b ^ 1)).toString('base64');
    const edited = { ...served, proof: served.proof.map(flipped) };
    writeFileSync(join(dir, 'edited.json'), JSON.stringify(edited));
    writeFileSync(join(dir, 'empty.json'), '[]');
    for (const file of ['edited.json', 'empty.json']) {
      const r = await run(['log', 'consistency', older, newer, '--trust', trust, '--proof', join(dir, file)]);
      expect(r.code, `${file}: ${r.out}${r.err}`).toBe(2);
      expect(r.out, file).toBe('');
      expect(r.err, file).toContain(`the saved proof ${join(dir, file)} does not link these checkpoints (${from} to ${to} leaves)`);
      expect(r.err, file).toMatch(/may be corrupt, or for another pair of checkpoints, so it is no evidence against the log/);
      expect(r.err, file).toMatch(/Run without --proof to ask the log itself/);
      expect(r.err, file).not.toMatch(/SPLIT VIEW|evidence\)/);
    }

    // A proof answer alone is no evidence, whoever serves it: a log whose tiles cannot be read (here
    // every other path answers JSON, no tile) and whose proof does not verify could not be checked,
    // exit 3, never a split view. Each fake log names the log the trust file pins (GET /v1/log).
    const serve = async (handler: (url: string) => { status: number; body: string | Uint8Array } | undefined) => {
      const server = createServer((req, res) => {
        void (async () => {
          const own = handler(req.url ?? '');
          if (own !== undefined) {
            res.writeHead(own.status, { 'content-type': typeof own.body === 'string' ? 'application/json' : 'application/octet-stream' });
            return res.end(own.body);
          }
          // Anything else is the live log's own answer.
          const live = await audited(req.url ?? '');
          res.writeHead(live.status, { 'content-type': live.headers.get('content-type') ?? 'application/octet-stream' });
          res.end(Buffer.from(await live.arrayBuffer()));
        })();
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return {
        args: ['--server', `http://127.0.0.1:${(server.address() as AddressInfo).port}`, '--api-key', 'bt_x'],
        close: () => new Promise<void>((resolve) => server.close(() => resolve())),
      };
    };
    // An honest pair costs the proof alone: tiles are read only when it does not settle the pair.
    const asked: string[] = [];
    const watching = await serve((url) => void asked.push(url));
    try {
      expect((await run(['log', 'consistency', older, newer, '--trust', trust, ...watching.args])).code).toBe(0);
    } finally {
      await watching.close();
    }
    expect(asked.filter((url) => url.startsWith('/v1/log/tile/'))).toEqual([]);
    expect(asked.filter((url) => url.startsWith('/v1/log/consistency'))).toHaveLength(1);
    const lying = await serve((url) =>
      url === '/v1/log'
        ? { status: 200, body: JSON.stringify(info) }
        : { status: 200, body: JSON.stringify({ from, to, ...(url.startsWith('/v1/log/consistency') ? edited : {}) }) },
    );
    try {
      const r = await run(['log', 'consistency', older, newer, '--trust', trust, ...lying.args]);
      expect(r.code, r.out + r.err).toBe(3);
      expect(r.out).not.toMatch(/SPLIT VIEW/);
      expect(r.err).toMatch(/the consistency proof served does not join them \(the consistency proof does not verify\)/);
      expect(r.err).toMatch(/A proof answer alone is no evidence against the log/);
    } finally {
      await lying.close();
    }

    // In front of the honest log, a forged proof answer changes nothing: its tiles judge the pair.
    const forgedProof = await serve((url) =>
      url.startsWith('/v1/log/consistency') ? { status: 200, body: JSON.stringify({ from, to, ...edited }) } : undefined,
    );
    try {
      const r = await run(['log', 'consistency', older, newer, '--trust', trust, ...forgedProof.args]);
      expect(r.code, r.out + r.err).toBe(0);
      expect(r.out).toMatch(/^CONSISTENT/);
    } finally {
      await forgedProof.close();
    }

    // Evidence is a note the log signed and tiles that rebuild it without holding the other: the log
    // signed a checkpoint of `to` leaves over other leaves and serves their tile.
    expect(to).toBeLessThan(256);
    const otherLeaves = Array.from({ length: to }, (_, i) => new Uint8Array(32).fill(i + 1));
    const forkedNewer = join(dir, 'forked-newer.txt');
    writeFileSync(forkedNewer, signCheckpoint(live.svc.deps.signer, info.origin, to, rootOf(otherLeaves)));
    const hostile = await serve((url) =>
      url === `/v1/log/tile/0/000.p/${to}`
        ? { status: 200, body: Buffer.concat(otherLeaves) }
        : url.startsWith('/v1/log/consistency')
          ? { status: 503, body: JSON.stringify({ error: { code: 'STORAGE_UNAVAILABLE', message: 'Down.' } }) }
          : undefined,
    );
    try {
      for (const notes of [
        [older, forkedNewer],
        [forkedNewer, older],
      ]) {
        const r = await run(['log', 'consistency', ...notes, '--trust', trust, ...hostile.args]);
        expect(r.code, r.out + r.err).toBe(1);
        expect(r.out).toMatch(
          new RegExp(`^SPLIT VIEW {2}the log's tiles of ${to} leaves rebuild that checkpoint's root, and their first ${from} hash to`),
        );
        expect(r.out).toMatch(/--- the first note \(evidence\)\n[\s\S]*--- the second note \(evidence\)\n/);
      }
    } finally {
      await hostile.close();
    }

    // The log's refusal, even in Baton's envelope (a 404 saying it has fewer leaves), is no evidence
    // either: with its tiles refused too, the pair could not be checked (exit 3), whatever the answer.
    // Given larger first, with nothing readable, it could not be checked either: never a rollback by order alone.
    const refusal = (status: number, error: object) =>
      serve((url) =>
        url === '/v1/log'
          ? { status: 200, body: JSON.stringify(info) }
          : { status, body: JSON.stringify({ error: { suggestion: '', ...error }, request_id: 'req_x' }) },
      );
    const refusals: [string, number, object][] = [
      ['the log says it is smaller', 404, { code: 'NOT_FOUND', message: 'The log has 1 leaves.', details: { tree_size: 1 } }],
      ['a 404 naming no smaller size', 404, { code: 'NOT_FOUND', message: 'The log has 1 leaves.' }],
      ['a mangled query', 400, { code: 'INVALID_REQUEST', message: 'The query is not valid: from is required.' }],
    ];
    for (const [what, status, error] of refusals) {
      const server = await refusal(status, error);
      try {
        const r = await run(['log', 'consistency', older, newer, '--trust', trust, ...server.args]);
        expect(r.code, `${what}: ${r.out}${r.err}`).toBe(3);
        expect(r.out + r.err, what).not.toMatch(/SPLIT VIEW|evidence\)/);
        expect(r.err, what).toMatch(/Could not check the checkpoints/);
        const swapped = await run(['log', 'consistency', newer, older, '--trust', trust, ...server.args]);
        expect(swapped.code, `${what}, swapped: ${swapped.out}${swapped.err}`).toBe(3);
        expect(swapped.out + swapped.err, what).not.toMatch(/ROLLBACK|SPLIT VIEW|evidence\)/);
      } finally {
        await server.close();
      }
    }

    // Two checkpoints of one size with different roots, both signed by the log: evidence whatever proof file is given.
    const forked = join(dir, 'forked.txt');
    writeFileSync(forked, signCheckpoint(live.svc.deps.signer, info.origin, to, new Uint8Array(32).fill(9)));
    const fork = await run(['log', 'consistency', newer, forked, '--trust', trust, '--proof', join(dir, 'empty.json')]);
    expect(fork.code, fork.out + fork.err).toBe(1);
    expect(fork.out).toMatch(new RegExp(`^SPLIT VIEW {2}two checkpoints of ${to} leaves with different roots`));
  });
});

describe('baton log consistency: the log asked is the one the trust file pins', () => {
  it("another tenant's key (a saved context, say) is refused before any proof is asked (exit 2), never a false fork", async () => {
    const dir = tempDir();
    const trust = join(dir, 'trust.json');
    writeFileSync(trust, await (await audited('/v1/log')).text());
    const older = join(dir, 'older.txt');
    writeFileSync(older, await (await audited('/v1/log/checkpoint')).text());
    await record(2);
    await integrate();
    const newer = join(dir, 'newer.txt');
    writeFileSync(newer, await (await audited('/v1/log/checkpoint')).text());
    const own = await run(['log', 'consistency', older, newer, '--trust', trust, ...A]);
    expect(own.code, own.out + own.err).toBe(0);
    // Another tenant's log, smaller and larger than this one: its proof would not join these notes.
    const origin = (JSON.parse(readFileSync(trust, 'utf8')) as { origin: string }).origin;
    for (const [name, leaves] of [
      ['small', 1],
      ['big', 12],
    ] as const) {
      const other = await setupTenant(live.svc, `consistency-${name}`);
      for (let i = 0; i < leaves; i++)
        await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
          tenantId: other.id,
          kind: 'invocation.denied',
          subject: `inv:${name}:${i}`,
          data: { i },
          now: live.svc.clock.now,
        });
      await integrate();
      const r = await run(['log', 'consistency', older, newer, '--trust', trust, '--server', live.baseUrl, '--api-key', other.keys.audit]);
      expect(r.code, `${name}: ${r.out}${r.err}`).toBe(2);
      expect(r.out, name).toBe('');
      expect(r.err, name).toContain(`/baton/${other.id} for this API key (GET /v1/log), not ${origin} that --trust pins`);
      expect(r.err, name).not.toMatch(/SPLIT VIEW|would not prove/);
    }
  });
});

describe('trust files', () => {
  it('a witness quorum that cannot be met is unusable input (exit 2), counting distinct witness keys', async () => {
    const dir = tempDir();
    const [proof, trust] = [join(dir, 'proof.json'), join(dir, 'trust.json')];
    expect((await run(['log', 'proof', String(ids[0]), ...A, '--save', proof, '--save-trust', trust])).code).toBe(0);
    const base = JSON.parse(readFileSync(trust, 'utf8')) as { origin: string; logKeys: string[] };
    const witness = cosignatureSigner('w1.example', new Uint8Array(32).fill(9), 0).key;
    const alias = verifierKey('w1-again.example', COSIGNATURE_V1, witness.publicKey);
    const older = join(dir, 'cp.txt');
    writeFileSync(older, await (await audited('/v1/log/checkpoint')).text());
    const cases: [string, object, RegExp][] = [
      [
        'no-witnesses.json',
        { ...base, requiredCosignatures: 1 },
        /A quorum of 1 witness \(requiredCosignatures\) cannot be met: no witness key is listed/,
      ],
      [
        'one-key-two-names.json',
        { ...base, witnesses: [formatVerifierKey(witness), formatVerifierKey(alias)], requiredCosignatures: 2 },
        /A quorum of 2 witnesses \(requiredCosignatures\) cannot be met: only 1 distinct witness key is listed \(2 listed: a key under two names counts once\)/,
      ],
    ];
    for (const [name, body, message] of cases) {
      const file = join(dir, name);
      writeFileSync(file, JSON.stringify(body));
      for (const args of [
        ['log', 'check', proof, '--trust', file],
        ['log', 'proof', String(ids[0]), ...A, '--trust', file],
        ['log', 'consistency', older, older, '--trust', file],
        ['audit', ...A, '--quiet', '--trust', file],
      ]) {
        const r = await run(args);
        expect(r.code, `${name}: ${args.join(' ')}: ${r.out}${r.err}`).toBe(2);
        expect(r.err, `${name}: ${args[0]} ${args[1]}`).toMatch(message);
        expect(r.err + r.out, name).not.toMatch(/INVALID_REQUEST|does not open under/);
      }
    }
    // A quorum the distinct keys can meet is accepted when read; the checkpoint then lacks the cosignature.
    writeFileSync(
      join(dir, 'quorum-1.json'),
      JSON.stringify({ ...base, witnesses: [formatVerifierKey(witness)], requiredCosignatures: 1 }),
    );
    const unmet = await run(['log', 'check', proof, '--trust', join(dir, 'quorum-1.json')]);
    expect(unmet.code, unmet.out + unmet.err).toBe(1);
    expect(unmet.out).toMatch(/COSIGNATURES_INSUFFICIENT/);
  });
});
