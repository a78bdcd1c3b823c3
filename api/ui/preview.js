// Schedule preview: expressions (or an interval), a time zone and a DST
// rule in, the fire times out (POST /v1/schedules/preview), with wall time,
// offset and daylight-saving marks. Nothing is stored.

import { ApiError, post } from './api.js';
import { field, fill, h, showError, showFieldErrors } from './dom.js';
import { fireTable } from './job.js';
import { DST_MISSING, DST_REPEATED, cronSchedule } from './jobs.js';

export async function render(main, { query }) {
  const kind = h('select', { name: 'schedule.kind' }, [['cron', 'cron expression'], ['interval', 'fixed interval']].map(([v, l]) => h('option', { value: v, text: l })));
  const expr = h('textarea', { name: 'schedule.expr', rows: 2, spellcheck: 'false' });
  expr.value = query.get('expr') || '30 2 * * *';
  const choices = (name, options) => h('select', { name }, options.map(([v, l]) => h('option', { value: v, text: l })));
  const repeated = choices('schedule.dst.repeated', DST_REPEATED);
  const missing = choices('schedule.dst.missing', DST_MISSING);
  const zones = typeof Intl.supportedValuesOf === 'function' ? Intl.supportedValuesOf('timeZone') : [];
  const tz = h('input', { name: 'schedule.timezone', value: query.get('timezone') || 'Europe/Berlin', list: 'preview-zones', spellcheck: 'false' });
  const every = h('input', { name: 'schedule.every_ms', inputmode: 'numeric', value: '60000' });
  const start = h('input', { name: 'schedule.start_at', placeholder: 'RFC 3339 (default: from)' });
  const from = h('input', { name: 'from', value: query.get('from') || '', placeholder: 'RFC 3339 (default: now)' });
  const count = h('input', { name: 'count', inputmode: 'numeric', value: '10' });
  const exprField = field({ id: 'p-expr', label: 'Cron expressions', path: 'schedule.expr', control: expr, hint: '5 fields, or 6 with seconds first; several, one a line.' });
  const cronPart = h(
    'div',
    {},
    h(
      'div',
      { class: 'row' },
      exprField,
      field({ id: 'p-timezone', label: 'Time zone', path: 'schedule.timezone', control: tz, hint: 'An IANA zone.' }),
    ),
    h(
      'div',
      { class: 'row' },
      field({ id: 'p-dst-repeated', label: 'A wall time the clocks repeat fires', path: 'schedule.dst.repeated', control: repeated }),
      field({ id: 'p-dst-missing', label: 'A wall time the clocks skip fires', path: 'schedule.dst.missing', control: missing }),
    ),
  );
  const intervalPart = h(
    'div',
    { class: 'row', hidden: true },
    field({ id: 'p-every', label: 'Every (ms)', path: 'schedule.every_ms', control: every }),
    field({ id: 'p-start', label: 'Anchor (start at)', path: 'schedule.start_at', control: start }),
  );
  kind.addEventListener('change', () => {
    cronPart.hidden = kind.value !== 'cron';
    intervalPart.hidden = kind.value !== 'interval';
  });
  const errors = h('div');
  const out = h('div', { id: 'preview-result' });
  const form = h(
    'form',
    { class: 'panel', novalidate: true, 'aria-label': 'Schedule' },
    errors,
    h('div', { class: 'row' }, field({ id: 'p-kind', label: 'Kind', path: 'schedule.kind', control: kind })),
    cronPart,
    intervalPart,
    h(
      'div',
      { class: 'row' },
      field({ id: 'p-from', label: 'From', path: 'from', control: from }),
      field({ id: 'p-count', label: 'How many', path: 'count', control: count }),
      h('div', { class: 'field' }, h('button', { type: 'submit', text: 'Preview' })),
    ),
    h('datalist', { id: 'preview-zones' }, zones.map((z) => h('option', { value: z }))),
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    fill(errors, );
    const schedule =
      kind.value === 'cron'
        ? cronSchedule(expr.value, tz.value.trim(), repeated.value, missing.value)
        : { kind: 'interval', every_ms: Number(every.value) || every.value, start_at: start.value.trim() || undefined };
    if (schedule.kind === 'cron') exprField.dataset.field = schedule.exprs ? 'schedule.exprs' : 'schedule.expr';
    const n = count.value.trim();
    const body = { schedule, count: n === '' ? undefined : Number(n) || n, from: from.value.trim() || undefined };
    try {
      const r = await post('/v1/schedules/preview', body);
      showFieldErrors(form, [], h('div'));
      const marks = r.fire_times.filter((f) => f.dst || f.dst_shift).length;
      fill(out, 
        h('p', { role: 'status', text: `${r.fire_times.length} fire times from ${r.from}${marks ? `; ${marks} bent or marked by daylight saving time` : ''}.` }),
        r.note ? h('p', { class: 'note', text: r.note }) : null,
        fireTable(r.fire_times, 'Fire times'),
      );
    } catch (e) {
      if (e instanceof ApiError && e.status === 422 && e.fieldErrors.length) {
        fill(out, );
        showFieldErrors(form, e.fieldErrors, errors).focus();
      } else showError(e);
    }
  });
  fill(main, 
    h('h1', { text: 'Schedule preview' }),
    h('p', { class: 'muted', text: 'When would a schedule fire? Daylight saving time is marked: by default a wall time the clocks skip fires at the end of the gap, and one that happens twice fires at its first occurrence; a cron schedule may choose otherwise.' }),
    form,
    out,
  );
}
