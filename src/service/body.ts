/**
 * Request bodies are read strictly: a declared content type must be JSON's (an
 * undeclared body is read as JSON too, and always as UTF-8: RFC 8259 gives
 * JSON no other charset, so a declared charset other than UTF-8 is refused, as
 * is a Content-Encoding: bodies are read as sent), at most maxBytes
 * (counted while streaming, so a body without Content-Length cannot make the
 * service buffer more), valid UTF-8 without a byte-order mark, one JSON
 * value, no duplicate object keys (parsers disagree on which duplicate wins,
 * so an ambiguous body is refused rather than guessed at), bounded nesting,
 * and only strings PostgreSQL can store (no U+0000, no lone surrogates).
 * A Transfer-Encoding other than chunked is refused too: Node frames the body
 * by its final chunked coding and decodes no other.
 *
 * The bytes of bodies still arriving are bounded over the whole process too
 * (BATON_MAX_BODY_BUFFER_BYTES, bodyBudget): each body is bounded by
 * maxBytes, but the time it takes to arrive is the client's (up to
 * BATON_REQUEST_TIMEOUT_MS), so clients sending most of a body and stalling,
 * keyless ones too, grew the process's memory with their connections. Bytes
 * are counted as they arrive, never by a declared length; requests without
 * a valid key hold at most half of the budget, so that keyless clients can
 * make only other keyless bodies wait, and the requests of one tenant (the
 * admin key counting as one) at most an eighth of it, so that a tenant's
 * stalled bodies can make only that tenant's other bodies wait, never another
 * tenant's verify. A body refused while it arrives closes its connection once
 * answered: the rest of it is never read, and would otherwise wait in Node's
 * buffers, uncounted, until the request timeout.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Context } from 'hono';
import { BatonError } from '../protocol/errors.js';
import { isWellFormedString } from '../protocol/jcs.js';
import { DOCUMENT_MAX_NESTING, jsonAmbiguity } from '../protocol/strict-json.js';
import type { UploadClock } from './deadline.js';
import type { AppEnv } from './types.js';

const MAX_NESTING = DOCUMENT_MAX_NESTING;
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const JSON_CONTENT_TYPE = /^application\/(?:[\w.+-]*\+)?json\s*(?:;.*)?$/i;
const CHARSET = /;\s*charset\s*=\s*("?[^;\s]*"?)/i;

/** Bytes already read per request, so hasBody and readJsonBody read the stream once. */
const bodies = new WeakMap<Request, Uint8Array>();

export async function readJsonBody(c: Context, maxBytes: number): Promise<unknown> {
  const transferRefusal = unsupportedTransferCoding(c.req.header('transfer-encoding'));
  if (transferRefusal) throw transferRefusal;
  const type = c.req.header('content-type');
  if (type !== undefined && !JSON_CONTENT_TYPE.test(type)) {
    throw invalid(`The request body is declared as ${JSON.stringify(type.slice(0, 100))}; this route takes application/json.`);
  }
  // Read as sent, in UTF-8: a body declared otherwise would be read as other text than a reader
  // honouring the declaration sees (a decompressing proxy, a latin1 decoder).
  const charset = type === undefined ? undefined : CHARSET.exec(type)?.[1];
  if (charset !== undefined && !/^"?utf-8"?$/i.test(charset)) {
    throw invalid(`The request body is declared in charset ${JSON.stringify(charset.slice(0, 40))}; JSON is read as UTF-8 only.`);
  }
  const encoding = c.req.header('content-encoding');
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
    throw invalid(
      `The request body is declared with Content-Encoding ${JSON.stringify(encoding.slice(0, 40))}; Baton reads bodies as sent, uncompressed.`,
    );
  }
  const buffer = await readBodyBytes(c, maxBytes);
  if (buffer.length === 0) throw invalid('The request body is empty; this route takes a JSON object.');
  if (buffer[0] === 0xef && buffer[1] === 0xbb && buffer[2] === 0xbf) {
    throw invalid('The request body starts with a UTF-8 byte-order mark; send plain UTF-8 JSON.');
  }
  let text: string;
  try {
    text = decoder.decode(buffer);
  } catch {
    throw invalid('The request body is not valid UTF-8.');
  }
  return parseStrictJson(text);
}

/** Whether the request carries any body bytes (reading at most maxBytes). */
export async function hasBody(c: Context, maxBytes: number): Promise<boolean> {
  return (await readBodyBytes(c, maxBytes)).length > 0;
}

/**
 * Reads the body, refusing (413) as soon as it passes maxBytes, whatever Content-Length said, and
 * (503 SERVICE_BUSY) as soon as it would take the bytes of bodies arriving past bodyBudget's limit.
 */
async function readBodyBytes(c: Context, maxBytes: number): Promise<Uint8Array> {
  const request = c.req.raw;
  const cached = bodies.get(request);
  if (cached) return cached;
  const transferRefusal = unsupportedTransferCoding(c.req.header('transfer-encoding'));
  if (transferRefusal) throw transferRefusal;
  const declared = Number(c.req.header('content-length') ?? '0');
  if (declared > maxBytes) throw tooLarge(maxBytes);
  // Held as it arrives, never by its declared length: Node holds nothing of a body before its
  // bytes come, and a length held up front let connections that sent none fill the budget.
  // A request with a valid key has been authenticated by now (c.get('auth')): every route reads
  // the key before the body, and refuses an invalid one 401 unread.
  const share = bodyBudget.share((c as Context<AppEnv>).get('auth'));
  // The upload's time is the client's: the request's deadlines move on by it (deadline.ts).
  const upload = (c as Context<AppEnv>).get('upload') as UploadClock | undefined;
  upload?.start();
  try {
    // Asked for with Expect: 100-continue, the body comes only now that a route reads it (server.ts).
    continueIfAwaited(c);
    return await receiveBody(c, request, maxBytes, share);
  } catch (e) {
    // Refused part read: the rest is never read, and a keep-alive connection would hold it unread.
    if (e instanceof BatonError && (e.code === 'SERVICE_BUSY' || e.code === 'PAYLOAD_TOO_LARGE')) c.header('Connection', 'close');
    throw e;
  } finally {
    // Whole or not (cut short, 413, 503, the request timeout's close): the bytes are the budget's again.
    share.release();
    upload?.end();
  }
}

async function receiveBody(c: Context, request: Request, maxBytes: number, share: BudgetShare): Promise<Uint8Array> {
  // Served by @hono/node-server: read the Node stream itself. Reading through
  // request.body would first build a web Request and a ReadableStream around
  // it, which cost the verify hot path more CPU than everything it parses.
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  if (incoming && typeof incoming.on === 'function' && !incoming.readableDidRead) {
    const bytes = await readIncoming(incoming, maxBytes, share, (full) => busy(c, full));
    bodies.set(request, bytes);
    return bytes;
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  if (request.body) {
    const reader = request.body.getReader();
    for (;;) {
      const { done, value } = await reader.read().catch(() => {
        throw cutShort();
      });
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) {
        await reader.cancel().catch(() => {});
        throw tooLarge(maxBytes);
      }
      const full = share.cover(total);
      if (full !== undefined) {
        await reader.cancel().catch(() => {});
        throw busy(c, full);
      }
      chunks.push(value);
    }
  }
  const bytes = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  bodies.set(request, bytes);
  return bytes;
}

/**
 * The whole body of a Node request, refusing (413) as soon as it passes maxBytes, and (`refuseBusy`)
 * as soon as `share` cannot cover what has arrived.
 */
function readIncoming(
  incoming: IncomingMessage,
  maxBytes: number,
  share: BudgetShare,
  refuseBusy: (full: BudgetFull) => BatonError,
): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    // Closed while the handler awaited something else (the key's lookup): a destroyed stream emits
    // nothing more, so waiting for its end would keep the request open for ever.
    if (incoming.destroyed) {
      reject(cutShort());
      return;
    }
    const chunks: Buffer[] = [];
    let total = 0;
    const done = (settle: () => void) => {
      incoming.off('data', onData);
      incoming.off('end', onEnd);
      incoming.off('error', onError);
      incoming.off('close', onClose);
      settle();
    };
    const onData = (chunk: Buffer) => {
      total += chunk.byteLength;
      if (total > maxBytes) {
        incoming.pause();
        done(() => reject(tooLarge(maxBytes)));
      } else {
        const full = share.cover(total);
        if (full === undefined) chunks.push(chunk);
        else {
          incoming.pause();
          done(() => reject(refuseBusy(full)));
        }
      }
    };
    const onEnd = () => done(() => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total)));
    // The client's doing, not the database's: Node's 'aborted' error carries ECONNRESET, which
    // storage errors carry too, and read as one it was logged and counted as a storage outage.
    const onError = () => done(() => reject(cutShort()));
    const onClose = () => {
      if (!incoming.readableEnded) done(() => reject(cutShort()));
    };
    incoming.on('data', onData);
    incoming.on('end', onEnd);
    incoming.on('error', onError);
    incoming.on('close', onClose);
  });
}

/** Refuses strings (and keys) PostgreSQL cannot store: U+0000 and unpaired surrogates. */
function assertStorableStrings(value: unknown, where: string, depth = 0): void {
  if (depth > MAX_NESTING) return;
  if (typeof value === 'string') {
    if (value.includes('\u0000')) throw invalid(`${where} contains the character U+0000, which Baton does not accept.`);
    if (!isWellFormedString(value)) throw invalid(`${where} contains an unpaired UTF-16 surrogate (\\uD800-\\uDFFF escape).`);
    return;
  }
  if (Array.isArray(value)) {
    for (const v of value) assertStorableStrings(v, where, depth + 1);
  } else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      assertStorableStrings(k, where, depth + 1);
      assertStorableStrings(v, where, depth + 1);
    }
  }
}

/**
 * JSON text read as strictly as a request body, wherever it came from (the body, or a bundle in the
 * X-DRS-Bundle header): no duplicate keys, bounded nesting, only strings PostgreSQL can store.
 */
export function parseStrictJson(text: string, where = 'The request body'): unknown {
  const ambiguity = jsonAmbiguity(text, MAX_NESTING);
  if (ambiguity !== undefined) throw invalid(`${where} ${ambiguity}.`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw invalid(`${where} is not valid JSON: ${(e as Error).message}.`);
  }
  assertStorableStrings(value, where);
  return value;
}

/**
 * The request's Transfer-Encoding refused, or undefined when it has none or only chunked (RFC 9112
 * 6.1: any case, optional whitespace around it). Node's parser frames a body whose final coding is
 * chunked and decodes none of the others: a body sent gzip-coded was read as its compressed bytes
 * (400 "not valid UTF-8"), and one declared gzip but sent plain was read as if nothing were
 * declared, as a reader honouring the declaration would not read it. Judged from the header alone.
 */
export function unsupportedTransferCoding(header: string | undefined): BatonError | undefined {
  if (header === undefined || /^[ \t]*chunked[ \t]*$/i.test(header)) return undefined;
  return new BatonError('INVALID_REQUEST', {
    message: `The request is sent with Transfer-Encoding ${JSON.stringify(header.slice(0, 100))}; Baton reads only chunked, and no other transfer coding, so it read nothing and did nothing.`,
    suggestion:
      'Send the body as it is, uncompressed, framed by Content-Length or by Transfer-Encoding: chunked alone (curl: --data @body.json, without --tr-encoding).',
  });
}

/** How many bytes of request bodies this process holds while they arrive, at most (BATON_MAX_BODY_BUFFER_BYTES). */
export const DEFAULT_MAX_BODY_BUFFER_BYTES = 64 * 1024 * 1024;

/** BATON_MAX_BODY_BYTES's default, until the server sets the budget's from its configuration. */
const DEFAULT_MAX_BODY_BYTES = 256 * 1024;

/**
 * Requests answered by the Node response in it asked for 100 Continue (Expect: 100-continue), which
 * is sent when a route starts reading the body (continueIfAwaited): a request refused from its key,
 * path, method or query is answered without it, so its client never sends a body for nothing, and
 * Node closes its connection after the answer (the client may send the body anyway).
 */
const continuesAwaited = new WeakSet<ServerResponse>();

/** Marks the request answered by `response` as waiting for 100 Continue until a route reads its body (server.ts's checkContinue). */
export function awaitContinue(response: ServerResponse): void {
  continuesAwaited.add(response);
}

/** Sends 100 Continue if the request asked for it and has not had it: a route is about to read its body. */
function continueIfAwaited(c: Context): void {
  const outgoing = (c.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
  if (outgoing === undefined || !continuesAwaited.delete(outgoing)) return;
  if (!outgoing.headersSent && !outgoing.writableEnded) outgoing.writeContinue();
}

/** What one body holds of the budget: grown as the body arrives, given back once when it is done. */
interface BudgetShare {
  /** Holds `bytes` in all for this body; when the budget has no room for them, holds no more and says which limit is full. */
  cover(bytes: number): BudgetFull | undefined;
  release(): void;
}

/** The limit a body was refused by: the whole budget, the keyless half, or its caller's (its tenant's) share. */
export type BudgetFull = 'all' | 'keyless' | 'caller';

/** Whose bodies a share of the budget holds: requests with a valid key, or without one (a metrics label). */
export type BodyCaller = 'keyed' | 'keyless';

/** The caller a keyed body is held for: its key's tenant, or null for the admin key, which belongs to none. */
type KeyedCaller = string | null;

/** Each keyed caller's share of the budget, at most: an eighth (but at least one body of the largest size). */
const CALLER_SHARE_DIVISOR = 8;

/**
 * The process's budget of request body bytes held at once while they arrive, over every request
 * (each worker of BATON_WORKERS has its own). A body that would take the total past it is refused
 * (503 SERVICE_BUSY) before more of it is read; its bytes, and those of every body done, whole or
 * not, are given back. Bodies of requests without a valid key hold at most keylessLimit of it
 * together: whoever sends them, with no key needed, can fill only that half. Bodies of requests
 * with a key hold at most callerLimit per tenant (all admin keys together count as one caller): any
 * valid key of any scope reaches a route that takes a body, and without it one tenant's stalled
 * bodies filled the budget and made every other tenant's verify answer 503.
 */
class BodyBudget {
  /** Set from BATON_MAX_BODY_BUFFER_BYTES when the server starts. */
  limit = DEFAULT_MAX_BODY_BUFFER_BYTES;
  /** Set from BATON_MAX_BODY_BYTES when the server starts: a caller's share is never below one such body. */
  maxBodyBytes = DEFAULT_MAX_BODY_BYTES;
  #held = 0;
  #heldKeyless = 0;
  /** Bytes held per keyed caller; an entry goes when its caller holds nothing, so it never outgrows the bodies arriving. */
  readonly #heldByCaller = new Map<KeyedCaller, number>();

  /** Bytes held now: 0 whenever no body is arriving (what a leak would show). */
  get held(): number {
    return this.#held;
  }

  /** Of `held`, the bytes of requests without a valid key. */
  get heldKeyless(): number {
    return this.#heldKeyless;
  }

  /** The most the bodies of requests without a valid key hold together: half the budget. */
  get keylessLimit(): number {
    return Math.floor(this.limit / 2);
  }

  /**
   * The most the bodies of one keyed caller (a tenant, or the admin key) hold together: an eighth of
   * the budget, or one body of the largest size (BATON_MAX_BODY_BYTES) if that is more, so that a
   * caller can always send one. Beside one caller at its share the budget, at least twice that
   * size (config.ts), always has room for another's largest body; with the keyless half full too,
   * it does from four times that size. At the defaults one caller may have 8 MiB arriving at once
   * (32 bodies of the largest size, thousands of verifies), and with the keyless half and one
   * caller full, 24 MiB are left for the others. An eighth, not less: a tenant's own bursts of
   * uploads are not refused while the process has room; not more: a second caller stalling too
   * would leave the others little.
   */
  get callerLimit(): number {
    return Math.max(this.maxBodyBytes, Math.floor(this.limit / CALLER_SHARE_DIVISOR));
  }

  /** Of `held`, the bytes of one keyed caller's requests: a tenant's id, or null for the admin key. */
  heldBy(caller: KeyedCaller): number {
    return this.#heldByCaller.get(caller) ?? 0;
  }

  /** How many keyed callers hold bytes now: 0 whenever no keyed body is arriving. */
  get callers(): number {
    return this.#heldByCaller.size;
  }

  /** A share for one body; `auth`: its request's valid key, if it carries one. */
  share(auth: { readonly tenantId: string | null } | undefined): BudgetShare {
    const caller = auth === undefined ? undefined : auth.tenantId;
    let mine = 0;
    return {
      cover: (bytes) => {
        if (bytes <= mine) return undefined;
        const more = bytes - mine;
        if (caller === undefined) {
          if (this.#heldKeyless + more > this.keylessLimit) return 'keyless';
          if (this.#held + more > this.limit) return 'all';
          this.#heldKeyless += more;
        } else {
          const callerHeld = this.heldBy(caller);
          if (callerHeld + more > this.callerLimit) return 'caller';
          if (this.#held + more > this.limit) return 'all';
          this.#heldByCaller.set(caller, callerHeld + more);
        }
        this.#held += more;
        mine = bytes;
        return undefined;
      },
      release: () => {
        if (mine === 0) return;
        this.#held -= mine;
        if (caller === undefined) this.#heldKeyless -= mine;
        else {
          const left = this.heldBy(caller) - mine;
          if (left > 0) this.#heldByCaller.set(caller, left);
          else this.#heldByCaller.delete(caller);
        }
        mine = 0;
      },
    };
  }
}

export const bodyBudget = new BodyBudget();

/** A body refused for want of room in the budget: the client's to send again shortly, so said with Retry-After. */
function busy(c: Context, full: BudgetFull): BatonError {
  c.header('Retry-After', String(BUSY_RETRY_AFTER_SECONDS));
  if (full === 'caller') {
    // Its own tenant's other bodies hold the room: the operator's settings are not what to change.
    return new BatonError('SERVICE_BUSY', {
      message:
        "Baton is receiving as many request body bytes at once as it takes from one caller (this API key's tenant; the admin key counts as one), so it stopped reading this body, and did nothing.",
      suggestion:
        'Nothing was done: send the request again after the number of seconds in the Retry-After header. Other requests with keys of the same tenant (or the admin key) are still sending their bodies to this Baton process; if this persists, look for uploads of that tenant that stall.',
    });
  }
  return new BatonError('SERVICE_BUSY', {
    message: 'Baton is receiving as many request body bytes at once as it holds, so it stopped reading this body, and did nothing.',
  });
}

/** The Retry-After of a SERVICE_BUSY answer: bodies arriving at once are most often done within a second. */
const BUSY_RETRY_AFTER_SECONDS = 1;

function tooLarge(maxBytes: number): BatonError {
  return new BatonError('PAYLOAD_TOO_LARGE', { message: `The request body is larger than ${maxBytes} bytes.` });
}

/** A body whose sender closed (or broke) the connection before it was whole. */
function cutShort(): BatonError {
  return new BatonError('INVALID_REQUEST', {
    message: 'The request body ended before it was complete: the connection was closed or broke while it was being sent.',
    suggestion: 'Send the whole request again.',
  });
}

/** A body that is not one readable JSON value: there are no field details to point at, so say what to send. */
function invalid(message: string): BatonError {
  return new BatonError('INVALID_REQUEST', {
    message,
    suggestion:
      'Send one JSON object, UTF-8, with Content-Type: application/json (curl: -H "content-type: application/json" --data @body.json); openapi.yaml lists its fields.',
  });
}
