// Small enhancements shared by every page; each page works without them. Loaded as a module
// (deferred), from this origin only (the pages' Content-Security-Policy allows nothing inline).
/* global document, navigator, window, fetch */

// Buttons that copy text: data-copy="<id of the element whose text to copy>".
document.addEventListener('click', async (event) => {
  const button = event.target.closest('[data-copy]');
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  const text = 'value' in source ? source.value : source.textContent;
  const label = button.textContent;
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = 'Copied';
  } catch {
    // No clipboard access (plain http beyond localhost): select the text for Ctrl-C instead.
    const range = document.createRange();
    range.selectNodeContents(source);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    button.textContent = 'Selected: press Ctrl-C';
  }
  window.setTimeout(() => (button.textContent = label), 2000);
});

// Forms that ask before doing something that cannot be undone: data-confirm="<question>".
document.addEventListener('submit', (event) => {
  const question = event.target.dataset?.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

// Editable ordered lists (a project's commands): add, remove, move up and down.
document.addEventListener('click', (event) => {
  const button = event.target.closest('[data-list-action]');
  if (!button) return;
  const list = document.getElementById(button.dataset.list ?? '') ?? button.closest('ol, ul');
  if (!list) return;
  const item = button.closest('li');
  const action = button.dataset.listAction;
  if (action === 'add') {
    const template = list.querySelector('li:last-child');
    const fresh = template.cloneNode(true);
    const input = fresh.querySelector('input, textarea');
    input.value = '';
    // A fresh id, and its label pointing at it.
    const id = `${list.id || 'item'}-${Date.now()}`;
    fresh.querySelector(`label[for="${input.id}"]`)?.setAttribute('for', id);
    input.id = id;
    list.append(fresh);
    input.focus();
  } else if (action === 'remove' && item) {
    if (list.children.length > 1) item.remove();
    else item.querySelector('input, textarea').value = '';
  } else if (action === 'up' && item?.previousElementSibling) {
    item.previousElementSibling.before(item);
    button.focus();
  } else if (action === 'down' && item?.nextElementSibling) {
    item.nextElementSibling.after(item);
    button.focus();
  }
  // Labels that number the items ("Command 3") follow their new places.
  const prefix = list.dataset.itemLabel;
  if (prefix) {
    [...list.children].forEach((li, i) => {
      const label = li.querySelector('label');
      if (label) label.textContent = `${prefix} ${i + 1}`;
    });
  }
  event.preventDefault();
});

// Secrets revealed on request: data-reveal="<JSON URL>" data-field="<field path>" fills the
// element named by data-target with the value, fetched only when asked.
document.addEventListener('click', async (event) => {
  const button = event.target.closest('[data-reveal]');
  if (!button) return;
  const target = document.getElementById(button.dataset.target);
  const res = await fetch(button.dataset.reveal, { headers: { accept: 'application/json' } });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    target.textContent = body.error ?? `Could not load it (${res.status})`;
    return;
  }
  let value = body;
  for (const key of button.dataset.field.split('.')) value = value?.[key];
  target.textContent = String(value ?? '');
  target.hidden = false;
  button.hidden = true;
  const copy = document.querySelector(`[data-copy="${target.id}"]`);
  if (copy) copy.hidden = false;
});
