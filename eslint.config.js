// Layer rules (see README "Folders"): a file's folder says where it runs and what it may import.
const js = require('@eslint/js');
const tseslint = require('typescript-eslint');

const nodeBuiltins = ['node:*', 'fs', 'net', 'dgram', 'os', 'path', 'child_process', 'http', 'https', 'crypto', 'timers', 'worker_threads', 'events'];
// '**/server/**' alone misses a folder's index ('../server'): every folder pattern also names the folder itself.
const withIndex = (patterns) => patterns.flatMap((p) => (p.endsWith('/**') ? [p, p.slice(0, -3)] : [p]));
const restrict = (patterns, message) => ({
  'no-restricted-imports': ['error', { patterns: [{ group: withIndex(patterns), message }] }],
});

module.exports = tseslint.config(
  { ignores: ['node_modules/**', 'dist/**', 'build/**', 'test-artifacts/**', 'bin/**', '*.config.js', 'eslint.config.js'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // Errors carry a stable code: every layer throws its own class (ProtocolError, HostError, ServerError,
    // LabError, RendererError, BenchError, UsageError, ...), never a bare Error.
    files: ['protocol/**/*.ts', 'native/**/*.ts', 'platform/**/*.ts', 'app/**/*.ts', 'server/**/*.ts', 'renderer/**/*.ts', 'lab/**/*.ts', 'cli/**/*.ts', 'bench/**/*.ts', 'electron/**/*.ts'],
    rules: {
      'no-restricted-syntax': ['error', {
        selector: "NewExpression[callee.name='Error'], CallExpression[callee.name='Error']",
        message: 'throw the layer\'s error class with a stable code (HostError, LabError, ServerError, ...), not a bare Error.',
      }],
    },
  },
  {
    // Sans-IO: no Node, no DOM, nothing of ours but protocol itself.
    files: ['protocol/**/*.ts'],
    rules: {
      ...restrict([...nodeBuiltins, '**/app/**', '**/native/**', '**/platform/**', '**/server/**', '**/renderer/**', '**/lab/**', '**/cli/**'],
        'protocol/ is sans-IO: no Node modules, no sockets, timers, clocks or files, and no other layer of ours.'),
      'no-restricted-globals': ['error', 'setTimeout', 'setInterval', 'setImmediate', 'performance', 'process', 'require', 'Buffer'],
      'no-restricted-properties': ['error', { object: 'Date', property: 'now' }],
    },
  },
  {
    // binding.gyp's build-time probe (native/has-brotli.js): a plain CommonJS script node-gyp runs with Node
    files: ['native/*.js'],
    languageOptions: { sourceType: 'commonjs', globals: { require: 'readonly', process: 'readonly' } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    files: ['native/**/*.ts'],
    rules: restrict(['**/app/**', '**/protocol/**', '**/platform/**', '**/server/**', '**/renderer/**', '**/lab/**', '**/cli/**'],
      'native/ wraps the addon only; protocol logic lives in protocol/.'),
  },
  {
    // Node-only helpers the host and the server share (sha256): Node's built-ins, nothing of ours.
    files: ['platform/**/*.ts'],
    rules: restrict(['**/app/**', '**/native/**', '**/protocol/**', '**/server/**', '**/renderer/**', '**/lab/**', '**/cli/**', '**/bench/**', '**/electron/**', '**/test/**'],
      'platform/ may import Node built-ins only: app/ and server/ import it, never the reverse.'),
  },
  {
    files: ['app/**/*.ts'],
    rules: restrict(['**/server/**', '**/renderer/**', '**/lab/**', '**/cli/**'], 'app/ may import protocol/, native/ and platform/ only.'),
  },
  {
    files: ['server/**/*.ts'],
    rules: restrict(['**/app/**', '**/native/**', '**/renderer/**', '**/lab/**', '**/cli/**'], 'server/ may import protocol/ and platform/ only.'),
  },
  {
    files: ['renderer/**/*.ts'],
    rules: {
      // Only types may come from protocol/ (the browser API contract is protocol/browser/api.ts).
      '@typescript-eslint/no-restricted-imports': ['error', {
        patterns: [
          { group: withIndex([...nodeBuiltins, '**/app/**', '**/native/**', '**/platform/**', '**/server/**', '**/lab/**', '**/cli/**', '**/electron/**']),
            message: 'renderer/ runs in the page: no Node, and only protocol/ types.' },
          // protocol/silent-time.ts is the one value import: the metric itself, pure and dependency-free.
          { group: ['**/protocol/**', '!**/protocol/silent-time'], allowTypeImports: true,
            message: 'renderer/ may import protocol/ as types only (`import type`), the browser API (protocol/browser/api.ts) included.' },
        ],
      }],
      'no-restricted-globals': ['error', 'process', 'require', 'Buffer', '__dirname'],
    },
  },
  {
    // The lab drives real processes and namespaces: it may use protocol/, native/, app/ and server/ (what it
    // measures), but no command line (cli/ calls the lab, never the reverse) and nothing of the page or shells.
    files: ['lab/**/*.ts'],
    rules: restrict(['**/cli/**', '**/renderer/**', '**/electron/**', '**/bench/**'], 'lab/ is called by cli/ and bench/, never the reverse; the page and the shells are not its.'),
  },
  {
    // The command line: app, server, lab and the protocol types; no page code, no shells, no benchmarks.
    files: ['cli/**/*.ts'],
    rules: restrict(['**/renderer/**', '**/electron/**', '**/bench/**'], 'cli/ may import app/, server/, lab/, protocol/, native/ and platform/ only.'),
  },
  {
    // Benchmarks measure the other layers; nothing imports them, and they do not reach into the command line.
    files: ['bench/**/*.ts'],
    rules: restrict(['**/cli/**', '**/renderer/**', '**/electron/**'], 'bench/ measures app/, server/, lab/, protocol/, native/ and platform/ directly, not through cli/.'),
  },
  {
    // Electron main process: like app/ (it is a shell's host side) plus Electron itself.
    files: ['electron/**/*.ts'],
    ignores: ['electron/preload.ts'],
    rules: restrict(['**/server/**', '**/renderer/**', '**/lab/**', '**/cli/**', '**/native/**'],
      'electron/ main talks to the host through app/ (and the API contract in protocol/browser/api.ts) only.'),
  },
  {
    // The sandboxed preload can require nothing but 'electron': types only from our code.
    files: ['electron/preload.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': ['error', {
        patterns: [
          { group: [...nodeBuiltins], message: 'the preload is sandboxed: no Node modules.' },
          { group: ['../**', './**'], allowTypeImports: true, message: 'a sandboxed preload cannot require our files: types only.' },
        ],
      }],
    },
  },
);
