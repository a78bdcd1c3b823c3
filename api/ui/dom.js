// Small DOM helpers: element building (text only, never HTML strings, so
// API data cannot inject markup), messages, formatting and keyboard lists.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

// ------------------------------------------------------------- messages

const errorBox = () => document.getElementById('error');
const noticeBox = () => document.getElementById('notice');

/** Shows an error in the assertive live region (announced at once). */
export function showError(e) {
  const box = errorBox();
  if (!e) {
    box.hidden = true;
    box.textContent = '';
    return;
  }
  let text = typeof e === 'string' ? e : e.message || String(e);
  if (e && e.status) text = `${e.problem?.title || 'Error'} (HTTP ${e.status}): ${text}`;
  box.textContent = text;
  box.hidden = false;
}

/** Shows a notice in the polite live region. */
export function showNotice(text) {
  const box = noticeBox();
  box.textContent = text || '';
  box.hidden = !text;
}

export function clearMessages() {
  showError(null);
  showNotice('');
}

// ----------------------------------------------------------- formatting

/** An instant as the API writes it, shown as `2026-11-22 06:18:05.043Z`. */
export function instant(iso) {
  if (!iso) return '—';
  return String(iso).replace('T', ' ');
}

export function timeEl(iso) {
  return iso ? h('time', { datetime: iso }, instant(iso)) : '—';
}

/** A duration for people: 850 ms, 3.2 s, 5 min 2 s, 3 h 4 min, 2 d 1 h. */
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  const sign = ms < 0 ? '−' : '';
  ms = Math.abs(ms);
  if (ms < 1000) return `${sign}${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${sign}${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${sign}${m} min ${Math.floor(s % 60)} s`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${sign}${hr} h ${m % 60} min`;
  return `${sign}${Math.floor(hr / 24)} d ${hr % 24} h`;
}

export function ago(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '—';
  const d = now - t;
  return d >= 0 ? `${duration(d)} ago` : `in ${duration(-d)}`;
}

/** An RFC 3339 instant with milliseconds, as the API writes them. */
export function iso(date) {
  return new Date(date).toISOString();
}

// ------------------------------------------------------------- keyboard

/**
 * Arrow-key movement between the focusable items `selector` finds inside
 * `container` (rows of a table, entries of a timeline): ↑/↓ (and ←/→ with
 * `horizontal`), Home, End. Tab still leaves the list.
 */
export function arrowNavigation(container, selector, { horizontal = false } = {}) {
  container.addEventListener('keydown', (ev) => {
    const items = [...container.querySelectorAll(selector)];
    const i = items.indexOf(document.activeElement);
    if (i < 0) return;
    let next = null;
    const fwd = horizontal ? 'ArrowRight' : 'ArrowDown';
    const back = horizontal ? 'ArrowLeft' : 'ArrowUp';
    if (ev.key === fwd) next = items[Math.min(i + 1, items.length - 1)];
    else if (ev.key === back) next = items[Math.max(i - 1, 0)];
    else if (ev.key === 'Home') next = items[0];
    else if (ev.key === 'End') next = items[items.length - 1];
    if (next) {
      ev.preventDefault();
      next.focus();
    }
  });
}

/**
 * ARIA tabs: `tabs` is [{id, label, render(panel)}]; returns the element.
 * The selected tab is reported to `onSelect` (to keep it in the URL).
 */
export function tabs(name, list, selected, onSelect) {
  const tablist = h('div', { role: 'tablist', 'aria-label': name });
  const panels = [];
  const buttons = list.map((t) => {
    const b = h('button', {
      type: 'button',
      role: 'tab',
      id: `tab-${t.id}`,
      'aria-controls': `panel-${t.id}`,
      'aria-selected': 'false',
      tabindex: '-1',
      text: t.label,
    });
    const panel = h('section', { role: 'tabpanel', id: `panel-${t.id}`, 'aria-labelledby': `tab-${t.id}`, tabindex: '0', hidden: true });
    panels.push(panel);
    b.addEventListener('click', () => select(t.id, true));
    return b;
  });
  const rendered = new Set();
  function select(id, focus) {
    list.forEach((t, i) => {
      const on = t.id === id;
      buttons[i].setAttribute('aria-selected', String(on));
      buttons[i].tabIndex = on ? 0 : -1;
      panels[i].hidden = !on;
      if (on) {
        if (focus) buttons[i].focus();
        if (!rendered.has(id)) {
          rendered.add(id);
          t.render(panels[i]);
        }
      }
    });
    onSelect?.(id);
  }
  tablist.append(...buttons);
  arrowNavigation(tablist, '[role="tab"]', { horizontal: true });
  // Arrow keys move the focus; the tab that gets it is selected (automatic activation).
  tablist.addEventListener('focusin', (ev) => {
    const i = buttons.indexOf(ev.target);
    if (i >= 0 && ev.target.getAttribute('aria-selected') !== 'true') select(list[i].id, false);
  });
  const el = h('div', { class: 'tabs' }, tablist, panels);
  select(list.some((t) => t.id === selected) ? selected : list[0].id, false);
  return el;
}

/** A labelled form control with its hint and error slot (see `showFieldErrors`). */
export function field({ id, label, path, control, hint }) {
  control.id = id;
  if (!control.name) control.name = path || id;
  const hintId = `${id}-hint`;
  const errId = `${id}-error`;
  const described = [hint ? hintId : null, errId].filter(Boolean).join(' ');
  control.setAttribute('aria-describedby', described);
  const wrap = h(
    'div',
    { class: control.type === 'checkbox' ? 'field check' : 'field', dataset: path ? { field: path } : {} },
    control.type === 'checkbox' ? [control, ' ', h('label', { for: id, text: label })] : [h('label', { for: id, text: label }), control],
    hint ? h('p', { class: 'hint', id: hintId, text: hint }) : null,
    h('p', { class: 'field-error', id: errId, hidden: true }),
  );
  return wrap;
}

/**
 * Puts each 422 field error next to the field it concerns: the field whose
 * path is the longest prefix of the error's (`target.headers.X-Foo` goes to
 * `target.headers`). Errors without a field go to the summary only.
 * Returns the summary element (focus it).
 */
export function showFieldErrors(form, errors, summaryHost) {
  for (const el of form.querySelectorAll('.field-error')) {
    el.hidden = true;
    el.textContent = '';
  }
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  const fields = [...form.querySelectorAll('[data-field]')].filter((f) => !f.closest('[hidden]'));
  const items = [];
  for (const err of errors) {
    const path = String(err.field || '');
    let best = null;
    for (const f of fields) {
      const p = f.dataset.field;
      if ((path === p || path.startsWith(`${p}.`) || path.startsWith(`${p}[`)) && (!best || p.length > best.dataset.field.length)) best = f;
    }
    const text = path ? `${path}: ${err.message}` : err.message;
    let jump = null;
    if (best) {
      const slot = best.querySelector('.field-error');
      slot.hidden = false;
      slot.textContent = slot.textContent ? `${slot.textContent}; ${err.message}` : err.message;
      const control = best.querySelector('input, select, textarea');
      control.setAttribute('aria-invalid', 'true');
      jump = control;
    }
    items.push(
      h('li', {}, jump ? h('button', { type: 'button', class: 'link', onclick: () => jump.focus(), text }) : text),
    );
  }
  const summary = h(
    'div',
    { class: 'error-summary', tabindex: '-1', role: 'alert' },
    h('h2', { text: errors.length === 1 ? 'The server refused one field' : `The server refused ${errors.length} fields` }),
    h('ul', {}, items),
  );
  summaryHost.replaceChildren(summary);
  return summary;
}

/** Replaces an element's children, leaving out null, undefined and false. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}
