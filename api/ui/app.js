// The console's shell: hash routing (#/jobs, #/jobs/REF, #/signing-keys, ...: the server
// serves one page), the login and logout, and focus management on each
// page change. Each page module exports render(main, ctx); ctx.signal is
// aborted when the operator leaves the page (requests and timers stop).

import { ApiError, request, session } from './api.js';
import { clearMessages, field, fill, h, showError, showNotice } from './dom.js';
import * as jobs from './jobs.js';
import * as jobForm from './job-form.js';
import * as job from './job.js';
import * as executions from './executions.js';
import * as failures from './failures.js';
import * as cluster from './cluster.js';
import * as preview from './preview.js';
import * as signingKeys from './signing-keys.js';
import * as audit from './audit.js';
import * as alerts from './alerts.js';

const ROUTES = [
  { re: /^\/login$/, nav: null, title: 'Sign in', render: renderLogin, open: true },
  { re: /^\/jobs$/, nav: 'jobs', title: 'Jobs', render: jobs.render },
  { re: /^\/jobs\/new$/, nav: 'jobs', title: 'New job', render: jobForm.render },
  { re: /^\/jobs\/([^/]+)\/edit$/, nav: 'jobs', title: 'Edit job', render: jobForm.render },
  { re: /^\/jobs\/([^/]+)\/slots\/([^/]+)$/, nav: 'jobs', title: 'Slot', render: job.renderSlot },
  { re: /^\/jobs\/([^/]+)$/, nav: 'jobs', title: 'Job', render: job.render },
  { re: /^\/executions$/, nav: 'executions', title: 'Executions', render: executions.render },
  { re: /^\/failures$/, nav: 'failures', title: 'Failures', render: failures.render },
  { re: /^\/cluster$/, nav: 'cluster', title: 'Cluster', render: cluster.render },
  { re: /^\/preview$/, nav: 'preview', title: 'Schedule preview', render: preview.render },
  { re: /^\/signing-keys$/, nav: 'signing-keys', title: 'Signing keys', render: signingKeys.render },
  { re: /^\/alerts$/, nav: 'alerts', title: 'Alerts', render: alerts.render },
  { re: /^\/audit$/, nav: 'audit', title: 'Audit log', render: audit.render },
];

let current = null; // the AbortController of the page shown
let pendingMessage = null; // said on the next page (after a redirect)

/** Goes to a route (`/jobs/REF`), optionally saying something there. */
export function go(path, message) {
  pendingMessage = message || null;
  const target = `#${path}`;
  if (location.hash === target) route();
  else location.hash = target;
}

function parseHash() {
  const raw = location.hash.startsWith('#/') ? location.hash.slice(1) : '/jobs';
  const q = raw.indexOf('?');
  const path = q < 0 ? raw : raw.slice(0, q);
  const query = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
  return { path, query, raw };
}

async function route() {
  const { path, query, raw } = parseHash();
  const found = ROUTES.find((r) => r.re.test(path));
  if (!found) {
    go('/jobs', `There is no page ${path}; here are the jobs.`);
    return;
  }
  if (!found.open && !session.token()) {
    go(`/login?next=${encodeURIComponent(raw)}`);
    return;
  }
  current?.abort();
  current = new AbortController();
  const signal = current.signal;
  clearMessages();
  if (pendingMessage) {
    const m = pendingMessage;
    pendingMessage = null;
    if (m.error) showError(m.error);
    else showNotice(m);
  }
  const loggedIn = Boolean(session.token());
  showAuditLink();
  document.getElementById('nav').hidden = !loggedIn;
  document.getElementById('logout').hidden = !loggedIn;
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === found.nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `${found.title} · cronshard`;
  const main = document.getElementById('main');
  fill(main, h('p', { class: 'muted', text: 'Loading…' }));
  const params = path.match(found.re).slice(1).map(decodeURIComponent);
  try {
    await found.render(main, { params, query, signal, go, setTitle: (t) => (document.title = `${t} · cronshard`) });
  } catch (e) {
    if (e?.name === 'AbortError' || signal.aborted) return;
    if (e instanceof ApiError && e.status === 401) return; // the login takes over
    fill(main, h('h1', { tabindex: '-1', text: found.title }), h('p', { text: 'This page could not be loaded.' }));
    showError(e);
  }
  if (signal.aborted) return;
  // Focus the page's heading so screen readers announce the new page and
  // Tab continues from the top of the content.
  const h1 = main.querySelector('h1');
  if (h1 && !main.contains(document.activeElement)) {
    h1.tabIndex = -1;
    h1.focus({ preventScroll: false });
  }
}

// ----------------------------------------------------------- audit link

// Whether the token may read the audit log (an admin's): asked once per
// token with the smallest page, held in memory only. The nav shows Audit
// to such tokens; the page itself still says so on a 403.
const auditAccess = { token: null, allowed: false, asking: null };

function showAuditLink() {
  const item = document.getElementById('nav-audit');
  const token = session.token();
  if (!token) {
    item.hidden = true;
    return;
  }
  if (auditAccess.token === token && !auditAccess.asking) {
    item.hidden = !auditAccess.allowed;
    return;
  }
  if (auditAccess.token === token) return; // being asked
  auditAccess.token = token;
  auditAccess.allowed = false;
  item.hidden = true;
  const asking = request('GET', '/v1/audit?limit=1')
    .then(() => true, () => false)
    .then((allowed) => {
      if (auditAccess.asking !== asking) return;
      auditAccess.asking = null;
      auditAccess.allowed = allowed;
      item.hidden = !(allowed && session.token() === token);
    });
  auditAccess.asking = asking;
}

// ---------------------------------------------------------------- login

async function renderLogin(main, { query }) {
  const next = query.get('next') || '/jobs';
  const input = h('input', { type: 'password', autocomplete: 'off', spellcheck: 'false', required: true, autocapitalize: 'off' });
  const button = h('button', { type: 'submit', text: 'Sign in' });
  const form = h(
    'form',
    { class: 'panel', id: 'login-form', 'aria-labelledby': 'login-title', novalidate: true },
    field({
      id: 'token',
      label: 'API token',
      path: 'token',
      control: input,
      hint: 'A bearer token: one of the server’s API_TOKENS, or one made with POST /v1/tokens. It is kept in this browser tab only (sessionStorage) and sent as an Authorization header, never in a URL.',
    }),
    button,
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    const err = form.querySelector('#token-error');
    const fail = (text) => {
      err.textContent = text;
      err.hidden = false;
      input.setAttribute('aria-invalid', 'true');
      showError(text);
      input.focus();
    };
    if (!token) return fail('Enter a token.');
    button.disabled = true;
    try {
      // Any route under the token layer tells whether the token is taken.
      await request('GET', '/v1/cluster', { token });
      session.set(token);
      go(next.startsWith('/') && !next.startsWith('/login') ? next : '/jobs', 'Signed in.');
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) fail('The server refused this token (401).');
      else if (e instanceof ApiError && e.status === 403) {
        session.set(token); // a valid token whose role cannot read the cluster
        go('/jobs', 'Signed in.');
      } else fail(`Could not check the token: ${e.message}`);
    } finally {
      button.disabled = false;
    }
  });
  fill(main, 
    h('h1', { id: 'login-title', text: 'Sign in to the cronshard console' }),
    form,
    h('p', { class: 'muted', text: 'With ./deploy/up.sh the token is in .run/api-token; the script prints it once.' }),
  );
  input.focus();
}

// ------------------------------------------------------------- wiring

window.addEventListener('cronshard:unauthorized', () => {
  const { raw } = parseHash();
  if (raw.startsWith('/login')) return;
  go(`/login?next=${encodeURIComponent(raw)}`, { error: 'The server refused the token (401): sign in again.' });
});

window.addEventListener('hashchange', route);

document.getElementById('logout').addEventListener('click', () => {
  session.clear();
  go('/login', 'Logged out; the token is forgotten.');
});

// The skip link moves focus to the content without touching the route.
document.getElementById('skip-link').addEventListener('click', (ev) => {
  ev.preventDefault();
  const main = document.getElementById('main');
  (main.querySelector('h1') || main).focus();
});

route();
