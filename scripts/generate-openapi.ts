/**
 * npm run openapi: writes openapi.yaml from the app's routes (src/api), and
 * src/api/wire-types.ts (plain TypeScript types of the same document, for the
 * SDK, which must not depend on zod). Tests fail when either checked-in file
 * differs, so run this after changing a route or a schema.
 */
import { writeFileSync } from 'node:fs';
import { toYaml } from '../src/api/yaml.js';
import { generatedApiDocument } from '../src/service/app.js';
import { WIRE_TYPES_FILE, wireTypesSource } from './wire-types.js';

const root = new URL('../', import.meta.url);
const document = generatedApiDocument();
writeFileSync(new URL('openapi.yaml', root), toYaml(document));
writeFileSync(WIRE_TYPES_FILE, await wireTypesSource(document));
