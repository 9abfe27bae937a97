// Lint rules: typescript-eslint's recommended set, plus the architecture's import rule
// (README: "what may import what"): protocol/ imports nothing of ours; the agent never imports
// the coordinator; the coordinator never imports the agent; the CLI imports neither (it speaks the
// HTTP API only; `@deckhand/protocol` and `@deckhand/installer` are allowed); installer/ imports
// nothing of ours (the CLI and the coordinator both use it).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const boundary = (patterns) => ({
  'no-restricted-imports': ['error', { patterns }],
});

export default tseslint.config(
  { ignores: ['**/node_modules/**', '.data/**', '.ci/.tools/**', 'coverage/**', 'dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2024, sourceType: 'module' },
    rules: {
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'warn',
      'no-console': 'off',
      eqeqeq: ['error', 'always'],
    },
  },
  {
    files: ['protocol/**/*.ts'],
    rules: boundary([
      {
        group: ['@deckhand/*', '**/coordinator/**', '**/agent/**'],
        message: 'protocol/ imports nothing of ours.',
      },
    ]),
  },
  {
    files: ['agent/**/*.ts'],
    rules: boundary([
      {
        group: ['@deckhand/coordinator', '@deckhand/coordinator/*', '**/coordinator/**'],
        message: 'The agent never imports the coordinator.',
      },
    ]),
  },
  {
    files: ['coordinator/**/*.ts'],
    rules: boundary([
      {
        group: ['@deckhand/agent', '@deckhand/agent/*', '**/agent/src/**'],
        message: 'The coordinator never imports the agent.',
      },
    ]),
  },
  {
    files: ['installer/**/*.ts'],
    rules: boundary([
      {
        group: ['@deckhand/*', '**/coordinator/**', '**/agent/**', '**/cli/**'],
        message: 'installer/ imports nothing of ours: the CLI and the coordinator both use it.',
      },
    ]),
  },
  {
    files: ['cli/**/*.ts'],
    rules: boundary([
      {
        group: [
          '@deckhand/coordinator',
          '@deckhand/coordinator/*',
          '@deckhand/agent',
          '@deckhand/agent/*',
          '**/coordinator/**',
          '**/agent/**',
        ],
        message: 'The CLI imports neither the coordinator nor the agent: it speaks the HTTP API.',
      },
    ]),
  },
);
