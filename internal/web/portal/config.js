// The console's configuration and history views: a client of the admin
// API's collections (/api/v1/admin/{kind}), its icon upload and its change
// history (/api/v1/admin/changes). A form starts from the object as the API
// gives it and changes only the fields it shows, so that what it does not
// show (a delivery group's other load rules) is kept. Every text from the
// site is set with textContent or as a value, never as HTML.

import { iconURL } from "./api.js";

const $ = (id) => document.getElementById(id);

// The kinds the console edits. A field's key is its JSON path, dotted
// when nested; type is text, number (nullable: empty sends null), checkbox, select (options), ref (one
// name of the kinds in ref, or none), refs (names of them), password
// (sent only when typed) or icon (a file, uploaded after the object is
// saved).
const RECONNECT = ["always", "disconnected-only", "same-endpoint-only"];
const ZONE_PREFERENCE = ["user-location", "user-home", "user-home-only", "application-home", "application-home-only"];
const resourceFields = (app) => [
  { key: "name", label: "Name", type: "text", required: true, hint: "Users never see it: it names the object in the API and the history." },
  { key: "display_name", label: "Display name", type: "text", required: true, hint: "What users see in the portal." },
  { key: "description", label: "Description", type: "text" },
  { key: "folder", label: "Folder", type: "text", hint: "Like Office/Tools: the portal shows it in that folder." },
  ...(app ? [{ key: "command_line", label: "Command line", type: "text", required: true }] : []),
  { key: "delivery_groups", label: "Delivery groups", type: "refs", ref: ["delivery-groups"], hint: "The groups of machines that serve it." },
  { key: "disabled", label: "Disabled (users do not see it)", type: "checkbox" },
  { key: "icon", label: "Icon", type: "icon", hint: "A PNG, JPEG or GIF file of at most 1 MiB; kept at 128 pixels a side at most." },
];
export const KINDS = {
  "delivery-groups": {
    title: "Delivery groups", noun: "delivery group",
    columns: [["name", "Name"], ["catalogs", "Catalogs"], ["reconnect", "Reconnection"], ["zone_preference", "Zone preference"]],
    fields: [
      { key: "name", label: "Name", type: "text", required: true },
      { key: "description", label: "Description", type: "text" },
      { key: "catalogs", label: "Catalogs", type: "refs", ref: ["catalogs"], hint: "The machine catalogs whose machines the group serves from." },
      { key: "reconnect", label: "Reconnection", type: "select", options: RECONNECT },
      { key: "zone_preference", label: "Zone preference", type: "select", options: ZONE_PREFERENCE },
      { key: "home_zone", label: "Home zone", type: "ref", ref: ["zones"] },
      { key: "load_rules.max_sessions.enabled", label: "Limit the sessions per machine", type: "checkbox" },
      { key: "load_rules.max_sessions.limit", label: "Sessions per machine at most", type: "number" },
      { key: "session_timers.idle_disconnect", label: "Session idle timer", type: "text",
        hint: "Disconnect a session whose viewer sent no input for this long, like 15m or 1h30m (the session VDA enforces it). Empty or 0: never." },
      { key: "session_timers.disconnected_logoff", label: "Disconnected session timer", type: "text",
        hint: "Log off a session disconnected for this long, like 2h (the brokers enforce it). Empty or 0: never." },
      { key: "session_timers.max_session", label: "Session connection timer (maximum session time)", type: "text",
        hint: "Log off a session this long after it started, connected or not, like 12h (the brokers enforce it). Empty or 0: never. At most 720h (30 days) each." },
    ],
  },
  applications: { title: "Applications", noun: "application", icon: true,
    columns: [["display_name", "Display name"], ["name", "Name"], ["folder", "Folder"], ["delivery_groups", "Delivery groups"]],
    fields: resourceFields(true) },
  desktops: { title: "Desktops", noun: "desktop", icon: true,
    columns: [["display_name", "Display name"], ["name", "Name"], ["delivery_groups", "Delivery groups"]],
    fields: resourceFields(false) },
  users: {
    title: "Users", noun: "user",
    columns: [["name", "Name"], ["display_name", "Display name"], ["groups", "Groups"], ["disabled", "Disabled"]],
    fields: [
      { key: "name", label: "Name", type: "text", required: true, hint: "The logon name, without a domain." },
      { key: "display_name", label: "Display name", type: "text" },
      { key: "password", label: "Password", type: "password", hint: "At least 8 characters. When editing, leave it empty to keep the current one." },
      { key: "groups", label: "Groups", type: "refs", ref: ["groups"] },
      { key: "home_zone", label: "Home zone", type: "ref", ref: ["zones"] },
      { key: "disabled", label: "Disabled (cannot log on)", type: "checkbox" },
    ],
  },
  groups: {
    title: "Groups", noun: "group",
    columns: [["name", "Name"], ["description", "Description"], ["dn", "Directory group"]],
    fields: [
      { key: "name", label: "Name", type: "text", required: true },
      { key: "description", label: "Description", type: "text" },
      { key: "dn", label: "Directory group (DN)", type: "text", hint: "The directory group this group stands for, by its distinguished name " +
        "(CN=Engineering,OU=Groups,DC=corp,DC=example,DC=com); its members, nested ones included, are this group's. " +
        "Empty: a directory group of this group's name." },
    ],
  },
  entitlements: {
    title: "Entitlements", noun: "entitlement",
    columns: [["name", "Name"], ["delivery_group", "Delivery group"], ["resources", "Apps and desktops"], ["groups", "Groups"], ["users", "Users"]],
    fields: [
      { key: "name", label: "Name", type: "text", required: true },
      { key: "delivery_group", label: "Delivery group", type: "ref", ref: ["delivery-groups"], required: true },
      { key: "resources", label: "Applications and desktops", type: "refs", ref: ["applications", "desktops"], hint: "Leave it empty to entitle the users and groups to the whole delivery group. " +
        "An app or desktop listed here shows only to those named by an entitlement that lists it, who also need an entitlement to the delivery group." },
      { key: "groups", label: "Groups", type: "refs", ref: ["groups"] },
      { key: "users", label: "Users", type: "refs", ref: ["users"] },
    ],
  },
  targets: {
    title: "Targets", noun: "target",
    columns: [["name", "Name"], ["mac", "MAC address"], ["image", "Image"], ["version", "Version (— production)"], ["cache", "Write cache"]],
    fields: [
      { key: "name", label: "Name", type: "text", required: true },
      { key: "mac", label: "MAC address", type: "text", required: true, hint: "Of the network card the machine boots from, such as 52:54:00:12:34:56 (or with hyphens)." },
      { key: "image", label: "Image", type: "text", required: true, hint: "An image of the image store (usher image list); its boots are refused until the store has it." },
      { key: "version", label: "Version", type: "number", nullable: true, hint: "Empty: the image's production version at each boot. " +
        "A number pins that version; a maintenance version boots in private mode, to update it." },
      { key: "cache", label: "Write cache", type: "select", options: ["ram-overflow", "ram", "server-disk"] },
      { key: "ram", label: "RAM budget", type: "text", hint: "Of the ram and ram-overflow caches, such as 256MiB (default 512MiB)." },
      { key: "description", label: "Description", type: "text" },
    ],
  },
};

// A list of references is a set of checkboxes up to this many choices,
// else a text field of names separated by commas.
const MAX_CHECKBOXES = 40;

let ctx; // {call, result, SessionEnded, confirm, flash}
const cache = { objects: [], next: "", kind: "" };

// initConfig wires the views to the console's API client and dialogs.
export function initConfig(c) {
  ctx = c;
  $("config-filter").addEventListener("input", renderList);
  $("config-more").addEventListener("click", () => loadMore().catch(report));
  $("history-search").addEventListener("submit", (ev) => { ev.preventDefault(); showHistory(true).catch(report); });
  $("history-more").addEventListener("click", () => showHistory(false).catch(report));
}

function report(e) {
  if (!(e instanceof ctx.SessionEnded)) ctx.result("failed", e.message);
}

const enc = encodeURIComponent;

function get(obj, key) {
  return key.split(".").reduce((o, k) => (o === undefined || o === null ? undefined : o[k]), obj);
}

function set(obj, key, value) {
  const parts = key.split(".");
  let o = obj;
  for (const p of parts.slice(0, -1)) {
    if (typeof o[p] !== "object" || o[p] === null) o[p] = {};
    o = o[p];
  }
  o[parts[parts.length - 1]] = value;
}

function shown(v) {
  if (Array.isArray(v)) return v.length ? v.join(", ") : "—";
  if (typeof v === "boolean") return v ? "yes" : "no";
  return v === undefined || v === null || v === "" ? "—" : String(v);
}

// ---- the lists ----

async function version() {
  const info = await ctx.call("GET", "/api/v1/admin/site");
  $("config-version").textContent = "Configuration version " + info.config_version + ".";
}

// showConfig shows the view at a route under #/config: a kind's list,
// "KIND/new" or "KIND/edit/NAME".
export async function showConfig(rest) {
  const [path = "applications", action, ...name] = rest.split("/");
  // Says which list is shown once it is (for the browser test).
  delete document.body.dataset.configKind;
  const kind = KINDS[path] ? path : "applications";
  if (kind !== path || (!action && rest.includes("/"))) history.replaceState(null, "", "#/config/" + kind);
  for (const a of document.querySelectorAll("#config-kinds a")) {
    if (a.dataset.kind === kind) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  if (action === "new" || action === "edit") {
    await showEditor(kind, action === "edit" ? decodeURIComponent(name.join("/")) : null);
    return;
  }
  $("config-list").hidden = false;
  $("editor").hidden = true;
  $("config-title").textContent = KINDS[kind].title;
  $("config-new").textContent = "New " + KINDS[kind].noun;
  $("config-new").href = "#/config/" + kind + "/new";
  if (cache.kind !== kind) $("config-filter").value = "";
  cache.kind = kind;
  cache.objects = [];
  cache.next = "";
  await Promise.all([version(), loadMore()]);
  document.body.dataset.rendered = "config";
  document.body.dataset.configKind = kind;
}

async function loadMore() {
  const q = new URLSearchParams({ limit: "1000" });
  if (cache.next) q.set("after", cache.next);
  const doc = await ctx.call("GET", "/api/v1/admin/" + cache.kind + "?" + q);
  cache.objects.push(...doc.items);
  cache.next = doc.next || "";
  cache.total = doc.total;
  renderList();
}

function renderList() {
  const spec = KINDS[cache.kind];
  const words = $("config-filter").value.toLowerCase().split(/\s+/).filter(Boolean);
  const list = cache.objects.filter((o) => words.every((w) => spec.columns.some(([k]) => shown(get(o, k)).toLowerCase().includes(w))));
  const head = document.createElement("tr");
  const cols = spec.icon ? [["icon", "Icon"], ...spec.columns] : spec.columns;
  for (const [, label] of [...cols, ["", "Actions"]]) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = label;
    head.append(th);
  }
  const rows = list.map((o) => {
    const tr = document.createElement("tr");
    tr.dataset.name = o.name;
    for (const [k] of cols) {
      const td = document.createElement("td");
      if (k === "icon") {
        const img = document.createElement("img");
        img.alt = "";
        img.width = img.height = 24;
        img.src = iconURL(o.icon, spec.noun);
        td.append(img);
      } else {
        td.textContent = shown(get(o, k));
      }
      tr.append(td);
    }
    const td = document.createElement("td");
    const box = document.createElement("div");
    box.className = "buttons";
    box.className = "buttons row-actions";
    const edit = document.createElement("a");
    edit.className = "button quiet";
    edit.href = "#/config/" + cache.kind + "/edit/" + enc(o.name);
    edit.textContent = "Edit";
    edit.setAttribute("aria-label", "Edit " + spec.noun + " " + o.name);
    const del = document.createElement("button");
    del.type = "button";
    // A text button: the danger colour is the confirmation's.
    del.className = "quiet";
    del.textContent = "Delete";
    del.setAttribute("aria-label", "Delete " + spec.noun + " " + o.name);
    del.addEventListener("click", () => remove(cache.kind, o.name).catch(report));
    box.append(edit, del);
    td.append(box);
    tr.append(td);
    return tr;
  });
  const table = $("config-table");
  table.querySelector("caption").textContent = spec.title;
  table.querySelector("thead").replaceChildren(head);
  table.querySelector("tbody").replaceChildren(...rows);
  const total = cache.total ?? cache.objects.length;
  $("config-count").textContent = (list.length === cache.objects.length ? list.length : list.length + " of " + cache.objects.length) +
    " " + spec.title.toLowerCase() + (total > cache.objects.length ? " (of " + total + ": load more to see the rest)" : "");
  $("config-more").hidden = !cache.next;
}

async function remove(kind, name) {
  const spec = KINDS[kind];
  if (!(await ctx.confirm("Delete " + spec.noun + "?", "Delete " + spec.noun + " " + name + "? This cannot be undone.", "Delete"))) return;
  try {
    await ctx.call("DELETE", "/api/v1/admin/" + kind + "/" + enc(name));
    ctx.result("ok", "Deleted " + spec.noun + " " + name + ".");
  } catch (e) {
    if (e instanceof ctx.SessionEnded) return;
    ctx.result("failed", "Could not delete " + spec.noun + " " + name + ": " + e.message);
  }
  await showConfig(kind);
}

// ---- the editor ----

let editing = null; // {kind, name, base}

async function names(kinds) {
  const lists = await Promise.all(kinds.map((k) => ctx.call("GET", "/api/v1/admin/" + k + "?limit=1000")));
  return lists.flatMap((l) => l.items.map((o) => o.name));
}

async function showEditor(kind, name) {
  const spec = KINDS[kind];
  $("config-list").hidden = true;
  const form = $("editor");
  form.hidden = false;
  const base = name === null ? {} : await ctx.call("GET", "/api/v1/admin/" + kind + "/" + enc(name));
  editing = { kind, name, base };
  $("editor-title").textContent = name === null ? "New " + spec.noun : "Edit " + spec.noun + " " + name;
  const refs = {};
  await Promise.all(spec.fields.filter((f) => f.ref).map(async (f) => { refs[f.key] = await names(f.ref); }));
  const rows = spec.fields.map((f) => field(f, base, name !== null, refs[f.key]));
  $("editor-fields").replaceChildren(...rows);
  $("editor-error").textContent = "";
  $("editor-cancel").href = "#/config/" + kind;
  form.onsubmit = (ev) => { ev.preventDefault(); save().catch(report); };
  document.body.dataset.rendered = "editor";
  const first = form.querySelector("input:not([disabled]), select");
  if (first) first.focus();
}

// field builds one field of the form: its label, control, hint and the
// place its error is shown.
function field(f, base, existing, choices) {
  const id = "f-" + f.key.replaceAll(".", "-");
  const wrap = document.createElement("div");
  wrap.className = "field";
  wrap.dataset.key = f.key;
  const hint = document.createElement("p");
  hint.className = "hint";
  hint.id = id + "-hint";
  hint.textContent = f.hint || "";
  const err = document.createElement("p");
  err.className = "error field-error";
  err.id = id + "-error";
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = f.label;
  const value = get(base, f.key);
  let control;
  if (f.type === "refs" && choices.length <= MAX_CHECKBOXES) {
    control = document.createElement("fieldset");
    control.id = id;
    const legend = document.createElement("legend");
    legend.textContent = f.label;
    control.append(legend);
    const chosen = new Set(value || []);
    for (const c of choices) {
      const l = document.createElement("label");
      l.className = "choice";
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = c;
      box.checked = chosen.has(c);
      l.append(box, " " + c);
      control.append(l);
    }
    if (!choices.length) control.append("None to choose from yet.");
    wrap.append(control);
  } else {
    if (f.type === "select" || f.type === "ref") {
      control = document.createElement("select");
      const opts = f.type === "select" ? f.options : ["", ...choices];
      for (const o of opts) {
        const opt = document.createElement("option");
        opt.value = o;
        opt.textContent = o === "" ? "(none)" : o;
        control.append(opt);
      }
      if (value !== undefined && value !== null) control.value = value;
    } else {
      control = document.createElement("input");
      control.autocomplete = "off";
      control.spellcheck = false;
      switch (f.type) {
        case "checkbox": control.type = "checkbox"; control.checked = !!value; break;
        case "number": control.type = "number"; control.value = value ?? ""; break;
        case "password": control.type = "password"; control.autocomplete = "new-password"; break;
        case "icon": control.type = "file"; control.accept = "image/png,image/jpeg,image/gif"; break;
        case "refs": control.value = (value || []).join(", "); hint.textContent = (f.hint ? f.hint + " " : "") + "Names, separated by commas."; break;
        default: control.value = value ?? "";
      }
    }
    control.id = id;
    control.name = f.key;
    if (f.required) control.required = true;
    if (f.key === "name" && existing) {
      // An existing object's name is text, not a field: it cannot be
      // changed (objects are not renamed).
      control = nameText(value);
      control.id = id;
      hint.textContent = "Objects cannot be renamed.";
    }
    if (f.type === "checkbox") {
      label.prepend(control, " ");
      label.className = "choice";
      wrap.append(label);
    } else {
      wrap.append(label);
      if (f.type === "icon") {
        const img = document.createElement("img");
        img.alt = "Current icon";
        img.width = img.height = 32;
        img.src = iconURL(value, KINDS[editing.kind].noun);
        img.className = "icon-preview";
        wrap.append(img);
      }
      wrap.append(control);
    }
  }
  control.setAttribute("aria-describedby", hint.id + " " + err.id);
  wrap.append(hint, err);
  return wrap;
}

// nameText shows an existing object's name where the editor would have
// its Name field.
function nameText(name) {
  const out = document.createElement("output");
  out.className = "name readonly";
  out.textContent = name;
  out.dataset.readonly = "true";
  return out;
}

// read returns the body to send: the object as the API gave it with the
// form's fields set. On a new object, empty optional fields are left
// out, so that the server's defaults apply.
function read(spec, base, existing) {
  const body = structuredClone(base);
  for (const f of spec.fields) {
    if (f.type === "icon" || (f.key === "name" && existing)) continue;
    const el = $("f-" + f.key.replaceAll(".", "-"));
    let v;
    switch (f.type) {
      case "checkbox": v = el.checked; break;
      case "number":
        if (el.value !== "") v = Number(el.value);
        else if (f.nullable) v = null;
        else if (!existing) continue;
        else v = 0;
        break;
      case "password": if (el.value === "") continue; v = el.value; break;
      case "refs":
        v = el.tagName === "FIELDSET" ? [...el.querySelectorAll("input:checked")].map((b) => b.value)
          : el.value.split(",").map((s) => s.trim()).filter(Boolean);
        break;
      default:
        v = el.value;
        if (v === "" && !existing && !f.required) continue;
    }
    set(body, f.key, v);
  }
  return body;
}

function clearErrors() {
  $("editor-error").textContent = "";
  for (const el of document.querySelectorAll("#editor-fields .field-error")) el.textContent = "";
  for (const el of document.querySelectorAll("#editor-fields [aria-invalid]")) el.removeAttribute("aria-invalid");
}

// inFormWords returns an API message with the API's field names in it
// (display_name, load_rules.max_sessions.limit) replaced by the labels
// the form shows for them. One-word keys (name, image) are left alone:
// they are words of the message too, and their labels say the same.
export function inFormWords(message, spec) {
  const labels = new Map(spec.fields.filter((f) => /[_.]/.test(f.key)).map((f) => [f.key, f.label.replace(/ \(.*\)$/, "")]));
  if (!labels.size) return message;
  const keys = [...labels.keys()].sort((a, b) => b.length - a.length).map((k) => k.replaceAll(".", "\\."));
  return message.replace(new RegExp("(^|[^\\w.])(" + keys.join("|") + ")(?![\\w.])", "g"), (_, pre, key) => pre + "“" + labels.get(key) + "”");
}

// showError puts an API error at its field when the form has it, else at
// the top of the form; the field (or the message) gets the focus.
function showError(e, fallbackField) {
  const key = e.field || fallbackField || "";
  e = { ...e, message: inFormWords(e.message, KINDS[editing.kind]) };
  const wrap = key && [...document.querySelectorAll("#editor-fields .field")].find((w) => w.dataset.key === key);
  if (wrap) {
    wrap.querySelector(".field-error").textContent = e.message[0].toUpperCase() + e.message.slice(1);
    const control = wrap.querySelector("#f-" + key.replaceAll(".", "-"));
    control.setAttribute("aria-invalid", "true");
    (control.tagName === "FIELDSET" ? control.querySelector("input") || control : control).focus();
    return;
  }
  $("editor-error").textContent = e.message;
  $("editor-error").focus();
}

async function save() {
  const { kind, name, base } = editing;
  const spec = KINDS[kind];
  const existing = name !== null;
  clearErrors();
  const submit = $("editor-save");
  submit.disabled = true;
  try {
    const body = read(spec, base, existing);
    let saved;
    try {
      saved = existing
        ? await ctx.call("PUT", "/api/v1/admin/" + kind + "/" + enc(name), body)
        : await ctx.call("POST", "/api/v1/admin/" + kind, body);
    } catch (e) {
      if (e instanceof ctx.SessionEnded) throw e;
      showError(e);
      return;
    }
    const file = spec.icon && $("f-icon").files[0];
    if (file) {
      try {
        await ctx.call("PUT", "/api/v1/admin/" + kind + "/" + enc(saved.name) + "/icon", file, { "Content-Type": file.type || "application/octet-stream" });
      } catch (e) {
        if (e instanceof ctx.SessionEnded) throw e;
        // The object is saved: go on editing it, with the icon's error.
        editing = { kind, name: saved.name, base: saved };
        if (!existing) history.replaceState(null, "", "#/config/" + kind + "/edit/" + enc(saved.name));
        $("editor-title").textContent = "Edit " + spec.noun + " " + saved.name;
        const text = nameText(saved.name);
        text.id = "f-name";
        text.setAttribute("aria-describedby", $("f-name").getAttribute("aria-describedby"));
        $("f-name").replaceWith(text);
        const why = e.status === 413 ? "The file is too large: the limit is 1 MiB." : e.status === 415 ? "Choose a PNG, JPEG or GIF file." :
          e.message[0].toUpperCase() + e.message.slice(1) + (e.message.endsWith(".") ? "" : ".");
        showError({ message: why + " The rest is saved.", field: "icon" });
        return;
      }
    }
    ctx.flash("ok", (existing ? "Saved " : "Created ") + spec.noun + " " + saved.name + ".");
    location.hash = "#/config/" + kind;
  } finally {
    submit.disabled = false;
  }
}

// ---- the change history ----

const history_ = { next: "" };

// showHistory shows the newest changes matching the filters (fresh) or
// the page after the last shown.
export async function showHistory(fresh = true) {
  const q = new URLSearchParams({ limit: "50" });
  for (const k of ["kind", "name", "actor"]) {
    const v = $("h-" + k).value.trim();
    if (v) q.set(k, v);
  }
  if (!fresh && history_.next) q.set("after", history_.next);
  const doc = await ctx.call("GET", "/api/v1/admin/changes?" + q);
  history_.next = doc.next || "";
  const rows = doc.items.map((r) => {
    const tr = document.createElement("tr");
    const when = new Date(r.time);
    const cells = [when.toLocaleString(), r.actor, r.op, r.kind, r.name || "—", (r.fields || []).join(", ") || "—", String(r.version)];
    for (const text of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    tr.firstChild.title = when.toISOString();
    return tr;
  });
  const body = $("history").querySelector("tbody");
  if (fresh) body.replaceChildren(...rows); else body.append(...rows);
  const n = body.children.length;
  $("history-count").textContent = n + (n === 1 ? " change" : " changes") + " shown of " + doc.total + ", newest first.";
  $("history-more").hidden = !history_.next;
  document.body.dataset.rendered = "history";
}
