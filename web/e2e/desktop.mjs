// End-to-end test of the portal's session view (internal/web/portal/
// session.js) in a real browser against a real VNC server: Playwright
// drives Debian's chromium through the embedded portal, which a test site
// serves with a fake user API, to a desktop that TigerVNC's Xvnc draws
// (its root window DESKTOP_COLOUR) behind websockify. It checks the
// desktop in the canvas, the session resized to the window, the toolbar,
// the keyboard's way in and out, the clipboard both ways, reconnection
// after an unclean close, close code 4005's message (the gateway's; the
// agent's codes, 4001 to 4004, are triggered for real over the demo's
// whole chain by demo-desktop.mjs), direct mode, the .rdp download of a
// launch without a display, and a phone's width; axe-core on each state;
// a screenshot of each.
//
// cmd/usher's TestPortalDesktopInBrowser starts Xvnc, websockify and the
// site, and runs it. The site's /test/ routes (the test's, not usher's):
//
//	GET  /test/state                  counts of the API's calls, the last display request's subprotocols, open displays
//	POST /test/display/cut            cut the display connections (no close frame)
//	POST /test/display/close?code=N   close them with code N
//	POST /test/x/copy                 put the body on the desktop's clipboard
//	GET  /test/x/clipboard            the desktop's clipboard
//
// Environment (besides lib.mjs's): DESKTOP_COLOUR, the desktop's colour
// (default #1f6feb).

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { axe, env, fetchJSON, info, newPage, origin, run, screenshot, showOnFailure, step, timeout } from './lib.mjs';

const colour = env.DESKTOP_COLOUR || '#1f6feb';
const rgb = [1, 3, 5].map((i) => parseInt(colour.slice(i, i + 2), 16));
const maxClipboardBytes = 256 * 1024;

// ---- the view's parts ----

const sessionView = (page) => page.locator('#view-session');
const toolbar = (page) => page.getByRole('toolbar', { name: 'Desktop controls' });
const tool = (page, name) => toolbar(page).getByRole('button', { name, exact: true });
const message = (page) => page.locator('#session-message');
const messageAction = (page, name) => message(page).getByRole('button', { name, exact: true });

// ---- the test site ----

async function siteState() {
  const r = await fetchJSON('GET', '/test/state');
  assert.equal(r.status, 200, `GET /test/state: ${r.status}`);
  return r.json;
}

async function test(method, path, body) {
  const r = await fetch(new URL(path, origin), { method, body, signal: AbortSignal.timeout(timeout) });
  const text = await r.text();
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${text}`);
  return r.status === 204 ? null : JSON.parse(text);
}

// desktopClipboard waits until the desktop's clipboard holds want.
async function desktopClipboard(want) {
  const deadline = Date.now() + timeout;
  let got = '';
  while (Date.now() < deadline) {
    const r = await fetch(new URL('/test/x/clipboard', origin), { signal: AbortSignal.timeout(timeout) });
    got = await r.text();
    if (r.ok && got === want) {
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 100)); // Xvnc's clipboard has no event to wait for
  }
  assert.fail(`the desktop's clipboard holds ${JSON.stringify(got.slice(0, 80))}, not ${JSON.stringify(want.slice(0, 80))}`);
}

// ---- waits ----

// viewState waits until the session view's data-state is want.
async function viewState(page, want) {
  await page.waitForFunction((w) => document.querySelector('#view-session')?.dataset.state === w, want, { timeout });
}

// desktopShown waits until noVNC's canvas shows the desktop's colour at
// its centre and at a corner.
async function desktopShown(page) {
  await page.waitForFunction((want) => {
    const c = document.querySelector('#session-screen canvas');
    if (!c || c.width < 4 || c.height < 4) {
      return false;
    }
    const ctx = c.getContext('2d');
    return [[c.width >> 1, c.height >> 1], [2, 2]].every(([x, y]) => {
      const d = ctx.getImageData(x, y, 1, 1).data;
      return want.every((v, i) => Math.abs(d[i] - v) <= 2);
    });
  }, rgb, { timeout });
}

// sessionFits waits until the desktop's size is the view's (the session
// resized to the window: noVNC's screen, inside #session-screen), and
// returns it.
async function sessionFits(page) {
  const sizes = () => page.evaluate(() => {
    const c = document.querySelector('#session-screen canvas');
    const box = document.querySelector('#session-screen > div'); // noVNC's screen
    const r = box?.getBoundingClientRect();
    return { width: c?.width, height: c?.height, boxWidth: r?.width, boxHeight: r?.height };
  });
  try {
    await page.waitForFunction(() => {
      const c = document.querySelector('#session-screen canvas');
      const r = document.querySelector('#session-screen > div')?.getBoundingClientRect();
      // noVNC asks for the screen's size in whole pixels, rounded down.
      return c && r && c.width === Math.floor(r.width) && c.height === Math.floor(r.height);
    }, null, { timeout });
  } catch (err) {
    throw new Error(`the desktop does not fit the view: ${JSON.stringify(await sizes())}`, { cause: err });
  }
  const { width, height } = await sizes();
  return { width, height };
}

async function focused(page) {
  return page.evaluate(() => {
    const a = document.activeElement;
    return a ? (a.id || a.tagName.toLowerCase()) : '';
  });
}

async function focusIsOnTheDesktop(page) {
  await page.waitForFunction(() => document.activeElement === document.querySelector('#session-screen canvas'), null, { timeout });
}

// openDesktop opens resource name from the apps page, and waits for its
// desktop in the canvas; it returns the launch answer.
async function openDesktop(page, displayName, id) {
  const launched = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname.endsWith('/launch'));
  await page.getByRole('button', { name: `Open ${displayName}`, exact: true }).click();
  const resp = await launched;
  assert.equal(resp.status(), 200);
  const l = await resp.json();
  await page.waitForFunction((h) => location.hash === h, `#/session/${id}`, { timeout });
  await viewState(page, 'connected');
  await desktopShown(page);
  return l;
}

// subprotocolsOf asserts that the last display request offered "binary"
// and the ticket of launch answer l.
async function offeredTicketOf(l) {
  const st = await siteState();
  const offered = st.protocols.join(',').split(',').map((p) => p.trim());
  assert.deepEqual(offered, ['binary', `usher.ticket.${l.ticket}`], 'the display was not opened with "binary" and the launch\'s ticket');
}

async function messageSays(page, re) {
  await message(page).waitFor({ state: 'visible' });
  await page.waitForFunction(([src, flags]) => new RegExp(src, flags).test(document.querySelector('#session-message-text')?.textContent ?? ''),
    [re.source, re.flags], { timeout });
  const text = (await page.locator('#session-message-text').textContent()).trim();
  info(`message: "${text}"`);
  return text;
}

async function openPortal(page) {
  await page.context().addCookies([{ name: 'usher_portal', value: '1', url: origin }]);
  await page.goto(`${origin}/#/apps`);
  await page.waitForFunction(() => document.body.dataset.rendered === 'apps', null, { timeout });
}

// ---- the scenario ----

async function scenario() {
  const page = await newPage({ permissions: ['clipboard-read', 'clipboard-write'] });
  const ctx = {};

  await step('open a desktop: the canvas shows it, with the launch\'s ticket; the session fits the view; noVNC has the focus; axe', async () => {
    await openPortal(page);
    const t0 = Date.now();
    ctx.launch = await openDesktop(page, 'Test Desktop', 's-desk');
    info(`the desktop showed ${Date.now() - t0} ms after Open's click`);
    await offeredTicketOf(ctx.launch);
    const size = await sessionFits(page);
    info(`desktop ${size.width}×${size.height}, the size of the view (Xvnc started at 1024×768)`);
    assert.notDeepEqual(size, { width: 1024, height: 768 }, 'the session kept its size');
    await focusIsOnTheDesktop(page);
    assert.match(await page.title(), /^Test Desktop · /);
    assert.equal(await tool(page, 'Download .rdp').isVisible(), true, 'no "Download .rdp" in the toolbar');
    await screenshot(page, 'desktop', false);
    await axe(page, 'session view');
  });

  await step('keyboard: Ctrl+Alt+Shift+Home leaves the desktop for the toolbar, the arrows move along it, Tab goes back in', async () => {
    await page.keyboard.press('Control+Alt+Shift+Home');
    assert.equal(await focused(page), 'session-cad', 'the focus is not on the toolbar\'s first button');
    await page.keyboard.press('ArrowRight');
    assert.equal(await focused(page), 'session-fullscreen');
    await page.keyboard.press('End');
    assert.equal(await focused(page), 'session-logoff');
    await page.keyboard.press('Home');
    assert.equal(await focused(page), 'session-cad');
    // One tab stop: the toolbar's buttons but one are out of the tab order.
    const stops = await toolbar(page).locator('button[tabindex="0"]').count();
    assert.equal(stops, 1, `${stops} of the toolbar's buttons are tab stops`);
    await page.keyboard.press('Tab');
    await focusIsOnTheDesktop(page);
  });

  await step('Ctrl+Alt+Del goes, and the focus is back on the desktop', async () => {
    await tool(page, 'Ctrl+Alt+Del').click();
    await focusIsOnTheDesktop(page);
    assert.equal(await page.evaluate(() => document.querySelector('#view-session').dataset.state), 'connected');
  });

  await step('full screen: the view fills the screen, and comes back', async () => {
    await tool(page, 'Full screen').click();
    // The button follows the fullscreenchange event, which comes after
    // the document's state changed: wait for both.
    const button = await tool(page, 'Full screen').elementHandle();
    const pressed = (want) => page.waitForFunction(([b, w]) => b.getAttribute('aria-pressed') === w, [button, want], { timeout });
    await page.waitForFunction(() => document.fullscreenElement?.id === 'view-session', null, { timeout });
    await pressed('true');
    await sessionFits(page);
    await desktopShown(page);
    await screenshot(page, 'desktop-fullscreen', false);
    await tool(page, 'Full screen').click();
    await page.waitForFunction(() => document.fullscreenElement === null, null, { timeout });
    await pressed('false');
  });

  await step('clipboard, desktop to browser: text copied on the desktop is on this device\'s clipboard and in the panel', async () => {
    const text = 'copied on the desktop: ünïcödé ✓';
    await test('POST', '/test/x/copy', text);
    await page.waitForFunction((t) => document.querySelector('#session-clip-text').value === t, text, { timeout });
    const local = await page.evaluate(() => navigator.clipboard.readText());
    assert.equal(local, text, 'the device\'s clipboard does not hold the desktop\'s text');
    info(`note: "${await page.locator('#session-clip-note').textContent()}"`);
  });

  await step('clipboard, browser to desktop: the panel\'s text, "Paste from this device", and too much text refused', async () => {
    await tool(page, 'Clipboard').click();
    assert.equal(await tool(page, 'Clipboard').getAttribute('aria-expanded'), 'true');
    assert.equal(await focused(page), 'session-clip-text', 'opening the panel did not focus its text');
    const typed = 'typed in the browser: ñ ✓';
    await page.getByLabel('Clipboard text', { exact: true }).fill(typed);
    await page.getByRole('button', { name: 'Send to desktop', exact: true }).click();
    await desktopClipboard(typed);

    const device = 'from the device\'s clipboard';
    await page.evaluate((t) => navigator.clipboard.writeText(t), device);
    await page.getByRole('button', { name: 'Paste from this device', exact: true }).click();
    await desktopClipboard(device);

    const big = 'x'.repeat(maxClipboardBytes + 1);
    await page.getByLabel('Clipboard text', { exact: true }).fill(big);
    await page.getByRole('button', { name: 'Send to desktop', exact: true }).click();
    await page.waitForFunction(() => /at most 256 KB/.test(document.querySelector('#session-clip-note').textContent), null, { timeout });
    info(`note: "${await page.locator('#session-clip-note').textContent()}"`);
    await desktopClipboard(device); // unchanged
    await page.getByLabel('Clipboard text', { exact: true }).fill('');
    await screenshot(page, 'desktop-clipboard', false);
    await axe(page, 'session view, clipboard open');
    await tool(page, 'Clipboard').click();
    assert.equal(await page.locator('#session-clip').isVisible(), false);
  });

  await step('"Download .rdp": a launch file with a ticket of its own, and the desktop stays', async () => {
    const before = (await siteState()).counts.reconnect ?? 0;
    const downloaded = page.waitForEvent('download', { timeout });
    await tool(page, 'Download .rdp').click();
    const d = await downloaded;
    assert.equal(d.suggestedFilename(), 'desk.rdp');
    assert.match(await readFile(await d.path(), 'utf8'), /^full address:s:/m);
    assert.equal((await siteState()).counts.reconnect, before + 1, 'the launch file came without a fresh ticket');
    assert.equal(await page.evaluate(() => document.querySelector('#view-session').dataset.state), 'connected');
  });

  await step('an unclean close (the network cut): "Reconnecting…", a fresh ticket, the desktop again', async () => {
    const reconnected = page.waitForResponse((r) => new URL(r.url()).pathname === '/api/v1/sessions/s-desk/reconnect');
    const cut = await test('POST', '/test/display/cut');
    assert.equal(cut.cut, 1, `${cut.cut} display connections were open, want 1`);
    await viewState(page, 'reconnecting');
    const said = (await page.locator('#session-state').textContent()).trim();
    info(`state: "${said}"`);
    assert.match(said, /^Reconnecting… \(attempt 1 of \d+\)$/);
    await screenshot(page, 'desktop-reconnecting', false);
    const l = await (await reconnected).json();
    await viewState(page, 'connected');
    await desktopShown(page);
    await offeredTicketOf(l);
    assert.notEqual(l.ticket, ctx.launch.ticket);
  });

  await step('close code 4005 (the host out of reach): the view reconnects by itself', async () => {
    await test('POST', '/test/display/close?code=4005');
    await viewState(page, 'reconnecting');
    await page.waitForFunction(() => /cannot be reached/.test(document.querySelector('#session-message-text').textContent), null, { timeout });
    await viewState(page, 'connected');
    await desktopShown(page);
  });

  await step('Disconnect: the REST route, then "Reconnect" brings the desktop back', async () => {
    const before = (await siteState()).counts.disconnect ?? 0;
    await tool(page, 'Disconnect').click();
    await viewState(page, 'ended');
    await messageSays(page, /You disconnected Test Desktop\. The session is still running/);
    assert.equal((await siteState()).counts.disconnect, before + 1);
    await messageAction(page, 'Reconnect').click();
    await viewState(page, 'connected');
    await desktopShown(page);
  });

  await step('Log off: asked first, the REST route, then back to the apps; the display closes', async () => {
    await tool(page, 'Log off').click();
    const dialog = page.locator('dialog#confirm');
    await dialog.waitFor({ state: 'visible' });
    await dialog.getByRole('button', { name: 'Log off', exact: true }).click();
    await viewState(page, 'ended');
    await messageSays(page, /You logged off Test Desktop\./);
    assert.equal((await siteState()).counts.logoff, 1);
    await messageAction(page, 'Back to apps').click();
    await page.waitForFunction(() => document.body.dataset.view === 'apps', null, { timeout });
    const deadline = Date.now() + timeout;
    while ((await siteState()).open !== 0) {
      assert.ok(Date.now() < deadline, 'the display connection is still open');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  });

  await step('a reload of the session view reconnects with a fresh ticket; leaving the view closes the display', async () => {
    await openDesktop(page, 'Test Desktop', 's-desk');
    const reconnected = page.waitForResponse((r) => new URL(r.url()).pathname === '/api/v1/sessions/s-desk/reconnect');
    await page.reload();
    const l = await (await reconnected).json();
    await viewState(page, 'connected');
    await desktopShown(page);
    await offeredTicketOf(l);
    await page.getByRole('navigation', { name: 'Portal' }).getByRole('link', { name: 'Sessions', exact: true }).click();
    await page.waitForFunction(() => document.body.dataset.rendered === 'sessions', null, { timeout });
    const deadline = Date.now() + timeout;
    while ((await siteState()).open !== 0) {
      assert.ok(Date.now() < deadline, 'the display connection is still open after leaving the view');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await page.locator('table#sessions tr[data-session="s-desk"]').getByRole('button', { name: 'Reconnect Test Desktop', exact: true }).click();
    await viewState(page, 'connected');
    await desktopShown(page);
  });

  await step('direct mode: a display_url at another origin (websockify\'s, allowed by the portal\'s configuration) opens too', async () => {
    await page.getByRole('navigation', { name: 'Portal' }).getByRole('link', { name: 'Apps', exact: true }).click();
    await page.waitForFunction(() => document.body.dataset.rendered === 'apps', null, { timeout });
    const before = (await siteState()).counts.display ?? 0;
    const l = await openDesktop(page, 'Direct Desktop', 's-direct');
    assert.match(l.display_url, /^ws:\/\/127\.0\.0\.1:\d+\/$/);
    assert.equal((await siteState()).counts.display ?? 0, before, 'the direct display went through the gateway');
    const csp = await page.evaluate(async () => (await fetch('/')).headers.get('content-security-policy'));
    assert.ok(csp.includes(new URL(l.display_url).origin), `the policy does not allow ${new URL(l.display_url).origin}: ${csp}`);
    info(`connect-src: ${csp.split(';').find((d) => d.trim().startsWith('connect-src')).trim()}`);
  });

  await step('a launch without display_url: Open downloads the .rdp file, as before', async () => {
    await page.getByRole('navigation', { name: 'Portal' }).getByRole('link', { name: 'Apps', exact: true }).click();
    await page.waitForFunction(() => document.body.dataset.rendered === 'apps', null, { timeout });
    const downloaded = page.waitForEvent('download', { timeout });
    await page.getByRole('button', { name: 'Open Notepad', exact: true }).click();
    const d = await downloaded;
    assert.equal(d.suggestedFilename(), 'notepad.rdp');
    await page.locator('a#launch-file').waitFor({ state: 'visible' });
    assert.equal(await page.evaluate(() => document.body.dataset.view), 'apps');
  });

  await step('a phone\'s width: the desktop fits it, the toolbar wraps, nothing scrolls sideways; axe', async () => {
    const phone = await newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 3, isMobile: true, hasTouch: true });
    await openPortal(phone);
    await openDesktop(phone, 'Test Desktop', 's-desk');
    const size = await sessionFits(phone);
    info(`desktop ${size.width}×${size.height} on a 390×844 screen`);
    assert.ok(size.width <= 390, `the desktop is ${size.width} wide on a 390-pixel screen`);
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page scrolls ${overflow} pixels sideways`);
    for (const name of ['Ctrl+Alt+Del', 'Clipboard', 'Disconnect', 'Log off']) {
      const box = await tool(phone, name).boundingBox();
      assert.ok(box && box.x >= 0 && box.x + box.width <= 390, `${name} is off the screen`);
    }
    await screenshot(phone, 'desktop-phone', false);
    await axe(phone, 'session view on a phone');
    await phone.context().close();
    showOnFailure(page);
  });
}

run('desktop e2e', 'desktop-failure', scenario);
