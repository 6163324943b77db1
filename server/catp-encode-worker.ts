// The worker thread that encodes pages for CATP (server/catp-encoder.ts): encoding a page is CPU work of up to
// seconds (brotli per frame, the index's fit search), which on the server's own thread would stall every other
// client's frames and answers meanwhile.
import { parentPort } from 'node:worker_threads';

import { encodeForMode, errorCode, type EncodeJob, type EncodeReply } from './catp-encode';
import { ServerError } from './errors';

if (parentPort === null) throw new ServerError('SERVER_ERR_NOT_A_WORKER', 'catp-encode-worker runs as a worker thread');
const port = parentPort;

port.on('message', (job: EncodeJob) => {
  let reply: EncodeReply;
  let transfer: ArrayBuffer[] = [];
  try {
    const e = encodeForMode(job.mode, job.body, job.blockCut, job.quality, job.encoding, job.coding);
    reply = { id: job.id, ok: true, frames: e.frames, indexFrames: e.indexFrames };
    // Each frame owns its buffer unless several share one: transfer each buffer once.
    transfer = [...new Set(e.frames.map((f) => f.buffer as ArrayBuffer))];
  } catch (err) {
    reply = { id: job.id, ok: false, code: errorCode(err) };
  }
  port.postMessage(reply, transfer);
});
