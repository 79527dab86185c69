// usher's user portal: a client of the user API (/api/v1). The session is
// an HttpOnly cookie set by POST /api/v1/login {session_cookie: true}:
// this script never sees the token. Every text from the site is set with
// textContent, never parsed as HTML.

const $ = (id) => document.getElementById(id);

const state = {
  me: null,          // {user, display_name, domain, site}
  resources: [],     // from GET /api/v1/resources
  items: [],         // [{res, li, text}] in display order
  launching: new Set(),
  firstView: true,
  viewStart: 0,      // when the view being shown was asked for (0: the page's load)
};

// ---- the API ----

class APIError extends Error {
  constructor(status, code, message, retryAfter) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new APIError(0, "network", "The site cannot be reached. Check your connection and try again.");
  }
  if (resp.status === 204) return null;
  let doc = null;
  try { doc = await resp.json(); } catch (e) { /* not JSON */ }
  if (!resp.ok) {
    const err = (doc && doc.error) || {};
    throw new APIError(resp.status, err.code || "", err.message || resp.statusText, resp.headers.get("Retry-After"));
  }
  return doc;
}

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
  const wanted = location.hash || "#/apps";
  sessionStorage.setItem("usher.wanted", wanted);
  state.me = null;
  showLogon("Your session has ended. Log on again to go on.");
  throw new SessionEnded();
}

// ---- per-user choices, kept in this browser ----

function userKey(what) { return "usher." + what + "." + (state.me ? state.me.user : ""); }

function loadList(what) {
  try { return JSON.parse(localStorage.getItem(userKey(what)) || "[]"); } catch (e) { return []; }
}

function saveList(what, list) {
  try { localStorage.setItem(userKey(what), JSON.stringify(list)); } catch (e) { /* storage full or off */ }
}

function addRecent(name) {
  const recent = loadList("recent").filter((n) => n !== name);
  recent.unshift(name);
  saveList("recent", recent.slice(0, 10));
}

// ---- views ----

const views = ["logon", "apps", "sessions"];

function show(view) {
  for (const v of views) $("view-" + v).hidden = v !== view;
  const loggedOn = view !== "logon";
  $("nav").hidden = !loggedOn;
  $("who").hidden = !loggedOn;
  for (const [id, hash] of [["nav-apps", "#/apps"], ["nav-sessions", "#/sessions"]]) {
    if (hash === "#/" + view) $(id).setAttribute("aria-current", "page");
    else $(id).removeAttribute("aria-current");
  }
  document.body.dataset.view = view;
  document.title = ({ logon: "Log on", apps: "Apps", sessions: "Sessions" })[view] + (state.me ? " · " + state.me.site : "") + " · usher";
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

const logonMessages = {
  401: "Wrong user name or password. After too many failed attempts an account is locked for a while: check your password and try again later, or ask your help desk.",
  403: "Your account is disabled. Ask your help desk.",
  429: "Too many attempts from your computer. Wait a moment and try again.",
  503: "Too many attempts from your computer, or the site is busy. Wait a moment and try again.",
};

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
    err.textContent = logonMessages[e.status] || e.message;
    $("password").focus();
  } finally {
    button.disabled = false;
  }
}

async function logoff() {
  try { await api("POST", "/api/v1/logout"); } catch (e) { /* the cookie goes anyway when it expires */ }
  state.me = null;
  state.resources = [];
  $("resources").replaceChildren();
  history.replaceState(null, "", location.pathname);
  showLogon("You have logged off.");
}

// start loads who the user is; it throws SessionEnded when there is no
// session.
async function start() {
  state.me = await authed("GET", "/api/v1/me");
  $("user-name").textContent = state.me.display_name || state.me.user;
  $("site-name").textContent = state.me.site;
}

// ---- apps ----

function iconURL(icon, kind) {
  if (icon && icon.startsWith("data:image/")) return icon;
  const name = icon && icon.startsWith("builtin:") ? icon.slice(8) : kind;
  return /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/.test(name) ? "/portal/icons/" + name + ".png" : "/portal/icons/app.png";
}

async function showApps() {
  show("apps");
  const doc = await authed("GET", "/api/v1/resources");
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
  const favs = new Set(loadList("fav"));
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
  let favs = loadList("fav");
  const on = !favs.includes(name);
  favs = on ? [...favs, name] : favs.filter((n) => n !== name);
  saveList("fav", favs);
  button.setAttribute("aria-pressed", String(on));
  if ($("folder").value === ":fav") filter();
}

function filter() {
  const words = $("search").value.toLowerCase().split(/\s+/).filter(Boolean);
  const scope = $("folder").value;
  const favs = new Set(loadList("fav"));
  const recent = loadList("recent");
  let shown = 0;
  for (const it of state.items) {
    let ok = words.every((w) => it.text.includes(w));
    if (ok && scope === ":fav") ok = favs.has(it.res.name);
    else if (ok && scope === ":recent") ok = recent.includes(it.res.name);
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
  const where = para((l.reconnected ? "Back to your session of " : "Your session of ") + what + " is on " + l.host +
    (l.port ? ":" + l.port : "") + " (machine " + l.machine + "), over " + l.protocol.toUpperCase() + ".");
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

async function launch(res, button) {
  if (state.launching.has(res.name)) return; // a double click launches once
  state.launching.add(res.name);
  button.disabled = true;
  launchResult("ok", para("Starting " + res.display_name + "…"));
  try {
    const l = await authed("POST", "/api/v1/resources/" + encodeURIComponent(res.name) + "/launch", { client_name: "usher portal" });
    addRecent(res.name);
    deliver(res.display_name, l);
  } catch (e) {
    if (!(e instanceof SessionEnded)) launchFailed(res.display_name, e, () => launch(res, button));
  } finally {
    state.launching.delete(res.name);
    button.disabled = false;
  }
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
    deliver(what, await authed("POST", "/api/v1/sessions/" + encodeURIComponent(s.id) + "/reconnect", { client_name: "usher portal" }));
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

function confirmLogoff(s, what) {
  const dlg = $("confirm");
  $("confirm-text").textContent = "Log off your session of " + what + " on " + s.machine + "? Unsaved work in it is lost.";
  dlg.returnValue = "";
  dlg.onclose = () => {
    if (dlg.returnValue === "ok") act(s, "logoff");
  };
  dlg.showModal();
  $("confirm-cancel").focus();
}

// ---- routing ----

async function route() {
  try {
    if (!state.me) await start();
    if (location.hash === "#/sessions") await showSessions();
    else await showApps();
  } catch (e) {
    if (e instanceof SessionEnded) return;
    launchResult("failed", para(e.message));
  }
}

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
  // First load: a session cookie may already be there.
  (async () => {
    try {
      await start();
    } catch (e) {
      if (!(e instanceof SessionEnded) && e.status !== 401) showLogon(e.message);
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
