/**
 * The hostile-request corpus: its file format, loading, and turning a case
 * into a request against a built World.
 *
 * A case is data: method, path, auth, headers, and a body given as text,
 * base64, or generated at run time from parts (so megabyte bodies and
 * 10,000-level nesting are not checked in). Placeholders {{tenantA}},
 * {{tenantB}}, {{revokedKeyId}}, {{approvalA}} (A's pending approval) and {{key:A.verify}} name values only a
 * running world has, {{repeat:a:100000}} expands to a long run of one
 * character; everything else (keys, records, hashes) is fixed.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Req, World } from './harness.js';

export const CORPUS_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', 'corpus');

export type AuthRef =
  | 'none'
  | 'admin'
  | `A.${'issue' | 'verify' | 'report' | 'audit' | 'approve' | 'all'}`
  | `B.${'issue' | 'verify' | 'report' | 'audit' | 'approve' | 'all'}`
  | 'A.revoked';

/** Text, base64 bytes, or `unit` repeated `count` times. */
export type Part = { text: string } | { base64: string } | { repeat: string; count: number };

export interface CorpusCase {
  /** Unique: "<file>/<route>/<what>". */
  name: string;
  /** The Hono route it aims at, "METHOD /pattern" as in createApp(deps).routes; null for an unrouted method. */
  route: string | null;
  method: string;
  path: string;
  auth?: AuthRef;
  /** Header values may hold placeholders. A content-type of "" means: send none. */
  headers?: Record<string, string>;
  /** Generated header values (a 200 KB X-DRS-Bundle). */
  header_parts?: Record<string, Part[]>;
  body_text?: string;
  body_base64?: string;
  body_parts?: Part[];
  /** Streamed without Content-Length, so only reading shows the size. */
  body_stream?: { chunk_bytes: number; total_bytes: number; fill_byte: number };
  /** Sent over a real socket: request line from method/path, then these header lines, then body_text. */
  raw_http?: { lines: string[]; body_text?: string };
  expect_status_class: '4xx';
  /** When given, the status must be one of these. */
  expect_status?: number[];
  /** When given, error.code must be one of these. */
  expect_code?: string[];
  /** For streamed bodies: the service may read at most this many bytes before refusing. */
  expect_max_bytes_read?: number;
  note?: string;
}

export interface CorpusFile {
  description: string;
  cases: CorpusCase[];
}

export function loadCorpus(dir = CORPUS_DIR): Map<string, CorpusFile> {
  const out = new Map<string, CorpusFile>();
  for (const f of readdirSync(dir)
    .filter((n) => n.endsWith('.json'))
    .sort()) {
    out.set(f, JSON.parse(readFileSync(join(dir, f), 'utf8')) as CorpusFile);
  }
  return out;
}

export function keyFor(world: World, ref: AuthRef): string | undefined {
  if (ref === 'none') return undefined;
  if (ref === 'admin') return world.svc.adminKey;
  if (ref === 'A.revoked') return world.A.revokedKey;
  const [tenant, scope] = ref.split('.') as ['A' | 'B', keyof World['A']['keys']];
  return world[tenant].keys[scope];
}

export function fill(text: string, world: World): string {
  return text
    .replaceAll('{{tenantA}}', world.A.id)
    .replaceAll('{{tenantB}}', world.B.id)
    .replaceAll('{{revokedKeyId}}', world.A.revokedKeyId)
    .replaceAll('{{approvalA}}', world.approvalId)
    .replace(/\{\{repeat:(.):(\d+)\}\}/g, (_, unit: string, count: string) => unit.repeat(Number(count)))
    .replace(/\{\{key:([A-Za-z.]+)\}\}/g, (_, ref: string) => keyFor(world, ref as AuthRef) ?? '');
}

export function renderParts(parts: readonly Part[], world: World): Buffer {
  return Buffer.concat(
    parts.map((p) => {
      if ('text' in p) return Buffer.from(fill(p.text, world), 'utf8');
      if ('base64' in p) return Buffer.from(p.base64, 'base64');
      return Buffer.from(p.repeat.repeat(p.count), 'utf8');
    }),
  );
}

export function caseRequest(c: CorpusCase, world: World): Req {
  const path = fill(c.path, world);
  if (c.raw_http) {
    const key = keyFor(world, c.auth ?? 'none');
    const body = c.raw_http.body_text === undefined ? '' : fill(c.raw_http.body_text, world);
    const lines = c.raw_http.lines.map((l) => fill(l, world).replace('{{bodyLength}}', String(Buffer.byteLength(body))));
    const head = [
      `${c.method} ${path} HTTP/1.1`,
      'Host: localhost',
      'Connection: close',
      ...(key ? [`Authorization: Bearer ${key}`] : []),
      ...lines,
    ];
    return { method: c.method, path, rawHttp: Buffer.from(`${head.join('\r\n')}\r\n\r\n${body}`, 'utf8') };
  }
  const headers: Record<string, string> = {};
  const key = keyFor(world, c.auth ?? 'none');
  if (key) headers['authorization'] = `Bearer ${key}`;
  let body: Uint8Array | undefined;
  if (c.body_text !== undefined) body = Buffer.from(fill(c.body_text, world), 'utf8');
  else if (c.body_base64 !== undefined) body = Buffer.from(c.body_base64, 'base64');
  else if (c.body_parts) body = renderParts(c.body_parts, world);
  if (body !== undefined || c.body_stream) headers['content-type'] = 'application/json';
  for (const [k, v] of Object.entries(c.headers ?? {})) {
    const name = k.toLowerCase();
    if (v === '') delete headers[name];
    else headers[name] = fill(v, world);
  }
  for (const [k, parts] of Object.entries(c.header_parts ?? {})) headers[k.toLowerCase()] = renderParts(parts, world).toString('latin1');
  return {
    method: c.method,
    path,
    headers,
    ...(body !== undefined ? { body } : {}),
    ...(c.body_stream
      ? { stream: { chunkBytes: c.body_stream.chunk_bytes, totalBytes: c.body_stream.total_bytes, fill: c.body_stream.fill_byte } }
      : {}),
  };
}
