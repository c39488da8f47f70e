// Lint: typescript-eslint's recommended rules, plus the few that catch real bugs in this codebase.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * Layers (issue 11): each layer imports only the ones below it. Paths are
 * relative, so each rule names the directories a file may not reach, one and
 * two levels up (src/store/schema sits one deeper).
 */
const outside = (...dirs) => dirs.flatMap((d) => [`../${d}/*`, `../../${d}/*`, `../${d}.js`, `../../${d}.js`]);
const layer = (files, forbidden, message, extra = []) => ({
  files,
  rules: {
    '@typescript-eslint/no-restricted-imports': ['error', { patterns: [{ group: outside(...forbidden), message }, ...extra] }],
  },
});
const NO_SQL = 'Handlers write no SQL: call a src/store function.';
const layers = [
  {
    files: ['src/protocol/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        { patterns: [{ group: ['../*', '../../*'], message: 'src/protocol is pure and imports nothing else of the project.' }] },
      ],
    },
  },
  layer(['src/store/**/*.ts'], ['api', 'service', 'sdk', 'mcp', 'cli', 'server', 'main'], 'src/store imports only src/protocol.'),
  layer(['src/api/**/*.ts'], ['store', 'service', 'sdk', 'mcp', 'cli', 'server', 'main'], 'src/api imports only src/protocol.'),
  layer(['src/service/**/*.ts'], ['sdk', 'mcp', 'cli'], 'src/service imports src/protocol, src/api and src/store only.'),
  {
    // Handlers are thin: parse, call one store or service function, map the result.
    files: ['src/service/*.handlers.ts', 'src/service/custodial.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: outside('sdk', 'mcp', 'cli'), message: 'src/service imports src/protocol, src/api and src/store only.' },
            { group: ['./*.handlers.js'], message: 'Handlers do not import handlers: share through a service-level module.' },
            { group: ['drizzle-orm/*', 'postgres/*', '@electric-sql/*'], message: NO_SQL },
          ],
          paths: [
            { name: 'drizzle-orm', message: NO_SQL },
            { name: 'postgres', message: NO_SQL },
            {
              name: '../store/errors.js',
              importNames: [
                'pgError',
                'isUniqueViolation',
                'isCheckViolation',
                'PG_UNIQUE_VIOLATION',
                'PG_CHECK_VIOLATION',
                'PG_FOREIGN_KEY_VIOLATION',
                'PG_RAISE_EXCEPTION',
              ],
              message: 'Handlers do not interpret PostgreSQL errors: the src/store function returns a typed result or throws a BatonError.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['src/sdk/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: outside('store', 'service', 'mcp', 'cli', 'server', 'main'),
              message: 'src/sdk imports src/protocol and the types of src/api only.',
            },
            { group: outside('api'), message: 'src/sdk imports only the types of src/api (no zod at run time).', allowTypeImports: true },
          ],
        },
      ],
    },
  },
  layer(['src/mcp/**/*.ts'], ['store', 'service', 'api', 'cli', 'server', 'main'], 'src/mcp imports the SDK.'),
  layer(['src/cli/**/*.ts'], ['store', 'service', 'api', 'mcp'], 'src/cli imports the SDK (and the server entry, for serve only).'),
  {
    files: ['src/cli/**/*.ts'],
    ignores: ['src/cli/serve.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: outside('store', 'service', 'api', 'mcp'),
              message: 'src/cli imports the SDK (and the server entry, for serve only).',
            },
            { group: ['../server.js', '../main.js'], message: 'Only `baton serve` (src/cli/serve.ts) loads the server.' },
          ],
        },
      ],
    },
  },
];

export default tseslint.config(
  { ignores: ['node_modules/', 'dist/', '.baton/', 'coverage/', 'test/vectors/', '.bexp/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        URL: 'readonly',
        fetch: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        performance: 'readonly',
        AbortController: 'readonly',
        TextDecoder: 'readonly',
        TextEncoder: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      'no-console': 'off',
      // Security code matches control characters on purpose (refusing them).
      'no-control-regex': 'off',
    },
  },
  ...layers,
);
