import { ORDERS, realPages, runPage } from '../../helpers/catp-real-pages';
import { describeIf } from '../../helpers/requires';

const pages = realPages();
const half = 1;

describeIf(pages !== null, 'the real-pages corpus (../shared/corpus/real-pages)')('real pages (half b): ' + ORDERS + ' orders, 10% loss, repaired', () => {
  const files = pages ? pages.files.filter((_, i) => i % 2 === half) : [];
  test.each(files)('%s', (file) => {
    runPage((pages as { dir: string }).dir, file, ORDERS);
  }, 120_000);
});

if (!pages) test('real-pages corpus', () => console.log('real-pages corpus not found (../shared/corpus or CATP_CORPUS): skipped'));
