/**
 * A reference JSON reader and an ordered JSON tree for building hostile bodies.
 *
 * The reader is the oracle's own idea of an acceptable request body, written
 * from RFC 8259 and independent of src/service/body.ts: valid UTF-8 (a BOM is
 * not whitespace), exactly one value, no duplicate member names in any object,
 * at most MAX_DEPTH levels of nesting. The tree keeps member order and allows
 * duplicates and raw text, so mutations can write what JSON.stringify never
 * would (1e400, a repeated key, "\u0061" spelled out).
 */

/** The nesting the service documents (src/service/body.ts refuses deeper bodies). */
export const MAX_DEPTH = 64;

export type JNode =
  | { readonly t: 'obj'; readonly entries: readonly JEntry[] }
  | { readonly t: 'arr'; readonly items: readonly JNode[] }
  | { readonly t: 'str'; readonly v: string }
  | { readonly t: 'num'; readonly raw: string }
  | { readonly t: 'lit'; readonly v: boolean | null }
  /** Written verbatim: lets a mutation put anything at all in a value position. */
  | { readonly t: 'raw'; readonly text: string };

export interface JEntry {
  readonly key: string;
  /** How the key is spelled on the wire (an escaped spelling of `key`); JSON.stringify(key) when absent. */
  readonly rawKey?: string;
  readonly value: JNode;
}

export type ParseResult = { ok: true; node: JNode } | { ok: false; reason: string };

const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export function parseStrict(input: Uint8Array | string, maxDepth = MAX_DEPTH): ParseResult {
  let text: string;
  if (typeof input === 'string') text = input;
  else {
    try {
      text = strictUtf8.decode(input);
    } catch {
      return { ok: false, reason: 'invalid UTF-8' };
    }
  }
  try {
    const p = new Reader(text, maxDepth);
    p.ws();
    const node = p.value(0);
    p.ws();
    if (p.i !== text.length) return { ok: false, reason: `trailing text at ${p.i}` };
    return { ok: true, node };
  } catch (e) {
    return { ok: false, reason: (e as Error).message };
  }
}

class Reader {
  i = 0;
  constructor(
    private readonly s: string,
    private readonly maxDepth: number,
  ) {}

  fail(what: string): never {
    throw new Error(`${what} at ${this.i}`);
  }

  ws(): void {
    while (this.i < this.s.length) {
      const c = this.s[this.i];
      if (c === ' ' || c === '\t' || c === '\n' || c === '\r') this.i++;
      else break;
    }
  }

  value(depth: number): JNode {
    const c = this.s[this.i];
    if (c === '{' || c === '[') {
      if (depth + 1 > this.maxDepth) this.fail('too deep');
      return c === '{' ? this.object(depth + 1) : this.array(depth + 1);
    }
    if (c === '"') return { t: 'str', v: this.string() };
    if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) return this.number();
    for (const [word, v] of [
      ['true', true],
      ['false', false],
      ['null', null],
    ] as const) {
      if (this.s.startsWith(word, this.i)) {
        this.i += word.length;
        return { t: 'lit', v };
      }
    }
    return this.fail('unexpected character');
  }

  object(depth: number): JNode {
    this.i++; // {
    const entries: JEntry[] = [];
    const seen = new Set<string>();
    this.ws();
    if (this.s[this.i] === '}') {
      this.i++;
      return { t: 'obj', entries };
    }
    for (;;) {
      this.ws();
      if (this.s[this.i] !== '"') this.fail('expected a member name');
      const key = this.string();
      if (seen.has(key)) this.fail(`duplicate member name ${JSON.stringify(key)}`);
      seen.add(key);
      this.ws();
      if (this.s[this.i] !== ':') this.fail('expected :');
      this.i++;
      this.ws();
      entries.push({ key, value: this.value(depth) });
      this.ws();
      const c = this.s[this.i++];
      if (c === '}') return { t: 'obj', entries };
      if (c !== ',') this.fail('expected , or }');
    }
  }

  array(depth: number): JNode {
    this.i++; // [
    const items: JNode[] = [];
    this.ws();
    if (this.s[this.i] === ']') {
      this.i++;
      return { t: 'arr', items };
    }
    for (;;) {
      this.ws();
      items.push(this.value(depth));
      this.ws();
      const c = this.s[this.i++];
      if (c === ']') return { t: 'arr', items };
      if (c !== ',') this.fail('expected , or ]');
    }
  }

  string(): string {
    this.i++; // "
    let out = '';
    for (;;) {
      if (this.i >= this.s.length) this.fail('unterminated string');
      const c = this.s[this.i]!;
      const code = c.charCodeAt(0);
      if (c === '"') {
        this.i++;
        return out;
      }
      if (code < 0x20) this.fail('control character in string');
      if (c !== '\\') {
        out += c;
        this.i++;
        continue;
      }
      const e = this.s[this.i + 1];
      this.i += 2;
      const simple: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
      if (e !== undefined && e in simple) out += simple[e];
      else if (e === 'u') {
        const h = this.s.slice(this.i, this.i + 4);
        if (!/^[0-9A-Fa-f]{4}$/.test(h)) this.fail('bad \\u escape');
        out += String.fromCharCode(parseInt(h, 16));
        this.i += 4;
      } else this.fail('bad escape');
    }
  }

  number(): JNode {
    const m = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/.exec(this.s.slice(this.i, this.i + 4096));
    if (!m) this.fail('bad number');
    this.i += m[0].length;
    return { t: 'num', raw: m[0] };
  }
}

// ---------------------------------------------------------------- values

/** A JS value as the service would see it after JSON.parse (numbers may be ±Infinity). */
export function toPlain(node: JNode): unknown {
  switch (node.t) {
    case 'obj': {
      const o: Record<string, unknown> = {};
      // defineProperty: a member named "__proto__" stays a plain member here.
      for (const e of node.entries)
        Object.defineProperty(o, e.key, { value: toPlain(e.value), enumerable: true, writable: true, configurable: true });
      return o;
    }
    case 'arr':
      return node.items.map(toPlain);
    case 'str':
      return node.v;
    case 'num':
      return Number(node.raw);
    case 'lit':
      return node.v;
    case 'raw':
      return JSON.parse(node.text) as unknown;
  }
}

export function fromValue(v: unknown): JNode {
  if (v === null || typeof v === 'boolean') return { t: 'lit', v };
  if (typeof v === 'number') return { t: 'num', raw: JSON.stringify(v) };
  if (typeof v === 'string') return { t: 'str', v };
  if (Array.isArray(v)) return { t: 'arr', items: v.map(fromValue) };
  if (typeof v === 'object')
    return { t: 'obj', entries: Object.entries(v as Record<string, unknown>).map(([key, value]) => ({ key, value: fromValue(value) })) };
  throw new TypeError(`not JSON: ${typeof v}`);
}

export function serialize(node: JNode): string {
  switch (node.t) {
    case 'obj':
      return `{${node.entries.map((e) => `${e.rawKey ?? JSON.stringify(e.key)}:${serialize(e.value)}`).join(',')}}`;
    case 'arr':
      return `[${node.items.map(serialize).join(',')}]`;
    case 'str':
      return JSON.stringify(node.v);
    case 'num':
      return node.raw;
    case 'lit':
      return String(node.v);
    case 'raw':
      return node.text;
  }
}

export const raw = (text: string): JNode => ({ t: 'raw', text });

// ---------------------------------------------------------------- paths

export type JPath = readonly (string | number)[];

/** Every value position in the tree, the root included ([]), parents before children. */
export function allPaths(node: JNode, prefix: JPath = []): JPath[] {
  const out: JPath[] = [prefix];
  if (node.t === 'obj') node.entries.forEach((e, i) => out.push(...allPaths(e.value, [...prefix, i])));
  if (node.t === 'arr') node.items.forEach((item, i) => out.push(...allPaths(item, [...prefix, i])));
  return out;
}

/** Paths use positions (entry index in objects) so duplicate keys stay addressable. */
export function getAt(node: JNode, path: JPath): JNode | undefined {
  let cur: JNode | undefined = node;
  for (const step of path) {
    if (!cur) return undefined;
    if (cur.t === 'obj') cur = cur.entries[step as number]?.value;
    else if (cur.t === 'arr') cur = cur.items[step as number];
    else return undefined;
  }
  return cur;
}

/** A human name for a position path: receipts[1], policy.max_calls. */
export function pathName(node: JNode, path: JPath): string {
  let cur: JNode | undefined = node;
  let out = '';
  for (const step of path) {
    if (cur?.t === 'obj') {
      const e: JEntry | undefined = cur.entries[step as number];
      out += out ? `.${e?.key}` : String(e?.key);
      cur = e?.value;
    } else if (cur?.t === 'arr') {
      out += `[${step}]`;
      cur = cur.items[step as number];
    }
  }
  return out || '(body)';
}

/** Returns a copy with `fn` applied to the node at `path`. */
export function updateAt(node: JNode, path: JPath, fn: (n: JNode) => JNode): JNode {
  if (path.length === 0) return fn(node);
  const [step, ...rest] = path as [number, ...number[]];
  if (node.t === 'obj') {
    return { t: 'obj', entries: node.entries.map((e, i) => (i === step ? { ...e, value: updateAt(e.value, rest, fn) } : e)) };
  }
  if (node.t === 'arr') return { t: 'arr', items: node.items.map((item, i) => (i === step ? updateAt(item, rest, fn) : item)) };
  return node;
}

/** Removes the member or item at `path` (not the root). */
export function deleteAt(node: JNode, path: JPath): JNode {
  if (path.length === 0) return node;
  const parent = path.slice(0, -1);
  const last = path[path.length - 1] as number;
  return updateAt(node, parent, (p) => {
    if (p.t === 'obj') return { t: 'obj', entries: p.entries.filter((_, i) => i !== last) };
    if (p.t === 'arr') return { t: 'arr', items: p.items.filter((_, i) => i !== last) };
    return p;
  });
}

/** Adds a member (duplicates allowed) at the end of the object at `path`. */
export function addMember(node: JNode, path: JPath, entry: JEntry, atStart = false): JNode {
  return updateAt(node, path, (p) => (p.t === 'obj' ? { t: 'obj', entries: atStart ? [entry, ...p.entries] : [...p.entries, entry] } : p));
}

/** Paths of the objects in the tree. */
export const objectPaths = (node: JNode): JPath[] => allPaths(node).filter((p) => getAt(node, p)?.t === 'obj');

/** Paths of the members of objects (not array items, not the root). */
export function memberPaths(node: JNode): JPath[] {
  return allPaths(node).filter((p) => p.length > 0 && getAt(node, p.slice(0, -1))?.t === 'obj');
}

const JWS_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;
export const isJwsLike = (s: string): boolean => JWS_SHAPE.test(s) && s.length > 40;

/** Paths of string values that look like compact JWS. */
export const jwsPaths = (node: JNode): JPath[] =>
  allPaths(node).filter((p) => {
    const n = getAt(node, p);
    return n?.t === 'str' && isJwsLike(n.v);
  });

export function deepEqual(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true;
  if (typeof a === 'number' && typeof b === 'number') return a === b; // 0 and -0 parse to equal values
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every(
    (k) => Object.prototype.hasOwnProperty.call(b, k) && deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
  );
}
