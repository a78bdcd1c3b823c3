// Failures in a window, grouped by error (GET /v1/executions/failures), and
// a bulk replay of one group (POST /v1/executions/replay with the group's
// error text); beneath, the window's newest failed executions, each naming
// its job by key or name (GET /v1/executions?status=failed, one small
// page). On a server without the grouping route, the newest page of
// failed executions is grouped here instead, and the page says so: still
// one bounded call.

import { ApiError, get, post, qs } from './api.js';
import { field, fill, h, instant, showError, showNotice, timeEl } from './dom.js';
import { executionTable } from './executions.js';
import { executionJob } from './jobs.js';
import { badge } from './status.js';

const WINDOWS = [
  ['1', 'last hour'],
  ['6', 'last 6 hours'],
  ['24', 'last 24 hours'],
  ['168', 'last 7 days'],
  ['custom', 'from … to …'],
];
const FALLBACK_PAGE = 500;
/** `error_contains` takes at most this many characters. */
const ERROR_FILTER_MAX = 500;
/** The most one bulk replay takes. */
const REPLAY_MAX = 1000;
/** Failed executions listed beneath the groups. */
const NEWEST = 10;

function windowOf(query) {
  const hours = query.get('hours') || (query.get('from') ? 'custom' : '24');
  if (hours === 'custom') {
    return { hours, from: query.get('from') || '', to: query.get('to') || '' };
  }
  const to = new Date();
  const from = new Date(to.getTime() - Number(hours) * 3600_000);
  return { hours, from: from.toISOString(), to: to.toISOString() };
}

async function groups(win, signal) {
  let r = null;
  try {
    r = await get(`/v1/executions/failures${qs({ from: win.from, to: win.to })}`, { signal });
  } catch (e) {
    if (!(e instanceof ApiError && e.unavailable)) throw e;
  }
  if (r) {
    const notes = [];
    // The server groups a bounded number of the newest failures; say when it stopped there.
    if (r.capped) notes.push(`The window holds more failures than the server groups: the counts are those of the newest ${r.rows_read}.`);
    if (r.more_groups) notes.push(`${r.more_groups} less frequent error groups are not shown.`);
    const newest = await get(`/v1/executions${qs({ status: 'failed', from: win.from, to: win.to, limit: NEWEST })}`, { signal });
    return { groups: r.groups || [], note: notes.length ? notes.join(' ') : null, newest: newest.items };
  }
  const page = await get(`/v1/executions${qs({ status: 'failed', from: win.from, to: win.to, limit: FALLBACK_PAGE })}`, { signal });
  const byError = new Map();
  for (const x of page.items) {
    const key = x.error || '(no error text)';
    let g = byError.get(key);
    if (!g) {
      g = { error: key, count: 0, jobs: new Set(), first_at: x.scheduled_at, last_at: x.scheduled_at, example: x };
      byError.set(key, g);
    }
    g.count += 1;
    g.jobs.add(x.job_id);
    if (x.scheduled_at < g.first_at) g.first_at = x.scheduled_at;
    if (x.scheduled_at > g.last_at) g.last_at = x.scheduled_at;
  }
  const list = [...byError.values()].map((g) => ({ ...g, jobs: g.jobs.size })).sort((a, b) => b.count - a.count);
  return {
    groups: list,
    newest: page.items.slice(0, NEWEST),
    note: `Grouped here from the newest ${page.items.length} failed executions${page.next_cursor ? ' (there are more)' : ''}: this server has no GET /v1/executions/failures.`,
  };
}

export async function render(main, { query, signal, go }) {
  const win = windowOf(query);
  const pick = h('select', {}, WINDOWS.map(([v, l]) => h('option', { value: v, selected: v === win.hours, text: l })));
  const from = h('input', { value: win.hours === 'custom' ? win.from : '', placeholder: '2026-11-22T00:00:00Z' });
  const to = h('input', { value: win.hours === 'custom' ? win.to : '', placeholder: 'now' });
  const custom = h(
    'div',
    { class: 'row', hidden: win.hours !== 'custom' },
    field({ id: 'f-from', label: 'From (RFC 3339)', path: 'from', control: from }),
    field({ id: 'f-to', label: 'To (RFC 3339)', path: 'to', control: to }),
  );
  pick.addEventListener('change', () => (custom.hidden = pick.value !== 'custom'));
  const form = h(
    'form',
    { class: 'panel', 'aria-label': 'Window' },
    h('div', { class: 'row' }, field({ id: 'f-window', label: 'Window', path: 'hours', control: pick }), custom, h('div', { class: 'field' }, h('button', { type: 'submit', text: 'Show' }))),
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    go(pick.value === 'custom' ? `/failures${qs({ hours: 'custom', from: from.value.trim(), to: to.value.trim() })}` : `/failures${qs({ hours: pick.value })}`);
  });
  const host = h('div', { 'aria-busy': 'true' }, h('p', { class: 'muted', text: 'Loading failures…' }));
  fill(main, h('h1', { text: 'Failures' }), form, host);

  let list;
  let note;
  let newest;
  try {
    ({ groups: list, note, newest } = await groups(win, signal));
  } catch (e) {
    if (e?.name === 'AbortError') throw e;
    // Keep the window form usable; say what went wrong where the table would be.
    host.removeAttribute('aria-busy');
    fill(host, h('p', { class: 'msg msg-error', text: `The failures could not be loaded: ${e.message}` }));
    showError(e);
    return;
  }
  const caption = `Failed executions scheduled ${win.from ? `from ${instant(win.from)}` : ''} ${win.to ? `to ${instant(win.to)}` : 'until now'}, by error`;
  const rows = list.map((g, i) => {
    const replay = h('button', {
      type: 'button',
      class: 'secondary replay-group',
      text: `Replay ${g.count}`,
      'aria-label': `Replay the ${g.count} failed executions with error ${g.error}`,
      onclick: async (ev) => {
        const button = ev.currentTarget;
        if (!window.confirm(`Replay up to ${Math.min(g.count, REPLAY_MAX)} failed executions whose error contains:\n\n${g.error.slice(0, ERROR_FILTER_MAX)}`)) return;
        button.disabled = true;
        try {
          const r = await post('/v1/executions/replay', {
            status: 'failed',
            error_contains: g.error.slice(0, ERROR_FILTER_MAX),
            from: win.from || undefined,
            to: win.to || undefined,
            limit: Math.min(Math.max(g.count, 1), REPLAY_MAX),
          });
          const cell = document.getElementById(`replayed-${i}`);
          fill(cell, badge('pending', `${r.replayed} replayed`));
          showNotice(`Replayed ${r.replayed} execution${r.replayed === 1 ? '' : 's'} (back to pending with a fresh retry budget).`);
        } catch (e) {
          showError(e);
          button.disabled = false;
        }
      },
    });
    const ex = g.example;
    return h(
      'tr',
      { dataset: { error: g.error } },
      h('th', { scope: 'row', class: 'mono', text: g.error }),
      h('td', { class: 'num', text: String(g.count) }),
      h('td', { class: 'num', text: String(g.jobs) }),
      h('td', {}, timeEl(g.first_at)),
      h('td', {}, timeEl(g.last_at)),
      h(
        'td',
        {},
        ex ? h('a', { href: `#/jobs/${ex.job_id}/slots/${encodeURIComponent(ex.scheduled_at)}`, text: 'explain one' }) : '—',
        ex && (ex.job_key || ex.job_name) ? [' of ', executionJob(ex)] : null,
      ),
      h('td', { id: `replayed-${i}` }, replay),
    );
  });
  host.removeAttribute('aria-busy');
  fill(host, 
    note ? h('p', { class: 'note', id: 'failures-note', text: note }) : null,
    list.length
      ? h(
          'table',
          { id: 'failures' },
          h('caption', { text: caption }),
          h('thead', {}, h('tr', {}, ['Error', 'Count', 'Jobs', 'First', 'Last', 'Example', 'Replay'].map((t) => h('th', { scope: 'col', text: t })))),
          h('tbody', {}, rows),
        )
      : h('p', { class: 'note', text: 'No failed execution in this window.' }),
    h('p', { class: 'muted', text: 'A group’s replay takes the failed executions of the window whose error contains the group’s text (case-insensitive), at most 1,000 a click.' }),
    newest.length
      ? [
          h('h2', { id: 'newest-failures-title', text: 'The newest failures' }),
          executionTable(newest, { id: 'newest-failures', caption: `The ${newest.length} newest failed executions of the window, with their jobs` }),
          h('p', {}, h('a', { href: `#/executions${qs({ status: 'failed', from: win.from, to: win.to })}`, text: 'Every failed execution of the window' })),
        ]
      : null,
  );
}

