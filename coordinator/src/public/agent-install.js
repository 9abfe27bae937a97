// Installing an agent over SSH from the Agents page. On the page: "Fetch host key" asks the
// coordinator which key the host presents (POST /projects/host-key) and shows it with a button
// that puts it in the fingerprint field — only when the admin says it matches what the host
// prints; nothing is accepted by itself. On an installation's page: its steps and lines follow the
// run (GET /agents/installs/:id as JSON, every second) until it ends. Both pages work without this.
/* global document, fetch, window */

const MARKS = { pending: '○', running: '…', done: '✓', failed: '✗' };

function el(tag, props = {}, text = '') {
  const node = document.createElement(tag);
  Object.assign(node, props);
  if (text) node.textContent = text;
  return node;
}

// The form: fetch the host key.
const fetchButton = document.getElementById('install-fetch-key');
if (fetchButton) {
  fetchButton.hidden = false;
  const out = document.getElementById('install-host-key');
  const fingerprint = document.getElementById('install-fingerprint');
  fetchButton.addEventListener('click', async () => {
    const host = document.getElementById('install-host').value.trim();
    const port = Number(document.getElementById('install-port').value.trim() || '22');
    out.replaceChildren();
    if (!host) {
      out.append(el('p', { className: 'alert alert-error' }, 'Type the host first.'));
      return;
    }
    fetchButton.disabled = true;
    out.append(el('p', { className: 'muted' }, `Asking ${host}:${port} for its host key…`));
    try {
      const res = await fetch('/projects/host-key', {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify({ host, port }),
      });
      const body = await res.json().catch(() => ({}));
      out.replaceChildren();
      if (!res.ok) {
        out.append(
          el('p', { className: 'alert alert-error' }, body.error ?? `Could not fetch it (${res.status})`),
        );
        return;
      }
      out.append(
        el(
          'p',
          {},
          `${host}:${port} presents these keys. Compare one with what the host itself prints (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) before using it:`,
        ),
      );
      const list = el('ul', { className: 'host-keys' });
      for (const key of body.keys ?? [{ fingerprint: body.fingerprint, algorithm: body.algorithm }]) {
        const item = el('li');
        item.append(el('code', {}, key.fingerprint), ` (${key.algorithm}) `);
        const use = el('button', { type: 'button', className: 'small' }, 'It matches: use this key');
        use.dataset.fingerprint = key.fingerprint;
        use.addEventListener('click', () => {
          fingerprint.value = key.fingerprint;
          fingerprint.focus();
        });
        item.append(use);
        list.append(item);
      }
      out.append(list);
    } catch (err) {
      out.replaceChildren(el('p', { className: 'alert alert-error' }, `Could not fetch it: ${err.message}`));
    } finally {
      fetchButton.disabled = false;
    }
  });
}

// An installation's page: follow it.
const progress = document.getElementById('install-progress');
if (progress && progress.dataset.status === 'running') {
  const render = (run) => {
    for (const s of run.steps) {
      const item = progress.querySelector(`[data-step="${s.step}"]`);
      if (!item || item.dataset.status === s.status) continue;
      item.dataset.status = s.status;
      item.querySelector('.step-mark').textContent = MARKS[s.status] ?? '';
      item.querySelector('.step-word').textContent = `(${s.status})`;
    }
    document.getElementById('install-lines').textContent = run.lines.join('\n');
    const status = document.getElementById('install-status');
    const error = document.getElementById('install-error');
    if (run.status === 'succeeded') {
      status.className = 'alert alert-notice';
      status.textContent = `Done: ${run.name} is online${run.agent_version ? ` (agent ${run.agent_version})` : ''}.`;
    } else if (run.status === 'failed') {
      status.className = 'alert alert-error';
      status.textContent = 'The installation failed.';
      error.textContent = run.error ?? '';
      error.hidden = false;
    }
    progress.dataset.status = run.status;
  };
  const poll = async () => {
    try {
      const res = await fetch(progress.dataset.install, { headers: { accept: 'application/json' } });
      if (res.ok) render((await res.json()).install);
    } catch {
      // A blip: try again next time.
    }
    if (progress.dataset.status === 'running') window.setTimeout(poll, 1000);
  };
  window.setTimeout(poll, 500);
}
