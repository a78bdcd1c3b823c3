// The console as a person uses it, in Debian's Chromium driven by
// Playwright, against a real stack (stack.js): sign in with the token (by
// keyboard), walk the jobs list by keyboard, create a job (an invalid
// expression first: the error shows at the field), watch its slots appear,
// explain one, see a failing job's slot fail, replay it from the Failures
// page, and look at the cluster (node, worker, lateness chart) and a
// schedule preview; read a job's history and roll it back, find a pause and
// its note in the audit log, and make an alert channel and rule that open
// an incident; give a job a key and find it, its page and its executions
// by that key. A screenshot of each page goes to the run directory
// (UI_TEST_RUN_DIR, default .run/ui-tests/<time>/screenshots); with
// UI_TEST_SCREENSHOTS_TO_DOCS=1 the key ones are copied to docs/screenshots/.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

import { startStack, until } from './stack.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const RUN_DIR = process.env.UI_TEST_RUN_DIR || path.join(ROOT, '.run', 'ui-tests', new Date().toISOString().replace(/[:.]/g, '-'));
const SHOTS = path.join(RUN_DIR, 'screenshots');
const DOCS_SHOTS = ['jobs', 'job-form-error', 'job-timeline', 'timeline-outcomes', 'slot-explain', 'failures', 'cluster', 'preview', 'job-history', 'audit', 'alerts'];
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

let stack;
let browser;
let page;
const requests = []; // every request the page made: {url, authorization}
const pageErrors = []; // uncaught script errors in the page

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  stack = await startStack(RUN_DIR);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    // No network but loopback here: Chromium's own background calls stay off.
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-quic', '--disable-sync'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, locale: 'en-GB', timezoneId: 'UTC' });
  page = await context.newPage();
  page.setDefaultTimeout(15_000);
  page.on('request', (r) => requests.push({ url: r.url(), authorization: r.headers().authorization }));
  page.on('pageerror', (e) => pageErrors.push(e.message));
});

after(async () => {
  await browser?.close();
  await stack?.stop();
  console.log(`# artifacts (logs, screenshots): ${RUN_DIR}`);
});

async function shot(name) {
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

const hash = () => new URL(page.url()).hash;
const focused = () => page.evaluate(() => ({ id: document.activeElement?.id, tag: document.activeElement?.tagName, text: document.activeElement?.textContent?.trim() }));

/** Presses Tab until `pred(activeElement)` holds, at most `max` times. */
async function tabUntil(pred, max = 40) {
  for (let i = 0; i < max; i++) {
    await page.keyboard.press('Tab');
    if (await page.evaluate(pred)) return;
  }
  throw new Error('Tab never reached the element');
}

async function createJobViaForm({ name, expr, url, retries }) {
  await page.click('nav >> text=Jobs');
  await page.click('text=New job');
  await page.waitForSelector('#job-form');
  await page.fill('#f-name', name);
  await page.fill('#f-schedule-expr', expr);
  await page.fill('#f-target-url', url);
  if (retries !== undefined) await page.fill('#f-retry-max', String(retries));
}

/** Clicks Refresh on a job's timeline until a slot with `status` shows. */
async function waitForSlot(status, ms = 40_000) {
  await until(`a ${status} slot on the timeline`, async () => {
    if (await page.locator(`ol.timeline li[data-status="${status}"]`).count()) return true;
    await page.click('#tl-refresh');
    await page.waitForTimeout(500);
    return false;
  }, ms, 0);
}

let okJob;
let failJob;

test('the console page is served and open, its data is not', async () => {
  const res = await fetch(`${stack.api}/ui/`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-security-policy'), /default-src 'self'/);
  const data = await fetch(`${stack.api}/v1/jobs`);
  assert.equal(data.status, 401, 'the stack runs with auth on');
});

test('sign in by keyboard; a wrong token is refused at the field', async () => {
  await page.goto(`${stack.api}/ui/`);
  await page.waitForSelector('#login-form');
  assert.match(hash(), /^#\/login/, 'without a token the console asks for one');
  await shot('login');
  // The token field has the focus; nothing but the keyboard from here.
  assert.equal((await focused()).id, 'token');
  await page.keyboard.type('not-the-token');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#token-error:not([hidden])');
  assert.match(await page.textContent('#token-error'), /refused/);
  assert.equal(await page.getAttribute('#token', 'aria-invalid'), 'true');
  assert.match(await page.textContent('#error'), /refused/, 'the live region says it too');
  await page.keyboard.press('Control+A');
  await page.keyboard.type(stack.token);
  await page.keyboard.press('Tab');
  const button = await focused();
  assert.equal(button.tag, 'BUTTON');
  assert.equal(button.text, 'Sign in');
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(outline, 'none', 'the focused button shows its focus');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelector('h1')?.textContent === 'Jobs' && !document.querySelector('[aria-busy="true"]'));
  assert.equal(hash(), '#/jobs');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('cronshard.console.token')), stack.token);
});

test('the jobs list is walked with the arrow keys', async () => {
  const ids = [];
  for (const name of ['kb-a', 'kb-b', 'kb-c']) {
    const r = await stack.call('POST', '/v1/jobs', {
      name,
      paused: true,
      schedule: { kind: 'interval', every_ms: 3_600_000 },
      target: { kind: 'http', url: `${stack.receiver.url}/ok` },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    ids.push(r.body.id);
  }
  await page.goto(`${stack.api}/ui/#/jobs?name_prefix=kb-`);
  await page.waitForSelector('#jobs-table');
  await tabUntil(() => document.activeElement?.classList.contains('row-link'));
  const rows = await page.$$eval('a.row-link', (as) => as.map((a) => a.textContent));
  assert.deepEqual(rows.sort(), ['kb-a', 'kb-b', 'kb-c']);
  const first = (await focused()).text;
  assert.equal(first, await page.textContent('tbody tr:first-child a.row-link'));
  await page.keyboard.press('ArrowDown');
  assert.equal((await focused()).text, await page.textContent('tbody tr:nth-child(2) a.row-link'));
  await page.keyboard.press('End');
  assert.equal((await focused()).text, await page.textContent('tbody tr:last-child a.row-link'));
  await page.keyboard.press('Home');
  assert.equal((await focused()).text, first);
  await page.keyboard.press('Enter');
  await page.waitForSelector('[role="tablist"]');
  assert.match(hash(), /^#\/jobs\/[0-9a-f-]{36}$/);
  assert.equal(await page.textContent('h1'), first);
  // The tabs: arrows move between them and select.
  await page.focus('[role="tab"][aria-selected="true"]');
  await page.keyboard.press('ArrowRight');
  assert.equal(await page.getAttribute('[role="tab"][aria-selected="true"]', 'id'), 'tab-history');
  await page.waitForSelector('#panel-history #versions');
  await page.keyboard.press('ArrowRight');
  assert.equal(await page.getAttribute('[role="tab"][aria-selected="true"]', 'id'), 'tab-definition');
  assert.equal(await page.isVisible('#panel-definition pre'), true);
  for (const id of ids) await stack.call('DELETE', `/v1/jobs/${id}`);
});

test('create a job: the invalid expression is refused at its field, then its slots succeed', async () => {
  await createJobViaForm({ name: 'ui-ok', expr: 'every two seconds', url: `${stack.receiver.url}/ok` });
  await page.click('button:text("Create job")');
  await page.waitForSelector('#f-schedule-expr-error:not([hidden])');
  assert.match(await page.textContent('#f-schedule-expr-error'), /expected 5/);
  assert.equal(await page.getAttribute('#f-schedule-expr', 'aria-invalid'), 'true');
  assert.equal(await page.evaluate(() => document.activeElement?.classList.contains('error-summary')), true, 'the summary takes the focus');
  assert.match(await page.textContent('.error-summary'), /schedule\.expr/);
  await shot('job-form-error');

  await page.fill('#f-schedule-expr', '*/2 * * * * *');
  await page.click('button:text("Create job")');
  await page.waitForSelector('#tl-refresh');
  okJob = hash().split('/')[2];
  assert.match(okJob, /^[0-9a-f-]{36}$/);
  assert.match(await page.textContent('#notice'), /Created ui-ok/);
  await waitForSlot('succeeded');
  const badge = await page.textContent('ol.timeline li[data-status="succeeded"] .badge');
  assert.match(badge, /succeeded/);
  assert.ok(stack.receiver.hits.get('/ok') >= 1, 'the receiver was called');
  // A few more slots, so that the picture shows a timeline.
  await until('3 succeeded slots', async () => (await stack.call('GET', `/v1/jobs/${okJob}/executions?status=succeeded`)).body.items.length >= 3, 20_000);
  await page.click('#tl-refresh');
  await page.waitForFunction(() => document.querySelectorAll('ol.timeline li[data-status="succeeded"]').length >= 3);
  await shot('job-timeline');
});

test('a slot opens its explanation', async () => {
  await page.click('ol.timeline li[data-status="succeeded"] a');
  await page.waitForSelector('#summary');
  assert.match(hash(), new RegExp(`^#/jobs/${okJob}/slots/`));
  assert.match(await page.textContent('#verdict-title'), /succeeded/);
  assert.match(await page.textContent('#history'), /attempt/);
  assert.equal(await page.isDisabled('#replay'), true, 'a succeeded slot is not replayed');
  await shot('slot-explain');
});

test('a failing job fails; its failures are replayed from the Failures page', async () => {
  await createJobViaForm({ name: 'ui-fail', expr: '*/3 * * * * *', url: `${stack.receiver.url}/fail`, retries: 0 });
  await page.click('button:text("Create job")');
  await page.waitForSelector('#tl-refresh');
  failJob = hash().split('/')[2];
  await waitForSlot('failed');
  assert.match(await page.textContent('ol.timeline li[data-status="failed"] .badge'), /failed/);
  await page.click('ol.timeline li[data-status="failed"] a');
  await page.waitForSelector('#summary');
  assert.match(await page.textContent('#verdict-title'), /failed/);
  assert.equal(await page.isEnabled('#replay'), true, 'a failed slot may be replayed');
  await shot('slot-failed');

  await until('3 failed slots', async () => (await stack.call('GET', `/v1/jobs/${failJob}/executions?status=failed`)).body.items.length >= 3, 20_000);
  await page.click('nav >> text=Failures');
  await page.selectOption('#f-window', '1');
  await page.click('button:text("Show")');
  const row = page.locator('#failures tbody tr', { hasText: '500' }).first();
  await row.waitFor();
  await shot('failures');
  const hitsBefore = stack.receiver.hits.get('/fail') || 0;
  page.once('dialog', (d) => d.accept());
  await row.locator('button.replay-group').click();
  await page.waitForSelector('#notice:not([hidden])');
  const notice = await page.textContent('#notice');
  const replayed = Number(/Replayed (\d+)/.exec(notice)?.[1]);
  assert.ok(replayed >= 1, `replayed: ${notice}`);
  // A replayed slot is delivered again: a second attempt of the same slot.
  await until('a replayed slot to be attempted again', async () => {
    const r = await stack.call('GET', `/v1/jobs/${failJob}/executions?limit=100`);
    return r.body.items.some((e) => e.attempts >= 2);
  }, 30_000);
  assert.ok((stack.receiver.hits.get('/fail') || 0) > hitsBefore);
  await stack.call('POST', `/v1/jobs/${failJob}/pause`);
});

test('the cluster page shows the node, the worker and the lateness chart', async () => {
  const workers = (await stack.call('GET', '/v1/workers')).status === 200;
  const lateness = (await stack.call('GET', '/v1/stats/lateness?minutes=60')).status === 200;
  const owners = (await stack.call('GET', `/v1/jobs/${okJob}/owners`)).status === 200;
  await page.click('nav >> text=Cluster');
  await page.waitForSelector('#nodes');
  assert.match(await page.textContent('#nodes'), /ui-node-0/);
  if (workers) assert.match(await page.textContent('#workers'), /ui-worker-0/);
  else assert.equal(await page.isVisible('#workers-note'), true);
  if (lateness) {
    await page.waitForSelector('#lateness-chart');
    assert.ok((await page.locator('#lateness-chart rect.bar').count()) >= 1, 'a bar for the minutes with deliveries');
  } else assert.equal(await page.isVisible('#lateness-note'), true);
  await page.fill('#f-owner-job', okJob);
  await page.click('button:text("Look up")');
  if (owners) await page.waitForSelector('#owners >> text=ui-node-0');
  else await page.waitForSelector('form >> .note');
  await shot('cluster');
  console.log(`# optional routes present: workers=${workers} lateness=${lateness} owners=${owners}`);
});

test("the failing job's timeline: failures and replays, told apart without colour", async () => {
  await page.goto(`${stack.api}/ui/#/jobs/${failJob}`);
  await page.waitForSelector('ol.timeline li[data-status="failed"]');
  const outcomes = await page.$$eval('ol.timeline li', (lis) => lis.map((li) => [li.dataset.outcome, li.querySelector('.badge').textContent.trim()]));
  for (const [kind, text] of outcomes) {
    // Each kind has its own icon and words besides its colour.
    if (kind === 'failed') assert.match(text, /^✗ failed/);
    if (kind === 'skipped') assert.match(text, /^⊘ skipped/);
  }
  assert.match(await page.textContent('ol.timeline'), /attempt 2/, 'a replayed slot shows its second attempt');
  await shot('timeline-outcomes');
});

test('edit (If-Match of the version shown), pause, resume and trigger from the job page', async () => {
  await page.goto(`${stack.api}/ui/#/jobs/${okJob}`);
  await page.click('a:text("Edit")');
  await page.waitForSelector('#job-form');
  assert.equal(await page.inputValue('#f-schedule-expr'), '*/2 * * * * *', 'the form holds the stored definition');
  await page.fill('#f-name', 'ui-ok-renamed');
  await page.click('button:text-matches("^Save")');
  await page.waitForSelector('#tl-refresh');
  assert.match(await page.textContent('#notice'), /ui-ok-renamed is now at version 2/);

  // Someone else changes the job while the form is open: the save is refused, not lost.
  await page.click('a:text("Edit")');
  await page.waitForSelector('#job-form');
  const other = await stack.call('PUT', `/v1/jobs/${okJob}`, {
    name: 'changed-elsewhere',
    schedule: { kind: 'cron', expr: '*/2 * * * * *', timezone: 'UTC' },
    target: { kind: 'http', url: `${stack.receiver.url}/ok` },
  });
  assert.equal(other.status, 200, JSON.stringify(other.body));
  await page.fill('#f-name', 'mine');
  await page.click('button:text-matches("^Save")');
  await page.waitForSelector('#error:not([hidden])');
  assert.match(await page.textContent('#error'), /HTTP 412.*Someone changed this job/);
  assert.equal((await stack.call('GET', `/v1/jobs/${okJob}`)).body.name, 'changed-elsewhere');
  const back = await stack.call('PUT', `/v1/jobs/${okJob}`, {
    name: 'ui-ok',
    schedule: { kind: 'cron', expr: '*/2 * * * * *', timezone: 'UTC' },
    target: { kind: 'http', url: `${stack.receiver.url}/ok` },
  });
  assert.equal(back.status, 200);

  await page.goto(`${stack.api}/ui/#/jobs/${okJob}`);
  // The pause takes a note; the note and who paused are stored and shown.
  await page.fill('#f-action-note', 'receiver maintenance');
  await page.click('button:text("Pause")');
  await page.waitForSelector('.title-row >> text=paused');
  const pausedJob = (await stack.call('GET', `/v1/jobs/${okJob}`)).body;
  assert.equal(pausedJob.paused, true);
  assert.equal(pausedJob.pause.note, 'receiver maintenance');
  assert.match(await page.textContent('#paused-by'), /receiver maintenance/);
  await page.click('button:text("Resume")');
  await page.waitForSelector('.title-row >> text=active');
  assert.equal((await stack.call('GET', `/v1/jobs/${okJob}`)).body.paused, false);
  await page.click('button:text("Trigger now")');
  await page.waitForSelector('#notice:has-text("Triggered")');
  const manual = await stack.call('GET', `/v1/jobs/${okJob}/executions?limit=20`);
  assert.ok(manual.body.items.some((e) => e.trigger === 'manual'), 'a manual execution was recorded');
});

test('the schedule preview marks daylight saving time and names a bad zone', async () => {
  await page.click('nav >> text=Schedule preview');
  await page.fill('#p-expr', '30 2 * * *');
  await page.fill('#p-timezone', 'Mars/Olympus');
  await page.click('button:text("Preview")');
  await page.waitForSelector('#p-timezone-error:not([hidden])');
  assert.equal(await page.getAttribute('#p-timezone', 'aria-invalid'), 'true');
  await page.fill('#p-timezone', 'Europe/Berlin');
  await page.fill('#p-from', '2026-03-27T00:00:00Z');
  await page.fill('#p-count', '4');
  await page.click('button:text("Preview")');
  await page.waitForSelector('#fires');
  assert.equal(await page.locator('#fires tr[data-dst="gap"]').count(), 1, 'the spring-forward night is marked');
  assert.match(await page.textContent('#fires tr[data-dst="gap"]'), /DST gap/);
  await shot('preview');
});

test('the jobs list shows recent outcomes (or says why not)', async () => {
  await page.goto(`${stack.api}/ui/#/jobs?name_prefix=ui-`);
  await page.waitForSelector('#jobs-table');
  const outcomes = (await stack.call('GET', `/v1/jobs/outcomes?ids=${okJob}&hours=24`)).status === 200;
  if (outcomes) assert.match(await page.textContent('#jobs-table'), /succeeded/);
  else assert.equal(await page.isVisible('#counts-note'), true);
  await shot('jobs');
});

test('job keys: set in the form (refused when bad or taken), the address namespace:key, the key on the job page, the jobs list and an execution row', async () => {
  // A key that is no DNS label is refused at its field.
  await page.goto(`${stack.api}/ui/#/jobs/new`);
  await page.waitForSelector('#job-form');
  assert.equal(await page.getAttribute('#f-key', 'readonly'), null, 'a new job takes a key');
  await page.fill('#f-name', 'Nightly report');
  await page.fill('#f-key', 'Nightly_Report');
  await page.check('#f-paused');
  await page.fill('#f-schedule-expr', '0 3 * * *');
  await page.fill('#f-target-url', `${stack.receiver.url}/ok`);
  await page.click('button:text("Create job")');
  await page.waitForSelector('#f-key-error:not([hidden])');
  assert.equal(await page.getAttribute('#f-key', 'aria-invalid'), 'true');
  assert.match(await page.textContent('.error-summary'), /key/);

  await page.fill('#f-key', 'nightly-report');
  await page.click('button:text("Create job")');
  await page.waitForSelector('#tl-refresh');
  assert.equal(hash(), '#/jobs/default:nightly-report', 'the console names a keyed job by namespace:key');
  assert.match(await page.textContent('#notice'), /Created Nightly report/);
  const job = (await stack.call('GET', '/v1/jobs/default:nightly-report')).body;
  assert.equal(job.key, 'nightly-report');
  assert.equal(job.name, 'Nightly report');

  // A key another live job of the namespace has: the 409 at the field.
  await page.goto(`${stack.api}/ui/#/jobs/new`);
  await page.waitForSelector('#job-form');
  await page.fill('#f-name', 'Another report');
  await page.fill('#f-key', 'nightly-report');
  await page.check('#f-paused');
  await page.fill('#f-schedule-expr', '0 4 * * *');
  await page.fill('#f-target-url', `${stack.receiver.url}/ok`);
  await page.click('button:text("Create job")');
  await page.waitForSelector('#f-key-error:not([hidden])');
  assert.match(await page.textContent('#f-key-error'), /already has a live job with key "nightly-report"/);
  assert.match(await page.textContent('#error'), /refused/);
  await shot('job-form-key-taken');

  // An execution, through the API by key.
  const fired = await stack.call('POST', '/v1/jobs/default:nightly-report/trigger');
  assert.equal(fired.status, 202, JSON.stringify(fired.body));
  await until('the triggered execution to succeed', async () => {
    const r = await stack.call('GET', `/v1/jobs/${job.id}/executions`);
    return r.body.items.some((e) => e.status === 'succeeded');
  }, 30_000);

  // The job's address, opened directly.
  await page.goto(`${stack.api}/ui/#/jobs/default:nightly-report`);
  await page.reload();
  await page.waitForSelector('ol.timeline li[data-status="succeeded"]');
  assert.equal(await page.textContent('h1'), 'Nightly report');
  assert.equal(await page.textContent('#job-key'), 'nightly-report');
  assert.equal(hash(), '#/jobs/default:nightly-report');
  assert.match(await page.getAttribute('ol.timeline a.slot-link', 'href'), /^#\/jobs\/default:nightly-report\/slots\//);
  await shot('job-key');

  // The edit form shows the key, read-only; saving keeps it.
  await page.click('a:text("Edit")');
  await page.waitForSelector('#job-form');
  assert.equal(hash(), '#/jobs/default:nightly-report/edit');
  assert.equal(await page.inputValue('#f-key'), 'nightly-report');
  assert.equal(await page.getAttribute('#f-key', 'readonly'), '', 'a set key never changes');
  await page.fill('#f-name', 'Nightly report (UTC)');
  await page.click('button:text-matches("^Save")');
  await page.waitForSelector('#tl-refresh');
  assert.equal(hash(), '#/jobs/default:nightly-report');
  assert.equal((await stack.call('GET', `/v1/jobs/${job.id}`)).body.key, 'nightly-report');

  // The jobs list: the key in its column, and the key filter finds the job.
  await page.goto(`${stack.api}/ui/#/jobs`);
  await page.waitForSelector('#f-key');
  await page.fill('#f-key', 'nightly-report');
  await page.click('button:text("Search")');
  await page.waitForFunction(() => location.hash === '#/jobs?key=nightly-report' && document.querySelector('#jobs-table'));
  assert.equal(await page.locator('#jobs-table tbody tr').count(), 1);
  assert.equal(await page.textContent('#jobs-table tbody tr .job-key'), 'nightly-report');
  assert.equal(await page.textContent('#jobs-table a.row-link'), 'Nightly report (UTC)');
  assert.equal(await page.getAttribute('#jobs-table a.row-link', 'href'), '#/jobs/default:nightly-report');
  await shot('jobs-by-key');
  await page.goto(`${stack.api}/ui/#/jobs?key=no-such-job`);
  await page.waitForSelector('#jobs-none');
  assert.match(await page.textContent('#jobs-none'), /No live job has the key no-such-job/);

  // The Executions page names the job by its key, filtered by it too, and links to it.
  await page.click('nav >> text=Executions');
  await page.waitForSelector('#f-ex-job');
  await page.fill('#f-ex-job', 'default:nightly-report');
  await page.click('button:text("Search")');
  const row = page.locator('#executions tbody tr[data-status="succeeded"]').first();
  await row.waitFor();
  const named = await page.$$eval('#executions a.execution-job', (as) => [...new Set(as.map((a) => a.textContent))]);
  assert.deepEqual(named, ['nightly-report'], 'only the job filtered for');
  assert.equal(await row.locator('a.execution-job').textContent(), 'nightly-report');
  assert.equal(await row.locator('a.execution-job').getAttribute('title'), 'Nightly report (UTC)');
  await shot('executions');
  await row.locator('a.execution-job').click();
  await page.waitForSelector('#job-key');
  assert.equal(hash(), '#/jobs/default:nightly-report', 'the job page puts its key in the address');

  // A job without a key may be given one.
  const plain = await stack.call('POST', '/v1/jobs', {
    name: 'keyless',
    paused: true,
    schedule: { kind: 'interval', every_ms: 3_600_000 },
    target: { kind: 'http', url: `${stack.receiver.url}/ok` },
  });
  assert.equal(plain.status, 201, JSON.stringify(plain.body));
  assert.equal(plain.body.key, null);
  await page.goto(`${stack.api}/ui/#/jobs/${plain.body.id}`);
  await page.waitForSelector('#job-key');
  assert.equal(await page.textContent('#job-key'), 'none');
  await page.click('a:text("Edit")');
  await page.waitForSelector('#job-form');
  assert.equal(await page.getAttribute('#f-key', 'readonly'), null);
  await page.fill('#f-key', 'keyless-no-more');
  await page.click('button:text-matches("^Save")');
  await page.waitForSelector('#tl-refresh');
  assert.equal(hash(), '#/jobs/default:keyless-no-more');
  assert.equal((await stack.call('GET', `/v1/jobs/${plain.body.id}`)).body.key, 'keyless-no-more');
  for (const id of [job.id, plain.body.id]) await stack.call('DELETE', `/v1/jobs/${id}`);
});

const slotUrl = (job, at) => `${stack.api}/ui/#/jobs/${job}/slots/${encodeURIComponent(at)}`;

test('the execution view shows the kept response headers and the rule that decided each attempt', async () => {
  const ok = (await stack.call('GET', `/v1/jobs/${okJob}/executions?status=succeeded&limit=1`)).body.items[0];
  await page.goto(slotUrl(okJob, ok.scheduled_at));
  await page.waitForSelector('#history');
  assert.match(await page.textContent('#response-headers'), /content-type: text\/plain/);
  const attempt = await page.textContent('#history tr[data-event="attempt"]');
  assert.match(attempt, /HTTP 200 is a success status \(2xx\)/, 'the rule that decided');
  assert.match(attempt, /response headers:.*content-type: text\/plain/);

  const failed = (await stack.call('GET', `/v1/jobs/${failJob}/executions?status=failed&limit=1`)).body.items[0];
  await page.goto(slotUrl(failJob, failed.scheduled_at));
  await page.waitForSelector('#history');
  const rules = await page.$$eval('#history tr[data-event="attempt"] td.why', (tds) => tds.map((td) => td.textContent));
  assert.ok(rules.length >= 1);
  for (const rule of rules) assert.match(rule, /^HTTP 500 is in retry_statuses \(408, 425, 429, 5xx\); no retry left/);
  assert.match(await page.textContent('#history tr[data-event="attempt"] [class~="badge"]'), /failed/);
  await shot('slot-rule');
});

test('an async-completion job: an accepted attempt awaits its report, the report and a timeout are told', async () => {
  const make = async (name, timeout_ms) => {
    const r = await stack.call('POST', '/v1/jobs', {
      name,
      paused: true,
      schedule: { kind: 'interval', every_ms: 3_600_000 },
      target: { kind: 'http', url: `${stack.receiver.url}/accept` },
      retry: { max_retries: 0 },
      completion: { mode: 'async', timeout_ms },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const fired = await stack.call('POST', `/v1/jobs/${r.body.id}/trigger`);
    assert.equal(fired.status, 202, JSON.stringify(fired.body));
    return { job: r.body.id, at: fired.body.scheduled_at, execution: fired.body.execution_id };
  };
  const explained = async ({ job, at }) => (await stack.call('GET', `/v1/jobs/${job}/executions/${encodeURIComponent(at)}`)).body;

  const awaited = await make('async-report', 600_000);
  await until('the attempt to be accepted', async () => (await explained(awaited)).execution?.awaiting_until, 30_000);
  const delivery = stack.receiver.last.get('/accept');
  await page.goto(slotUrl(awaited.job, awaited.at));
  await page.waitForSelector('#awaiting-until');
  assert.match(await page.textContent('#awaiting-until'), /\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/);
  assert.match(await page.textContent('#response-headers'), /x-request-id: accept-\d+/);
  const accepted = await page.textContent('#history tr[data-outcome="accepted"]');
  assert.match(accepted, /accepted \(202\)/);
  assert.match(accepted, /awaiting the report until/);
  assert.match(accepted, /HTTP 202/);
  await shot('slot-awaiting');

  // The receiver reports with the attempt's completion token.
  const report = await fetch(`${stack.api}/v1/executions/${encodeURIComponent(awaited.execution)}/complete`, {
    method: 'POST',
    headers: { 'x-cronshard-completion-token': delivery['x-cronshard-completion-token'], 'content-type': 'application/json' },
    body: JSON.stringify({ status: 'succeeded', result: 'report 42 built' }),
  });
  assert.equal(report.status, 200, await report.text());
  await page.reload();
  await page.waitForSelector('#history tr[data-event="completed"]');
  const completed = await page.textContent('#history tr[data-event="completed"]');
  assert.match(completed, /report received/);
  assert.match(completed, /the receiver reported succeeded: report 42 built/);
  assert.equal(await page.locator('#awaiting-until').count(), 0, 'no longer awaiting');

  // No report within the timeout: the attempt fails (no retry left).
  const silent = await make('async-silent', 1000);
  await until('the unreported attempt to fail', async () => (await explained(silent)).execution?.status === 'failed', 40_000);
  await page.goto(slotUrl(silent.job, silent.at));
  await page.waitForSelector('#history tr[data-event="completion_timed_out"]');
  const timedOut = await page.textContent('#history tr[data-event="completion_timed_out"]');
  assert.match(timedOut, /report timed out/);
  assert.match(timedOut, /no report by the deadline \d{4}-/);
  for (const { job } of [awaited, silent]) await stack.call('DELETE', `/v1/jobs/${job}`);
});

test('the job form keeps the delivery contract, completion and retry jitter; the job page shows them', async () => {
  const at = new Date(Date.now() + 30 * 86_400_000).toISOString();
  const r = await stack.call('POST', '/v1/jobs', {
    name: 'contract-form',
    paused: true,
    schedule: { kind: 'once', at },
    target: {
      kind: 'http',
      url: `${stack.receiver.url}/accept`,
      success: { status: ['2xx', 304], body_contains: '"queued":true' },
      retry_statuses: [429, '5xx'],
    },
    retry: { max_retries: 2, base_delay_ms: 1000, multiplier: 2, max_delay_ms: 60_000, jitter: 'full' },
    completion: { mode: 'async', timeout_ms: 120_000 },
    after_completion: 'delete',
  });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  const stored = r.body;
  await page.goto(`${stack.api}/ui/#/jobs/${stored.id}?tab=definition`);
  await page.waitForSelector('#definition-props');
  assert.equal(await page.textContent('#def-success'), 'HTTP 2xx, 304 and the body contains “"queued":true”');
  assert.match(await page.textContent('#def-retry-statuses'), /^429, 5xx; network errors/);
  assert.match(await page.textContent('#def-retry'), /jitter full/);
  assert.match(await page.textContent('#def-completion'), /^async: a 202 answer waits up to 2 min 0 s/);
  assert.match(await page.textContent('#def-after-completion'), /^delete/);
  assert.match(await page.textContent('#job-completion'), /^async/, 'the top of the page says it too');
  assert.match(await page.textContent('#job-after-completion'), /^delete/);

  await page.click('a:text("Edit")');
  await page.waitForSelector('#job-form');
  assert.equal(await page.inputValue('#f-target-success-status'), '2xx, 304');
  assert.equal(await page.inputValue('#f-target-success-contains'), '"queued":true');
  assert.equal(await page.inputValue('#f-target-retry-statuses'), '429, 5xx');
  assert.equal(await page.inputValue('#f-retry-jitter'), 'full');
  assert.equal(await page.inputValue('#f-completion-mode'), 'async');
  assert.equal(await page.inputValue('#f-completion-timeout'), '120000');
  assert.equal(await page.inputValue('#f-after-completion'), 'delete');
  assert.equal(await page.isVisible('#f-after-completion'), true, 'a one-time job chooses what comes after');
  await page.selectOption('#f-schedule-kind', 'cron');
  assert.equal(await page.isVisible('#f-after-completion'), false, 'a recurring job does not');
  await page.selectOption('#f-schedule-kind', 'once');
  await page.selectOption('#f-completion-mode', 'sync');
  assert.equal(await page.isVisible('#f-completion-timeout'), false, 'a sync job has no report timeout');
  await page.selectOption('#f-completion-mode', 'async');
  await page.fill('#f-name', 'contract-form-renamed');
  await page.click('button:text-matches("^Save")');
  await page.waitForSelector('#tl-refresh');
  const saved = (await stack.call('GET', `/v1/jobs/${stored.id}`)).body;
  assert.equal(saved.name, 'contract-form-renamed');
  assert.equal(saved.version, stored.version + 1);
  for (const k of ['schedule', 'target', 'retry', 'completion', 'after_completion']) assert.deepEqual(saved[k], stored[k], `${k} round-trips`);

  // A bad status pattern is refused at its field.
  await page.click('a:text("Edit")');
  await page.waitForSelector('#job-form');
  await page.fill('#f-target-retry-statuses', '429, 6xx');
  await page.click('button:text-matches("^Save")');
  await page.waitForSelector('#f-target-retry-statuses-error:not([hidden])');
  assert.match(await page.textContent('#f-target-retry-statuses-error'), /5xx/);
  await stack.call('DELETE', `/v1/jobs/${stored.id}`);
});

test('signing keys: a new secret is shown once; rotate; revoke; a reload shows no secret', async () => {
  await page.goto(`${stack.api}/ui/#/jobs`);
  await page.click('nav >> text=Signing keys');
  await page.waitForSelector('#sk-none');
  assert.equal(hash(), '#/signing-keys');
  assert.match(await page.textContent('#sk-count'), /deliveries of this namespace go unsigned/);

  await page.click('#sk-create');
  const box = page.locator('.secret-box');
  await box.waitFor();
  const secret = (await box.locator('.secret-value').textContent()).trim();
  assert.match(secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
  assert.match(await box.textContent(), /it will not be shown again/);
  assert.match(await page.textContent('#notice'), /Created the key/);
  assert.equal(await page.evaluate(() => document.activeElement?.closest('.secret-box') !== null), true, 'the secret takes the focus');
  await page.waitForSelector('#signing-keys tbody tr');
  const first = await box.getAttribute('data-key');
  let keys = (await stack.call('GET', '/v1/signing-keys')).body.keys;
  assert.deepEqual(keys.map((k) => k.id), [first]);
  assert.match(await page.textContent(`#signing-keys tr[data-key="${first}"]`), /active: signs/);
  assert.ok(!(await page.textContent('#signing-keys')).includes(secret), 'the list shows no secret');
  await box.locator('button.copy-secret').click();
  await page.waitForFunction(() => document.querySelector('.secret-box [role="status"]')?.textContent);
  assert.match(await box.locator('[role="status"]').textContent(), /Copied|selected/);
  await shot('signing-key-new');

  // An overlap past 30 days is refused at its field.
  await page.fill('#f-sk-overlap', '99999999');
  await page.click('#sk-rotate');
  await page.waitForSelector('#f-sk-overlap-error:not([hidden])');
  assert.match(await page.textContent('#error'), /HTTP 422/);

  await page.fill('#f-sk-overlap', '3600');
  await page.click('#sk-rotate');
  await page.waitForFunction(() => document.querySelectorAll('.secret-box').length === 2);
  const rotated = page.locator('.secret-box').first();
  const second = await rotated.getAttribute('data-key');
  const secret2 = (await rotated.locator('.secret-value').textContent()).trim();
  assert.notEqual(second, first);
  assert.notEqual(secret2, secret);
  assert.match(await rotated.textContent(), /Rotated/);
  await page.waitForSelector(`#signing-keys tr[data-key="${second}"]`);
  assert.match(await page.textContent(`#signing-keys tr[data-key="${first}"]`), /expiring/);
  assert.match(await page.textContent(`#signing-keys tr[data-key="${second}"]`), /active: signs/);
  keys = (await stack.call('GET', '/v1/signing-keys')).body.keys;
  const old = keys.find((k) => k.id === first);
  assert.equal(old.state, 'expiring');
  const left = Date.parse(old.expires_at) - Date.now();
  assert.ok(left > 3_500_000 && left <= 3_600_000, `the old key signs for the hour asked: ${old.expires_at}`);

  // Revoking asks first; cancelled, nothing changes.
  page.once('dialog', (d) => d.dismiss());
  await page.click(`#signing-keys tr[data-key="${first}"] button.revoke-key`);
  assert.equal((await stack.call('GET', '/v1/signing-keys')).body.keys.find((k) => k.id === first).state, 'expiring');
  page.once('dialog', (d) => d.accept());
  await page.click(`#signing-keys tr[data-key="${first}"] button.revoke-key`);
  await page.waitForSelector(`#signing-keys tr[data-key="${first}"][data-state="revoked"]`);
  assert.match(await page.textContent('#notice'), new RegExp(`Revoked the key ${first}`));
  assert.equal(await page.locator(`.secret-box[data-key="${first}"]`).count(), 0, "a revoked key's secret goes");
  assert.equal(await page.locator(`.secret-box[data-key="${second}"]`).count(), 1);
  assert.equal((await stack.call('GET', '/v1/signing-keys')).body.keys.find((k) => k.id === first).state, 'revoked');

  // Five keys sign at most: the sixth is refused, and the page says why.
  const more = [];
  for (let i = 0; i < 4; i++) {
    const r = await stack.call('POST', '/v1/signing-keys');
    assert.equal(r.status, 201, JSON.stringify(r.body));
    more.push(r.body.id);
  }
  await page.click('#sk-create');
  await page.waitForSelector('#error:has-text("409")');
  assert.match(await page.textContent('#error'), /HTTP 409.*5 signing keys/);
  await page.waitForFunction(() => document.querySelectorAll('#signing-keys tbody tr').length === 6);
  assert.match(await page.textContent('#sk-count'), /^5 keys sign each delivery now/, 'the list is read again');
  await shot('signing-keys');

  // Gone once the page is left, and after a reload; never stored.
  await page.click('nav >> text=Jobs');
  await page.waitForSelector('#jobs-table, .note');
  await page.click('nav >> text=Signing keys');
  await page.waitForSelector('#signing-keys');
  assert.equal(await page.locator('.secret-box').count(), 0);
  await page.reload();
  await page.waitForSelector('#signing-keys');
  assert.equal(await page.locator('.secret-box').count(), 0);
  const html = await page.content();
  for (const s of [secret, secret2]) assert.ok(!html.includes(s), 'no secret anywhere in the page');
  assert.ok(!html.includes('whsec_'));
  const stored = await page.evaluate(() => JSON.stringify([{ ...localStorage }, { ...sessionStorage }]));
  assert.ok(!stored.includes('whsec_'), 'no secret in the browser storage');
  assert.ok(requests.every((r) => !r.url.includes('whsec_')), 'no secret in a URL');
  for (const id of [second, ...more]) await stack.call('DELETE', `/v1/signing-keys/${id}`);
});

test("the job history shows an edit's changed path, author and reason; a rollback from it makes a new version", async () => {
  const made = await stack.call('POST', '/v1/jobs', {
    name: 'history-job',
    paused: true,
    schedule: { kind: 'interval', every_ms: 3_600_000 },
    target: { kind: 'http', url: `${stack.receiver.url}/ok` },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const id = made.body.id;
  await page.goto(`${stack.api}/ui/#/jobs/${id}/edit`);
  await page.waitForSelector('#job-form');
  await page.fill('#f-schedule-every', '7200000');
  await page.fill('#f-audit-reason', 'every two hours is enough');
  await page.click('button:text-matches("^Save")');
  await page.waitForSelector('#tl-refresh');
  assert.match(await page.textContent('#notice'), /history-job is now at version 2/);

  await page.click('#tab-history');
  const v2 = page.locator('#versions li[data-version="2"]');
  await v2.waitFor();
  assert.match(await v2.locator('h3').textContent(), /Version 2 \(current\)/);
  assert.equal(await v2.locator('.version-author').textContent(), 'bootstrap token #1');
  assert.match(await v2.locator('.version-action').textContent(), /job\.replace/);
  assert.equal(await v2.locator('.version-reason').textContent(), 'every two hours is enough', 'the X-Audit-Reason of the save');
  assert.equal(await v2.locator('li[data-path="schedule.every_ms"]').textContent(), 'schedule.every_ms: 3600000 → 7200000');
  assert.equal(await v2.locator('button.rollback-open').count(), 0, 'the current version is not rolled back to');
  const v1 = page.locator('#versions li[data-version="1"]');
  assert.match(await v1.locator('.version-action').textContent(), /created/);
  assert.equal(await page.$$eval('#versions > li', (lis) => lis.map((li) => li.dataset.version).join(',')), '2,1', 'newest first');
  await shot('job-history');

  // Rolling back asks first; cancelled, nothing changes.
  await v1.locator('button.rollback-open').click();
  assert.equal(await v1.locator('button.rollback-open').getAttribute('aria-expanded'), 'true');
  assert.equal(await page.evaluate(() => document.activeElement?.name), 'note', 'the note takes the focus');
  await v1.locator('input[name="note"]').fill('the two-hour run missed the 09:00 report');
  page.once('dialog', (d) => d.dismiss());
  await v1.locator('button.rollback-submit').click();
  assert.equal((await stack.call('GET', `/v1/jobs/${id}`)).body.version, 2);
  page.once('dialog', (d) => d.accept());
  await v1.locator('button.rollback-submit').click();
  await page.waitForSelector('#notice:has-text("Rolled back")');
  assert.match(await page.textContent('#notice'), /Rolled back history-job to version 1’s definition: it is now at version 3/);
  const job = (await stack.call('GET', `/v1/jobs/${id}`)).body;
  assert.equal(job.version, 3);
  assert.equal(job.schedule.every_ms, 3_600_000, "version 1's schedule again");
  assert.equal(job.paused, true, 'paused or not stays as it was');
  assert.match(hash(), new RegExp(`^#/jobs/${id}\\?tab=history$`), 'the page stays on the history');
  const v3 = page.locator('#versions li[data-version="3"]');
  await v3.waitFor();
  assert.equal(await v3.getAttribute('data-action'), 'job.rollback');
  assert.equal(await v3.locator('.version-reason').textContent(), 'the two-hour run missed the 09:00 report');
  assert.equal(await v3.locator('li[data-path="schedule.every_ms"]').textContent(), 'schedule.every_ms: 7200000 → 3600000');
  assert.equal(await page.locator('#versions li[data-version="2"] button.rollback-open').count(), 1, 'the old current version may be rolled back to now');
  await stack.call('DELETE', `/v1/jobs/${id}`);
});

test('the audit page lists a pause with its note, pages through older entries, and tells a token that is not an admin why it sees nothing', async () => {
  const made = await stack.call('POST', '/v1/jobs', {
    name: 'audit-job',
    schedule: { kind: 'interval', every_ms: 3_600_000 },
    target: { kind: 'http', url: `${stack.receiver.url}/ok` },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const id = made.body.id;
  await page.goto(`${stack.api}/ui/#/jobs/${id}`);
  await page.fill('#f-action-note', 'receiver moves to the new rack');
  await page.click('button:text("Pause")');
  await page.waitForSelector('.title-row >> text=paused');

  // An admin token has the Audit page in the navigation.
  await page.waitForSelector('#nav-audit:not([hidden])');
  await page.click('nav >> text=Audit');
  await page.waitForSelector('#audit');
  assert.equal(hash(), '#/audit');
  await page.fill('#f-audit-action', 'job.pause');
  await page.fill('#f-audit-job', id);
  await page.click('button:text("Search")');
  await page.waitForFunction(() => location.hash.includes('action=job.pause') && document.querySelector('#audit tr.audit-entry'));
  const rows = page.locator('#audit tr.audit-entry');
  assert.equal(await rows.count(), 1);
  const row = rows.first();
  assert.equal(await row.getAttribute('data-action'), 'job.pause');
  assert.equal(await row.locator('.audit-reason').textContent(), 'receiver moves to the new rack');
  assert.equal(await row.locator('.audit-actor').textContent(), 'bootstrap token #1');
  assert.match(await row.textContent(), new RegExp(id));
  const entry = (await stack.call('GET', `/v1/audit?action=job.pause&job=${id}`)).body.items[0];
  const detail = page.locator(`#audit-entry-${entry.id}`);
  assert.equal(await detail.isVisible(), false);
  await row.locator('button.audit-toggle').click();
  await detail.waitFor();
  assert.equal(await row.locator('button.audit-toggle').getAttribute('aria-expanded'), 'true');
  assert.match(await detail.textContent(), new RegExp(`Request id${entry.request_id}`));
  assert.match(await detail.locator('li[data-path="paused"]').textContent(), /^paused: false → true$/);
  await shot('audit');

  // Older entries are a page away: more than 50 changes of one job.
  for (let i = 0; i < 26; i++) {
    assert.equal((await stack.call('POST', `/v1/jobs/${id}/resume`)).status, 200);
    assert.equal((await stack.call('POST', `/v1/jobs/${id}/pause`)).status, 200);
  }
  const total = 1 + 1 + 52; // create, the pause above, 26 resumes and pauses
  await page.goto(`${stack.api}/ui/#/audit?job=${id}`);
  await page.waitForSelector('#audit-older');
  const first = await page.$$eval('#audit tr.audit-entry', (trs) => trs.map((tr) => tr.dataset.entry));
  assert.equal(first.length, 50);
  await page.click('#audit-older');
  await page.waitForFunction(() => location.hash.includes('cursor=') && document.querySelector('#audit caption')?.textContent.includes('older page'));
  const second = await page.$$eval('#audit tr.audit-entry', (trs) => trs.map((tr) => tr.dataset.entry));
  assert.equal(first.length + second.length, total);
  assert.ok(Math.min(...first.map(Number)) > Math.max(...second.map(Number)), 'the older page holds older entries');
  assert.match(await page.locator('#audit tr.audit-entry').last().textContent(), /created/);

  // A read token: no Audit in the navigation, and the page says why.
  const reader = await stack.call('POST', '/v1/tokens', { name: 'ui-reader', role: 'read', namespaces: ['*'] });
  assert.equal(reader.status, 201, JSON.stringify(reader.body));
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, locale: 'en-GB', timezoneId: 'UTC' });
  await context.addInitScript((t) => sessionStorage.setItem('cronshard.console.token', t), reader.body.token);
  const other = await context.newPage();
  other.on('pageerror', (e) => pageErrors.push(e.message));
  const probed = other.waitForResponse((r) => r.url().endsWith('/v1/audit?limit=1'));
  await other.goto(`${stack.api}/ui/#/audit`);
  await other.waitForSelector('#audit-forbidden');
  assert.match(await other.textContent('#audit-forbidden'), /for admin tokens.*403/);
  assert.equal((await probed).status(), 403);
  assert.equal(await other.isVisible('#nav-audit'), false, 'no Audit link for a read token');
  assert.equal(await other.isVisible('nav >> text=Alerts'), true);
  await context.close();
  await stack.call('DELETE', `/v1/tokens/${reader.body.id}`);
  await stack.call('DELETE', `/v1/jobs/${id}`);
});

test('alerts: a channel and a rule made on the Alerts page are listed, the address never shown; an incident shows there and on its job', async () => {
  const made = await stack.call('POST', '/v1/jobs', {
    name: 'alert-job',
    paused: true,
    schedule: { kind: 'interval', every_ms: 3_600_000 },
    target: { kind: 'http', url: `${stack.receiver.url}/fail` },
    retry: { max_retries: 0 },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const id = made.body.id;
  const hookPath = `/hooks/ops-${randomBytes(8).toString('hex')}`;
  const hookUrl = `${stack.receiver.url}${hookPath}`;

  await page.goto(`${stack.api}/ui/#/jobs`);
  await page.click('nav >> text=Alerts');
  await page.waitForSelector('#channels-none');
  assert.equal(hash(), '#/alerts');
  assert.equal(await page.isVisible('#f-rule-no-channel'), true, 'the rule form says a channel comes first');

  // The channel: its address is typed into a password field and never shown back.
  assert.equal(await page.getAttribute('#f-ch-url', 'type'), 'password');
  await page.fill('#f-ch-name', 'ops-hook');
  await page.selectOption('#f-ch-kind', 'webhook');
  await page.fill('#f-ch-url', hookUrl);
  await page.click('button:text("Create channel")');
  const channelRow = page.locator('#alert-channels tr[data-name="ops-hook"]');
  await channelRow.waitFor();
  assert.match(await page.textContent('#notice'), /Created the channel ops-hook/);
  assert.match(await channelRow.textContent(), new RegExp(`webhook${stack.receiver.url.replace(/[.]/g, '\\.')}/…`));
  assert.equal(await page.inputValue('#f-ch-url'), '', 'the form forgets the address');
  const channels = (await stack.call('GET', '/v1/alert-channels')).body.items;
  assert.equal(channels.length, 1);
  assert.ok(!JSON.stringify(channels).includes(hookPath), 'the API does not show it either');

  // The rule: the threshold field follows the condition.
  await page.selectOption('#f-rule-condition', 'failed');
  assert.equal(await page.isVisible('#f-rule-threshold'), false, 'failed takes no threshold');
  await page.selectOption('#f-rule-condition', 'late');
  assert.equal(await page.textContent('label[for="f-rule-threshold"]'), 'Late by more than (milliseconds)');
  await page.selectOption('#f-rule-condition', 'silent');
  assert.match(await page.textContent('#f-rule-threshold-hint'), /90 days/);
  await page.selectOption('#f-rule-condition', 'consecutive_failures');
  assert.equal(await page.isVisible('#f-rule-threshold'), true);
  assert.equal(await page.textContent('label[for="f-rule-threshold"]'), 'Failures in a row');
  await page.fill('#f-rule-name', 'ops-failed');
  await page.fill('#f-rule-jobs', id);
  await page.check('#f-rule-channels label:text("ops-hook")');
  // One failure is not "in a row": refused at its field.
  await page.fill('#f-rule-threshold', '1');
  await page.click('button:text("Create rule")');
  await page.waitForSelector('#f-rule-threshold-error:not([hidden])');
  assert.match(await page.textContent('#f-rule-threshold-error'), /from 2 to 1000/);
  assert.equal(await page.getAttribute('#f-rule-threshold', 'aria-invalid'), 'true');
  await page.selectOption('#f-rule-condition', 'failed');
  await page.click('button:text("Create rule")');
  const ruleRow = page.locator('#alert-rules tr[data-name="ops-failed"]');
  await ruleRow.waitFor();
  assert.match(await page.textContent('#notice'), /Created the rule ops-failed: it fires when an execution fails/);
  assert.equal(await ruleRow.locator('.rule-condition').textContent(), 'an execution fails');
  assert.equal(await ruleRow.locator('.rule-channels').textContent(), 'ops-hook');
  assert.match(await ruleRow.textContent(), new RegExp(id));
  assert.equal(await ruleRow.getAttribute('data-enabled'), 'true');
  const rule = (await stack.call('GET', '/v1/alert-rules')).body.items.find((r) => r.name === 'ops-failed');
  assert.deepEqual([rule.condition, rule.threshold, rule.jobs, rule.channels], ['failed', null, [id], [channels[0].id]]);

  // Disable and enable again.
  await ruleRow.locator('button.toggle-rule').click();
  await page.waitForSelector('#alert-rules tr[data-name="ops-failed"][data-enabled="false"]');
  assert.equal((await stack.call('GET', '/v1/alert-rules')).body.items[0].enabled, false);
  await page.locator('#alert-rules tr[data-name="ops-failed"] button.toggle-rule').click();
  await page.waitForSelector('#alert-rules tr[data-name="ops-failed"][data-enabled="true"]');
  assert.equal((await stack.call('GET', '/v1/alert-rules')).body.items[0].enabled, true);

  // The watched job fails: an incident opens and its notice reaches the channel.
  const fired = await stack.call('POST', `/v1/jobs/${id}/trigger`);
  assert.equal(fired.status, 202, JSON.stringify(fired.body));
  const incident = await until('the incident and its delivered notice', async () => {
    const open = (await stack.call('GET', `/v1/alerts?job=${id}&open=true`)).body.items[0];
    return open?.notifications.some((n) => n.state === 'delivered') ? open : null;
  }, 60_000);
  assert.ok(stack.receiver.hits.get(hookPath) >= 1, 'the receiver got the notice');
  await page.click('#alerts-refresh');
  const item = page.locator(`#alert-incidents li[data-incident="${incident.id}"]`);
  await item.waitFor();
  assert.equal(await item.getAttribute('data-open'), 'true');
  assert.equal(await page.getAttribute('#alert-incidents > li:first-child', 'data-open'), 'true', 'open incidents first');
  assert.equal(await item.locator('.incident-summary').textContent(), incident.summary);
  assert.match(incident.summary, /failed/);
  assert.equal(await item.locator('a.incident-job').textContent(), 'alert-job');
  assert.equal(await item.locator('a.incident-job').getAttribute('href'), `#/jobs/${id}`);
  assert.match(await item.locator('li.notice[data-kind="firing"]').textContent(), /Firing notice to ops-hook \(webhook\): .*delivered/);
  await shot('alerts');
  const text = await page.textContent('body');
  assert.ok(!text.includes(hookPath) && !(await page.content()).includes(hookPath), 'the address is nowhere in the page');
  assert.ok(requests.every((r) => !r.url.includes(hookPath)), 'nor in a URL');

  // The job's page shows its open incident.
  await item.locator('a.incident-job').click();
  await page.waitForSelector('#job-alerts li.incident');
  assert.match(await page.textContent('#job-alerts h2'), /Open alert \(1\)/);
  assert.match(await page.textContent('#job-alerts li.incident'), /ops-failed/);
  assert.match(await page.textContent('#job-alerts li.incident'), /delivered/);

  // A channel a rule sends to is not deleted; the rule, then the channel are.
  await page.click('nav >> text=Alerts');
  await page.waitForSelector('#alert-channels');
  page.once('dialog', (d) => d.accept());
  await page.click('#alert-channels tr[data-name="ops-hook"] button.delete-channel');
  await page.waitForSelector('#error:has-text("409")');
  assert.match(await page.textContent('#error'), /HTTP 409.*ops-failed/);
  page.once('dialog', (d) => d.accept());
  await page.click('#alert-rules tr[data-name="ops-failed"] button.delete-rule');
  await page.waitForSelector('#rules-none');
  page.once('dialog', (d) => d.accept());
  await page.click('#alert-channels tr[data-name="ops-hook"] button.delete-channel');
  await page.waitForSelector('#channels-none');
  assert.match(await page.textContent('#notice'), /Deleted the channel ops-hook/);
  assert.deepEqual((await stack.call('GET', '/v1/alert-channels')).body.items, []);
  await stack.call('DELETE', `/v1/jobs/${id}`);
});

test('several cron expressions and a DST rule: the preview lists both occurrences, the form stores them and reads them back', async () => {
  await page.click('nav >> text=Schedule preview');
  await page.fill('#p-expr', '30 2 * * *');
  await page.fill('#p-timezone', 'Europe/Berlin');
  await page.selectOption('#p-dst-repeated', 'both');
  await page.fill('#p-from', '2026-10-25T00:00:00Z');
  await page.fill('#p-count', '3');
  await page.click('button:text("Preview")');
  await page.waitForSelector('#fires');
  // 2026-10-25: 02:30 happens in summer time and again in winter time.
  assert.equal(await page.locator('#fires tr[data-dst="overlap"]').count(), 2, 'the repeated 02:30 fires at both occurrences');
  await page.fill('#p-expr', '0 9 * * MON-FRI\n0 11 * * L');
  await page.click('button:text("Preview")');
  await page.waitForSelector('#p-expr-error:not([hidden])');
  assert.match(await page.textContent('#p-expr-error'), /L alone is not a day/);
  assert.match(await page.textContent('.error-summary'), /schedule\.exprs\[1\]/, 'the summary names the line');

  await createJobViaForm({ name: 'ui-exprs', expr: '0 9 * * MON-FRI\n0 11 * * SAT,SUN', url: `${stack.receiver.url}/ok` });
  await page.fill('#f-schedule-timezone', 'Europe/Berlin');
  await page.selectOption('#f-schedule-dst-repeated', 'last');
  await page.click('button:text("Create job")');
  await page.waitForSelector('#job-schedule');
  const id = hash().split('/')[2];
  const stored = (await stack.call('GET', `/v1/jobs/${id}`)).body;
  assert.deepEqual(stored.schedule, {
    kind: 'cron',
    exprs: ['0 9 * * MON-FRI', '0 11 * * SAT,SUN'],
    timezone: 'Europe/Berlin',
    dst: { repeated: 'last', missing: 'shift' },
  });
  assert.equal(await page.textContent('#job-schedule'), 'cron 0 9 * * MON-FRI | 0 11 * * SAT,SUN (Europe/Berlin; DST: repeated last, missing shift)');
  await page.click('a:text("Edit")');
  await page.waitForSelector('#job-form');
  assert.equal(await page.inputValue('#f-schedule-expr'), '0 9 * * MON-FRI\n0 11 * * SAT,SUN');
  assert.equal(await page.inputValue('#f-schedule-dst-repeated'), 'last');
  assert.equal(await page.inputValue('#f-schedule-dst-missing'), 'shift');
  await page.click('button:text-matches("^Save")');
  await page.waitForSelector('#tl-refresh');
  assert.deepEqual((await stack.call('GET', `/v1/jobs/${id}`)).body.schedule, stored.schedule, 'the schedule round-trips');
  await stack.call('DELETE', `/v1/jobs/${id}`);
});

test('backfill: a preview counts the slots and lists the first ones, Start makes it, it is listed with its progress and cancelled', async () => {
  const made = await stack.call('POST', '/v1/jobs', {
    name: 'ui-backfill',
    schedule: { kind: 'cron', expr: '0 8 * * *', timezone: 'UTC' },
    target: { kind: 'http', url: `${stack.receiver.url}/ok` },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const job = made.body.id;
  await page.goto(`${stack.api}/ui/#/jobs/${job}`);
  await page.click('#backfill-action');
  await page.waitForSelector('#bf-form');
  assert.equal(await page.getAttribute('[role="tab"][aria-selected="true"]', 'id'), 'tab-backfill');
  await page.waitForSelector('#bf-none');

  // The last seven days at 08:00 UTC; one slot a hundred seconds, so it is still running when cancelled.
  const day = 86_400_000;
  const now = Date.now();
  const local = (t) => {
    const d = new Date(t);
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
  };
  await page.fill('#bf-from', local(now - 7 * day));
  await page.fill('#bf-to', local(now - 60_000));
  await page.fill('#bf-rate', '0.01');
  await page.fill('#bf-concurrency', '1');
  assert.equal(await page.isDisabled('#bf-start'), true, 'Start waits for a preview');
  await page.click('#bf-preview-button');
  await page.waitForSelector('#bf-preview-count');
  assert.match(await page.textContent('#bf-preview-count'), /^7 of the 7 slots in the range would run\.$/);
  const first = await page.getAttribute('#bf-preview li:first-child time', 'datetime');
  assert.match(first, /T08:00:00\.000Z$/);
  assert.ok(Date.parse(first) >= now - 7 * day - 60_000 && Date.parse(first) < now - 6 * day, first);
  assert.equal(await page.$$eval('#bf-preview li', (l) => l.length), 7);

  // A refused field is shown at it (the end in the future).
  await page.fill('#bf-to', local(now + day));
  assert.equal(await page.isDisabled('#bf-start'), true, 'a changed request needs a new preview');
  await page.click('#bf-preview-button');
  await page.waitForSelector('#bf-to-error:not([hidden])');
  assert.match(await page.textContent('#bf-to-error'), /future/);
  await page.fill('#bf-to', local(now - 60_000));
  await page.click('#bf-preview-button');
  await page.waitForSelector('#bf-start:not([disabled])');

  await page.click('#bf-start');
  await page.waitForSelector('#bf-table tr[data-state="running"]');
  assert.match(await page.textContent('#bf-table tr[data-state="running"] .bf-progress'), /\/7 slots handled/);
  const listed = await stack.call('GET', `/v1/backfills?job=${job}`);
  assert.equal(listed.body.items.length, 1);
  assert.equal(listed.body.items[0].rate_per_second, 0.01);
  assert.equal(listed.body.items[0].max_concurrency, 1);
  const id = listed.body.items[0].id;
  assert.equal(await page.getAttribute('#bf-table tbody tr', 'data-id'), id);

  page.once('dialog', (d) => d.accept());
  await page.click(`#bf-table tr[data-id="${id}"] .bf-cancel`);
  await page.waitForSelector(`#bf-table tr[data-id="${id}"][data-state="cancelled"]`);
  assert.equal(await page.isVisible(`#bf-table tr[data-id="${id}"] .bf-cancel`), false);
  assert.equal((await stack.call('GET', `/v1/backfills/${id}`)).body.state, 'cancelled');
  await shot('job-backfill');
  await stack.call('DELETE', `/v1/jobs/${job}`);
});

test('a refused token returns to the login; logout forgets the token; the token is never in a URL', async () => {
  await page.evaluate(() => sessionStorage.setItem('cronshard.console.token', 'revoked-token'));
  await page.goto(`${stack.api}/ui/#/cluster`);
  await page.waitForSelector('#login-form');
  assert.match(await page.textContent('#error'), /401/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('cronshard.console.token')), null);
  await page.fill('#token', stack.token);
  await page.press('#token', 'Enter');
  await page.waitForSelector('#nodes');
  assert.equal(hash(), '#/cluster', 'back where the operator was going');
  await page.click('#logout');
  await page.waitForSelector('#login-form');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('cronshard.console.token')), null);
  assert.equal(await page.isVisible('#nav'), false);

  const api = requests.filter((r) => new URL(r.url).pathname.startsWith('/v1/'));
  assert.ok(api.length > 20);
  assert.ok(api.every((r) => r.authorization?.startsWith('Bearer ')), 'every data call carries a token');
  assert.ok(requests.every((r) => !r.url.includes(stack.token)), 'the token never appears in a URL');

  assert.deepEqual(pageErrors, [], 'no script error in the page');

  if (process.env.UI_TEST_SCREENSHOTS_TO_DOCS === '1') {
    const docs = path.join(ROOT, 'docs', 'screenshots');
    mkdirSync(docs, { recursive: true });
    for (const name of DOCS_SHOTS) copyFileSync(path.join(SHOTS, `${name}.png`), path.join(docs, `${name}.png`));
  }
});
