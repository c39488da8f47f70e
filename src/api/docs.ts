import { createRoute, z } from '@hono/zod-openapi';
import { InternalResponse } from './common.js';

export const docsPageRoute = createRoute({
  method: 'get',
  path: '/docs',
  tags: ['docs'],
  operationId: 'docsPage',
  summary: 'This API, rendered as one self-contained HTML page',
  description: 'No scripts and no external resources, so it works in air-gapped deployments.',
  'x-baton-scopes': [],
  security: [],
  responses: { 200: { description: 'The page.', content: { 'text/html': { schema: z.string() } } }, 500: InternalResponse() },
});

export const openapiYamlRoute = createRoute({
  method: 'get',
  path: '/openapi.yaml',
  tags: ['docs'],
  operationId: 'openapiYaml',
  summary: 'This document (YAML)',
  'x-baton-scopes': [],
  security: [],
  responses: {
    200: { description: 'The OpenAPI 3.1 document, as written.', content: { 'text/yaml': { schema: z.string() } } },
    500: InternalResponse(),
  },
});

export const openapiJsonRoute = createRoute({
  method: 'get',
  path: '/openapi.json',
  tags: ['docs'],
  operationId: 'openapiJson',
  summary: 'This document (JSON)',
  'x-baton-scopes': [],
  security: [],
  responses: {
    200: {
      description: 'The OpenAPI 3.1 document, as JSON.',
      content: {
        'application/json': {
          schema: z.object({ openapi: z.literal('3.1.0'), info: z.object({}), paths: z.object({}), components: z.object({}) }),
        },
      },
    },
    500: InternalResponse(),
  },
});
