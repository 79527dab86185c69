// End-to-end test of the console's live dashboard (/console#/dashboard) in
// a real browser: Playwright (playwright-core, no test runner) drives
// Debian's chromium through the console of a demo site, and checks that
// the figures come pushed by the broker over one EventSource
// (GET /api/v1/admin/dashboard/events, server-sent events), never by
// polling /metrics; that the per-zone table is hidden on a site of one
// zone and shows once a second zone has a machine; that a launch moves the
// figures without a reload; and that when the admin's session ends the
// dashboard says it is reconnecting, then hands over to the log-on. axe-core
// checks the dashboard; a screenshot of each state is saved
// (dashboard-*.png).
//
// cmd/usher's TestDashboardInBrowser runs it against an `usher serve
// --demo` with simulated VDAs, as console.mjs. By hand, against such a
// site, freshly started:
//
//	BASE_URL=http://127.0.0.1:8080 DEMO_PASSWORD=... node dashboard.mjs
//
// Environment: lib.mjs's (BASE_URL, DEMO_PASSWORD, SCREENSHOT_DIR,
// CHROMIUM, TIMEOUT_MS).
//
// It prints each step's name and outcome, and exits 1 at the first
// failure, after a screenshot of the page as it was
// (dashboard-failure.png).

import assert from 'node:assert/strict';
import {
  api, axe, cssString, fetchJSON, info, newPage, origin, password, run, screenshot, step, timeout,
} from './lib.mjs';

const admin = 'admin';
const machineCount = 57;
const eventsPath = '/api/v1/admin/dashboard/events';
// The second zone the scenario adds, with a catalog and one machine, whose
// VDA never registers.
const branch = { zone: 'branch', catalog: 'branch-office', machine: 'branch-vda-01' };
// A user's launch of an application of the office hosts.
const launcher = 'user0042';
const app = 'office-writer-001';

// ---- the dashboard's parts (its DOM contract) ----

const figureIds = ['m-registered', 'm-unregistered', 'm-maintenance', 's-active', 's-disconnected', 's-pending',
  'launch-rate', 'launch-p99', 'launch-nocap', 'enum-rate', 'enum-p99', 'refused', 'window', 'dashboard-at'];

// figures reads the dashboard's figures, by element id.
function figures(page) {
  return page.evaluate((ids) => Object.fromEntries(ids.map((id) => [id, document.getElementById(id)?.textContent ?? null])), figureIds);
}

// zoneRows reads the per-zone table: zone -> its cells.
function zoneRows(page) {
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#zones tbody tr')].map((tr) => [
    tr.dataset.zone, [...tr.querySelectorAll('td')].map((td) => td.textContent),
  ])));
}

// waitText waits until the element's text is want, and fails saying what
// it shows instead.
async function waitText(page, id, want) {
  await page.waitForFunction(([i, w]) => document.getElementById(i)?.textContent === w, [id, want], { timeout }).catch(async () => {
    assert.fail(`#${id} shows "${await page.evaluate((i) => document.getElementById(i)?.textContent, id)}", not "${want}"`);
  });
}

// waitChange waits until the element's text is neither was nor "-", and
// returns it.
async function waitChange(page, id, was) {
  await page.waitForFunction(([i, w]) => {
    const t = document.getElementById(i)?.textContent;
    return t !== w && t !== '-';
  }, [id, was], { timeout }).catch(() => assert.fail(`#${id} still shows "${was}" after ${timeout} ms`));
  return page.evaluate((i) => document.getElementById(i).textContent, id);
}

// ---- the scenario ----

const ctx = {};

async function scenario() {
  const page = await newPage();
  // Every request the page makes, and the event streams' answers.
  const requests = [];
  const streams = [];
  page.on('request', (req) => requests.push({ type: req.resourceType(), path: new URL(req.url()).pathname, method: req.method() }));
  page.on('response', (resp) => {
    if (new URL(resp.url()).pathname === eventsPath) {
      streams.push({ status: resp.status(), type: resp.headers()['content-type'] ?? '' });
    }
  });

  await step(`${admin} logs on: the dashboard shows ${machineCount} registered machines, pushed over one EventSource`, async () => {
    await page.goto(`${origin}/console`);
    await page.waitForFunction(() => document.body.dataset.rendered === 'logon', null, { timeout });
    await page.getByLabel('Admin name', { exact: true }).fill(admin);
    await page.getByLabel('Password', { exact: true }).fill(password);
    const opened = page.waitForRequest((r) => new URL(r.url()).pathname === eventsPath);
    await page.locator('#logon-submit').click();
    const req = await opened;
    assert.equal(req.resourceType(), 'eventsource', `the dashboard's stream is a ${req.resourceType()} request, not an EventSource`);
    await page.waitForFunction(() => document.body.dataset.view === 'dashboard' && document.body.dataset.rendered === 'dashboard', null, { timeout });
    await waitText(page, 'm-registered', String(machineCount));
    const s = streams.find((x) => x.status === 200);
    assert.ok(s, `no event stream answered 200: ${JSON.stringify(streams)}`);
    assert.match(s.type, /^text\/event-stream/);
    await page.evaluate(() => { window.dashboardE2EMark = true; });
    info(`dashboard: ${Object.entries(await figures(page)).map(([k, v]) => `${k}=${v}`).join(' ')}`);
  });

  await step('one zone: the per-zone table is hidden; screenshot, axe', async () => {
    assert.equal(await page.locator('#zones-wrap').isVisible(), false, 'the per-zone table shows on a site of one zone');
    assert.deepEqual(Object.keys(await zoneRows(page)), ['primary'], 'the hidden table does not hold the one zone');
    await screenshot(page, 'dashboard-one-zone');
    await axe(page, 'console dashboard, one zone');
  });

  await step('the figures keep coming, every 2 s, without a request of the page\'s own', async () => {
    const before = requests.length;
    const at0 = (await figures(page))['dashboard-at'];
    const at1 = await waitChange(page, 'dashboard-at', at0);
    const at2 = await waitChange(page, 'dashboard-at', at1);
    const made = requests.slice(before);
    assert.deepEqual(made, [], `the page made requests while the figures came: ${JSON.stringify(made)}`);
    // The figures are the snapshot's.
    const snap = await api(page, 'GET', '/api/v1/admin/dashboard');
    assert.equal(snap.status, 200, `GET /api/v1/admin/dashboard: ${snap.status} ${snap.text}`);
    assert.equal(snap.json.machines.registered, machineCount);
    info(`figures at ${at0}, ${at1}, then ${at2}; window ${(await figures(page)).window}`);
  });

  await step(`a second zone (${branch.zone}) with a machine: the per-zone table shows both, live; screenshot, axe`, async () => {
    for (const [path, body] of [
      ['/api/v1/admin/zones', { name: branch.zone, description: 'A branch office.' }],
      ['/api/v1/admin/catalogs', { name: branch.catalog, kind: 'multi-session', zone: branch.zone }],
      ['/api/v1/admin/machines', { name: branch.machine, catalog: branch.catalog, address: `${branch.machine}.demo.internal:3389` }],
    ]) {
      const r = await api(page, 'POST', path, body);
      assert.equal(r.status, 201, `POST ${path}: ${r.status} ${r.text}`);
    }
    await page.locator('#zones-wrap').waitFor({ state: 'visible' });
    await waitText(page, 'm-unregistered', '1');
    const rows = await zoneRows(page);
    info(`zones: ${JSON.stringify(rows)}`);
    assert.deepEqual(Object.keys(rows), [branch.zone, 'primary'], 'the zones are not both there, in name order');
    assert.deepEqual(rows[branch.zone].slice(0, 3), ['0', '1', '0'], `${branch.zone}: registered, unregistered, maintenance`);
    assert.deepEqual(rows.primary.slice(0, 3), [String(machineCount), '0', '0'], 'primary: registered, unregistered, maintenance');
    // The table's structure for assistive technology.
    assert.match(await page.locator('#zones caption').textContent(), /zone/i);
    assert.equal(await page.locator('#zones thead th:not([scope="col"])').count(), 0, 'a column header without scope="col"');
    assert.equal(await page.locator('#zones tbody th[scope="row"]').count(), 2, 'the zones are not row headers');
    assert.equal(await page.locator(`#zones tr[data-zone="${cssString(branch.zone)}"] th`).textContent(), branch.zone);
    assert.equal(await page.evaluate(() => window.dashboardE2EMark), true, 'the page was reloaded');
    await screenshot(page, 'dashboard-zones');
    await axe(page, 'console dashboard, two zones');
  });

  await step(`${launcher} launches ${app}: the sessions and the launch rate move, without a reload`, async () => {
    const login = await fetchJSON('POST', '/api/v1/login', { body: { username: launcher, password } });
    assert.equal(login.status, 200, `${launcher}'s logon: ${login.status} ${login.text}`);
    const before = await figures(page);
    const l = await fetchJSON('POST', `/api/v1/resources/${encodeURIComponent(app)}/launch`, { token: login.json.token, body: {} });
    assert.equal(l.status, 200, `${launcher}'s launch of ${app}: ${l.status} ${l.text}`);
    info(`launch: ${launcher} -> ${l.json.machine} (session ${l.json.session_id}); before: active ${before['s-active']}, pending ${before['s-pending']}, launches/s ${before['launch-rate']}`);
    await page.waitForFunction(() => {
      const n = (id) => Number(document.getElementById(id).textContent);
      return n('s-active') + n('s-pending') >= 1 && n('launch-rate') > 0;
    }, null, { timeout }).catch(async () => {
      const now = await figures(page);
      assert.fail(`the dashboard did not move: active ${now['s-active']}, pending ${now['s-pending']}, launches/s ${now['launch-rate']}`);
    });
    const after = await figures(page);
    info(`after: active ${after['s-active']}, pending ${after['s-pending']}, launches/s ${after['launch-rate']}, p99 ${after['launch-p99']} over ${after.window}`);
    assert.match(after['launch-p99'], /^[≤>] [\d.]+ m?s$/, `launch p99 "${after['launch-p99']}"`);
    const rows = await zoneRows(page);
    const primarySessions = rows.primary.slice(3).reduce((a, b) => a + Number(b), 0);
    assert.ok(primarySessions >= 1, `the primary zone's row shows no session: ${rows.primary.join(', ')}`);
    assert.equal(await page.evaluate(() => window.dashboardE2EMark), true, 'the page was reloaded');
    ctx.session = { user: launcher, token: login.json.token, id: l.json.session_id };
    await screenshot(page, 'dashboard-launch');
  });

  await step('trends: the launch, the logon and the session show in this minute\'s bars of the last hour, drawn by the page as inline SVG; screenshot, axe', async () => {
    const doc = (await api(page, 'GET', '/api/v1/admin/dashboard')).json;
    assert.equal(doc.trends.samples.length, 60, `the dashboard's trends have ${doc.trends.samples.length} minutes, not 60`);
    const last = (key) => page.evaluate((k) => {
      const v = document.querySelector(`figure[data-trend="${k}"] svg`)?.dataset.values;
      return v ? v.split(',').map(Number) : null;
    }, key);
    await page.waitForFunction(() => ['launches', 'logons', 'sessions'].every((k) => {
      const v = document.querySelector(`figure[data-trend="${k}"] svg`)?.dataset.values?.split(',').map(Number);
      return v && v.length === 60 && v[59] >= 1;
    }), null, { timeout }).catch(async () => {
      assert.fail(`this minute's bars: launches ${(await last('launches'))?.at(-1)}, logons ${(await last('logons'))?.at(-1)}, sessions ${(await last('sessions'))?.at(-1)}`);
    });
    for (const key of ['launches', 'logons', 'sessions']) {
      const chart = page.locator(`figure[data-trend="${key}"]`);
      assert.ok(await chart.locator('svg rect').count() >= 1, `the ${key} chart draws no bar`);
      assert.match(await chart.locator('svg').getAttribute('aria-label'), /over the last hour/);
      info(`${key}: ${(await chart.locator('figcaption').textContent()).trim()}`);
    }
    // Drawn by the page's own script: no script is from elsewhere (the
    // inline one is axe-core's, which this test injects).
    const elsewhere = await page.evaluate(() => [...document.scripts].map((x) => x.src).filter((src) => src && new URL(src).origin !== location.origin));
    assert.deepEqual(elsewhere, [], 'a script from elsewhere');
    await screenshot(page, 'dashboard-trends');
    await axe(page, 'dashboard with its trends');
  });

  await step('no polling: not one request for /metrics, and the one event stream', async () => {
    const metrics = requests.filter((r) => r.path === '/metrics');
    assert.deepEqual(metrics, [], 'the console asked for /metrics');
    const opened = requests.filter((r) => r.path === eventsPath);
    assert.equal(opened.length, 1, `the event stream was opened ${opened.length} times: ${JSON.stringify(opened)}`);
    assert.equal(opened[0].type, 'eventsource');
    info(`requests: ${requests.length}, of which ${opened.length} event stream, 0 /metrics`);
  });

  await step('the admin\'s session ends (a new password): the dashboard says it is reconnecting, then the log-on takes over', async () => {
    const r = await api(page, 'PUT', `/api/v1/admin/admins/${admin}/password`, { password: `${password}-changed` });
    assert.equal(r.status, 204, `PUT the admin's password: ${r.status} ${r.text}`);
    // The broker ends the stream at its next tick; the EventSource opens
    // it again after 3 s, and is refused.
    await page.locator('#dashboard-note').waitFor({ state: 'visible' });
    const note = (await page.locator('#dashboard-note').textContent()).trim();
    info(`#dashboard-note: "${note}"`);
    assert.match(note, /reconnecting/i);
    assert.equal(await page.locator('#dashboard-note').getAttribute('role'), 'status');
    await screenshot(page, 'dashboard-reconnecting');
    await page.waitForFunction(() => document.body.dataset.view === 'logon', null, { timeout });
    const ended = (await page.locator('#logon-note').textContent()).trim();
    info(`#logon-note: "${ended}"`);
    assert.match(ended, /ended/i);
    assert.ok(streams.some((s) => s.status === 401), `no event stream was refused with 401: ${JSON.stringify(streams)}`);
    // The stream stays closed: no more attempts once the log-on shows.
    const count = requests.filter((x) => x.path === eventsPath).length;
    await page.waitForTimeout(4000);
    assert.equal(requests.filter((x) => x.path === eventsPath).length, count, 'the event stream is tried again after the log-on took over');
    await screenshot(page, 'dashboard-session-ended');

    const off = await fetchJSON('POST', `/api/v1/sessions/${encodeURIComponent(ctx.session.id)}/logoff`, { token: ctx.session.token });
    assert.ok(off.status < 300, `${ctx.session.user}'s logoff: ${off.status} ${off.text}`);
  });
}

run('dashboard e2e', 'dashboard-failure', scenario);
