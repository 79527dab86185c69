// usher's console: a client of the admin API (/api/v1/admin), whose
// dashboard the broker pushes (dashboard.js). The admin's token is an
// HttpOnly cookie set by
// POST /api/v1/admin/tokens {session_cookie: true}: this script never
// sees it. Every text from the site is set with textContent.

import { request } from "./api.js";
import { initConfig, showConfig, showHistory } from "./config.js";
import { startDashboard, stopDashboard } from "./dashboard.js";

const $ = (id) => document.getElementById(id);

const state = { admin: null, machines: [], sort: { key: "name", dir: 1 } };

class SessionEnded extends Error {}

// call is request, where a 401 (but the logon's own) ends the console's
// session.
async function call(method, path, body, headers = {}) {
  try {
    return await request(method, path, body, headers);
  } catch (e) {
    if (e.status === 401 && !headers.Authorization) sessionEnded();
    throw e;
  }
}

function sessionEnded() {
  // Requests made together all learn it: the first shows the logon, the
  // others must not show it again (and take the focus from what the
  // admin is typing in it).
  if (state.admin !== null || document.body.dataset.view !== "logon") {
    sessionStorage.setItem("usher.console.wanted", location.hash || "#/dashboard");
    state.admin = null;
    stopDashboard();
    showLogon("Your console session has ended. Log on again to go on.");
  }
  throw new SessionEnded();
}

const views = ["logon", "dashboard", "machines", "sessions", "brokers", "config", "history"];

function show(view) {
  for (const v of views) $("view-" + v).hidden = v !== view;
  const on = view !== "logon";
  $("nav").hidden = !on;
  $("who").hidden = !on;
  for (const v of views.slice(1)) {
    if (v === view) $("nav-" + v).setAttribute("aria-current", "page");
    else $("nav-" + v).removeAttribute("aria-current");
  }
  document.body.dataset.view = view;
  const titles = { config: "Configuration", history: "History" };
  document.title = (titles[view] || view[0].toUpperCase() + view.slice(1)) + " · usher console";
}

function showLogon(note) {
  $("result").hidden = true;
  $("logon-note").textContent = note || "";
  $("logon-note").hidden = !note;
  show("logon");
  document.body.dataset.rendered = "logon";
  $("username").focus();
}

function result(kind, text) {
  const box = $("result");
  box.className = "launch" + (kind === "failed" ? " failed" : "");
  box.setAttribute("role", kind === "failed" ? "alert" : "status");
  box.textContent = text;
  box.hidden = false;
}

// ---- log on and off ----

async function logon(ev) {
  ev.preventDefault();
  const name = $("username").value.trim();
  const password = $("password").value;
  const err = $("logon-error");
  if (!name || !password) {
    err.textContent = "Enter your admin name and password.";
    return;
  }
  $("logon-submit").disabled = true;
  err.textContent = "";
  try {
    const basic = "Basic " + btoa(String.fromCharCode(...new TextEncoder().encode(name + ":" + password)));
    await call("POST", "/api/v1/admin/tokens", { session_cookie: true }, { Authorization: basic });
    $("password").value = "";
    await start();
    const wanted = sessionStorage.getItem("usher.console.wanted") || "#/dashboard";
    sessionStorage.removeItem("usher.console.wanted");
    if (location.hash === wanted) route(); else location.hash = wanted;
  } catch (e) {
    if (e.status === 401) err.textContent = "Wrong admin name or password, or the account is locked for a while after too many failed attempts. Only the site's administrators can use the console.";
    else if (e.status === 503 || e.status === 429) err.textContent = "Too many attempts from your computer. Wait a moment and try again.";
    else err.textContent = e.message;
  } finally {
    $("logon-submit").disabled = false;
  }
}

async function logoff() {
  stopDashboard();
  try { await call("POST", "/api/v1/logout"); } catch (e) { /* the cookie expires anyway */ }
  state.admin = null;
  history.replaceState(null, "", location.pathname);
  showLogon("You have logged off.");
}

async function start() {
  const s = await call("GET", "/api/v1/admin/settings");
  state.admin = true;
  $("site-name").textContent = s.name || "";
  $("admin-name").textContent = "Administrator";
}

// ---- the dashboard: dashboard.js, pushed by the broker ----

// dashboardEnded hands a refused dashboard stream over to the log-on.
function dashboardEnded() {
  try { sessionEnded(); } catch (e) { if (!(e instanceof SessionEnded)) throw e; }
}

// ---- machines ----

async function loadMachines() {
  const [doc, catalogs] = await Promise.all([call("GET", "/api/v1/admin/machines?limit=1000"), call("GET", "/api/v1/admin/catalogs?limit=1000")]);
  // A machine's zone is its catalog's.
  const zones = new Map(catalogs.items.map((c) => [c.name, c.zone]));
  state.machines = doc.items.map((m) => ({ ...m, zone: zones.get(m.catalog) || "" }));
  renderMachines();
  document.body.dataset.rendered = "machines";
}

function machineValue(m, key) {
  const v = m[key];
  return v === undefined || v === null ? "" : v;
}

function renderMachines() {
  const words = $("machine-filter").value.toLowerCase().split(/\s+/).filter(Boolean);
  const { key, dir } = state.sort;
  const list = state.machines
    .filter((m) => words.every((w) => (m.name + " " + m.catalog + " " + m.zone + " " + m.registration + (m.maintenance ? " maintenance" : "")).toLowerCase().includes(w)))
    .sort((a, b) => {
      const x = machineValue(a, key), y = machineValue(b, key);
      return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * dir || a.name.localeCompare(b.name);
    });
  const rows = list.map((m) => {
    const tr = document.createElement("tr");
    tr.dataset.machine = m.name;
    const cells = [
      [m.registration], [m.load_index, true], [m.sessions || 0, true],
      [Math.round(m.cpu_percent || 0) + " %", true], [Math.round(m.memory_percent || 0) + " %", true],
      [m.last_heartbeat ? new Date(m.last_heartbeat).toLocaleTimeString() : "never"],
    ];
    tr.append(nameCell(m.name), nameCell(m.catalog), nameCell(m.zone));
    for (const [text, num] of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      if (num) td.className = "num";
      tr.append(td);
    }
    tr.dataset.maintenance = String(!!m.maintenance);
    const td = document.createElement("td");
    td.className = "maintenance";
    const now = document.createElement("span");
    now.className = "state";
    now.textContent = m.maintenance ? "In maintenance" : "In service";
    const b = document.createElement("button");
    b.type = "button";
    // The visible text, the action, begins the accessible name (WCAG
    // 2.5.3, label in name); the rest names the machine for those who
    // do not see the row.
    const which = document.createElement("span");
    which.className = "visually-hidden";
    which.textContent = ": " + m.name;
    b.append(m.maintenance ? "Return to service" : "Put in maintenance", which);
    b.addEventListener("click", () => setMaintenance(m, !m.maintenance, b));
    td.append(now, " ", b);
    tr.append(td);
    const sessions = document.createElement("td");
    const link = document.createElement("a");
    link.href = "#/sessions/machine/" + encodeURIComponent(m.name);
    link.textContent = "Sessions";
    link.setAttribute("aria-label", "Sessions on " + m.name);
    sessions.append(link);
    tr.append(sessions);
    return tr;
  });
  $("machines").querySelector("tbody").replaceChildren(...rows);
  $("machine-count").textContent = list.length === state.machines.length ? list.length + " machines" : list.length + " of " + state.machines.length + " machines";
  for (const th of $("machines").querySelectorAll("th")) {
    const btn = th.querySelector("button[data-sort]");
    if (btn && btn.dataset.sort === key) th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  }
}

// nameCell is a table cell holding an object's name, which never wraps
// (at its hyphens or anywhere).
function nameCell(text) {
  const td = document.createElement("td");
  const span = document.createElement("span");
  span.className = "name";
  span.textContent = text;
  td.append(span);
  return td;
}

// displayCell shows an object's display name, and its name after it when
// they differ.
function displayCell(display, name) {
  const td = document.createElement("td");
  if (!display || display === name) {
    const span = document.createElement("span");
    span.className = "name";
    span.textContent = name;
    td.append(span);
    return td;
  }
  const small = document.createElement("span");
  small.className = "name muted";
  small.textContent = name;
  td.append(display, " ", small);
  return td;
}

async function setMaintenance(m, on, button) {
  const ok = on
    ? await confirmDialog("Put " + m.name + " in maintenance?", m.name + " takes no new session; its sessions go on until their users log off.", "Put in maintenance")
    : await confirmDialog("Return " + m.name + " to service?", m.name + " takes new sessions again.", "Return to service");
  if (!ok) return;
  button.disabled = true;
  try {
    const cur = await call("GET", "/api/v1/admin/machines/" + encodeURIComponent(m.name));
    const body = { name: cur.name, catalog: cur.catalog, address: cur.address, maintenance: on };
    if (cur.max_sessions) body.max_sessions = cur.max_sessions;
    if (cur.assigned_user) body.assigned_user = cur.assigned_user;
    await call("PUT", "/api/v1/admin/machines/" + encodeURIComponent(m.name), body);
    result("ok", m.name + (on ? " is in maintenance: it takes no new session." : " is back in service."));
    await loadMachines();
  } catch (e) {
    if (!(e instanceof SessionEnded)) result("failed", "Could not change " + m.name + ": " + e.message);
  } finally {
    button.disabled = false;
  }
}

// ---- brokers ----

const lhcWords = { none: "none (embedded site DB)", normal: "from the site DB", outage: "outage: from its local copy", unknown: "unknown (no answer)" };

async function loadBrokers() {
  const doc = await call("GET", "/api/v1/admin/brokers");
  const when = (t) => (t ? new Date(t).toLocaleTimeString() : "-");
  const rows = doc.items.map((b) => {
    const tr = document.createElement("tr");
    tr.dataset.broker = b.name;
    tr.dataset.state = b.state;
    const name = nameCell(b.name);
    if (b.self) name.append(" (this broker)");
    tr.append(name, nameCell(b.zone), nameCell(b.address));
    for (const text of [b.state, b.zone_leader ? "yes" : "no", lhcWords[b.lhc] || b.lhc, when(b.last_seen), b.self ? "-" : when(b.last_contact)]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  });
  $("brokers").querySelector("tbody").replaceChildren(...rows);
  const up = doc.items.filter((b) => b.state === "up").length;
  $("broker-count").textContent = doc.items.length + (doc.items.length === 1 ? " broker" : " brokers") + ", " + up + " up";
  document.body.dataset.rendered = "brokers";
}

// ---- sessions ----

async function searchSessions(ev) {
  if (ev) ev.preventDefault();
  const q = new URLSearchParams({ limit: "200" });
  const user = $("q-user").value.trim(), machine = $("q-machine").value.trim(), group = $("q-group").value.trim();
  if (user) q.set("user", user);
  if (machine) q.set("machine", machine);
  if (group) q.set("group", group);
  const doc = await call("GET", "/api/v1/admin/sessions?" + q);
  const live = doc.items.filter((s) => s.state !== "logged-off");
  const rows = live.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.session = s.id;
    tr.append(displayCell(s.user_display_name, s.user), displayCell(s.resource_display_name, s.resource), nameCell(s.machine));
    for (const text of [s.state, new Date(s.created_at).toLocaleString()]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    const td = document.createElement("td");
    const box = document.createElement("div");
    box.className = "buttons";
    for (const [verb, label] of [["disconnect", "Disconnect"], ["logoff", "Log off"]]) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.setAttribute("aria-label", label + " " + s.user + " on " + s.machine);
      if (verb === "logoff") b.className = "danger";
      if (verb === "disconnect" && s.state !== "active") b.disabled = true;
      b.addEventListener("click", () => confirmAction(s, verb, label));
      box.append(b);
    }
    td.append(box);
    tr.append(td);
    return tr;
  });
  $("csessions").querySelector("tbody").replaceChildren(...rows);
  $("session-count").textContent = live.length + " live sessions" + (doc.total > doc.items.length ? " among the first " + doc.items.length : "");
  document.body.dataset.rendered = "sessions";
}

function confirmAction(s, verb, label) {
  const dlg = $("confirm");
  $("confirm-title").textContent = label + "?";
  const who = s.user_display_name ? s.user_display_name + " (" + s.user + ")" : s.user;
  $("confirm-text").textContent = label + " the " + (s.resource_display_name || s.resource) + " session of " + who + " on " + s.machine + "?" + (verb === "logoff" ? " Unsaved work in it is lost." : "");
  $("confirm-ok").textContent = label;
  dlg.returnValue = "";
  dlg.onclose = async () => {
    if (dlg.returnValue !== "ok") return;
    try {
      await call("POST", "/api/v1/admin/sessions/" + encodeURIComponent(s.id) + "/" + verb);
      result("ok", label + ": done for " + s.user + " on " + s.machine + ".");
    } catch (e) {
      if (!(e instanceof SessionEnded)) result("failed", label + " failed: " + e.message);
    }
    searchSessions().catch(() => {});
  };
  dlg.showModal();
  $("confirm-cancel").focus();
}

// confirmDialog asks the admin to confirm an action in the confirmation
// dialog: true when they went on.
function confirmDialog(title, text, okLabel) {
  const dlg = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = okLabel;
  dlg.returnValue = "";
  return new Promise((resolve) => {
    dlg.onclose = () => resolve(dlg.returnValue === "ok");
    dlg.showModal();
    $("confirm-cancel").focus();
  });
}

// flash shows a result after the next change of route, which otherwise
// hides the last one.
function flash(kind, text) {
  state.flash = { kind, text };
}

// ---- routing ----

async function route() {
  stopDashboard();
  try {
    if (!state.admin) await start();
    const view = (location.hash || "#/dashboard").slice(2);
    if (view === "machines") { show("machines"); await loadMachines(); }
    else if (view === "sessions") { show("sessions"); await searchSessions(); }
    else if (view === "brokers") { show("brokers"); await loadBrokers(); }
    else if (view.startsWith("sessions/machine/")) {
      // A machine's sessions, from the machines' table.
      show("sessions");
      $("q-user").value = $("q-group").value = "";
      $("q-machine").value = decodeURIComponent(view.slice("sessions/machine/".length));
      await searchSessions();
    }
    else if (view === "config" || view.startsWith("config/")) { show("config"); await showConfig(view.slice(7)); }
    else if (view === "history") { show("history"); await showHistory(true); }
    else { show("dashboard"); startDashboard({ onSessionEnded: dashboardEnded }); }
  } catch (e) {
    if (!(e instanceof SessionEnded)) result("failed", e.message);
  }
}

function init() {
  $("logon").addEventListener("submit", logon);
  $("logoff").addEventListener("click", logoff);
  $("machine-filter").addEventListener("input", renderMachines);
  $("session-search").addEventListener("submit", (ev) => searchSessions(ev).catch((e) => { if (!(e instanceof SessionEnded)) result("failed", e.message); }));
  for (const b of document.querySelectorAll("th button[data-sort]")) {
    b.addEventListener("click", () => {
      const key = b.dataset.sort;
      state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 };
      renderMachines();
    });
  }
  initConfig({ call, result, SessionEnded, confirm: confirmDialog, flash });
  window.addEventListener("hashchange", () => {
    $("result").hidden = true;
    if (state.flash) { result(state.flash.kind, state.flash.text); state.flash = null; }
    if (state.admin) route();
  });
  // The console's session cookie is HttpOnly; its marker says whether
  // there may be one, so that a page with none asks nothing that fails.
  (async () => {
    try {
      if (!document.cookie.split(/;\s*/).includes("usher_console=1")) throw new SessionEnded();
      await start();
    } catch (e) {
      sessionStorage.setItem("usher.console.wanted", location.hash || "#/dashboard");
      if (!(e instanceof SessionEnded)) showLogon(e.status === 401 || e.status === 403 ? "" : e.message);
      else showLogon("");
      document.body.dataset.rendered = "logon";
      return;
    }
    route();
  })();
}

init();
