// A page is laid out in the mode its doctype gives it (HTML's no-quirks, limited-quirks and quirks modes), whatever
// the transport. In-order and TCP pages go through the page frame's own parser, which reads the doctype; a CATP
// page is built by DOM operations, and only a parser sets a document's mode: the agent's empty document (opened and
// closed with nothing written) was in quirks mode, so every CATP page was laid out as a quirks page (a broken
// image with a size drawn as a box, a list item's marker on a line of its own, table cells taller or shorter).
// Since session 63 the agent empties the document for a load in no-quirks mode (most pages'), and parses it again
// only for a page in another mode: each transport here loads the modes in turn, so each follows another.
import { chromiumPresent, pageFrame, startRig, type Rig } from './helpers';
import { describeIf } from '../helpers/requires';

const maybe = describeIf(chromiumPresent, 'Chromium (apt-get install chromium)');
jest.setTimeout(120_000);

const DOCTYPES = {
  'no-quirks': '<!DOCTYPE html>',
  'limited-quirks': '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">',
  quirks: '',
} as const;
type Mode = keyof typeof DOCTYPES;

// The line-height quirk tells limited-quirks from no-quirks (both say CSS1Compat): a cell holding only a 10 px box
// is a line tall in no-quirks mode (the line's strut), 10 px in the other two.
const BODY = `<html><head><title>mode</title><style>body{margin:0;font:16px/20px sans-serif}table{border-collapse:collapse}td{padding:0}</style></head>
<body><table><tr><td id="cell"><span style="display:inline-block;width:10px;height:10px;background:#000"></span></td></tr></table><p id="end">end</p></body></html>`;
const EXPECTED: Record<Mode, { compatMode: string; cell: number }> = {
  'no-quirks': { compatMode: 'CSS1Compat', cell: 20 },
  'limited-quirks': { compatMode: 'CSS1Compat', cell: 10 },
  quirks: { compatMode: 'BackCompat', cell: 10 },
};
const MODES = Object.keys(DOCTYPES) as Mode[];

maybe('the page document is in the mode the page’s doctype gives', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig({ extraFiles: Object.fromEntries(MODES.map((m) => [`mode-${m}.html`, DOCTYPES[m] + BODY])) });
  });
  afterAll(async () => {
    await rig?.close();
  });

  // each transport loads the three in turn, so every load follows one in another mode
  test.each(['catp', 'inorder', 'tcp'] as const)('%s', async (transport) => {
    for (const mode of [...MODES, 'no-quirks' as const]) {
      const url = transport === 'tcp' ? `http://127.0.0.1:${rig.server.port}/mode-${mode}.html` : `${rig.base}/mode-${mode}.html`;
      const record = await rig.loadUrl(url, transport);
      expect(record.outcome).toBe('complete');
      const frame = pageFrame(rig.page);
      expect(await frame.locator('#end').textContent()).toBe('end');
      const got = await frame.locator('#cell').evaluate((td) => ({ compatMode: td.ownerDocument.compatMode, cell: Math.round(td.getBoundingClientRect().height) }));
      expect([transport, mode, got]).toEqual([transport, mode, EXPECTED[mode]]);
    }
  });
});
