/**
 * npm run openapi: writes openapi.yaml from the app's routes (src/api). A test
 * fails when the checked-in file differs, so run this after changing a route.
 */
import { writeFileSync } from 'node:fs';
import { toYaml } from '../src/api/yaml.js';
import { generatedApiDocument } from '../src/service/app.js';

const root = new URL('../', import.meta.url);
writeFileSync(new URL('openapi.yaml', root), toYaml(generatedApiDocument()));
