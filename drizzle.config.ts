// drizzle-kit reads this to generate SQL from src/store/schema. The generated
// (and hand-written custom) SQL in migrations/ is what runs at start.
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './src/store/schema/index.ts',
  out: './migrations',
  strict: true,
  verbose: true,
});
