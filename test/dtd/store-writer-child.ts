// Child process for the crash test: writes large payloads into the store forever, announcing each write
// on stdout before it starts. The parent SIGKILLs it in the middle of one.
import { randomBytes } from 'node:crypto';

import { PayloadStore } from '../../app/payload-store';

async function main(): Promise<void> {
  const dir = process.argv[2];
  const size = Number(process.argv[3]);
  const store = await PayloadStore.open({ dir, budgetBytes: 1024 * 1024 * 1024, maxEntryBytes: size * 2 });
  for (let i = 0; ; i++) {
    const body = randomBytes(size);
    process.stdout.write(`writing ${i}\n`);
    await store.put(`dhttp://127.0.0.1:9/${i}.bin`, body);
    process.stdout.write(`wrote ${i}\n`);
  }
}

void main();
