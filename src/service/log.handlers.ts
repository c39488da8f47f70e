/**
 * Handlers of the transparency-log routes (contract in src/api/log.ts).
 * Thin: parse, call one log function, map the result. The tenant always
 * comes from the audit key, so another tenant's service receipt or checkpoint is a
 * plain 404.
 */
import { shownToCaller } from './http.js';
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { Context } from 'hono';
import {
  checkpointOfSizeRoute,
  consistencyRoute,
  cosignRoute,
  CosignatureSubmission,
  latestCheckpointRoute,
  logInfoRoute,
  serviceReceiptProofRoute,
  tileRoute,
} from '../api/log.js';
import { parseCheckpoint } from '../protocol/checkpoint.js';
import { COSIGNATURE_V1, formatNote, formatVerifierKey, openNote, parseNote, parseVerifierKey } from '../protocol/note.js';
import {
  checkWitnessName,
  cosignatureVerifier,
  cosignaturesOf,
  MAX_COSIGNATURE_CLOCK_SKEW,
  MAX_COSIGNATURE_TIMESTAMP,
} from '../protocol/cosignature.js';
import { BatonError } from '../protocol/errors.js';
import { formatEntryBundle, parseTilePath, tileInTree, TILE_WIDTH } from '../protocol/tiles.js';
import { bytesEqual, encodeBase64, utf8 } from '../protocol/tlog-input.js';
import { checkpointOfSize, entriesAt, fixedLogName, insertCosignatureWithinCaps, isPending, leafOfServiceReceipt } from '../store/log.js';
import { requireScope, tenantOf } from './auth.js';
import {
  consistencyHashes,
  fixedNameRefusal,
  inclusionBundle,
  logNameOf,
  logOrigin,
  logVerifierKeys,
  readsAsTheLog,
  readTile,
  servedCheckpoint,
} from './log-tree.js';
import { newRouter, serve } from './router.js';
import { parseJsonBody } from './validate.js';
import { publishedServiceKeys } from './signer.js';
import type { AppEnv, ServiceDeps } from './types.js';

/** A tile or entry bundle at its path never changes (a partial one's `.p/<W>` path names its width). */
const IMMUTABLE = 'private, max-age=31536000, immutable';
const SHORT = 'private, max-age=5';
/** Witness cosignatures served with one checkpoint at most (a note holds at most 100 signature lines). */
export const MAX_COSIGNATURES_PER_CHECKPOINT = 32;
/**
 * Cosignatures one API key may post on one checkpoint: a witness posts its own (two leaves room to
 * rotate its key), so one audit key cannot take the slots the real witnesses need.
 */
export const MAX_COSIGNATURES_PER_KEY = 2;
/** The route of tileRoute, its path parameter matching several segments. */
const TILE_ROUTING_PATH = '/v1/log/tile/:path{.+}';
/** An entry is a uint16-length-prefixed service receipt JWS in an entry bundle. */
const MAX_ENTRY_BYTES = 0xffff;

/**
 * The tile path as the client spelled it, for parseTilePath to judge: the routed parameter is
 * percent-decoded (0%2F000 read as 0/000) and the URL already normalised (x001/../000 read as
 * 000), and a non-canonical spelling must not be served as the tile, let alone cached as immutable.
 * Over a socket the request target is node's raw one (c.env.incoming.url); else the URL, whose
 * percent-escapes are kept as sent.
 */
function rawTilePath(c: Context<AppEnv>): string {
  const incoming = (c.env as { incoming?: { url?: unknown } } | undefined)?.incoming?.url;
  let target = typeof incoming === 'string' && incoming !== '' ? incoming : c.req.url;
  // An absolute-form target (or the URL): drop the scheme and authority, then the query.
  target = target.replace(/^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/[^/?#]*/, '');
  // Only the query is cut: a '#' is no part of a request target, and parseTilePath refuses it.
  const end = target.indexOf('?');
  if (end >= 0) target = target.slice(0, end);
  const prefix = '/v1/log/';
  // Anything else (an escaped or dotted prefix) is refused by parseTilePath, which sees it whole.
  return target.startsWith(prefix) ? target.slice(prefix.length) : target;
}

function notFound(message: string, details?: Record<string, unknown>, suggestion?: string): BatonError {
  return new BatonError('NOT_FOUND', { message, ...(details ? { details } : {}), ...(suggestion ? { suggestion } : {}) });
}

export function logRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = newRouter();
  // Read deps only when a request runs: route registration must touch no dependency.
  const db = () => deps.store.db;
  // The logs' name is the one their first checkpoint fixed (log_name). A node started under another
  // BATON_TLOG_NAME (two nodes on a new database, each with its own, both past the start's check)
  // serves it too: under its own, it published verifier keys and signed size-0 checkpoints that no
  // other node's checkpoints match, and refused every witness. Read until it is fixed, then kept.
  // One reading at a time, shared by the requests that arrive during it, so the warning is said once.
  let fixedName: string | undefined;
  let reading: Promise<string | undefined> | undefined;
  const servedLogName = async (): Promise<string> => {
    if (fixedName === undefined) {
      reading ??= fixedLogName(db()).finally(() => (reading = undefined));
      const found = await reading;
      if (found !== undefined && fixedName === undefined) {
        fixedName = found;
        if (found !== deps.config.tlogName) {
          deps.log.warn(
            `${fixedNameRefusal(deps.config.tlogName, found)}: this node serves the logs under that name and integrates nothing into them. Restart it with BATON_TLOG_NAME=${found}.`,
          );
        }
      }
    }
    return fixedName ?? deps.config.tlogName;
  };
  const originOf = async (tenantId: string) => logOrigin(await servedLogName(), tenantId);
  const tenant = (c: Context<AppEnv>) => tenantOf(c.get('auth'));
  const latest = async (tenantId: string) => servedCheckpoint(db(), deps.signer, await originOf(tenantId), tenantId);

  // Per route, not app.use: the sub-app adds no catch-all middleware to the app's routes.
  const audit = requireScope(deps, 'audit');
  app.openapi({ ...logInfoRoute, middleware: [audit] }, async (c) => {
    const tenantId = tenant(c);
    const origin = await originOf(tenantId);
    const [cp, keys] = await Promise.all([latest(tenantId), publishedServiceKeys(db())]);
    return c.json(
      {
        origin,
        tree_size: cp!.size,
        root_hash: encodeBase64(cp!.root),
        verifier_keys: logVerifierKeys(origin, keys).map(formatVerifierKey),
      },
      200,
    );
  });

  app.openapi({ ...latestCheckpointRoute, middleware: [audit] }, async (c) =>
    c.text((await latest(tenant(c)))!.note, 200, { 'cache-control': 'no-cache' }),
  );

  app.openapi({ ...checkpointOfSizeRoute, middleware: [audit] }, async (c) => {
    const tenantId = tenant(c);
    const { size } = c.req.valid('param');
    const cp = await servedCheckpoint(db(), deps.signer, await originOf(tenantId), tenantId, size);
    if (cp === undefined) throw notFound(`This log has no checkpoint of size ${size}.`);
    // Cosignatures may still be added, so even a past checkpoint is cached briefly.
    return c.text(cp.note, 200, { 'cache-control': SHORT });
  });

  // A tile path spans slashes (tile/0/x001/234): the document names it one {path}
  // parameter (x-baton-multi-segment), and the app routes it with a pattern that
  // matches across segments; parseTilePath then refuses every non-canonical form.
  app.openAPIRegistry.registerPath(tileRoute);
  app.get(TILE_ROUTING_PATH, audit, async (c) => {
    const tenantId = tenant(c);
    const path = rawTilePath(c);
    // As the routes declared with a strict query: a parameter this route does not read is refused.
    if (c.req.url.includes('?'))
      throw new BatonError('INVALID_REQUEST', {
        message: 'A tile path takes no query parameters.',
        suggestion: 'Ask for the tile by its path alone, e.g. /v1/log/tile/0/000.p/17.',
      });
    const parsed = parseTilePath(path);
    const size = (await latest(tenantId))!.size;
    const level = parsed.kind === 'entries' ? 0 : parsed.level;
    const available = tileInTree(level, parsed.index, size);
    if (available === undefined || available.width < parsed.width)
      throw notFound(`The log of ${size} leaves has no ${path} yet.`, { tree_size: size });
    let bytes: Uint8Array | undefined;
    if (parsed.kind === 'entries') {
      const from = parsed.index * TILE_WIDTH;
      const entries = await entriesAt(db(), tenantId, from, from + parsed.width);
      const missing = entries.filter((e) => e.jws === null).map((e) => e.leafIndex);
      const tooLong = entries.filter((e) => e.jws !== null && utf8(e.jws).length > MAX_ENTRY_BYTES).map((e) => e.leafIndex);
      if (entries.length !== parsed.width || missing.length > 0 || tooLong.length > 0) {
        throw shownToCaller(
          new BatonError('INTERNAL', {
            message: `Entries of ${path} cannot be served: ${missing.length > 0 ? 'their service receipts are missing from the database' : 'an entry is over 65535 bytes'}.`,
            // Which receipt stands at each index that is still there, so an auditor checks those one by one
            // (GET /v1/service-receipts) instead of losing the whole bundle's checks to one gone entry.
            details: {
              missing_indexes: missing,
              oversized_indexes: tooLong,
              present_entries: entries.filter((e) => e.jws !== null).map((e) => ({ index: e.leafIndex, service_receipt_id: e.receiptId })),
            },
          }),
        );
      }
      bytes = formatEntryBundle(entries.map((e) => utf8(e.jws!)));
    } else {
      bytes = await readTile(db(), tenantId, { level, index: parsed.index, width: parsed.width });
    }
    if (bytes === undefined) throw notFound(`${path} is not stored yet.`);
    // Each tenant's tile sits at the same path: a shared cache must key it by the API key too.
    return c.body(Buffer.from(bytes), 200, {
      'content-type': 'application/octet-stream',
      'cache-control': IMMUTABLE,
      vary: 'Authorization',
    });
  });

  app.openapi({ ...serviceReceiptProofRoute, middleware: [audit] }, async (c) => {
    const tenantId = tenant(c);
    const { id } = c.req.valid('param');
    const { tree_size: treeSize } = c.req.valid('query');
    const leaf = await leafOfServiceReceipt(db(), tenantId, id);
    if (leaf === undefined) {
      if (await isPending(db(), tenantId, id))
        throw notFound(
          `Service receipt ${id} is not integrated into the log yet; retry in a moment.`,
          { status: 'pending' },
          'Ask again in a second: the log takes new service receipts in rounds a fraction of a second apart.',
        );
      throw notFound(`This tenant has no service receipt ${id}.`);
    }
    if (leaf.jws === null)
      throw shownToCaller(
        new BatonError('INTERNAL', { message: `The service receipt at log index ${leaf.leafIndex} is missing from the database.` }),
      );
    const cp = await servedCheckpoint(db(), deps.signer, await originOf(tenantId), tenantId, treeSize);
    if (cp === undefined) {
      // The log signs checkpoints only at the sizes its rounds ended at: say so, and where it is now.
      const now = (await latest(tenantId))!.size;
      throw notFound(
        `This log never signed a checkpoint of size ${treeSize}; its latest is of size ${now}.`,
        { leaf_index: leaf.leafIndex, tree_size: now },
        'Omit tree_size for the latest checkpoint, or give the size of a checkpoint you hold (its second line).',
      );
    }
    if (cp.size <= leaf.leafIndex)
      throw notFound(
        `Service receipt ${id} is at log index ${leaf.leafIndex}, after the checkpoint of size ${cp.size}.`,
        { leaf_index: leaf.leafIndex, tree_size: cp.size },
        'Ask for a checkpoint of a larger size, or omit tree_size for the latest.',
      );
    const proof = await inclusionBundle(db(), tenantId, leaf.leafIndex, cp);
    return c.json({ service_receipt: { id, jws: leaf.jws }, leaf_index: leaf.leafIndex, tree_size: cp.size, proof }, 200);
  });

  app.openapi({ ...consistencyRoute, middleware: [audit] }, async (c) => {
    const tenantId = tenant(c);
    const { from, to } = c.req.valid('query');
    const size = (await latest(tenantId))!.size;
    if (from < 1 || from > to) throw new BatonError('INVALID_REQUEST', { message: 'Ask for 1 <= from <= to.', details: { from, to } });
    if (to > size) throw notFound(`The log has ${size} leaves, fewer than ${to}.`, { tree_size: size });
    const proof = await consistencyHashes(db(), tenantId, from, to);
    return c.json({ from, to, proof: proof.map(encodeBase64) }, 200);
  });

  // The strict body reader (repeated keys, nesting, content type), as every other body route.
  serve(app, cosignRoute, audit, async (c) => {
    const tenantId = tenant(c);
    const body = await parseJsonBody(c, deps.config.maxBodyBytes, CosignatureSubmission);
    const witness = parseVerifierKey(body.witness_key);
    if (witness.type !== COSIGNATURE_V1)
      throw new BatonError('INVALID_VERIFIER_KEY', { message: 'A witness key has type 0x04 (cosignature/v1).' });
    checkWitnessName(witness.name);
    const serviceKeys = await publishedServiceKeys(db());
    if (serviceKeys.some((k) => bytesEqual(k.publicKey, witness.publicKey)))
      throw new BatonError('INVALID_VERIFIER_KEY', { message: "The service's own key cannot witness its log." });
    const opened = openNote(body.checkpoint, [cosignatureVerifier(witness)]);
    const [cosig] = cosignaturesOf(opened);
    const signed = opened.verified[0]!;
    // The witness's signature verified, so cosignaturesOf left it out for its timestamp alone.
    if (cosig === undefined)
      throw new BatonError('NOTE_NOT_VERIFIED', {
        message: `The cosignature's timestamp is past ${MAX_COSIGNATURE_TIMESTAMP} (2^63 - 1), which C2SP tlog-cosignature forbids: it is no cosignature at all.`,
        suggestion: "Date the cosignature with the witness's clock, in Unix seconds, then cosign again.",
      });
    if (cosig.timestamp > deps.now() + MAX_COSIGNATURE_CLOCK_SKEW)
      throw new BatonError('NOTE_NOT_VERIFIED', {
        message: 'The cosignature is dated in the future.',
        suggestion: `Check the witness's clock: the cosignature is dated more than ${MAX_COSIGNATURE_CLOCK_SKEW} seconds after the log's (Unix ${deps.now()}). Then cosign again.`,
        details: { log_time: deps.now() },
      });
    const checkpoint = parseCheckpoint(opened.text);
    // Every log's empty tree has the same root, so a cosignature of it vouches for nothing: no proof
    // is read under it (an inclusion proof needs a leaf, a consistency proof from size 0 is refused).
    if (checkpoint.size === 0)
      throw new BatonError('INVALID_REQUEST', {
        message:
          'The checkpoint of size 0 (the empty tree) takes no cosignature: every empty log has the same root, so it vouches for nothing.',
        suggestion: 'Cosign a checkpoint of size 1 or more, once the log has a service receipt.',
        details: { tree_size: 0 },
      });
    const stored = checkpoint.origin === (await originOf(tenantId)) ? await checkpointOfSize(db(), tenantId, checkpoint.size) : undefined;
    if (stored === undefined || parseNote(stored.note).text !== opened.text)
      throw notFound('This log never signed that checkpoint.', { tree_size: checkpoint.size });
    // A witness cannot have seen a checkpoint before the log signed it: an earlier date is a wrong
    // clock or a made-up cosignature, and would tell auditors the checkpoint is older than it is.
    if (cosig.timestamp < Math.floor(stored.createdAt.getTime() / 1000) - MAX_COSIGNATURE_CLOCK_SKEW)
      throw new BatonError('NOTE_NOT_VERIFIED', {
        message: `The cosignature is dated ${cosig.timestamp}, before the log signed that checkpoint (${stored.createdAt.toISOString()}).`,
        suggestion: "Check the witness's clock, then cosign again.",
      });
    // A witness named as the log would add a second signature line with the log's own name; one
    // named as another tenant's log of this service, or as anything under the log's name, would
    // read, to a person, as that log's line.
    const logName = logNameOf(checkpoint.origin) ?? checkpoint.origin;
    if (readsAsTheLog(witness.name, checkpoint.origin))
      throw new BatonError('INVALID_VERIFIER_KEY', {
        message: `A witness key may not carry the name of this service's log, or a name under it (${logName}, ${logName}/...), in any spelling that reads as it (case, a port, a scheme, a user@, percent-escapes, trailing dots or slashes, look-alike letters).`,
        suggestion: 'Name the witness key after the witness itself, e.g. its own host name.',
      });
    const text = opened.text;
    const line = formatNote({ text, signatures: [{ name: witness.name, keyId: witness.keyId, signature: signed.signature }] })
      .slice(text.length + 1)
      .trimEnd();
    const witnessKey = formatVerifierKey(witness);
    // Anyone with an audit key can mint witness keys; a cap keeps the served note within
    // the signed-note limit of 100 signature lines, so it stays readable by every client.
    const keyId = c.get('auth').keyId;
    const outcome = await insertCosignatureWithinCaps(
      db(),
      { tenantId, treeSize: checkpoint.size, witnessKey, line, postedByKey: keyId },
      { perKey: MAX_COSIGNATURES_PER_KEY, perCheckpoint: MAX_COSIGNATURES_PER_CHECKPOINT },
      c.get('commitGate'),
    );
    if (outcome === 'key-full')
      throw new BatonError('CONFLICT', {
        message: `API key ${keyId} has already posted ${MAX_COSIGNATURES_PER_KEY} cosignatures on this checkpoint, the most one key may.`,
        suggestion: 'Each witness posts its own cosignature with its own audit key.',
        details: { tree_size: checkpoint.size },
      });
    if (outcome === 'key-id-taken')
      throw new BatonError('CONFLICT', {
        message: `Another key named ${witness.name} with key ID ${witness.keyId.toString(16).padStart(8, '0')} already cosigned this checkpoint: a note names a signer by name and key ID only, so the two could not be told apart.`,
        suggestion: 'A witness posts with the key it is known by; a new key of its own needs a name or key ID no stored cosignature has.',
        details: { tree_size: checkpoint.size, witness_key: witnessKey },
      });
    if (outcome === 'checkpoint-full')
      throw new BatonError('CONFLICT', {
        message: `This checkpoint already carries ${MAX_COSIGNATURES_PER_CHECKPOINT} cosignatures, the most the log serves.`,
        suggestion: 'Cosign a newer checkpoint.',
        details: { tree_size: checkpoint.size },
      });
    const fresh = outcome === 'stored';
    return c.json({ tree_size: checkpoint.size, witness: witnessKey, stored: fresh }, fresh ? 201 : 200);
  });

  return app;
}
