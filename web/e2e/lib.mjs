// What the browser tests of usher's pages share (portal.mjs, console.mjs):
// the environment, one headless chromium, pages that may fetch nothing
// from other hosts and report their scripts' errors and CSP violations,
// steps that print their names and outcomes, screenshots, axe-core, and
// calls of the site's API from a page or from node.
//
// Environment (each script adds its own):
//
//	BASE_URL        the site, e.g. http://127.0.0.1:8080 (required)
//	DEMO_PASSWORD   the demo accounts' password (required)
//	SCREENSHOT_DIR  where screenshots go (default: $TMPDIR/usher-e2e-screenshots)
//	CHROMIUM        the browser (default /usr/bin/chromium)
//	TIMEOUT_MS      the bound of every wait (default 10000)

import assert from 'node:assert/strict';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const require = createRequire(import.meta.url);

export const env = process.env;
if (!env.BASE_URL || !env.DEMO_PASSWORD) {
  console.error(`${path.basename(process.argv[1] ?? 'e2e')}: set BASE_URL and DEMO_PASSWORD (see the comment at its top)`);
  process.exit(2);
}
export const base = new URL(env.BASE_URL);
export const origin = base.origin;
export const password = env.DEMO_PASSWORD;
export const shots = env.SCREENSHOT_DIR || path.join(os.tmpdir(), 'usher-e2e-screenshots');
export const timeout = Number(env.TIMEOUT_MS || 10000);
const executablePath = env.CHROMIUM || '/usr/bin/chromium';

const axeSource = await readFile(require.resolve('axe-core/axe.min.js'), 'utf8');

// ---- steps ----

let passed = 0;
let current = '';

// step runs one step of a scenario, printing its name and how long it
// took, and fails it when a page asked another host for anything or
// reported an error meanwhile.
export async function step(name, fn) {
  current = name;
  console.log(`-- ${name}`);
  const start = Date.now();
  await fn();
  assertNothingExternal();
  assertNoPageErrors();
  passed++;
  console.log(`   ok (${Date.now() - start} ms)`);
}

export function info(msg) {
  console.log(`   ${msg}`);
}

// ---- browser, contexts, pages ----

// Requests to other hosts than the site's own, blocked: the site's pages
// must fetch nothing from outside.
const external = [];
// Uncaught exceptions in the pages' scripts, and CSP violations.
const pageErrors = [];
// Set while axe-core is injected: a Content-Security-Policy that blocks
// its inline script tag reports that, and the report is not the site's.
let injecting = false;

function assertNothingExternal() {
  assert.deepEqual(external, [], `a page asked for resources of other hosts: ${external.join(', ')}`);
}

function assertNoPageErrors() {
  assert.deepEqual(pageErrors, [], `the page reported errors:\n  ${pageErrors.join('\n  ')}`);
}

let browser = null;
let lastPage = null;

async function launch() {
  browser = await chromium.launch({
    executablePath,
    headless: true,
    timeout: 3 * timeout,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  info(`chromium ${browser.version()} (${executablePath}); site ${origin}; screenshots in ${shots}`);
  await mkdir(shots, { recursive: true });
}

// newPage opens a page in a new context (its own cookies) with the
// external-request guard and the error listeners.
export async function newPage(options = {}) {
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1280, height: 800 }, ...options });
  context.setDefaultTimeout(timeout);
  context.setDefaultNavigationTimeout(timeout);
  await context.route('**/*', (route) => {
    const url = new URL(route.request().url());
    if ((url.protocol === 'http:' || url.protocol === 'https:' || url.protocol === 'ws:' || url.protocol === 'wss:') &&
        url.host !== base.host) {
      external.push(url.href);
      return route.abort('blockedbyclient');
    }
    return route.fallback();
  });
  return watch(await context.newPage());
}

// watch adds the error listeners to a page, and makes it the one a
// failure's screenshot shows.
export function watch(page) {
  page.on('pageerror', (err) => pageErrors.push(`uncaught: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() !== 'error') {
      return;
    }
    const text = msg.text();
    // The browser logs every answer of 4xx or 5xx (a 401 is how the pages
    // learn that nobody is logged on); the steps check the ones they expect.
    if (/^Failed to load resource: the server responded with a status of/.test(text)) {
      return;
    }
    if (injecting && /Content Security Policy/i.test(text) && /inline script/i.test(text)) {
      return;
    }
    if (/Content Security Policy/i.test(text)) {
      pageErrors.push(`CSP: ${text}`);
    } else {
      info(`(console error: ${text})`);
    }
  });
  lastPage = page;
  return page;
}

// showOnFailure makes page, already watched, the one a failure's
// screenshot shows.
export function showOnFailure(page) {
  lastPage = page;
}

// screenshot saves a picture of page for people to look at. It asserts
// nothing, so one that runs out of time (a full page of 400 rows on a
// machine with a load average of 20 took longer than 10 s) is logged and
// skipped rather than failing the step.
export async function screenshot(page, name, fullPage = true) {
  const file = path.join(shots, `${name}.png`);
  try {
    await page.screenshot({ path: file, fullPage, timeout });
  } catch (e) {
    if (e.name !== 'TimeoutError') throw e;
    info(`screenshot ${file} skipped: not taken within ${timeout} ms`);
    return;
  }
  info(`screenshot ${file}`);
}

// axe injects axe-core and fails on violations of impact serious or
// critical; it prints the others.
export async function axe(page, what) {
  const hasAxe = () => page.evaluate(() => typeof window.axe === 'object');
  if (!(await hasAxe())) {
    injecting = true;
    try {
      // A Content-Security-Policy without 'unsafe-inline' blocks the tag
      // (as it should); evaluating the source through the debugger is not
      // subject to it.
      const blocked = await page.addScriptTag({ content: axeSource }).then(() => null, (err) => err);
      if (!(await hasAxe())) {
        if (blocked && !/Content Security Policy/i.test(blocked.message)) {
          info(`(axe: addScriptTag: ${blocked.message.split('\n')[0]})`);
        }
        await page.evaluate(axeSource);
      }
      await page.waitForTimeout(100); // for the blocked tag's console report
    } finally {
      injecting = false;
    }
  }
  const violations = await within(3 * timeout, `axe.run on the ${what}`, page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({
      id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
      nodes: v.nodes.map((n) => `${n.target.join(' ')}: ${n.failureSummary?.replace(/\s+/g, ' ')}`),
    }));
  }));
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  for (const v of violations) {
    info(`axe ${what}: ${v.impact} ${v.id}: ${v.help} (${v.helpUrl})`);
    for (const n of v.nodes.slice(0, 5)) {
      info(`    ${n}`);
    }
    if (v.nodes.length > 5) {
      info(`    ... and ${v.nodes.length - 5} more`);
    }
  }
  assert.equal(bad.length, 0, `axe found ${bad.length} serious or critical violations on the ${what}: ${bad.map((v) => v.id).join(', ')}`);
  info(`axe ${what}: no serious or critical violations (${violations.length} minor or moderate)`);
}

// within bounds a promise that has no timeout of its own (page.evaluate).
export async function within(ms, what, promise) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

// api calls the site's API from the page, as its scripts do (HttpOnly
// cookies go along; the script never sees them), with body as JSON when
// given. It returns the status, the answer as JSON when it is, and its
// text's start.
export function api(page, method, urlPath, body) {
  return within(timeout, `${method} ${urlPath}`, page.evaluate(async ([m, u, b]) => {
    const init = { method: m, credentials: 'same-origin', headers: { Accept: 'application/json' } };
    if (b !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(b);
    }
    const r = await fetch(u, init);
    const text = await r.text();
    let json = null;
    try {
      json = JSON.parse(text);
    } catch {
      // not JSON
    }
    return { status: r.status, json, text: text.slice(0, 2000) };
  }, [method, urlPath, body]));
}

// fetchJSON calls the site from node, with a bearer token when given,
// bounded by the timeout; like api, it returns {status, json, text}.
export async function fetchJSON(method, urlPath, { token, body } = {}) {
  const headers = { Accept: 'application/json' };
  if (token) {
    headers.Authorization = `Bearer ${token}`;
  }
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
  }
  const r = await fetch(new URL(urlPath, origin), {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(timeout),
  });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: r.status, json, text: text.slice(0, 2000) };
}

// cssString escapes s for a CSS attribute selector's quoted value.
export function cssString(s) {
  return s.replace(/["\\]/g, '\\$&');
}

// run starts the browser and runs scenario. At the first failure it
// prints the step and the error, and saves a screenshot of the page as
// it was (failureShot.png). It closes the browser, prints a summary and
// exits: 0 when every step passed, 1 otherwise.
export async function run(name, failureShot, scenario) {
  let failed = false;
  try {
    await rm(path.join(shots, `${failureShot}.png`), { force: true });
    await launch();
    await scenario();
  } catch (err) {
    failed = true;
    console.log(`FAIL ${current}`);
    console.log(err.stack || String(err));
    if (lastPage && !lastPage.isClosed()) {
      console.log(`   page: ${lastPage.url()}`);
      await screenshot(lastPage, failureShot).catch((e) => console.log(`   (no failure screenshot: ${e.message})`));
    }
    if (pageErrors.length > 0) {
      console.log(`   page errors:\n     ${pageErrors.join('\n     ')}`);
    }
  } finally {
    await browser?.close();
  }
  console.log(`${name}: ${passed} passed, ${failed ? 1 : 0} failed`);
  process.exit(failed ? 1 : 0);
}
