// A job's backfills (its Backfill tab): a form for a range of past slots
// with a Preview (the dry run: how many slots, the first ones) before Start
// (POST /v1/jobs/{id}/backfill), and the job's backfills, newest first, with
// their progress and a Cancel for a running one (GET /v1/backfills?job=,
// POST /v1/backfills/{id}/cancel), refreshed while one runs.

import { get, post, qs, seg } from './api.js';
import { field, fill, h, showError, showFieldErrors, showNotice, timeEl } from './dom.js';
import { badge } from './status.js';

const REFRESH_MS = 3000;
/** Slots of a preview listed on the page (the dry run gives up to 1,000). */
const PREVIEW_SHOWN = 10;

/** A datetime-local value (the browser's zone) as an RFC 3339 instant; '' stays ''. */
const toInstant = (local) => (local ? new Date(local).toISOString() : '');

/** A Date as a datetime-local value in the browser's zone, to the minute. */
function localValue(d) {
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

const STATES = { running: 'running', cancelled: 'skipped', done: 'ok' };

function progressText(p) {
  return `${p.planned - p.remaining}/${p.planned} slots handled: ${p.in_flight} in flight, ${p.succeeded} succeeded, ${p.failed} failed, ${p.skipped} skipped, ${p.passed_over} passed over`;
}

export async function backfillPanel(panel, job, signal) {
  const select = (id, options, value) =>
    h('select', { id }, options.map(([v, text]) => h('option', { value: v, text, selected: v === value })));
  const now = new Date();
  const from = h('input', { type: 'datetime-local', required: true, value: localValue(new Date(now - 7 * 86_400_000)) });
  const to = h('input', { type: 'datetime-local', required: true, value: localValue(now) });
  const slots = select('bf-slots', [
    ['missing', 'missing: slots without a ledger row'],
    ['failed', 'failed: failed slots, again'],
    ['all', 'all: every slot not in flight, succeeded ones again'],
  ], 'missing');
  const order = select('bf-order', [['oldest_first', 'oldest first'], ['newest_first', 'newest first']], 'oldest_first');
  const rate = h('input', { type: 'number', min: '0.01', max: '1000', step: 'any', value: '10' });
  const concurrency = h('input', { type: 'number', min: '1', max: '100', step: '1', value: '5' });
  const overlap = select('bf-overlap', [['', `the job’s (${job.overlap || 'allow'})`], ['allow', 'allow'], ['forbid', 'forbid'], ['replace', 'replace']], '');
  const summary = h('div', { class: 'error-host' });
  const preview = h('div', { id: 'bf-preview', 'aria-live': 'polite' });
  const start = h('button', { type: 'submit', id: 'bf-start', text: 'Start', disabled: true });
  const list = h('div', { id: 'bf-list' });
  let timer = null;

  const body = (dryRun) => {
    const b = {
      from: toInstant(from.value),
      to: toInstant(to.value),
      slots: slots.value,
      order: order.value,
      rate_per_second: Number(rate.value),
      max_concurrency: Number(concurrency.value),
    };
    if (overlap.value) b.overlap = overlap.value;
    if (dryRun) b.dry_run = true;
    return b;
  };
  const clearErrors = () => {
    for (const el of form.querySelectorAll('.field-error')) el.hidden = true;
    for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
    fill(summary);
  };
  const refused = (e) => {
    if (e?.fieldErrors?.length) showFieldErrors(form, e.fieldErrors, summary)?.focus();
    showError(e);
  };

  // A changed request needs a new preview before it starts.
  const stale = () => {
    start.disabled = true;
    fill(preview);
  };

  const previewButton = h('button', {
    type: 'button',
    id: 'bf-preview-button',
    class: 'secondary',
    text: 'Preview',
    onclick: async () => {
      try {
        clearErrors();
        const plan = await post(`/v1/jobs/${seg(job.id)}/backfill`, body(true));
        const shown = plan.slots.slice(0, PREVIEW_SHOWN);
        fill(
          preview,
          h('p', { id: 'bf-preview-count', text: `${plan.would_run} of the ${plan.planned} slots in the range would run.` }),
          shown.length
            ? h('ol', { class: 'bf-slots', 'aria-label': 'The first slots it would run' }, shown.map((at) => h('li', {}, timeEl(at))))
            : null,
          plan.would_run > shown.length ? h('p', { class: 'muted', text: `and ${plan.would_run - shown.length} more.` }) : null,
        );
        start.disabled = plan.would_run === 0;
      } catch (e) {
        refused(e);
      }
    },
  });

  const form = h(
    'form',
    {
      id: 'bf-form',
      class: 'panel',
      novalidate: true,
      onsubmit: async (ev) => {
        ev.preventDefault();
        start.disabled = true;
        clearErrors();
        try {
          const b = await post(`/v1/jobs/${seg(job.id)}/backfill`, body(false));
          showNotice(`Backfill started: ${b.progress.planned} slots planned.`);
          stale();
          await load();
        } catch (e) {
          refused(e);
          start.disabled = false;
        }
      },
    },
    h('h3', { text: 'Run past slots' }),
    h('p', { class: 'hint', text: 'Each slot runs under its own execution id with trigger backfill, at most the rate and concurrency below, so a catch-up does not flood the receiver. One running backfill per job; at most 10,000 slots; the end not in the future.' }),
    summary,
    h(
      'div',
      { class: 'row' },
      field({ id: 'bf-from', label: 'From (your time zone)', path: 'from', control: from }),
      field({ id: 'bf-to', label: 'To (not in the future)', path: 'to', control: to }),
    ),
    h(
      'div',
      { class: 'row' },
      field({ id: 'bf-slots', label: 'Slots', path: 'slots', control: slots }),
      field({ id: 'bf-order', label: 'Order', path: 'order', control: order }),
      field({ id: 'bf-overlap', label: 'Overlap', path: 'overlap', control: overlap }),
    ),
    h(
      'div',
      { class: 'row' },
      field({ id: 'bf-rate', label: 'Slots started per second', path: 'rate_per_second', control: rate, hint: '0.01 to 1000' }),
      field({ id: 'bf-concurrency', label: 'Runs in flight at most', path: 'max_concurrency', control: concurrency, hint: '1 to 100' }),
    ),
    h('div', { class: 'actions' }, previewButton, start),
    preview,
  );
  for (const control of [from, to, slots, order, rate, concurrency, overlap]) control.addEventListener('input', stale);

  function row(b) {
    const cancel =
      b.state === 'running'
        ? h('button', {
            type: 'button',
            class: 'danger bf-cancel',
            text: 'Cancel',
            onclick: async (ev) => {
              if (!window.confirm('Cancel this backfill? No further slot starts; runs already started finish.')) return;
              ev.currentTarget.disabled = true;
              try {
                await post(`/v1/backfills/${seg(b.id)}/cancel`);
                showNotice('Backfill cancelled: no further slot starts.');
                await load();
              } catch (e) {
                showError(e);
              }
            },
          })
        : null;
    return h(
      'tr',
      { dataset: { id: b.id, state: b.state } },
      h('td', {}, timeEl(b.created_at), h('div', { class: 'muted', text: `by ${b.created_by}` })),
      h('td', {}, timeEl(b.from), ' – ', timeEl(b.to)),
      h('td', { text: `${b.slots}, ${b.order.replace('_', ' ')}, ${b.rate_per_second}/s, ${b.max_concurrency} at once${b.overlap ? `, overlap ${b.overlap}` : ''}` }),
      h('td', {}, badge(STATES[b.state] || 'pending', b.state)),
      h('td', { class: 'bf-progress', text: progressText(b.progress) }),
      h('td', {}, cancel),
    );
  }

  async function load() {
    const r = await get(`/v1/backfills${qs({ job: job.id, limit: 20 })}`, { signal });
    fill(
      list,
      r.items.length
        ? h(
            'table',
            { id: 'bf-table' },
            h('caption', { text: 'Backfills of this job, newest first' }),
            h('thead', {}, h('tr', {}, ['Made', 'Range', 'Request', 'State', 'Progress', ''].map((t) => h('th', { scope: 'col', text: t })))),
            h('tbody', {}, r.items.map(row)),
          )
        : h('p', { class: 'muted', id: 'bf-none', text: 'No backfill of this job yet.' }),
    );
    // Followed only while one runs, and only while the tab is visible.
    clearInterval(timer);
    if (r.items.some((b) => b.state === 'running')) {
      timer = setInterval(() => document.visibilityState === 'visible' && load().catch(() => {}), REFRESH_MS);
    }
  }
  signal.addEventListener('abort', () => clearInterval(timer));

  fill(panel, form, h('h3', { text: 'Backfills' }), list);
  await load().catch((e) => {
    if (e?.name !== 'AbortError') showError(e);
  });
}
