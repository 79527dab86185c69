// End-to-end test of the portal's session view over the demo's whole
// chain: the real site (usher serve --demo's desktop host), a logon
// through the portal's form, a real launch, usher's gateway, the VDA
// agent and the session's own Xvnc. Playwright drives Debian's chromium;
// axe-core on the view; a screenshot of each state.
//
// cmd/usher's TestPortalDemoDesktopInBrowser starts the site and a TCP
// proxy in front of it (BASE_URL), and serves at TEST_URL its look at the
// sessions' X servers (see desktopControl there): the newest session's
// Xvnc pid, screen size and marker; setting the marker; killing the Xvnc;
// whether a process runs; what was typed in the session's xterm; cutting
// the network; the session's clipboard.
//
// Environment (besides lib.mjs's): TEST_URL, DESKTOP_USER, DESKTOP_NAME,
// DESKTOP_COLOUR, XTERM (non-empty: the desktop runs the typing xterm).

import assert from 'node:assert/strict';
import { api, axe, env, info, newPage, origin, password, run, screenshot, showOnFailure, step, timeout, watch } from './lib.mjs';

const testURL = env.TEST_URL;
const user = env.DESKTOP_USER || 'user0001';
const desktopName = env.DESKTOP_NAME || 'Pooled Linux Desktop';
const colour = env.DESKTOP_COLOUR || '#1f6feb';
const rgb = [1, 3, 5].map((i) => parseInt(colour.slice(i, i + 2), 16));

const toolbar = (page) => page.getByRole('toolbar', { name: 'Desktop controls' });
const tool = (page, name) => toolbar(page).getByRole('button', { name, exact: true });
const message = (page) => page.locator('#session-message');
const messageAction = (page, name) => message(page).getByRole('button', { name, exact: true });

// ---- the test's look at the X servers ----

async function test(method, path, body) {
  const r = await fetch(new URL(path, testURL), { method, body, signal: AbortSignal.timeout(timeout) });
  const text = await r.text();
  return { ok: r.ok, status: r.status, text, json: r.ok && r.headers.get('content-type')?.includes('json') ? JSON.parse(text) : null };
}

async function mustTest(method, path, body) {
  const r = await test(method, path, body);
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${r.text}`);
  return r;
}

// until polls fn (the X server has no event for what it waits for) until
// it returns a truthy value, which it returns.
async function until(what, fn) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last?.done ?? last) {
      return last;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.fail(`${what} (last: ${JSON.stringify(last)})`);
}

const session = async () => (await mustTest('GET', '/test/session')).json;
const alive = async (pid) => (await mustTest('GET', `/test/alive?pid=${pid}`)).json.alive;

// ---- waits ----

// viewState waits until the session view's data-state is want; it polls
// rather than waiting for animation frames, which a page in the
// background does not get.
async function viewState(page, want) {
  await page.waitForFunction((w) => document.querySelector('#view-session')?.dataset.state === w, want, { timeout, polling: 100 });
}

// desktopShown waits until the canvas shows the desktop's colour at its
// centre and top left corner (the xterm is near it, not on it).
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

const canvasSize = (page) => page.evaluate(() => {
  const c = document.querySelector('#session-screen canvas');
  return { width: c?.width, height: c?.height };
});

// sessionFollows waits until the canvas has the view's size and the
// session's X screen has the canvas's, and returns that size.
async function sessionFollows(page) {
  await page.waitForFunction(() => {
    const c = document.querySelector('#session-screen canvas');
    const r = document.querySelector('#session-screen > div')?.getBoundingClientRect();
    return c && r && c.width === Math.floor(r.width) && c.height === Math.floor(r.height);
  }, null, { timeout });
  const size = await canvasSize(page);
  await until(`the session's X screen is not ${size.width}×${size.height}`, async () => {
    const s = await session();
    return s.Width === size.width && s.Height === size.height;
  });
  return size;
}

async function messageSays(page, re) {
  await message(page).waitFor({ state: 'visible' });
  await page.waitForFunction(([src, flags]) => new RegExp(src, flags).test(document.querySelector('#session-message-text')?.textContent ?? ''),
    [re.source, re.flags], { timeout });
  const text = (await page.locator('#session-message-text').textContent()).trim();
  info(`message: "${text}"`);
}

// connected waits for the desktop in the view, and returns the session id.
async function connected(page) {
  await viewState(page, 'connected');
  await desktopShown(page);
  return decodeURIComponent(new URL(page.url()).hash.replace(/^#\/session\//, ''));
}

// ---- the scenario ----

async function scenario() {
  const page = await newPage({ permissions: ['clipboard-read', 'clipboard-write'], viewport: { width: 1100, height: 760 } });
  const ctx = {};

  await step(`log on as ${user} through the form, open "${desktopName}": the canvas shows the session's colour; axe`, async () => {
    await page.goto(`${origin}/`);
    const form = page.locator('form#logon');
    await form.getByLabel('User name', { exact: true }).fill(user);
    await form.getByLabel('Password', { exact: true }).fill(password);
    const answered = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname.endsWith('/login'));
    await form.getByRole('button', { name: 'Log on', exact: true }).click();
    assert.equal((await answered).status(), 200, 'the logon failed');
    await page.waitForFunction(() => document.body.dataset.rendered === 'apps', null, { timeout });
    const launched = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname.endsWith('/launch'));
    const t0 = Date.now();
    await page.getByRole('button', { name: `Open ${desktopName}`, exact: true }).click();
    const l = await (await launched).json();
    assert.equal(l.display_url, `/api/v1/sessions/${l.session_id}/display`, 'the launch has no gateway display_url');
    assert.match(l.machine, /^pooled-vda-/);
    ctx.id = await connected(page);
    assert.equal(ctx.id, l.session_id);
    info(`session ${l.session_id} on ${l.machine}: the desktop showed ${Date.now() - t0} ms after Open's click`);
    ctx.x = await session();
    assert.equal(ctx.x.ID, ctx.id, 'the newest X server is not the launch\'s session');
    assert.equal(await alive(ctx.x.Pid), true);
    info(`Xvnc ${ctx.x.Pid} on display ${ctx.x.Display}`);
    await screenshot(page, 'demo-desktop', false);
    await axe(page, 'session view');
  });

  await step('the session\'s X screen follows the window: the size of the view, and again after a resize', async () => {
    const before = await sessionFollows(page);
    await page.setViewportSize({ width: 800, height: 560 });
    const after = await sessionFollows(page);
    info(`X screen ${before.width}×${before.height}, then ${after.width}×${after.height}`);
    assert.notDeepEqual(after, before, 'the resize did not change the session\'s size');
    await desktopShown(page);
  });

  await step('5 s offline: "Reconnecting…", then the same session (its Xvnc, its marker)', async () => {
    const mark = `mark-${Date.now()}`;
    await mustTest('POST', `/test/session/mark?v=${mark}`);
    await page.context().setOffline(true);
    const cut = (await mustTest('POST', '/test/net?down=1')).json.cut;
    info(`${cut} connections cut`);
    await viewState(page, 'reconnecting');
    await screenshot(page, 'demo-desktop-offline', false);
    await new Promise((resolve) => setTimeout(resolve, 5000)); // the outage's length, not a wait for an event
    await mustTest('POST', '/test/net?down=0');
    await page.context().setOffline(false);
    await page.waitForFunction(() => document.querySelector('#view-session')?.dataset.state === 'connected', null, { timeout: 4 * timeout });
    assert.equal(await connected(page), ctx.id);
    const x = await session();
    assert.deepEqual([x.ID, x.Pid, x.Mark], [ctx.id, ctx.x.Pid, mark], 'not the same session\'s X server after the outage');
  });

  await step('4001: a second page opening the session takes it; "Open it here" takes it back', async () => {
    const second = watch(await page.context().newPage());
    await second.goto(`${origin}/#/session/${encodeURIComponent(ctx.id)}`);
    assert.equal(await connected(second), ctx.id);
    await viewState(page, 'ended');
    await page.bringToFront();
    await messageSays(page, /opened in another window or on another device/);
    await screenshot(page, 'demo-desktop-taken-over', false);
    await axe(page, 'session view, opened elsewhere');
    await messageAction(page, 'Open it here').click();
    assert.equal(await connected(page), ctx.id);
    await viewState(second, 'ended');
    await second.close();
    showOnFailure(page);
    assert.equal((await session()).Pid, ctx.x.Pid);
  });

  await step('4004: a disconnect through the API; "Reconnect" returns to the same Xvnc', async () => {
    const r = await api(page, 'POST', `/api/v1/sessions/${encodeURIComponent(ctx.id)}/disconnect`);
    assert.equal(r.status, 204, `disconnect: ${r.status} ${r.text}`);
    await viewState(page, 'ended');
    await messageSays(page, /was disconnected\. It is still running/);
    await messageAction(page, 'Reconnect').click();
    assert.equal(await connected(page), ctx.id);
    assert.equal((await session()).Pid, ctx.x.Pid);
  });

  if (env.XTERM) {
    await step('typing äöü@€ into the session\'s xterm: its UTF-8 bytes in the file it appends to', async () => {
      const box = await page.locator('#session-screen canvas').boundingBox();
      // The xterm is near the top left corner; without a window manager,
      // the keyboard follows the pointer.
      await page.mouse.move(box.x + 60, box.y + 50);
      await page.locator('#session-screen canvas').focus();
      // Keys a US layout lacks, as a layout that has them sends them: a
      // keydown with the character as its key (Playwright's keyboard
      // would only insert text, which reaches no desktop).
      const text = 'äöü@€';
      const cdp = await page.context().newCDPSession(page);
      const typeLine = async () => {
        for (const ch of text) {
          for (const type of ['keyDown', 'keyUp']) {
            await cdp.send('Input.dispatchKeyEvent', { type, key: ch, text: type === 'keyDown' ? ch : undefined, unmodifiedText: ch });
          }
        }
        await page.keyboard.press('Enter');
      };
      // Twice: the first key whose keysym Xvnc adds to its keymap can be
      // lost (xterm has not seen the new mapping yet); the second line
      // must be whole.
      await typeLine();
      await typeLine();
      await cdp.detach();
      const typed = await until('the typed line is not in the file', async () => {
        const r = await mustTest('GET', `/test/typed?id=${encodeURIComponent(ctx.id)}`);
        const lines = r.text.split('\n');
        return lines.length >= 3 && lines[lines.length - 2] === text ? r.text : null;
      });
      info(`the file holds ${JSON.stringify(typed)} (${Buffer.from(typed).toString('hex')})`);
    });
  }

  await step('clipboard both ways against the session\'s X server', async () => {
    const copied = 'copied in the session: ünïcödé ✓';
    await mustTest('POST', '/test/x/copy', copied);
    await page.waitForFunction((t) => document.querySelector('#session-clip-text').value === t, copied, { timeout });
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), copied);
    await tool(page, 'Clipboard').click();
    const sent = 'sent from the browser: ñ ✓';
    await page.getByLabel('Clipboard text', { exact: true }).fill(sent);
    await page.getByRole('button', { name: 'Send to desktop', exact: true }).click();
    await until('the session\'s clipboard does not hold the sent text', async () => (await test('GET', '/test/x/clipboard')).text === sent);
    await tool(page, 'Clipboard').click();
  });

  await step('4002: a logoff through the API ends the Xvnc; "Open again" starts a new session', async () => {
    const r = await api(page, 'POST', `/api/v1/sessions/${encodeURIComponent(ctx.id)}/logoff`);
    assert.equal(r.status, 204, `logoff: ${r.status} ${r.text}`);
    await viewState(page, 'ended');
    await messageSays(page, /session has ended: it was logged off/);
    await until(`Xvnc ${ctx.x.Pid} still runs after the logoff`, async () => !(await alive(ctx.x.Pid)));
    await messageAction(page, 'Open again').click();
    const id = await connected(page);
    assert.notEqual(id, ctx.id, 'the relaunch returned to the logged-off session');
    ctx.id = id;
    ctx.x = await until('the new session\'s X server', async () => {
      const x = await session();
      return x.ID === id ? x : null;
    });
  });

  await step('4003: the Xvnc killed, the view says the display stopped; "Open again" starts a new session', async () => {
    await mustTest('POST', '/test/session/kill');
    await viewState(page, 'ended');
    await messageSays(page, /display stopped, and the session has ended/);
    await messageAction(page, 'Open again').click();
    const id = await connected(page);
    assert.notEqual(id, ctx.id);
    ctx.id = id;
    ctx.x = await until('the new session\'s X server', async () => {
      const x = await session();
      return x.ID === id ? x : null;
    });
  });

  await step('Log off from the toolbar: asked first, the session ends, and its Xvnc is gone', async () => {
    await tool(page, 'Log off').click();
    const dialog = page.locator('dialog#confirm');
    await dialog.waitFor({ state: 'visible' });
    await dialog.getByRole('button', { name: 'Log off', exact: true }).click();
    await viewState(page, 'ended');
    await messageSays(page, /You logged off/);
    await until(`Xvnc ${ctx.x.Pid} still runs after the logoff`, async () => !(await alive(ctx.x.Pid)));
    await axe(page, 'session view, logged off');
  });
}

run('demo desktop e2e', 'demo-desktop-failure', scenario);
