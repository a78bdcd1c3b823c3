// How an execution's outcome looks: each kind has a class (colour), an icon
// and a word, so outcomes differ without colour too.

/** Lateness past which a success counts as late. */
export const LATE_AFTER_MS = 1000;

export const OUTCOMES = {
  ok: { icon: '✓', label: 'succeeded on time' },
  late: { icon: '◔', label: 'succeeded late' },
  retried: { icon: '↻', label: 'succeeded after retries' },
  failed: { icon: '✗', label: 'failed' },
  skipped: { icon: '⊘', label: 'skipped' },
  missed: { icon: '⚠', label: 'missed' },
  pending: { icon: '◷', label: 'pending' },
  running: { icon: '▶', label: 'running' },
  retrying: { icon: '⟳', label: 'retrying' },
};

/** ms from the slot to the start of its last attempt (null before a start). */
export function lateness(e) {
  if (!e.started_at) return null;
  return Date.parse(e.started_at) - Date.parse(e.scheduled_at);
}

/**
 * The outcome kind of a ledger row. A success is late when its attempt
 * started more than 1 s after the slot (after the slot's jitter window for
 * a job with `jitter_ms`, which delays delivery on purpose), retried when
 * it took more than one attempt.
 */
export function classify(e, jitterMs = 0) {
  switch (e.status) {
    case 'succeeded': {
      if (e.attempts > 1) return 'retried';
      const late = lateness(e);
      return late !== null && late > LATE_AFTER_MS + jitterMs ? 'late' : 'ok';
    }
    case 'failed':
    case 'skipped':
    case 'missed':
    case 'pending':
    case 'running':
    case 'retrying':
      return e.status;
    default:
      return 'pending';
  }
}

/** The words for a row: its kind's label plus the skip reason. */
export function describe(e, kind) {
  const base = OUTCOMES[kind].label;
  return e.reason && (kind === 'skipped' || kind === 'missed') ? `${base} (${e.reason})` : base;
}

/** A badge: class for colour, icon and text (the icon is decoration). */
export function badge(kind, text, extraClass = '') {
  const o = OUTCOMES[kind] || { icon: 'ℹ', label: kind };
  const el = document.createElement('span');
  el.className = `badge o-${OUTCOMES[kind] ? kind : 'info'} ${extraClass}`.trim();
  const icon = document.createElement('span');
  icon.setAttribute('aria-hidden', 'true');
  icon.textContent = o.icon;
  el.append(icon, ` ${text ?? o.label}`);
  return el;
}

/** The keys of `GET /v1/jobs/outcomes` counts, with their look. */
export const COUNT_KINDS = [
  ['succeeded', 'ok', 'succeeded'],
  ['late', 'late', 'late'],
  ['failed', 'failed', 'failed'],
  ['retrying', 'retrying', 'retrying'],
  ['running', 'running', 'running'],
  ['pending', 'pending', 'pending'],
  ['skipped', 'skipped', 'skipped'],
  ['missed', 'missed', 'missed'],
];
