// Jobs: one page of GET /v1/jobs (cursor paging, never a full load) with
// the API's filters, or the one job a key names (GET /v1/jobs/{ref}), and
// per row the recent outcome counts from GET /v1/jobs/outcomes (one call
// for the page's ids; a server without that route shows the list without
// them). Also how the console names a job in its addresses.

import { ApiError, get, qs, seg } from './api.js';
import { arrowNavigation, field, fill, h, instant, showFieldErrors } from './dom.js';
import { COUNT_KINDS, badge } from './status.js';

const PAGE_SIZE = 50;
const FILTERS = ['name_prefix', 'selector', 'kind', 'paused', 'namespace'];
/** Looked up on its own (GET /v1/jobs/{ref}), not a filter of the listing. */
const KEY = 'key';

/**
 * A job in the console's addresses: `namespace:key` when it has a key (the
 * same job for as long as it lives, and readable), its id otherwise. The
 * API takes either wherever a path names a job.
 */
export function jobRef(job) {
  return job.key ? `${job.namespace}:${job.key}` : job.id;
}

/** The job an execution belongs to, as a link: its key, else its name (the id only when the server says neither). */
export function executionJob(e) {
  // By id: the execution's own job, even one deleted since whose key another job has now.
  return h('a', {
    href: `#/jobs/${e.job_id}`,
    class: e.job_key ? 'execution-job mono' : 'execution-job',
    title: e.job_key ? e.job_name : null,
    text: e.job_key || e.job_name || e.job_id,
  });
}

// Cursors of the pages seen, per filter set, for "Previous page".
const trail = new Map();

/** A cron schedule's expressions, whether it has one (`expr`) or several (`exprs`). */
export function cronExprs(s) {
  return s.exprs || (s.expr == null ? [] : [s.expr]);
}

/** The choices of a cron schedule's DST rule, the default first: [value, label]. */
export const DST_REPEATED = [['first', 'at its first occurrence (default)'], ['last', 'at its second occurrence'], ['both', 'at both occurrences']];
export const DST_MISSING = [['shift', 'at the end of the gap (default)'], ['skip', 'not at all']];

/**
 * A cron schedule from a form: one expression a line (`expr` for one,
 * `exprs` for several or when `list` keeps a list), the zone, and the DST
 * rule when it is not the default.
 */
export function cronSchedule(lines, timezone, repeated, missing, list = false) {
  const exprs = lines.split('\n').map((l) => l.trim()).filter(Boolean);
  const s = { kind: 'cron', timezone: timezone || undefined };
  if (exprs.length > 1 || list) s.exprs = exprs;
  else s.expr = exprs[0] ?? '';
  if (repeated !== 'first' || missing !== 'shift') s.dst = { repeated, missing };
  return s;
}

export function scheduleText(s) {
  if (!s) return '—';
  if (s.kind === 'cron') {
    const rule = s.dst ? `; DST: repeated ${s.dst.repeated}, missing ${s.dst.missing}` : '';
    return `cron ${cronExprs(s).join(' | ')} (${s.timezone || 'UTC'}${rule})`;
  }
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

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The one job `ref` names (a key, `namespace:key` or an id; a bare key is
 * taken in the namespace filter's namespace when there is one), as a page
 * of the listing: empty when no live job has it.
 */
async function byKey(ref, namespace, signal) {
  const qualified = namespace && !ref.includes(':') && !UUID.test(ref) ? `${namespace}:${ref}` : ref;
  try {
    return { items: [await get(`/v1/jobs/${seg(qualified)}`, { signal })], next_cursor: null };
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return { items: [], next_cursor: null };
    throw e;
  }
}

export async function render(main, { query, signal, go }) {
  const filters = Object.fromEntries(FILTERS.map((k) => [k, query.get(k) || '']));
  const wanted = query.get(KEY) || '';
  const cursor = wanted ? '' : query.get('cursor') || '';
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
        id: 'f-key',
        label: 'Key',
        path: KEY,
        control: h('input', { value: wanted, spellcheck: 'false', autocapitalize: 'off', placeholder: 'nightly-report' }),
        hint: 'Exact (or namespace:key, or an id): finds that one job.',
      }),
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
    go(`/jobs${qs(Object.fromEntries([...FILTERS, KEY].map((k) => [k, String(data.get(k) || '').trim()])))}`);
  });

  const listHost = h('div', { 'aria-busy': 'true' }, h('p', { class: 'muted', text: 'Loading jobs…' }));
  fill(main, 
    h('div', { class: 'title-row' }, h('h1', { text: 'Jobs' }), h('a', { class: 'button', href: '#/jobs/new', text: 'New job' })),
    form,
    listHost,
  );

  let page;
  try {
    page = wanted ? await byKey(wanted, filters.namespace, signal) : await get(`/v1/jobs${qs({ ...filters, cursor, limit: PAGE_SIZE })}`, { signal });
  } catch (e) {
    if (e instanceof ApiError && (e.status === 422 || (wanted && e.status === 400))) {
      // A bad filter (or a key several namespaces have): say which, next to it.
      showFieldErrors(form, e.status === 400 ? [{ field: KEY, message: e.message }] : e.fieldErrors, listHost).focus();
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
      h('th', { scope: 'row' }, h('a', { href: `#/jobs/${jobRef(j)}`, class: 'row-link', text: j.name })),
      h('td', { class: j.key ? 'mono job-key' : 'muted job-key', text: j.key || '—' }),
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
    h('caption', { text: wanted ? `The job with key ${wanted}` : `Jobs${cursor ? ' (a later page)' : ''}: ${page.items.length} shown` }),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        ['Name', 'Key', 'Namespace', 'Schedule', 'State', 'Next fire (UTC)', 'Last 24 h'].map((t) => h('th', { scope: 'col', text: t })),
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
    wanted ? h('a', { class: 'button secondary', href: `#/jobs${qs({ ...filters })}`, text: 'All jobs' }) : null,
    cursor ? h('a', { class: 'button secondary', href: `#/jobs${qs({ ...filters })}`, text: 'First page' }) : null,
    prevCursor !== null && cursor
      ? h('a', { class: 'button secondary', href: `#/jobs${qs({ ...filters, cursor: prevCursor })}`, text: 'Previous page' })
      : null,
    page.next_cursor
      ? h('a', { class: 'button secondary', href: `#/jobs${qs({ ...filters, cursor: page.next_cursor })}`, rel: 'next', text: 'Next page' })
      : wanted
        ? null
        : h('span', { class: 'muted', text: 'Last page.' }),
  );

  listHost.removeAttribute('aria-busy');
  fill(listHost, 
    h('p', { id: 'jobs-help', class: 'table-help', text: 'In the table, ↑ and ↓ move between jobs, Home and End to the first and last, Enter opens one.' }),
    countsNote ? h('p', { class: 'note', id: 'counts-note', text: countsNote }) : null,
    page.items.length ? table : h('p', { class: 'note', id: 'jobs-none', text: wanted ? `No live job has the key ${wanted}.` : 'No job matches.' }),
    pager,
  );
}
