/**
 * The transparency log's HTTP contract. Handlers are in
 * src/service/log.handlers.ts. Every route needs an `audit` key and serves
 * the key's own tenant's log only.
 */
import { createRoute, z } from '@hono/zod-openapi';
import {
  BadRequestResponse,
  ConflictResponse,
  ForbiddenResponse,
  InternalResponse,
  Jws,
  NotFoundResponse,
  PayloadTooLargeResponse,
  StorageUnavailableResponse,
  UnauthorizedResponse,
  WholeNumberText,
} from './common.js';

const tags = ['log'];
const scopes = { 'x-baton-scopes': ['audit'], security: [{ bearerAuth: [] }] };
const forbidden = ForbiddenResponse('The key lacks the `audit` scope, or is the admin key (`FORBIDDEN`).');
const common = { 401: UnauthorizedResponse(), 403: forbidden, 500: InternalResponse(), 503: StorageUnavailableResponse() };

export const LogInfo = z
  .strictObject({
    origin: z.string().openapi({ description: 'The log name checkpoints carry, e.g. `baton.example.com/baton/ten_4f2a`.' }),
    tree_size: z.int().min(0),
    root_hash: z.string().openapi({ description: 'base64 SHA-256 root of the latest checkpoint.' }),
    verifier_keys: z
      .array(z.string())
      .openapi({ description: 'C2SP note verifier keys of the log (one per published service key, current first).' }),
  })
  .openapi('LogInfo');

const signedNote = {
  'text/plain': { schema: z.string().openapi({ description: 'A C2SP signed note: the checkpoint, then its signature lines.' }) },
};

export const logInfoRoute = createRoute({
  method: 'get',
  path: '/v1/log',
  tags,
  operationId: 'getLog',
  summary: "The tenant's transparency log: origin, size and verifier keys",
  description:
    "One log per tenant, of every service receipt the tenant's requests produced. A tenant without service receipts has a log of size 0.",
  ...scopes,
  responses: { 200: { description: 'The log.', content: { 'application/json': { schema: LogInfo } } }, ...common },
});

export const latestCheckpointRoute = createRoute({
  method: 'get',
  path: '/v1/log/checkpoint',
  tags,
  operationId: 'getLatestCheckpoint',
  summary: 'The latest signed checkpoint (C2SP tlog-checkpoint) with its witness cosignatures',
  description: 'Served with `Cache-Control: no-cache`: the log grows every integration round.',
  ...scopes,
  responses: { 200: { description: 'The signed checkpoint.', content: signedNote }, ...common },
});

export const checkpointOfSizeRoute = createRoute({
  method: 'get',
  path: '/v1/log/checkpoints/{size}',
  tags,
  operationId: 'getCheckpoint',
  summary: 'The signed checkpoint of one tree size, with its witness cosignatures',
  description:
    "Witnesses may still add cosignatures, so even a past checkpoint is cached for 5 seconds only. Size 0 is always the empty tree's checkpoint (root SHA-256 of nothing), signed on demand and never cosigned.",
  ...scopes,
  request: {
    params: z.object({
      size: WholeNumberText.openapi({ param: { name: 'size', in: 'path', description: 'A tree size, decimal without leading zeros.' } }),
    }),
  },
  responses: {
    200: { description: 'The signed checkpoint.', content: signedNote },
    400: BadRequestResponse('`size` is not a decimal without leading zeros (`INVALID_REQUEST`).'),
    404: NotFoundResponse('The log never signed a checkpoint of this size (`NOT_FOUND`).'),
    ...common,
  },
});

export const tileRoute = createRoute({
  method: 'get',
  path: '/v1/log/tile/{path}',
  tags,
  operationId: 'getLogTile',
  summary: 'A hash tile or entry bundle (C2SP tlog-tiles)',
  description:
    'A tile never changes at its path, so every one is cached for a year (`immutable`, as C2SP tlog-tiles asks): the path of a partial tile names its width (`.p/<W>`), and as the log grows clients ask for a wider one or the full tile. An entry bundle holds the service receipt JWSs of its leaves, each uint16 length-prefixed.',
  ...scopes,
  request: {
    params: z.object({
      path: z.string().openapi({
        param: {
          name: 'path',
          in: 'path',
          description:
            'The tile path after `tile/`, slashes included: `<L>/<N>[.p/<W>]` for hash tiles or `entries/<N>[.p/<W>]` for entry bundles, e.g. `0/x001/234` or `entries/000.p/17`.',
          'x-baton-multi-segment': true,
        },
      }),
    }),
  },
  responses: {
    200: {
      description: "The tile or entry bundle, with `Vary: Authorization` (each tenant's tile sits at the same path).",
      content: { 'application/octet-stream': { schema: z.string().openapi({ description: 'Raw bytes.' }) } },
    },
    400: BadRequestResponse('The path is not a canonical tile path (`MALFORMED_TILE`), or a query was given (`INVALID_REQUEST`).'),
    404: NotFoundResponse('The log does not reach this tile yet (`NOT_FOUND`, `details.tree_size`).'),
    401: UnauthorizedResponse(),
    403: forbidden,
    500: InternalResponse(
      'Baton failed unexpectedly, or the service receipts of an entry bundle can no longer be read (`INTERNAL`, `details.missing_indexes` or `details.oversized_indexes`; `details.present_entries` lists `{index, service_receipt_id}` of the entries still there, each readable from `GET /v1/service-receipts`).',
    ),
    503: StorageUnavailableResponse(),
  },
});

export const ServiceReceiptProof = z
  .strictObject({
    service_receipt: z.strictObject({ id: z.int().min(1), jws: Jws }),
    leaf_index: z.int().min(0),
    tree_size: z.int().min(1),
    proof: z.string().openapi({ description: 'C2SP tlog-proof bundle (c2sp.org/tlog-proof@v1) under the signed checkpoint.' }),
  })
  .openapi('ServiceReceiptLogProof');

export const serviceReceiptProofRoute = createRoute({
  method: 'get',
  path: '/v1/log/service-receipts/{id}/proof',
  tags,
  operationId: 'getServiceReceiptLogProof',
  summary: 'A service receipt with its inclusion proof, once integrated',
  description:
    'A service receipt enters the log in the next integration round after its transaction commits; until then the answer is `404` with `details.status: pending`.',
  ...scopes,
  request: {
    params: z.object({
      id: WholeNumberText.openapi({
        param: { name: 'id', in: 'path', description: 'The service receipt id (as in `GET /v1/service-receipts`).' },
      }),
    }),
    query: z.strictObject({
      tree_size: WholeNumberText.optional().openapi({ description: 'Prove under the stored checkpoint of this size; default the latest.' }),
    }),
  },
  responses: {
    200: { description: 'The service receipt and its proof.', content: { 'application/json': { schema: ServiceReceiptProof } } },
    400: BadRequestResponse(
      '`id` or `tree_size` is not a decimal without leading zeros, or an unknown parameter is given (`INVALID_REQUEST`).',
    ),
    404: NotFoundResponse(
      "This tenant has no such service receipt, it is not integrated yet (`details.status: pending`), the log never signed a checkpoint of `tree_size`, or the receipt is after that checkpoint (`NOT_FOUND`; then `details.tree_size` is the latest size, or that size, and `details.leaf_index` the receipt's index).",
    ),
    ...common,
  },
});

export const ConsistencyProof = z
  .strictObject({
    from: z.int().min(1),
    to: z.int().min(1),
    proof: z.array(z.string()).openapi({ description: 'base64 hashes (RFC 9162 section 2.1.4).' }),
  })
  .openapi('LogConsistencyProof');

export const consistencyRoute = createRoute({
  method: 'get',
  path: '/v1/log/consistency',
  tags,
  operationId: 'getLogConsistencyProof',
  summary: 'A consistency proof between two tree sizes',
  ...scopes,
  request: {
    query: z.strictObject({
      from: WholeNumberText.openapi({ description: 'The older tree size, at least 1.' }),
      to: WholeNumberText.openapi({ description: 'The newer tree size, at most the current size.' }),
    }),
  },
  responses: {
    200: { description: 'The proof.', content: { 'application/json': { schema: ConsistencyProof } } },
    400: BadRequestResponse(
      '`from` or `to` is missing or not a decimal, an unknown parameter is given, or not `1 <= from <= to` (`INVALID_REQUEST`).',
    ),
    404: NotFoundResponse('The log is smaller than `to` (`NOT_FOUND`, `details.tree_size`).'),
    ...common,
  },
});

export const CosignatureSubmission = z
  .strictObject({
    witness_key: z.string().openapi({ description: 'The witness cosignature verifier key (type 0x04).' }),
    checkpoint: z.string().openapi({ description: "A checkpoint note served by this log, with the witness's cosignature line added." }),
  })
  .openapi('CosignatureSubmission');

export const CosignatureStored = z
  .strictObject({ tree_size: z.int().min(1), witness: z.string(), stored: z.boolean() })
  .openapi('CosignatureStored');

export const cosignRoute = createRoute({
  method: 'post',
  path: '/v1/log/cosignatures',
  tags,
  operationId: 'addLogCosignature',
  summary: 'A witness adds its cosignature (C2SP tlog-cosignature) to a checkpoint it checked',
  description:
    "The cosignature must verify, not be dated in the future, come from a key that is not a service key, and cover a checkpoint of size 1 or more this tenant's log signed (the size-0 checkpoint, the empty tree, takes none: every empty log has the same root, so a cosignature of it vouches for nothing). The checkpoint is then served with it. At most 32 witnesses per checkpoint, and at most 2 cosignatures posted by one API key on it (any audit key can make witness keys: one key must not take the slots the tenant's witnesses need); a witness posts with its own audit key. Posts to one checkpoint are counted one at a time, so posts that arrive together cannot pass the caps. A witness name is at most 256 bytes of printable ASCII (`!` to `~`, no spaces) without `%` (a percent-escape stands for other characters than it prints), so every served note stays readable and no name prints as another.",
  ...scopes,
  request: { body: { required: true, content: { 'application/json': { schema: CosignatureSubmission } } } },
  responses: {
    200: {
      description: 'This witness had already cosigned this checkpoint.',
      content: { 'application/json': { schema: CosignatureStored } },
    },
    201: { description: 'Stored.', content: { 'application/json': { schema: CosignatureStored } } },
    400: BadRequestResponse(
      'The body is not `CosignatureSubmission`, or the checkpoint is of size 0 (`INVALID_REQUEST`), the key is not a cosignature key, is a service key, is named as the log name of this service or a name under it (`<BATON_TLOG_NAME>`, `<BATON_TLOG_NAME>/...`, which holds the logs of every tenant; read as a person reads it, against every reading of the log name: in any case, without a scheme, a `user@`, a port, percent-escapes, characters that print as nothing, trailing dots of a host or repeated and trailing slashes, with punycode decoded, `,` and the full stops of other scripts as dots, and look-alike letters as the letters they look like), or has a name over 256 bytes, with a character outside printable ASCII, or with a `%` (`INVALID_VERIFIER_KEY`), or the note or checkpoint is malformed (`MALFORMED_NOTE`, `MALFORMED_CHECKPOINT`).',
    ),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse(
      'The key lacks the `audit` scope or is the admin key (`FORBIDDEN`), or the cosignature does not verify, is dated past 2^63 - 1 (no cosignature at all), is dated in the future, or is dated before the log signed the checkpoint (`NOTE_NOT_VERIFIED`).',
    ),
    404: NotFoundResponse("This tenant's log never signed that checkpoint (`NOT_FOUND`)."),
    409: ConflictResponse(
      'The checkpoint already carries 32 cosignatures, the most the log serves, this API key already posted 2 on it, the most one key may, or another key with the same witness name and key ID already cosigned it (`CONFLICT`).',
    ),
    413: PayloadTooLargeResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
