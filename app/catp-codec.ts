// The CATP frame codec the host uses: Node's brotli (protocol/catp/payload-codec.ts brotliCodec; protocol/ is
// Node-free, so the zlib module is passed in).
import * as zlib from 'node:zlib';

import { brotliCodec, type FrameCodec } from '../protocol/catp';

export const catpCodec: FrameCodec = brotliCodec(zlib);
