// The deployment page, live: follows GET /deploy/:id/events (server-sent events; the browser
// reconnects by itself and resumes with Last-Event-ID) from where the server-rendered page ended.
// Output is rendered with the same ANSI renderer as on the server and appended once per animation
// frame, so a flood of lines costs one layout per frame rather than one per line. While "Follow
// the output" is on the page keeps the newest line in view; scrolling up turns it off, scrolling
// back to the bottom turns it on again.
/* global document, window, EventSource, requestAnimationFrame */
import { AnsiRenderer, escapeHtml } from './ansi.js';

const FINAL = new Set(['success', 'failed', 'cancelled', 'timed_out']);
const WORDS = { timed_out: 'timed out' };
const KNOWN = new Set([...FINAL, 'running', 'queued', 'skipped']);

const log = document.getElementById('log');
const follow = document.getElementById('follow');

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

let frame = 0;
function onOutput(output) {
  const step = steps.get(output.entry_id);
  if (!step) return;
  step.queued.push(step.ansi.push(output.text));
  if (!frame) frame = requestAnimationFrame(flush);
}

function flush() {
  frame = 0;
  for (const step of steps.values()) {
    if (step.queued.length === 0) continue;
    step.pre.insertAdjacentHTML('beforeend', step.queued.join(''));
    step.queued = [];
  }
  if (follow.checked) {
    following = true;
    window.scrollTo(0, document.documentElement.scrollHeight);
  }
}

function onDeployment(d) {
  document.getElementById('status').innerHTML = badge(d.status);
  document.getElementById('reason').textContent = d.reason ?? '';
  document.getElementById('hosts').textContent = d.hosts.length ? d.hosts.join(', ') : 'none yet';
  if (d.commit) {
    const commit = document.querySelector('#commit code') ?? document.createElement('code');
    commit.textContent = d.commit.slice(0, 10);
    commit.title = d.commit;
    document.querySelector('#commit .muted')?.replaceWith(commit);
  }
  const done = FINAL.has(d.status);
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

// Scrolling up stops following; reaching the bottom again resumes it. Our own scrolling is ignored.
let following = false;
window.addEventListener(
  'scroll',
  () => {
    if (following) {
      following = false;
      return;
    }
    const atBottom = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40;
    if (!follow.disabled) follow.checked = atBottom;
  },
  { passive: true },
);

for (const details of log.querySelectorAll('details.step')) adopt(details);

if (log.dataset.live === 'true') {
  const url = `/deploy/${log.dataset.deployment}/events?last_event_id=${encodeURIComponent(log.dataset.cursor)}`;
  const source = new EventSource(url);
  const data = (e) => JSON.parse(e.data);
  source.addEventListener('deployment', (e) => onDeployment(data(e)));
  source.addEventListener('entry', (e) => onEntry(data(e)));
  source.addEventListener('output', (e) => onOutput(data(e)));
  source.addEventListener('end', (e) => {
    source.close();
    onDeployment(data(e));
    flush();
    follow.disabled = true;
    log.dataset.live = 'false';
  });
  // While it runs, the duration counts up.
  const started = document.getElementById('summary').dataset.started;
  const timer = window.setInterval(() => {
    const dur = document.getElementById('duration');
    if (dur.dataset.finished) return window.clearInterval(timer);
    dur.textContent = `${duration(Date.now() - Date.parse(started))} so far`;
  }, 1000);
}
