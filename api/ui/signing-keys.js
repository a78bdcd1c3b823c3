// Signing keys of a namespace (GET /v1/signing-keys?namespace=NS): the
// secrets that sign its deliveries (Standard Webhooks). Create one, rotate
// (a new key; the others sign on for the overlap, then stop), revoke one.
// A new key's secret is in the answer that made it and nowhere after: it is
// shown once, here, held only by this page (never in storage or a URL), and
// gone when the operator leaves or reloads the page.

import { ApiError, get, post, qs, request, seg } from './api.js';
import { field, fill, h, showError, showNotice, timeEl } from './dom.js';
import { badge } from './status.js';

/** Default and largest overlap of a rotation, in seconds (as the API has them). */
const OVERLAP_DEFAULT_S = 86_400;
const OVERLAP_MAX_S = 2_592_000;

/** A key's state, told by colour, icon and word. */
const STATES = {
  active: ['ok', 'active: signs'],
  expiring: ['late', 'expiring: signs until its end'],
  expired: ['skipped', 'expired'],
  revoked: ['failed', 'revoked'],
};

function stateBadge(state) {
  const [kind, text] = STATES[state] || ['pending', state || 'unknown'];
  return badge(kind, text);
}

const signs = (k) => k.state === 'active' || k.state === 'expiring';

/**
 * The box that shows a new secret, once. `onDismiss` removes it. The
 * secret lives in this element only: nothing stores it anywhere else.
 */
function secretBox(made, { rotated, onDismiss }) {
  const tid = `sk-secret-title-${made.id}`;
  const value = h('code', { class: 'secret-value', tabindex: '0', 'aria-label': `The secret of key ${made.id}` }, made.secret);
  const copied = h('span', { class: 'muted', role: 'status' });
  const copy = h('button', {
    type: 'button',
    class: 'copy-secret',
    text: 'Copy secret',
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(made.secret);
        copied.textContent = 'Copied to the clipboard.';
      } catch {
        // No clipboard access here: select the text for Ctrl+C instead.
        const range = document.createRange();
        range.selectNodeContents(value);
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        value.focus();
        copied.textContent = 'The browser did not allow copying: the secret is selected, press Ctrl+C (⌘C).';
      }
    },
  });
  return h(
    'section',
    { class: 'secret-box', 'aria-labelledby': tid, dataset: { key: made.id } },
    h('h2', { id: tid, tabindex: '-1', text: rotated ? 'Rotated: the new key’s secret' : 'The new key’s secret' }),
    h(
      'p',
      { class: 'secret-warning' },
      h('strong', { text: 'Copy it now: it will not be shown again. ' }),
      'The server keeps it sealed and never returns it; leaving or reloading this page forgets it. Give it to the receiver’s Standard Webhooks verifier.',
    ),
    h('p', {}, value),
    h(
      'p',
      { class: 'muted' },
      `Key ${made.id}.`,
      rotated ? ' The keys that signed before go on signing until the overlap ends.' : '',
    ),
    h(
      'div',
      { class: 'actions' },
      copy,
      h('button', { type: 'button', class: 'secondary dismiss-secret', text: 'I have stored it: hide the secret', onclick: onDismiss }),
      copied,
    ),
  );
}

function keysTable(list, onRevoke) {
  return h(
    'table',
    { id: 'signing-keys' },
    h('caption', { text: `Signing keys of namespace “${list.namespace}”, newest first` }),
    h(
      'thead',
      {},
      h('tr', {}, ['Key', 'State', 'Created (UTC)', 'Created by', 'Signs until (UTC)', 'Revoked (UTC)', 'Action'].map((t) => h('th', { scope: 'col', text: t }))),
    ),
    h(
      'tbody',
      {},
      list.keys.map((k) =>
        h(
          'tr',
          { dataset: { key: k.id, state: k.state } },
          h('th', { scope: 'row', class: 'mono', text: k.id }),
          h('td', {}, stateBadge(k.state)),
          h('td', {}, timeEl(k.created_at)),
          h('td', { text: k.created_by || '—' }),
          h('td', {}, k.expires_at ? timeEl(k.expires_at) : k.state === 'revoked' ? '—' : 'until revoked'),
          h('td', {}, k.revoked_at ? [timeEl(k.revoked_at), k.revoked_by ? ` by ${k.revoked_by}` : ''] : '—'),
          h(
            'td',
            {},
            k.state === 'revoked'
              ? h('span', { class: 'muted', text: '—' })
              : h('button', {
                  type: 'button',
                  class: 'danger revoke-key',
                  text: 'Revoke',
                  'aria-label': `Revoke key ${k.id}`,
                  onclick: (ev) => onRevoke(k, ev.currentTarget),
                }),
          ),
        ),
      ),
    ),
  );
}

export async function render(main, { query, signal, go }) {
  const asked = (query.get('namespace') || '').trim();
  const nsInput = h('input', { value: asked, spellcheck: 'false', placeholder: 'the token’s namespace' });
  const nsForm = h(
    'form',
    { class: 'panel', role: 'search', 'aria-label': 'Namespace' },
    h(
      'div',
      { class: 'row' },
      field({ id: 'f-sk-namespace', label: 'Namespace', path: 'namespace', control: nsInput, hint: 'Empty: the token’s only namespace, or default.' }),
      h('div', { class: 'field' }, h('button', { type: 'submit', text: 'Show keys' })),
    ),
  );
  nsForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    go(`/signing-keys${qs({ namespace: nsInput.value.trim() })}`);
  });

  const secretHost = h('div', { id: 'sk-secret-host' });
  const listHost = h('div', { 'aria-busy': 'true' }, h('p', { class: 'muted', text: 'Loading keys…' }));
  const overlap = h('input', { inputmode: 'numeric', value: String(OVERLAP_DEFAULT_S) });
  const createButton = h('button', { type: 'button', id: 'sk-create', text: 'Create key' });
  const rotateButton = h('button', { type: 'submit', id: 'sk-rotate', class: 'secondary', text: 'Rotate' });
  const rotateForm = h(
    'form',
    { class: 'panel', 'aria-labelledby': 'sk-change-title', novalidate: true },
    h('h2', { id: 'sk-change-title', text: 'New keys' }),
    h(
      'p',
      { class: 'muted' },
      '“Create key” adds a key that signs from now on beside the others (at most 5 sign at once). “Rotate” adds one and gives every other key that signs an end: they go on signing for the overlap, the time receivers have to take the new secret, then stop.',
    ),
    h(
      'div',
      { class: 'row' },
      h('div', { class: 'field' }, createButton),
      field({
        id: 'f-sk-overlap',
        label: 'Overlap (seconds)',
        path: 'overlap_seconds',
        control: overlap,
        hint: `0 to ${OVERLAP_MAX_S.toLocaleString('en')} (30 days); ${OVERLAP_DEFAULT_S.toLocaleString('en')} is a day.`,
      }),
      h('div', { class: 'field' }, rotateButton),
    ),
  );

  fill(
    main,
    h('h1', { text: 'Signing keys' }),
    h(
      'p',
      {},
      'Each key that signs adds its signature to every delivery of the namespace (the webhook-signature header, as Standard Webhooks defines it), so receivers can tell the delivery comes from this cluster and was not changed. Keys are listed without their secrets.',
    ),
    nsForm,
    secretHost,
    rotateForm,
    listHost,
  );

  let namespace = asked; // the namespace the server answered for

  /** Forgets the secret of key `id` (when it is shown). */
  function hideSecret(id) {
    for (const box of secretHost.querySelectorAll('.secret-box')) if (box.dataset.key === id) box.remove();
  }

  async function load() {
    const list = await get(`/v1/signing-keys${qs({ namespace: asked })}`, { signal });
    namespace = list.namespace;
    listHost.removeAttribute('aria-busy');
    const signing = list.keys.filter(signs).length;
    fill(
      listHost,
      h('h2', { id: 'sk-list-title', text: `Keys of “${list.namespace}”` }),
      h(
        'p',
        { id: 'sk-count', class: signing ? 'muted' : 'note' },
        signing
          ? `${signing} key${signing === 1 ? '' : 's'} sign${signing === 1 ? 's' : ''} each delivery now.`
          : 'No key signs now: deliveries of this namespace go unsigned.',
      ),
      list.keys.length ? keysTable(list, revoke) : h('p', { class: 'note', id: 'sk-none', text: 'This namespace has no signing key.' }),
    );
  }

  async function revoke(k, button) {
    if (!window.confirm(`Revoke the signing key ${k.id} of “${namespace}”? It stops signing within seconds; receivers that only know its secret will refuse the deliveries.`)) {
      return;
    }
    button.disabled = true;
    showError(null);
    showNotice('');
    try {
      await request('DELETE', `/v1/signing-keys/${seg(k.id)}${qs({ namespace })}`);
      hideSecret(k.id); // a revoked key's secret is of no use
      showNotice(`Revoked the key ${k.id}.`);
      await load();
    } catch (e) {
      showError(e);
      button.disabled = false;
    }
  }

  async function make(rotated) {
    const path = rotated ? '/v1/signing-keys/rotate' : '/v1/signing-keys';
    let body;
    if (rotated) {
      const t = overlap.value.trim();
      const n = Number(t);
      // The number as typed, or the text, so that the server names the field.
      body = { overlap_seconds: t === '' ? undefined : Number.isInteger(n) ? n : t };
    }
    for (const b of [createButton, rotateButton]) b.disabled = true;
    showError(null);
    showNotice('');
    try {
      const made = await post(`${path}${qs({ namespace })}`, body);
      // Newest first; a secret shown before stays until dismissed.
      const box = secretBox(made, {
        rotated,
        onDismiss: () => {
          hideSecret(made.id);
          createButton.focus();
        },
      });
      secretHost.prepend(box);
      showNotice(rotated ? `Rotated: the key ${made.id} signs from now on.` : `Created the key ${made.id}.`);
      box.querySelector('h2').focus();
      await load();
    } catch (e) {
      if (e instanceof ApiError && e.status === 422 && e.fieldErrors.length) {
        const err = rotateForm.querySelector('#f-sk-overlap-error');
        err.textContent = e.fieldErrors.map((f) => f.message).join('; ');
        err.hidden = false;
        overlap.setAttribute('aria-invalid', 'true');
      }
      showError(e);
      // Full: the list may be stale (keys made elsewhere meanwhile).
      if (e instanceof ApiError && e.status === 409) load().catch(() => {});
    } finally {
      for (const b of [createButton, rotateButton]) b.disabled = false;
    }
  }

  createButton.addEventListener('click', () => make(false));
  rotateForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    overlap.removeAttribute('aria-invalid');
    rotateForm.querySelector('#f-sk-overlap-error').hidden = true;
    make(true);
  });

  try {
    await load();
  } catch (e) {
    if (e?.name === 'AbortError') throw e;
    // Keep the namespace form usable; say what went wrong where the table would be.
    listHost.removeAttribute('aria-busy');
    fill(listHost, h('p', { class: 'msg msg-error', id: 'sk-load-error', text: `The keys could not be loaded: ${e.message}` }));
    showError(e);
  }
}
