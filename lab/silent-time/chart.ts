// The chart in the style of the CATP paper's Figure 7: mean silent time against loss, one line per
// transport, one panel per page (four to a row); the network floor of the same loads dashed in the transport's colour.
// Hand-written SVG; PNG by rendering that SVG in headless Chromium and taking a screenshot.
import * as fs from 'node:fs';

import { type SummaryRow } from './report';
import { CHROMIUM, chromiumArgs } from './updates';

const COLORS: Record<string, string> = { catp: '#1b9e77', inorder: '#d95f02', tcp: '#7570b3', chromium: '#e7298a', h3: '#66a61e' };
const FALLBACK = ['#66a61e', '#e6ab02', '#a6761d', '#666666'];

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

function niceMax(x: number): number {
  if (!(x > 0)) return 1;
  const e = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * e >= x) return m * e;
  return 10 * e;
}

export function chartSvg(rows: readonly SummaryRow[], title = 'Silent time vs loss'): string {
  const pages = [...new Set(rows.map((r) => r.page))];
  const transports = [...new Set(rows.map((r) => r.transport))];
  const color = (t: string) => COLORS[t] ?? FALLBACK[transports.indexOf(t) % FALLBACK.length]!;
  const losses = [...new Set(rows.map((r) => r.loss))].sort((a, b) => a - b);
  // A row of up to four panels, then the next row: a dozen pages stay readable (one row of 12 was 6,000 px wide).
  const cols = Math.max(1, Math.min(pages.length, 4));
  const gridRows = Math.max(1, Math.ceil(pages.length / cols));
  const pw = pages.length > 2 ? 320 : 420;
  const ph = pages.length > 2 ? 220 : 300;
  const m = { l: 64, r: 16, t: 48, b: 56 };
  const FLOOR_LABEL = 'network floor (same loads)';
  const legendWidth = transports.reduce((w, t) => w + 40 + t.length * 8, 0) + 30 + FLOOR_LABEL.length * 7;
  const panelW = pw + m.l + m.r;
  const panelH = ph + m.t + m.b;
  const W = Math.max(cols * panelW, m.l + legendWidth + m.r);
  const H = gridRows * panelH + 28;
  const xMax = Math.max(...losses, 0.01);
  // Each panel its own scale: with one scale for all, a page whose TCP mean reached 8.6 s (one 26 s load) drew
  // every other page's lines at the floor of its panel.
  const panelMax = (page: string) => niceMax(Math.max(...rows.filter((r) => r.page === page).flatMap((r) => [r.silentMean, r.floorMean]).filter(Number.isFinite), 1));
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="${W / 2}" y="18" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`,
  ];
  pages.forEach((page, pi) => {
    const ox = (pi % cols) * panelW + m.l;
    const oy = Math.floor(pi / cols) * panelH + m.t;
    const yMax = panelMax(page);
    const x = (l: number) => ox + (l / xMax) * pw;
    const y = (v: number) => oy + ph - (v / yMax) * ph;
    parts.push(`<text x="${ox + pw / 2}" y="${oy - 10}" text-anchor="middle" font-weight="bold">${esc(page)}</text>`);
    for (let i = 0; i <= 5; i++) {
      const v = (yMax * i) / 5;
      parts.push(`<line x1="${ox}" x2="${ox + pw}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>`);
      parts.push(`<text x="${ox - 6}" y="${y(v) + 4}" text-anchor="end">${Math.round(v)}</text>`);
    }
    for (const l of losses) parts.push(`<text x="${x(l)}" y="${oy + ph + 16}" text-anchor="middle">${Math.round(l * 1000) / 10}%</text>`);
    parts.push(`<rect x="${ox}" y="${oy}" width="${pw}" height="${ph}" fill="none" stroke="#333"/>`);
    parts.push(`<text x="${ox + pw / 2}" y="${oy + ph + 36}" text-anchor="middle">packet loss</text>`);
    parts.push(`<text transform="translate(${ox - 46},${oy + ph / 2}) rotate(-90)" text-anchor="middle">mean silent time (ms)</text>`);
    for (const t of transports) {
      const pts = rows.filter((r) => r.page === page && r.transport === t).sort((a, b) => a.loss - b.loss);
      const line = (pick: (r: SummaryRow) => number, dash: string, marker: boolean) => {
        const ok = pts.filter((r) => Number.isFinite(pick(r)));
        if (ok.length === 0) return;
        parts.push(`<polyline fill="none" stroke="${color(t)}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ''} points="${ok.map((r) => `${x(r.loss).toFixed(1)},${y(pick(r)).toFixed(1)}`).join(' ')}"/>`);
        if (marker) for (const r of ok) parts.push(`<circle cx="${x(r.loss).toFixed(1)}" cy="${y(pick(r)).toFixed(1)}" r="3.5" fill="${color(t)}"/>`);
      };
      line((r) => r.silentMean, '', true);
      line((r) => r.floorMean, '6 4', false);
    }
  });
  // legend
  let lx = m.l;
  const ly = H - 12;
  for (const t of transports) {
    parts.push(`<line x1="${lx}" x2="${lx + 24}" y1="${ly - 4}" y2="${ly - 4}" stroke="${color(t)}" stroke-width="2"/><circle cx="${lx + 12}" cy="${ly - 4}" r="3.5" fill="${color(t)}"/>`);
    parts.push(`<text x="${lx + 30}" y="${ly}">${esc(t)}</text>`);
    lx += 40 + t.length * 8;
  }
  parts.push(`<line x1="${lx}" x2="${lx + 24}" y1="${ly - 4}" y2="${ly - 4}" stroke="#333" stroke-width="2" stroke-dasharray="6 4"/><text x="${lx + 30}" y="${ly}">${FLOOR_LABEL}</text>`);
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}

/** Writes the chart: SVG, or PNG rendered by headless Chromium from the SVG. */
export async function writeChart(file: string, rows: readonly SummaryRow[], title?: string): Promise<void> {
  const svg = chartSvg(rows, title);
  if (!/\.png$/i.test(file)) {
    fs.writeFileSync(file, svg);
    return;
  }
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: chromiumArgs() });
  try {
    const w = Number(/width="(\d+)"/.exec(svg)![1]);
    const h = Number(/height="(\d+)"/.exec(svg)![1]);
    const page = await browser.newPage({ viewport: { width: w, height: h }, deviceScaleFactor: 2 });
    await page.setContent(`<!doctype html><html><body style="margin:0">${svg}</body></html>`);
    await page.screenshot({ path: file, clip: { x: 0, y: 0, width: w, height: h } });
  } finally {
    await browser.close();
  }
}
