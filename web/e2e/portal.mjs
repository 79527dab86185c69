// End-to-end test of usher's user portal in a real browser: Playwright
// (playwright-core, no test runner) drives Debian's chromium through the
// portal of a demo site, checks every page with axe-core, and saves a
// screenshot of each page.
//
// cmd/usher's TestPortalInBrowser runs it against an `usher serve --demo`
// with simulated VDAs and per-address throttling off (every logon here
// comes from 127.0.0.1, and the lock-out step alone fails more of them
// than an address gets free). To run it by hand against such a site:
//
//	BASE_URL=http://127.0.0.1:8080 DEMO_PASSWORD=... node portal.mjs
//
// Environment (besides lib.mjs's BASE_URL, DEMO_PASSWORD, SCREENSHOT_DIR,
// CHROMIUM and TIMEOUT_MS):
//
//	LOCKOUT_THRESHOLD   failed logons that lock an account out (default 10)
//	RENDER_BUDGET_MS    the apps page's first render after logon must take less (default 2000:
//	                    a guard against a render that grows out of bounds, not a speed
//	                    figure; the time is logged: a machine with a load average of 10
//	                    took 313 ms, over the 300 ms this once asked)
//
// It prints each step's name and outcome, and exits 1 at the first
// failure, after a screenshot of the page as it was (failure.png).

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import {
  api, axe, cssString, env, info, newPage, origin, password, run, screenshot, showOnFailure, step, timeout, watch,
} from './lib.mjs';

const lockoutThreshold = Number(env.LOCKOUT_THRESHOLD || 10);
const renderBudget = Number(env.RENDER_BUDGET_MS || 2000);

// Demo users: one for the happy path, one for a wrong password, one to
// lock out (used nowhere else, as its lock lasts ten minutes).
const user = 'user0001';
const wrongPasswordUser = 'user0998';
const lockedUser = 'user0999';
const wrongPassword = 'not-the-password';

// ---- the portal's parts (its DOM contract) ----

const logonForm = (page) => page.locator('form#logon');
const userNameInput = (page) => logonForm(page).getByLabel('User name', { exact: true });
const passwordInput = (page) => logonForm(page).getByLabel('Password', { exact: true });
const logonButton = (page) => logonForm(page).getByRole('button', { name: 'Log on', exact: true });
const logonError = (page) => page.locator('#logon-error');
const header = (page) => page.locator('header');
const headerLogoff = (page) => header(page).getByRole('button', { name: 'Log off', exact: true });
const nav = (page) => page.getByRole('navigation', { name: 'Portal' });
const resources = (page) => page.locator('ul#resources > li.resource');
const launchResult = (page) => page.locator('#launch-result');
const sessionRows = (page) => page.locator('table#sessions tr[data-session]');
const confirmDialog = (page) => page.locator('dialog#confirm');

// loggedOut waits for the logon form, and for no logged-on header.
async function loggedOut(page) {
  await logonForm(page).waitFor({ state: 'visible' });
  assert.equal(await headerLogoff(page).isVisible(), false, 'the header\'s Log off button shows while logged out');
}

// submitLogon fills the logon form and submits it, and waits for the
// portal's answer to come back from the server.
async function submitLogon(page, username, pw) {
  await userNameInput(page).fill(username);
  await passwordInput(page).fill(pw);
  const answered = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname.endsWith('/login'));
  await logonButton(page).click();
  return answered;
}

// logonAlert waits until the logon error alert says what re matches.
async function logonAlert(page, re) {
  const alert = logonError(page);
  await alert.waitFor({ state: 'visible' });
  assert.equal(await alert.getAttribute('role'), 'alert', '#logon-error has no role="alert"');
  await page.waitForFunction(([sel, src, flags]) => new RegExp(src, flags).test(document.querySelector(sel)?.textContent ?? ''),
    ['#logon-error', re.source, re.flags], { timeout });
  return (await alert.textContent()).trim();
}

// rendered waits until the portal says it rendered what (body's
// data-rendered), and returns window.usherRenderMs.
async function rendered(page, what) {
  await page.waitForFunction((w) => document.body.dataset.rendered === w, what, { timeout });
  return page.evaluate(() => window.usherRenderMs);
}

// forgetRendered clears body's data-rendered, so that the next render can
// be waited for.
function forgetRendered(page) {
  return page.evaluate(() => document.body.removeAttribute('data-rendered'));
}

// logOn logs user on through the form and waits for the apps page.
async function logOn(page, username = user) {
  await forgetRendered(page);
  const resp = await submitLogon(page, username, password);
  assert.equal(resp.status(), 200, `logon of ${username} answered ${resp.status()}`);
  await headerLogoff(page).waitFor({ state: 'visible' });
}

// sessionsShown waits for the sessions page: its table, or, when the user
// has no session left, the portal's word that it rendered it.
async function sessionsShown(page) {
  await page.waitForFunction(() => location.hash === '#/sessions' &&
    (document.querySelector('table#sessions')?.checkVisibility() || document.body.dataset.rendered === 'sessions'), null, { timeout });
  assert.equal(await logonForm(page).isVisible(), false, 'the logon form still shows');
}

// quietLoad loads url in page and waits for ready(page), and fails if any
// response during it was an error (status 400 or more) or the page logged
// an error to its console.
async function quietLoad(page, url, ready) {
  const failures = [];
  const onResponse = (r) => { if (r.status() >= 400) failures.push(`${r.request().method()} ${new URL(r.url()).pathname}: ${r.status()}`); };
  const onConsole = (m) => { if (m.type() === 'error') failures.push(`console error: ${m.text()}`); };
  page.on('response', onResponse);
  page.on('console', onConsole);
  try {
    await page.goto(url);
    await ready(page);
    // Requests still on their way as the page rendered are awaited too.
    await page.waitForLoadState('networkidle');
  } finally {
    page.off('response', onResponse);
    page.off('console', onConsole);
  }
  assert.deepEqual(failures, [], `loading ${new URL(url).pathname}${new URL(url).hash} failed requests or logged errors`);
}

// reEscape escapes s for a regular expression.
function reEscape(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

async function hash(page) {
  return new URL(page.url()).hash;
}

// ---- the scenario ----

const ctx = {}; // what later steps need from earlier ones

async function scenario() {
  const page = await newPage();

  await step('logon page: the form, no failing request nor console error while loading, no inline scripts, screenshot, axe', async () => {
    await quietLoad(page, `${origin}/`, loggedOut);
    assert.equal(await userNameInput(page).getAttribute('name'), 'username');
    assert.equal(await passwordInput(page).getAttribute('name'), 'password');
    assert.equal(await passwordInput(page).getAttribute('type'), 'password');
    const scripts = await page.evaluate(() => [...document.scripts].map((s) => s.src || `inline: ${s.textContent.slice(0, 60)}`));
    for (const s of scripts) {
      assert.ok(!s.startsWith('inline'), `the portal page has an inline script (${s})`);
      assert.ok(new URL(s).pathname.startsWith('/portal/'), `script ${s} is not under /portal/`);
    }
    info(`scripts: ${scripts.map((s) => new URL(s).pathname).join(', ') || 'none'}`);
    await screenshot(page, 'logon');
    await axe(page, 'logon page');
  });

  await step('wrong password: the alert says so, nobody is logged on', async () => {
    const resp = await submitLogon(page, wrongPasswordUser, wrongPassword);
    assert.equal(resp.status(), 401, `a wrong password answered ${resp.status()}`);
    const text = await logonAlert(page, /Wrong user name or password/);
    info(`alert: "${text}"`);
    await loggedOut(page);
    await screenshot(page, 'logon-wrong-password');
  });

  await step(`lock-out: ${lockoutThreshold} wrong passwords lock ${lockedUser} out; the right one is then refused as locked`, async () => {
    for (let i = 1; i <= lockoutThreshold; i++) {
      const resp = await submitLogon(page, lockedUser, `${wrongPassword}-${i}`);
      assert.notEqual(resp.status(), 200, `wrong password ${i} logged on`);
      assert.notEqual(resp.status(), 429, `wrong password ${i} was throttled: serve the site with --source-free 0`);
    }
    const resp = await submitLogon(page, lockedUser, password);
    assert.notEqual(resp.status(), 200, `${lockedUser} logged on with the right password after ${lockoutThreshold} wrong ones`);
    const text = await logonAlert(page, /locked/i);
    info(`alert: "${text}"`);
    await loggedOut(page);
    await screenshot(page, 'logon-locked');
  });

  await step(`log on as ${user}: the apps page, its header and nav, render time`, async () => {
    const clickedAt = await page.evaluate(() => performance.now());
    await logOn(page);
    const ms = await rendered(page, 'apps');
    const seen = await page.evaluate((t) => performance.now() - t, clickedAt);
    info(`apps page rendered: window.usherRenderMs = ${ms} ms (the test saw ${Math.round(seen)} ms from filling the form)`);
    assert.equal(typeof ms, 'number', `window.usherRenderMs is ${typeof ms}, not a number`);
    assert.ok(Number.isFinite(ms) && ms >= 0, `window.usherRenderMs is ${ms}`);
    assert.ok(ms < renderBudget, `the apps page took ${ms} ms to render after logon; the budget is ${renderBudget} ms`);
    assert.equal(await hash(page), '#/apps');

    const name = (await page.locator('#user-name').textContent()).trim();
    info(`#user-name: "${name}"`);
    assert.match(name, /0001/, `#user-name shows "${name}", not user0001's name`);
    await logonForm(page).waitFor({ state: 'hidden' });
    const n = nav(page);
    assert.equal(await n.getByRole('link', { name: 'Apps', exact: true }).getAttribute('href'), '#/apps');
    assert.equal(await n.getByRole('link', { name: 'Sessions', exact: true }).getAttribute('href'), '#/sessions');
    assert.equal(await page.locator('main#main').count(), 1, 'no <main id="main">');
  });

  await step('reload with the session: the apps page loads with no failing request nor console error', async () => {
    await quietLoad(page, `${origin}/#/apps`, (p) => rendered(p, 'apps'));
  });

  await step('apps page: every resource listed, screenshot, axe', async () => {
    const r = await api(page, 'GET', '/api/v1/resources');
    assert.equal(r.status, 200, `GET /api/v1/resources from the page: ${r.status} ${r.text}`);
    ctx.resources = r.json.resources;
    const listed = await resources(page).evaluateAll((els) => els.map((el) => ({
      name: el.dataset.name,
      displayName: el.querySelector('.resource-name')?.textContent.trim(),
    })));
    info(`${listed.length} resources listed (${ctx.resources.filter((x) => x.kind === 'application').length} applications)`);
    assert.ok(listed.length >= 400, `${listed.length} resources listed; the demo site has 400 applications`);
    assert.deepEqual(listed.map((x) => x.name).sort(), ctx.resources.map((x) => x.name).sort(), 'the list is not the user\'s resources');
    const byName = new Map(ctx.resources.map((x) => [x.name, x]));
    for (const x of listed) {
      assert.equal(x.displayName, byName.get(x.name).display_name, `${x.name} shows "${x.displayName}"`);
    }
    // One button per resource, named after it.
    const first = listed.find((x) => byName.get(x.name).kind === 'application');
    const item = page.locator(`ul#resources > li.resource[data-name="${cssString(first.name)}"]`);
    await item.getByRole('button', { name: `Open ${first.displayName}`, exact: true }).waitFor({ state: 'visible' });
    await screenshot(page, 'apps', false);
    await axe(page, 'apps page');
  });

  await step('session cookie: HttpOnly, SameSite=Strict, out of the scripts\' reach', async () => {
    const cookies = await page.context().cookies(origin);
    const c = cookies.find((x) => x.name === 'usher_session');
    assert.ok(c, `no usher_session cookie; cookies: ${cookies.map((x) => x.name).join(', ') || 'none'}`);
    assert.equal(c.httpOnly, true, 'usher_session is not HttpOnly');
    assert.equal(c.sameSite, 'Strict', `usher_session is SameSite=${c.sameSite}`);
    assert.equal(await page.evaluate(() => document.cookie.includes('usher_session')), false, 'document.cookie shows usher_session');
    info(`usher_session: HttpOnly, SameSite=${c.sameSite}, path ${c.path}, expires ${new Date(c.expires * 1000).toISOString()}`);
  });

  await step('/console and the admin API: not for a user', async () => {
    const admin = await api(page, 'GET', '/api/v1/admin/site');
    assert.ok([401, 403].includes(admin.status), `GET /api/v1/admin/site with ${user}'s session answered ${admin.status}`);
    const r = await api(page, 'GET', '/console');
    info(`GET /console as ${user}: ${r.status}`);
    if (r.status !== 200) {
      assert.ok([401, 403, 404].includes(r.status), `GET /console as a user answered ${r.status}`);
      return;
    }
    // A console page for everyone is fine if it gives a user nothing: it
    // must ask for an admin's logon or say no, and the admin API must
    // refuse the user's session.
    const consolePage = watch(await page.context().newPage());
    const adminAnswers = [];
    consolePage.on('response', (resp) => {
      if (new URL(resp.url()).pathname.startsWith('/api/v1/admin/')) {
        adminAnswers.push(`${resp.request().method()} ${new URL(resp.url()).pathname} ${resp.status()}`);
      }
    });
    await consolePage.goto(`${origin}/console`);
    const refused = consolePage.getByText(/not (an )?admin|admins? only|administrators|forbidden|not allowed|denied|permission/i);
    const adminLogon = consolePage.locator('input[type="password"]');
    await refused.or(adminLogon).first().waitFor({ state: 'visible' });
    info(`the console shows ${await adminLogon.isVisible() ? 'an admin logon' : 'a refusal'}; admin API: ${adminAnswers.join(', ') || 'not called'}`);
    for (const a of adminAnswers) {
      assert.match(a, / 40[13]$/, `the console got an admin API answer with ${user}'s session: ${a}`);
    }
    await screenshot(consolePage, 'console-as-user');
    await consolePage.close();
    showOnFailure(page);
  });

  await step('search: typing hides what does not match', async () => {
    const all = ctx.resources;
    const haystack = (x) => [x.display_name, x.name, x.folder, x.description].filter(Boolean).join('\n').toLowerCase();
    // The word of an application's display name that the fewest resources
    // mention anywhere.
    let best = null;
    for (const x of all.filter((r) => r.kind === 'application')) {
      for (const word of x.display_name.split(/[^\p{L}\p{N}]+/u).filter((w) => w.length >= 4)) {
        const hits = all.filter((r) => haystack(r).includes(word.toLowerCase())).length;
        if (!best || hits < best.hits) {
          best = { word, hits, target: x };
        }
      }
    }
    assert.ok(best, 'no application has a display name to search for');
    const query = best.word;
    const mayShow = new Set(all.filter((r) => haystack(r).includes(query.toLowerCase())).map((r) => r.name));
    const mustShow = all.filter((r) => r.display_name.toLowerCase().includes(query.toLowerCase())).map((r) => r.name);
    ctx.target = best.target;
    info(`searching "${query}": ${mustShow.length} display names have it, ${mayShow.size} resources mention it; ${all.length} in all`);

    const search = page.getByLabel('Search', { exact: true });
    assert.equal(await search.getAttribute('type'), 'search');
    assert.equal(await search.getAttribute('id'), 'search');
    await search.click();
    await search.pressSequentially(query);
    await page.waitForFunction(([sel, n]) => {
      const shown = [...document.querySelectorAll(sel)].filter((el) => !el.hidden);
      return shown.length > 0 && shown.length <= n;
    }, ['ul#resources > li.resource', mayShow.size], { timeout });
    const shown = await resources(page).evaluateAll((els) => els.filter((el) => !el.hidden).map((el) => el.dataset.name));
    info(`${shown.length} shown: ${shown.slice(0, 10).join(', ')}`);
    for (const name of shown) {
      assert.ok(mayShow.has(name), `${name} is shown, and nothing of it mentions "${query}"`);
    }
    for (const name of mustShow) {
      assert.ok(shown.includes(name), `${name} is hidden, and its display name has "${query}"`);
    }
    const hidden = await resources(page).evaluateAll((els) => els.filter((el) => el.hasAttribute('hidden')).length);
    assert.equal(hidden, all.length - shown.length, 'the items that do not match lack the hidden attribute');
    assert.ok(await page.locator(`ul#resources > li.resource[data-name="${cssString(ctx.target.name)}"]`).isVisible(),
      `${ctx.target.name} is not visible`);
    await screenshot(page, 'apps-search', false);
  });

  await step('launch: the result names host and protocol, and an .rdp file downloads', async () => {
    const t = ctx.target;
    const item = page.locator(`ul#resources > li.resource[data-name="${cssString(t.name)}"]`);
    const launched = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname.endsWith('/launch'));
    const downloaded = page.waitForEvent('download', { timeout });
    await item.getByRole('button', { name: `Open ${t.display_name}`, exact: true }).click();
    const resp = await launched;
    assert.equal(resp.status(), 200, `launch answered ${resp.status()}`);
    try {
      const j = await resp.json();
      ctx.sessionID = j.session_id;
      ctx.machine = j.machine;
    } catch {
      // the portal asked for the launch file itself (format=rdp)
    }

    const download = await downloaded;
    const file = download.suggestedFilename();
    const content = await readFile(await download.path(), 'utf8');
    info(`downloaded ${file} (${content.length} bytes)`);
    assert.match(file, /\.rdp$/, `the download is ${file}, not an .rdp file`);
    const address = content.match(/^full address:s:(.+?)\r?$/m);
    assert.ok(address, `the launch file has no "full address:s:" line:\n${content}`);
    const host = address[1].replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
    const ticket = content.match(/^loadbalanceinfo:s:(.*?)\r?$/m);
    // Never print a ticket: only that it is there.
    info(`full address ${address[1]}; ${ticket ? `ticket line present (${ticket[1].length} characters)` : 'no ticket line'}`);

    const result = launchResult(page);
    await result.waitFor({ state: 'visible' });
    assert.equal(await result.getAttribute('role'), 'status', '#launch-result has no role="status"');
    await page.waitForFunction(([h]) => {
      const text = document.querySelector('#launch-result')?.textContent ?? '';
      return text.includes(h) && /rdp/i.test(text);
    }, [host], { timeout });
    const said = (await result.textContent()).replace(/\s+/g, ' ').trim();
    info(`#launch-result: "${said}"`);
    assert.match(said, new RegExp(`^Your ${reEscape(t.display_name)} session is ready on \\S+ \\(machine [^)]+\\), over RDP\\.`));
    const link = page.locator('a#launch-file');
    assert.equal((await link.textContent()).trim(), 'Download launch file');
    assert.notEqual(await link.getAttribute('download'), null, 'a#launch-file has no download attribute');
    assert.ok(await link.getAttribute('href'), 'a#launch-file has no href');
    await screenshot(page, 'apps-launched', false);
  });

  await step('launch failure: an alert and "Try again", which launches', async () => {
    const t = ctx.target;
    // The broker answers as it does when every machine is full.
    const fail = (route) => {
      if (route.request().method() !== 'POST') {
        return route.fallback();
      }
      return route.fulfill({
        status: 503, contentType: 'application/json',
        body: JSON.stringify({ error: { code: 'no_capacity', message: `no available machine for "${t.display_name}"` } }),
      });
    };
    const launchURL = (u) => /\/launch$/.test(u.pathname);
    await page.route(launchURL, fail);
    const failed = page.waitForResponse((r) => r.request().method() === 'POST' && launchURL(new URL(r.url())));
    const item = page.locator(`ul#resources > li.resource[data-name="${cssString(t.name)}"]`);
    await item.getByRole('button', { name: `Open ${t.display_name}`, exact: true }).click();
    await failed;
    const alert = page.locator('#launch-result[role="alert"], #launch-result [role="alert"]');
    await alert.first().waitFor({ state: 'visible' });
    const text = (await alert.first().textContent()).replace(/\s+/g, ' ').trim();
    info(`alert: "${text}"`);
    assert.ok(text.length > 0, 'the launch failure alert is empty');
    const again = launchResult(page).getByRole('button', { name: 'Try again', exact: true });
    await again.waitFor({ state: 'visible' });
    await screenshot(page, 'apps-launch-failed', false);
    await axe(page, 'apps page, failed launch');

    await page.unroute(launchURL, fail);
    const relaunched = page.waitForResponse((r) => r.request().method() === 'POST' && launchURL(new URL(r.url())));
    await again.click();
    const resp = await relaunched;
    assert.equal(resp.status(), 200, `"Try again" launch answered ${resp.status()}`);
    await page.waitForFunction(() => {
      const el = document.querySelector('#launch-result');
      return el && el.getAttribute('role') === 'status' && !el.querySelector('[role="alert"]') && /rdp/i.test(el.textContent);
    }, null, { timeout });
    const said = (await launchResult(page).textContent()).replace(/\s+/g, ' ').trim();
    info(`#launch-result: "${said}"`);
    // The first launch's session is still there: the portal says so in
    // English.
    assert.match(said, new RegExp(`^Your ${reEscape(t.display_name)} session is still running on \\S+ \\(machine [^)]+\\): open it again, over RDP\\.`));
    // Clear the search for the steps that follow.
    await page.getByLabel('Search', { exact: true }).fill('');
  });

  await step('sessions page: the session is listed, screenshot, axe', async () => {
    await nav(page).getByRole('link', { name: 'Sessions', exact: true }).click();
    await page.waitForFunction(() => location.hash === '#/sessions', null, { timeout });
    await page.locator('table#sessions').waitFor({ state: 'visible' });
    const t = ctx.target;
    const row = await sessionRow(page);
    ctx.sessionID = await row.getAttribute('data-session');
    const cells = (await row.locator('td, th').allTextContents()).map((s) => s.replace(/\s+/g, ' ').trim());
    info(`session ${ctx.sessionID}: ${cells.join(' | ')}`);
    const text = cells.join(' ');
    assert.ok(text.includes(t.display_name) || text.includes(t.name), `the row does not name ${t.display_name}`);
    if (ctx.machine) {
      assert.ok(text.includes(ctx.machine), `the row does not name the machine ${ctx.machine}`);
    }
    for (const name of ['Reconnect', 'Disconnect', 'Log off']) {
      await rowButton(row, name).waitFor({ state: 'visible' });
    }
    await screenshot(page, 'sessions');
    await axe(page, 'sessions page');
  });

  await step('sessions page: Log off asks first; Cancel keeps the session', async () => {
    const row = page.locator(`table#sessions tr[data-session="${cssString(ctx.sessionID)}"]`);
    await rowButton(row, 'Log off').click();
    const dialog = confirmDialog(page);
    await dialog.waitFor({ state: 'visible' });
    assert.equal(await dialog.evaluate((d) => d.open), true, 'dialog#confirm is not open');
    await screenshot(page, 'sessions-confirm');
    await axe(page, 'sessions page, confirm dialog');
    await dialog.getByRole('button', { name: 'Cancel', exact: true }).click();
    await dialog.waitFor({ state: 'hidden' });
    assert.equal(await row.count(), 1, 'Cancel logged the session off');
  });

  await step('sessions page: confirming Log off ends the session', async () => {
    const id = ctx.sessionID;
    const row = page.locator(`table#sessions tr[data-session="${cssString(id)}"]`);
    await rowButton(row, 'Log off').click();
    const dialog = confirmDialog(page);
    await dialog.waitFor({ state: 'visible' });
    const loggedOff = page.waitForResponse((r) => r.request().method() === 'POST' && /\/logoff$/.test(new URL(r.url()).pathname));
    await dialog.getByRole('button', { name: 'Log off', exact: true }).click();
    const resp = await loggedOff;
    assert.ok(resp.status() < 300, `logoff answered ${resp.status()}`);
    await dialog.waitFor({ state: 'hidden' });
    await page.waitForFunction((sid) => {
      const tr = [...document.querySelectorAll('table#sessions tr[data-session]')].find((r) => r.dataset.session === sid);
      return !tr || /\bended\b|logged off/i.test(tr.textContent);
    }, id, { timeout });
    info(`session ${id} is gone from the list (or ended)`);
    const deadline = Date.now() + timeout;
    for (;;) {
      const r = await api(page, 'GET', '/api/v1/sessions');
      const s = r.json?.sessions?.find((x) => x.id === id);
      if (!s || s.state === 'ended') {
        break;
      }
      assert.ok(Date.now() < deadline, `the API still lists session ${id} as ${s.state}`);
      await page.waitForTimeout(200);
    }
    await screenshot(page, 'sessions-logged-off');
  });

  await step('expired session: the logon form, then back to #/sessions', async () => {
    await forgetRendered(page);
    await nav(page).getByRole('link', { name: 'Apps', exact: true }).click();
    await page.waitForFunction(() => location.hash === '#/apps', null, { timeout });
    // The apps page's own requests are done before the session ends.
    await rendered(page, 'apps');
    await page.context().clearCookies();
    await nav(page).getByRole('link', { name: 'Sessions', exact: true }).click();
    await loggedOut(page);
    await screenshot(page, 'logon-expired');
    await logOn(page);
    await sessionsShown(page);
  });

  await step('invalid session cookie on arrival: the logon form, then #/sessions', async () => {
    const c = (await page.context().cookies(origin)).find((x) => x.name === 'usher_session');
    assert.ok(c, 'no usher_session cookie after logging on again');
    await page.context().addCookies([{ ...c, value: 'not-a-token' }]);
    await page.goto('about:blank');
    await page.goto(`${origin}/#/sessions`);
    await loggedOut(page);
    await logOn(page);
    await sessionsShown(page);
  });

  await step('Log off in the header: the logon form, and the API answers 401', async () => {
    const loggedOff = page.waitForResponse((r) => r.request().method() === 'POST' && /\/logout$/.test(new URL(r.url()).pathname));
    await headerLogoff(page).click();
    await loggedOff;
    await loggedOut(page);
    const r = await api(page, 'GET', '/api/v1/sessions');
    assert.equal(r.status, 401, `GET /api/v1/sessions after Log off: ${r.status}`);
    const left = (await page.context().cookies(origin)).filter((x) => x.name === 'usher_session' && x.value !== '');
    assert.deepEqual(left, [], 'the usher_session cookie is still there');
    await screenshot(page, 'logon-after-logoff');
  });
  await page.context().close();

  await step('favourites and recent apps follow the user to a new browser; another user does not see them', async () => {
    const fav = (pg, r) => pg.locator(`ul#resources > li.resource[data-name="${cssString(r.name)}"]`)
      .getByRole('button', { name: `Favourite ${r.display_name}`, exact: true });
    const starred = ctx.resources.filter((r) => r.name !== ctx.target.name)[7];
    const saved = (pg) => pg.waitForResponse((r) => r.request().method() === 'PUT' && new URL(r.url()).pathname === '/api/v1/preferences');

    const first = await newPage();
    await first.goto(`${origin}/`);
    await loggedOut(first);
    await logOn(first);
    await rendered(first, 'apps');
    if (await fav(first, starred).getAttribute('aria-pressed') === 'true') {
      const unstarred = saved(first);
      await fav(first, starred).click();
      assert.equal((await unstarred).status(), 200);
    }
    const put = saved(first);
    await fav(first, starred).click();
    assert.equal(await fav(first, starred).getAttribute('aria-pressed'), 'true', 'the star does not show pressed at once');
    const resp = await put;
    assert.equal(resp.status(), 200, `PUT /api/v1/preferences answered ${resp.status()}`);
    assert.ok((await resp.json()).favourites.includes(starred.name), 'the server did not keep the favourite');
    const loggedOff = first.waitForResponse((r) => r.request().method() === 'POST' && /\/logout$/.test(new URL(r.url()).pathname));
    await headerLogoff(first).click();
    await loggedOff;
    await loggedOut(first);
    await first.context().close();

    // A new browser context: no cookies, no localStorage.
    const second = await newPage();
    await second.goto(`${origin}/`);
    await loggedOut(second);
    assert.equal(await second.evaluate(() => localStorage.length), 0, 'a new context has localStorage');
    await logOn(second);
    await rendered(second, 'apps');
    assert.equal(await fav(second, starred).getAttribute('aria-pressed'), 'true', `${starred.name} is not starred in a new browser`);
    const folder = second.locator('select#folder');
    await folder.selectOption(':fav');
    const shownFavs = await resources(second).evaluateAll((els) => els.filter((el) => !el.hidden).map((el) => el.dataset.name));
    assert.ok(shownFavs.includes(starred.name), `Favourites shows ${shownFavs.join(', ')}, not ${starred.name}`);
    // The app launched in the first browser is among the recent ones.
    await folder.selectOption(':recent');
    const shownRecent = await resources(second).evaluateAll((els) => els.filter((el) => !el.hidden).map((el) => el.dataset.name));
    assert.ok(shownRecent.includes(ctx.target.name), `Recent shows ${shownRecent.join(', ')}, not ${ctx.target.name}, launched earlier`);
    info(`favourites in a new browser: ${shownFavs.join(', ')}; recent: ${shownRecent.join(', ')}`);
    await screenshot(second, 'apps-favourites', false);

    // The site DB unavailable: the star stays, kept in this browser, and a
    // note says so without blocking anything.
    await folder.selectOption('');
    const down = (route) => route.fulfill({
      status: 503, contentType: 'application/json',
      body: JSON.stringify({ error: { code: 'site_db_unavailable', message: 'the site DB is unavailable' } }),
    });
    await second.route('**/api/v1/preferences', down);
    const more = ctx.resources.filter((r) => r.name !== ctx.target.name && r.name !== starred.name)[9];
    const refused = saved(second);
    await fav(second, more).click();
    assert.equal((await refused).status(), 503);
    await second.locator('#prefs-note').waitFor({ state: 'visible' });
    info(`#prefs-note: "${(await second.locator('#prefs-note').textContent()).trim()}"`);
    assert.equal(await fav(second, more).getAttribute('aria-pressed'), 'true', 'the star went off when the server could not save it');
    const kept = await second.evaluate((u) => JSON.parse(localStorage.getItem(`usher.prefs.${u}`) || 'null'), user);
    assert.ok(kept?.favourites?.includes(more.name), `this browser did not keep ${more.name}: ${JSON.stringify(kept)}`);
    await screenshot(second, 'apps-favourites-kept-here', false);
    await axe(second, 'apps page, preferences kept in the browser');
    await second.unroute('**/api/v1/preferences', down);
    await second.context().close();

    const other = await newPage();
    await other.goto(`${origin}/`);
    await loggedOut(other);
    await logOn(other, 'user0002');
    await rendered(other, 'apps');
    assert.equal(await fav(other, starred).getAttribute('aria-pressed'), 'false', `user0002 sees user0001's favourite ${starred.name}`);
    const r = await api(other, 'GET', '/api/v1/preferences');
    assert.equal(r.status, 200, `GET /api/v1/preferences as user0002: ${r.status} ${r.text}`);
    assert.ok(!r.json.favourites.includes(starred.name), `user0002's preferences hold user0001's favourite: ${r.text}`);
    await other.context().close();
  });

  await step('phone (390x844): the apps page has no horizontal scrolling', async () => {
    const phone = await newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 3, isMobile: true, hasTouch: true });
    await phone.goto(`${origin}/`);
    await loggedOut(phone);
    await screenshot(phone, 'logon-phone', false);
    await logOn(phone);
    await rendered(phone, 'apps');
    const [scrollWidth, innerWidth] = await phone.evaluate(() => [document.scrollingElement.scrollWidth, window.innerWidth]);
    info(`scrollWidth ${scrollWidth}, innerWidth ${innerWidth}`);
    assert.ok(scrollWidth <= 390, `the apps page is ${scrollWidth} px wide on a 390 px phone`);
    // The "Show" label stays on the line of its select.
    const [label, select] = [await phone.locator('label[for="folder"]').boundingBox(), await phone.locator('select#folder').boundingBox()];
    info(`"Show" at ${JSON.stringify(label)}, its select at ${JSON.stringify(select)}`);
    assert.ok(label.y >= select.y - 1 && label.y + label.height <= select.y + select.height + 1 && label.x < select.x,
      'the "Show" label is not on the line of its select, before it');
    await screenshot(phone, 'apps-phone', false);
    await phone.context().close();
  });

  await step('keyboard: Tab reaches User name, Password and Log on in order; Enter logs on', async () => {
    const kb = await newPage();
    await kb.goto(`${origin}/`);
    await loggedOut(kb);
    const focused = () => kb.evaluate(() => {
      const el = document.activeElement;
      if (!el || el === document.body) {
        return 'body';
      }
      if (el.name === 'username' || el.name === 'password') {
        return el.name;
      }
      if ((el.tagName === 'BUTTON' || el.type === 'submit') && (el.textContent || el.value).trim() === 'Log on') {
        return 'logon';
      }
      return `${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}`;
    });
    // An autofocused User name counts as reached.
    const seen = [await focused()];
    for (let i = 0; i < 15 && !seen.includes('logon'); i++) {
      await kb.keyboard.press('Tab');
      seen.push(await focused());
    }
    info(`focus: ${seen.join(' -> ')}`);
    const at = (x) => seen.indexOf(x);
    assert.ok(at('username') >= 0, 'Tab never reaches User name');
    assert.ok(at('password') > at('username'), 'Tab does not reach Password after User name');
    assert.ok(at('logon') > at('password'), 'Tab does not reach Log on after Password');

    // Logging on with the keyboard alone.
    await kb.reload();
    await loggedOut(kb);
    for (let i = 0; i < 15 && (await focused()) !== 'username'; i++) {
      await kb.keyboard.press('Tab');
    }
    assert.equal(await focused(), 'username');
    await kb.keyboard.type(user);
    await kb.keyboard.press('Tab');
    assert.equal(await focused(), 'password', 'Tab from User name does not go to Password');
    await kb.keyboard.type(password);
    await forgetRendered(kb);
    await kb.keyboard.press('Enter');
    await rendered(kb, 'apps');
    await headerLogoff(kb).waitFor({ state: 'visible' });
    await kb.context().close();
  });
}

// sessionRow waits for the row of the launched session: by its ID when
// the launch answer gave it, else the one naming the resource.
async function sessionRow(page) {
  if (ctx.sessionID) {
    const row = page.locator(`table#sessions tr[data-session="${cssString(ctx.sessionID)}"]`);
    await row.waitFor({ state: 'visible' });
    return row;
  }
  const t = ctx.target;
  const row = sessionRows(page).filter({ hasText: t.display_name }).first();
  await row.waitFor({ state: 'visible' });
  return row;
}

// rowButton is a session row's button whose accessible name is label, or
// starts with it ("Log off Code Editor").
function rowButton(row, label) {
  return row.getByRole('button', { name: new RegExp(`^${label}\\b`) });
}

run('portal e2e', 'failure', scenario);
