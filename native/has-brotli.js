// Prints 1 when libbrotli's decoder can be compiled and linked here (Debian: libbrotli-dev), else 0; binding.gyp
// builds the addon's brotli frame decoder only then. CATP_NATIVE_BROTLI=0 leaves it out (Node's decoder is used).
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

function probe() {
  if (process.env.CATP_NATIVE_BROTLI === '0') return false;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-brotli-'));
  try {
    const src = path.join(dir, 'probe.cc');
    fs.writeFileSync(src, '#include <brotli/decode.h>\nint main() { return BrotliDecoderVersion() == 0; }\n');
    const cxx = process.env.CXX || 'c++';
    const r = spawnSync(cxx, [src, '-o', path.join(dir, 'probe'), '-lbrotlidec'], { stdio: 'ignore' });
    return r.status === 0;
  } catch {
    return false;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

process.stdout.write(probe() ? '1' : '0');
