// The project form (new project, project settings), enhanced; it works without this script.
// - Only the fields of the chosen target (agent labels, agent names or an SSH host) are shown.
// - "Fetch host key" asks the coordinator which key the SSH host presents (POST
//   /projects/host-key) and offers each fingerprint with a button that puts it in the field:
//   only when the admin says it matches what the host prints, nothing is trusted by itself.
/* global document, fetch */

function el(tag, props = {}, text = '') {
  const node = document.createElement(tag);
  Object.assign(node, props);
  if (text) node.textContent = text;
  return node;
}

const radios = [...document.querySelectorAll('input[name=target_kind]')];
function showTarget() {
  const chosen = radios.find((r) => r.checked)?.value ?? 'labels';
  for (const part of document.querySelectorAll('[data-target-kind]')) {
    part.hidden = part.dataset.targetKind !== chosen;
  }
}
if (radios.length) {
  for (const r of radios) r.addEventListener('change', showTarget);
  showTarget();
}

const fetchButton = document.getElementById('fetch-host-key');
if (fetchButton) {
  fetchButton.hidden = false;
  const out = document.getElementById('host-key-result');
  fetchButton.addEventListener('click', async () => {
    const host = document.getElementById('ssh_host').value.trim();
    const port = Number(document.getElementById('ssh_port').value.trim() || '22');
    out.replaceChildren();
    if (!host) {
      out.append('Type the host first.');
      return;
    }
    out.append(`Asking ${host}…`);
    const res = await fetch('/projects/host-key', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ host, port }),
    }).catch(() => null);
    const body = res ? await res.json().catch(() => ({})) : {};
    out.replaceChildren();
    if (!res || !res.ok) {
      out.append(body.error ?? 'Could not reach the coordinator');
      return;
    }
    const list = el('ul', { className: 'host-keys' });
    for (const key of body.keys) {
      const use = el('button', { type: 'button', className: 'small' }, 'Use this one');
      use.addEventListener('click', () => {
        document.getElementById('ssh_fingerprint').value = key.fingerprint;
        out.replaceChildren(`Pinned ${key.fingerprint}`);
      });
      const item = el('li');
      item.append(el('code', {}, key.fingerprint), ` ${key.algorithm} `, use);
      list.append(item);
    }
    out.append(`${host}:${body.port} presents (compare with the host's own ssh-keygen -lf):`, list);
  });
}
