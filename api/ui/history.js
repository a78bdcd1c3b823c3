// A job's history (GET /v1/jobs/{id}/versions, shown newest first): each
// version with when it took effect, who made it, how (the audited action),
// why, and the paths it changed (before → after); every older version can
// be rolled back to (POST /v1/jobs/{id}/rollback with If-Match of the
// version shown, after a confirmation), which makes a new version. The
// change list is also what the Audit page shows of a job's change.

import { ApiError, get, request, seg } from './api.js';
import { fill, h, showError, timeEl } from './dom.js';
import { jobRef } from './jobs.js';
import { badge } from './status.js';

/** The audited actions, in words (the code is shown beside them). */
const ACTIONS = {
  'job.create': 'created',
  'job.replace': 'edited (whole definition)',
  'job.patch': 'edited (some fields)',
  'job.pause': 'paused',
  'job.resume': 'resumed',
  'job.delete': 'deleted',
  'job.trigger': 'triggered',
  'job.rollback': 'rolled back',
  'execution.replay': 'replayed',
  'calendar.put': 'calendar saved',
  'calendar.delete': 'calendar deleted',
  'namespace.create': 'namespace created',
  'namespace.update': 'namespace changed',
  'namespace.delete': 'namespace deleted',
  'token.create': 'token created',
  'token.revoke': 'token revoked',
  'signing_key.create': 'signing key created',
  'signing_key.rotate': 'signing keys rotated',
  'signing_key.revoke': 'signing key revoked',
  'alert_channel.create': 'alert channel created',
  'alert_channel.delete': 'alert channel deleted',
  'alert_rule.create': 'alert rule created',
  'alert_rule.update': 'alert rule changed',
  'alert_rule.delete': 'alert rule deleted',
};

/** Every action the audit log records, as the API names them. */
export const ACTION_NAMES = Object.keys(ACTIONS);

export function actionText(action) {
  if (!action) return 'no action recorded';
  return ACTIONS[action] || action.replaceAll('_', ' ');
}

/** Who made a change: a token's name (and a stored token's id), or who else. */
export function actorText(actor) {
  if (!actor) return 'nobody recorded (the cluster itself, or before the audit log)';
  return actor.name || actor.token_id || 'unknown';
}

const VALUE_SHOWN_MAX = 240;

/** A JSON value as one line; long ones cut (the whole in the tooltip). */
function valueEl(v, cls) {
  if (v === undefined) return h('span', { class: `change-value ${cls} muted`, text: '(none)' });
  const text = JSON.stringify(v);
  const cut = text.length > VALUE_SHOWN_MAX ? `${text.slice(0, VALUE_SHOWN_MAX)}…` : text;
  return h('code', { class: `change-value ${cls}`, title: cut === text ? null : text, text: cut });
}

/**
 * The changes of a version or an audit entry: one line per changed path,
 * before → after; a whole definition (a create) as JSON to open.
 */
export function changesList(changes, { id, label = 'What changed' } = {}) {
  if (!changes?.length) return h('p', { class: 'muted', text: 'No change of the definition.' });
  return h(
    'ul',
    { class: 'changes', id, 'aria-label': label },
    changes.map((c) => {
      if (!c.path) {
        const whole = c.after ?? c.before;
        return h(
          'li',
          { dataset: { path: '' } },
          h(
            'details',
            {},
            h('summary', { text: c.after !== undefined ? 'The whole definition (as made)' : 'The whole definition (as removed)' }),
            h('pre', { tabindex: '0', text: JSON.stringify(whole, null, 2) }),
          ),
        );
      }
      return h(
        'li',
        { dataset: { path: c.path } },
        h('code', { class: 'change-path', text: c.path }),
        ': ',
        valueEl(c.before, 'before'),
        h('span', { class: 'change-arrow', 'aria-label': 'becomes' }, ' → '),
        valueEl(c.after, 'after'),
      );
    }),
  );
}

const STATES = {
  live: ['ok', 'live'],
  paused: ['skipped', 'paused'],
  deleted: ['failed', 'deleted'],
};

function rollbackForm(job, v, { go }) {
  const fid = `rb-${v.version}`;
  const note = h('input', { id: `${fid}-note`, name: 'note', maxlength: '500', autocomplete: 'off' });
  const err = h('p', { class: 'field-error', id: `${fid}-note-error`, hidden: true });
  const submit = h('button', { type: 'submit', class: 'rollback-submit', text: `Roll back to version ${v.version}` });
  const form = h(
    'form',
    { class: 'rollback-form', hidden: true, novalidate: true, 'aria-label': `Roll back to version ${v.version}` },
    h(
      'div',
      { class: 'field', dataset: { field: 'note' } },
      h('label', { for: note.id, text: 'Why (optional, kept in the audit log)' }),
      note,
      h('p', { class: 'hint', id: `${fid}-note-hint`, text: `At most 500 characters. The job gets version ${v.version}’s definition as a new version; paused or not stays as it is now.` }),
      err,
    ),
    h(
      'div',
      { class: 'actions' },
      submit,
      h('button', { type: 'button', class: 'secondary', text: 'Cancel', onclick: () => toggle(false) }),
    ),
  );
  note.setAttribute('aria-describedby', `${fid}-note-hint ${fid}-note-error`);
  const open = h('button', {
    type: 'button',
    class: 'secondary rollback-open',
    text: 'Roll back to this version',
    'aria-expanded': 'false',
    'aria-label': `Roll back to version ${v.version}`,
    onclick: () => toggle(form.hidden),
  });
  function toggle(show) {
    form.hidden = !show;
    open.setAttribute('aria-expanded', String(show));
    if (show) note.focus();
    else open.focus();
  }
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.hidden = true;
    note.removeAttribute('aria-invalid');
    const text = note.value.trim();
    if (!window.confirm(`Roll back “${job.name}” to version ${v.version}? Its definition becomes version ${v.version}’s again, as version ${job.version + 1}.`)) return;
    submit.disabled = true;
    try {
      const r = await request('POST', `/v1/jobs/${seg(job.id)}/rollback`, {
        body: text ? { version: v.version, note: text } : { version: v.version },
        headers: { 'if-match': `"${job.version}"` },
      });
      go(`/jobs/${jobRef(r.data)}?tab=history`, `Rolled back ${r.data.name} to version ${v.version}’s definition: it is now at version ${r.data.version}.`);
    } catch (e) {
      if (e instanceof ApiError && e.status === 412) {
        showError(`Not rolled back (HTTP 412): ${e.message}. The job changed since this page was loaded; reload it to see its history.`);
      } else {
        if (e instanceof ApiError && e.fieldErrors.length) {
          err.textContent = e.fieldErrors.map((f) => (f.field === 'note' ? f.message : `${f.field}: ${f.message}`)).join('; ');
          err.hidden = false;
          if (e.fieldErrors.some((f) => f.field === 'note')) note.setAttribute('aria-invalid', 'true');
        }
        showError(e);
      }
      submit.disabled = false;
    }
  });
  return [open, form];
}

function versionItem(job, v, current, ctx) {
  const [kind, word] = STATES[v.state] || ['pending', v.state];
  const tid = `version-${v.version}-title`;
  return h(
    'li',
    { class: 'version', dataset: { version: String(v.version), action: v.action || '', state: v.state }, 'aria-labelledby': tid },
    h(
      'div',
      { class: 'version-head' },
      h('h3', { id: tid }, `Version ${v.version}`, current ? h('span', { class: 'muted', text: ' (current)' }) : null),
      badge(kind, word),
      timeEl(v.valid_from),
    ),
    h(
      'dl',
      { class: 'props' },
      h('dt', { text: 'By' }),
      h('dd', { class: 'version-author', text: actorText(v.author) }),
      h('dt', { text: 'Action' }),
      h('dd', { class: 'version-action' }, actionText(v.action), v.action ? [' ', h('code', { class: 'muted', text: v.action })] : null),
      h('dt', { text: 'Why' }),
      h('dd', { class: 'version-reason', text: v.reason || '—' }),
      v.request_id ? [h('dt', { text: 'Request id' }), h('dd', { class: 'mono', text: v.request_id })] : null,
    ),
    changesList(v.changes, { label: `What version ${v.version} changed` }),
    current || v.state === 'deleted' ? null : h('div', { class: 'rollback' }, rollbackForm(job, v, ctx)),
  );
}

/** The History tab of a job's page. */
export async function historyPanel(panel, job, { signal, go }) {
  fill(panel, h('p', { class: 'muted', text: 'Loading the history…' }));
  let r;
  try {
    r = await get(`/v1/jobs/${seg(job.id)}/versions`, { signal });
  } catch (e) {
    if (e?.name === 'AbortError') return;
    const gone = e instanceof ApiError && e.unavailable;
    fill(panel, h('p', { class: gone ? 'note' : 'msg msg-error', id: 'versions-error', text: gone ? 'This server keeps no job history (GET /v1/jobs/{id}/versions is missing).' : `The history could not be loaded: ${e.message}` }));
    return;
  }
  const versions = [...r.versions].reverse();
  fill(
    panel,
    h(
      'p',
      { class: 'muted', id: 'versions-summary' },
      `${versions.length} version${versions.length === 1 ? '' : 's'}, newest first. Each edit, pause, resume, delete and rollback makes one; “Roll back” gives the job an older version’s definition again, as a new version.`,
    ),
    h('ol', { class: 'versions', id: 'versions', 'aria-label': 'Versions, newest first' }, versions.map((v) => versionItem(job, v, v.version === job.version, { go }))),
  );
}
