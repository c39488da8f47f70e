import { createRoute, z } from '@hono/zod-openapi';
import { DidKey, Timestamp, StorageUnavailableResponse, InternalResponse, orNull } from './common.js';

export const ServiceKey = z
  .strictObject({
    kid: z.string(),
    did: DidKey,
    alg: z.literal('EdDSA'),
    public_key: z
      .string()
      .regex(/^[A-Za-z0-9_-]{43}$/)
      .openapi({ description: 'base64url of the raw 32-byte Ed25519 public key.', example: 'O2onvM62pC1io6jQKm8Nc2UyFXcd4kOmOsBIoYtZ2ik' }),
    status: z.enum(['current', 'retired']),
    created_at: Timestamp,
    retired_at: orNull(Timestamp),
  })
  .openapi('ServiceKey');

export const ServiceKeyList = z.strictObject({ keys: z.array(ServiceKey) }).openapi('ServiceKeyList');

export const Jwk = z
  .strictObject({
    kty: z.literal('OKP'),
    crv: z.literal('Ed25519'),
    x: z
      .string()
      .regex(/^[A-Za-z0-9_-]{43}$/)
      .openapi({ example: 'O2onvM62pC1io6jQKm8Nc2UyFXcd4kOmOsBIoYtZ2ik' }),
    kid: z.string(),
    use: z.literal('sig'),
    alg: z.literal('EdDSA'),
  })
  .openapi('Jwk');

export const Jwks = z.strictObject({ keys: z.array(Jwk) }).openapi('Jwks');

export const listServiceKeysRoute = createRoute({
  method: 'get',
  path: '/v1/keys',
  tags: ['keys'],
  operationId: 'listServiceKeys',
  summary: "The service's service-receipt-signing keys, current first",
  description: 'Public. Retired keys stay listed so old service receipts remain verifiable. Cacheable for 60 s.',
  'x-baton-scopes': [],
  security: [],
  responses: {
    200: { description: 'The keys.', content: { 'application/json': { schema: ServiceKeyList } } },
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});

export const getJwksRoute = createRoute({
  method: 'get',
  path: '/.well-known/jwks.json',
  tags: ['keys'],
  operationId: 'getJwks',
  summary: 'The same keys as a JSON Web Key Set',
  description: 'Public. Ed25519 keys as OKP JWKs (RFC 8037). Cacheable for 60 s.',
  'x-baton-scopes': [],
  security: [],
  responses: {
    200: { description: 'The key set.', content: { 'application/json': { schema: Jwks } } },
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
