// The console as a person uses it, in Debian's Chromium driven by
// Playwright, against a real stack (stack.js): sign in with the token (by
// keyboard), walk the jobs list by keyboard, create a job (an invalid
// expression first: the error shows at the field), watch its slots appear,
// explain one, see a failing job's slot fail, replay it from the Failures
// page, and look at the cluster (node, worker, lateness chart) and a
// schedule preview. A screenshot of each page goes to the run directory
// (UI_TEST_RUN_DIR, default .run/ui-tests/<time>/screenshots); with
// UI_TEST_SCREENSHOTS_TO_DOCS=1 the key ones are copied to docs/screenshots/.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

import { startStack, until } from './stack.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const RUN_DIR = process.env.UI_TEST_RUN_DIR || path.join(ROOT, '.run', 'ui-tests', new Date().toISOString().replace(/[:.]/g, '-'));
const SHOTS = path.join(RUN_DIR, 'screenshots');
const DOCS_SHOTS = ['jobs', 'job-form-error', 'job-timeline', 'timeline-outcomes', 'slot-explain', 'failures', 'cluster', 'preview'];
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
  // The pause asks why; the note and who paused are stored and shown.
  page.once('dialog', (d) => d.accept('receiver maintenance'));
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
