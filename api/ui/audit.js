// The audit log (GET /v1/audit, admin tokens only): who changed what, when
// and why, newest first, one page at a time (cursor paging, the filters and
// the cursor in the page's address), filtered by actor, action (or every
// action on a resource), job, namespace and time range. Each entry opens to
// its changes, details and request id. A token whose role cannot read the
// log gets the server's 403 said in words.

import { ApiError, get, qs } from './api.js';
import { field, fill, h, showError, showFieldErrors, timeEl } from './dom.js';
import { ACTION_NAMES, actionText, actorText, changesList } from './history.js';

const PAGE_SIZE = 50;
const FILTERS = ['actor', 'action', 'job', 'namespace', 'since', 'until'];
const RESOURCES = [...new Set(ACTION_NAMES.map((a) => a.split('.')[0]))];

// Cursors of the pages seen, per filter set, for "Previous page".
const trail = new Map();

function resourceCell(e) {
  if (e.job_id) {
    return h(
      'span',
      {},
      h('a', { href: `#/jobs/${e.job_id}`, class: 'mono', text: e.job_id }),
      e.job_version ? h('span', { class: 'muted', text: ` (version ${e.job_version})` }) : '',
    );
  }
  return h('span', {}, `${e.resource.replaceAll('_', ' ')} `, h('span', { class: 'mono', text: e.resource_id }));
}

function detailRow(e, id, columns) {
  const props = [
    ['Request id', e.request_id, 'mono'],
    ['Actor', `${actorText(e.actor)}${e.actor?.token_id ? ` (token ${e.actor.token_id})` : ''}`],
    ['Namespace', e.namespace ?? 'the cluster itself'],
    ['Resource', `${e.resource} ${e.resource_id}`, 'mono'],
    e.job_version ? ['Job version', String(e.job_version)] : null,
  ].filter(Boolean);
  return h(
    'tr',
    { class: 'audit-detail', id, hidden: true },
    h(
      'td',
      { colspan: String(columns) },
      h('dl', { class: 'props' }, props.flatMap(([k, v, cls]) => [h('dt', { text: k }), h('dd', { class: cls, text: v })])),
      e.changes?.length ? [h('h3', { text: 'What changed' }), changesList(e.changes, { label: `What entry ${e.id} changed` })] : null,
      e.details ? [h('h3', { text: 'Details' }), h('pre', { tabindex: '0', class: 'audit-details', text: JSON.stringify(e.details, null, 2) })] : null,
    ),
  );
}

function entryRows(e) {
  const detailId = `audit-entry-${e.id}`;
  const columns = 7;
  const detail = detailRow(e, detailId, columns);
  const toggle = h('button', {
    type: 'button',
    class: 'secondary audit-toggle',
    text: 'Show',
    'aria-expanded': 'false',
    'aria-controls': detailId,
    'aria-label': `Show the changes and details of entry ${e.id}`,
    onclick: () => {
      const open = detail.hidden;
      detail.hidden = !open;
      toggle.setAttribute('aria-expanded', String(open));
      toggle.textContent = open ? 'Hide' : 'Show';
    },
  });
  return [
    h(
      'tr',
      { class: 'audit-entry', dataset: { entry: String(e.id), action: e.action } },
      h('td', {}, timeEl(e.at)),
      h('td', { class: 'audit-actor', text: actorText(e.actor) }),
      h('td', {}, actionText(e.action), ' ', h('code', { class: 'muted', text: e.action })),
      h('td', {}, resourceCell(e)),
      h('td', { text: e.namespace ?? '—' }),
      h('td', { class: 'audit-reason', text: e.reason || '—' }),
      h('td', {}, toggle),
    ),
    detail,
  ];
}

export async function render(main, { query, signal, go }) {
  const filters = Object.fromEntries(FILTERS.map((k) => [k, query.get(k) || '']));
  const cursor = query.get('cursor') || '';
  const key = JSON.stringify(filters);
  const seen = trail.get(key) || [''];
  if (!seen.includes(cursor)) seen.push(cursor);
  trail.set(key, seen.slice(0, seen.indexOf(cursor) + 1));

  const input = (k, attrs = {}) => h('input', { name: k, value: filters[k], spellcheck: 'false', ...attrs });
  const actions = h(
    'datalist',
    { id: 'audit-actions' },
    [...RESOURCES, ...ACTION_NAMES].map((a) => h('option', { value: a })),
  );
  const form = h(
    'form',
    { class: 'panel', role: 'search', 'aria-label': 'Filter the audit log', novalidate: true },
    h(
      'div',
      { class: 'row' },
      field({ id: 'f-audit-actor', label: 'Actor', path: 'actor', control: input('actor'), hint: 'A token’s name or id, exactly.' }),
      field({ id: 'f-audit-action', label: 'Action', path: 'action', control: input('action', { list: 'audit-actions', placeholder: 'job.pause' }), hint: 'An action (job.pause) or a resource (job: all of its actions).' }),
      field({ id: 'f-audit-job', label: 'Job id', path: 'job', control: input('job') }),
      field({ id: 'f-audit-namespace', label: 'Namespace', path: 'namespace', control: input('namespace') }),
      field({ id: 'f-audit-since', label: 'Since (RFC 3339)', path: 'since', control: input('since', { placeholder: '2026-11-22T00:00:00Z' }) }),
      field({ id: 'f-audit-until', label: 'Until (RFC 3339)', path: 'until', control: input('until', { placeholder: 'now' }) }),
      h('div', { class: 'field' }, h('button', { type: 'submit', text: 'Search' })),
    ),
    actions,
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    go(`/audit${qs(Object.fromEntries(FILTERS.map((k) => [k, String(data.get(k) || '').trim()])))}`);
  });

  const host = h('div', { 'aria-busy': 'true' }, h('p', { class: 'muted', text: 'Loading the audit log…' }));
  fill(
    main,
    h('h1', { text: 'Audit log' }),
    h('p', {}, 'Every change made through the API: who (the token), what, when and why (a note, or the request’s X-Audit-Reason), newest first. Nothing changes or deletes an entry; they are kept for the cluster’s retention.'),
    form,
    host,
  );

  let page;
  try {
    page = await get(`/v1/audit${qs({ ...filters, cursor, limit: PAGE_SIZE })}`, { signal });
  } catch (e) {
    if (e?.name === 'AbortError') throw e;
    host.removeAttribute('aria-busy');
    if (e instanceof ApiError && e.status === 403) {
      fill(
        host,
        h(
          'p',
          { class: 'note', id: 'audit-forbidden' },
          'The audit log is for admin tokens: this token’s role cannot read it (the server answered 403). Sign in with an admin token to see who changed what.',
        ),
      );
      return;
    }
    if (e instanceof ApiError && e.status === 422 && e.fieldErrors.length) {
      // A bad filter: say which, next to it.
      showFieldErrors(form, e.fieldErrors, host).focus();
      return;
    }
    if (e instanceof ApiError && e.unavailable) {
      fill(host, h('p', { class: 'note', id: 'audit-missing', text: 'This server keeps no audit log (GET /v1/audit is missing).' }));
      return;
    }
    fill(host, h('p', { class: 'msg msg-error', text: `The audit log could not be loaded: ${e.message}` }));
    showError(e);
    return;
  }

  const table = h(
    'table',
    { id: 'audit' },
    h('caption', { text: `Audit log${cursor ? ' (an older page)' : ''}: ${page.items.length} entr${page.items.length === 1 ? 'y' : 'ies'}, newest first` }),
    h('thead', {}, h('tr', {}, ['At (UTC)', 'Actor', 'Action', 'Resource', 'Namespace', 'Why', 'Changes'].map((t) => h('th', { scope: 'col', text: t })))),
    h('tbody', {}, page.items.map(entryRows)),
  );

  const prev = trail.get(key);
  const prevCursor = prev.length > 1 ? prev[prev.length - 2] : null;
  const pager = h(
    'nav',
    { class: 'actions', 'aria-label': 'Pages of the audit log' },
    cursor ? h('a', { class: 'button secondary', href: `#/audit${qs({ ...filters })}`, text: 'Newest' }) : null,
    prevCursor !== null && cursor ? h('a', { class: 'button secondary', href: `#/audit${qs({ ...filters, cursor: prevCursor })}`, text: 'Newer page' }) : null,
    page.next_cursor
      ? h('a', { class: 'button secondary', id: 'audit-older', href: `#/audit${qs({ ...filters, cursor: page.next_cursor })}`, rel: 'next', text: 'Older entries' })
      : h('span', { class: 'muted', text: 'The oldest entry is shown.' }),
  );

  host.removeAttribute('aria-busy');
  fill(host, page.items.length ? table : h('p', { class: 'note', id: 'audit-none', text: 'No entry matches.' }), pager);
}
