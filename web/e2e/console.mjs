// End-to-end test of usher's admin console (/console) in a real browser:
// Playwright (playwright-core, no test runner) drives Debian's chromium
// through the console of a demo site, checks its pages and its confirm
// dialog with axe-core, and saves a screenshot of each (console-*.png).
// Users' launches and log-offs go straight to the user API from node, as
// the users' clients would.
//
// cmd/usher's TestConsoleInBrowser runs it against an `usher serve --demo`
// with simulated VDAs and per-address throttling off, as portal.mjs. To
// run it by hand against such a site, freshly started (it counts on the
// pooled desktops being free):
//
//	BASE_URL=http://127.0.0.1:8080 DEMO_PASSWORD=... node console.mjs
//
// Environment: lib.mjs's (BASE_URL, DEMO_PASSWORD, SCREENSHOT_DIR,
// CHROMIUM, TIMEOUT_MS).
//
// It prints each step's name and outcome, and exits 1 at the first
// failure, after a screenshot of the page as it was (console-failure.png).

import assert from 'node:assert/strict';
import {
  api, axe, cssString, fetchJSON, info, newPage, origin, password, run, screenshot, showOnFailure, step, timeout,
} from './lib.mjs';

// The demo's admin, and the demo site's objects the scenario uses.
const admin = 'admin';
const machineCount = 57;
// A user refused by the console.
const plainUser = 'user0002';
// The maintenance check launches the pooled desktops, single-session
// machines for engineering (user0001-user0200): with one of them in
// maintenance, launches fill the others and the next is refused, which
// shows that the broker would have used it. Users of their own, one a
// launch.
const pooledDesktop = 'Pooled Linux Desktop';
const pooledCatalog = 'vdi-pooled';
const pooledUsers = Array.from({ length: 10 }, (_, i) => `user${String(101 + i).padStart(4, '0')}`);

// ---- the console's parts (its DOM contract) ----

const logonView = (page) => page.locator('#view-logon');
const logonError = (page) => page.locator('#logon-error');
const machineRows = (page) => page.locator('#machines tbody tr[data-machine]');
const machineRow = (page, name) => page.locator(`#machines tr[data-machine="${cssString(name)}"]`);
// The maintenance button's name is its visible text, the action ("Put in
// maintenance" or "Return to service"), then ": NAME"; the row's
// data-maintenance says the machine's state.
const maintenanceToggle = (page, name) => machineRow(page, name).getByRole('button', { name: new RegExp(`: ${reEscape(name)}$`) });
const inMaintenance = (page, name) => machineRow(page, name).getAttribute('data-maintenance');

// confirmInView confirms the console's own dialog (never window.confirm,
// which fails the test: the page has no dialog handler), saying okLabel.
async function confirmInView(page, title, okLabel) {
  const dlg = confirmDialog(page);
  await dlg.waitFor({ state: 'visible' });
  assert.match(await text(dlg.locator('#confirm-title')), title);
  assert.equal(await text(dlg.locator('#confirm-ok')), okLabel);
  await dlg.locator('#confirm-ok').click();
  await dlg.waitFor({ state: 'hidden' });
}
const sessionRows = (page) => page.locator('#csessions tbody tr[data-session]');
const sessionRow = (page, id) => page.locator(`#csessions tr[data-session="${cssString(id)}"]`);
const confirmDialog = (page) => page.locator('dialog#confirm');
const resultBox = (page) => page.locator('#result');

// rendered waits until the console shows view (body's data-view) and
// says it rendered it (data-rendered).
async function rendered(page, view) {
  await page.waitForFunction((v) => document.body.dataset.view === v && document.body.dataset.rendered === v, view, { timeout });
}

// forgetRendered clears body's data-rendered, so that the next render can
// be waited for.
function forgetRendered(page) {
  return page.evaluate(() => document.body.removeAttribute('data-rendered'));
}

// loggedOut waits for the logon form, with no navigation and no admin
// name in the header.
async function loggedOut(page) {
  await logonView(page).waitFor({ state: 'visible' });
  await page.waitForFunction(() => document.body.dataset.view === 'logon', null, { timeout });
  assert.equal(await page.locator('#nav').isVisible(), false, 'the navigation shows while logged out');
  assert.equal(await page.locator('#who').isVisible(), false, 'the header\'s Log off shows while logged out');
}

// submitLogon fills the logon form and submits it, and returns the
// answer to POST /api/v1/admin/tokens.
async function submitLogon(page, name, pw) {
  await page.locator('#logon').getByLabel('Admin name', { exact: true }).fill(name);
  await page.locator('#logon').getByLabel('Password', { exact: true }).fill(pw);
  const answered = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/api/v1/admin/tokens');
  await page.locator('#logon-submit').click();
  return answered;
}

// logOn logs the admin on through the form; the console then routes to
// the view it was asked for.
async function logOn(page) {
  const resp = await submitLogon(page, admin, password);
  assert.equal(resp.status(), 201, `the admin's logon answered ${resp.status()}`);
  await page.locator('#who').waitFor({ state: 'visible' });
}

// reEscape escapes s for a regular expression.
function reEscape(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

// text is an element's text with its white space folded.
async function text(locator) {
  return (await locator.textContent()).replace(/\s+/g, ' ').trim();
}

// resultSays waits for #result to show and match re, and returns its text.
async function resultSays(page, re) {
  await resultBox(page).waitFor({ state: 'visible' });
  await page.waitForFunction(([src, flags]) => new RegExp(src, flags).test(document.querySelector('#result')?.textContent ?? ''),
    [re.source, re.flags], { timeout });
  return text(resultBox(page));
}

// adminMachine reads a machine through the admin API from the page.
async function adminMachine(page, name) {
  const r = await api(page, 'GET', `/api/v1/admin/machines/${encodeURIComponent(name)}`);
  assert.equal(r.status, 200, `GET /api/v1/admin/machines/${name}: ${r.status} ${r.text}`);
  return r.json;
}

// until polls cond every 200 ms until it returns something truthy, and
// returns that; it fails after the timeout, saying what it waited for.
async function until(what, cond) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const v = await cond();
    if (v) {
      return v;
    }
    assert.ok(Date.now() < deadline, `timed out after ${timeout} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

// ---- users, from node ----

const tokens = new Map();
// The passwords of users the test makes; the demo's users have the demo's.
const passwords = new Map();

// userToken logs a demo user on to the user API (a bearer token, no
// cookie) once, and returns the token. It is never printed.
async function userToken(user) {
  if (!tokens.has(user)) {
    const r = await fetchJSON('POST', '/api/v1/login', { body: { username: user, password: passwords.get(user) ?? password } });
    assert.equal(r.status, 200, `${user}'s logon to the user API answered ${r.status} ${r.text}`);
    tokens.set(user, r.json.token);
  }
  return tokens.get(user);
}

// launch launches resource as user, and returns the status and, for a
// launch, its session and machine (never its ticket), or the error code.
async function launch(user, resource) {
  const r = await fetchJSON('POST', `/api/v1/resources/${encodeURIComponent(resource)}/launch`, { token: await userToken(user), body: {} });
  if (r.status !== 200) {
    return { user, status: r.status, code: r.json?.error?.code ?? r.text };
  }
  return { user, status: r.status, session: r.json.session_id, machine: r.json.machine };
}

// ownSession returns user's session id as the user API lists it, or
// undefined when it lists it no more.
async function ownSession(user, id) {
  const r = await fetchJSON('GET', '/api/v1/sessions', { token: await userToken(user) });
  assert.equal(r.status, 200, `${user}'s GET /api/v1/sessions: ${r.status} ${r.text}`);
  return r.json.sessions.find((s) => s.id === id);
}

function describe(l) {
  return l.status === 200 ? `${l.user} -> ${l.machine} (session ${l.session})` : `${l.user} -> ${l.status} ${l.code}`;
}

// ---- the scenario ----

const ctx = {}; // what later steps need from earlier ones

async function scenario() {
  const page = await newPage();

  await step('console logon page: the form, no failing request, no inline scripts, screenshot, axe', async () => {
    const failures = [];
    const onResponse = (r) => { if (r.status() >= 400) failures.push(`${r.request().method()} ${new URL(r.url()).pathname}: ${r.status()}`); };
    page.on('response', onResponse);
    try {
      await page.goto(`${origin}/console`);
      await loggedOut(page);
      await rendered(page, 'logon');
      await page.waitForLoadState('networkidle');
    } finally {
      page.off('response', onResponse);
    }
    assert.deepEqual(failures, [], 'the console logged off made failing requests while loading');
    assert.equal(await page.locator('#logon').getByLabel('Password', { exact: true }).getAttribute('type'), 'password');
    const scripts = await page.evaluate(() => [...document.scripts].map((s) => s.src || `inline: ${s.textContent.slice(0, 60)}`));
    for (const s of scripts) {
      assert.ok(!s.startsWith('inline'), `the console has an inline script (${s})`);
      assert.ok(new URL(s).pathname.startsWith('/portal/'), `script ${s} is not under /portal/`);
    }
    info(`scripts: ${scripts.map((s) => new URL(s).pathname).join(', ')}`);
    await screenshot(page, 'console-logon');
    await axe(page, 'console logon page');
  });

  await step(`a user (${plainUser}) is refused: the logon form says so, no admin data, and their cookie gets 401`, async () => {
    const adminAnswers = [];
    const onResponse = (resp) => {
      const p = new URL(resp.url()).pathname;
      if (p.startsWith('/api/v1/admin/')) {
        adminAnswers.push({ what: `${resp.request().method()} ${p}`, status: resp.status() });
      }
    };
    page.on('response', onResponse);
    try {
      // The user logs on to the portal's API from a page of the site, as
      // the portal does: an HttpOnly usher_session cookie.
      const login = await api(page, 'POST', '/api/v1/login', { username: plainUser, password, session_cookie: true });
      assert.equal(login.status, 200, `${plainUser}'s portal logon answered ${login.status} ${login.text}`);
      const cookies = await page.context().cookies(origin);
      assert.ok(cookies.some((c) => c.name === 'usher_session'), 'no usher_session cookie after the user\'s logon');
      for (const p of ['/api/v1/admin/machines', '/api/v1/admin/sessions', '/api/v1/admin/settings']) {
        const r = await api(page, 'GET', p);
        assert.equal(r.status, 401, `GET ${p} with ${plainUser}'s portal cookie answered ${r.status}`);
      }
      info(`GET /api/v1/admin/{machines,sessions,settings} with ${plainUser}'s portal cookie: 401`);

      // With that cookie, the console asks for an admin's logon...
      await page.reload();
      await loggedOut(page);
      await rendered(page, 'logon');
      // ...and refuses the user's name and password.
      const resp = await submitLogon(page, plainUser, password);
      assert.equal(resp.status(), 401, `the console logon of ${plainUser} answered ${resp.status()}`);
      await page.waitForFunction(() => /administrators|wrong admin name/i.test(document.querySelector('#logon-error')?.textContent ?? ''), null, { timeout });
      const alert = logonError(page);
      assert.equal(await alert.getAttribute('role'), 'alert', '#logon-error has no role="alert"');
      info(`#logon-error: "${await text(alert)}"`);
      await page.waitForTimeout(300); // for anything the refusal might go on to load

      await loggedOut(page);
      assert.equal(await page.evaluate(() => document.body.dataset.rendered), 'logon');
      const after = await page.context().cookies(origin);
      assert.ok(!after.some((c) => c.name === 'usher_admin' && c.value !== ''), `an usher_admin cookie after ${plainUser}'s console logon`);
      assert.equal(await machineRows(page).count(), 0, 'machine rows are there');
      assert.equal(await sessionRows(page).count(), 0, 'session rows are there');
      assert.equal(await text(page.locator('#m-registered')), '-', 'the dashboard has figures');
      assert.equal(await text(page.locator('#admin-name')), '', 'the header names an admin');
      for (const a of adminAnswers) {
        assert.ok(a.status === 401 || a.status === 403, `the console got an admin API answer with ${plainUser}'s credentials: ${a.what} ${a.status}`);
      }
      info(`admin API answers the page saw: ${adminAnswers.map((a) => `${a.what} ${a.status}`).join(', ')}`);
      await screenshot(page, 'console-logon-refused');
      await axe(page, 'console logon page, refused');
    } finally {
      page.off('response', onResponse);
    }
  });

  await step(`${admin} logs on: the dashboard shows ${machineCount} registered machines; the cookie is HttpOnly, SameSite=Strict`, async () => {
    await forgetRendered(page);
    await logOn(page);
    await rendered(page, 'dashboard');
    assert.equal(new URL(page.url()).hash, '#/dashboard');
    assert.equal(await logonView(page).isVisible(), false, 'the logon form still shows');
    assert.equal(await page.locator('#nav-dashboard').getAttribute('aria-current'), 'page');
    await page.waitForFunction((n) => document.querySelector('#m-registered')?.textContent === String(n), machineCount, { timeout: 5000 })
      .catch(async () => assert.fail(`#m-registered shows "${await text(page.locator('#m-registered'))}", not ${machineCount}, after 5 s`));
    const tiles = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('.tiles dd[id]')].map((d) => [d.id, d.textContent])));
    info(`dashboard: ${Object.entries(tiles).map(([k, v]) => `${k}=${v}`).join(' ')}`);

    const cookies = await page.context().cookies(origin);
    const c = cookies.find((x) => x.name === 'usher_admin');
    assert.ok(c, `no usher_admin cookie; cookies: ${cookies.map((x) => x.name).join(', ')}`);
    assert.equal(c.httpOnly, true, 'usher_admin is not HttpOnly');
    assert.equal(c.sameSite, 'Strict', `usher_admin is SameSite=${c.sameSite}`);
    assert.equal(await page.evaluate(() => document.cookie.includes('usher_admin')), false, 'document.cookie shows usher_admin');
    await screenshot(page, 'console-dashboard');
    await axe(page, 'console dashboard');
  });

  await step('a launch shows on the dashboard without a reload', async () => {
    await page.evaluate(() => { window.consoleE2EMark = true; });
    const before = await page.evaluate(() => ['s-active', 's-pending', 'launch-rate'].map((id) => document.getElementById(id).textContent));
    info(`before: active ${before[0]}, pending ${before[1]}, launches/s ${before[2]}`);
    const l = await launch(pooledUsers[0], pooledDesktop);
    assert.equal(l.status, 200, `${pooledUsers[0]}'s launch of ${pooledDesktop}: ${describe(l)}`);
    info(`launch: ${describe(l)}`);
    ctx.first = l;
    ctx.m = l.machine; // M: the machine the next steps put in maintenance
    await page.waitForFunction(() => {
      const n = (id) => Number(document.getElementById(id).textContent);
      return n('s-active') + n('s-pending') > 0 && n('launch-rate') > 0;
    }, null, { timeout }).catch(async () => {
      const now = await page.evaluate(() => ['s-active', 's-pending', 'launch-rate'].map((id) => document.getElementById(id).textContent));
      assert.fail(`the dashboard did not move: active ${now[0]}, pending ${now[1]}, launches/s ${now[2]}`);
    });
    const after = await page.evaluate(() => ['s-active', 's-pending', 'launch-rate', 'launch-p99', 'window'].map((id) => document.getElementById(id).textContent));
    info(`after: active ${after[0]}, pending ${after[1]}, launches/s ${after[2]}, p99 ${after[3]} over ${after[4]}`);
    assert.equal(await page.evaluate(() => window.consoleE2EMark), true, 'the page was reloaded');
    await screenshot(page, 'console-dashboard-launch');

    // The user logs that session off: M is free again.
    const r = await fetchJSON('POST', `/api/v1/sessions/${encodeURIComponent(l.session)}/logoff`, { token: await userToken(l.user) });
    assert.ok(r.status < 300, `${l.user}'s logoff of ${l.session} answered ${r.status} ${r.text}`);
  });

  await step(`machines: ${machineCount} rows, the filter narrows them, a column header sorts and sets aria-sort`, async () => {
    await page.locator('#nav-machines').click();
    // Not data-rendered: a dashboard refresh still on its way when the
    // view changed may set it to "dashboard" after the machines' render.
    await page.waitForFunction((n) => document.body.dataset.view === 'machines' &&
      document.querySelectorAll('#machines tbody tr[data-machine]').length === n, machineCount, { timeout });
    assert.equal(new URL(page.url()).hash, '#/machines');
    assert.equal(await page.locator('#nav-machines').getAttribute('aria-current'), 'page');
    assert.equal(await text(page.locator('#machine-count')), `${machineCount} machines`);
    const all = (await api(page, 'GET', '/api/v1/admin/machines?limit=1000')).json.items;
    assert.equal(all.length, machineCount, `the admin API lists ${all.length} machines`);
    ctx.pooled = all.filter((m) => m.catalog === pooledCatalog).map((m) => m.name).sort();
    assert.ok(ctx.pooled.includes(ctx.m), `${ctx.m} is not one of the ${pooledCatalog} machines: ${ctx.pooled.join(', ')}`);
    const names = () => machineRows(page).evaluateAll((els) => els.map((el) => el.dataset.machine));
    const shown = await names();
    assert.deepEqual([...shown].sort(), all.map((m) => m.name).sort(), 'the rows are not the admin API\'s machines');
    assert.deepEqual(shown, [...shown].sort((a, b) => a.localeCompare(b)), 'the rows are not sorted by name at first');
    assert.equal(await page.locator('th:has(button[data-sort="name"])').getAttribute('aria-sort'), 'ascending');

    // The filter.
    const filter = page.locator('#view-machines').getByLabel('Filter', { exact: true });
    await filter.fill('pooled');
    await page.waitForFunction((n) => document.querySelectorAll('#machines tbody tr[data-machine]').length === n, ctx.pooled.length, { timeout });
    assert.deepEqual((await names()).sort(), ctx.pooled, 'the filter "pooled" shows other machines');
    assert.equal(await text(page.locator('#machine-count')), `${ctx.pooled.length} of ${machineCount} machines`);
    info(`filter "pooled": ${(await names()).join(', ')}`);
    await filter.fill('');
    await page.waitForFunction((n) => document.querySelectorAll('#machines tbody tr[data-machine]').length === n, machineCount, { timeout });

    // Sorting by catalog, then the other way.
    const catalogs = () => page.locator('#machines tbody tr[data-machine] td:nth-child(2)').allTextContents();
    const catalogHeader = page.locator('th:has(button[data-sort="catalog"])');
    const cmp = (a, b) => a.localeCompare(b);
    await catalogHeader.locator('button[data-sort="catalog"]').click();
    await page.waitForFunction(() => document.querySelector('th:has(button[data-sort="catalog"])')?.getAttribute('aria-sort') === 'ascending', null, { timeout });
    let cs = await catalogs();
    assert.deepEqual(cs, [...cs].sort(cmp), 'sorted by catalog, ascending, the rows are not');
    assert.equal(await page.locator('th:has(button[data-sort="name"])').getAttribute('aria-sort'), null, 'the Name column still has aria-sort');
    assert.equal(await page.locator('th[aria-sort]').count(), 1, 'more than one column has aria-sort');
    await catalogHeader.locator('button[data-sort="catalog"]').click();
    await page.waitForFunction(() => document.querySelector('th:has(button[data-sort="catalog"])')?.getAttribute('aria-sort') === 'descending', null, { timeout });
    cs = await catalogs();
    assert.deepEqual(cs, [...cs].sort(cmp).reverse(), 'sorted by catalog, descending, the rows are not');
    info(`catalog descending: first ${cs[0]}, last ${cs[cs.length - 1]}`);
    await screenshot(page, 'console-machines');
    await axe(page, 'console machines page');
  });

  await step('maintenance: M goes into maintenance through its toggle, and the next launches avoid it', async () => {
    const m = ctx.m;
    info(`M = ${m}, one of ${ctx.pooled.length} ${pooledCatalog} machines`);
    await page.locator('#view-machines').getByLabel('Filter', { exact: true }).fill(m);
    await page.waitForFunction(() => document.querySelectorAll('#machines tbody tr[data-machine]').length === 1, null, { timeout });
    const toggle = maintenanceToggle(page, m);
    assert.equal(await inMaintenance(page, m), 'false', `${m} shows as in maintenance already`);
    assert.match(await text(toggle), /^Put in maintenance\b/);
    assert.match(await text(machineRow(page, m).locator('td.maintenance .state')), /^In service$/);
    // Cancelled in the dialog, nothing is sent.
    let puts = 0;
    const countPuts = (r) => { if (r.method() === 'PUT') puts++; };
    page.on('request', countPuts);
    await toggle.click();
    await confirmDialog(page).waitFor({ state: 'visible' });
    await axe(page, 'console maintenance confirmation');
    await confirmDialog(page).locator('#confirm-cancel').click();
    await confirmDialog(page).waitFor({ state: 'hidden' });
    page.off('request', countPuts);
    assert.equal(puts, 0, 'a cancelled maintenance change was sent');
    assert.equal(await inMaintenance(page, m), 'false', `${m} went into maintenance although the admin cancelled`);
    const put = page.waitForResponse((r) => r.request().method() === 'PUT' && new URL(r.url()).pathname === `/api/v1/admin/machines/${m}`);
    await toggle.click();
    await confirmInView(page, new RegExp(`^Put ${reEscape(m)} in maintenance\\?$`), 'Put in maintenance');
    const resp = await put;
    assert.equal(resp.status(), 200, `PUT /api/v1/admin/machines/${m} answered ${resp.status()}`);
    await page.waitForFunction((sel) => document.querySelector(sel)?.dataset.maintenance === 'true',
      `#machines tr[data-machine="${cssString(m)}"]`, { timeout });
    assert.match(await text(maintenanceToggle(page, m)), /^Return to service\b/);
    assert.match(await text(machineRow(page, m).locator('td.maintenance .state')), /^In maintenance$/);
    const said = await resultSays(page, new RegExp(`${reEscape(m)}.*maintenance`));
    assert.equal(await resultBox(page).getAttribute('role'), 'status');
    info(`#result: "${said}"`);
    assert.equal((await adminMachine(page, m)).maintenance, true, `the admin API does not show ${m} in maintenance`);
    await screenshot(page, 'console-machine-maintenance');

    // As many launches as there are pooled desktops, one a user: all but
    // the last find a machine, never M; the last finds none.
    const launches = [];
    for (const user of pooledUsers.slice(1, 1 + ctx.pooled.length)) {
      const l = await launch(user, pooledDesktop);
      info(`launch: ${describe(l)}`);
      launches.push(l);
    }
    const ok = launches.filter((l) => l.status === 200);
    assert.deepEqual(ok.filter((l) => l.machine === m).map(describe), [], `launches landed on ${m}, in maintenance`);
    assert.equal(new Set(ok.map((l) => l.machine)).size, ok.length, 'two launches share a single-session machine');
    assert.equal(ok.length, ctx.pooled.length - 1, `${ok.length} of ${launches.length} launches found a machine; ` +
      `${ctx.pooled.length - 1} machines are in service`);
    const refused = launches.filter((l) => l.status !== 200);
    assert.equal(refused.length, 1);
    assert.equal(refused[0].status, 503, `the launch with every machine but ${m} taken: ${describe(refused[0])}`);
    ctx.launches = ok;
  });

  await step('maintenance: M back in service through its toggle, and a launch takes it', async () => {
    const m = ctx.m;
    const put = page.waitForResponse((r) => r.request().method() === 'PUT' && new URL(r.url()).pathname === `/api/v1/admin/machines/${m}`);
    await maintenanceToggle(page, m).click();
    await confirmInView(page, new RegExp(`^Return ${reEscape(m)} to service\\?$`), 'Return to service');
    assert.equal((await put).status(), 200);
    await page.waitForFunction((sel) => document.querySelector(sel)?.dataset.maintenance === 'false',
      `#machines tr[data-machine="${cssString(m)}"]`, { timeout });
    assert.match(await text(maintenanceToggle(page, m)), /^Put in maintenance\b/);
    info(`#result: "${await resultSays(page, new RegExp(`${reEscape(m)}.*back in service`))}"`);
    assert.equal((await adminMachine(page, m)).maintenance ?? false, false, `the admin API shows ${m} in maintenance still`);
    // The first launch's session, logged off, has left M.
    await until(`${m} to have no session`, async () => ((await adminMachine(page, m)).sessions ?? 0) === 0);
    // Every other pooled desktop is taken: a refusal can only mean that
    // the broker has not heard yet; it is tried again until the timeout.
    const user = pooledUsers[1 + ctx.pooled.length];
    let l;
    await until(`a launch by ${user} to find a machine`, async () => {
      l = await launch(user, pooledDesktop);
      info(`launch: ${describe(l)}`);
      return l.status !== 503;
    });
    assert.equal(l.status, 200, `the launch with ${m} back in service: ${describe(l)}`);
    assert.equal(l.machine, m, `the launch went to ${l.machine}; ${m}, back in service, is the only free machine`);
    ctx.onM = l;
    await page.locator('#view-machines').getByLabel('Filter', { exact: true }).fill('');
  });

  await step('machines: at phone width, hyphenated machine and catalog names keep one line box each', async () => {
    const wide = page.viewportSize();
    await page.setViewportSize({ width: 360, height: 740 });
    try {
      await page.locator('#view-machines').getByLabel('Filter', { exact: true }).fill('');
      await page.waitForFunction((n) => document.querySelectorAll('#machines tbody tr[data-machine]').length === n, machineCount, { timeout });
      const lines = () => page.locator('#machines tbody span.name').evaluateAll((els) =>
        els.filter((el) => el.textContent.includes('-')).map((el) => [el.textContent, el.getClientRects().length]));
      const got = await lines();
      assert.ok(got.length >= machineCount, `only ${got.length} hyphenated names in the machines table`);
      const wrapped = got.filter(([, n]) => n !== 1);
      assert.deepEqual(wrapped, [], 'names wrap');
      // The check can fail: with white-space back to normal, the narrow
      // table does break names at their hyphens.
      // (Through the CSSOM: the page's CSP refuses a style element.)
      const setWrap = (v) => page.locator('#machines tbody span.name').evaluateAll((els, w) => { for (const el of els) el.style.whiteSpace = w; }, v);
      await setWrap('normal');
      const loose = (await lines()).filter(([, n]) => n > 1);
      await setWrap('');
      assert.ok(loose.length > 0, 'no name wraps at 360 px even without nowrap: the check proves nothing');
      info(`at 360 px: ${got.length} names on one line each; ${loose.length} would wrap without nowrap`);
      await screenshot(page, 'console-machines-phone');
    } finally {
      await page.setViewportSize(wide);
    }
  });

  await step('brokers: the Brokers page lists this broker, up, its zone\'s leader, with no Local Host Cache; axe', async () => {
    await page.locator('#nav-brokers').click();
    await rendered(page, 'brokers');
    assert.equal(new URL(page.url()).hash, '#/brokers');
    const listed = (await api(page, 'GET', '/api/v1/admin/brokers')).json.items;
    assert.equal(listed.length, 1, `an all-in-one serve lists ${listed.length} brokers`);
    const b = listed[0];
    assert.equal(b.self, true);
    const row = page.locator(`#brokers tr[data-broker="${cssString(b.name)}"]`);
    const cells = await row.locator('td').evaluateAll((tds) => tds.map((td) => td.textContent.trim()));
    info(`brokers: ${cells.join(' | ')}`);
    assert.deepEqual(cells.slice(0, 6), [`${b.name} (this broker)`, b.zone, b.address, 'up', 'yes', 'none (embedded site DB)']);
    assert.equal(await text(page.locator('#broker-count')), '1 broker, 1 up');
    await screenshot(page, 'console-brokers');
    await axe(page, 'console brokers page');
  });

  await step('machines: every row shows its catalog\'s zone, and M\'s "Sessions" link lists the sessions on M', async () => {
    await page.locator('#nav-machines').click();
    await page.waitForFunction((n) => document.body.dataset.view === 'machines' && document.body.dataset.rendered === 'machines' &&
      document.querySelectorAll('#machines tbody tr[data-machine]').length === n, machineCount, { timeout });
    const zones = await page.locator('#machines tbody tr[data-machine] td:nth-child(3)').allTextContents();
    assert.deepEqual([...new Set(zones)], ['primary'], `the zone column shows ${[...new Set(zones)].join(', ')}`);
    await forgetRendered(page);
    await machineRow(page, ctx.m).getByRole('link', { name: `Sessions on ${ctx.m}`, exact: true }).click();
    await page.waitForFunction(() => document.body.dataset.view === 'sessions' && document.body.dataset.rendered === 'sessions', null, { timeout });
    assert.equal(new URL(page.url()).hash, `#/sessions/machine/${encodeURIComponent(ctx.m)}`);
    assert.equal(await page.locator('#session-search').getByLabel('Machine', { exact: true }).inputValue(), ctx.m);
    const onM = await sessionRows(page).evaluateAll((els) => els.map((el) => el.dataset.session));
    assert.deepEqual(onM, [ctx.onM.session], `the sessions listed for ${ctx.m}: ${onM.join(', ')}`);
    await page.locator('#session-search').getByLabel('Machine', { exact: true }).fill('');
    // So that the next step waits for its own list, not this one.
    await forgetRendered(page);
  });

  await step('sessions: the search by user, by machine and by group finds the test\'s sessions; screenshot, axe', async () => {
    await page.locator('#nav-sessions').click();
    await page.waitForFunction(() => document.body.dataset.view === 'sessions' && document.body.dataset.rendered === 'sessions', null, { timeout });
    assert.equal(new URL(page.url()).hash, '#/sessions');
    const listed = await sessionRows(page).evaluateAll((els) => els.map((el) => el.dataset.session));
    for (const l of [...ctx.launches, ctx.onM]) {
      assert.ok(listed.includes(l.session), `session ${l.session} of ${l.user} is not listed: ${listed.join(', ')}`);
    }
    assert.ok(!listed.includes(ctx.first.session), `session ${ctx.first.session}, logged off, is listed`);
    info(`${listed.length} live sessions listed; #session-count: "${await text(page.locator('#session-count'))}"`);

    const target = ctx.launches[0];
    await search(page, { user: target.user });
    const rows = await sessionRows(page).evaluateAll((els) => els.map((el) => ({
      id: el.dataset.session, cells: [...el.querySelectorAll('td')].map((td) => td.textContent.trim()),
    })));
    assert.deepEqual(rows.map((r) => r.id), [target.session], `the search for ${target.user} found ${JSON.stringify(rows)}`);
    const [user, resource, machine, state] = rows[0].cells;
    info(`${target.user}: ${rows[0].cells.slice(0, 5).join(' | ')}`);
    // The user and the resource show by their display names, their
    // names after them when they differ.
    const u = (await api(page, 'GET', `/api/v1/admin/users/${target.user}`)).json;
    const wantUser = u.display_name && u.display_name !== target.user ? `${u.display_name} ${target.user}` : target.user;
    assert.deepEqual([user, resource, machine], [wantUser, pooledDesktop, target.machine]);
    assert.match(state, /^(active|pending)$/);

    await search(page, { machine: ctx.m });
    const onM = await sessionRows(page).evaluateAll((els) => els.map((el) => el.dataset.session));
    assert.deepEqual(onM, [ctx.onM.session], `the search for sessions on ${ctx.m} found ${onM.join(', ')}`);

    // By group: the pooled desktops' users are engineering's; finance has
    // none of them.
    await search(page, { group: 'engineering' });
    const eng = await sessionRows(page).evaluateAll((els) => els.map((el) => el.dataset.session));
    assert.deepEqual([...eng].sort(), [...ctx.launches, ctx.onM].map((l) => l.session).sort(), `the search for engineering's sessions found ${eng.join(', ')}`);
    const engUser = (await api(page, 'GET', `/api/v1/admin/users/${ctx.onM.user}`)).json;
    assert.ok(engUser.groups.includes('engineering'), `${ctx.onM.user} is not in engineering: ${JSON.stringify(engUser.groups)}`);
    await search(page, { group: 'helpdesk', user: ctx.onM.user });
    assert.equal(await sessionRows(page).count(), engUser.groups.includes('helpdesk') ? 1 : 0, `the search for ${ctx.onM.user} in helpdesk`);
    info(`group engineering: ${eng.length} sessions`);
    await screenshot(page, 'console-sessions');
    await axe(page, 'console sessions page');
  });

  await step('sessions: Log off asks in a dialog; Cancel keeps the session', async () => {
    const target = ctx.launches[0];
    await search(page, { user: target.user });
    const row = sessionRow(page, target.session);
    const posts = [];
    const onRequest = (req) => {
      if (req.method() === 'POST' && new URL(req.url()).pathname.startsWith('/api/v1/admin/sessions/')) {
        posts.push(new URL(req.url()).pathname);
      }
    };
    page.on('request', onRequest);
    try {
      await row.getByRole('button', { name: `Log off ${target.user} on ${target.machine}`, exact: true }).click();
      const dialog = confirmDialog(page);
      await dialog.waitFor({ state: 'visible' });
      assert.equal(await dialog.evaluate((d) => d.open), true, 'dialog#confirm is not open');
      assert.equal(await page.evaluate(() => document.activeElement?.id), 'confirm-cancel', 'the focus is not on Cancel');
      assert.equal(await text(page.locator('#confirm-ok')), 'Log off');
      const question = await text(page.locator('#confirm-text'));
      info(`dialog: "${await text(page.locator('#confirm-title'))}" "${question}"`);
      assert.ok(question.includes(target.user) && question.includes(target.machine), 'the question names neither user nor machine');
      await screenshot(page, 'console-sessions-confirm');
      await axe(page, 'console confirm dialog');
      await page.locator('#confirm-cancel').click();
      await dialog.waitFor({ state: 'hidden' });
      await page.waitForTimeout(300); // for a request Cancel should not make
      assert.deepEqual(posts, [], 'Cancel asked the admin API to act');
      assert.equal(await row.count(), 1, 'the row went');
      const s = await ownSession(target.user, target.session);
      assert.ok(s && /^(active|pending)$/.test(s.state), `after Cancel, ${target.user}'s own list shows ${JSON.stringify(s)}`);
    } finally {
      page.off('request', onRequest);
    }
  });

  await step('sessions: confirming Log off ends the session; its row goes', async () => {
    const target = ctx.launches[0];
    const row = sessionRow(page, target.session);
    await row.getByRole('button', { name: `Log off ${target.user} on ${target.machine}`, exact: true }).click();
    const dialog = confirmDialog(page);
    await dialog.waitFor({ state: 'visible' });
    const done = page.waitForResponse((r) => r.request().method() === 'POST' &&
      new URL(r.url()).pathname === `/api/v1/admin/sessions/${target.session}/logoff`);
    await page.locator('#confirm-ok').click();
    const resp = await done;
    assert.equal(resp.status(), 204, `the admin logoff answered ${resp.status()}`);
    await dialog.waitFor({ state: 'hidden' });
    info(`#result: "${await resultSays(page, new RegExp(`Log off: done for ${reEscape(target.user)}`))}"`);
    await until(`${target.user}'s own list to drop session ${target.session}`, async () => {
      const s = await ownSession(target.user, target.session);
      return !s || /ended|logged-off/.test(s.state);
    });
    await until(`the row of session ${target.session} to go`, async () => {
      await search(page, { user: target.user });
      return (await row.count()) === 0;
    });
    info(`session ${target.session} is gone from the console and from ${target.user}'s own list`);
    await screenshot(page, 'console-sessions-logged-off');
  });

  await step('sessions: confirming Disconnect leaves the session disconnected', async () => {
    const target = ctx.launches[1];
    await search(page, { user: target.user });
    const row = sessionRow(page, target.session);
    await row.getByRole('button', { name: `Disconnect ${target.user} on ${target.machine}`, exact: true }).click();
    const dialog = confirmDialog(page);
    await dialog.waitFor({ state: 'visible' });
    assert.equal(await text(page.locator('#confirm-ok')), 'Disconnect');
    const done = page.waitForResponse((r) => r.request().method() === 'POST' &&
      new URL(r.url()).pathname === `/api/v1/admin/sessions/${target.session}/disconnect`);
    await page.locator('#confirm-ok').click();
    assert.equal((await done).status(), 204);
    await dialog.waitFor({ state: 'hidden' });
    await until(`the row of session ${target.session} to say disconnected`, async () => {
      await search(page, { user: target.user });
      return (await rowState(page, target.session)) === 'disconnected';
    });
    assert.equal(await row.getByRole('button', { name: `Disconnect ${target.user} on ${target.machine}`, exact: true }).isDisabled(), true,
      'Disconnect is still enabled on a disconnected session');
    const s = await ownSession(target.user, target.session);
    assert.equal(s?.state, 'disconnected', `${target.user}'s own list shows ${JSON.stringify(s)}`);
    info(`session ${target.session} of ${target.user}: disconnected in the console and in the user's own list`);
  });

  await step('configuration: create a group and a user through the forms; a field error shows at its field', async () => {
    await page.locator('#nav-config').click();
    await configList(page, 'applications');
    info(`${await text(page.locator('#config-version'))} ${await text(page.locator('#config-count'))}`);
    // axe over 400 rows takes long: over the ones the filter leaves.
    await page.locator('#config-list').getByLabel('Filter', { exact: true }).fill('Finance Report');
    await page.waitForFunction(() => document.querySelectorAll('#config-table tbody tr').length < 50, null, { timeout });
    info(`filter "Finance Report": ${await text(page.locator('#config-count'))}`);
    await screenshot(page, 'console-config-applications');
    await axe(page, 'console configuration list');

    // A group.
    await page.locator('#config-kinds a[data-kind="groups"]').click();
    await configList(page, 'groups');
    await page.locator('#config-new').click();
    await editor(page, 'New group');
    await axe(page, 'console editor (new group)');
    await page.locator('#editor').getByLabel('Name', { exact: true }).fill(cfg.group);
    await page.locator('#editor').getByLabel('Description', { exact: true }).fill('Testers of the e2e suite');
    await saved(page, 'POST', '/api/v1/admin/groups', 201);
    await configList(page, 'groups');
    info(`#result: "${await resultSays(page, new RegExp(`Created group ${reEscape(cfg.group)}`))}"`);
    assert.equal(await configRow(page, cfg.group).count(), 1, `no row for group ${cfg.group}`);

    // A user: first with a password the API refuses, shown at the field.
    await page.locator('#config-kinds a[data-kind="users"]').click();
    await configList(page, 'users');
    await page.locator('#config-new').click();
    await editor(page, 'New user');
    await page.locator('#editor').getByLabel('Name', { exact: true }).fill(cfg.user);
    await page.locator('#editor').getByLabel('Display name', { exact: true }).fill('E2E Tester');
    await page.locator('#editor').getByLabel('Password', { exact: true }).fill('short');
    await chooseRef(page, 'groups', 'domain-users');
    await chooseRef(page, 'groups', cfg.group);
    const refused = await saved(page, 'POST', '/api/v1/admin/users', 400);
    info(`refused: ${JSON.stringify(refused)}`);
    await fieldError(page, 'password', /shorter than/);
    await screenshot(page, 'console-config-field-error');
    await axe(page, 'console editor with a field error');
    await page.locator('#editor').getByLabel('Password', { exact: true }).fill(cfg.password);
    await saved(page, 'POST', '/api/v1/admin/users', 201);
    await configList(page, 'users');
    const u = await api(page, 'GET', `/api/v1/admin/users/${cfg.user}`);
    assert.deepEqual([...u.json.groups].sort(), ['domain-users', cfg.group].sort(), `the user's groups: ${u.text}`);
  });

  await step('configuration: an application whose name holds HTML, with an icon; a file that is no image and one too large are refused at the field', async () => {
    // The user's portal, open before the application exists.
    userPage = await newPage();
    await userPage.goto(`${origin}/`);
    await userPage.locator('form#logon').getByLabel('User name', { exact: true }).fill(cfg.user);
    await userPage.locator('form#logon').getByLabel('Password', { exact: true }).fill(cfg.password);
    await userPage.locator('form#logon').getByRole('button', { name: 'Log on', exact: true }).click();
    await userPage.waitForFunction(() => document.body.dataset.rendered === 'apps', null, { timeout });
    ctx.userApps = await userPage.locator('ul#resources > li.resource').count();
    info(`${cfg.user}'s portal lists ${ctx.userApps} apps and desktops`);
    showOnFailure(page);

    await page.locator('#config-kinds a[data-kind="applications"]').click();
    await configList(page, 'applications');
    await page.locator('#config-new').click();
    await editor(page, 'New application');
    await page.locator('#editor').getByLabel('Name', { exact: true }).fill(cfg.app);
    await page.locator('#editor').getByLabel('Display name', { exact: true }).fill(cfg.appDisplay);
    await page.locator('#editor').getByLabel('Description', { exact: true }).fill(cfg.appDescription);
    await page.locator('#editor').getByLabel('Folder', { exact: true }).fill('E2E');
    await chooseRef(page, 'delivery_groups', cfg.deliveryGroup);
    // Disabled until it is entitled: published on a delivery group that
    // every domain user may use, it would show to all of them at once.
    await page.locator('#editor').getByLabel('Disabled (users do not see it)', { exact: true }).check();
    // No command line: the API's error shows at that field, in the
    // form's words ("Command line", not command_line).
    await saved(page, 'POST', '/api/v1/admin/applications', 400);
    await fieldError(page, 'command_line', /“Command line” is empty/);
    await page.locator('#editor').getByLabel('Command line', { exact: true }).fill('/usr/bin/e2e-tool --flag "a b"');
    // A text file as the icon: the application is saved, the icon refused.
    await page.locator('#editor').getByLabel('Icon', { exact: true }).setInputFiles({ name: 'not-an-image.png', mimeType: 'image/png', buffer: Buffer.from('<svg onload="alert(1)"></svg>') });
    // Waited for before the save, which sends it at once after the POST.
    const iconAnswer = page.waitForResponse((r) => r.request().method() === 'PUT' && new URL(r.url()).pathname === `/api/v1/admin/applications/${cfg.app}/icon`);
    await saved(page, 'POST', '/api/v1/admin/applications', 201);
    const iconRefused = await iconAnswer;
    assert.equal(iconRefused.status(), 400, `a text file as the icon: ${iconRefused.status()}`);
    await fieldError(page, 'icon', /not a PNG, JPEG or GIF image/);
    assert.equal(await page.evaluate(() => location.hash), `#/config/applications/edit/${cfg.app}`, 'the editor did not go on with the saved application');
    // Too large: 2 MiB.
    await page.locator('#editor').getByLabel('Icon', { exact: true }).setInputFiles({ name: 'huge.png', mimeType: 'image/png', buffer: Buffer.alloc(2 << 20, 1) });
    const put = page.waitForResponse((r) => r.request().method() === 'PUT' && new URL(r.url()).pathname === `/api/v1/admin/applications/${cfg.app}/icon`);
    await page.locator('#editor-save').click();
    assert.equal((await put).status(), 413, 'a 2 MiB icon was not refused as too large');
    await fieldError(page, 'icon', /too large/i);
    // A real PNG.
    await page.locator('#editor').getByLabel('Icon', { exact: true }).setInputFiles({ name: 'icon.png', mimeType: 'image/png', buffer: Buffer.from(cfg.iconPNG, 'base64') });
    const ok = page.waitForResponse((r) => r.request().method() === 'PUT' && new URL(r.url()).pathname === `/api/v1/admin/applications/${cfg.app}/icon`);
    await page.locator('#editor-save').click();
    assert.equal((await ok).status(), 200, 'the PNG icon was refused');
    await configList(page, 'applications');
    const a = await api(page, 'GET', `/api/v1/admin/applications/${cfg.app}`);
    assert.equal(a.json.display_name, cfg.appDisplay);
    assert.equal(a.json.icon, `data:image/png;base64,${cfg.iconPNG}`, 'the stored icon is not the PNG uploaded');
    // The list shows the name as text.
    await page.locator('#config-list').getByLabel('Filter', { exact: true }).fill('E2E');
    const row = configRow(page, cfg.app);
    await row.waitFor();
    assert.ok((await row.textContent()).includes(cfg.appDisplay), 'the list does not show the display name as text');
    assert.equal(await page.locator('#config-table img[src="x"]').count(), 0, 'the display name was parsed as HTML in the list');
    await screenshot(page, 'console-config-application');
  });

  await step('configuration: entitle the group and enable the application: its user sees it (escaped, with its icon) and launches it, others do not; no restart', async () => {
    await page.locator('#config-kinds a[data-kind="entitlements"]').click();
    await configList(page, 'entitlements');
    await page.locator('#config-new').click();
    await editor(page, 'New entitlement');
    await page.locator('#editor').getByLabel('Name', { exact: true }).fill(cfg.entitlement);
    await page.locator('#editor').getByLabel('Delivery group', { exact: true }).selectOption(cfg.deliveryGroup);
    await page.locator('#editor').getByLabel('Applications and desktops', { exact: true }).fill(cfg.app);
    await chooseRef(page, 'groups', cfg.group);
    await saved(page, 'POST', '/api/v1/admin/entitlements', 201);
    await configList(page, 'entitlements');
    await page.goto(`${origin}/console#/config/applications/edit/${cfg.app}`);
    await editor(page, `Edit application ${cfg.app}`);
    assert.equal(await page.locator('#editor').getByLabel('Display name', { exact: true }).inputValue(), cfg.appDisplay, 'the form does not show the display name as it is');
    await page.locator('#editor').getByLabel('Disabled (users do not see it)', { exact: true }).uncheck();
    await saved(page, 'PUT', `/api/v1/admin/applications/${cfg.app}`, 200);
    await configList(page, 'applications');

    await userPage.reload();
    await userPage.waitForFunction(() => document.body.dataset.rendered === 'apps', null, { timeout });
    const tiles = userPage.locator('ul#resources > li.resource').filter({ hasText: cfg.appDisplay });
    await until(`${cfg.user}'s portal to list the application`, async () => (await tiles.count()) === 1).catch(async (e) => {
      const r = await fetchJSON('GET', '/api/v1/resources', { token: await userToken(cfg.user) });
      const ent = await api(page, 'GET', `/api/v1/admin/entitlements/${cfg.entitlement}`);
      assert.fail(`${e.message}; the portal shows ${await tiles.count()} tiles; the user API lists ${r.status} ${r.text.slice(0, 300)}; the entitlement: ${ent.text}`);
    });
    const name = await tiles.locator('.resource-name').textContent();
    assert.equal(name, cfg.appDisplay, `the portal shows "${name}"`);
    assert.equal(await userPage.locator('ul#resources > li.resource').count(), ctx.userApps + 1, 'the portal lists more than the new application');
    assert.equal(await userPage.locator('ul#resources img[src="x"]').count(), 0, 'the display name was parsed as HTML in the portal');
    assert.equal(await userPage.evaluate(() => window.e2ePwned), undefined, 'a script in the display name ran');
    assert.equal(await tiles.locator('img').getAttribute('src'), `data:image/png;base64,${cfg.iconPNG}`, 'the portal does not show the uploaded icon');
    // A domain user outside the group does not see it, nor launch it.
    const other = await fetchJSON('GET', '/api/v1/resources', { token: await userToken('user0001') });
    assert.equal(other.status, 200);
    assert.ok(!other.json.resources.some((r) => r.name === cfg.app), 'user0001, not in the group, is offered the application');
    const refusedLaunch = await launch('user0001', cfg.app);
    assert.ok(refusedLaunch.status === 403 || refusedLaunch.status === 404, `user0001's launch of ${cfg.app}: ${describe(refusedLaunch)}`);
    const l = await launch(cfg.user, cfg.app);
    assert.equal(l.status, 200, `${cfg.user}'s launch of ${cfg.app}: ${describe(l)}`);
    info(`launch: ${describe(l)}`);
    // A page behind another is not painted: its screenshot waits for a
    // frame that never comes.
    await userPage.bringToFront();
    await screenshot(userPage, 'portal-admin-added-app');
    await axe(userPage, 'portal with the admin\'s new application');
    await page.bringToFront();
    showOnFailure(page);
    const r = await fetchJSON('POST', `/api/v1/sessions/${encodeURIComponent(l.session)}/logoff`, { token: await userToken(l.user) });
    assert.ok(r.status < 300, `logoff: ${r.status}`);
  });

  await step('configuration: a group still in use is not deleted (the message says why); edit keeps unshown fields', async () => {
    await page.locator('#config-kinds a[data-kind="groups"]').click();
    await configList(page, 'groups');
    await page.locator('#config-list').getByLabel('Filter', { exact: true }).fill(cfg.group);
    // Edit and Delete sit on one line, alike; Delete is a text button,
    // the danger colour is the confirmation's.
    const delButton = configRow(page, cfg.group).getByRole('button', { name: `Delete group ${cfg.group}`, exact: true });
    const editLink = configRow(page, cfg.group).getByRole('link', { name: `Edit group ${cfg.group}`, exact: true });
    const [eb, db] = [await editLink.boundingBox(), await delButton.boundingBox()];
    assert.ok(Math.abs(eb.y - db.y) < 1 && Math.abs(eb.height - db.height) < 1, `Edit ${JSON.stringify(eb)} and Delete ${JSON.stringify(db)} are not aligned`);
    const look = (l) => l.evaluate((el) => { const c = getComputedStyle(el); return { bg: c.backgroundColor, fg: c.color }; });
    const delLook = await look(delButton);
    assert.equal(delLook.bg, 'rgba(0, 0, 0, 0)', `Delete has a background: ${JSON.stringify(delLook)}`);
    assert.deepEqual(delLook, await look(editLink), 'Delete does not look like Edit');
    await delButton.click();
    await confirmDialog(page).waitFor({ state: 'visible' });
    assert.equal(await page.locator('#confirm-ok').evaluate((el) => getComputedStyle(el).backgroundColor), 'rgb(179, 38, 30)', 'the confirmation is not in the danger colour');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'confirm-cancel', 'the focus is not on Cancel');
    const del = page.waitForResponse((r) => r.request().method() === 'DELETE' && new URL(r.url()).pathname === `/api/v1/admin/groups/${cfg.group}`);
    await page.locator('#confirm-ok').click();
    assert.equal((await del).status(), 409, 'a group in use was deleted');
    info(`#result: "${await resultSays(page, new RegExp(`still in use: user "${reEscape(cfg.user)}" refers to it in its groups`))}"`);
    assert.equal(await resultBox(page).getAttribute('role'), 'alert');

    // Editing a delivery group through the form keeps its load rules
    // the form does not show.
    const before = (await api(page, 'GET', `/api/v1/admin/delivery-groups/${encodeURIComponent(cfg.deliveryGroup)}`)).json;
    await page.goto(`${origin}/console#/config/delivery-groups/edit/${encodeURIComponent(cfg.deliveryGroup)}`);
    await editor(page, `Edit delivery group ${cfg.deliveryGroup}`);
    // The name of an existing object is text, not a field.
    const nameShown = page.locator('#editor #f-name');
    assert.equal(await nameShown.evaluate((el) => el.tagName), 'OUTPUT', 'the name of an existing object is a form field');
    assert.equal(await text(nameShown), cfg.deliveryGroup);
    assert.equal(await page.locator('#editor input[name="name"]').count(), 0, 'the editor has a name input');
    // An error names the field as the form does, not by the API's name.
    const limitBox = page.locator('#editor').getByLabel('Limit the sessions per machine', { exact: true });
    const limit = page.locator('#editor').getByLabel('Sessions per machine at most', { exact: true });
    const [wasOn, wasLimit] = [await limitBox.isChecked(), await limit.inputValue()];
    await limitBox.check();
    await limit.fill('20000');
    const refused = await saved(page, 'PUT', `/api/v1/admin/delivery-groups/${encodeURIComponent(cfg.deliveryGroup)}`, 400);
    info(`refused: ${JSON.stringify(refused)}`);
    const said = await fieldError(page, 'load_rules.max_sessions.limit', /“Sessions per machine at most” 20000 is outside 1\.\.10000/);
    assert.ok(!/load_rules|max_sessions/.test(said ?? await text(page.locator('#editor-fields .field[data-key="load_rules.max_sessions.limit"] .field-error'))),
      'the error names the API\'s field');
    await limitBox.setChecked(wasOn);
    await limit.fill(wasLimit);
    await page.locator('#editor').getByLabel('Description', { exact: true }).fill('Edited by the e2e suite');
    await saved(page, 'PUT', `/api/v1/admin/delivery-groups/${encodeURIComponent(cfg.deliveryGroup)}`, 200);
    const after = (await api(page, 'GET', `/api/v1/admin/delivery-groups/${encodeURIComponent(cfg.deliveryGroup)}`)).json;
    assert.equal(after.description, 'Edited by the e2e suite');
    assert.deepEqual({ ...after, description: before.description }, before, 'the edit changed fields the form does not show');
  });

  await step('history: the changes the console made, by the admin, newest first; screenshot, axe', async () => {
    await page.locator('#nav-history').click();
    await page.waitForFunction(() => document.body.dataset.view === 'history' && document.body.dataset.rendered === 'history', null, { timeout });
    await page.locator('#history-search').getByLabel('Name', { exact: true }).fill(cfg.app);
    await forgetRendered(page);
    await page.locator('#history-search').getByRole('button', { name: 'Search', exact: true }).click();
    await page.waitForFunction(() => document.body.dataset.rendered === 'history', null, { timeout });
    const rows = await page.locator('#history tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
    info(`history of ${cfg.app}: ${rows.map((r) => r.slice(1).join(' | ')).join('; ')}`);
    // Newest first: enabled, the icon, the creation.
    assert.deepEqual(rows.map((r) => [r[1], r[2], r[3], r[4], r[5]]), [
      ['admin:admin', 'update', 'application', cfg.app, 'disabled'],
      ['admin:admin', 'update', 'application', cfg.app, 'icon'],
      ['admin:admin', 'create', 'application', cfg.app, '—'],
    ]);
    await screenshot(page, 'console-history');
    await axe(page, 'console history');
  });

  await step('configuration: delete what the test made, through the forms', async () => {
    for (const [kind, name, noun] of [['entitlements', cfg.entitlement, 'entitlement'], ['applications', cfg.app, 'application'],
      ['users', cfg.user, 'user'], ['groups', cfg.group, 'group']]) {
      await page.goto(`${origin}/console#/config/${kind}`);
      await configList(page, kind);
      await page.locator('#config-list').getByLabel('Filter', { exact: true }).fill(name);
      await configRow(page, name).getByRole('button', { name: `Delete ${noun} ${name}`, exact: true }).click();
      await confirmDialog(page).waitFor({ state: 'visible' });
      const del = page.waitForResponse((r) => r.request().method() === 'DELETE' && new URL(r.url()).pathname === `/api/v1/admin/${kind}/${name}`);
      await page.locator('#confirm-ok').click();
      assert.equal((await del).status(), 204, `DELETE ${kind}/${name}`);
      await resultSays(page, new RegExp(`Deleted ${noun} ${reEscape(name)}`));
      await until(`the row of ${name} to go`, async () => (await configRow(page, name).count()) === 0);
    }
    await page.goto(`${origin}/console#/sessions`);
    await page.waitForFunction(() => document.body.dataset.view === 'sessions', null, { timeout });
  });

  await step('an expired console session: the logon form says so; logging on again returns to the view', async () => {
    await page.context().clearCookies();
    await page.locator('#nav-machines').click();
    await loggedOut(page);
    const note = await text(page.locator('#logon-note'));
    info(`#logon-note: "${note}"`);
    assert.match(note, /ended/i);
    await logOn(page);
    await page.waitForFunction((n) => document.body.dataset.view === 'machines' && location.hash === '#/machines' &&
      document.querySelectorAll('#machines tbody tr[data-machine]').length === n, machineCount, { timeout });
  });

  await step('Log off in the header: the logon form, and the admin API answers 401', async () => {
    const out = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/api/v1/logout');
    await page.locator('#logoff').click();
    assert.equal((await out).status(), 204);
    await loggedOut(page);
    info(`#logon-note: "${await text(page.locator('#logon-note'))}"; body data-rendered "${await page.evaluate(() => document.body.dataset.rendered)}"`);
    const r = await api(page, 'GET', '/api/v1/admin/machines');
    assert.equal(r.status, 401, `GET /api/v1/admin/machines after Log off: ${r.status}`);
    const left = (await page.context().cookies(origin)).filter((c) => c.name === 'usher_admin' && c.value !== '');
    assert.deepEqual(left, [], 'the usher_admin cookie is still there');
    assert.equal(await page.locator('#view-machines').isVisible(), false, 'the machines still show');
    await screenshot(page, 'console-logged-off');
  });
}

// The objects the configuration steps make, and the demo's they use.
const cfg = {
  group: 'e2e-testers',
  user: 'e2e-tester',
  password: 'an e2e password 0123',
  app: 'e2e-html-app',
  // HTML in a name and a description: shown as text everywhere.
  appDisplay: '<img src="x" onerror="window.e2ePwned=1">Report & <b>Chart</b>',
  appDescription: '<script>window.e2ePwned=1</script>',
  entitlement: 'e2e-testers-tool',
  deliveryGroup: 'Office Apps',
  // A 2x2 PNG.
  iconPNG: 'iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAYAAABytg0kAAAAFklEQVR4nGL6z8DwnwEB/v8HBAAA//8iFAP/9aaXIQAAAABJRU5ErkJggg==',
};
let userPage; // the portal of cfg.user
passwords.set(cfg.user, cfg.password);

const configRow = (page, name) => page.locator(`#config-table tbody tr[data-name="${cssString(name)}"]`);

// configList waits for the configuration view's list of kind.
async function configList(page, kind) {
  // configKind is set once the list of that kind is rendered, and
  // cleared as soon as another view of the configuration is asked for.
  await page.waitForFunction((k) => document.body.dataset.view === 'config' && document.body.dataset.rendered === 'config' &&
    document.body.dataset.configKind === k && location.hash === `#/config/${k}`, kind, { timeout })
    .catch(async () => assert.fail(`the ${kind} list did not show: view ${await page.evaluate(() => `${document.body.dataset.view}/${document.body.dataset.rendered} ${location.hash}`)}`));
  assert.equal(await page.locator(`#config-kinds a[data-kind="${kind}"]`).getAttribute('aria-current'), 'page');
}

// editor waits for the editor with its title.
async function editor(page, title) {
  await page.waitForFunction((t) => document.body.dataset.rendered === 'editor' && document.querySelector('#editor-title')?.textContent === t, title, { timeout })
    .catch(async () => assert.fail(`the editor "${title}" did not show: "${await page.locator('#editor-title').textContent()}"`));
}

// chooseRef ticks name among the choices of a field of references.
async function chooseRef(page, key, name) {
  const field = page.locator(`#editor-fields .field[data-key="${key}"]`);
  const box = field.getByRole('checkbox', { name, exact: true });
  if (await box.count()) {
    await box.check();
  } else {
    await field.locator('input').fill(name);
  }
}

// saved submits the editor and waits for the API's answer to method path,
// which must be status; it returns the answer's JSON.
async function saved(page, method, urlPath, status) {
  const answered = page.waitForResponse((r) => r.request().method() === method && new URL(r.url()).pathname === urlPath);
  await page.locator('#editor-save').click();
  const resp = await answered;
  const body = await resp.json().catch(() => null);
  assert.equal(resp.status(), status, `${method} ${urlPath} answered ${resp.status()} ${JSON.stringify(body)}`);
  return body;
}

// fieldError waits for the error of the editor's field key to say re,
// and checks that the field is marked invalid, described by the error,
// and focused.
async function fieldError(page, key, re) {
  const id = `f-${key.replaceAll('.', '-')}`;
  await page.waitForFunction(([i, src]) => new RegExp(src, 'i').test(document.getElementById(`${i}-error`)?.textContent ?? ''), [id, re.source], { timeout })
    .catch(async () => assert.fail(`the field ${key} does not say ${re}: "${await page.locator(`#${id}-error`).textContent()}"; the form says "${await page.locator('#editor-error').textContent()}"`));
  const control = page.locator(`#${id}`);
  assert.equal(await control.getAttribute('aria-invalid'), 'true', `${key} is not aria-invalid`);
  assert.ok((await control.getAttribute('aria-describedby')).split(' ').includes(`${id}-error`), `${key} is not described by its error`);
  const focused = await page.evaluate(() => document.activeElement?.id);
  assert.equal(focused, id, `the focus is on ${focused}, not on ${key}`);
  info(`${key}: "${await page.locator(`#${id}-error`).textContent()}"`);
}

// rowState is the state a session's row shows, or null without a row.
function rowState(page, id) {
  return page.evaluate((sid) => {
    const tr = [...document.querySelectorAll('#csessions tbody tr[data-session]')].find((r) => r.dataset.session === sid);
    return tr ? tr.querySelector('td:nth-child(4)').textContent : null;
  }, id);
}

// search fills the sessions search form and submits it, and waits for the
// list the console renders from the answer.
async function search(page, { user = '', machine = '', group = '' }) {
  await page.locator('#session-search').getByLabel('User', { exact: true }).fill(user);
  await page.locator('#session-search').getByLabel('Machine', { exact: true }).fill(machine);
  await page.locator('#session-search').getByLabel('Group', { exact: true }).fill(group);
  await forgetRendered(page);
  const answered = page.waitForResponse((r) => r.request().method() === 'GET' && new URL(r.url()).pathname === '/api/v1/admin/sessions');
  await page.locator('#session-search').getByRole('button', { name: 'Search', exact: true }).click();
  assert.equal((await answered).status(), 200);
  await page.waitForFunction(() => document.body.dataset.rendered === 'sessions', null, { timeout });
}

run('console e2e', 'console-failure', scenario);
