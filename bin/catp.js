#!/usr/bin/env node
// Entry point for `npx catp`: runs the compiled CLI (built by `npm install` / `npm run build`).
'use strict';
const path = require('node:path');
const fs = require('node:fs');
const entry = path.join(__dirname, '..', 'dist', 'cli', 'main.js');
if (!fs.existsSync(entry)) {
  process.stderr.write('catp: the project is not built yet; run `npm install` (or `npm run build`) first.\n');
  process.exit(1);
}
require(entry).main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (err) => { process.stderr.write(`catp: ${err && err.stack ? err.stack : err}\n`); process.exitCode = 1; },
);
