/**
 * The transparency log's HTTP contract: one declaration per route (zod
 * schemas with OpenAPI names and examples). Handlers are in
 * src/service/log.handlers.ts. Every route needs an `audit` key and serves
 * the key's own tenant's log only.
 */
import { createRoute, z } from '@hono/zod-openapi';

const decimal = z
  .string()
  .regex(/^(0|[1-9][0-9]{0,14})$/, 'must be a non-negative whole number')
  .transform(Number);

const ErrorEnvelope = z
  .object({
    error: z.object({
      code: z.string(),
      message: z.string(),
      suggestion: z.string(),
      details: z.record(z.string(), z.unknown()).optional(),
    }),
    request_id: z.string(),
  })
  .openapi('LogError');

const errors = {
  400: { description: 'Malformed request', content: { 'application/json': { schema: ErrorEnvelope } } },
  401: { description: 'Missing or invalid API key', content: { 'application/json': { schema: ErrorEnvelope } } },
  403: { description: 'The key lacks the audit scope', content: { 'application/json': { schema: ErrorEnvelope } } },
  404: { description: "Not in this tenant's log (yet)", content: { 'application/json': { schema: ErrorEnvelope } } },
  503: { description: 'The database is unavailable', content: { 'application/json': { schema: ErrorEnvelope } } },
} as const;

const security = [{ bearerAuth: [] }];

export const LogInfo = z
  .object({
    origin: z.string().openapi({ example: 'baton.example.com/baton/ten_4f2a' }),
    tree_size: z.number().int().nonnegative(),
    root_hash: z.string().openapi({ description: 'base64 SHA-256 root of the latest checkpoint' }),
    verifier_keys: z
      .array(z.string())
      .openapi({ description: 'C2SP note verifier keys of the log (one per published service key, current first)' }),
  })
  .openapi('LogInfo');

export const logInfoRoute = createRoute({
  method: 'get',
  path: '/v1/log',
  summary: "The tenant's transparency log: origin, size and verifier keys",
  security,
  responses: { 200: { description: 'The log', content: { 'application/json': { schema: LogInfo } } }, ...errors },
});

const noteText = { 'text/plain; charset=utf-8': { schema: z.string().openapi({ description: 'C2SP signed note' }) } };

export const latestCheckpointRoute = createRoute({
  method: 'get',
  path: '/v1/log/checkpoint',
  summary: 'The latest signed checkpoint (C2SP tlog-checkpoint) with its witness cosignatures',
  security,
  responses: { 200: { description: 'Signed checkpoint', content: noteText }, ...errors },
});

export const checkpointOfSizeRoute = createRoute({
  method: 'get',
  path: '/v1/log/checkpoints/{size}',
  summary: 'The signed checkpoint of one tree size, with its witness cosignatures',
  security,
  request: { params: z.object({ size: decimal.openapi({ param: { name: 'size', in: 'path' }, example: '42' }) }) },
  responses: { 200: { description: 'Signed checkpoint', content: noteText }, ...errors },
});

export const tileRoute = createRoute({
  method: 'get',
  path: '/v1/log/tile/{path{.+}}',
  summary: 'A tile or entry bundle (C2SP tlog-tiles), e.g. tile/0/x001/234 or tile/entries/000.p/17',
  security,
  responses: {
    200: {
      description: 'Tile bytes: full tiles are immutable, partial tiles change as the log grows',
      content: { 'application/octet-stream': { schema: z.string().openapi({ format: 'binary' }) } },
    },
    ...errors,
  },
});

export const ReceiptProof = z
  .object({
    receipt: z.object({ id: z.number().int(), jws: z.string() }),
    leaf_index: z.number().int().nonnegative(),
    tree_size: z.number().int().positive(),
    proof: z.string().openapi({ description: 'C2SP tlog-proof bundle (c2sp.org/tlog-proof@v1) under the signed checkpoint' }),
  })
  .openapi('ReceiptLogProof');

export const receiptProofRoute = createRoute({
  method: 'get',
  path: '/v1/log/receipts/{id}/proof',
  summary: 'A service receipt with its inclusion proof, once integrated',
  security,
  request: {
    params: z.object({ id: decimal.openapi({ param: { name: 'id', in: 'path' }, example: '17' }) }),
    query: z.strictObject({ tree_size: decimal.optional().openapi({ description: 'prove under this stored checkpoint; default latest' }) }),
  },
  responses: { 200: { description: 'Receipt and proof', content: { 'application/json': { schema: ReceiptProof } } }, ...errors },
});

export const ConsistencyProof = z
  .object({
    from: z.number().int().positive(),
    to: z.number().int().positive(),
    proof: z.array(z.string()).openapi({ description: 'base64 hashes (RFC 9162 section 2.1.4)' }),
  })
  .openapi('LogConsistencyProof');

export const consistencyRoute = createRoute({
  method: 'get',
  path: '/v1/log/consistency',
  summary: 'A consistency proof between two tree sizes',
  security,
  request: { query: z.strictObject({ from: decimal, to: decimal }) },
  responses: { 200: { description: 'Proof', content: { 'application/json': { schema: ConsistencyProof } } }, ...errors },
});

export const CosignatureSubmission = z
  .strictObject({
    witness_key: z.string().openapi({ description: 'the witness cosignature verifier key (type 0x04)' }),
    checkpoint: z.string().openapi({ description: "a checkpoint note served by this log, with the witness's cosignature line added" }),
  })
  .openapi('CosignatureSubmission');

export const CosignatureStored = z
  .object({ tree_size: z.number().int().positive(), witness: z.string(), stored: z.boolean() })
  .openapi('CosignatureStored');

export const cosignRoute = createRoute({
  method: 'post',
  path: '/v1/log/cosignatures',
  summary: 'A witness adds its cosignature (C2SP tlog-cosignature) to a checkpoint it checked',
  security,
  request: { body: { required: true, content: { 'application/json': { schema: CosignatureSubmission } } } },
  responses: {
    201: { description: 'Stored', content: { 'application/json': { schema: CosignatureStored } } },
    200: {
      description: 'This witness had already cosigned this checkpoint',
      content: { 'application/json': { schema: CosignatureStored } },
    },
    ...errors,
  },
});
