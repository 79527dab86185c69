// The console's live dashboard. The broker pushes its figures, the same
// as /metrics has, as server-sent events (GET /api/v1/admin/dashboard/events:
// an event "figures" at once, then every 2 s); an EventSource reads them,
// with the admin's HttpOnly cookie (usher_admin), which a same-origin
// EventSource sends as fetch does. When the stream drops, the EventSource
// opens it again by itself, and the dashboard says it is reconnecting;
// when the server refuses it (the admin's session ended, or too many
// dashboards are open), it asks GET /api/v1/admin/dashboard why, and
// either hands over to the console's log-on (onSessionEnded) or tries
// again a little later. Every text from the site is set with textContent.

const eventsURL = "/api/v1/admin/dashboard/events";
const snapshotURL = "/api/v1/admin/dashboard";

const $ = (id) => document.getElementById(id);

const dash = {
  source: null, // the EventSource
  timer: null, // a retry after a refusal
  gen: 0, // bumped by every start and stop: late callbacks of an older one do nothing
  onSessionEnded: null,
  last: null, // when the last figures came
};

// startDashboard opens the event stream and renders what it sends into
// the dashboard's view. onSessionEnded is called (once) when the server
// refuses the admin: the console goes back to its log-on.
export function startDashboard({ onSessionEnded } = {}) {
  stopDashboard();
  dash.onSessionEnded = onSessionEnded || null;
  dash.last = null;
  note("");
  open(dash.gen);
}

// stopDashboard closes the event stream; figures still on their way are
// dropped.
export function stopDashboard() {
  dash.gen++;
  if (dash.source) dash.source.close();
  dash.source = null;
  clearTimeout(dash.timer);
  dash.timer = null;
}

function open(gen) {
  const es = new EventSource(eventsURL);
  dash.source = es;
  es.addEventListener("figures", (ev) => {
    if (gen !== dash.gen) return;
    let fig;
    try { fig = JSON.parse(ev.data); } catch (e) { return; }
    dash.last = new Date();
    note("");
    render(fig);
  });
  es.addEventListener("error", () => {
    if (gen !== dash.gen) return;
    if (es.readyState === EventSource.CONNECTING) {
      // Dropped: the EventSource opens it again by itself.
      note("The live figures were cut off; reconnecting…" + shownSince());
      return;
    }
    // Closed: the server answered with something other than a stream.
    es.close();
    if (dash.source === es) dash.source = null;
    why(gen);
  });
}

// why asks for the figures once to learn why the stream was refused, and
// hands over to the log-on, or tries the stream again later.
async function why(gen) {
  let status = 0;
  try {
    const resp = await fetch(snapshotURL, { credentials: "same-origin", headers: { Accept: "application/json" } });
    status = resp.status;
    if (resp.ok && gen === dash.gen) {
      render(await resp.json());
      dash.last = new Date();
    }
  } catch (e) {
    // the site cannot be reached: try again later
  }
  if (gen !== dash.gen) return;
  if (status === 401) {
    const ended = dash.onSessionEnded;
    stopDashboard();
    if (ended) ended();
    return;
  }
  // The snapshot has no cap on streams: when it answers, the stream was
  // refused for being one too many (429).
  const full = status === 429 || (status >= 200 && status < 300);
  const wait = full ? 10 : 5;
  note((full
    ? "Too many live dashboards are open on this broker; the figures are read once now, and the live ones tried again"
    : "The live figures cannot be read" + (status ? " (HTTP " + status + ")" : " (the site cannot be reached)") + "; reconnecting") +
    " in " + wait + " s…" + shownSince());
  dash.timer = setTimeout(() => { if (gen === dash.gen) open(gen); }, wait * 1000);
}

function shownSince() {
  return dash.last ? " The figures shown are from " + dash.last.toLocaleTimeString() + "." : "";
}

function note(text) {
  const el = $("dashboard-note");
  el.textContent = text;
  el.hidden = !text;
}

// ---- rendering ----

function set(id, v) { $(id).textContent = v; }

// rate formats transactions per second: enough digits that one launch in
// the window does not show as 0.
function rate(n) {
  if (n === 0) return "0";
  return n >= 10 ? n.toFixed(0) : n >= 1 ? n.toFixed(1) : n.toFixed(2);
}

// p99 formats a p99, the upper bound of a histogram bucket.
function p99(t, windowed) {
  if (!windowed || !t.count) return "-";
  const s = t.p99_seconds;
  const text = s < 1 ? +(s * 1000).toPrecision(3) + " ms" : s + " s";
  return (t.p99_beyond ? "> " : "≤ ") + text;
}

const zoneColumns = [
  (z) => z.machines.registered, (z) => z.machines.unregistered, (z) => z.machines.maintenance,
  (z) => z.sessions.active, (z) => z.sessions.disconnected, (z) => z.sessions.pending,
];

function render(fig) {
  if (document.body.dataset.view !== "dashboard") return;
  const windowed = fig.window_seconds > 0;
  set("m-registered", fig.machines.registered);
  set("m-unregistered", fig.machines.unregistered);
  set("m-maintenance", fig.machines.maintenance);
  set("s-active", fig.sessions.active);
  set("s-disconnected", fig.sessions.disconnected);
  set("s-pending", fig.sessions.pending);
  set("window", windowed ? Math.round(fig.window_seconds) + " s" : "-");
  set("launch-rate", windowed ? rate(fig.launches.per_second) : "-");
  set("enum-rate", windowed ? rate(fig.enumerations.per_second) : "-");
  set("launch-p99", p99(fig.launches, windowed));
  set("enum-p99", p99(fig.enumerations, windowed));
  set("launch-nocap", windowed ? fig.refused.no_capacity : "-");
  set("refused", windowed ? fig.refused.overloaded : "-");
  set("dashboard-at", new Date(fig.at).toLocaleTimeString());
  const outage = $("dashboard-outage");
  outage.hidden = !fig.outage;

  const zones = fig.zones || [];
  $("zones-wrap").hidden = zones.length < 2;
  const rows = zones.map((z) => {
    const tr = document.createElement("tr");
    tr.dataset.zone = z.name;
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = z.name || "(no zone)";
    tr.append(th);
    for (const col of zoneColumns) {
      const td = document.createElement("td");
      td.className = "num";
      td.textContent = col(z);
      tr.append(td);
    }
    return tr;
  });
  $("zones").querySelector("tbody").replaceChildren(...rows);
  renderTrends(fig.trends);
  document.body.dataset.rendered = "dashboard";
}

// ---- the trends: small bar charts of the last hour, drawn here ----

const SVG = "http://www.w3.org/2000/svg";
const trendKinds = [
  ["launches", "Launches", "launches a minute", (n) => n + (n === 1 ? " launch" : " launches") + " in the last hour"],
  ["logons", "Logons", "logons a minute", (n) => n + (n === 1 ? " logon" : " logons") + " in the last hour"],
  ["sessions", "Sessions", "live sessions", (n, last, top) => last + " live now, at most " + top + " in the last hour"],
];

function renderTrends(trends) {
  const samples = (trends && trends.samples) || [];
  const box = $("trends");
  if (!samples.length) { box.hidden = true; return; }
  box.hidden = false;
  const charts = trendKinds.map(([key, title, unit, summary]) => {
    const values = samples.map((x) => x[key] || 0);
    const top = Math.max(...values);
    const total = values.reduce((a, b) => a + b, 0);
    const said = summary(total, values[values.length - 1], top);
    const fig = document.createElement("figure");
    fig.className = "trend";
    fig.dataset.trend = key;
    const cap = document.createElement("figcaption");
    const h = document.createElement("strong");
    h.textContent = title;
    cap.append(h, " ", said);
    fig.append(cap, bars(values, top, title + " over the last hour, " + unit + ": " + said, samples));
    return fig;
  });
  box.replaceChildren(...charts);
}

// bars draws values as an SVG bar chart, a bar a minute, scaled to top.
function bars(values, top, label, samples) {
  const w = 240, h = 48, step = w / values.length;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 " + w + " " + (h + 1));
  svg.setAttribute("width", String(w));
  svg.setAttribute("height", String(h + 1));
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  svg.dataset.values = values.join(",");
  const base = document.createElementNS(SVG, "line");
  base.setAttribute("x1", "0"); base.setAttribute("x2", String(w));
  base.setAttribute("y1", String(h + 0.5)); base.setAttribute("y2", String(h + 0.5));
  base.setAttribute("class", "axis");
  svg.append(base);
  values.forEach((v, i) => {
    if (!v) return;
    const bh = Math.max(1, Math.round((v / (top || 1)) * h));
    const r = document.createElementNS(SVG, "rect");
    r.setAttribute("x", (i * step + 0.5).toFixed(1));
    r.setAttribute("y", String(h - bh));
    r.setAttribute("width", Math.max(1, step - 1).toFixed(1));
    r.setAttribute("height", String(bh));
    const t = document.createElementNS(SVG, "title");
    t.textContent = new Date(samples[i].at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) + ": " + v;
    r.append(t);
    svg.append(r);
  });
  return svg;
}
