/**
 * Known answers for RFC 6962/9162 hashing and proofs, from the reference
 * implementation's published test data (test/vectors/transparency-dev-merkle).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  consistencyProof,
  EMPTY_ROOT,
  inclusionProof,
  leafHash,
  nodeHash,
  rootOf,
  subtreeHashesOf,
  verifyConsistency,
  verifyInclusion,
  type Hash,
} from '../../src/protocol/merkle.js';
import { BatonError } from '../../src/protocol/errors.js';

const DIR = join(import.meta.dirname, '../vectors/transparency-dev-merkle');

interface TreeVectors {
  leafInputsHex: string[];
  rootHashesHex: string[];
  nodeHashesHex: string[][];
  hasher: { desc: string; function: 'empty' | 'leaf' | 'node'; inputHex?: string; leftHex?: string; rightHex?: string; want: string }[];
}
const tree = JSON.parse(readFileSync(join(DIR, 'tree.json'), 'utf8')) as TreeVectors;

const fromHex = (h: string): Uint8Array => Uint8Array.from(Buffer.from(h, 'hex'));
const toHex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const fromB64 = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s, 'base64'));

function jsonFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? jsonFiles(path) : name.endsWith('.json') ? [path] : [];
  });
}

/** false, or a MALFORMED_LOG_PROOF refusal: both mean "does not verify". */
function outcome(run: () => boolean): 'verifies' | 'fails' | 'refused' {
  try {
    return run() ? 'verifies' : 'fails';
  } catch (e) {
    expect(e).toBeInstanceOf(BatonError);
    expect((e as BatonError).code).toBe('MALFORMED_LOG_PROOF');
    return 'refused';
  }
}

/**
 * The one probe where Baton is stricter than the reference: equal sizes with
 * 12-byte "roots". The reference compares the two byte strings; Baton refuses
 * any root that is not a 32-byte hash before comparing.
 */
const STRICTER_THAN_REFERENCE = new Set(['consistency/additional/sizes-are-equal-one-and-proof-is-empty.json']);

describe('RFC 6962 hashing', () => {
  it.each(tree.hasher)('$desc', (v) => {
    const got =
      v.function === 'empty'
        ? EMPTY_ROOT
        : v.function === 'leaf'
          ? leafHash(fromHex(v.inputHex!))
          : nodeHash(fromHex(v.leftHex!), fromHex(v.rightHex!));
    expect(toHex(got)).toBe(v.want);
  });

  it('the reference tree: every root of sizes 0..8 and every complete subtree hash', () => {
    const leaves = tree.leafInputsHex.map((h) => leafHash(fromHex(h)));
    tree.rootHashesHex.forEach((want, size) => expect(toHex(rootOf(leaves.slice(0, size)))).toBe(want));
    const source = subtreeHashesOf(leaves);
    tree.nodeHashesHex.forEach((row, level) => row.forEach((want, index) => expect(toHex(source(level, index))).toBe(want)));
  });
});

describe('reference proofs', () => {
  const leaves = tree.leafInputsHex.map((h) => leafHash(fromHex(h)));
  const source = subtreeHashesOf(leaves);
  const root = (size: number): Hash => rootOf(leaves.slice(0, size));

  it('generated inclusion and consistency proofs verify for every index and size pair of the reference tree', () => {
    for (let size = 1; size <= 8; size++) {
      for (let index = 0; index < size; index++) {
        expect(verifyInclusion(index, size, leaves[index]!, inclusionProof(index, size, source), root(size))).toBe(true);
      }
      for (let old = 1; old <= size; old++) {
        expect(verifyConsistency(old, size, consistencyProof(old, size, source), root(old), root(size))).toBe(true);
      }
    }
  });

  it('the happy-path probes are exactly the proofs Baton generates', () => {
    const probes = jsonFiles(join(DIR, 'inclusion')).map((f) => JSON.parse(readFileSync(f, 'utf8')) as InclusionProbe);
    const happy = probes.filter((p) => p.desc === 'happy path' && p.treeSize <= 8 && toHex(fromB64(p.root)) === toHex(root(p.treeSize)));
    expect(happy.length).toBeGreaterThan(0);
    for (const p of happy) {
      expect((p.proof ?? []).map((h) => toHex(fromB64(h)))).toEqual(inclusionProof(p.leafIdx, p.treeSize, source).map(toHex));
    }
  });
});

interface InclusionProbe {
  leafIdx: number;
  treeSize: number;
  root: string;
  leafHash: string;
  proof: string[] | null;
  desc: string;
  wantErr: boolean;
}
interface ConsistencyProbe {
  size1: number;
  size2: number;
  root1: string;
  root2: string;
  proof: string[] | null;
  desc: string;
  wantErr: boolean;
}

describe('transparency-dev/merkle verification probes', () => {
  const inclusion = jsonFiles(join(DIR, 'inclusion'));
  const consistency = jsonFiles(join(DIR, 'consistency'));

  it('has the copied probes', () => {
    expect(inclusion.length).toBeGreaterThan(80);
    expect(consistency.length).toBeGreaterThan(90);
  });

  it.each(inclusion.map((f) => [f.slice(DIR.length + 1), f]))('%s', (_name, file) => {
    const p = JSON.parse(readFileSync(file, 'utf8')) as InclusionProbe;
    const got = outcome(() => verifyInclusion(p.leafIdx, p.treeSize, fromB64(p.leafHash), (p.proof ?? []).map(fromB64), fromB64(p.root)));
    expect(got === 'verifies').toBe(!p.wantErr);
  });

  it.each(consistency.map((f) => [f.slice(DIR.length + 1), f]))('%s', (name, file) => {
    const p = JSON.parse(readFileSync(file, 'utf8')) as ConsistencyProbe;
    const got = outcome(() => verifyConsistency(p.size1, p.size2, (p.proof ?? []).map(fromB64), fromB64(p.root1), fromB64(p.root2)));
    if (STRICTER_THAN_REFERENCE.has(name)) {
      expect(p.wantErr).toBe(false);
      expect(got).toBe('refused');
      return;
    }
    expect(got === 'verifies').toBe(!p.wantErr);
  });
});
