/**
 * The service side of the transparency log: a tenant's tree as stored
 * (src/store/log.ts) seen through the pure protocol modules. Appending
 * (for the integrator), tiles, checkpoints with their cosignatures, and
 * inclusion and consistency proofs all go through here.
 *
 * Log identity: the origin of tenant T's log is `<BATON_TLOG_NAME>/baton/<T>`
 * and its checkpoints are signed notes under the service's service-receipt signing
 * key, with that origin as the key name. Nothing about a tenant's log is
 * visible to another tenant.
 */
import { domainToUnicode } from 'node:url';
import { formatCheckpoint } from '../protocol/checkpoint.js';
import { witnessNameProblem } from '../protocol/cosignature.js';
import { BatonError } from '../protocol/errors.js';
import { consistencyProof, EMPTY_ROOT, inclusionProof, leafHash, type Hash } from '../protocol/merkle.js';
import { NOTE_ED25519, signNote, verifierKey, type VerifierKey } from '../protocol/note.js';
import { subtreeHashesFromTiles, TILE_WIDTH, tileRoot, treeRootFromTiles, type TileCoordinates } from '../protocol/tiles.js';
import { formatTlogProof } from '../protocol/tlog-proof.js';
import { utf8 } from '../protocol/tlog-input.js';
import type { Db } from '../store/db.js';
import { checkpointOfSize, cosignatureLines, fixedLogName, hashesAt, latestCheckpoint, latestCheckpointNotes } from '../store/log.js';
import type { PublishedServiceKey, ServiceSigner } from './signer.js';

/** The checkpoint origin (and note key name) of a tenant's log. */
export function logOrigin(logName: string, tenantId: string): string {
  return `${logName}/baton/${tenantId}`;
}

/** The log name an origin starts with (`<name>/baton/<tenant>`), or undefined for an origin of another shape. */
export function logNameOf(origin: string): string | undefined {
  const at = origin.lastIndexOf('/baton/');
  return at > 0 ? origin.slice(0, at) : undefined;
}

/**
 * Letters that print as a Latin letter or digit, by what they stand for once lowercased (Cyrillic,
 * Greek, Armenian, and ASCII look-alikes: 0 and o, 1, i and l), and pairs that print as one letter.
 * New witness names are printable ASCII without `%` (checkWitnessName); lines stored before that
 * rule may hold any script, as letters or as percent-escapes.
 */
const LOOK_ALIKES: Readonly<Record<string, string>> = {
  ...Object.fromEntries([...'аαɑ'].map((c) => [c, 'a'])),
  ...Object.fromEntries([...'вβь'].map((c) => [c, 'b'])),
  ...Object.fromEntries([...'сϲ'].map((c) => [c, 'c'])),
  ...Object.fromEntries([...'ԁ'].map((c) => [c, 'd'])),
  ...Object.fromEntries([...'еεѐё'].map((c) => [c, 'e'])),
  ...Object.fromEntries([...'ɡց'].map((c) => [c, 'g'])),
  ...Object.fromEntries([...'нηһհ'].map((c) => [c, 'h'])),
  ...Object.fromEntries([...'ј'].map((c) => [c, 'j'])),
  ...Object.fromEntries([...'кκ'].map((c) => [c, 'k'])),
  ...Object.fromEntries([...'1iıіιӏ|ǀ'].map((c) => [c, 'l'])),
  ...Object.fromEntries([...'мμ'].map((c) => [c, 'm'])),
  ...Object.fromEntries([...'ν'].map((c) => [c, 'v'])),
  ...Object.fromEntries([...'ո'].map((c) => [c, 'n'])),
  ...Object.fromEntries([...'0оοσօ'].map((c) => [c, 'o'])),
  ...Object.fromEntries([...'рρ'].map((c) => [c, 'p'])),
  ...Object.fromEntries([...'ԛզ'].map((c) => [c, 'q'])),
  ...Object.fromEntries([...'ѕ'].map((c) => [c, 's'])),
  ...Object.fromEntries([...'тτ'].map((c) => [c, 't'])),
  ...Object.fromEntries([...'υս'].map((c) => [c, 'u'])),
  ...Object.fromEntries([...'ԝ'].map((c) => [c, 'w'])),
  ...Object.fromEntries([...'хχ'].map((c) => [c, 'x'])),
  ...Object.fromEntries([...'уүγ'].map((c) => [c, 'y'])),
  ...Object.fromEntries([...'ζ'].map((c) => [c, 'z'])),
};
const LOOK_ALIKE_PAIRS: readonly (readonly [RegExp, string])[] = [
  [/rn/g, 'm'],
  [/vv/g, 'w'],
  [/cl/g, 'd'],
];

/** Percent-escapes decoded, as often as they nest (`%2562` is `b`); a malformed escape stays as written. */
function percentDecoded(name: string): string {
  for (let i = 0; i < 8; i++) {
    let next: string;
    try {
      next = decodeURIComponent(name);
    } catch {
      next = name.replace(/%([0-7][0-9a-f])/gi, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
    }
    if (next === name) break;
    name = next;
  }
  return name;
}

/**
 * What prints as nothing (spaces, controls such as NUL, format and default-ignorable characters: a
 * soft hyphen, a zero-width space), and what prints as a dot or reads as one (`,`, an ideographic
 * full stop and its fullwidth and halfwidth forms).
 */
const PRINTS_AS_NOTHING = /[\s\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}]/gu;
const READS_AS_A_DOT = /[,\u3002\uff0e\uff61]/gu;

/** A name without case, accents, what prints as nothing, and with what reads as a dot as one dot. */
function folded(text: string): string {
  return text
    .normalize('NFKD')
    .replace(/\p{M}/gu, '')
    .replace(PRINTS_AS_NOTHING, '')
    .toLowerCase()
    .replace(READS_AS_A_DOT, '.')
    .replace(/\.{2,}/g, '.');
}

/**
 * Punycode labels (`xn--...`, what a browser shows as a name in another script) as the letters they
 * stand for; a label that is no valid punycode stays as written.
 */
function punycodeDecoded(text: string): string {
  return text.replace(/(?<![^./\\:@])xn--[a-z0-9-]+/g, (label) => domainToUnicode(label) || label);
}

/**
 * The ways a person may read a name, each as path segments in one spelling: without case, accents,
 * percent-escapes, punycode, spaces and what prints as nothing, with `,` and full stops of other
 * scripts as dots, repeated dots as one, and look-alike letters as the letters they look like; the
 * first segment read as a host (without a user `x@` or what follows an `@`, a port `:443` or a bare
 * `:`, leading and trailing dots) and, when the name starts with a scheme (`https://`), read with it
 * and without. Names stored before checkWitnessName's rules are read the same way.
 */
function readingsOf(name: string): string[] {
  const plain = folded(punycodeDecoded(folded(percentDecoded(name)))).replace(/\\/g, '/');
  const lookedAt = (text: string) =>
    LOOK_ALIKE_PAIRS.reduce((t, [pair, letter]) => t.replace(pair, letter), [...text].map((c) => LOOK_ALIKES[c] ?? c).join(''));
  // A scheme with or without its slashes (`https:baton.test` is host baton.test to a URL parser).
  const withoutScheme = plain.replace(/^[a-z][a-z0-9+.-]*:\/*/, '');
  // What a URL parser leaves out of host and path: a query, a fragment, parameters after `;`.
  const cut = (text: string) => text.split(/[?#;]/)[0]!;
  const readings = new Set<string>();
  for (const text of new Set([plain, withoutScheme, cut(plain), cut(withoutScheme)])) {
    const [first = '', ...rest] = text.split('/').filter((part) => part !== '');
    const path = rest.map((part) => part.replace(/\.+$/, ''));
    // `x@host` is host to a browser, but a person may read the part before the `@` as the host too.
    const hosts = first.includes('@') ? [first, first.slice(first.lastIndexOf('@') + 1), first.slice(0, first.indexOf('@'))] : [first];
    for (const host of hosts) readings.add(lookedAt([host.replace(/^\.+/, '').replace(/(?:\.|:\d*)+$/, ''), ...path].join('/')));
  }
  return [...readings];
}

/**
 * Verdicts and log-name readings already reached. Every checkpoint and proof served judges each of
 * its stored cosignature lines, and a stored line never changes, so each (witness name, log name) is
 * read once; the maps are bounded (a full one forgets its oldest entry) as any audit key can post
 * new names.
 */
const MAX_REMEMBERED_VERDICTS = 4096;
const MAX_REMEMBERED_LOG_NAMES = 64;
const verdicts = new Map<string, boolean>();
const logNameReadings = new Map<string, readonly string[]>();

function remembered<V>(map: Map<string, V>, max: number, key: string, reach: () => V): V {
  const known = map.get(key);
  if (known !== undefined) return known;
  const value = reach();
  if (map.size >= max) map.delete(map.keys().next().value!);
  map.set(key, value);
  return value;
}

/**
 * Whether a witness name reads, to a person, as this service's log (its name, `<name>/baton`, a
 * tenant's `<name>/baton/<tenant>`) or as a name under it: a cosignature line so named would read
 * as the log's own. Compared as a reader would (readingsOf): `baton.test.`, `baton.test//baton/t`
 * (an outside review) and `baton.test:443/baton/t` (an outside probe) were taken. The log's name is
 * read the same way, and every reading of it counts: under a BATON_TLOG_NAME of
 * `https://baton.test`, `baton.test/x` reads as the log's own too.
 */
export function readsAsTheLog(witnessName: string, origin: string): boolean {
  const logName = logNameOf(origin) ?? origin;
  // Names hold no newline (a note's lines would not parse), so the key is unambiguous.
  return remembered(verdicts, MAX_REMEMBERED_VERDICTS, `${logName}\n${witnessName}`, () => {
    const logReadings = remembered(logNameReadings, MAX_REMEMBERED_LOG_NAMES, logName, () => readingsOf(logName));
    return readingsOf(witnessName).some((name) => logReadings.some((log) => name === log || name.startsWith(`${log}/`)));
  });
}

/** The names the stored logs carry: the one the integrator wrote last, and any others, with how many tenants' logs carry each. */
export interface StoredLogNames {
  readonly current: string;
  readonly others: readonly { readonly name: string; readonly tenants: number }[];
}

/**
 * The names the stored logs carry, checked against BATON_TLOG_NAME: a start that would rename them
 * fails. A log's name is the first line of every checkpoint and the name of its verifier keys, so
 * a renamed log went on growing under another origin: auditors and witnesses that pinned the old
 * one could check nothing more, no proof links the old checkpoints to the new, and a tenant with no
 * new receipt kept serving a checkpoint its published keys no longer verified.
 *
 * A database renamed before this check may hold both names: the busy tenants' logs under the new
 * one, idle ones under the old. The start then goes on only under the name written last (going back
 * would rename the busy logs again), and says which tenants' logs still carry another. Undefined:
 * no log has a checkpoint yet (the first start names them).
 */
export async function storedLogNames(db: Db, configured: string): Promise<StoredLogNames | undefined> {
  const byName = new Map<string, { tenants: number; last: number }>();
  for (const head of await latestCheckpointNotes(db)) {
    const name = logNameOf(head.note.slice(0, head.note.indexOf('\n')));
    if (name === undefined) continue; // not a log this service named: nothing to rename
    const seen = byName.get(name) ?? { tenants: 0, last: 0 };
    byName.set(name, { tenants: seen.tenants + 1, last: Math.max(seen.last, head.createdAt.getTime()) });
  }
  if (byName.size === 0) {
    // No checkpoint read; a name the log_name table holds still decides (it is written with the first).
    const fixed = await fixedLogName(db);
    if (fixed !== undefined && fixed !== configured) {
      throw new Error(`${fixedNameRefusal(configured, fixed)}. Start with BATON_TLOG_NAME=${fixed} (a new name needs a new database)`);
    }
    return undefined;
  }
  const [current] = [...byName.entries()].sort((a, b) => b[1].last - a[1].last)[0]!;
  const others = [...byName.entries()].filter(([name]) => name !== current).map(([name, v]) => ({ name, tenants: v.tenants }));
  if (configured !== current) {
    const mixed = others.length === 0 ? '' : ` (and ${others.map((o) => `${o.tenants} under "${o.name}"`).join(', ')})`;
    throw new Error(
      `BATON_TLOG_NAME is "${configured}", but the transparency logs in this database were last written under the name "${current}"${mixed}. ` +
        `A log's name is in every checkpoint and names its keys: renamed, auditors and witnesses that pinned "${current}" could check nothing more, ` +
        `and no proof could link the old checkpoints to the new. Start with BATON_TLOG_NAME=${current} (a new name needs a new database)`,
    );
  }
  return { current, others };
}

/** Why a node under BATON_TLOG_NAME `configured` may sign no checkpoint here: the first one fixed `fixed`. */
export function fixedNameRefusal(configured: string, fixed: string): string {
  return `BATON_TLOG_NAME is "${configured}", but this database's transparency logs are named "${fixed}" (fixed by their first checkpoint)`;
}

/** The note verifier keys of a tenant's log: one per published service key, current first. */
export function logVerifierKeys(origin: string, keys: readonly PublishedServiceKey[]): VerifierKey[] {
  return keys.map((k) => verifierKey(origin, NOTE_ED25519, k.publicKey));
}

/** The leaf hash of a service receipt: its JWS is the log entry. */
export function serviceReceiptLeafHash(jws: string): Hash {
  return leafHash(utf8(jws));
}

/** Signs the checkpoint note of a tree (size, root) under the tenant's origin. */
export function signCheckpoint(signer: ServiceSigner, origin: string, size: number, root: Hash): string {
  return signNote(formatCheckpoint({ origin, size, rootHash: root, extensions: [] }), [signer.noteSigner(origin)]);
}

// ---------------------------------------------------------------------------
// Appending (integrator only, under its lock).

/** The right edge of one tile level: the hashes of its last, partial tile. */
interface Edge {
  start: number;
  hashes: Hash[];
}

/** A tree's right edge per tile level (what appending needs), kept by the integrator between rounds. */
export type TreeEdges = readonly { readonly start: number; readonly hashes: readonly Hash[] }[];

/** Hashes at tile level `level` in a tree of `size` leaves. */
const countAt = (size: number, level: number): number => Math.floor(size / TILE_WIDTH ** level);

/**
 * Appends leaf hashes to a tree of `size` leaves: the hash rows to store
 * (full tiles' roots one level up) and the new root. Reads only the right
 * edge (at most 255 hashes per level), since the root of a tree needs no
 * hash that lies in a full tile.
 */
export async function appendLeaves(
  db: Db,
  tenantId: string,
  size: number,
  leaves: readonly Hash[],
  known?: TreeEdges,
): Promise<{ size: number; root: Hash; hashes: { level: number; hashIndex: number; hash: Hash }[]; edges: TreeEdges }> {
  // A copy: the caller's edges stay those of `size` if this round rolls back.
  const edges: Edge[] = (known ?? []).map((e) => ({ start: e.start, hashes: [...e.hashes] }));
  const loadEdge = async (level: number): Promise<Edge> => {
    const count = countAt(size, level);
    const start = count - (count % TILE_WIDTH);
    const hashes = await hashesAt(db, tenantId, level, start, count);
    if (hashes.length !== count - start) throw corruptLog(tenantId, `tile level ${level} misses hashes below ${count}`);
    return { start, hashes };
  };
  const newHashes: { level: number; hashIndex: number; hash: Hash }[] = [];
  const newSize = size + leaves.length;
  // Every level the grown tree has: the root reads each level's right edge.
  for (let level = 0; level === 0 || countAt(newSize, level) > 0; level++) edges[level] ??= await loadEdge(level);
  edges[0]!.hashes.push(...leaves);
  for (let level = 0; edges[level] !== undefined; level++) {
    const edge = edges[level]!;
    while (edge.hashes.length >= TILE_WIDTH) {
      const full = edge.hashes.splice(0, TILE_WIDTH);
      const above = (edges[level + 1] ??= await loadEdge(level + 1));
      const hashIndex = edge.start / TILE_WIDTH;
      edge.start += TILE_WIDTH;
      const hash = tileRoot(full);
      above.hashes.push(hash);
      newHashes.push({ level: level + 1, hashIndex, hash });
    }
  }
  const root = treeRootFromTiles(newSize, (t) => {
    const edge = edges[t.level];
    if (edge === undefined || t.index * TILE_WIDTH !== edge.start || t.width > edge.hashes.length)
      throw corruptLog(tenantId, `the root of ${newSize} leaves needs tile ${t.level}/${t.index} off the right edge`);
    return concat(edge.hashes.slice(0, t.width));
  });
  return { size: newSize, root, hashes: newHashes, edges };
}

function corruptLog(tenantId: string, reason: string): BatonError {
  return new BatonError('INTERNAL', {
    message: `The transparency log of tenant ${tenantId} is inconsistent: ${reason}.`,
    suggestion: 'Restore the log tables from a backup; never edit log rows by hand.',
    details: { reason },
  });
}

function concat(hashes: readonly Hash[]): Uint8Array {
  const out = new Uint8Array(hashes.length * 32);
  hashes.forEach((h, i) => out.set(h, i * 32));
  return out;
}

// ---------------------------------------------------------------------------
// Reading.

/** The bytes of a tile, or undefined when the stored tree does not hold it yet. */
export async function readTile(db: Db, tenantId: string, t: TileCoordinates): Promise<Uint8Array | undefined> {
  const from = t.index * TILE_WIDTH;
  const hashes = await hashesAt(db, tenantId, t.level, from, from + t.width);
  return hashes.length === t.width ? concat(hashes) : undefined;
}

class NeedTile {
  constructor(readonly tile: TileCoordinates) {}
}

/**
 * Runs a pure computation over the tiles of a tree of `size` leaves,
 * fetching each tile it reads on first use: the computation is rerun with
 * what it asked for (a proof reads a few tiles per level, so a few reruns).
 */
export async function withTiles<T>(
  db: Db,
  tenantId: string,
  size: number,
  compute: (source: ReturnType<typeof subtreeHashesFromTiles>) => T,
): Promise<T> {
  const fetched = new Map<string, Uint8Array>();
  for (;;) {
    try {
      return compute(
        subtreeHashesFromTiles(size, (t) => {
          const bytes = fetched.get(`${t.level}/${t.index}/${t.width}`);
          if (bytes === undefined) throw new NeedTile(t);
          return bytes;
        }),
      );
    } catch (e) {
      if (!(e instanceof NeedTile)) throw e;
      const bytes = await readTile(db, tenantId, e.tile);
      if (bytes === undefined) throw corruptLog(tenantId, `tile ${e.tile.level}/${e.tile.index} of width ${e.tile.width} is missing`);
      fetched.set(`${e.tile.level}/${e.tile.index}/${e.tile.width}`, bytes);
    }
  }
}

export interface ServedCheckpoint {
  readonly size: number;
  readonly root: Hash;
  /** The signed note with every witness cosignature stored for it. */
  readonly note: string;
}

/**
 * A tenant's checkpoint, latest or of one size, with its cosignatures. An
 * empty log has no stored checkpoint: its size-0 checkpoint is signed on
 * demand (Ed25519 is deterministic, so every node serves the same note).
 */
export async function servedCheckpoint(
  db: Db,
  signer: ServiceSigner,
  origin: string,
  tenantId: string,
  size?: number,
): Promise<ServedCheckpoint | undefined> {
  const row =
    size === undefined ? await latestCheckpoint(db, tenantId) : size === 0 ? undefined : await checkpointOfSize(db, tenantId, size);
  if (row === undefined) {
    if (size !== undefined && size !== 0) return undefined;
    return { size: 0, root: EMPTY_ROOT, note: signCheckpoint(signer, origin, 0, EMPTY_ROOT) };
  }
  // A signed note ends in its signature lines, so cosignature lines (checked when stored) append.
  const lines = (await cosignatureLines(db, tenantId, row.treeSize)).filter((line) => servableCosignatureLine(line, origin));
  return { size: row.treeSize, root: row.rootHash, note: row.note + lines.map((l) => `${l}\n`).join('') };
}

/**
 * Whether a stored cosignature line (`— <name> <signature>`) names its witness as the log takes one
 * today. Lines stored before witness names were limited may not: two with 130 KB names took the
 * served note past the 256 KiB every client reads, and names that read as the log's own were taken
 * until the check above: such a line is kept but no longer served.
 */
function servableCosignatureLine(line: string, origin: string): boolean {
  const name = line.slice(2, line.lastIndexOf(' '));
  return witnessNameProblem(name) === undefined && !readsAsTheLog(name, origin);
}

/** The tlog-proof bundle of leaf `index` under a served checkpoint. */
export async function inclusionBundle(db: Db, tenantId: string, index: number, checkpoint: ServedCheckpoint): Promise<string> {
  const proof = await withTiles(db, tenantId, checkpoint.size, (source) => inclusionProof(index, checkpoint.size, source));
  return formatTlogProof({ index, proof, checkpoint: checkpoint.note });
}

/** The consistency proof from `oldSize` to `newSize` (both at most the stored tree's size). */
export async function consistencyHashes(db: Db, tenantId: string, oldSize: number, newSize: number): Promise<Hash[]> {
  return withTiles(db, tenantId, newSize, (source) => consistencyProof(oldSize, newSize, source));
}
