// Executions across jobs (GET /v1/executions), newest first, one page at a
// time (cursor paging, the filters and the cursor in the page's address),
// filtered by status, job (its id, key or namespace:key: the API resolves
// it) and scheduled time. Each row names its job by key, else by name (the
// listing carries both), links to it and to the slot's explanation. The
// table is also the Failures page's list of the newest failures.

import { ApiError, get, qs } from './api.js';
import { arrowNavigation, field, fill, h, showError, showFieldErrors, timeEl } from './dom.js';
import { executionJob } from './jobs.js';
import { badge, classify, describe } from './status.js';

const PAGE_SIZE = 50;
const FILTERS = ['status', 'job_id', 'from', 'to'];
const STATUSES = ['succeeded', 'failed', 'retrying', 'running', 'pending', 'skipped', 'missed'];

// Cursors of the pages seen, per filter set, for "Newer page".
const trail = new Map();

/** Listed executions (items with `job_key` and `job_name`) as a table, newest first. */
export function executionTable(items, { id, caption }) {
  const rows = items.map((e) => {
    // The job's jitter is not known here: a success is not judged late or on time.
    const kind = classify(e, Infinity);
    const words = kind === 'ok' ? 'succeeded' : describe(e, kind);
    return h(
      'tr',
      { dataset: { status: e.status, job: e.job_id } },
      h(
        'th',
        { scope: 'row' },
        h('a', { href: `#/jobs/${e.job_id}/slots/${encodeURIComponent(e.scheduled_at)}`, class: 'slot-link' }, timeEl(e.scheduled_at)),
      ),
      h('td', {}, executionJob(e)),
      h('td', {}, badge(kind, words)),
      h('td', { class: 'num', text: String(e.attempts) }),
      h('td', { text: e.trigger || '—' }),
      h('td', { text: e.worker_id || '—' }),
      h('td', { text: e.http_status ?? '—' }),
      h('td', { class: 'execution-error', text: e.error || e.reason || '—' }),
    );
  });
  const table = h(
    'table',
    { id },
    h('caption', { text: caption }),
    h(
      'thead',
      {},
      h('tr', {}, ['Slot (UTC)', 'Job', 'Outcome', 'Attempts', 'Trigger', 'Worker', 'HTTP', 'Error or reason'].map((t) => h('th', { scope: 'col', text: t }))),
    ),
    h('tbody', {}, rows),
  );
  arrowNavigation(table, 'a.slot-link');
  return table;
}

export async function render(main, { query, signal, go }) {
  const filters = Object.fromEntries(FILTERS.map((k) => [k, query.get(k) || '']));
  const cursor = query.get('cursor') || '';
  const key = JSON.stringify(filters);
  const seen = trail.get(key) || [''];
  if (!seen.includes(cursor)) seen.push(cursor);
  trail.set(key, seen.slice(0, seen.indexOf(cursor) + 1));

  const input = (k, attrs = {}) => h('input', { name: k, value: filters[k], spellcheck: 'false', ...attrs });
  const status = h('select', { name: 'status' }, ['', ...STATUSES].map((s) => h('option', { value: s, selected: filters.status === s, text: s || 'any' })));
  const form = h(
    'form',
    { class: 'panel', role: 'search', 'aria-label': 'Filter executions', novalidate: true },
    h(
      'div',
      { class: 'row' },
      field({ id: 'f-ex-status', label: 'Status', path: 'status', control: status }),
      field({ id: 'f-ex-job', label: 'Job', path: 'job_id', control: input('job_id', { placeholder: 'team-a:nightly-report' }), hint: 'Its key, namespace:key or id.' }),
      field({ id: 'f-ex-from', label: 'From (RFC 3339)', path: 'from', control: input('from', { placeholder: '2026-11-22T00:00:00Z' }) }),
      field({ id: 'f-ex-to', label: 'To (RFC 3339)', path: 'to', control: input('to', { placeholder: 'now' }) }),
      h('div', { class: 'field' }, h('button', { type: 'submit', text: 'Search' })),
    ),
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    go(`/executions${qs(Object.fromEntries(FILTERS.map((k) => [k, String(data.get(k) || '').trim()])))}`);
  });

  const host = h('div', { 'aria-busy': 'true' }, h('p', { class: 'muted', text: 'Loading executions…' }));
  fill(main, h('h1', { text: 'Executions' }), form, host);

  let page;
  try {
    page = await get(`/v1/executions${qs({ ...filters, cursor, limit: PAGE_SIZE })}`, { signal });
  } catch (e) {
    if (e?.name === 'AbortError') throw e;
    host.removeAttribute('aria-busy');
    if (e instanceof ApiError && (e.status === 422 || (filters.job_id && e.status === 400))) {
      // A bad filter (or a key several namespaces have): say which, next to it.
      showFieldErrors(form, e.status === 400 ? [{ field: 'job_id', message: e.message }] : e.fieldErrors, host).focus();
      return;
    }
    fill(host, h('p', { class: 'msg msg-error', text: `The executions could not be loaded: ${e.message}` }));
    showError(e);
    return;
  }

  const prev = trail.get(key);
  const prevCursor = prev.length > 1 ? prev[prev.length - 2] : null;
  const pager = h(
    'nav',
    { class: 'actions', 'aria-label': 'Pages of executions' },
    cursor ? h('a', { class: 'button secondary', href: `#/executions${qs({ ...filters })}`, text: 'Newest' }) : null,
    prevCursor !== null && cursor ? h('a', { class: 'button secondary', href: `#/executions${qs({ ...filters, cursor: prevCursor })}`, text: 'Newer page' }) : null,
    page.next_cursor
      ? h('a', { class: 'button secondary', id: 'executions-older', href: `#/executions${qs({ ...filters, cursor: page.next_cursor })}`, rel: 'next', text: 'Older executions' })
      : h('span', { class: 'muted', text: 'The oldest execution is shown.' }),
  );

  host.removeAttribute('aria-busy');
  fill(
    host,
    h('p', { class: 'table-help', text: '↑ and ↓ move between slots; Enter explains one.' }),
    page.items.length
      ? executionTable(page.items, {
          id: 'executions',
          caption: `Executions${cursor ? ' (an older page)' : ''}: ${page.items.length} shown, newest first`,
        })
      : h('p', { class: 'note', id: 'executions-none', text: 'No execution matches.' }),
    pager,
  );
}
