// Alerts: the incidents the cluster opened (GET /v1/alerts: the open ones
// first, then the latest resolved), each with its summary, its job, its
// slots and the notices sent; the rules that watch jobs (GET, POST, PATCH
// and DELETE /v1/alert-rules: a create form whose threshold field follows
// the condition, a channel picker, enable/disable, delete); and the
// channels notices go to (GET, POST and DELETE /v1/alert-channels). A
// channel's address is typed into a password field, sent once and never
// shown again: the server keeps it sealed and lists it as scheme and host.

import { ApiError, get, post, qs, request, seg } from './api.js';
import { duration, field, fill, h, instant, showError, showFieldErrors, showNotice, timeEl } from './dom.js';
import { badge } from './status.js';

const RESOLVED_SHOWN = 20;
const OPEN_SHOWN = 100;
const SLOTS_SHOWN = 5;

/** Each condition: its words, and its threshold's label, hint and bounds (none: it takes none). */
export const CONDITIONS = {
  failed: { label: 'an execution fails', threshold: null },
  consecutive_failures: {
    label: 'executions fail several times in a row',
    threshold: { label: 'Failures in a row', hint: 'From 2 to 1,000.', min: 2, max: 1000 },
  },
  missed: { label: 'a slot is missed (misfire, overlap, unreadable calendar)', threshold: null },
  late: {
    label: 'a slot starts late',
    threshold: { label: 'Late by more than (milliseconds)', hint: 'From 1 to 86,400,000 (a day); 60,000 is a minute.', min: 1, max: 86_400_000 },
  },
  silent: {
    label: 'no execution succeeds for a while',
    threshold: {
      label: 'Without a success for (milliseconds)',
      hint: 'From 1,000 (a second) to 7,776,000,000 (90 days); 3,600,000 is an hour.',
      min: 1000,
      max: 7_776_000_000,
    },
  },
};

/** What a rule fires on, in words. */
export function conditionText(condition, threshold) {
  switch (condition) {
    case 'failed':
      return 'an execution fails';
    case 'consecutive_failures':
      return `${threshold} executions in a row fail`;
    case 'missed':
      return 'a slot is missed';
    case 'late':
      return `a slot starts more than ${duration(threshold)} late`;
    case 'silent':
      return `no execution succeeds for ${duration(threshold)}`;
    default:
      return String(condition);
  }
}

const NOTICE_STATES = {
  pending: ['pending', 'pending'],
  delivered: ['ok', 'delivered'],
  failed: ['failed', 'failed (gave up)'],
};

function noticeItem(n, channels) {
  const [kind, word] = NOTICE_STATES[n.state] || ['pending', n.state];
  const channel = channels.get(n.channel_id);
  const parts = [`${n.attempts} attempt${n.attempts === 1 ? '' : 's'}`];
  if (n.last_status) parts.push(`last answer HTTP ${n.last_status}`);
  if (n.last_error) parts.push(`last error: ${n.last_error}`);
  return h(
    'li',
    { class: 'notice', dataset: { kind: n.kind, state: n.state } },
    `${n.kind === 'resolved' ? 'Resolved' : 'Firing'} notice to `,
    h('strong', { text: channel ? channel.name : n.channel_id }),
    channel ? ` (${channel.kind})` : '',
    ': ',
    badge(kind, word),
    n.delivered_at ? [' at ', timeEl(n.delivered_at)] : '',
    n.state === 'pending' && n.next_attempt_at ? [', next attempt at ', timeEl(n.next_attempt_at)] : '',
    ` · ${parts.join(' · ')}`,
  );
}

function slotItem(incident, s) {
  const http = s.http_status && !String(s.error || '').includes(`HTTP ${s.http_status}`) ? `HTTP ${s.http_status}` : null;
  const late = incident.condition === 'late' && s.lateness_ms !== null && s.lateness_ms !== undefined ? `started ${duration(s.lateness_ms)} late` : null;
  const text = [s.status, s.reason, http, s.error, late].filter(Boolean).join(' · ');
  return h(
    'li',
    {},
    h('a', { href: `#/jobs/${incident.job_id}/slots/${encodeURIComponent(s.scheduled_at)}` }, h('time', { datetime: s.scheduled_at }, instant(s.scheduled_at))),
    ` ${text}`,
  );
}

/** One incident: open or resolved, its rule and job, its summary, slots and notices. */
export function incidentItem(incident, channels = new Map(), { showJob = true } = {}) {
  const open = !incident.resolved_at;
  const tid = `incident-${incident.id}-title`;
  const slots = Array.isArray(incident.slots) ? incident.slots : [];
  return h(
    'li',
    { class: `incident ${open ? 'incident-open' : 'incident-resolved'}`, dataset: { incident: incident.id, open: String(open), job: incident.job_id }, 'aria-labelledby': tid },
    h(
      'div',
      { class: 'version-head' },
      open ? badge('failed', 'open') : badge('ok', 'resolved'),
      h('h3', { id: tid }, `${incident.rule_name}: ${CONDITIONS[incident.condition]?.label ?? incident.condition}`),
    ),
    h('p', { class: 'incident-summary', text: incident.summary }),
    h(
      'dl',
      { class: 'props' },
      showJob ? [h('dt', { text: 'Job' }), h('dd', {}, h('a', { href: `#/jobs/${incident.job_id}`, class: 'incident-job', text: incident.job_name || incident.job_id }))] : null,
      h('dt', { text: 'Opened' }),
      h('dd', {}, timeEl(incident.opened_at), incident.opened_by ? ` by ${incident.opened_by}` : ''),
      open ? null : [h('dt', { text: 'Resolved' }), h('dd', {}, timeEl(incident.resolved_at), incident.resolution ? `: ${incident.resolution}` : '')],
      slots.length
        ? [
            h('dt', { text: 'Slots' }),
            h(
              'dd',
              {},
              h('ul', { class: 'incident-slots' }, slots.slice(0, SLOTS_SHOWN).map((s) => slotItem(incident, s))),
              slots.length > SLOTS_SHOWN ? h('span', { class: 'muted', text: `and ${slots.length - SLOTS_SHOWN} more` }) : null,
            ),
          ]
        : null,
      h('dt', { text: 'Notices' }),
      h(
        'dd',
        {},
        incident.notifications?.length
          ? h('ul', { class: 'notices' }, incident.notifications.map((n) => noticeItem(n, channels)))
          : h('span', { class: 'muted', text: 'none sent yet' }),
      ),
    ),
  );
}

/** Channels by id, for telling notices' channels by name. */
export const channelMap = (list) => new Map((list?.items || []).map((c) => [c.id, c]));

// ---------------------------------------------------------------- page

/** `a, b c` into ids (as typed: the API names a wrong one). */
const idList = (text) =>
  String(text || '')
    .split(/[\s,]+/)
    .filter(Boolean);

function num(v) {
  const t = String(v ?? '').trim();
  if (t === '') return undefined;
  const n = Number(t);
  return Number.isFinite(n) ? n : t;
}

/** The error of a form's submit: field errors next to their fields, the rest in the error region. */
function refused(form, e, what) {
  if (e instanceof ApiError && e.status === 422 && e.fieldErrors.length) {
    showError(`The server refused the ${what}: ${e.fieldErrors.length} field(s) to fix, marked in the form.`);
    showFieldErrors(form, e.fieldErrors, form.querySelector('.form-errors')).focus();
  } else showError(e);
}

function clearFieldErrors(form) {
  form.querySelector('.form-errors').replaceChildren();
  for (const el of form.querySelectorAll('.field-error')) el.hidden = true;
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
}

function channelsTable(items, onDelete) {
  return h(
    'table',
    { id: 'alert-channels' },
    h('caption', { text: 'Channels of the token’s namespaces (addresses shown as scheme and host only)' }),
    h('thead', {}, h('tr', {}, ['Name', 'Namespace', 'Kind', 'Address', 'At most', 'Created (UTC)', 'Action'].map((t) => h('th', { scope: 'col', text: t })))),
    h(
      'tbody',
      {},
      items.map((c) =>
        h(
          'tr',
          { dataset: { channel: c.id, name: c.name } },
          h('th', { scope: 'row', text: c.name }),
          h('td', { text: c.namespace }),
          h('td', { text: c.kind }),
          h('td', { class: 'mono', text: c.url }),
          h('td', { class: 'num', text: `${c.max_per_minute} a minute` }),
          h('td', {}, timeEl(c.created_at)),
          h('td', {}, h('button', { type: 'button', class: 'danger delete-channel', text: 'Delete', 'aria-label': `Delete the channel ${c.name}`, onclick: (ev) => onDelete(c, ev.currentTarget) })),
        ),
      ),
    ),
  );
}

function watchesCell(rule) {
  if (rule.selector) return h('span', {}, 'jobs labelled ', h('code', { text: rule.selector }));
  const ids = rule.jobs || [];
  return h(
    'span',
    {},
    ids.slice(0, 5).map((id, i) => [i ? ', ' : '', h('a', { href: `#/jobs/${id}`, class: 'mono', text: id })]),
    ids.length > 5 ? ` and ${ids.length - 5} more` : '',
  );
}

function rulesTable(items, channels, { onToggle, onDelete }) {
  return h(
    'table',
    { id: 'alert-rules' },
    h('caption', { text: 'Rules of the token’s namespaces' }),
    h('thead', {}, h('tr', {}, ['Name', 'Namespace', 'Watches', 'Fires when', 'Sends to', 'State', 'Actions'].map((t) => h('th', { scope: 'col', text: t })))),
    h(
      'tbody',
      {},
      items.map((r) =>
        h(
          'tr',
          { dataset: { rule: r.id, name: r.name, enabled: String(r.enabled) } },
          h('th', { scope: 'row', text: r.name }),
          h('td', { text: r.namespace }),
          h('td', {}, watchesCell(r)),
          h('td', { class: 'rule-condition', text: conditionText(r.condition, r.threshold) }),
          h('td', { class: 'rule-channels', text: r.channels.map((id) => channels.get(id)?.name || id).join(', ') }),
          h('td', {}, r.enabled ? badge('ok', 'enabled') : badge('skipped', 'disabled')),
          h(
            'td',
            {},
            h(
              'div',
              { class: 'actions' },
              h('button', {
                type: 'button',
                class: 'secondary toggle-rule',
                text: r.enabled ? 'Disable' : 'Enable',
                'aria-label': `${r.enabled ? 'Disable' : 'Enable'} the rule ${r.name}`,
                onclick: (ev) => onToggle(r, ev.currentTarget),
              }),
              h('button', { type: 'button', class: 'danger delete-rule', text: 'Delete', 'aria-label': `Delete the rule ${r.name}`, onclick: (ev) => onDelete(r, ev.currentTarget) }),
            ),
          ),
        ),
      ),
    ),
  );
}

function channelForm(onCreated) {
  const name = h('input', { autocomplete: 'off', spellcheck: 'false', maxlength: '200' });
  const kind = h('select', {}, h('option', { value: 'webhook', text: 'webhook (JSON, signed with the namespace’s signing keys)' }), h('option', { value: 'slack', text: 'Slack (incoming webhook)' }));
  // A password field: the address (often a secret itself) is not shown as typed, and never shown back.
  const url = h('input', { type: 'password', autocomplete: 'off', spellcheck: 'false', autocapitalize: 'off' });
  const rate = h('input', { inputmode: 'numeric', placeholder: '30' });
  const namespace = h('input', { spellcheck: 'false', placeholder: 'the token’s namespace' });
  const button = h('button', { type: 'submit', text: 'Create channel' });
  const form = h(
    'form',
    { class: 'panel', id: 'channel-form', 'aria-labelledby': 'channel-form-title', novalidate: true },
    h('h3', { id: 'channel-form-title', text: 'New channel' }),
    h('div', { class: 'form-errors' }),
    h(
      'div',
      { class: 'grid-form' },
      field({ id: 'f-ch-name', label: 'Name', path: 'name', control: name }),
      field({ id: 'f-ch-kind', label: 'Kind', path: 'kind', control: kind }),
      field({ id: 'f-ch-url', label: 'Address (URL)', path: 'url', control: url, hint: 'Not shown as you type it, nor ever again: the server keeps it sealed and lists it as its scheme and host.' }),
      field({ id: 'f-ch-rate', label: 'At most, notices a minute', path: 'max_per_minute', control: rate, hint: 'From 1 to 600; 30 when empty. More wait their turn.' }),
      field({ id: 'f-ch-namespace', label: 'Namespace', path: 'namespace', control: namespace, hint: 'Empty: the token’s only namespace, or default.' }),
    ),
    button,
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearFieldErrors(form);
    showError(null);
    showNotice('');
    const body = {
      name: name.value.trim(),
      kind: kind.value,
      url: url.value.trim(),
      max_per_minute: num(rate.value),
      namespace: namespace.value.trim() || undefined,
    };
    button.disabled = true;
    try {
      const made = await post('/v1/alert-channels', body);
      form.reset(); // the address goes with it: nothing keeps it
      showNotice(`Created the channel ${made.name} (${made.kind}, ${made.url}).`);
      await onCreated(made);
    } catch (e) {
      refused(form, e, 'channel');
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

function ruleForm(prefillJobs, onCreated) {
  const name = h('input', { autocomplete: 'off', spellcheck: 'false', maxlength: '200' });
  const namespace = h('input', { spellcheck: 'false', placeholder: 'the token’s namespace' });
  const watch = h('select', {}, h('option', { value: 'jobs', text: 'these jobs (ids)' }), h('option', { value: 'selector', text: 'the jobs with these labels' }));
  const jobs = h('input', { spellcheck: 'false', value: prefillJobs, placeholder: 'job ids, separated by commas' });
  const selector = h('input', { spellcheck: 'false', placeholder: 'team=payments,tier!=batch' });
  const condition = h('select', {}, Object.entries(CONDITIONS).map(([v, c]) => h('option', { value: v, text: `${v.replaceAll('_', ' ')}: ${c.label}` })));
  const threshold = h('input', { inputmode: 'numeric' });
  const enabled = h('input', { type: 'checkbox', checked: true });
  const jobsField = field({ id: 'f-rule-jobs', label: 'Job ids', path: 'jobs', control: jobs, hint: 'One or more (at most 1,000), separated by commas or spaces.' });
  const selectorField = field({ id: 'f-rule-selector', label: 'Label selector', path: 'selector', control: selector, hint: 'Every job of the namespace whose labels match, now and later.' });
  const thresholdField = field({ id: 'f-rule-threshold', label: 'Threshold', path: 'threshold', control: threshold, hint: ' ' });
  const channelsHost = h('div', { class: 'field', id: 'f-rule-channels' });
  const button = h('button', { type: 'submit', text: 'Create rule' });
  const form = h(
    'form',
    { class: 'panel', id: 'rule-form', 'aria-labelledby': 'rule-form-title', novalidate: true },
    h('h3', { id: 'rule-form-title', text: 'New rule' }),
    h('div', { class: 'form-errors' }),
    h(
      'div',
      { class: 'grid-form' },
      field({ id: 'f-rule-name', label: 'Name', path: 'name', control: name }),
      field({ id: 'f-rule-namespace', label: 'Namespace', path: 'namespace', control: namespace, hint: 'Empty: the token’s only namespace, or default.' }),
      field({ id: 'f-rule-watch', label: 'Watch', path: 'watch', control: watch }),
      jobsField,
      selectorField,
      field({ id: 'f-rule-condition', label: 'Fires when', path: 'condition', control: condition }),
      thresholdField,
    ),
    channelsHost,
    field({ id: 'f-rule-enabled', label: 'Enabled (evaluated from now on)', path: 'enabled', control: enabled }),
    button,
  );
  const sync = () => {
    jobsField.hidden = watch.value !== 'jobs';
    selectorField.hidden = watch.value !== 'selector';
    const t = CONDITIONS[condition.value].threshold;
    thresholdField.hidden = !t;
    if (t) {
      thresholdField.querySelector('label').textContent = t.label;
      thresholdField.querySelector('.hint').textContent = t.hint;
      threshold.min = String(t.min);
      threshold.max = String(t.max);
    }
  };
  watch.addEventListener('change', sync);
  condition.addEventListener('change', sync);
  sync();

  /** The channel picker: one checkbox per channel, the ticked ones kept across a reload. */
  function setChannels(items) {
    const ticked = new Set([...channelsHost.querySelectorAll('input:checked')].map((i) => i.value));
    const boxes = items.map((c, i) => {
      const box = h('input', { type: 'checkbox', id: `f-rule-channel-${i}`, value: c.id, checked: ticked.has(c.id), 'aria-describedby': 'f-rule-channels-error' });
      return h('div', { class: 'check' }, box, ' ', h('label', { for: box.id }, c.name, h('span', { class: 'muted', text: ` (${c.kind}, ${c.namespace})` })));
    });
    // The 422 of `channels` goes next to the boxes; with none, to the summary only.
    if (boxes.length) channelsHost.dataset.field = 'channels';
    else delete channelsHost.dataset.field;
    fill(
      channelsHost,
      h(
        'fieldset',
        {},
        h('legend', { text: 'Send to' }),
        boxes.length ? boxes : h('p', { class: 'note', id: 'f-rule-no-channel', text: 'No channel yet: create one below first.' }),
        h('p', { class: 'field-error', id: 'f-rule-channels-error', hidden: true }),
      ),
    );
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearFieldErrors(form);
    showError(null);
    showNotice('');
    const body = {
      name: name.value.trim(),
      namespace: namespace.value.trim() || undefined,
      condition: condition.value,
      threshold: CONDITIONS[condition.value].threshold ? num(threshold.value) : undefined,
      channels: [...channelsHost.querySelectorAll('input:checked')].map((i) => i.value),
      enabled: enabled.checked,
    };
    if (watch.value === 'jobs') body.jobs = idList(jobs.value);
    else body.selector = selector.value.trim();
    button.disabled = true;
    try {
      const made = await post('/v1/alert-rules', body);
      name.value = '';
      showNotice(`Created the rule ${made.name}: it fires when ${conditionText(made.condition, made.threshold)}.`);
      await onCreated(made);
    } catch (e) {
      refused(form, e, 'rule');
    } finally {
      button.disabled = false;
    }
  });
  return { form, setChannels };
}

export async function render(main, { query, signal }) {
  const incidentsHost = h('div', { 'aria-busy': 'true', id: 'incidents-host' }, h('p', { class: 'muted', text: 'Loading incidents…' }));
  const rulesHost = h('div', { 'aria-busy': 'true', id: 'rules-host' }, h('p', { class: 'muted', text: 'Loading rules…' }));
  const channelsHost = h('div', { 'aria-busy': 'true', id: 'channels-host' }, h('p', { class: 'muted', text: 'Loading channels…' }));
  const rules = ruleForm(query.get('job') || '', () => load());
  const channelsForm = channelForm(() => load());
  const refresh = h('button', { type: 'button', class: 'secondary', id: 'alerts-refresh', text: 'Refresh', onclick: () => load().catch(showError) });

  fill(
    main,
    h('div', { class: 'title-row' }, h('h1', { text: 'Alerts' }), refresh),
    h(
      'p',
      {},
      'The cluster watches jobs with rules: when a rule’s condition holds for a job it opens an incident and sends a notice to each of the rule’s channels; when it no longer holds, the incident is resolved and a second notice says so.',
    ),
    h('section', { 'aria-labelledby': 'incidents-title' }, h('h2', { id: 'incidents-title', text: 'Incidents' }), incidentsHost),
    h('section', { 'aria-labelledby': 'rules-title' }, h('h2', { id: 'rules-title', text: 'Rules' }), rulesHost, rules.form),
    h('section', { 'aria-labelledby': 'channels-title' }, h('h2', { id: 'channels-title', text: 'Channels' }), channelsHost, channelsForm),
  );

  /** A part of the page that could not be loaded says so where it would be. */
  const failed = (host, what, e) => {
    host.removeAttribute('aria-busy');
    const missing = e instanceof ApiError && e.unavailable;
    fill(host, h('p', { class: missing ? 'note' : 'msg msg-error', text: missing ? `This server has no ${what}.` : `The ${what} could not be loaded: ${e.message}` }));
  };
  const settle = (p) => p.then((v) => ({ v }), (e) => ({ e }));

  async function load() {
    const [open, resolved, ruleList, channelList] = await Promise.all([
      settle(get(`/v1/alerts${qs({ open: 'true', limit: OPEN_SHOWN })}`, { signal })),
      settle(get(`/v1/alerts${qs({ open: 'false', limit: RESOLVED_SHOWN })}`, { signal })),
      settle(get('/v1/alert-rules', { signal })),
      settle(get('/v1/alert-channels', { signal })),
    ]);
    if (signal.aborted) return;
    const channels = channelMap(channelList.v);

    if (open.e || resolved.e) failed(incidentsHost, 'incidents', open.e || resolved.e);
    else {
      incidentsHost.removeAttribute('aria-busy');
      const openItems = open.v.items;
      const resolvedItems = resolved.v.items;
      fill(
        incidentsHost,
        h(
          'p',
          { id: 'incidents-count', class: openItems.length ? '' : 'muted' },
          openItems.length ? `${openItems.length} open incident${openItems.length === 1 ? '' : 's'}, newest first; then the latest resolved ones.` : 'No open incident. The latest resolved ones follow.',
        ),
        openItems.length || resolvedItems.length
          ? h('ol', { class: 'incidents', id: 'alert-incidents', 'aria-label': 'Incidents, open first' }, [...openItems, ...resolvedItems].map((i) => incidentItem(i, channels)))
          : h('p', { class: 'note', id: 'incidents-none', text: 'No incident yet.' }),
      );
    }

    if (channelList.e) failed(channelsHost, 'alert channels', channelList.e);
    else {
      channelsHost.removeAttribute('aria-busy');
      const items = channelList.v.items;
      fill(channelsHost, items.length ? channelsTable(items, deleteChannel) : h('p', { class: 'note', id: 'channels-none', text: 'No channel: notices have nowhere to go.' }));
      rules.setChannels(items);
    }

    if (ruleList.e) failed(rulesHost, 'alert rules', ruleList.e);
    else {
      rulesHost.removeAttribute('aria-busy');
      const items = ruleList.v.items;
      fill(rulesHost, items.length ? rulesTable(items, channels, { onToggle: toggleRule, onDelete: deleteRule }) : h('p', { class: 'note', id: 'rules-none', text: 'No rule: nothing is watched.' }));
    }
  }

  async function change(button, what, fn) {
    button.disabled = true;
    showError(null);
    showNotice('');
    try {
      await fn();
      showNotice(what);
      await load();
    } catch (e) {
      showError(e);
      button.disabled = false;
    }
  }

  function toggleRule(r, button) {
    return change(button, `${r.enabled ? 'Disabled' : 'Enabled'} the rule ${r.name}.`, () => request('PATCH', `/v1/alert-rules/${seg(r.id)}`, { body: { enabled: !r.enabled } }));
  }

  function deleteRule(r, button) {
    if (!window.confirm(`Delete the alert rule “${r.name}”? Its incidents go with it; its jobs are no longer watched.`)) return;
    return change(button, `Deleted the rule ${r.name}.`, () => request('DELETE', `/v1/alert-rules/${seg(r.id)}`));
  }

  function deleteChannel(c, button) {
    if (!window.confirm(`Delete the alert channel “${c.name}”? Nothing is sent to it any more.`)) return;
    return change(button, `Deleted the channel ${c.name}.`, () => request('DELETE', `/v1/alert-channels/${seg(c.id)}`));
  }

  await load();
}
