// One job, named in the address by its id, its key or namespace:key (the
// API resolves each; the page's own links use namespace:key when the job has
// a key): actions (edit, pause, resume, trigger, delete, each with an
// optional note for the audit log), its open alert incidents, its ledger as
// a timeline (GET /v1/jobs/{id}/executions, newest first, one page at a
// time), its history of versions with rollback, its definition, its next
// fire times, its owners and its backfills; and a slot's explain view
// (GET /v1/jobs/{id}/executions/{scheduled_at}) with replay.

import { ApiError, get, getOptional, post, qs, request, seg } from './api.js';
import { ago, arrowNavigation, duration, field, fill, h, instant, showError, showNotice, tabs, timeEl } from './dom.js';
import { OUTCOMES, badge, classify, describe, lateness } from './status.js';
import { jobRef, scheduleText, stateBadge, targetText } from './jobs.js';
import { historyPanel } from './history.js';
import { channelMap, incidentItem } from './alerts.js';
import { backfillPanel } from './backfills.js';

const PAGE = 50;
const REFRESH_MS = 5000;

export async function render(main, { params, query, signal, go, setTitle }) {
  const { data: job } = await request('GET', `/v1/jobs/${seg(params[0])}`, { signal });
  setTitle(job.name);
  // Calls name the job by its id (the job shown, whatever its key names
  // later); the console's links by its reference, which the address becomes.
  const id = job.id;
  const ref = jobRef(job);

  // One note for whichever action is taken next: kept in the audit log (a
  // pause's note is also shown with the paused job).
  const noteInput = h('input', { maxlength: '500', autocomplete: 'off' });
  const noteField = field({
    id: 'f-action-note',
    label: 'Note (optional)',
    path: 'note',
    control: noteInput,
    hint: 'Why: kept with Pause, Resume, Trigger now or Delete in the audit log and the job’s history; a pause’s note is shown with the paused job. At most 500 characters.',
  });
  const noteError = noteField.querySelector('.field-error');
  const noted = () => {
    const note = noteInput.value.trim();
    return note ? { note } : undefined;
  };
  const act = (label, fn, cls = 'secondary') =>
    h('button', {
      type: 'button',
      class: cls,
      text: label,
      onclick: async (ev) => {
        const button = ev.currentTarget;
        button.disabled = true;
        noteError.hidden = true;
        noteInput.removeAttribute('aria-invalid');
        try {
          await fn();
        } catch (e) {
          const refusedNote = e instanceof ApiError && e.fieldErrors.find((f) => f.field === 'note');
          if (refusedNote) {
            noteError.textContent = refusedNote.message;
            noteError.hidden = false;
            noteInput.setAttribute('aria-invalid', 'true');
          }
          showError(e);
          button.disabled = false;
        }
      },
    });
  const actions = h(
    'div',
    { class: 'panel job-actions', role: 'group', 'aria-label': 'Job actions' },
    noteField,
    h(
      'div',
      { class: 'actions' },
      h('a', { class: 'button', href: `#/jobs/${ref}/edit`, text: 'Edit' }),
      job.paused
        ? act('Resume', async () => {
            await post(`/v1/jobs/${seg(id)}/resume`, noted());
            go(`/jobs/${ref}`, `Resumed ${job.name}.`);
          })
        : act('Pause', async () => {
            await post(`/v1/jobs/${seg(id)}/pause`, noted());
            go(`/jobs/${ref}`, `Paused ${job.name}.`);
          }),
      act('Trigger now', async () => {
        const e = await post(`/v1/jobs/${seg(id)}/trigger`, noted());
        go(`/jobs/${ref}`, `Triggered ${job.name}: execution ${e?.execution_id ?? ''} is ${e?.status ?? 'pending'}.`);
      }),
      act(
        'Delete',
        async () => {
          if (!window.confirm(`Delete the job "${job.name}"? It never fires again; its history stays readable.`)) {
            throw new Error('Not deleted.');
          }
          await request('DELETE', `/v1/jobs/${seg(id)}`, { body: noted() });
          go('/jobs', `Deleted ${job.name}.`);
        },
        'danger',
      ),
      h('a', { class: 'button secondary', href: `#/alerts?job=${encodeURIComponent(id)}`, text: 'New alert rule' }),
      h('a', { class: 'button secondary', id: 'backfill-action', href: `#/jobs/${ref}?tab=backfill`, text: 'Backfill' }),
    ),
  );

  const tabList = [
    { id: 'timeline', label: 'Timeline', render: (p) => timeline(p, job, signal) },
    { id: 'history', label: 'History', render: (p) => historyPanel(p, job, { signal, go }) },
    { id: 'definition', label: 'Definition', render: (p) => definition(p, job) },
    { id: 'next', label: 'Next fires', render: (p) => nextFires(p, job, signal) },
    { id: 'owners', label: 'Owners', render: (p) => owners(p, id, signal) },
    { id: 'backfill', label: 'Backfill', render: (p) => backfillPanel(p, job, signal) },
  ];
  const alertsHost = h('section', { id: 'job-alerts', class: 'job-alerts', hidden: true, 'aria-labelledby': 'job-alerts-title' });
  const selected = query.get('tab') || 'timeline';
  const tabEl = tabs('Job views', tabList, selected, (tab) => {
    const url = `#/jobs/${ref}${tab === 'timeline' ? '' : `?tab=${tab}`}`;
    if (location.hash !== url) history.replaceState(null, '', url);
  });

  fill(main, 
    h('div', { class: 'title-row' }, h('h1', { text: job.name }), stateBadge(job)),
    h(
      'dl',
      { class: 'props' },
      h('dt', { text: 'Key' }),
      job.key ? h('dd', { class: 'mono', id: 'job-key', text: job.key }) : h('dd', { class: 'muted', id: 'job-key', text: 'none' }),
      h('dt', { text: 'Id' }),
      h('dd', { class: 'mono', text: job.id }),
      h('dt', { text: 'Schedule' }),
      h('dd', { class: 'mono', id: 'job-schedule', text: scheduleText(job.schedule) }),
      h('dt', { text: 'Target' }),
      h('dd', { class: 'mono', text: targetText(job.target) }),
      h('dt', { text: 'Version' }),
      h('dd', { text: String(job.version) }),
      h('dt', { text: 'Next fire' }),
      h('dd', {}, job.next_fire_at ? timeEl(job.next_fire_at) : job.paused ? 'none while paused' : 'none'),
      job.completion?.mode === 'async' ? [h('dt', { text: 'Completion' }), h('dd', { id: 'job-completion', text: completionText(job) })] : null,
      job.after_completion === 'delete' ? [h('dt', { text: 'After completion' }), h('dd', { id: 'job-after-completion', text: afterCompletionText(job) })] : null,
      job.pause ? h('dt', { text: 'Paused' }) : null,
      job.pause
        ? h(
            'dd',
            { id: 'paused-by' },
            `by ${job.pause.by ?? 'unknown'}`,
            job.pause.at ? ' at ' : '',
            job.pause.at ? timeEl(job.pause.at) : '',
            job.pause.note ? `: ${job.pause.note}` : '',
          )
        : null,
    ),
    alertsHost,
    actions,
    tabEl,
  );
  openIncidents(alertsHost, id, signal);
}

// ------------------------------------------------------- open incidents

/** The job's open alert incidents (GET /v1/alerts?job=ID&open=true), above its actions when there are any. */
async function openIncidents(host, id, signal) {
  try {
    const r = await getOptional(`/v1/alerts${qs({ job: id, open: 'true' })}`, { signal });
    if (!r?.items.length) return;
    const channels = channelMap(await getOptional('/v1/alert-channels', { signal }).catch(() => null));
    fill(
      host,
      h('h2', { id: 'job-alerts-title', text: `Open alert${r.items.length === 1 ? '' : 's'} (${r.items.length})` }),
      h('ol', { class: 'incidents', 'aria-labelledby': 'job-alerts-title' }, r.items.map((i) => incidentItem(i, channels, { showJob: false }))),
      h('p', {}, h('a', { href: '#/alerts', text: 'All incidents and the rules' })),
    );
    host.hidden = false;
  } catch (e) {
    if (e?.name !== 'AbortError') fill(host, h('p', { class: 'msg msg-error', text: `The job’s alerts could not be loaded: ${e.message}` }));
    host.hidden = false;
  }
}

// ------------------------------------------------------------- timeline

function slotLink(job, e) {
  const kind = classify(e, job.jitter_ms || 0);
  const late = lateness(e);
  const meta = [
    `attempt ${e.attempts}`,
    late !== null ? `started ${duration(late)} after the slot` : null,
    e.worker_id ? `worker ${e.worker_id}` : null,
    e.http_status ? `HTTP ${e.http_status}` : null,
    e.awaiting_until ? `awaiting the report until ${instant(e.awaiting_until)}` : null,
    e.trigger && e.trigger !== 'schedule' ? `${e.trigger}` : null,
    e.error ? e.error : null,
  ].filter(Boolean);
  return h(
    'li',
    { class: `o-${kind}`, dataset: { status: e.status, outcome: kind } },
    h(
      'a',
      { href: `#/jobs/${jobRef(job)}/slots/${encodeURIComponent(e.scheduled_at)}`, class: 'slot-link' },
      h('time', { datetime: e.scheduled_at }, instant(e.scheduled_at)),
      badge(kind, describe(e, kind)),
      h('span', { class: 'slot-meta', text: meta.join(' · ') }),
    ),
  );
}

function legend() {
  return h(
    'div',
    { class: 'legend', 'aria-label': 'Legend' },
    Object.keys(OUTCOMES).map((k) => badge(k)),
  );
}

async function timeline(panel, job, signal) {
  const status = h(
    'select',
    { id: 'tl-status' },
    ['', 'succeeded', 'failed', 'retrying', 'running', 'pending', 'skipped', 'missed'].map((s) => h('option', { value: s, text: s || 'any' })),
  );
  const auto = h('input', { type: 'checkbox', id: 'tl-auto' });
  const list = h('ol', { class: 'timeline', id: 'timeline', 'aria-label': 'Slots, newest first' });
  const strip = h('div', { class: 'strip', 'aria-hidden': 'true' });
  const more = h('button', { type: 'button', class: 'secondary', text: 'Older slots', hidden: true });
  const summary = h('p', { class: 'muted', role: 'status' });
  let cursor = null;
  let timer = null;

  async function load(append) {
    const page = await get(
      `/v1/jobs/${seg(job.id)}/executions${qs({ status: status.value, limit: PAGE, cursor: append ? cursor : null })}`,
      { signal },
    );
    const items = page.items.map((e) => slotLink(job, e));
    if (append) list.append(...items);
    else {
      fill(list, ...items);
      fill(strip, 
        ...page.items
          .slice(0, 60)
          .reverse()
          .map((e) => {
            const k = classify(e, job.jitter_ms || 0);
            return h('span', { class: `o-${k}`, title: `${instant(e.scheduled_at)} ${describe(e, k)}`, text: OUTCOMES[k].icon });
          }),
      );
    }
    cursor = page.next_cursor;
    more.hidden = !cursor;
    const n = list.children.length;
    summary.textContent = n ? `${n} slot${n === 1 ? '' : 's'} shown, newest first${cursor ? '; older ones on request' : ''}.` : 'No slot recorded yet.';
  }

  const refresh = h('button', {
    type: 'button',
    class: 'secondary',
    id: 'tl-refresh',
    text: 'Refresh',
    onclick: () => load(false).catch(showError),
  });
  status.addEventListener('change', () => load(false).catch(showError));
  more.addEventListener('click', () => load(true).catch(showError));
  auto.addEventListener('change', () => {
    clearInterval(timer);
    // Only while the tab is visible, and only the first page.
    if (auto.checked) timer = setInterval(() => document.visibilityState === 'visible' && load(false).catch(() => {}), REFRESH_MS);
  });
  signal.addEventListener('abort', () => clearInterval(timer));
  arrowNavigation(list, 'a.slot-link');

  fill(panel, 
    h(
      'div',
      { class: 'row' },
      h('div', { class: 'field' }, h('label', { for: 'tl-status', text: 'Status' }), status),
      h('div', { class: 'field' }, refresh),
      h('div', { class: 'field check' }, auto, ' ', h('label', { for: 'tl-auto', text: `Refresh every ${REFRESH_MS / 1000} s` })),
    ),
    legend(),
    strip,
    summary,
    h('p', { class: 'table-help', text: '↑ and ↓ move between slots; Enter explains one.' }),
    list,
    more,
  );
  await load(false).catch((e) => {
    if (e?.name !== 'AbortError') showError(e);
  });
}

// ----------------------------------------------------------- definition

const patterns = (list) => (list || []).map(String).join(', ');

/** What counts as a successful delivery to an HTTP target, in words. */
export function successText(t) {
  const s = t.success || {};
  const body = s.body_contains
    ? ` and the body contains “${s.body_contains}”`
    : s.body_matches
      ? ` and the body matches the expression ${s.body_matches}`
      : '';
  return `HTTP ${patterns(s.status) || '2xx'}${body}${t.success ? '' : ' (the default)'}`;
}

/** The statuses a failed HTTP delivery is retried on, in words. */
export function retryStatusesText(t) {
  const listed = t.retry_statuses ? patterns(t.retry_statuses) || 'no status' : '408, 425, 429, 5xx (the default)';
  return `${listed}; network errors and timeouts always`;
}

/** How a delivery's outcome is known, in words. */
export function completionText(job) {
  const c = job.completion;
  if (!c || c.mode !== 'async') return 'sync: the HTTP answer is the outcome';
  return `async: a 202 answer waits up to ${duration(c.timeout_ms ?? 3_600_000)} for the receiver’s report (then fails and is retried)`;
}

export function afterCompletionText(job) {
  return job.after_completion === 'delete' ? 'delete: the job is deleted once its slot is final (its history stays)' : 'keep';
}

function retryText(r) {
  if (!r) return 'the worker’s default';
  return `${r.max_retries} retries, ${r.base_delay_ms} ms × ${r.multiplier}, at most ${r.max_delay_ms} ms, jitter ${r.jitter || 'equal'}`;
}

function definition(panel, job) {
  const spec = { ...job };
  for (const k of ['id', 'namespace', 'version', 'created_at', 'updated_at', 'next_fire_at']) delete spec[k];
  const http = job.target?.kind === 'http' ? job.target : null;
  fill(panel, 
    h(
      'dl',
      { class: 'props', id: 'definition-props' },
      [
        ['Namespace', job.namespace],
        ['Created', instant(job.created_at)],
        ['Updated', instant(job.updated_at)],
        ['Labels', Object.entries(job.labels || {}).map(([k, v]) => `${k}=${v}`).join(', ') || '—'],
        ['Retry', retryText(job.retry), 'def-retry'],
        http ? ['Success', successText(http), 'def-success'] : null,
        http ? ['Retried on', retryStatusesText(http), 'def-retry-statuses'] : null,
        ['Completion', completionText(job), 'def-completion'],
        job.schedule?.kind === 'once' || job.after_completion ? ['After completion', afterCompletionText(job), 'def-after-completion'] : null,
        ['Missed slots', `${job.misfire} (cap ${job.misfire_cap})`],
        ['Overlap', job.overlap || 'allow'],
        ['Jitter', job.jitter_ms ? `${job.jitter_ms} ms` : 'none'],
        ['Calendars', (job.calendars || []).join(', ') || '—'],
      ]
        .filter(Boolean)
        .flatMap(([k, v, id]) => [h('dt', { text: k }), h('dd', { id, text: v })]),
    ),
    h('h3', { text: 'As stored (secret header values are shown as ***)' }),
    h('pre', { tabindex: '0', 'aria-label': 'Job definition as JSON', text: JSON.stringify(spec, null, 2) }),
  );
}

// ----------------------------------------------------------- next fires

export function dstCell(f) {
  const parts = [];
  if (f.dst === 'gap') parts.push(badge('late', 'DST gap: wall time skipped, fires at the end of the gap'));
  if (f.dst === 'overlap') parts.push(badge('retrying', 'DST overlap: first of the two wall times'));
  if (f.dst_shift) parts.push(badge('pending', 'offset changes here'));
  return parts.length ? h('span', { class: 'counts' }, parts) : h('span', { class: 'muted', text: '—' });
}

export function fireTable(fires, caption) {
  return h(
    'table',
    { id: 'fires' },
    h('caption', { text: caption }),
    h(
      'thead',
      {},
      h('tr', {}, ['Slot (UTC)', 'Wall time', 'Offset', 'Daylight saving', 'Delivered at (jitter)'].map((t) => h('th', { scope: 'col', text: t }))),
    ),
    h(
      'tbody',
      {},
      fires.map((f) =>
        h(
          'tr',
          { dataset: { dst: f.dst || '' } },
          h('td', {}, timeEl(f.at)),
          h('td', { class: 'mono', text: f.local || '—' }),
          h('td', { class: 'mono', text: f.offset || '—' }),
          h('td', {}, dstCell(f)),
          h('td', {}, f.fires_at ? timeEl(f.fires_at) : '—'),
        ),
      ),
    ),
  );
}

async function nextFires(panel, job, signal) {
  fill(panel, h('p', { class: 'muted', text: 'Loading…' }));
  try {
    const r = await get(`/v1/jobs/${seg(job.id)}/next${qs({ count: 10 })}`, { signal });
    fill(panel, 
      r.fire_times.length ? fireTable(r.fire_times, 'The next 10 fire times') : h('p', { class: 'note', text: 'No fire time ahead (paused, ended or used up).' }),
    );
  } catch (e) {
    if (e?.name !== 'AbortError') fill(panel, h('p', { class: 'msg msg-error', text: e.message }));
  }
}

// --------------------------------------------------------------- owners

export function ownersView(r) {
  const live = new Set(r.live_nodes || []);
  return h(
    'div',
    { id: 'owners' },
    h(
      'p',
      {},
      `Replication factor ${r.replication_factor}: the ${r.replication_factor} live nodes ranking highest for this job (rendezvous hashing) own it; the first to lock a slot fires it.`,
    ),
    h(
      'ul',
      {},
      (r.owners || []).map((n) => h('li', {}, h('span', { class: 'mono', text: n }), ' ', live.has(n) ? badge('ok', 'live') : badge('missed', 'not live'))),
    ),
    h('p', { class: 'muted', text: `Live nodes: ${(r.live_nodes || []).join(', ') || 'none'}.` }),
  );
}

async function owners(panel, id, signal) {
  try {
    const r = await getOptional(`/v1/jobs/${seg(id)}/owners`, { signal });
    fill(panel, 
      r ? ownersView(r) : h('p', { class: 'note', text: 'Ownership is not available from this server (GET /v1/jobs/{id}/owners is missing).' }),
    );
  } catch (e) {
    if (e?.name !== 'AbortError') fill(panel, h('p', { class: 'msg msg-error', text: e.message }));
  }
}

// -------------------------------------------------------- explain a slot

const REPLAYABLE = new Set(['failed', 'pending', 'retrying', 'running']);

/** Kept response headers (name → value) as a small list; null when there are none. */
export function headersList(headers, id) {
  const entries = Object.entries(headers && typeof headers === 'object' ? headers : {});
  if (!entries.length) return null;
  return h(
    'ul',
    { class: 'kv', id, 'aria-label': 'Response headers kept' },
    entries.map(([name, value]) => h('li', {}, h('span', { class: 'kv-name mono', text: name }), ': ', h('span', { class: 'mono', text: String(value) }))),
  );
}

/** History events in words (the others as the API names them, without underscores). */
const EVENTS = {
  completed: 'report received',
  completion_timed_out: 'report timed out',
};

function outcomeBadge(outcome) {
  if (!outcome) return '—';
  if (outcome === 'succeeded') return badge('ok', outcome);
  if (outcome === 'failed') return badge('failed', outcome);
  if (outcome === 'accepted') return badge('running', 'accepted (202)');
  return badge('retrying', outcome);
}

/** What an entry adds beside its columns: errors, reasons, waits, what the receiver said. */
function historyDetail(e) {
  const parts = [];
  if (e.event === 'completed') {
    parts.push(`the receiver reported ${e.outcome ?? 'its outcome'}${e.result ? `: ${e.result}` : ''}`);
  }
  if (e.event === 'completion_timed_out') {
    parts.push([`no report by the deadline `, timeEl(e.deadline), `: attempt ${e.attempt ?? ''} counts as failed and goes to its retry policy`]);
  }
  for (const text of [e.error, e.reason, e.destination]) if (text) parts.push(String(text));
  if (e.redelivered) parts.push('redelivered (a worker took the message again)');
  if (e.next_attempt_at) parts.push(['next attempt at ', timeEl(e.next_attempt_at)]);
  if (e.awaiting_until) parts.push(['awaiting the report until ', timeEl(e.awaiting_until)]);
  const headers = headersList(e.response_headers);
  if (headers) parts.push(['response headers:', headers]);
  if (!parts.length) return '—';
  return parts.map((p) => h('div', { class: 'detail-line' }, p));
}

function historyTable(history) {
  const cols = ['event', 'attempt', 'when', 'finished', 'outcome', 'worker', 'HTTP', 'why (rule that decided)', 'detail'];
  return h(
    'table',
    { id: 'history' },
    h('caption', { text: 'History, oldest first' }),
    h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col', text: c })))),
    h(
      'tbody',
      {},
      history.map((e) =>
        h(
          'tr',
          { dataset: { event: e.event ?? '', outcome: e.outcome ?? '' } },
          h('td', { text: EVENTS[e.event] || String(e.event ?? '—').replaceAll('_', ' ') }),
          h('td', { text: e.attempt ?? '—' }),
          h('td', {}, timeEl(e.started_at || e.at)),
          h('td', {}, timeEl(e.finished_at)),
          h('td', {}, outcomeBadge(e.outcome)),
          h('td', { text: e.worker_id ?? '—' }),
          h('td', { text: e.http_status ?? '—' }),
          h('td', { class: 'why', text: e.rule || '—' }),
          h('td', {}, historyDetail(e)),
        ),
      ),
    ),
  );
}

export async function renderSlot(main, { params, signal, go, setTitle }) {
  const [id, at] = params;
  const [r, job] = await Promise.all([
    get(`/v1/jobs/${seg(id)}/executions/${seg(at)}`, { signal }),
    getOptional(`/v1/jobs/${seg(id)}`, { signal }),
  ]);
  setTitle(`Slot ${at}`);
  // A deleted job is not read (null): its slots stay reachable by the address's reference.
  const ref = job ? jobRef(job) : id;
  const x = r.explanation;
  const e = r.execution;
  const kind = e ? classify(e, job?.jitter_ms || 0) : null;
  const verdictBadge = e ? badge(kind, describe(e, kind)) : badge('skipped', x.verdict.replaceAll('_', ' '));

  const replay = h('button', {
    type: 'button',
    id: 'replay',
    text: 'Replay this slot',
    disabled: !(e && REPLAYABLE.has(e.status)),
    onclick: async (ev) => {
      ev.currentTarget.disabled = true;
      try {
        const row = await post(`/v1/executions/${seg(e.job_id)}/${seg(r.scheduled_at)}/replay`);
        go(`/jobs/${ref}/slots/${encodeURIComponent(r.scheduled_at)}`, `Replayed: the slot is ${row.status} again, with a fresh retry budget (fire id ${row.fire_id}).`);
      } catch (err) {
        showError(err);
      }
    },
  });
  const nav = (label, t) => (t ? h('a', { class: 'button secondary', href: `#/jobs/${ref}/slots/${encodeURIComponent(t)}`, text: label }) : null);

  fill(main, 
    h('p', {}, h('a', { href: `#/jobs/${ref}`, text: `← ${job ? job.name : id}` })),
    h('div', { class: 'title-row' }, h('h1', {}, 'Slot ', h('time', { datetime: r.scheduled_at }, instant(r.scheduled_at))), verdictBadge),
    h(
      'section',
      { class: 'panel', 'aria-labelledby': 'verdict-title' },
      h('h2', { id: 'verdict-title', text: `Verdict: ${x.verdict.replaceAll('_', ' ')}${x.fired ? ' (a worker took it)' : ''}` }),
      h('p', { id: 'summary', text: x.summary }),
      x.details?.length ? h('ol', { id: 'details' }, x.details.map((d) => h('li', { text: d }))) : null,
      x.delivery_at ? h('p', {}, 'Delivered with jitter at ', timeEl(x.delivery_at), '.') : null,
    ),
    h(
      'div',
      { class: 'actions' },
      replay,
      e && !REPLAYABLE.has(e.status) ? h('span', { class: 'muted', text: `A ${e.status} slot is not replayed.` }) : null,
      nav('← Previous fire time', x.previous_fire_at),
      nav('Next fire time →', x.next_fire_at),
    ),
    e
      ? h(
          'section',
          { 'aria-labelledby': 'row-title' },
          h('h2', { id: 'row-title', text: 'Ledger row' }),
          h(
            'dl',
            { class: 'props', id: 'row-props' },
            [
              ['Execution id', e.execution_id],
              ['Status', e.status],
              ['Attempts', e.attempts],
              ['Trigger', e.trigger],
              ['Scheduler node', e.scheduler_node || '—'],
              ['Worker', e.worker_id || '—'],
              ['Fired (claimed)', instant(e.fired_at)],
              ['Started', instant(e.started_at)],
              ['Finished', instant(e.finished_at)],
              ['Lateness', lateness(e) === null ? '—' : duration(lateness(e))],
              ['HTTP status', e.http_status ?? '—'],
              ['Error', e.error || '—'],
              ['Reason', e.reason || '—'],
              ['Response excerpt', e.response_excerpt || '—'],
              ['Response headers', headersList(e.response_headers) || '—', 'response-headers'],
              e.next_attempt_at ? ['Next attempt', [timeEl(e.next_attempt_at), ` (${ago(e.next_attempt_at)})`], 'next-attempt-at'] : null,
              e.awaiting_until ? ['Awaiting report until', [timeEl(e.awaiting_until), ` (${ago(e.awaiting_until)})`], 'awaiting-until'] : null,
            ]
              .filter(Boolean)
              .flatMap(([k, v, ddId]) => [
                h('dt', { text: k }),
                v instanceof Node || Array.isArray(v) ? h('dd', { id: ddId }, v) : h('dd', { id: ddId, text: String(v) }),
              ]),
          ),
          e.history?.length ? historyTable(e.history) : null,
        )
      : h('p', { class: 'note', text: 'No ledger row for this instant.' }),
  );
}

