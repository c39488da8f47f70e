/**
 * The parts of the OpenAPI document that belong to no route: title, conventions,
 * tags and the security scheme. The paths and schemas come from the routes the
 * app declares (src/api/<resource>.ts), so the document is generated, never
 * written by hand.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { TENANT_KEY_SCOPES } from '../protocol/lists.js';
import { Bundle, InvocationSummary, Usd } from './common.js';
import { DelegationView } from './delegations.js';

export const OPENAPI_VERSION = '3.1.0';

export const DOCUMENT_CONFIG = {
  openapi: OPENAPI_VERSION,
  info: {
    title: 'Baton',
    version: '0.1.0',
    summary: 'Signed DRS 4.0 delegation records for AI agents, issued and verified fail-closed.',
    description:
      'Baton issues and records Ed25519-signed delegation records (DRs, DRS 4.0 compact JWS),\nverifies delegation chains before a tool runs, and keeps the runtime state a stateless\nverifier cannot keep: call counters, replay protection, revocation and metered spend.\n\nConventions that hold on every route:\n\n- Authentication is `Authorization: Bearer <key>`. Tenant keys carry scopes (' +
      TENANT_KEY_SCOPES.map((scope) => `\`${scope}\``).join(', ') +
      "); the admin key carries `admin` and belongs to no tenant. The scopes an operation accepts are listed in its `x-baton-scopes`.\n- A missing, unknown or revoked key is `401 UNAUTHORIZED`; a valid key without the scope is `403 FORBIDDEN` with `details.required_scopes`.\n- Another tenant's data does not exist for a key: `404`, never `403`.\n- Every refusal uses one envelope, `{error:{code, message, suggestion, details?}, request_id}`, with a stable `code` from `ErrorCode`. The one exception is `POST /v1/verify` (and `POST /verify`), whose policy denials are `403 {valid:false, error, violations}` as DRS clients expect.\n- Request bodies are strict JSON: valid UTF-8, no duplicate keys, at most 64 levels deep, at most `BATON_MAX_BODY_BYTES` (default 262144) bytes, else `413 PAYLOAD_TOO_LARGE`. Unknown fields are refused (except on verify, see there).\n- A query parameter an operation does not list is refused (`400 INVALID_REQUEST`), never ignored; so is any query on an operation that lists none. The exceptions: DRS's `POST /verify` ignores parameters it does not know, as drs-verify does, and so do the public reads that take no key (health, keys, the document).\n- Every response carries `X-Request-Id`; it equals `request_id` in error bodies. A request may supply its own (up to 64 letters, digits, `_`, `-` or `=`), otherwise Baton generates one.\n- A request that is not HTTP/1.1 Baton can read answers in the same envelope and closes its connection: `400 INVALID_REQUEST`, headers over 64 KiB `431 HEADERS_TOO_LARGE`, a request not in within the timeouts (`BATON_HEADERS_TIMEOUT_MS`, `BATON_REQUEST_TIMEOUT_MS`) `408 REQUEST_TIMEOUT`. The time a body takes to arrive moves a request's database deadline on, by at most the deadline's length; a request whose body took longer than that, and whose answer then did not come in the time left, is `408 REQUEST_TIMEOUT` too (nothing was changed; a verify whose statement was already sent answers 503 as any other late verify).\n- Unknown routes answer `404 NOT_FOUND` in the same envelope; a known route asked with another method answers `405 METHOD_NOT_ALLOWED` with an `Allow` header.\n- When the database cannot answer, Baton refuses with `503 STORAGE_UNAVAILABLE`: never an allow. An operation that takes a body may also answer `503 SERVICE_BUSY`, with `Retry-After`, when the process is receiving as many request body bytes at once as it holds (`BATON_MAX_BODY_BUFFER_BYTES`; requests without a key hold half of it at most, and one tenant's requests an eighth, so neither alone makes another tenant's wait): nothing ran, so send it again after `Retry-After` seconds.",
    license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
  },
  tags: [
    { name: 'verify', description: 'The hot path a tool server calls before every tool execution.' },
    { name: 'delegations', description: 'Submit signed delegation records, issue custodial roots, read chains and trees, revoke.' },
    { name: 'invocations', description: 'Metered actuals reported after execution, and audit reads of invocations.' },
    { name: 'service-receipts', description: 'Service receipts: the records the service signed for what it did, paged for auditors.' },
    {
      name: 'log',
      description:
        "Each tenant's transparency log of its service receipts (C2SP tlog formats): checkpoints, tiles, proofs and witness cosignatures.",
    },
    { name: 'tools', description: "Each tenant's tool catalog and approval rules, and explanations of a call against them." },
    {
      name: 'approvals',
      description: 'Calls waiting for a human decision, and delegations held because their tools together form the lethal trifecta.',
    },
    { name: 'keys', description: "The service's public verification keys, current and retired." },
    { name: 'admin', description: 'Tenants, their trusted root DIDs and their API keys. Admin key only.' },
    { name: 'operations', description: 'Liveness, readiness and Prometheus metrics.' },
    { name: 'docs', description: 'This document and its rendered page.' },
  ],
  security: [{ bearerAuth: [] }],
};

export const BEARER_AUTH = {
  type: 'http',
  scheme: 'bearer',
  bearerFormat: 'Baton API key',
  description:
    '`Authorization: Bearer <key>`. Tenant keys look like `bt_` + 43 base64url characters; the admin key is `BATON_ADMIN_KEY` or a generated `bt_admin_...` key printed once on first start. `GET /metrics` also accepts the token set in `BATON_METRICS_TOKEN` (which reads that route and nothing else). Keys are stored only as SHA-256 and compared in constant time.',
} as const;

/** Registers what the routes reference but do not carry themselves. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any app's env
export function registerDocumentComponents(app: OpenAPIHono<any>): void {
  app.openAPIRegistry.registerComponent('securitySchemes', 'bearerAuth', BEARER_AUTH);
  // Before any field that describes its own amount (`Usd.openapi({description})`): the component is
  // whichever variant the generator meets first, so the plain one must come first.
  app.openAPIRegistry.register('Usd', Usd);
  // The X-DRS-Bundle header carries this shape base64url-encoded; no body schema refers to it.
  app.openAPIRegistry.register('Bundle', Bundle);
  // Bases the response shapes extend (flattened there): named so clients can type a record or an invocation.
  app.openAPIRegistry.register('DelegationView', DelegationView);
  app.openAPIRegistry.register('InvocationSummary', InvocationSummary);
}
