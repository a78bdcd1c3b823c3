// Jobs: one page of GET /v1/jobs (cursor paging, never a full load) with
// the API's filters, and per row the recent outcome counts from
// GET /v1/jobs/outcomes (one call for the page's ids; a server without
// that route shows the list without them).

import { ApiError, get, qs } from './api.js';
import { arrowNavigation, field, fill, h, instant, showFieldErrors } from './dom.js';
import { COUNT_KINDS, badge } from './status.js';

const PAGE_SIZE = 50;
const FILTERS = ['name_prefix', 'selector', 'kind', 'paused', 'namespace'];

// Cursors of the pages seen, per filter set, for "Previous page".
const trail = new Map();

export function scheduleText(s) {
  if (!s) return '—';
  if (s.kind === 'cron') return `cron ${s.expr} (${s.timezone || 'UTC'})`;
  if (s.kind === 'interval') return `every ${s.every_ms} ms`;
  if (s.kind === 'once') return `once at ${instant(s.at)}`;
  return s.kind;
}

export function targetText(t) {
  if (!t) return '—';
  if (t.kind === 'http') return `${t.method || 'POST'} ${t.url}`;
  if (t.kind === 'sqs') return `SQS ${t.queue_url}`;
  return t.kind;
}

export function stateBadge(job) {
  return job.paused ? badge('skipped', 'paused') : badge('ok', 'active');
}

function countsCell(counts) {
  if (counts === undefined) return h('span', { class: 'muted', text: '—' });
  const parts = COUNT_KINDS.filter(([key]) => counts[key] > 0).map(([key, kind, word]) => {
    const b = badge(kind, String(counts[key]));
    b.setAttribute('title', `${counts[key]} ${word}`);
    b.append(h('span', { class: 'visually-hidden', text: ` ${word}` }));
    return b;
  });
  return parts.length ? h('span', { class: 'counts' }, parts) : h('span', { class: 'muted', text: 'none' });
}

export async function render(main, { query, signal, go }) {
  const filters = Object.fromEntries(FILTERS.map((k) => [k, query.get(k) || '']));
  const cursor = query.get('cursor') || '';
  const key = JSON.stringify(filters);
  const seen = trail.get(key) || [''];
  if (!seen.includes(cursor)) seen.push(cursor);
  trail.set(key, seen.slice(0, seen.indexOf(cursor) + 1));

  const input = (k, attrs = {}) => h('input', { value: filters[k], ...attrs });
  const select = (k, options) =>
    h('select', {}, options.map(([v, label]) => h('option', { value: v, selected: filters[k] === v, text: label })));
  const form = h(
    'form',
    { class: 'panel', role: 'search', 'aria-label': 'Filter jobs' },
    h(
      'div',
      { class: 'row' },
      field({ id: 'f-name-prefix', label: 'Name starts with', path: 'name_prefix', control: input('name_prefix', { type: 'search' }) }),
      field({
        id: 'f-selector',
        label: 'Label selector',
        path: 'selector',
        control: input('selector', { placeholder: 'team=payments,tier!=batch' }),
      }),
      field({
        id: 'f-kind',
        label: 'Schedule kind',
        path: 'kind',
        control: select('kind', [['', 'any'], ['cron', 'cron'], ['interval', 'interval'], ['once', 'once']]),
      }),
      field({
        id: 'f-paused',
        label: 'State',
        path: 'paused',
        control: select('paused', [['', 'any'], ['false', 'active'], ['true', 'paused']]),
      }),
      field({ id: 'f-namespace', label: 'Namespace', path: 'namespace', control: input('namespace') }),
      h('div', { class: 'field' }, h('button', { type: 'submit', text: 'Search' })),
    ),
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    go(`/jobs${qs(Object.fromEntries(FILTERS.map((k) => [k, String(data.get(k) || '').trim()])))}`);
  });

  const listHost = h('div', { 'aria-busy': 'true' }, h('p', { class: 'muted', text: 'Loading jobs…' }));
  fill(main, 
    h('div', { class: 'title-row' }, h('h1', { text: 'Jobs' }), h('a', { class: 'button', href: '#/jobs/new', text: 'New job' })),
    form,
    listHost,
  );

  let page;
  try {
    page = await get(`/v1/jobs${qs({ ...filters, cursor, limit: PAGE_SIZE })}`, { signal });
  } catch (e) {
    if (e instanceof ApiError && e.status === 422) {
      // A bad filter: say which, next to it.
      showFieldErrors(form, e.fieldErrors, listHost).focus();
      listHost.removeAttribute('aria-busy');
      return;
    }
    throw e;
  }
  const ids = page.items.map((j) => j.id);

  // Outcome counts for this page only: a bounded, indexed call.
  let counts = null;
  let countsNote = null;
  if (ids.length) {
    try {
      const r = await get(`/v1/jobs/outcomes${qs({ ids: ids.join(','), hours: 24 })}`, { signal });
      counts = r.items || {};
    } catch (e) {
      if (e?.name === 'AbortError') throw e;
      countsNote =
        e instanceof ApiError && e.unavailable
          ? 'Outcome counts are not available from this server (GET /v1/jobs/outcomes is missing).'
          : `Outcome counts could not be loaded: ${e.message}`;
    }
  }

  const rows = page.items.map((j) =>
    h(
      'tr',
      {},
      h('th', { scope: 'row' }, h('a', { href: `#/jobs/${j.id}`, class: 'row-link', text: j.name })),
      h('td', { text: j.namespace }),
      h('td', { class: 'mono', text: scheduleText(j.schedule) }),
      h('td', {}, stateBadge(j)),
      h('td', {}, j.next_fire_at ? h('time', { datetime: j.next_fire_at }, instant(j.next_fire_at)) : '—'),
      h('td', {}, countsCell(counts ? counts[j.id] || {} : undefined)),
    ),
  );
  const table = h(
    'table',
    { id: 'jobs-table', 'aria-describedby': 'jobs-help' },
    h('caption', { text: `Jobs${cursor ? ' (a later page)' : ''}: ${page.items.length} shown` }),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        ['Name', 'Namespace', 'Schedule', 'State', 'Next fire (UTC)', 'Last 24 h'].map((t) => h('th', { scope: 'col', text: t })),
      ),
    ),
    h('tbody', {}, rows),
  );
  arrowNavigation(table, 'a.row-link');

  const prev = trail.get(key);
  const prevCursor = prev.length > 1 ? prev[prev.length - 2] : null;
  const pager = h(
    'nav',
    { class: 'actions', 'aria-label': 'Pages of jobs' },
    cursor ? h('a', { class: 'button secondary', href: `#/jobs${qs({ ...filters })}`, text: 'First page' }) : null,
    prevCursor !== null && cursor
      ? h('a', { class: 'button secondary', href: `#/jobs${qs({ ...filters, cursor: prevCursor })}`, text: 'Previous page' })
      : null,
    page.next_cursor
      ? h('a', { class: 'button secondary', href: `#/jobs${qs({ ...filters, cursor: page.next_cursor })}`, rel: 'next', text: 'Next page' })
      : h('span', { class: 'muted', text: 'Last page.' }),
  );

  listHost.removeAttribute('aria-busy');
  fill(listHost, 
    h('p', { id: 'jobs-help', class: 'table-help', text: 'In the table, ↑ and ↓ move between jobs, Home and End to the first and last, Enter opens one.' }),
    countsNote ? h('p', { class: 'note', id: 'counts-note', text: countsNote }) : null,
    page.items.length ? table : h('p', { class: 'note', text: 'No job matches.' }),
    pager,
  );
}
