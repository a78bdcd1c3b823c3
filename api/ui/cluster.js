// The cluster: live scheduler nodes (GET /v1/cluster: heartbeat age, jobs
// owned, Redis shards up), workers (GET /v1/workers), the last hour's
// delivery lateness (GET /v1/stats/lateness, drawn by chart.js) and a
// "who owns job X" lookup (GET /v1/jobs/{id}/owners). Routes this server
// does not have yet are said to be missing; the rest still shows.

import { ApiError, get, getOptional, qs, seg } from './api.js';
import { duration, field, fill, h, instant, showError } from './dom.js';
import { ownersView } from './job.js';
import { badge } from './status.js';
import { latenessChart } from './chart.js';

const REFRESH_MS = 10_000;
/** A heartbeat older than this is drawn as stale (nodes beat every 10 s, TTL 30 s). */
const STALE_MS = 20_000;

function nodesSection(c) {
  const now = Date.now();
  const shardsOk = c.redis_shards_up === c.redis_shards;
  return h(
    'section',
    { 'aria-labelledby': 'nodes-title' },
    h('h2', { id: 'nodes-title', text: `Scheduler nodes of cluster “${c.cluster}”` }),
    h(
      'p',
      {},
      `${c.live_nodes} live node${c.live_nodes === 1 ? '' : 's'}. Redis shards up: `,
      shardsOk ? badge('ok', `${c.redis_shards_up} of ${c.redis_shards}`) : badge('failed', `${c.redis_shards_up} of ${c.redis_shards}`),
    ),
    c.nodes.length
      ? h(
          'table',
          { id: 'nodes' },
          h('caption', { text: 'Live nodes, from their heartbeats' }),
          h('thead', {}, h('tr', {}, ['Node', 'Heartbeat', 'Age', 'Jobs owned'].map((t) => h('th', { scope: 'col', text: t })))),
          h(
            'tbody',
            {},
            c.nodes.map((n) => {
              const age = now - Date.parse(n.heartbeat_at);
              return h(
                'tr',
                {},
                h('th', { scope: 'row', class: 'mono', text: n.node_id }),
                h('td', {}, typeof n.heartbeat_at === 'string' ? h('time', { datetime: n.heartbeat_at }, instant(n.heartbeat_at)) : '—'),
                h('td', {}, Number.isNaN(age) ? '—' : age > STALE_MS ? badge('late', `${duration(age)} (stale)`) : badge('ok', duration(Math.max(age, 0)))),
                h('td', { class: 'num', text: String(n.owned_jobs ?? '—') }),
              );
            }),
          ),
        )
      : h('p', { class: 'msg msg-error', text: 'No live scheduler node: nothing fires.' }),
  );
}

function workersSection(w) {
  const body = !w
    ? h('p', { class: 'note', id: 'workers-note', text: 'Workers are not available from this server (GET /v1/workers is missing).' })
    : w.items.length
      ? h(
          'table',
          { id: 'workers' },
          h('caption', { text: 'Workers, from their heartbeats' }),
          h('thead', {}, h('tr', {}, ['Worker', 'Seen at', 'Age'].map((t) => h('th', { scope: 'col', text: t })))),
          h(
            'tbody',
            {},
            w.items.map((x) =>
              h(
                'tr',
                {},
                h('th', { scope: 'row', class: 'mono', text: x.worker_id }),
                h('td', {}, h('time', { datetime: x.seen_at }, instant(x.seen_at))),
                h('td', {}, x.age_ms > STALE_MS ? badge('late', `${duration(x.age_ms)} (stale)`) : badge('ok', duration(x.age_ms))),
              ),
            ),
          ),
        )
      : h('p', { class: 'msg msg-error', text: 'No worker has reported: nothing is delivered.' });
  return h('section', { 'aria-labelledby': 'workers-title' }, h('h2', { id: 'workers-title', text: 'Workers' }), body);
}

function latenessSection(l) {
  return h(
    'section',
    { 'aria-labelledby': 'lateness-title' },
    h('h2', { id: 'lateness-title', text: 'Delivery lateness, last hour' }),
    l
      ? latenessChart(l.buckets || [], { minutes: 60 })
      : h('p', { class: 'note', id: 'lateness-note', text: 'Lateness is not available from this server (GET /v1/stats/lateness is missing).' }),
  );
}

function ownerLookup(signal) {
  const input = h('input', { spellcheck: 'false', placeholder: '01a201e7-…' });
  const out = h('div', { 'aria-live': 'polite' });
  const form = h(
    'form',
    { class: 'panel', 'aria-labelledby': 'owner-title' },
    h('h2', { id: 'owner-title', text: 'Who owns a job?' }),
    h('div', { class: 'row' }, field({ id: 'f-owner-job', label: 'Job id or key', path: 'id', control: input }), h('div', { class: 'field' }, h('button', { type: 'submit', text: 'Look up' }))),
    out,
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const id = input.value.trim();
    if (!id) return;
    try {
      const r = await getOptional(`/v1/jobs/${seg(id)}/owners`, { signal });
      fill(out, r ? ownersView(r) : h('p', { class: 'note', text: 'No such job, or this server cannot tell owners (GET /v1/jobs/{id}/owners is missing).' }));
    } catch (e) {
      fill(out, h('p', { class: 'msg msg-error', text: e.message }));
    }
  });
  return form;
}

export async function render(main, { signal }) {
  const host = h('div', { id: 'cluster-data' });
  const stamp = h('p', { class: 'muted', role: 'status' });
  const refresh = h('button', { type: 'button', class: 'secondary', text: 'Refresh', onclick: () => load().catch(showError) });
  fill(main, h('div', { class: 'title-row' }, h('h1', { text: 'Cluster' }), refresh), stamp, host, ownerLookup(signal));

  async function load() {
    const [c, w, l] = await Promise.all([
      get('/v1/cluster', { signal }).catch((e) => (e instanceof ApiError && e.status === 503 ? { error: e } : Promise.reject(e))),
      getOptional('/v1/workers', { signal }),
      getOptional(`/v1/stats/lateness${qs({ minutes: 60 })}`, { signal }),
    ]);
    fill(host, 
      c.error ? h('p', { class: 'msg msg-error', text: `Cluster state unknown: ${c.error.message}` }) : nodesSection(c),
      workersSection(w),
      latenessSection(l),
    );
    stamp.textContent = `As of ${new Date().toISOString().replace('T', ' ')}; refreshed every ${REFRESH_MS / 1000} s while shown.`;
  }
  // Not while the keyboard focus is inside what would be redrawn.
  const timer = setInterval(() => document.visibilityState === 'visible' && !host.contains(document.activeElement) && load().catch(() => {}), REFRESH_MS);
  signal.addEventListener('abort', () => clearInterval(timer));
  await load();
}


