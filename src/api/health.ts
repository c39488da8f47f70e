import { createRoute, z } from '@hono/zod-openapi';
import { ForbiddenResponse, InternalResponse, StorageUnavailableResponse, UnauthorizedResponse } from './common.js';

export const Health = z.strictObject({ status: z.literal('ok') }).openapi('Health');

// Only the status: a keyless caller learns nothing of the deployment (which database it runs on is
// the operator's to read, in the start-up line and /metrics' baton_db_pool_max_connections{driver}).
export const Readiness = z.strictObject({ status: z.enum(['ready', 'unready']) }).openapi('Readiness');

export const healthzRoute = createRoute({
  method: 'get',
  path: '/healthz',
  tags: ['operations'],
  operationId: 'healthz',
  summary: 'Liveness',
  description: 'Answers while the process serves HTTP; does not touch the database.',
  'x-baton-scopes': [],
  security: [],
  responses: { 200: { description: 'Alive.', content: { 'application/json': { schema: Health } } }, 500: InternalResponse() },
});

export const readyzRoute = createRoute({
  method: 'get',
  path: '/readyz',
  tags: ['operations'],
  operationId: 'readyz',
  summary: 'Readiness (the database answers within 2 s)',
  'x-baton-scopes': [],
  security: [],
  responses: {
    200: { description: 'Ready.', content: { 'application/json': { schema: Readiness } } },
    500: InternalResponse(),
    503: { description: 'Not ready. This body is not the error envelope.', content: { 'application/json': { schema: Readiness } } },
  },
});

export const metricsRoute = createRoute({
  method: 'get',
  path: '/metrics',
  tags: ['operations'],
  operationId: 'metrics',
  summary: "Prometheus metrics of this node (the operator's)",
  description:
    "Text exposition format 0.0.4, in base units (seconds, bytes): `baton_http_requests_total`, `baton_http_request_duration_seconds` (histogram), `baton_http_requests_in_flight`, `baton_verify_decisions_total`, `baton_verify_batch_items` and `baton_verify_batch_duration_seconds` (histograms of the group-commit statements: verifies per statement, round trip), `baton_db_pool_max_connections`, `baton_build_info`, `baton_tlog_pending_receipts` and `baton_tlog_oldest_pending_age_seconds` (the transparency log's backlog, read from the database at each scrape; NaN when it cannot be read), and the standard `process_*` and `nodejs_*` process and runtime metrics. Under `BATON_WORKERS` the answer sums every listening worker's metrics, whichever worker takes the scrape (`baton_workers_listening`), and is a `500` rather than a partial sum when one does not answer in time. Clean under `promtool check metrics`. The counters span every tenant, so they are the operator's: send `Authorization: Bearer` with the token set in `BATON_METRICS_TOKEN` (it reads this route and nothing else; give it to the scraper) or the admin key. A tenant key is `403`.",
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  responses: {
    200: { description: 'The metrics.', content: { 'text/plain': { schema: z.string() } } },
    401: UnauthorizedResponse('Neither the metrics token nor a valid API key (`UNAUTHORIZED`).'),
    403: ForbiddenResponse("A tenant key: the metrics are the operator's (`FORBIDDEN`)."),
    500: InternalResponse(),
    503: StorageUnavailableResponse(
      'A stored admin key could not be looked up in time (`STORAGE_UNAVAILABLE`); the metrics token needs no database to be let in (the backlog gauges then read NaN).',
    ),
  },
});
