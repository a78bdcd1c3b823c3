// Create a job (POST /v1/jobs) or edit one (PUT /v1/jobs/{id} with the
// whole definition and If-Match of the version shown: a change made by
// someone else meanwhile is a 412, never silently overwritten), with an
// optional reason for the audit log (X-Audit-Reason). A key is set once:
// at creation, or on a job that has none; a set key is shown read-only.
// The API validates; its 422 field errors appear next to the fields they
// name (a key another live job of the namespace has is a 409, said there
// too).

import { ApiError, request, seg } from './api.js';
import { field, fill, h, showError, showFieldErrors } from './dom.js';
import { DST_MISSING, DST_REPEATED, cronExprs, cronSchedule, jobRef } from './jobs.js';

const SECRET = '***';

const lines = (obj, sep) =>
  Object.entries(obj || {})
    .map(([k, v]) => `${k}${sep}${v}`)
    .join('\n');

/** `Name: value` (or `key=value`) lines into an object; a line without the separator is a name with an empty value. */
function parseLines(text, sep) {
  const out = {};
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line) continue;
    const i = line.indexOf(sep);
    if (i < 0) out[line] = '';
    else out[line.slice(0, i).trim()] = line.slice(i + sep.length).trim();
  }
  return out;
}

/** A number field: a number, or the text as typed so that the API names the field. */
function num(v) {
  const t = String(v ?? '').trim();
  if (t === '') return undefined;
  const n = Number(t);
  return Number.isFinite(n) ? n : t;
}

const text = (v) => {
  const t = String(v ?? '').trim();
  return t === '' ? undefined : t;
};

/** Statuses and classes as the form shows them: `2xx, 204`. */
const patterns = (list) => (list || []).map(String).join(', ');

/**
 * `2xx, 204` into `["2xx", 204]`: numbers as numbers, the rest as typed so
 * that the API names a wrong entry. Empty: undefined (the default);
 * `none`: an empty list.
 */
function statusList(v) {
  const t = String(v ?? '').trim();
  if (t === '') return undefined;
  if (t.toLowerCase() === 'none') return [];
  return t
    .split(/[\s,]+/)
    .filter(Boolean)
    .map((x) => (/^\d+$/.test(x) ? Number(x) : x));
}

export async function render(main, { params, signal, go, setTitle }) {
  const id = params[0];
  let job = null;
  let version = null;
  if (id) {
    const r = await request('GET', `/v1/jobs/${seg(id)}`, { signal });
    job = r.data;
    version = job.version;
    setTitle(`Edit ${job.name}`);
  }
  const s = job?.schedule || { kind: 'cron', expr: '', timezone: 'UTC' };
  const t = job?.target || { kind: 'http', method: 'POST', url: '' };
  const http = t.kind === 'http' ? t : {};
  const sqs = t.kind === 'sqs' ? t : {};
  const success = http.success || {};

  const I = (name, value, attrs = {}) => h('input', { name, value: value ?? '', ...attrs });
  const S = (name, value, options) =>
    h('select', { name }, options.map(([v, l]) => h('option', { value: v, selected: String(value) === v, text: l })));
  const T = (name, value, attrs = {}) => {
    const el = h('textarea', { name, ...attrs });
    el.value = value ?? '';
    return el;
  };
  const F = (id_, label, path, control, hint) => field({ id: `f-${id_}`, label, path, control, hint });

  const scheduleKind = S('schedule.kind', s.kind, [['cron', 'cron expression'], ['interval', 'fixed interval'], ['once', 'once']]);
  const targetKind = S('target.kind', t.kind, [['http', 'HTTP callback'], ['sqs', 'AWS SQS queue']]);
  const zones = typeof Intl.supportedValuesOf === 'function' ? Intl.supportedValuesOf('timeZone') : [];

  const exprField = F(
    'schedule-expr',
    'Cron expressions',
    s.exprs ? 'schedule.exprs' : 'schedule.expr',
    T('schedule.expr', (s.kind === 'cron' ? cronExprs(s) : []).join('\n'), { placeholder: '0 8 * * *', spellcheck: 'false', rows: 2 }),
    '5 fields (minute first) or 6 (seconds first); L, L-n, nW, LW in day of month, nL, n#k in day of week. Several, one a line, fire at any of their times.',
  );
  const cronPart = h(
    'div',
    { class: 'grid-form', dataset: { kind: 'cron' } },
    exprField,
    F('schedule-timezone', 'Time zone', 'schedule.timezone', I('schedule.timezone', s.timezone || 'UTC', { list: 'zones', spellcheck: 'false' }), 'An IANA zone, e.g. Europe/Berlin.'),
    F('schedule-dst-repeated', 'A wall time the clocks repeat fires', 'schedule.dst.repeated', S('schedule.dst.repeated', s.dst?.repeated || 'first', DST_REPEATED)),
    F('schedule-dst-missing', 'A wall time the clocks skip fires', 'schedule.dst.missing', S('schedule.dst.missing', s.dst?.missing || 'shift', DST_MISSING)),
  );
  const intervalPart = h(
    'div',
    { class: 'grid-form', dataset: { kind: 'interval' } },
    F('schedule-every', 'Every (ms)', 'schedule.every_ms', I('schedule.every_ms', s.every_ms, { inputmode: 'numeric' })),
  );
  const oncePart = h(
    'div',
    { class: 'grid-form', dataset: { kind: 'once' } },
    F('schedule-at', 'At (RFC 3339)', 'schedule.at', I('schedule.at', s.at, { placeholder: '2026-12-01T09:00:00Z' })),
  );
  const httpPart = h(
    'div',
    { dataset: { kind: 'http' } },
    h(
      'div',
      { class: 'grid-form' },
      F('target-url', 'URL', 'target.url', I('target.url', http.url, { type: 'url', placeholder: 'https://reports.internal/run', spellcheck: 'false' })),
      F('target-method', 'Method', 'target.method', S('target.method', http.method || 'POST', ['POST', 'GET', 'PUT', 'PATCH', 'DELETE'].map((m) => [m, m]))),
      F('target-timeout', 'Timeout (ms)', 'target.timeout_ms', I('target.timeout_ms', http.timeout_ms, { inputmode: 'numeric', placeholder: '10000' })),
    ),
    F('target-headers', 'Headers', 'target.headers', T('target.headers', lines(http.headers, ': '), { placeholder: 'Content-Type: application/json' }), 'One "Name: value" a line.'),
    F(
      'target-secret-headers',
      'Secret headers',
      'target.secret_headers',
      T('target.secret_headers', lines(http.secret_headers, ': '), { placeholder: 'Authorization: Bearer …' }),
      `One "Name: value" a line; stored and sent, never shown again (${SECRET} keeps the stored value).`,
    ),
    F('target-body', 'Body', 'target.body', T('target.body', http.body)),
    F('target-follow', 'Follow redirects', 'target.follow_redirects', h('input', { type: 'checkbox', name: 'target.follow_redirects', checked: Boolean(http.follow_redirects) })),
    F(
      'target-forward',
      'Send the headers after a redirect to another origin',
      'target.forward_headers_on_redirect',
      h('input', { type: 'checkbox', name: 'target.forward_headers_on_redirect', checked: Boolean(http.forward_headers_on_redirect) }),
      'With follow redirects only. Off: the headers and secret headers are dropped there.',
    ),
    h(
      'div',
      { class: 'grid-form' },
      F(
        'target-success-status',
        'Success statuses',
        'target.success.status',
        I('target.success.status', patterns(success.status), { placeholder: '2xx', spellcheck: 'false' }),
        'Statuses (204) and classes (2xx), comma-separated. Empty: any 2xx.',
      ),
      F(
        'target-success-contains',
        'Success: the body contains',
        'target.success.body_contains',
        I('target.success.body_contains', success.body_contains, { spellcheck: 'false' }),
        'Optional text; at most one of the two body conditions.',
      ),
      F(
        'target-success-matches',
        'Success: the body matches',
        'target.success.body_matches',
        I('target.success.body_matches', success.body_matches, { spellcheck: 'false', placeholder: '"state":\\s*"done"' }),
        'Optional regular expression (no lookaround or backreferences).',
      ),
      F(
        'target-retry-statuses',
        'Retry on statuses',
        'target.retry_statuses',
        I('target.retry_statuses', http.retry_statuses ? patterns(http.retry_statuses) || 'none' : '', { placeholder: '408, 425, 429, 5xx', spellcheck: 'false' }),
        'Comma-separated; empty: 408, 425, 429 and 5xx; none: no status. Another failing status fails at once. Network errors and timeouts are always retried.',
      ),
    ),
  );
  const sqsPart = h(
    'div',
    { dataset: { kind: 'sqs' } },
    h(
      'div',
      { class: 'grid-form' },
      F('target-queue', 'Queue URL', 'target.queue_url', I('target.queue_url', sqs.queue_url, { spellcheck: 'false' })),
      F('target-group', 'Message group id (FIFO)', 'target.message_group_id', I('target.message_group_id', sqs.message_group_id)),
    ),
    h(
      'div',
      { class: 'grid-form' },
      F('target-dedup', 'Deduplication id (FIFO)', 'target.message_deduplication_id', I('target.message_deduplication_id', sqs.message_deduplication_id), 'Empty: the execution id.'),
    ),
    F('target-sqs-body', 'Body', 'target.body', T('target.sqs_body', sqs.body)),
    F(
      'target-attributes',
      'Message attributes',
      'target.message_attributes',
      T('target.message_attributes', lines(sqs.message_attributes, ': ')),
      'One "Name: value" a line, at most 4.',
    ),
  );

  const r = job?.retry || {};
  const c = job?.completion || { mode: 'sync' };
  const completionMode = S('completion.mode', c.mode, [
    ['sync', 'sync: the HTTP answer is the outcome'],
    ['async', 'async: a 202 answer waits for the receiver’s report'],
  ]);
  const completionTimeout = F(
    'completion-timeout',
    'Report timeout (ms)',
    'completion.timeout_ms',
    I('completion.timeout_ms', c.mode === 'async' ? c.timeout_ms : '', { inputmode: 'numeric', placeholder: '3600000' }),
    'How long after its 202 an attempt waits for the report, then fails and is retried. 1 s to 7 days.',
  );
  const afterCompletion = F(
    'after-completion',
    'After completion',
    'after_completion',
    S('after_completion', job?.after_completion || 'keep', [
      ['keep', 'keep the job'],
      ['delete', 'delete the job (its history stays)'],
    ]),
    'One-time jobs: what becomes of the job once its slot succeeded or failed for good.',
  );
  const form = h(
    'form',
    { id: 'job-form', novalidate: true, 'aria-labelledby': 'form-title' },
    h('div', { id: 'form-errors' }),
    h(
      'fieldset',
      {},
      h('legend', { text: 'Job' }),
      h(
        'div',
        { class: 'grid-form' },
        F('name', 'Name', 'name', I('name', job?.name, { required: true, maxlength: 200 })),
        job?.key
          ? F('key', 'Key', 'key', I('key', job.key, { readonly: true, spellcheck: 'false' }), 'Set once; a key never changes.')
          : F(
              'key',
              'Key (optional)',
              'key',
              I('key', '', { maxlength: 63, spellcheck: 'false', autocapitalize: 'off', autocomplete: 'off', placeholder: 'nightly-report' }),
              `${id ? 'This job has none yet. ' : ''}Unique among the namespace’s live jobs; addresses and the API take it instead of the id. a-z, 0-9 and -, at most 63 characters. Set once, never changed.`,
            ),
        id
          ? null
          : F('namespace', 'Namespace', 'namespace', I('namespace', '', { placeholder: 'default' }), 'Empty: the token’s namespace.'),
        // Pausing an existing job is state, changed by Pause/Resume on its page.
        id ? null : F('paused', 'Paused', 'paused', h('input', { type: 'checkbox', name: 'paused', checked: false })),
      ),
      F('labels', 'Labels', 'labels', T('labels', lines(job?.labels, '='), { placeholder: 'team=payments' }), 'One "key=value" a line.'),
    ),
    h(
      'fieldset',
      {},
      h('legend', { text: 'Schedule' }),
      h(
        'div',
        { class: 'grid-form' },
        F('schedule-kind', 'Kind', 'schedule.kind', scheduleKind),
        F('schedule-start', 'Start at (optional)', 'schedule.start_at', I('schedule.start_at', s.start_at, { placeholder: 'RFC 3339' })),
        F('schedule-end', 'End at (optional)', 'schedule.end_at', I('schedule.end_at', s.end_at, { placeholder: 'RFC 3339' })),
        F('schedule-max-runs', 'Max runs (optional)', 'schedule.max_runs', I('schedule.max_runs', s.max_runs, { inputmode: 'numeric' })),
      ),
      cronPart,
      intervalPart,
      oncePart,
    ),
    h('fieldset', {}, h('legend', { text: 'Target' }), F('target-kind', 'Kind', 'target.kind', targetKind), httpPart, sqsPart),
    h(
      'fieldset',
      {},
      h('legend', { text: 'Delivery' }),
      h(
        'div',
        { class: 'grid-form' },
        F('retry-max', 'Max retries', 'retry.max_retries', I('retry.max_retries', r.max_retries, { inputmode: 'numeric', placeholder: 'worker default' })),
        F('retry-base', 'First retry delay (ms)', 'retry.base_delay_ms', I('retry.base_delay_ms', r.base_delay_ms, { inputmode: 'numeric', placeholder: '30000' })),
        F('retry-multiplier', 'Backoff multiplier', 'retry.multiplier', I('retry.multiplier', r.multiplier, { inputmode: 'decimal', placeholder: '2' })),
        F('retry-max-delay', 'Longest delay (ms)', 'retry.max_delay_ms', I('retry.max_delay_ms', r.max_delay_ms, { inputmode: 'numeric', placeholder: '3600000' })),
        F(
          'retry-jitter',
          'Retry jitter',
          'retry.jitter',
          S('retry.jitter', r.jitter || 'equal', [
            ['equal', 'equal: half the backoff and a random share of the rest'],
            ['full', 'full: a random share of the backoff'],
            ['none', 'none: exactly the backoff'],
          ]),
        ),
        F('misfire', 'Missed slots', 'misfire', S('misfire', job?.misfire || 'fire_once', [['fire_once', 'fire once'], ['skip', 'skip'], ['fire_all', 'fire all']])),
        F('misfire-cap', 'Misfire cap', 'misfire_cap', I('misfire_cap', job?.misfire_cap, { inputmode: 'numeric', placeholder: '100' })),
        F('overlap', 'Overlap', 'overlap', S('overlap', job?.overlap || 'allow', [['allow', 'allow'], ['forbid', 'forbid (skip the newer)'], ['replace', 'replace (cancel the older)']])),
        F('jitter', 'Jitter (ms)', 'jitter_ms', I('jitter_ms', job?.jitter_ms, { inputmode: 'numeric', placeholder: '0' })),
        F('calendars', 'Calendars', 'calendars', I('calendars', (job?.calendars || []).join(', '), { placeholder: 'holidays' }), 'Names, comma-separated.'),
      ),
    ),
    h(
      'fieldset',
      {},
      h('legend', { text: 'Completion' }),
      h(
        'div',
        { class: 'grid-form' },
        F('completion-mode', 'Completion', 'completion.mode', completionMode, 'HTTP targets only.'),
        completionTimeout,
        afterCompletion,
      ),
    ),
    h('datalist', { id: 'zones' }, zones.map((z) => h('option', { value: z }))),
    F(
      'audit-reason',
      id ? 'Why this change (optional)' : 'Why this job (optional)',
      'audit_reason',
      I('audit_reason', '', { maxlength: 500, autocomplete: 'off' }),
      'Kept in the audit log and the job’s history (sent as X-Audit-Reason). At most 500 characters.',
    ),
    h(
      'div',
      { class: 'actions' },
      h('button', { type: 'submit', text: id ? `Save (version ${version})` : 'Create job' }),
      h('a', { class: 'button secondary', href: id ? `#/jobs/${jobRef(job)}` : '#/jobs', text: 'Cancel' }),
    ),
  );

  const sync = () => {
    for (const part of [cronPart, intervalPart, oncePart]) part.hidden = part.dataset.kind !== scheduleKind.value;
    for (const part of [httpPart, sqsPart]) part.hidden = part.dataset.kind !== targetKind.value;
    completionTimeout.hidden = completionMode.value !== 'async';
    afterCompletion.hidden = scheduleKind.value !== 'once';
  };
  scheduleKind.addEventListener('change', sync);
  targetKind.addEventListener('change', sync);
  completionMode.addEventListener('change', sync);
  sync();

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const v = (name) => form.elements.namedItem(name)?.value ?? '';
    const checked = (name) => Boolean(form.elements.namedItem(name)?.checked);
    const kind = scheduleKind.value;
    const successRule = () => {
      const rule = {
        status: statusList(v('target.success.status')),
        body_contains: text(v('target.success.body_contains')),
        body_matches: text(v('target.success.body_matches')),
      };
      return Object.values(rule).some((x) => x !== undefined) ? rule : undefined;
    };
    const schedule = { kind };
    if (kind === 'cron') {
      // A job that has a list keeps one, even of one expression.
      const cron = cronSchedule(v('schedule.expr'), text(v('schedule.timezone')), v('schedule.dst.repeated'), v('schedule.dst.missing'), Boolean(s.exprs));
      Object.assign(schedule, cron);
      // The server names `schedule.exprs[i]` or `schedule.expr`: errors go to the one field.
      exprField.dataset.field = cron.exprs ? 'schedule.exprs' : 'schedule.expr';
    }
    if (kind === 'interval') schedule.every_ms = num(v('schedule.every_ms'));
    if (kind === 'once') schedule.at = text(v('schedule.at'));
    Object.assign(schedule, { start_at: text(v('schedule.start_at')), end_at: text(v('schedule.end_at')), max_runs: num(v('schedule.max_runs')) });
    const target =
      targetKind.value === 'http'
        ? {
            kind: 'http',
            url: v('target.url').trim(),
            method: v('target.method'),
            headers: parseLines(v('target.headers'), ':'),
            secret_headers: parseLines(v('target.secret_headers'), ':'),
            body: text(v('target.body')),
            timeout_ms: num(v('target.timeout_ms')),
            follow_redirects: checked('target.follow_redirects'),
            forward_headers_on_redirect: checked('target.forward_headers_on_redirect'),
            success: successRule(),
            retry_statuses: statusList(v('target.retry_statuses')),
          }
        : {
            kind: 'sqs',
            queue_url: v('target.queue_url').trim(),
            body: text(v('target.sqs_body')),
            message_group_id: text(v('target.message_group_id')),
            message_deduplication_id: text(v('target.message_deduplication_id')),
            message_attributes: parseLines(v('target.message_attributes'), ':'),
          };
    const body = {
      name: v('name').trim(),
      schedule,
      target,
      paused: id ? undefined : checked('paused'),
      labels: parseLines(v('labels'), '='),
      misfire: v('misfire'),
      misfire_cap: num(v('misfire_cap')),
      overlap: v('overlap'),
      jitter_ms: num(v('jitter_ms')),
      calendars: v('calendars').split(',').map((c) => c.trim()).filter(Boolean),
    };
    if (!id && text(v('namespace'))) body.namespace = text(v('namespace'));
    if (text(v('key'))) body.key = text(v('key'));
    if (v('completion.mode') === 'async') body.completion = { mode: 'async', timeout_ms: num(v('completion.timeout_ms')) };
    if (kind === 'once' && v('after_completion') !== 'keep') body.after_completion = v('after_completion');
    const retry = {
      max_retries: num(v('retry.max_retries')),
      base_delay_ms: num(v('retry.base_delay_ms')),
      multiplier: num(v('retry.multiplier')),
      max_delay_ms: num(v('retry.max_delay_ms')),
      jitter: v('retry.jitter') === 'equal' ? undefined : v('retry.jitter'),
    };
    if (Object.values(retry).some((x) => x !== undefined)) body.retry = retry;
    // The reason travels as a header, percent-encoded UTF-8.
    const reason = text(v('audit_reason'));
    const why = reason ? { 'x-audit-reason': encodeURIComponent(reason) } : {};
    const button = form.querySelector('button[type="submit"]');
    button.disabled = true;
    try {
      const res = id
        ? await request('PUT', `/v1/jobs/${seg(id)}`, { body, headers: { 'if-match': `"${version}"`, ...why } })
        : await request('POST', '/v1/jobs', { body, headers: why });
      go(`/jobs/${jobRef(res.data)}`, id ? `Saved: ${res.data.name} is now at version ${res.data.version}.` : `Created ${res.data.name}.`);
    } catch (e) {
      if (e instanceof ApiError && e.status === 422 && e.fieldErrors.length) {
        showError(`The server refused the job: ${e.fieldErrors.length} field(s) to fix, marked below.`);
        showFieldErrors(form, e.fieldErrors, form.querySelector('#form-errors')).focus();
      } else if (e instanceof ApiError && e.status === 409 && body.key && !job?.key && /\bkey\b/.test(e.message)) {
        // The key is taken (not a quota's 409): said at its field, like a refused field.
        showError(`The server refused the job: ${e.message}`);
        showFieldErrors(form, [{ field: 'key', message: e.message }], form.querySelector('#form-errors')).focus();
      } else if (e instanceof ApiError && e.status === 412) {
        showError(`Not saved (HTTP 412): ${e.message}. Someone changed this job since you opened it; reload the page to edit the current version.`);
      } else {
        showError(e);
      }
    } finally {
      button.disabled = false;
    }
  });

  fill(main, 
    h('h1', { id: 'form-title', text: id ? `Edit ${job.name}` : 'New job' }),
    id ? h('p', { class: 'muted', text: `Saving replaces the whole definition, if the job is still at version ${version}.` }) : null,
    form,
  );
}
