// What a real browser page shows of timestamped lines (line-printer.ts: `<ms> line <i>`), recorded
// inside the page: an init script, run before the page's own scripts, watches the document with a
// MutationObserver and, for every text added under a <pre> (however the page adds it: parsed HTML,
// insertAdjacentHTML, spans of ANSI colour, text nodes), completes lines per <pre> and records each
// matching line with the time the observer saw it (performance.timeOrigin + performance.now(), the
// machine's wall clock, as the printer's). The observer runs right after the DOM change, before the
// frame that paints it. It also counts EventSources opened, so a round starts once the page listens.
import { performance } from 'node:perf_hooks';
import type { Page } from 'playwright-core';

/** [line number, printed (epoch ms), in the page (epoch ms)], in the order the page showed them. */
export type PageLine = [number, number, number];

// Plain JavaScript for the page (this project's TypeScript has no DOM types).
const INSTALL = `(() => {
  window.__lines = [];
  window.__sseOpen = 0;
  const LINE = /^(\\d+(?:\\.\\d+)?) line (\\d+)$/;
  const carry = new Map();
  new MutationObserver((records) => {
    const at = performance.timeOrigin + performance.now();
    for (const r of records) {
      const target = r.target instanceof Element ? r.target : r.target.parentElement;
      const pre = target && target.closest('pre');
      if (!pre) continue;
      let text = carry.get(pre) ?? '';
      for (const n of r.addedNodes) text += n.textContent ?? '';
      const lines = text.split('\\n');
      carry.set(pre, lines.pop() ?? '');
      for (const line of lines) {
        const m = LINE.exec(line);
        if (m) window.__lines.push([Number(m[2]), Number(m[1]), at]);
      }
    }
  }).observe(document, { childList: true, subtree: true });
  const Native = window.EventSource;
  window.EventSource = class extends Native {
    constructor(url, init) {
      super(url, init);
      this.addEventListener('open', () => (window.__sseOpen += 1));
    }
  };
})();`;

/** Records lines on every page of this page's context from now on (call before `goto`). */
export async function recordLines(page: Page): Promise<void> {
  await page.addInitScript({ content: INSTALL });
}

/**
 * Evaluates `expression` in the page every `everyMs` until it is true or `timeoutMs` passed.
 * (Not page.waitForFunction: its predicate is compiled in the page, which the coordinator's
 * Content-Security-Policy, without 'unsafe-eval', forbids; page.evaluate is not affected.)
 */
async function until(page: Page, expression: string, timeoutMs: number, everyMs: number): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await page.evaluate<boolean>(expression)) return true;
    if (performance.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** Waits until the page's event stream is open. */
export async function sseOpen(page: Page, timeoutMs: number): Promise<void> {
  if (!(await until(page, 'window.__sseOpen > 0', timeoutMs, 20))) {
    throw new Error(`the page's event stream did not open within ${timeoutMs} ms`);
  }
}

/** Waits until the page has shown `count` matching lines (or the timeout), then returns them all. */
export async function pageLines(page: Page, count: number, timeoutMs: number): Promise<PageLine[]> {
  await until(page, `window.__lines.length >= ${count}`, timeoutMs, 50);
  return page.evaluate<PageLine[]>('window.__lines');
}

/** Lines missing from 1..count, and how many were shown out of order or twice. */
export function checkLines(lines: PageLine[], count: number): { lost: number; disordered: number } {
  const shown = new Set<number>();
  let disordered = 0;
  let last = 0;
  for (const [i] of lines) {
    if (i <= last || shown.has(i)) disordered++;
    shown.add(i);
    last = Math.max(last, i);
  }
  let lost = 0;
  for (let i = 1; i <= count; i++) if (!shown.has(i)) lost++;
  return { lost, disordered };
}
