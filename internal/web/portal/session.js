// The portal's session view: a session's desktop in the page, drawn by
// noVNC (portal/novnc, vendored verbatim) from the session's display, an
// RFB stream over a WebSocket (internal/vdaproto/display.go is the
// contract): usher's gateway at the launch answer's same-origin
// display_url, or in direct mode the agent's wss:// URL. The socket
// offers two subprotocols, "binary" and "usher.ticket." + the launch's
// single-use ticket; the display closes it with one of the close codes
// below. portal.js loads this module when a launch answer has a
// display_url, and calls openDesktop.
//
// Keyboard: noVNC sends each key as the keysym of KeyboardEvent.key, the
// character the local layout made (with the QEMU extended key event's
// scancode too when the server takes it), so the local keyboard layout is
// the one that counts. AltGr works (on Windows, noVNC merges the fake
// Ctrl+Alt into one AltGr). Dead keys compose locally: the accent key is
// not sent, the composed character is (´ then e sends é; ´ then space
// sends ´). Limits: input methods that compose in a candidate window
// (Chinese, Japanese, Korean) do not reach the desktop; the browser keeps
// a few shortcuts for itself (Ctrl+W, Ctrl+T, Ctrl+N, Alt+Tab, the
// Windows key) except in full screen in Chromium, where the page asks
// for the keyboard lock (hold Esc to leave full screen); phones get no
// on-screen keyboard. Tab moves into the desktop; once there, every key
// goes to it, and Ctrl+Alt+Shift+Home moves the focus back to the
// toolbar.
//
// Clipboard: text copied on the desktop comes to this device's clipboard
// when the browser lets the page write it (and shows in the Clipboard
// panel in any case); text goes to the desktop from the panel, from the
// device's clipboard with "Paste from this device" (the async Clipboard
// API, which asks the user), and by itself when the desktop gets the
// focus once the browser has granted the page the clipboard. At most
// maxClipboardBytes either way. A server without noVNC's extended
// clipboard gets Latin-1 only (others become "?"); TigerVNC's has it.

import RFB from "./novnc/core/rfb.js";

// The display's subprotocols (vdaproto.DisplaySubprotocol and
// vdaproto.TicketSubprotocolPrefix).
export const displaySubprotocol = "binary";
export const ticketSubprotocolPrefix = "usher.ticket.";

// The display's close codes (vdaproto.Close...).
export const closeCodes = {
  takenOver: 4001, // opened by another connection, which now has it
  ended: 4002, // logged off; a relaunch starts a new session
  displayFailed: 4003, // the display stopped; the session is reported ended
  disconnected: 4004, // disconnected by the broker or a policy; a relaunch returns to it
  unreachable: 4005, // the gateway could not reach the agent
};

// maxClipboardBytes bounds the text the clipboard carries either way
// (UTF-8): TigerVNC's default MaxCutText.
export const maxClipboardBytes = 256 * 1024;

// After an unclean close the view reconnects by itself: a fresh ticket
// from POST /api/v1/sessions/{id}/reconnect, after each of these delays
// (±20 %), then it gives up. A connection that stayed up stableMs starts
// the count afresh. A socket that has not connected within connectMs is
// given up as unclean.
const retryDelays = [1000, 2000, 4000, 8000, 15000, 30000];
const stableMs = 30000;
const connectMs = 20000;

// The close codes after which the view reconnects by itself, with the
// unclean closes (1006, no close frame): going away, server error,
// restart, try again later, bad gateway, and the agent out of the
// gateway's reach.
const retryCodes = new Set([1001, 1006, 1011, 1012, 1013, 1014, closeCodes.unreachable]);

// What the view says when the display closes, per close code.
const closeMessages = {
  [closeCodes.takenOver]: "Your desktop was opened in another window or on another device, which has it now.",
  [closeCodes.ended]: "Your session has ended: it was logged off.",
  [closeCodes.displayFailed]: "The desktop's display stopped, and the session has ended. Open it again to start a new one.",
  [closeCodes.disconnected]: "Your session was disconnected. It is still running: reconnect to go on where you left off.",
  [closeCodes.unreachable]: "The machine your desktop runs on cannot be reached just now.",
};

// clipboardPolicy says which ways the clipboard may go in the session of
// launch: the hook for a site policy per direction (to be carried by the
// launch answer). Until there is one, both ways.
export function clipboardPolicy(launch) {
  return { toDesktop: true, fromDesktop: true };
}

// displaySocketURL resolves a launch answer's display_url against the
// page's location: a same-origin path becomes ws: (or wss: for a page
// over https:); an absolute ws: or wss: URL (direct mode) stays as it is.
export function displaySocketURL(displayURL, base = location.href) {
  const u = new URL(displayURL, base);
  if (u.protocol === "https:") u.protocol = "wss:";
  else if (u.protocol === "http:") u.protocol = "ws:";
  if (u.protocol !== "ws:" && u.protocol !== "wss:") throw new Error("the display's address is not a WebSocket URL");
  u.hash = "";
  return u.href;
}

const utf8 = new TextEncoder();

function kb(bytes) { return Math.ceil(bytes / 1024) + " KB"; }

const $ = (id) => document.getElementById(id);

// openDesktop shows the session of launch (a launch answer with
// display_url and ticket) in the view root (index.html's
// #view-session), and returns its controller, whose close() disconnects
// the desktop (the session stays) and leaves the view as it was.
//
// options:
//
//	title      the app's or desktop's name
//	call       (method, path, body) => Promise of the answer: the portal's
//	           user API client (a 401 shows the logon, which closes the view)
//	confirm    (title, text, ok) => Promise<boolean>: asks the user
//	relaunch   () => void, or null: launch the resource anew ("Open again")
//	leave      () => void: back to the apps
export function openDesktop(root, launch, options) {
  return new Desktop(root, launch, options);
}

class Desktop {
  constructor(root, launch, options) {
    this.root = root;
    this.opts = options;
    this.sessionID = launch.session_id;
    this.launch = launch;
    this.conn = null; // the connection: {ws, rfb, closeEvent, connectedAt, ours, timedOut, failure}
    this.attempt = 0; // reconnections since the last stable connection
    this.closed = false;
    this.everConnected = false;
    this.gone = false; // the session has ended
    this.lastLocal = null; // the last text sent to the desktop
    this.lastRemote = null; // the last text the desktop copied
    this.abort = new AbortController();
    this.timers = new Set();

    this.screen = $("session-screen");
    this.toolbar = $("session-toolbar");
    this.clip = $("session-clip");
    this.clipText = $("session-clip-text");
    $("session-title").textContent = options.title;
    this.hideMessage();
    this.clip.hidden = true;
    $("session-clipboard").setAttribute("aria-expanded", "false");
    this.clipText.value = "";
    this.clipNote("");
    $("session-fullscreen").hidden = !document.fullscreenEnabled;
    $("session-fullscreen").setAttribute("aria-pressed", "false");
    const file = launch.launch_file && launch.launch_file.filename;
    $("session-download").hidden = !file;
    if (file) $("session-download").textContent = "Download " + ((file.match(/\.[a-z0-9]+$/i) || [])[0] || "launch file");
    this.wire();
    this.rove(this.toolbar.querySelector("button:not([hidden])"));
    this.connect(launch);
  }

  // ---- wiring ----

  on(target, type, fn, capture = false) {
    target.addEventListener(type, fn, { signal: this.abort.signal, capture });
  }

  later(fn, ms) {
    const t = setTimeout(() => { this.timers.delete(t); fn(); }, ms);
    this.timers.add(t);
    return t;
  }

  wire() {
    this.on($("session-cad"), "click", () => this.ctrlAltDel());
    this.on($("session-fullscreen"), "click", () => this.toggleFullscreen());
    this.on($("session-clipboard"), "click", () => this.toggleClipboard());
    this.on($("session-disconnect"), "click", () => this.disconnect());
    this.on($("session-logoff"), "click", () => this.logoff());
    this.on($("session-download"), "click", () => this.downloadFile());
    this.on($("session-clip-send"), "click", () => this.toDesktop(this.clipText.value));
    this.on($("session-clip-paste"), "click", () => this.pasteFromDevice());
    this.on($("session-clip-copy"), "click", () => this.copyToDevice());
    this.on(document, "fullscreenchange", () => this.fullscreenChanged());
    this.on(this.toolbar, "keydown", (e) => this.toolbarKey(e));
    this.on(this.toolbar, "focusin", (e) => { if (e.target.matches("button")) this.rove(e.target); });
    // Before noVNC's own handler on its canvas: the way out of the desktop.
    this.on(this.screen, "keydown", (e) => this.screenKey(e), true);
    this.on(this.screen, "focusin", () => this.syncFromDevice());
  }

  // ---- the connection ----

  connect(launch) {
    this.launch = launch;
    this.policy = clipboardPolicy(launch);
    this.setState("connecting", (this.attempt ? "Reconnecting to " : "Connecting to ") + this.opts.title + "…");
    const conn = { ws: null, rfb: null, closeEvent: null, connectedAt: 0, ours: false, timedOut: false, failure: "" };
    this.conn = conn;
    try {
      conn.ws = new WebSocket(displaySocketURL(launch.display_url), [displaySubprotocol, ticketSubprotocolPrefix + launch.ticket]);
    } catch (e) {
      // An address the page may not open (a port the browser blocks).
      this.conn = null;
      this.stop("The portal cannot open your desktop's display: " + e.message, ["reconnect", "back"]);
      return;
    }
    // Registered before noVNC's, so that the close code is known by the
    // time noVNC says it disconnected (its event carries no code).
    conn.ws.addEventListener("close", (e) => { conn.closeEvent = e; });
    const rfb = new RFB(this.screen, conn.ws, { shared: true });
    conn.rfb = rfb;
    rfb.scaleViewport = true;
    rfb.resizeSession = true;
    rfb.focusOnClick = true;
    rfb.background = "#20242b";
    rfb.addEventListener("connect", () => this.connected(conn));
    rfb.addEventListener("disconnect", (e) => this.disconnected(conn, e.detail.clean));
    rfb.addEventListener("clipboard", (e) => this.fromDesktop(e.detail.text));
    rfb.addEventListener("credentialsrequired", () => { conn.failure = "credentials"; rfb.disconnect(); });
    rfb.addEventListener("securityfailure", () => { conn.failure = "security"; });
    // On a touch screen noVNC draws the pointer in a canvas of its own in
    // the body: nothing for assistive technology.
    for (const c of document.body.querySelectorAll(":scope > canvas")) c.setAttribute("aria-hidden", "true");
    // noVNC's canvas takes the keys: in the tab order after the toolbar,
    // and named for assistive technology.
    const canvas = this.canvas();
    if (canvas) {
      canvas.tabIndex = 0;
      canvas.setAttribute("role", "application");
      canvas.setAttribute("aria-roledescription", "remote desktop");
      canvas.setAttribute("aria-label", "Desktop of " + this.opts.title + ". Ctrl+Alt+Shift+Home moves the focus to the toolbar.");
    }
    this.connectTimer = this.later(() => {
      if (this.conn === conn && !conn.connectedAt) {
        conn.timedOut = true;
        rfb.disconnect();
      }
    }, connectMs);
  }

  canvas() { return this.screen.querySelector("canvas"); }

  connected(conn) {
    if (conn !== this.conn || this.closed) return;
    clearTimeout(this.connectTimer);
    conn.connectedAt = Date.now();
    this.everConnected = true;
    this.hideMessage();
    this.setState("connected", "Connected to " + this.opts.title + ".");
    // The desktop takes the keyboard, unless the user is elsewhere in the
    // view (the clipboard's text, the toolbar).
    const a = document.activeElement;
    if (!a || a === document.body || a === $("main") || this.screen.contains(a) || a.closest("#session-message")) {
      conn.rfb.focus({ preventScroll: true });
    }
  }

  disconnected(conn, clean) {
    if (conn !== this.conn) return;
    this.conn = null;
    clearTimeout(this.connectTimer);
    if (this.closed || conn.ours) return; // what follows is the closer's to say
    if (conn.connectedAt && Date.now() - conn.connectedAt >= stableMs) this.attempt = 0;
    const code = conn.closeEvent ? conn.closeEvent.code : 0;
    switch (code) {
      case closeCodes.takenOver:
        return this.stop(closeMessages[code], ["here", "back"]);
      case closeCodes.ended:
      case closeCodes.displayFailed:
        return this.stop(closeMessages[code], ["relaunch", "back"], true);
      case closeCodes.disconnected:
        return this.stop(closeMessages[code], ["reconnect", "back"]);
    }
    if (conn.failure === "credentials" || conn.failure === "security") {
      return this.stop("The desktop asked for a password or a security type the portal does not have: it cannot be shown here.", ["back"]);
    }
    if (retryCodes.has(code) || conn.timedOut || !clean || !conn.closeEvent) {
      return this.retry(code);
    }
    this.stop("The desktop closed the connection.", ["reconnect", "back"]);
  }

  // retry reconnects after the next delay, or gives up when there is none.
  retry(code) {
    const lost = this.everConnected ? "The connection to your desktop was lost." : "The portal could not connect to your desktop.";
    if (this.attempt >= retryDelays.length) {
      const why = code === closeCodes.unreachable ? closeMessages[code] : lost;
      return this.stop(why + " Reconnecting failed " + retryDelays.length + " times; your session may still be running: try again in a moment.",
        ["reconnect", "back"]);
    }
    const delay = retryDelays[this.attempt] * (0.8 + 0.4 * Math.random());
    this.attempt++;
    this.setState("reconnecting", "Reconnecting… (attempt " + this.attempt + " of " + retryDelays.length + ")");
    this.showMessage((code === closeCodes.unreachable ? closeMessages[code] : lost) + " Reconnecting…", ["back"]);
    this.retryTimer = this.later(() => this.relaunch(), delay);
  }

  // relaunch asks for a fresh ticket for the session, and connects.
  async relaunch() {
    clearTimeout(this.retryTimer);
    let l;
    try {
      l = await this.opts.call("POST", "/api/v1/sessions/" + encodeURIComponent(this.sessionID) + "/reconnect", { client_name: "usher portal" });
    } catch (e) {
      if (this.closed) return;
      if (e.status === 404) return this.stop("Your session has ended.", ["relaunch", "back"], true);
      if (e.status === 0 || e.status === 429 || e.status >= 500) return this.retry(0);
      return this.stop("Could not reconnect to your desktop: " + e.message, ["reconnect", "back"]);
    }
    if (this.closed) return;
    if (!l.display_url) {
      this.launch = l;
      return this.stop("Your session no longer opens in the browser: open its launch file in a desktop app.", ["download", "back"]);
    }
    this.connect(l);
  }

  // reconnectNow connects again at once, the count of attempts afresh.
  reconnectNow() {
    this.attempt = 0;
    this.hideMessage();
    this.setState("connecting", "Reconnecting to " + this.opts.title + "…");
    this.relaunch();
  }

  // hangUp closes the connection as the view's own doing.
  hangUp() {
    const conn = this.conn;
    if (!conn) return;
    conn.ours = true;
    this.conn = null;
    clearTimeout(this.connectTimer);
    try { conn.rfb.disconnect(); } catch (e) { /* already gone */ }
  }

  close() {
    if (this.closed) return;
    this.closed = true;
    this.hangUp();
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.abort.abort();
    if (document.fullscreenElement === this.root) document.exitFullscreen().catch(() => {});
    if (navigator.keyboard && navigator.keyboard.unlock) navigator.keyboard.unlock();
    this.screen.replaceChildren();
    delete this.root.dataset.state;
  }

  // ---- state and messages ----

  // setState says what the view is doing: data-state (connecting,
  // connected, reconnecting, ended) and #session-state's text, the view's
  // live region; gone, the session has ended, so that Disconnect and Log
  // off have nothing to act on.
  setState(state, text, gone = false) {
    this.root.dataset.state = state;
    this.gone = gone;
    $("session-state").textContent = text;
    const on = state === "connected";
    for (const id of ["session-cad", "session-clip-send", "session-clip-paste"]) {
      $(id).setAttribute("aria-disabled", String(!on));
    }
    for (const id of ["session-disconnect", "session-logoff"]) {
      $(id).setAttribute("aria-disabled", String(gone));
    }
  }

  // stop shows text and the actions named, as the view's last word until
  // the user acts; gone, the session has ended.
  stop(text, actions, gone = false) {
    this.hangUp();
    clearTimeout(this.retryTimer);
    this.setState("ended", text, gone);
    this.showMessage(text, actions);
    const first = $("session-message-actions").querySelector("button, a");
    if (first) first.focus();
  }

  // showMessage shows text over the desktop's place, with the actions
  // named; #session-state, the view's live region, says it too.
  showMessage(text, actions) {
    const box = $("session-message");
    $("session-message-text").textContent = text;
    const nodes = actions.map((a) => this.action(a)).filter(Boolean);
    // Whoever lands on an action hears what it is about.
    for (const n of nodes) n.setAttribute("aria-describedby", "session-message-text");
    $("session-message-actions").replaceChildren(...nodes);
    box.hidden = false;
  }

  hideMessage() {
    $("session-message").hidden = true;
    $("session-message-actions").replaceChildren();
  }

  action(name) {
    const b = document.createElement("button");
    b.type = "button";
    switch (name) {
      case "reconnect":
        b.textContent = "Reconnect";
        b.className = "primary";
        b.addEventListener("click", () => this.reconnectNow());
        return b;
      case "here":
        b.textContent = "Open it here";
        b.className = "primary";
        b.addEventListener("click", () => this.reconnectNow());
        return b;
      case "relaunch":
        if (!this.opts.relaunch) return null;
        b.textContent = "Open again";
        b.className = "primary";
        b.addEventListener("click", () => this.opts.relaunch());
        return b;
      case "download":
        return this.launch.launch_file ? this.fileLink(this.launch.launch_file) : null;
      case "back":
        b.textContent = "Back to apps";
        b.addEventListener("click", () => this.opts.leave());
        return b;
    }
    return null;
  }

  // fileLink is a link that downloads a launch answer's file.
  fileLink(file) {
    const a = document.createElement("a");
    a.className = "button";
    a.href = URL.createObjectURL(new Blob([file.content], { type: file.content_type }));
    a.download = file.filename;
    a.textContent = "Download " + (file.filename.match(/\.[a-z0-9]+$/i) || ["launch file"])[0];
    this.later(() => URL.revokeObjectURL(a.href), 10 * 60 * 1000);
    return a;
  }

  // ---- the toolbar ----

  // rove makes button the toolbar's one tab stop (the arrows move it).
  rove(button) {
    if (!button) return;
    for (const b of this.toolbar.querySelectorAll("button")) b.tabIndex = b === button ? 0 : -1;
  }

  toolbarKey(e) {
    const buttons = [...this.toolbar.querySelectorAll("button")].filter((b) => !b.hidden);
    const i = buttons.indexOf(document.activeElement);
    if (i < 0) return;
    let next = -1;
    if (e.key === "ArrowRight" || e.key === "ArrowDown") next = (i + 1) % buttons.length;
    else if (e.key === "ArrowLeft" || e.key === "ArrowUp") next = (i - 1 + buttons.length) % buttons.length;
    else if (e.key === "Home") next = 0;
    else if (e.key === "End") next = buttons.length - 1;
    if (next < 0) return;
    e.preventDefault();
    this.rove(buttons[next]);
    buttons[next].focus();
  }

  // screenKey takes Ctrl+Alt+Shift+Home from the desktop: the focus goes
  // back to the toolbar, and the modifiers held are released on the
  // desktop (noVNC, which saw them go down, sees them come up).
  screenKey(e) {
    if (!(e.code === "Home" && e.ctrlKey && e.altKey && e.shiftKey)) return;
    e.preventDefault();
    e.stopPropagation();
    const canvas = this.canvas();
    if (canvas) {
      for (const [code, key] of [["ControlLeft", "Control"], ["ControlRight", "Control"], ["AltLeft", "Alt"], ["AltRight", "Alt"],
        ["ShiftLeft", "Shift"], ["ShiftRight", "Shift"], ["MetaLeft", "Meta"], ["MetaRight", "Meta"]]) {
        canvas.dispatchEvent(new KeyboardEvent("keyup", { code, key, bubbles: true, cancelable: true }));
      }
    }
    const current = this.toolbar.querySelector('button[tabindex="0"]') || this.toolbar.querySelector("button");
    current.focus();
  }

  connectedOr(what) {
    if (this.conn && this.conn.connectedAt && this.root.dataset.state === "connected") return true;
    this.clipNote("Not connected to the desktop: " + what + " when it is back.");
    return false;
  }

  ctrlAltDel() {
    if (!this.conn || !this.conn.connectedAt) return;
    this.conn.rfb.sendCtrlAltDel();
    this.conn.rfb.focus({ preventScroll: true });
  }

  toggleFullscreen() {
    if (document.fullscreenElement) {
      document.exitFullscreen().catch(() => {});
      return;
    }
    this.root.requestFullscreen().then(() => {
      // Chromium: the desktop gets Esc, Ctrl+W and the like (hold Esc to
      // leave full screen).
      if (navigator.keyboard && navigator.keyboard.lock) navigator.keyboard.lock().catch(() => {});
      if (this.conn && this.conn.connectedAt) this.conn.rfb.focus({ preventScroll: true });
    }, () => {
      $("session-state").textContent = "The browser did not let the page go full screen.";
    });
  }

  fullscreenChanged() {
    const on = document.fullscreenElement === this.root;
    $("session-fullscreen").setAttribute("aria-pressed", String(on));
    this.root.classList.toggle("fullscreen", on);
    if (!on && navigator.keyboard && navigator.keyboard.unlock) navigator.keyboard.unlock();
  }

  // ---- the clipboard ----

  toggleClipboard() {
    const open = this.clip.hidden;
    this.clip.hidden = !open;
    $("session-clipboard").setAttribute("aria-expanded", String(open));
    if (open) this.clipText.focus();
  }

  clipNote(text) {
    $("session-clip-note").textContent = text;
  }

  // fromDesktop takes text the desktop copied: into the panel, and onto
  // this device's clipboard when the browser lets the page write it.
  fromDesktop(text) {
    if (!this.policy.fromDesktop) return;
    const n = utf8.encode(text).length;
    if (n > maxClipboardBytes) {
      this.clipNote("The desktop copied " + kb(n) + " of text, more than the " + kb(maxClipboardBytes) + " the portal takes: it is not here.");
      return;
    }
    this.lastRemote = text;
    this.clipText.value = text;
    const fallback = () => this.clipNote("Text copied on the desktop is in this box; the browser does not let the page put it on this device's clipboard: copy it from here.");
    if (navigator.clipboard && navigator.clipboard.writeText && document.hasFocus()) {
      navigator.clipboard.writeText(text).then(() => this.clipNote("Text copied on the desktop is on this device's clipboard too."), fallback);
    } else {
      fallback();
    }
  }

  // toDesktop puts text on the desktop's clipboard; it says why not when
  // it cannot.
  toDesktop(text, quiet = false) {
    if (!this.policy.toDesktop) {
      this.clipNote("This site does not let text go to the desktop's clipboard.");
      return false;
    }
    if (!this.connectedOr("send it")) return false;
    const n = utf8.encode(text).length;
    if (n > maxClipboardBytes) {
      this.clipNote("That text is " + kb(n) + "; the desktop's clipboard takes at most " + kb(maxClipboardBytes) + ". Nothing was sent.");
      return false;
    }
    this.conn.rfb.clipboardPasteFrom(text);
    this.lastLocal = text;
    if (!quiet) this.clipNote("Sent to the desktop's clipboard: paste it there.");
    return true;
  }

  async pasteFromDevice() {
    if (!this.connectedOr("paste")) return;
    try {
      const text = await navigator.clipboard.readText();
      this.clipText.value = text;
      this.toDesktop(text);
    } catch (e) {
      this.clipNote("The browser did not let the page read this device's clipboard: paste the text into this box (Ctrl+V), then choose Send to desktop.");
      this.clip.hidden = false;
      $("session-clipboard").setAttribute("aria-expanded", "true");
      this.clipText.focus();
    }
  }

  async copyToDevice() {
    try {
      await navigator.clipboard.writeText(this.clipText.value);
      this.clipNote("Copied to this device's clipboard.");
    } catch (e) {
      this.clipText.select();
      this.clipNote("The browser did not let the page write this device's clipboard: the text is selected, copy it (Ctrl+C).");
    }
  }

  // syncFromDevice sends this device's clipboard to the desktop as it
  // gets the focus, when the browser has already granted the page the
  // clipboard (it never asks here: a prompt on every click would be in
  // the way).
  async syncFromDevice() {
    if (!this.policy.toDesktop || !this.conn || !this.conn.connectedAt || !navigator.clipboard || !navigator.permissions) return;
    try {
      const p = await navigator.permissions.query({ name: "clipboard-read" });
      if (p.state !== "granted") return;
      const text = await navigator.clipboard.readText();
      if (text && text !== this.lastLocal && text !== this.lastRemote) this.toDesktop(text, true);
    } catch (e) { /* no clipboard permission to query, or no text */ }
  }

  // ---- session actions ----

  async disconnect() {
    if (this.gone) return;
    this.hangUp();
    clearTimeout(this.retryTimer);
    let note = "";
    try {
      await this.opts.call("POST", "/api/v1/sessions/" + encodeURIComponent(this.sessionID) + "/disconnect");
    } catch (e) {
      if (this.closed) return;
      note = " (The site did not take the disconnection: " + e.message + ".)";
    }
    if (this.closed) return;
    this.stop("You disconnected " + this.opts.title + ". The session is still running: reconnect here or from Sessions." + note, ["reconnect", "back"]);
  }

  // downloadFile hands over a launch file for a desktop app, with a
  // ticket of its own: opening it moves the session there (and this view
  // hears that it was opened elsewhere).
  async downloadFile() {
    let l;
    try {
      l = await this.opts.call("POST", "/api/v1/sessions/" + encodeURIComponent(this.sessionID) + "/reconnect", { client_name: "usher portal" });
    } catch (e) {
      if (!this.closed) $("session-state").textContent = "Could not get a launch file: " + e.message;
      return;
    }
    if (this.closed || !l.launch_file) return;
    const a = this.fileLink(l.launch_file);
    a.hidden = true;
    document.body.append(a);
    a.click();
    a.remove();
    $("session-state").textContent = "The launch file (" + l.launch_file.filename + ") is downloading: open it in a desktop app to move the session there. Its ticket is good for one connection.";
  }

  async logoff() {
    if (this.gone) return;
    const ok = await this.opts.confirm("Log off?", "Log off your session of " + this.opts.title + "? Unsaved work in it is lost.", "Log off");
    if (!ok || this.closed) return;
    const conn = this.conn;
    if (conn) conn.ours = true; // the display's 4002 that follows is expected
    try {
      await this.opts.call("POST", "/api/v1/sessions/" + encodeURIComponent(this.sessionID) + "/logoff");
    } catch (e) {
      if (this.closed) return;
      if (conn && this.conn === conn) conn.ours = false;
      $("session-state").textContent = "Could not log the session off: " + e.message;
      return;
    }
    if (this.closed) return;
    this.stop("You logged off " + this.opts.title + ".", ["relaunch", "back"], true);
  }
}
