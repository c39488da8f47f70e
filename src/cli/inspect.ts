/**
 * `baton inspect <file|->`: decodes delegation records, invocations, bundles
 * and service receipts WITHOUT trusting them: header, payload, the computed
 * record hash, the issuer's did:key and its public key. Nothing is verified,
 * and the output says so on its first line.
 */
import { parseCliArgs } from './args.js';
import { parseJsonDocument, printJson, readText } from './basics.js';
import { UsageError, type CliIo } from './io.js';
import { recordHash } from '../protocol/hash.js';
import { publicKeyFromDidKey } from '../protocol/did-key.js';

export const INSPECT_HELP = `Usage: baton inspect <file|-> [--json]

Decodes signed records WITHOUT checking them: delegation records,
invocations, bundles (JSON or the base64url X-DRS-Bundle form), chains, and
service receipts (or any service answer that carries them). For each: the
header, the payload, the record hash computed from the exact JWS, the
issuer's did:key with its Ed25519 public key, and the times in UTC. The
first 1000 records are shown; past that the output says how many were
found ("total" in --json).

Everything printed is UNVERIFIED: signatures, trust, revocation and time are
not checked. To check, use baton verify (bundles and chains) or baton
service-receipt verify (service receipts).

Options:
  --json               print the decoded records as JSON
  -h, --help           show this help

Exit codes: 0 decoded, 2 no signed record found or unreadable input.`;

/** At most this many records are shown from one input; past it, the output says how many it left out. */
const MAX_SHOWN = 1000;
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

export interface InspectedRecord {
  readonly where: string;
  readonly kind: string;
  readonly hash: string;
  readonly header: unknown;
  readonly payload: unknown;
  readonly signature_bytes: number;
  readonly issuer: { readonly did: string; readonly public_key?: string; readonly problem?: string } | null;
  readonly times: Record<string, string>;
  readonly problems: readonly string[];
}

function decodePart(part: string): { value?: unknown; problem?: string } {
  try {
    return { value: JSON.parse(Buffer.from(part, 'base64url').toString('utf8')) as unknown };
  } catch {
    return { problem: 'not base64url JSON' };
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * The header of `s` when it reads as a compact JWS whose header is a JSON object naming an alg. Of
 * any length: one too long to be a record is still found, so that a check refuses it rather than
 * never sees it.
 */
export function jwsHeader(s: string): Record<string, unknown> | undefined {
  if (!COMPACT_JWS.test(s)) return undefined;
  const header = decodePart(s.slice(0, s.indexOf('.'))).value;
  return isObject(header) && typeof header['alg'] === 'string' ? header : undefined;
}

export const looksLikeJws = (s: string): boolean => jwsHeader(s) !== undefined;

function kindOf(header: unknown, payload: unknown): string {
  if (isObject(payload) && typeof payload['drs_type'] === 'string') return payload['drs_type'];
  if (isObject(header) && typeof header['kid'] === 'string') {
    const kind = isObject(payload) ? payload['baton_receipt'] : undefined;
    return `service receipt${typeof kind === 'string' ? ` (${kind})` : ''}`;
  }
  return 'signed record';
}

/** Decodes one compact JWS; never throws. */
export function inspectJws(jws: string, where: string): InspectedRecord {
  const [h = '', p = '', s = ''] = jws.split('.');
  const header = decodePart(h);
  const payload = decodePart(p);
  const problems: string[] = [];
  if (header.problem) problems.push(`header: ${header.problem}`);
  if (payload.problem) problems.push(`payload: ${payload.problem}`);
  const signatureBytes = Buffer.from(s, 'base64url').length;
  if (signatureBytes !== 64) problems.push(`signature: ${signatureBytes} bytes, an Ed25519 signature has 64`);

  let issuer: InspectedRecord['issuer'] = null;
  const iss = isObject(payload.value) ? payload.value['iss'] : undefined;
  if (typeof iss === 'string') {
    try {
      issuer = { did: iss, public_key: Buffer.from(publicKeyFromDidKey(iss)).toString('base64url') };
    } catch (e) {
      issuer = { did: iss, problem: (e as Error).message };
    }
  }
  const times: Record<string, string> = {};
  if (isObject(payload.value)) {
    for (const field of ['iat', 'nbf', 'exp']) {
      const t = payload.value[field];
      if (typeof t === 'number' && Number.isSafeInteger(t) && Math.abs(t) < 1e11) times[field] = new Date(t * 1000).toISOString();
    }
  }
  return {
    where,
    kind: kindOf(header.value, payload.value),
    hash: recordHash(jws),
    header: header.value ?? null,
    payload: payload.value ?? null,
    signature_bytes: signatureBytes,
    issuer,
    times,
    problems,
  };
}

/** A signed record found in an input, with where: its JSON path, or its line. */
export interface FoundRecord {
  readonly where: string;
  readonly jws: string;
}

/** Where a member or an item of the JSON value at `path` is, as records found are located ('' is the top). */
export const memberPath = (path: string, key: string): string => (path ? `${path}.${key}` : key);
export const itemPath = (path: string, index: number): string => `${path}[${index}]`;

/** Every string in `value` that reads as a compact JWS, with its JSON path. */
function collectJws(value: unknown, path: string, out: FoundRecord[]): void {
  if (typeof value === 'string') {
    if (looksLikeJws(value)) out.push({ where: path || '(top)', jws: value });
  } else if (Array.isArray(value)) {
    value.forEach((v, i) => collectJws(v, itemPath(path, i), out));
  } else if (isObject(value)) {
    for (const [k, v] of Object.entries(value)) collectJws(v, memberPath(path, k), out);
  }
}

/** The signed records of an input, and the JSON it was read as (undefined for JWS lines, or input that is neither). */
export interface FoundRecords {
  readonly records: readonly FoundRecord[];
  readonly document: unknown;
}

export const noSignedRecord = (name: string): UsageError =>
  new UsageError(`${name} holds no signed record (a compact JWS, or JSON or a base64url bundle carrying some)`);

/**
 * Every signed record an input holds: JWS lines, any JSON carrying JWS strings, or a base64url
 * bundle; none is a usage error (noSignedRecord). The document is returned whichever form held it,
 * so that what the records are attached to is read the same from JSON and from a bundle.
 */
export function findRecords(text: string, name: string): FoundRecords {
  // trim() also drops a leading byte-order mark, which some editors write before JSON.
  const trimmed = text.trim();
  if (trimmed === '') throw new UsageError(`${name} is empty`);
  const records: FoundRecord[] = [];
  let document: unknown;
  if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
    document = parseJsonDocument(trimmed, name);
  } else {
    const words = trimmed.split(/\s+/);
    if (words.every(looksLikeJws)) words.forEach((jws, i) => records.push({ where: `line ${i + 1}`, jws }));
    // The X-DRS-Bundle header form: base64url of the bundle JSON, read as strictly as a JSON file.
    else if (words.length === 1 && decodePart(trimmed).value !== undefined)
      document = parseJsonDocument(Buffer.from(trimmed, 'base64url').toString('utf8'), `${name} (a base64url bundle)`);
  }
  collectJws(document, '', records);
  return { records, document };
}

/** Untrusted text for a terminal: control characters (C0, DEL, C1) shown escaped, never sent raw. */
export function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

const shownOnly = (shown: number, total: number): string =>
  `SHOWN: the first ${shown} of the ${total} signed records found; the other ${total - shown} are not shown.`;

function explain(records: readonly InspectedRecord[], total: number): string {
  const lines = [
    'UNVERIFIED: decoded only. Signatures, trust, revocation and time were NOT checked.',
    '  Check with: baton verify <bundle> --trust <root did>, or baton service-receipt verify <service receipt>.',
    ...(total > records.length ? [shownOnly(records.length, total)] : []),
  ];
  records.forEach((r, i) => {
    lines.push('', printable(`[${i + 1}] ${r.where}: ${r.kind}`), `  hash       ${r.hash}`);
    if (r.issuer) {
      lines.push(printable(`  issuer     ${r.issuer.did}`));
      lines.push(
        printable(
          r.issuer.public_key
            ? `             Ed25519 public key ${r.issuer.public_key}`
            : `             not a usable did:key: ${r.issuer.problem}`,
        ),
      );
    }
    for (const [field, iso] of Object.entries(r.times)) lines.push(`  ${field.padEnd(10)} ${iso}`);
    lines.push(printable(`  header     ${JSON.stringify(r.header)}`));
    lines.push(
      '  payload',
      ...JSON.stringify(r.payload, null, 2)
        .split('\n')
        .map((l) => printable(`    ${l}`)),
    );
    lines.push(`  signature  ${r.signature_bytes} bytes (not checked)`);
    for (const p of r.problems) lines.push(`  PROBLEM    ${p}`);
  });
  return lines.join('\n');
}

export async function runInspect(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('inspect', {
    args: argv,
    allowPositionals: true,
    options: { json: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h', default: false } },
  });
  if (values.help) {
    io.out(INSPECT_HELP);
    return 0;
  }
  const file = positionals[0];
  if (!file || positionals.length > 1) throw new UsageError('give one file, or - for stdin', INSPECT_HELP);
  const name = file === '-' ? 'stdin' : file;
  const found = findRecords(await readText(file, 'input'), name).records;
  if (found.length === 0) throw noSignedRecord(name);
  const records = found.slice(0, MAX_SHOWN).map((r) => inspectJws(r.jws, r.where));
  if (values.json) {
    printJson(io, { unverified: true, total: found.length, records });
    if (found.length > records.length) io.err(`note: ${shownOnly(records.length, found.length)}`);
  } else io.out(explain(records, found.length));
  return 0;
}
