/**
 * Resource URIs and the patterns in `allowed_resources`.
 *
 * A pattern grants a set of URIs, and that grant must survive whatever the
 * tool server later does with the URI. So URIs are compared in a strict
 * RFC 3986 normal form, and anything a server might resolve differently from
 * a plain string comparison is refused outright rather than normalised:
 *
 * Refused (BatonError INVALID_FIELD):
 * - empty, longer than 2048 characters, or no `scheme:`;
 * - control characters, whitespace, any non-ASCII character (percent-encode it),
 *   backslashes, a fragment (`#`), a literal `*` (reserved for patterns; use %2A);
 * - dot segments anywhere after the authority: `.`, `..`, and any segment of
 *   dots alone once whitespace and invisible characters are dropped (`...`,
 *   `. .`, `..%20`: Windows trims trailing dots and spaces), also with
 *   `;params` (`..;` is `..` to some servers);
 * - an empty path segment (`a//b`, `a//`): a server that joins the rest of
 *   the path to a base folder reads `//etc/passwd` (or `//`) as absolute;
 * - percent-encoded `/`, `.`, `\` (%2F %2E %5C, any case), any double encoding
 *   (`%25` and two hex digits: a server that decodes twice reads `%2520` as a
 *   space), and malformed `%XX`;
 * - percent-encoded bytes that are not UTF-8 (overlong `%C0%AE` is a dot), or that
 *   decode, after NFKC, to a slash, backslash, control character or a dot segment
 *   (fullwidth `%EF%BC%8E%EF%BC%8E` is `..` after NFKC, `..%C2%A0` is `.. `);
 * - userinfo (`user@host`); a host other than letters, digits, `- . _ ~` or an
 *   IP literal `[...]` (so no percent-encoding there); a port that is not 0..65535.
 * The segment checks apply to the query as well as the path (split on `/`):
 * stricter than RFC 3986, but a lenient server can resolve either.
 *
 * Normalised: scheme and host lowercased; `%XX` of unreserved characters
 * (ALPHA DIGIT - _ ~; not `.`, which is refused) decoded, other `%XX` hex
 * uppercased; the port's leading zeros dropped, an empty port or the scheme's
 * default port (http/ws 80, https/wss 443) removed. Path case is kept.
 *
 * Patterns: `*` alone (everything), an exact URI, or a prefix ending `/*`.
 * A prefix covers the URIs with the same scheme and authority whose path
 * continues past the prefix path: `mcp://tools/a/*` covers `mcp://tools/a/x`
 * and `mcp://tools/a/x/y` (with any query), but NOT the bare `mcp://tools/a`
 * nor `mcp://tools/a/` — a prefix grants what lies under a collection, not the
 * collection itself; list `mcp://tools/a` as well to grant it. A prefix has no
 * query and needs a path (`mcp://*` is refused: use `*`, or name the host).
 */

import { BatonError } from './errors.js';

export const MAX_RESOURCE_URI_LENGTH = 2048;

const DEFAULT_PORTS: Readonly<Record<string, string>> = { http: '80', https: '443', ws: '80', wss: '443' };

interface UriParts {
  readonly scheme: string;
  /** null when the URI has no `//authority`; '' for an empty one (file:///x). */
  readonly authority: string | null;
  readonly path: string;
  readonly query: string | null;
}

export type ResourcePattern =
  | { readonly kind: 'all' }
  | { readonly kind: 'exact'; readonly uri: string }
  | { readonly kind: 'prefix'; readonly scheme: string; readonly authority: string | null; readonly path: string };

function clip(s: string): string {
  return s.length > 120 ? `${s.slice(0, 120)}…` : s;
}

function refuse(uri: string, reason: string): never {
  throw new BatonError('INVALID_FIELD', {
    message: `The resource URI ${JSON.stringify(clip(uri))} is refused because ${reason}.`,
    suggestion: 'Send an absolute RFC 3986 URI without dot segments, encoded slashes or dots, backslashes, whitespace or a fragment.',
    details: { field: 'resource_uri', reason },
  });
}

const SCHEME = /^([A-Za-z][A-Za-z0-9+.-]*):/;
// After the scheme: unreserved, sub-delims except '*', ':', '@', '/', '?', '%'.
// '[' and ']' only appear in an IP-literal host and are checked there.
const REST_CHARS = /^[A-Za-z0-9\-._~!$&'()+,;=:@/?%[\]]*$/;
const PCT_TRIPLET = /%([0-9A-Fa-f]{2})/g;
const REG_NAME = /^[a-z0-9\-._~]*$/;
const IP_LITERAL = /^\[[0-9a-f:.]+\]$/;
const UNRESERVED_DECODABLE = /^[A-Za-z0-9\-_~]$/;
const UTF8 = new TextDecoder('utf-8', { fatal: true });

function checkCharacters(uri: string): void {
  for (const ch of uri) {
    const code = ch.codePointAt(0) ?? 0;
    if (code <= 0x20 || (code >= 0x7f && code <= 0x9f)) refuse(uri, 'it contains whitespace or a control character');
    if (code > 0x7e) refuse(uri, 'it contains a non-ASCII character (percent-encode it as UTF-8)');
    if (ch === '\\') refuse(uri, 'it contains a backslash');
  }
}

function checkPercentEncoding(uri: string, rest: string): void {
  // Every '%' must start a triplet; count them against the triplets found.
  const percents = rest.split('%').length - 1;
  const triplets = [...rest.matchAll(PCT_TRIPLET)];
  if (percents !== triplets.length) refuse(uri, 'it contains a malformed percent-encoding (a % not followed by two hex digits)');
  // A server that decodes twice would turn %252E into a dot and %2520 into a space: refuse them all.
  if (/%25[0-9a-f]{2}/i.test(rest)) refuse(uri, 'it contains a double percent-encoding (%25 and two hex digits, e.g. %252E)');
  for (const t of triplets) {
    const hex = (t[1] ?? '').toUpperCase();
    if (hex === '2F' || hex === '2E' || hex === '5C') {
      refuse(uri, `it contains a percent-encoded ${hex === '2F' ? 'slash' : hex === '2E' ? 'dot' : 'backslash'} (%${hex})`);
    }
  }
}

function normalizePercent(s: string): string {
  return s.replace(PCT_TRIPLET, (_m, hex: string) => {
    const ch = String.fromCharCode(parseInt(hex, 16));
    return UNRESERVED_DECODABLE.test(ch) ? ch : `%${hex.toUpperCase()}`;
  });
}

/** A segment some server resolves as `.` or `..`: dots alone, once whitespace and invisible characters are dropped. */
function isDotSegment(segment: string): boolean {
  const name = (segment.split(';', 1)[0] ?? '').replace(/[\s\p{Default_Ignorable_Code_Point}]/gu, '');
  return /^\.+$/.test(name);
}

/** Decodes one segment's %XX as UTF-8 and applies NFKC, as a lenient server might. */
function checkSegment(uri: string, segment: string): void {
  if (isDotSegment(segment)) refuse(uri, 'it contains a dot segment (. or ..)');
  if (!segment.includes('%')) return;
  const bytes: number[] = [];
  for (let i = 0; i < segment.length; i++) {
    if (segment[i] === '%') {
      bytes.push(parseInt(segment.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      bytes.push(segment.charCodeAt(i));
    }
  }
  let decoded: string;
  try {
    decoded = UTF8.decode(new Uint8Array(bytes));
  } catch {
    refuse(uri, 'its percent-encoded bytes are not valid UTF-8');
  }
  const folded = decoded.normalize('NFKC');
  if (/[/\\\u0000-\u001f\u007f-\u009f]/u.test(folded) || isDotSegment(folded)) {
    refuse(uri, 'a percent-encoded segment decodes to a slash, backslash, control character or dot segment');
  }
}

function normalizeAuthority(uri: string, scheme: string, authority: string): string {
  if (authority.includes('@')) refuse(uri, 'it contains userinfo (user@host)');
  if (authority.includes('%')) refuse(uri, 'its host is percent-encoded');
  const lower = authority.toLowerCase();
  let host: string;
  let port: string | undefined;
  if (lower.startsWith('[')) {
    const end = lower.indexOf(']');
    host = lower.slice(0, end + 1);
    const after = lower.slice(end + 1);
    if (end < 0 || !IP_LITERAL.test(host) || (after !== '' && !after.startsWith(':'))) refuse(uri, 'its IP-literal host is malformed');
    port = after === '' ? undefined : after.slice(1);
  } else {
    const colon = lower.indexOf(':');
    host = colon < 0 ? lower : lower.slice(0, colon);
    port = colon < 0 ? undefined : lower.slice(colon + 1);
    if (!REG_NAME.test(host)) refuse(uri, 'its host contains characters other than letters, digits, - . _ ~');
  }
  if (port === undefined || port === '') return host;
  if (!/^\d+$/.test(port) || Number(port) > 65535) refuse(uri, 'its port is not a number from 0 to 65535');
  const canonicalPort = String(Number(port));
  return DEFAULT_PORTS[scheme] === canonicalPort ? host : `${host}:${canonicalPort}`;
}

function parseUri(uri: string): UriParts {
  if (typeof uri !== 'string') refuse(String(uri), 'it is not a string');
  if (uri.length === 0) refuse(uri, 'it is empty');
  if (uri.length > MAX_RESOURCE_URI_LENGTH) refuse(uri, `it is longer than ${MAX_RESOURCE_URI_LENGTH} characters`);
  checkCharacters(uri);
  const schemeMatch = SCHEME.exec(uri);
  if (schemeMatch === null) refuse(uri, 'it has no scheme (such as mcp: or https:)');
  const scheme = (schemeMatch[1] ?? '').toLowerCase();
  const rest = uri.slice(schemeMatch[0].length);
  if (rest.includes('#')) refuse(uri, 'it contains a fragment (#)');
  if (rest.includes('*')) refuse(uri, 'it contains a literal * (write %2A; * is reserved for patterns)');
  if (!REST_CHARS.test(rest)) refuse(uri, 'it contains a character that must be percent-encoded');
  checkPercentEncoding(uri, rest);

  let authority: string | null = null;
  let pathAndQuery = rest;
  if (rest.startsWith('//')) {
    const end = rest.slice(2).search(/[/?]/);
    const raw = end < 0 ? rest.slice(2) : rest.slice(2, 2 + end);
    pathAndQuery = end < 0 ? '' : rest.slice(2 + end);
    authority = normalizeAuthority(uri, scheme, raw);
  }
  if (/[[\]]/.test(pathAndQuery)) refuse(uri, 'it contains [ or ] outside an IP-literal host');
  const q = pathAndQuery.indexOf('?');
  const path = normalizePercent(q < 0 ? pathAndQuery : pathAndQuery.slice(0, q));
  const query = q < 0 ? null : normalizePercent(pathAndQuery.slice(q + 1));
  // '//' would start an absolute path for a server joining the rest to a base folder.
  if (path.includes('//')) refuse(uri, 'its path has an empty segment (//)');
  // Query segments are checked too: stricter than RFC 3986, and cheap.
  for (const segment of [...path.split('/'), ...(query === null ? [] : query.split('/'))]) {
    checkSegment(uri, segment);
  }
  return { scheme, authority, path, query };
}

function formatUri(p: UriParts): string {
  return `${p.scheme}:${p.authority === null ? '' : `//${p.authority}`}${p.path}${p.query === null ? '' : `?${p.query}`}`;
}

/** Returns the normal form of a resource URI, or throws INVALID_FIELD (see module comment). */
export function normalizeResourceUri(uri: string): string {
  return formatUri(parseUri(uri));
}

/** Patterns parsed lately, by their text: a policy's entries are parsed when it is read, then again when compared. */
const parsedPatterns = new Map<string, ResourcePattern>();
/** Enough for the patterns of a few long chains; at 2,048 characters each, at most about 16 MB of text. */
const PARSED_PATTERNS_KEPT = 4_096;

/** Parses `*`, an exact URI, or a `/*` prefix; throws INVALID_FIELD for anything else. */
export function parseResourcePattern(pattern: string): ResourcePattern {
  const known = parsedPatterns.get(pattern);
  if (known !== undefined) return known;
  const parsed = Object.freeze(parsePatternText(pattern));
  if (parsedPatterns.size >= PARSED_PATTERNS_KEPT) parsedPatterns.delete(parsedPatterns.keys().next().value as string);
  parsedPatterns.set(pattern, parsed);
  return parsed;
}

function parsePatternText(pattern: string): ResourcePattern {
  if (pattern === '*') return { kind: 'all' };
  if (typeof pattern === 'string' && pattern.endsWith('/*')) {
    const base = parseUri(pattern.slice(0, -1)); // keeps the trailing '/'
    if (base.query !== null) refuse(pattern, 'a prefix pattern cannot have a query');
    if (!base.path.endsWith('/')) refuse(pattern, 'a prefix pattern needs a path ending in /* (use * alone for everything)');
    return { kind: 'prefix', scheme: base.scheme, authority: base.authority, path: base.path };
  }
  return { kind: 'exact', uri: normalizeResourceUri(pattern) };
}

export function isValidResourcePattern(pattern: string): boolean {
  try {
    parseResourcePattern(pattern);
    return true;
  } catch {
    return false;
  }
}

/** The normal form of a pattern, for display and de-duplication. */
export function normalizeResourcePattern(pattern: string): string {
  return formatResourcePattern(parseResourcePattern(pattern));
}

/** A parsed pattern written in its normal form. */
export function formatResourcePattern(p: ResourcePattern): string {
  if (p.kind === 'all') return '*';
  if (p.kind === 'exact') return p.uri;
  let text = formattedPrefixes.get(p);
  if (text === undefined)
    formattedPrefixes.set(p, (text = `${formatUri({ scheme: p.scheme, authority: p.authority, path: p.path, query: null })}*`));
  return text;
}
/** A prefix's normal form, kept with its parsed pattern (which parseResourcePattern keeps): a chain's effective limits write each once. */
const formattedPrefixes = new WeakMap<ResourcePattern, string>();

function tryParse<T>(f: () => T): T | undefined {
  try {
    return f();
  } catch {
    return undefined;
  }
}

/** A prefix pattern's path as segments: `/a/b/` is `['', 'a', 'b']` (its trailing '/' ends the last). */
function prefixSegments(path: string): string[] {
  return path.slice(0, -1).split('/');
}

/**
 * Patterns from several owners (the lists of a chain, or the entries of one list), parsed once and
 * indexed so that "which owners cover this?" costs time linear in the asked URI's length, whatever
 * the number of patterns. Comparing every pattern with every other, parsing both each time, let
 * one request of 16 records of 256 prefixes each hold the service's thread for 12 to 80 s (an
 * outside probe). Prefixes sit in a trie of path segments per scheme and authority, its edges in
 * one map (a map per node held 37 times the list's size); an index is built for one check and
 * dropped, never kept with a policy. A pattern that fails to parse covers nothing (fail closed).
 */
export class ResourcePatternIndex {
  private readonly everything: number[] = [];
  private readonly exact = new Map<string, number[]>();
  /** The trie's root node of each scheme and authority. */
  private readonly roots = new Map<string, number>();
  /** `${node}/${segment}` to the child node: a node is a number, and a segment holds no '/'. */
  private readonly edges = new Map<string, number>();
  /** Owners of a prefix pattern whose path ends at the node. */
  private readonly ownersAt = new Map<number, number[]>();
  private nodes = 0;

  /** `owner`: a small number naming who holds the pattern, reported back by ownersCovering. */
  add(owner: number, pattern: ResourcePattern): void {
    if (pattern.kind === 'all') return void this.everything.push(owner);
    if (pattern.kind === 'exact') {
      const owners = getOrAdd(this.exact, pattern.uri, (): number[] => []);
      if (owners.at(-1) !== owner) owners.push(owner);
      return;
    }
    let node = getOrAdd(this.roots, originKey(pattern.scheme, pattern.authority), () => this.nodes++);
    for (const segment of prefixSegments(pattern.path)) node = getOrAdd(this.edges, `${node}/${segment}`, () => this.nodes++);
    const owners = getOrAdd(this.ownersAt, node, (): number[] => []);
    // A list may repeat an entry: one owner once, or each walk through it pays for every copy.
    if (owners.at(-1) !== owner) owners.push(owner);
  }

  /**
   * The owners holding a pattern that covers `pattern` (set inclusion, as patternCovers), each
   * once. `strictly`: not counting a pattern equal to it.
   */
  ownersCovering(pattern: ResourcePattern, strictly = false): Set<number> {
    const found = new Set<number>();
    const take = (owners: readonly number[] | undefined) => owners?.forEach((o) => found.add(o));
    if (pattern.kind === 'all') {
      if (!strictly) take(this.everything);
      return found;
    }
    take(this.everything);
    if (pattern.kind === 'exact') {
      if (!strictly) take(this.exact.get(pattern.uri));
      const uri = parseUri(pattern.uri);
      const segments = uri.path.split('/');
      this.walkPrefixes(uri.scheme, uri.authority, segments, take, (depth) => hasMoreAfter(segments, depth));
      return found;
    }
    const segments = prefixSegments(pattern.path);
    this.walkPrefixes(pattern.scheme, pattern.authority, segments, take, (depth) => !strictly || depth < segments.length);
    return found;
  }

  /** Takes the owners of the prefixes along `segments` whose depth `counts`. */
  private walkPrefixes(
    scheme: string,
    authority: string | null,
    segments: readonly string[],
    take: (owners: readonly number[] | undefined) => void,
    counts: (depth: number) => boolean,
  ): void {
    let node = this.roots.get(originKey(scheme, authority));
    for (let depth = 0; node !== undefined; depth++) {
      const owners = this.ownersAt.get(node);
      if (owners !== undefined && counts(depth)) take(owners);
      if (depth === segments.length) return;
      node = this.edges.get(`${node}/${segments[depth]}`);
    }
  }
}

/**
 * Whether a URI path, as segments, goes on past its first `depth` segments and the '/' after them:
 * a prefix grants what lies under it (`/a/x` under `/a/*`), not `/a/` itself.
 */
function hasMoreAfter(segments: readonly string[], depth: number): boolean {
  return segments.length > depth + 1 || (segments.length === depth + 1 && segments[depth] !== '');
}

function originKey(scheme: string, authority: string | null): string {
  // Neither a scheme nor an authority holds a NUL; a missing authority differs from an empty one.
  return authority === null ? `${scheme}\u0000` : `${scheme}\u0000\u0000${authority}`;
}

function getOrAdd<K, V>(map: Map<K, V>, key: K, make: () => V): V {
  let value = map.get(key);
  if (value === undefined) map.set(key, (value = make()));
  return value;
}

/** An index of one list's patterns, all held by owner 0; a pattern that does not parse is left out (it grants nothing). */
export function indexResourceList(list: readonly string[]): ResourcePatternIndex {
  const index = new ResourcePatternIndex();
  for (const pattern of list) {
    const parsed = tryParse(() => parseResourcePattern(pattern));
    if (parsed !== undefined) index.add(0, parsed);
  }
  return index;
}

/**
 * Whether some pattern of `list` grants the URI: one pass over the list (its patterns parsed once,
 * see parseResourcePattern), the URI parsed once. False for a URI that does not parse.
 */
export function listGrants(list: readonly string[], uri: string): boolean {
  const u = tryParse(() => parseUri(uri));
  if (u === undefined) return false;
  const normal = formatUri(u);
  return list.some((entry) => {
    const p = tryParse(() => parseResourcePattern(entry));
    if (p === undefined) return false;
    if (p.kind === 'all') return true;
    if (p.kind === 'exact') return p.uri === normal;
    return u.scheme === p.scheme && u.authority === p.authority && u.path.length > p.path.length && u.path.startsWith(p.path);
  });
}

/**
 * Whether a pattern grants a URI. Never throws: an invalid pattern or URI is
 * simply not covered (fail closed); callers wanting the reason call
 * normalizeResourceUri first.
 */
export function resourceCovered(pattern: string, uri: string): boolean {
  return listGrants([pattern], uri);
}

/**
 * Whether everything childPattern grants is also granted by parentPattern
 * (set inclusion), for attenuation of allowed_resources. Invalid → false.
 */
export function patternCovers(parentPattern: string, childPattern: string): boolean {
  const child = tryParse(() => parseResourcePattern(childPattern));
  return child !== undefined && indexResourceList([parentPattern]).ownersCovering(child).size > 0;
}
