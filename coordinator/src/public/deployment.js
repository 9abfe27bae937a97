// The deployment page, live: follows GET /deploy/:id/events (server-sent events; the browser
// reconnects by itself and resumes with Last-Event-ID) from where the server-rendered page ended.
// Output is rendered with the same ANSI renderer as on the server and appended once per animation
// frame, so a flood of lines costs one layout per frame rather than one per line.
//
// Following: each command's output box is capped in height and scrolls by itself, so the newest
// line is in view only when both the newest box and the page are at their end. While "Follow the
// output" is on, every append scrolls both there. The reader scrolling up anywhere (the page, the
// running command's box, an earlier command's box) turns it off; bringing the page and the newest
// boxes back to their end, or ticking the checkbox, turns it on again. The reader's scrolls are
// told apart from ours by position, not by a "we scrolled" flag: ours only ever move towards the
// end, and a flag goes stale whenever a scroll we ask for does not happen (already at the end).
/* global document, window, EventSource, requestAnimationFrame */
import { AnsiRenderer, escapeHtml } from './ansi.js';

const FINAL = new Set(['success', 'failed', 'cancelled', 'timed_out']);
const WORDS = { timed_out: 'timed out' };
const KNOWN = new Set([...FINAL, 'running', 'queued', 'skipped']);

const log = document.getElementById('log');
const follow = document.getElementById('follow');
const connection = document.getElementById('connection');
const page = document.scrollingElement ?? document.documentElement;

function badge(status) {
  const cls = KNOWN.has(status) ? status : 'queued';
  return `<span class="badge badge-${cls}">${escapeHtml(WORDS[status] ?? status)}</span>`;
}

function duration(ms) {
  if (!(ms >= 0)) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  const min = Math.floor(ms / 60_000);
  if (min < 60) return `${min} min ${Math.floor((ms % 60_000) / 1000)} s`;
  return `${Math.floor(min / 60)} h ${min % 60} min`;
}

const took = (from, to) => duration(Date.parse(to) - Date.parse(from));

/** Per log entry: its elements, its renderer and the HTML waiting for the next frame. */
const steps = new Map();

function adopt(details) {
  const state = details.dataset.ansi ? JSON.parse(details.dataset.ansi) : null;
  const step = {
    details,
    pre: details.querySelector('pre'),
    status: details.querySelector('.step-status'),
    meta: details.querySelector('.step-meta'),
    ansi: new AnsiRenderer(state),
    queued: [],
  };
  steps.set(details.dataset.entry, step);
  return step;
}

function hostSection(host) {
  for (const section of log.querySelectorAll('section.host'))
    if (section.dataset.host === host) return section;
  const section = document.createElement('section');
  section.className = 'host';
  section.dataset.host = host;
  const h = document.createElement('h3');
  h.className = 'host-name';
  h.textContent = host;
  section.append(h);
  log.append(section);
  return section;
}

function onEntry(entry) {
  document.getElementById('log-empty')?.remove();
  let step = steps.get(entry.id);
  if (!step) {
    const details = document.createElement('details');
    details.className = 'step';
    details.dataset.entry = entry.id;
    details.open = true;
    const summary = document.createElement('summary');
    const code = document.createElement('code');
    code.textContent = entry.cmd;
    const status = document.createElement('span');
    status.className = 'step-status';
    const meta = document.createElement('span');
    meta.className = 'meta step-meta';
    summary.append(code, ' ', status, ' ', meta);
    const pre = document.createElement('pre');
    pre.className = 'log';
    // Scrollable, so it must be reachable by keyboard (the arrow keys then scroll it).
    pre.tabIndex = 0;
    details.append(summary, pre);
    hostSection(entry.host).append(details);
    step = adopt(details);
  }
  step.status.innerHTML = badge(entry.status);
  const exit = entry.exit_code === null ? '' : `exit ${entry.exit_code} · `;
  step.meta.textContent = entry.finished_at
    ? exit + took(entry.started_at, entry.finished_at)
    : entry.status === 'running'
      ? 'running'
      : '';
}

/** How far from its end a scroller may be and still count as at its end (sub-pixel rounding). */
const SLACK = 4;
const atEnd = (el) => el.scrollHeight - el.scrollTop - el.clientHeight <= SLACK;

/** Each host's newest command's output box: where the next line will appear. */
function newestBoxes() {
  return [...log.querySelectorAll('section.host')]
    .map((section) => section.querySelector('details.step:last-of-type > pre'))
    .filter(Boolean);
}

/** Scrolls the newest boxes (and `also`, boxes that just received output) and then the page to their end. */
function showNewest(also = []) {
  for (const pre of new Set([...newestBoxes(), ...also])) pre.scrollTop = pre.scrollHeight;
  page.scrollTop = page.scrollHeight;
}

let frame = 0;
function onOutput(output) {
  const step = steps.get(output.entry_id);
  if (!step) return;
  step.queued.push(step.ansi.push(output.text));
  if (!frame) frame = requestAnimationFrame(flush);
}

function flush() {
  frame = 0;
  const touched = [];
  for (const step of steps.values()) {
    if (step.queued.length === 0) continue;
    step.pre.insertAdjacentHTML('beforeend', step.queued.join(''));
    step.queued = [];
    touched.push(step.pre);
  }
  if (follow.checked && touched.length) showNewest(touched);
}

function onDeployment(d) {
  const status = document.getElementById('status');
  // Only on a change: the element is a live region, and a repeat would be announced again.
  const next = badge(d.status);
  if (status.innerHTML !== next) status.innerHTML = next;
  document.getElementById('reason').textContent = d.reason ?? '';
  document.getElementById('hosts').textContent = d.hosts.length ? d.hosts.join(', ') : 'none yet';
  if (d.commit) {
    const commit = document.querySelector('#commit code') ?? document.createElement('code');
    commit.textContent = d.commit.slice(0, 10);
    commit.title = d.commit;
    document.querySelector('#commit .muted')?.replaceWith(commit);
  }
  const done = FINAL.has(d.status);
  // Cancelled (or timed out) while still queued: nothing will run any more.
  const empty = document.getElementById('log-empty');
  if (done && empty) empty.textContent = 'No command ran.';
  const dur = document.getElementById('duration');
  if (done && d.finished_at) {
    dur.dataset.finished = d.finished_at;
    dur.textContent = took(d.started_at, d.finished_at);
  }
  const cancel = document.getElementById('cancel-form');
  const redeploy = document.getElementById('redeploy-form');
  if (cancel) cancel.hidden = done;
  if (redeploy) redeploy.hidden = !done;
}

// Scroll events do not bubble; capturing them on the document sees the page's and every box's.
const lastTop = new WeakMap();
document.addEventListener(
  'scroll',
  (event) => {
    const el = event.target === document ? page : event.target;
    if (el !== page && !(el instanceof window.HTMLPreElement)) return;
    const before = lastTop.get(el) ?? 0;
    lastTop.set(el, el.scrollTop);
    if (follow.disabled) return;
    // Moved up and not at the end: only the reader does that (content shrinking, say a section
    // being collapsed, moves it up too but leaves it at the end).
    if (el.scrollTop < before && !atEnd(el)) follow.checked = false;
    else if (!follow.checked && atEnd(page) && newestBoxes().every(atEnd)) follow.checked = true;
  },
  { capture: true, passive: true },
);
follow.addEventListener('change', () => {
  if (follow.checked) showNewest();
});

for (const details of log.querySelectorAll('details.step')) adopt(details);

if (log.dataset.live === 'true') {
  const url = `/deploy/${log.dataset.deployment}/events?last_event_id=${encodeURIComponent(log.dataset.cursor)}`;
  const source = new EventSource(url);
  const data = (e) => JSON.parse(e.data);
  source.addEventListener('open', () => {
    connection.textContent = '';
  });
  // The browser retries by itself (the server asks for 2 s) and resumes after the last event it
  // received; until then the page says so, or that it gave up (the answer was not a stream: the
  // deployment is gone or the session ended).
  source.addEventListener('error', () => {
    connection.textContent =
      source.readyState === EventSource.CLOSED
        ? 'Live output stopped. Reload the page to see the rest.'
        : 'Connection lost — reconnecting…';
  });
  source.addEventListener('deployment', (e) => onDeployment(data(e)));
  source.addEventListener('entry', (e) => onEntry(data(e)));
  source.addEventListener('output', (e) => onOutput(data(e)));
  source.addEventListener('end', (e) => {
    source.close();
    connection.textContent = '';
    onDeployment(data(e));
    flush();
    follow.disabled = true;
    log.dataset.live = 'false';
  });
  // Opened on a long log, the running command's box starts at its newest line (the page itself
  // stays at the top, on the summary, until output arrives).
  if (follow.checked) for (const pre of newestBoxes()) pre.scrollTop = pre.scrollHeight;
  // While it runs, the duration counts up.
  const started = document.getElementById('summary').dataset.started;
  const timer = window.setInterval(() => {
    const dur = document.getElementById('duration');
    if (dur.dataset.finished) return window.clearInterval(timer);
    dur.textContent = `${duration(Date.now() - Date.parse(started))} so far`;
  }, 1000);
}
