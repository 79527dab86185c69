// usher's user portal: a client of the user API (/api/v1). The session is
// an HttpOnly cookie set by POST /api/v1/login {session_cookie: true}:
// this script never sees the token. Every text from the site is set with
// textContent, never parsed as HTML.

import { iconURL, request } from "./api.js";

const $ = (id) => document.getElementById(id);

const state = {
  me: null,          // {user, display_name, domain, site}
  resources: [],     // from GET /api/v1/resources
  items: [],         // [{res, li, text}] in display order
  launching: new Set(),
  firstView: true,
  viewStart: 0,      // when the view being shown was asked for (0: the page's load)
  prefs: emptyPrefs(), // {favourites, recent: [{resource, at}], updated_at}: the user's preferences
  prefsReady: null,  // the load of the preferences under way (a promise that never rejects)
  desktop: null,     // the session view's desktop (session.js), while it shows
  opening: null,     // {what, launch, res}: the launch the session view is to open
};

// ---- the API ----

const api = request;

// A call that needs the session: a 401 sends the user to log on, and back
// to the page they were on afterwards.
async function authed(method, path, body) {
  try {
    return await api(method, path, body);
  } catch (e) {
    if (e.status === 401) {
      sessionEnded();
    }
    throw e;
  }
}

class SessionEnded extends Error {}

function sessionEnded() {
  // Requests made together all learn it: the first shows the logon, the
  // others must not show it again (and take the focus from what the user
  // is typing in it).
  if (state.me !== null || document.body.dataset.view !== "logon") {
    sessionStorage.setItem("usher.wanted", location.hash || "#/apps");
    state.me = null;
    // The marker of a session that has ended goes too: the next load
    // shows the logon form without asking.
    document.cookie = "usher_portal=; Max-Age=0; Path=/; SameSite=Strict";
    showLogon("Your session has ended. Log on again to go on.");
  }
  throw new SessionEnded();
}

// ---- per-user preferences: favourites and recent launches ----
//
// They are the user's on the server (GET and PUT /api/v1/preferences), so
// that they follow the user to any browser; this browser keeps a copy in
// localStorage, which the portal works from when the server cannot take
// them (the site DB unavailable, the network down). Changes show at once
// and are saved behind them, one PUT at a time, the whole document each.

const maxFavourites = 200;
const maxRecent = 20;

function emptyPrefs() { return { favourites: [], recent: [], updated_at: "" }; }

function userKey(what) { return "usher." + what + "." + (state.me ? state.me.user : ""); }

function validPrefs(p) {
  return p && Array.isArray(p.favourites) && Array.isArray(p.recent) &&
    p.favourites.every((n) => typeof n === "string") &&
    p.recent.every((r) => r && typeof r.resource === "string" && typeof r.at === "string");
}

// localPrefs returns this browser's copy of the user's preferences, or
// null; a copy from before they were kept on the server (the lists
// "usher.fav.USER" and "usher.recent.USER") is taken up.
function localPrefs() {
  try {
    const p = JSON.parse(localStorage.getItem(userKey("prefs")) || "null");
    if (validPrefs(p)) return p;
    const favs = JSON.parse(localStorage.getItem(userKey("fav")) || "[]");
    const recent = JSON.parse(localStorage.getItem(userKey("recent")) || "[]");
    if (!Array.isArray(favs) || !Array.isArray(recent) || favs.length + recent.length === 0) return null;
    const now = Date.now();
    return {
      favourites: [...new Set(favs.filter((n) => typeof n === "string"))], updated_at: "", unsynced: true, changed_at: new Date(now).toISOString(),
      recent: [...new Set(recent.filter((n) => typeof n === "string"))].map((n, i) => ({ resource: n, at: new Date(now - i * 1000).toISOString() })),
    };
  } catch (e) {
    return null;
  }
}

function saveLocal() {
  try {
    localStorage.setItem(userKey("prefs"), JSON.stringify(state.prefs));
    localStorage.removeItem(userKey("fav"));
    localStorage.removeItem(userKey("recent"));
  } catch (e) { /* storage full or off */ }
}

// prefsNote shows (or, with "", hides) a small note under the list about
// where the preferences are kept; it blocks nothing.
function prefsNote(text) {
  let n = $("prefs-note");
  if (!n) {
    if (!text) return;
    n = document.createElement("p");
    n.id = "prefs-note";
    n.className = "note";
    n.setAttribute("role", "status");
    $("count").after(n);
  }
  n.textContent = text;
  n.hidden = !text;
}

// prefsFailed says that the preferences could not be read or saved (what)
// and that this browser's copy is used meanwhile.
function prefsFailed(e, what) {
  if (e.code === "site_db_unavailable") prefsNote("Favourites and recent apps are kept in this browser for now; they are saved to your account when the site database is back.");
  else prefsNote("Your favourites and recent apps could not be " + what + " your account just now (" + e.message + "); this browser's are used meanwhile.");
}

// loadPrefs reads the user's preferences from the server. The server's
// win, unless this browser holds changes it could not save that are newer,
// or the server has none yet: this browser's are then kept and saved. On
// failure the portal goes on with this browser's copy. It never rejects.
async function loadPrefs() {
  const local = localPrefs();
  state.prefs = local || emptyPrefs();
  let doc;
  try {
    doc = await authed("GET", "/api/v1/preferences");
  } catch (e) {
    if (!(e instanceof SessionEnded)) prefsFailed(e, "read from");
    return;
  }
  const localNewer = local && local.unsynced && (!doc.updated_at || Date.parse(local.changed_at) > Date.parse(doc.updated_at));
  if (!doc.updated_at && local && (local.favourites.length || local.recent.length) || localNewer) {
    savePrefs();
    return;
  }
  state.prefs = { favourites: doc.favourites, recent: doc.recent, updated_at: doc.updated_at || "" };
  saveLocal();
}

const prefsSync = { inFlight: null, dirty: false };

// savePrefs keeps the preferences in this browser at once and saves them
// to the server behind: one PUT at a time, so that an older document never
// lands after a newer one; a change made meanwhile goes with the next PUT.
function savePrefs() {
  state.prefs.unsynced = true;
  state.prefs.changed_at = new Date().toISOString();
  saveLocal();
  prefsSync.dirty = true;
  if (!prefsSync.inFlight) {
    document.body.dataset.prefs = "saving";
    prefsSync.inFlight = flushPrefs().finally(() => { prefsSync.inFlight = null; });
  }
  return prefsSync.inFlight;
}

async function flushPrefs() {
  while (prefsSync.dirty && state.me) {
    prefsSync.dirty = false;
    const user = state.me.user;
    try {
      const doc = await authed("PUT", "/api/v1/preferences", { favourites: state.prefs.favourites, recent: state.prefs.recent });
      if (!state.me || state.me.user !== user) return;
      state.prefs.updated_at = doc.updated_at;
      if (!prefsSync.dirty) delete state.prefs.unsynced;
      saveLocal();
      prefsNote("");
    } catch (e) {
      if (!(e instanceof SessionEnded)) prefsFailed(e, "saved to");
      document.body.dataset.prefs = "failed";
      return; // kept here, unsynced: the next change or log-on sends them
    }
  }
  document.body.dataset.prefs = "saved";
}

function isFavourite(name) { return state.prefs.favourites.includes(name); }

function addRecent(name) {
  const recent = state.prefs.recent.filter((r) => r.resource !== name);
  recent.unshift({ resource: name, at: new Date().toISOString() });
  state.prefs.recent = recent.slice(0, maxRecent);
  savePrefs();
}

// ---- views ----

const views = ["logon", "apps", "sessions", "session"];

function show(view, title) {
  // Leaving the session view disconnects its desktop; the session goes
  // on, and Sessions reconnects to it.
  if (view !== "session" && state.desktop) {
    state.desktop.close();
    state.desktop = null;
  }
  for (const v of views) $("view-" + v).hidden = v !== view;
  const loggedOn = view !== "logon";
  $("nav").hidden = !loggedOn;
  $("who").hidden = !loggedOn;
  for (const [id, hash] of [["nav-apps", "#/apps"], ["nav-sessions", "#/sessions"]]) {
    if (hash === "#/" + view) $(id).setAttribute("aria-current", "page");
    else $(id).removeAttribute("aria-current");
  }
  document.body.dataset.view = view;
  document.title = (title || ({ logon: "Log on", apps: "Apps", sessions: "Sessions", session: "Desktop" })[view]) +
    (state.me ? " · " + state.me.site : "") + " · usher";
}

function showLogon(note) {
  $("launch-result").hidden = true;
  const n = $("logon-note");
  n.textContent = note || "";
  n.hidden = !note;
  $("logon-error").textContent = "";
  show("logon");
  $("username").focus();
}

function focusMain() {
  if (!state.firstView) $("main").focus({ preventScroll: true });
  state.firstView = false;
}

// ---- log on and off ----

// What a failed logon says. A 403 (the password was right: the account is
// disabled, locked out in the directory, or its password expired) and a 503
// (too many attempts, the site busy, the directory unreachable) show the
// server's reason when it gives one; a 401 never tells more than this.
const logonMessages = {
  401: "Wrong user name or password. After too many failed attempts an account is locked for a while: check your password and try again later, or ask your help desk.",
  403: "Your account cannot log on now. Ask your help desk.",
  429: "Too many attempts from your computer. Wait a moment and try again.",
  503: "Too many attempts from your computer, or the site is busy. Wait a moment and try again.",
};

function logonMessage(e) {
  if ((e.status === 403 || e.status === 503) && e.code && e.message) {
    const m = e.message.charAt(0).toUpperCase() + e.message.slice(1);
    return /[.!?]$/.test(m) ? m : m + ".";
  }
  return logonMessages[e.status] || e.message;
}

async function logon(ev) {
  ev.preventDefault();
  const username = $("username").value.trim();
  const password = $("password").value;
  const err = $("logon-error");
  if (!username || !password) {
    err.textContent = "Enter your user name and password.";
    (username ? $("password") : $("username")).focus();
    return;
  }
  const button = $("logon-submit");
  button.disabled = true;
  state.viewStart = performance.now();
  err.textContent = "";
  try {
    await api("POST", "/api/v1/login", { username, password, session_cookie: true });
    $("password").value = "";
    await start();
    const wanted = sessionStorage.getItem("usher.wanted");
    sessionStorage.removeItem("usher.wanted");
    const target = wanted && wanted !== "#/logon" ? wanted : "#/apps";
    if (location.hash === target) route(); else location.hash = target;
  } catch (e) {
    err.textContent = logonMessage(e);
    $("password").focus();
  } finally {
    button.disabled = false;
  }
}

async function logoff() {
  // A save under way goes first (a moment at most), so that a change made
  // just before is on the server when the user logs on elsewhere.
  if (prefsSync.inFlight) await Promise.race([prefsSync.inFlight, new Promise((r) => setTimeout(r, 3000))]);
  try { await api("POST", "/api/v1/logout"); } catch (e) { /* the cookie goes anyway when it expires */ }
  state.me = null;
  state.resources = [];
  state.prefs = emptyPrefs();
  state.prefsReady = null;
  prefsNote("");
  $("resources").replaceChildren();
  history.replaceState(null, "", location.pathname);
  showLogon("You have logged off.");
}

// start loads who the user is; it throws SessionEnded when there is no
// session.
async function start() {
  state.me = await authed("GET", "/api/v1/me");
  state.prefsReady = loadPrefs();
  $("user-name").textContent = state.me.display_name || state.me.user;
  $("site-name").textContent = state.me.site;
}

// ---- apps ----

async function showApps() {
  show("apps");
  const [doc] = await Promise.all([authed("GET", "/api/v1/resources"), state.prefsReady]);
  state.resources = doc.resources;
  renderFolders(doc.folders);
  renderResources();
  filter();
  // From the view's request (the page's load, the logon's click, or the
  // link's) to the list in the page.
  window.usherRenderMs = Math.round(performance.now() - state.viewStart);
  document.body.dataset.rendered = "apps";
  focusMain();
}

function renderFolders(folders) {
  const sel = $("folder");
  const current = sel.value;
  const opts = [["", "All apps and desktops"], [":fav", "Favourites"], [":recent", "Recent"], [":desktops", "Desktops"]];
  for (const f of folders) opts.push(["/" + f, "Folder: " + f]);
  sel.replaceChildren(...opts.map(([value, label]) => {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = label;
    return o;
  }));
  if (opts.some(([v]) => v === current)) sel.value = current;
}

function renderResources() {
  const favs = new Set(state.prefs.favourites);
  const frag = document.createDocumentFragment();
  state.items = [];
  for (const res of state.resources) {
    const li = document.createElement("li");
    li.className = "resource";
    li.dataset.name = res.name;
    const img = document.createElement("img");
    img.src = iconURL(res.icon, res.kind);
    img.alt = "";
    img.width = 40;
    img.height = 40;
    img.decoding = "async";
    const name = document.createElement("span");
    name.className = "resource-name";
    name.textContent = res.display_name;
    const folder = document.createElement("span");
    folder.className = "resource-folder";
    folder.textContent = (res.kind === "desktop" ? "Desktop" : "App") + (res.folder ? " · " + res.folder : "");
    if (res.description) li.title = res.description;
    const actions = document.createElement("span");
    actions.className = "actions";
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open primary";
    open.textContent = "Open";
    open.setAttribute("aria-label", "Open " + res.display_name);
    open.addEventListener("click", () => launch(res, open));
    const fav = document.createElement("button");
    fav.type = "button";
    fav.className = "fav";
    fav.textContent = "★";
    fav.setAttribute("aria-label", "Favourite " + res.display_name);
    fav.setAttribute("aria-pressed", String(favs.has(res.name)));
    fav.addEventListener("click", () => toggleFavourite(res.name, fav));
    actions.append(open, fav);
    li.append(img, name, folder, actions);
    frag.append(li);
    state.items.push({ res, li, text: (res.display_name + " " + res.name + " " + (res.folder || "") + " " + (res.description || "")).toLowerCase() });
  }
  $("resources").replaceChildren(frag);
}

function toggleFavourite(name, button) {
  const on = !isFavourite(name);
  if (on && state.prefs.favourites.length >= maxFavourites) {
    prefsNote("You have " + maxFavourites + " favourites, the most there can be. Remove one to add another.");
    return;
  }
  const favs = state.prefs.favourites.filter((n) => n !== name);
  if (on) favs.push(name);
  state.prefs.favourites = favs;
  button.setAttribute("aria-pressed", String(on));
  if ($("folder").value === ":fav") filter();
  savePrefs();
}

function filter() {
  const words = $("search").value.toLowerCase().split(/\s+/).filter(Boolean);
  const scope = $("folder").value;
  const favs = new Set(state.prefs.favourites);
  const recent = new Set(state.prefs.recent.map((r) => r.resource));
  let shown = 0;
  for (const it of state.items) {
    let ok = words.every((w) => it.text.includes(w));
    if (ok && scope === ":fav") ok = favs.has(it.res.name);
    else if (ok && scope === ":recent") ok = recent.has(it.res.name);
    else if (ok && scope === ":desktops") ok = it.res.kind === "desktop";
    else if (ok && scope.startsWith("/")) ok = (it.res.folder || "") === scope.slice(1);
    it.li.hidden = !ok;
    if (ok) shown++;
  }
  const total = state.items.length;
  $("count").textContent = shown === total ? total + " apps and desktops" : shown + " of " + total + " shown";
}

// ---- launch ----

function launchResult(kind, ...nodes) {
  const box = $("launch-result");
  box.className = "launch" + (kind === "failed" ? " failed" : "");
  box.setAttribute("role", kind === "failed" ? "alert" : "status");
  box.replaceChildren(...nodes);
  box.hidden = false;
}

function para(text) {
  const p = document.createElement("p");
  p.textContent = text;
  return p;
}

function launchFailed(what, e, retry) {
  let text;
  if (e.code === "no_capacity") text = "No machine is free for " + what + " right now.";
  else if (e.code === "overloaded" || e.code === "unavailable" || e.status === 503) text = "The site is busy and could not start " + what + " just now.";
  else if (e.status === 404 || e.status === 403) text = what + " is no longer available to you. Reload the list.";
  else text = "Could not start " + what + ": " + e.message;
  const again = document.createElement("button");
  again.type = "button";
  again.textContent = "Try again";
  again.addEventListener("click", retry);
  launchResult("failed", para(text), again);
  again.focus();
}

// deliver shows where the session is and hands over its launch file.
function deliver(what, l) {
  const file = l.launch_file;
  const url = URL.createObjectURL(new Blob([file.content], { type: file.content_type }));
  const a = document.createElement("a");
  a.id = "launch-file";
  a.href = url;
  a.download = file.filename;
  a.textContent = "Download launch file";
  const at = l.host + (l.port ? ":" + l.port : "") + " (machine " + l.machine + ")";
  const where = para(l.reconnected
    ? "Your " + what + " session is still running on " + at + ": open it again, over " + l.protocol.toUpperCase() + "."
    : "Your " + what + " session is ready on " + at + ", over " + l.protocol.toUpperCase() + ".");
  const next = para("Open the downloaded file (" + file.filename + ") to connect; its ticket is good for one connection, until " +
    new Date(l.expires_at).toLocaleTimeString() + ".");
  const p = document.createElement("p");
  p.append(a);
  launchResult("ok", where, next, p);
  // The file starts downloading at once; the link is there if it did not.
  const auto = document.createElement("a");
  auto.href = url;
  auto.download = file.filename;
  auto.hidden = true;
  document.body.append(auto);
  auto.click();
  auto.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10 * 60 * 1000);
}

// present shows a launch answer: its desktop in the page when it has a
// display, else its launch file for a desktop app.
function present(what, l, res) {
  if (!l.display_url) {
    deliver(what, l);
    return;
  }
  state.opening = { what, launch: l, res };
  const hash = "#/session/" + encodeURIComponent(l.session_id);
  if (location.hash === hash) route(); else location.hash = hash;
}

async function launch(res, button) {
  if (state.launching.has(res.name)) return; // a double click launches once
  state.launching.add(res.name);
  if (button) button.disabled = true;
  launchResult("ok", para("Starting " + res.display_name + "…"));
  try {
    const l = await authed("POST", "/api/v1/resources/" + encodeURIComponent(res.name) + "/launch", { client_name: "usher portal" });
    addRecent(res.name);
    if (l.display_url) $("launch-result").hidden = true;
    present(res.display_name, l, res);
  } catch (e) {
    if (!(e instanceof SessionEnded)) launchFailed(res.display_name, e, () => launch(res, button));
  } finally {
    state.launching.delete(res.name);
    if (button) button.disabled = false;
  }
}

// ---- the session view ----

// showSession shows the desktop of session id: the launch just made, or,
// after a reload or from a link, a reconnection with a fresh ticket.
async function showSession(id) {
  let o = state.opening;
  state.opening = null;
  if (!o || o.launch.session_id !== id) {
    // To the sessions' page (without a hashchange, which would clear the
    // result), and then what came of it.
    const toSessions = async (then) => {
      history.replaceState(null, "", "#/sessions");
      await showSessions();
      then();
    };
    if (state.resources.length === 0) state.resources = (await authed("GET", "/api/v1/resources")).resources;
    const s = (await authed("GET", "/api/v1/sessions")).sessions.find((x) => x.id === id);
    if (!s) return toSessions(() => launchResult("failed", para("That session has ended.")));
    const what = displayName(s.resource);
    let l;
    try {
      l = await authed("POST", "/api/v1/sessions/" + encodeURIComponent(id) + "/reconnect", { client_name: "usher portal" });
    } catch (e) {
      if (e instanceof SessionEnded) throw e;
      return toSessions(() => launchFailed(what, e, () => reconnect(s, what)));
    }
    if (!l.display_url) return toSessions(() => deliver(what, l));
    o = { what, launch: l, res: state.resources.find((x) => x.name === s.resource) };
  }
  if (state.desktop) {
    state.desktop.close();
    state.desktop = null;
  }
  show("session", o.what);
  $("main").focus({ preventScroll: true });
  const session = await import("./session.js");
  if (document.body.dataset.view !== "session" || location.hash !== "#/session/" + encodeURIComponent(id)) return; // gone meanwhile
  state.desktop = session.openDesktop($("view-session"), o.launch, {
    title: o.what,
    call: authed,
    confirm: ask,
    relaunch: o.res ? () => launch(o.res, null) : null,
    leave: () => { location.hash = "#/apps"; },
  });
  document.body.dataset.rendered = "session";
}

// ---- sessions ----

function displayName(resource) {
  const r = state.resources.find((x) => x.name === resource);
  return r ? r.display_name : resource;
}

async function showSessions() {
  show("sessions");
  if (state.resources.length === 0) {
    try { state.resources = (await authed("GET", "/api/v1/resources")).resources; } catch (e) { if (e instanceof SessionEnded) throw e; }
  }
  await loadSessions();
  document.body.dataset.rendered = "sessions";
  focusMain();
}

async function loadSessions() {
  const doc = await authed("GET", "/api/v1/sessions");
  const rows = doc.sessions.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.session = s.id;
    const cells = [displayName(s.resource), s.machine, s.state, new Date(s.created_at).toLocaleString()];
    for (const text of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    const td = document.createElement("td");
    const box = document.createElement("div");
    box.className = "buttons";
    const what = displayName(s.resource);
    box.append(
      sessionButton("Reconnect", what, () => reconnect(s, what)),
      sessionButton("Disconnect", what, () => act(s, "disconnect")),
      sessionButton("Log off", what, () => confirmLogoff(s, what), "danger"),
    );
    td.append(box);
    tr.append(td);
    return tr;
  });
  $("sessions").querySelector("tbody").replaceChildren(...rows);
  $("sessions").hidden = rows.length === 0;
  $("sessions-empty").hidden = rows.length !== 0;
}

function sessionButton(label, what, onClick, cls) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.setAttribute("aria-label", label + " " + what);
  if (cls) b.className = cls;
  b.addEventListener("click", onClick);
  return b;
}

async function reconnect(s, what) {
  try {
    const l = await authed("POST", "/api/v1/sessions/" + encodeURIComponent(s.id) + "/reconnect", { client_name: "usher portal" });
    present(what, l, state.resources.find((x) => x.name === s.resource));
    if (l.display_url) return;
  } catch (e) {
    if (!(e instanceof SessionEnded)) launchFailed(what, e, () => reconnect(s, what));
  }
  await loadSessions().catch(() => {});
}

async function act(s, action) {
  try {
    await authed("POST", "/api/v1/sessions/" + encodeURIComponent(s.id) + "/" + action);
  } catch (e) {
    if (e instanceof SessionEnded) return;
    launchResult("failed", para("Could not " + (action === "logoff" ? "log off" : action) + " the session: " + e.message));
  }
  await loadSessions().catch(() => {});
}

// ask asks the user in the confirmation dialog; it resolves to whether
// they chose ok.
function ask(title, text, ok) {
  const dlg = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = ok;
  dlg.returnValue = "";
  return new Promise((resolve) => {
    dlg.onclose = () => resolve(dlg.returnValue === "ok");
    dlg.showModal();
    $("confirm-cancel").focus();
  });
}

async function confirmLogoff(s, what) {
  if (await ask("Log off?", "Log off your session of " + what + " on " + s.machine + "? Unsaved work in it is lost.", "Log off")) act(s, "logoff");
}

// ---- routing ----

async function route() {
  try {
    if (!state.me) await start();
    const session = /^#\/session\/([^/]+)$/.exec(location.hash);
    if (session) await showSession(decodeURIComponent(session[1]));
    else if (location.hash === "#/sessions") await showSessions();
    else await showApps();
  } catch (e) {
    if (e instanceof SessionEnded) return;
    launchResult("failed", para(e.message));
  }
}

// NoSession: the page has no session cookie to try.
class NoSession extends Error {}

function init() {
  $("logon").addEventListener("submit", logon);
  $("logoff").addEventListener("click", logoff);
  $("search").addEventListener("input", filter);
  $("folder").addEventListener("change", filter);
  window.addEventListener("hashchange", () => {
    state.viewStart = performance.now();
    $("launch-result").hidden = true;
    if (state.me) route();
  });
  // First load: a session cookie may already be there. The page cannot
  // read it (HttpOnly); the marker that goes with it says whether to ask,
  // so that a visitor with no session makes no request that fails.
  (async () => {
    try {
      if (!document.cookie.split(/;\s*/).includes("usher_portal=1")) throw new NoSession();
      await start();
    } catch (e) {
      if (!(e instanceof SessionEnded) && !(e instanceof NoSession) && e.status !== 401) showLogon(e.message);
      else {
        sessionStorage.setItem("usher.wanted", location.hash || "#/apps");
        showLogon("");
      }
      document.body.dataset.rendered = "logon";
      return;
    }
    route();
  })();
}

init();
