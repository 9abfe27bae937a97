// log-render: a deployment page whose log has 50,000 lines, in real Chromium (issue #6's Tests):
// time to first paint and to the end, beside a plain <pre> of the same text.
//
// Product: a real agent prints a fixed file of BENCH_RENDER_LINES (50,000) build-log-like lines,
// one in ten with ANSI colours (green ok, bold red, yellow), then the command exits 1 so its
// section stays open (a successful command's section is collapsed on a finished page, and a
// collapsed <details> is not laid out). Once it has finished, headless Chromium
// (test/helpers/browser.ts) opens /deploy/:id signed in: the coordinator reads the stored output,
// renders it from ANSI to escaped HTML (views/deployment-log.ts) and the page's script
// (public/deployment.js) adopts the sections. Baseline: a bare node:http server here serving a page
// holding only a <pre> with the same text (colours stripped, HTML-escaped), from memory.
// A round opens a new tab and loads the page; figures from the page's own timing: first
// contentful paint (performance paint entry), and the end — the load event done (the deferred
// module script has run by then) and the next animation frame drawn (requestAnimationFrame, then
// a task) after first contentful paint, with the last line checked to be in the document. BENCH_RENDER_WARMUPS (1) then
// BENCH_RENDER_ROUNDS (5) rounds, interleaved; medians; ratio baseline/product.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { launchBrowser, type TestBrowser } from '../test/helpers/browser.ts';
import { type Benchmark, type BenchOutcome, envInt, fmt, interleave, median } from './lib/harness.ts';
import { startProduct } from './lib/product.ts';

interface Timing {
  ttfb: number;
  fcp: number;
  domContentLoaded: number;
  load: number;
  end: number;
  bytes: number;
  lastLine: string;
  lines: number;
}

// Runs in the page after `load` (plain JavaScript: no DOM types here). Paint entries are reported
// with the frame, which for a big page comes after `load`: wait for first-contentful-paint, then
// for the next frame to be drawn (requestAnimationFrame, then a task). The last <pre> is the log.
const MEASURE = `new Promise((resolve) => new PerformanceObserver((list, observer) => {
  const fcp = list.getEntriesByName('first-contentful-paint')[0];
  if (!fcp) return;
  observer.disconnect();
  requestAnimationFrame(() => setTimeout(() => {
    const end = performance.now();
    const nav = performance.getEntriesByType('navigation')[0];
    const pres = document.querySelectorAll('pre');
    const text = pres.length ? pres[pres.length - 1].textContent : '';
    const lines = text.replace(/\\n$/, '').split('\\n');
    resolve({
      ttfb: nav.responseStart,
      fcp: fcp.startTime,
      domContentLoaded: nav.domContentLoadedEventEnd,
      load: nav.loadEventEnd,
      end,
      bytes: nav.transferSize || nav.encodedBodySize,
      lastLine: lines[lines.length - 1],
      lines: lines.length,
    });
  }, 0));
}).observe({ type: 'paint', buffered: true }))`;

const escapeHtml = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/** Build-log-like lines; one in ten coloured (ANSI SGR). */
function logText(count: number): string {
  const out: string[] = [];
  for (let i = 1; i <= count; i++) {
    const file = `src/modules/part-${i % 97}/file-${i}.ts`;
    if (i % 30 === 0)
      out.push(`\x1b[1;31merror\x1b[0m TS2345 in ${file}: argument of type 'string' <line ${i}>`);
    else if (i % 30 === 10)
      out.push(`\x1b[33mwarning\x1b[0m ${file}: unused variable "x" & more <line ${i}>`);
    else if (i % 10 === 0) out.push(`\x1b[32m✓\x1b[0m compiled ${file} in ${i % 500} ms <line ${i}>`);
    else out.push(`[${String(i).padStart(5)}/${count}] compiling ${file} … <line ${i}>`);
  }
  return `${out.join('\n')}\n`;
}

// eslint-disable-next-line no-control-regex
const stripAnsi = (s: string) => s.replace(/\x1b\[[0-9;]*m/g, '');

async function load(browser: TestBrowser, url: string): Promise<Timing> {
  const page = await browser.newPage();
  try {
    await page.goto(url, { waitUntil: 'load', timeout: 120_000 });
    return await page.evaluate<Timing>(MEASURE);
  } finally {
    await page.close();
  }
}

export const logRender: Benchmark = {
  name: 'log-render',
  description:
    'a 50,000-line deployment log rendered in headless Chromium, vs a plain <pre> of the same text',
  async run({ cleanup, log }): Promise<BenchOutcome> {
    const count = envInt('BENCH_RENDER_LINES', 50_000);
    const warmups = envInt('BENCH_RENDER_WARMUPS', 1);
    const rounds = envInt('BENCH_RENDER_ROUNDS', 5);
    const text = logText(count);
    const plain = stripAnsi(text);
    const lastLine = plain.trimEnd().split('\n').pop()!;
    const dir = await mkdtemp(path.join(tmpdir(), 'deckhand-bench-render-'));
    cleanup.defer('log file', () => rm(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'build.log');
    await writeFile(file, text);

    log(`log-render: ${count} lines (${(Buffer.byteLength(text) / 1024 / 1024).toFixed(1)} MiB); starting`);
    const product = await startProduct(cleanup, 'render', {
      OUTPUT_LIMIT_BYTES: String(Buffer.byteLength(text) + 1024 * 1024),
    });
    const projectId = await product.createProject('render', [`cat '${file}'; exit 1`]);
    const deployId = await product.deploy(projectId);
    await product.jobFinished(deployId, 120_000);

    const page = `<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>plain log</title></head><body><pre>${escapeHtml(plain)}</pre></body></html>`;
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(page);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanup.defer('plain page server', () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    });
    const address = server.address();
    const plainUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/`;

    const browser = await launchBrowser();
    cleanup.defer('Chromium', () => browser.close());
    const [name, value] = product.admin.cookie!.split(/=(.*)/s) as [string, string];
    await browser.context.addCookies([{ name, value, url: product.coord.url }]);

    const check = (who: string, t: Timing) => {
      if (t.lastLine !== lastLine) {
        throw new Error(
          `log-render: the ${who} page ends with ${JSON.stringify(t.lastLine)}, not ${lastLine}`,
        );
      }
      if (t.lines !== count)
        throw new Error(`log-render: the ${who} page shows ${t.lines} lines, not ${count}`);
      return t;
    };
    const results = await interleave<Timing>(
      [
        {
          name: 'product',
          round: async () =>
            check('deployment', await load(browser, `${product.coord.url}/deploy/${deployId}`)),
        },
        { name: 'pre', round: async () => check('plain', await load(browser, plainUrl)) },
      ],
      { warmups, rounds, log, label: 'log-render' },
    );
    const m = (who: string, f: (t: Timing) => number) => median(results.get(who)!.map(f));
    const row = (figure: string, f: (t: Timing) => number) => ({
      benchmark: 'log-render',
      figure,
      product: m('product', f),
      baseline: m('pre', f),
      baselineName: 'plain <pre> page of the same text, bare node:http',
      ratio: m('pre', f) / m('product', f),
      ratioIs: 'baseline/product' as const,
    });
    const detail = (who: string) =>
      `first byte ${fmt(m(who, (t) => t.ttfb))}, first contentful paint ${fmt(m(who, (t) => t.fcp))}, ` +
      `DOMContentLoaded ${fmt(m(who, (t) => t.domContentLoaded))}, load ${fmt(m(who, (t) => t.load))}, ` +
      `end ${fmt(m(who, (t) => t.end))} ms; ${fmt(m(who, (t) => t.bytes) / 1024)} KiB transferred`;
    return {
      rows: [
        row(`median ms to first contentful paint, ${count} lines`, (t) => t.fcp),
        row(`median ms to the end (load + next frame), ${count} lines`, (t) => t.end),
      ],
      notes: [
        `log-render: ${count} lines, ${rounds} rounds after ${warmups} warm-up(s); medians, ms from navigation start:`,
        `    product (/deploy/:id) ${detail('product')}`,
        `    plain <pre>          ${detail('pre')}`,
        ...(browser.errors.length > 0 ? [`log-render: page errors: ${browser.errors.join('; ')}`] : []),
      ],
    };
  },
};
