// metalforge operator dashboard: one script, no framework, no build step.
//
// Everything shown is read from the /v1 API with the operator's own
// credentials, so the API's policy decides what each operator sees and may do.
// Every string the API returns is treated as hostile: the DOM is built with
// createElement and textContent only, never from markup.
"use strict";

(() => {
  const API_VERSION = "latest";
  const CREDENTIALS_KEY = "metalforge.dashboard.credentials";
  const RECONNECT_MIN_MS = 1000;
  const RECONNECT_SPREAD_MS = 2000;
  // The service sends a keep-alive every ~15 s; a quiet stream is a dead one.
  const STREAM_SILENCE_MS = 45000;
  // Without the live stream an open node page re-reads a node that is in a flow.
  const FALLBACK_POLL_MS = 3000;
  // The fleet view reads the progress of at most this many busy nodes when it loads.
  const PROGRESS_READS = 50;

  // Buttons for the provision verbs, keyed by the state table's canonical verb
  // (states.VERBS); VERB_ALIASES gives the newer spellings of two of them.
  // `clean` and `rescue` need steps or a password and are not offered; `service`
  // asks for its steps in the dialog (dayTwoActions).
  const PROVISION_ACTIONS = [
    { verb: "manage", label: "Manage", hint: "take the node under operator control" },
    { verb: "provide", label: "Provide", hint: "clean the node and make it available" },
    { verb: "inspect", label: "Inspect", hint: "collect the hardware inventory" },
    { verb: "active", label: "Deploy", hint: "deploy the node's instance" },
    { verb: "rebuild", label: "Rebuild", hint: "deploy the instance again" },
    { verb: "deleted", label: "Undeploy", hint: "tear the deployment down and clean" },
    { verb: "adopt", label: "Adopt", hint: "take over a running workload" },
    { verb: "unhold", label: "Unhold", hint: "let a held flow continue" },
    { verb: "unrescue", label: "Unrescue", hint: "return from rescue to the instance" },
    { verb: "abort", label: "Abort", hint: "stop the running flow" },
  ];
  const VERB_ALIASES = { deploy: "active", undeploy: "deleted" };

  const $ = (id) => document.getElementById(id);

  // -- DOM building ----------------------------------------------------------

  // el("td", {className: "x", dataset: {a: "b"}}, "text", child) -> element.
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null) continue;
      if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "attrs") {
        for (const [name, attr] of Object.entries(value)) node.setAttribute(name, String(attr));
      } else if (key === "on") {
        for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
      } else node[key] = value;
    }
    for (const child of children) append(node, child);
    return node;
  }

  function append(parent, child) {
    if (child === undefined || child === null || child === false) return;
    if (Array.isArray(child)) child.forEach((c) => append(parent, c));
    else if (child instanceof Node) parent.appendChild(child);
    else parent.appendChild(document.createTextNode(String(child)));
  }

  function text(value) {
    if (value === undefined || value === null || value === "") return "—";
    if (typeof value === "boolean") return value ? "yes" : "no";
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  function slug(value) {
    return String(value || "none").toLowerCase().replace(/[^a-z0-9]+/g, "-");
  }

  function stateKind(state) {
    const s = String(state || "");
    if (s === "error" || s.endsWith("failed") || s === "older" || s === "differs") return "fail";
    if (s === "available" || s === "active" || s === "succeeded" || s === "done") return "ok";
    const idle = ["enroll", "manageable", "rescue", "", "pending", "paused", "skipped", "stopped", "unknown"];
    if (idle.includes(s)) return "idle";
    return "busy";
  }

  function stateBadge(state, extra) {
    return el("span", {
      className: `state state-${stateKind(state)}`,
      dataset: { state: state || "" },
      textContent: state || "none",
      ...(extra || {}),
    });
  }

  function formatTime(iso) {
    if (!iso) return "—";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    const pad = (n) => String(n).padStart(2, "0");
    return (
      `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
      `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`
    );
  }

  function timeLeft(seconds) {
    if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) {
      return "no estimate yet";
    }
    if (seconds < 60) return "less than a minute left";
    return `about ${Math.round(seconds / 60)} min left`;
  }

  // -- credentials -----------------------------------------------------------

  // Kept in sessionStorage only: they leave with the tab, never reach a URL.
  function loadCredentials() {
    try {
      const raw = window.sessionStorage.getItem(CREDENTIALS_KEY);
      const parsed = raw ? JSON.parse(raw) : null;
      return parsed && typeof parsed.kind === "string" ? parsed : null;
    } catch (_err) {
      return null;
    }
  }

  function saveCredentials(creds) {
    window.sessionStorage.setItem(CREDENTIALS_KEY, JSON.stringify(creds));
  }

  function clearCredentials() {
    window.sessionStorage.removeItem(CREDENTIALS_KEY);
  }

  function basicHeader(user, password) {
    const bytes = new TextEncoder().encode(`${user}:${password}`);
    let binary = "";
    bytes.forEach((b) => {
      binary += String.fromCharCode(b);
    });
    return `Basic ${window.btoa(binary)}`;
  }

  function authHeaders(creds) {
    const headers = { "X-OpenStack-Ironic-API-Version": API_VERSION };
    if (creds && creds.kind === "basic") headers.Authorization = creds.header;
    if (creds && creds.kind === "token") headers["X-Auth-Token"] = creds.token;
    return headers;
  }

  function describeCredentials(creds) {
    if (!creds) return "";
    if (creds.kind === "basic") return creds.user;
    if (creds.kind === "token") return "token";
    return "no authentication";
  }

  // -- the API -----------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // Ironic's error body is {"error_message": "<JSON string>"} whose inner
  // object has a faultstring (or a description); either level may be missing.
  function errorText(status, body) {
    let outer = body;
    if (typeof outer === "string") {
      try {
        outer = JSON.parse(outer);
      } catch (_err) {
        return outer.trim() || `HTTP ${status}`;
      }
    }
    let inner = outer && typeof outer === "object" ? outer.error_message : undefined;
    if (typeof inner === "string") {
      try {
        inner = JSON.parse(inner);
      } catch (_err) {
        return inner;
      }
    }
    for (const candidate of [inner, outer]) {
      if (candidate && typeof candidate === "object") {
        for (const key of ["faultstring", "description", "detail", "title"]) {
          if (typeof candidate[key] === "string" && candidate[key]) return candidate[key];
        }
      }
    }
    return `HTTP ${status}`;
  }

  async function api(path, options) {
    const opts = options || {};
    const headers = authHeaders(app.creds);
    let body;
    if (opts.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(opts.json);
    }
    let response;
    try {
      response = await fetch(path, {
        method: opts.method || "GET",
        headers,
        body,
        cache: "no-store",
        credentials: "omit",
        signal: opts.signal,
      });
    } catch (err) {
      if (err && err.name === "AbortError") throw err;
      throw new ApiError(0, "The service did not answer (network error).");
    }
    const raw = await response.text();
    if (!response.ok) {
      const error = new ApiError(response.status, errorText(response.status, raw));
      if (response.status === 401 && !opts.loginProbe) signOut(error.message);
      throw error;
    }
    if (!raw) return null;
    try {
      return JSON.parse(raw);
    } catch (_err) {
      throw new ApiError(response.status, "The service answered something that is not JSON.");
    }
  }

  // Every page of a collection, following its "next" links.
  async function listAll(path, key) {
    const items = [];
    let next = path;
    for (let page = 0; next && page < 100; page += 1) {
      const answer = await api(next);
      items.push(...((answer && answer[key]) || []));
      next = answer && answer.next ? relative(answer.next) : null;
    }
    return items;
  }

  // A "next" link is absolute (with the service's own idea of its address):
  // keep only its path and query so the page stays on its own origin.
  function relative(url) {
    try {
      const parsed = new URL(url, window.location.href);
      return parsed.pathname + parsed.search;
    } catch (_err) {
      return null;
    }
  }

  // -- the live stream -------------------------------------------------------

  // Server-sent events read with fetch(): EventSource cannot send the
  // credentials' headers. Reconnects after 1-3 s with Last-Event-ID, except
  // when the service refuses the credentials or has no stream at all.
  class LiveStream {
    constructor(path, onEvent) {
      this.path = path;
      this.onEvent = onEvent;
      this.lastId = null;
      this.stopped = false;
      this.controller = null;
      this.watchdog = null;
    }

    start() {
      this.run();
      return this;
    }

    stop() {
      this.stopped = true;
      if (this.controller) this.controller.abort();
      window.clearTimeout(this.watchdog);
    }

    touch() {
      window.clearTimeout(this.watchdog);
      this.watchdog = window.setTimeout(() => {
        if (this.controller) this.controller.abort();
      }, STREAM_SILENCE_MS);
    }

    async run() {
      while (!this.stopped) {
        this.controller = new AbortController();
        const headers = authHeaders(app.creds);
        headers.Accept = "text/event-stream";
        if (this.lastId !== null) headers["Last-Event-ID"] = this.lastId;
        try {
          const response = await fetch(this.path, {
            headers,
            cache: "no-store",
            credentials: "omit",
            signal: this.controller.signal,
          });
          if (this.stopped) return;
          if (response.status === 401) {
            signOut(errorText(401, await response.text()));
            return;
          }
          if (response.status === 403 || response.status === 404) {
            const why = errorText(response.status, await response.text());
            setLive("unavailable", "live updates unavailable", `${response.status}: ${why}`);
            if (response.status === 403) showError(`Live updates refused: ${why}`);
            return;
          }
          if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
          // "live" only once the service says the stream is subscribed ("ready").
          this.touch();
          await this.read(response.body.getReader());
        } catch (_err) {
          // A failed or aborted read: reconnect below unless stopped.
        }
        window.clearTimeout(this.watchdog);
        if (this.stopped) return;
        setLive("reconnecting", "reconnecting…");
        const delay = RECONNECT_MIN_MS + Math.random() * RECONNECT_SPREAD_MS;
        await new Promise((resolve) => window.setTimeout(resolve, delay));
      }
    }

    async read(reader) {
      const decoder = new TextDecoder();
      const parser = new SseParser((event) => {
        if (event.id !== null) this.lastId = event.id;
        if (event.type === "ready") setLive("live", "live");
        if (!this.stopped) this.onEvent(event);
      });
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        this.touch();
        parser.feed(decoder.decode(value, { stream: true }));
        if (this.stopped) {
          reader.cancel().catch(() => {});
          return;
        }
      }
      parser.feed(decoder.decode());
    }
  }

  // The text/event-stream format: lines "field: value", ":" comments, and a
  // blank line ending each event; a chunk may end anywhere, even inside "\r\n".
  class SseParser {
    constructor(dispatch) {
      this.dispatch = dispatch;
      this.buffer = "";
      this.reset();
    }

    reset() {
      this.type = "";
      this.data = [];
      this.id = null;
    }

    feed(chunk) {
      this.buffer += chunk;
      for (;;) {
        const match = /\r\n|\r|\n/.exec(this.buffer);
        if (!match) return;
        // A lone "\r" at the end may be the first half of "\r\n": wait for more.
        if (match[0] === "\r" && match.index === this.buffer.length - 1) return;
        const line = this.buffer.slice(0, match.index);
        this.buffer = this.buffer.slice(match.index + match[0].length);
        this.line(line);
      }
    }

    line(line) {
      if (line === "") {
        if (this.data.length || this.type) {
          this.dispatch({ type: this.type || "message", data: this.data.join("\n"), id: this.id });
        }
        this.reset();
        return;
      }
      if (line.startsWith(":")) return;
      const colon = line.indexOf(":");
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") this.type = value;
      else if (field === "data") this.data.push(value);
      else if (field === "id" && !value.includes("\0")) this.id = value;
    }
  }

  function setLive(state, label, detail) {
    const badge = $("live-status");
    badge.dataset.live = state;
    badge.className = `live live-${state}`;
    badge.textContent = label;
    badge.title = detail ? `${label} (${detail})` : label;
  }

  function openStream(path, onEvent) {
    closeStream();
    setLive("connecting", "connecting…");
    app.stream = new LiveStream(path, (event) => {
      let data = {};
      try {
        data = event.data ? JSON.parse(event.data) : {};
      } catch (_err) {
        return;
      }
      if (data && typeof data === "object") onEvent(event.type, data);
    }).start();
  }

  function closeStream() {
    if (app.stream) app.stream.stop();
    app.stream = null;
    setLive("off", "not live", "this view is read once; Refresh reads it again");
  }

  // -- banners -----------------------------------------------------------------

  function showError(message) {
    $("error-text").textContent = message;
    $("error-banner").hidden = false;
  }

  function clearError() {
    $("error-text").textContent = "";
    $("error-banner").hidden = true;
  }

  function showNotice(message) {
    $("notice-text").textContent = message;
    $("notice-banner").hidden = false;
    window.clearTimeout(app.noticeTimer);
    app.noticeTimer = window.setTimeout(() => {
      $("notice-banner").hidden = true;
    }, 6000);
  }

  function reportError(prefix, err) {
    if (err && err.name === "AbortError") return;
    if (err instanceof ApiError && err.status === 401) return;
    const status = err instanceof ApiError && err.status ? ` (${err.status})` : "";
    showError(`${prefix}${status}: ${err && err.message ? err.message : err}`);
  }

  // -- confirmation dialog -----------------------------------------------------

  // Resolves to {reason, values} when confirmed, null when cancelled. `inputs` are
  // the action's own fields ({name, label, kind: "text"|"select"|"textarea",
  // options, required, placeholder}); `values` holds what was typed, by name.
  function confirmAction({ title, message, askReason, inputs }) {
    const dialog = $("confirm-dialog");
    $("confirm-title").textContent = title;
    $("confirm-text").textContent = message;
    $("confirm-reason-field").hidden = !askReason;
    $("confirm-reason").value = "";
    const box = $("confirm-inputs");
    const fields = (inputs || []).map(inputField);
    box.replaceChildren(...fields.flatMap((f) => [f.label, f.control]));
    box.hidden = !fields.length;
    return new Promise((resolve) => {
      const finish = (confirmed) => {
        $("confirm-form").removeEventListener("submit", onSubmit);
        $("confirm-cancel").removeEventListener("click", onCancel);
        dialog.removeEventListener("cancel", onCancel);
        if (dialog.open) dialog.close();
        const values = Object.fromEntries(fields.map((f) => [f.name, f.control.value.trim()]));
        box.replaceChildren();
        resolve(confirmed ? { reason: $("confirm-reason").value.trim(), values } : null);
      };
      const onSubmit = (event) => {
        event.preventDefault();
        finish(true);
      };
      const onCancel = (event) => {
        event.preventDefault();
        finish(false);
      };
      $("confirm-form").addEventListener("submit", onSubmit);
      $("confirm-cancel").addEventListener("click", onCancel);
      dialog.addEventListener("cancel", onCancel);
      dialog.showModal();
      const first = fields.length ? fields[0].control : null;
      (askReason ? $("confirm-reason") : first || $("confirm-cancel")).focus();
    });
  }

  function inputField({ name, label, kind, options, required, placeholder }) {
    const id = `confirm-input-${name}`;
    let control;
    if (kind === "select") {
      control = el(
        "select",
        { id, name },
        (options || []).map(([value, shown]) => el("option", { value, textContent: shown })),
      );
    } else {
      control = el(kind === "textarea" ? "textarea" : "input", { id, name });
      if (placeholder) control.placeholder = placeholder;
      if (kind === "textarea") control.rows = 5;
    }
    control.required = Boolean(required);
    return { name, control, label: el("label", { htmlFor: id, textContent: label }) };
  }

  // -- application state and routing ---------------------------------------------

  const app = {
    creds: null,
    states: null, // /dashboard/states.json
    stream: null,
    view: 0, // bumped on each navigation: late answers for an old view are dropped
    cleanup: null,
    noticeTimer: null,
  };

  function current(token) {
    return token === app.view;
  }

  function signOut(message) {
    clearCredentials();
    app.creds = null;
    leaveView();
    $("nav").hidden = true;
    $("whoami").hidden = true;
    $("logout").hidden = true;
    $("refresh").hidden = true;
    $("view").hidden = true;
    $("view").replaceChildren();
    clearError();
    $("login").hidden = false;
    const error = $("login-error");
    error.textContent = message || "";
    error.hidden = !message;
    $("login-password").value = "";
    $("login-token").value = "";
  }

  function signedIn() {
    $("login").hidden = true;
    $("login-error").hidden = true;
    $("nav").hidden = false;
    $("refresh").hidden = false;
    const who = $("whoami");
    who.textContent = `signed in as ${describeCredentials(app.creds)}`;
    who.dataset.user = describeCredentials(app.creds);
    who.hidden = false;
    $("logout").hidden = false;
    $("view").hidden = false;
    route();
  }

  function leaveView() {
    app.view += 1;
    if (app.cleanup) app.cleanup();
    app.cleanup = null;
    closeStream();
  }

  function route() {
    if (!app.creds) return;
    leaveView();
    clearError();
    const token = app.view;
    const hash = window.location.hash || "#/";
    const view = $("view");
    view.replaceChildren();
    let match;
    let section = "fleet";
    if ((match = /^#\/nodes\/([^/]+)$/.exec(hash))) {
      renderNode(view, token, decodeURIComponent(match[1]));
    } else if (hash === "#/allocations") {
      section = "allocations";
      renderAllocations(view, token);
    } else if (hash === "#/templates") {
      section = "templates";
      renderTemplates(view, token);
    } else if (hash === "#/rollouts") {
      section = "rollouts";
      renderRollouts(view, token);
    } else if (hash === "#/firmware") {
      section = "firmware";
      renderFirmware(view, token);
    } else {
      renderFleet(view, token);
    }
    document.querySelectorAll("#nav a").forEach((link) => {
      link.classList.toggle("current", link.dataset.nav === section);
    });
  }

  async function loadStates() {
    if (app.states) return app.states;
    const response = await fetch("states.json", { cache: "no-store", credentials: "omit" });
    if (!response.ok) throw new ApiError(response.status, "the state table is unavailable");
    app.states = await response.json();
    return app.states;
  }

  // -- fleet view ---------------------------------------------------------------

  const FLEET_COLUMNS = [
    "Name",
    "UUID",
    "Provision state",
    "Target",
    "Power",
    "Maintenance",
    "Resource class",
    "Conductor group",
    "Last error",
    "Current step",
  ];

  function renderFleet(view, token) {
    const nodes = new Map();
    const filter = el("input", {
      id: "fleet-filter",
      type: "search",
      placeholder: "Filter by name, UUID, state, class, group…",
      attrs: { "aria-label": "Filter nodes" },
    });
    const stateFilter = el(
      "select",
      { id: "fleet-state-filter", attrs: { "aria-label": "Provision state" } },
      el("option", { value: "", textContent: "All provision states" }),
    );
    const summary = el("div", { id: "fleet-summary", className: "summary" });
    const tbody = el("tbody", { id: "fleet-rows" });
    const empty = el("p", { id: "fleet-empty", className: "muted", hidden: true });
    const table = el(
      "table",
      { id: "fleet-table", className: "grid" },
      el("thead", {}, el("tr", {}, FLEET_COLUMNS.map((c) => el("th", { textContent: c })))),
      tbody,
    );
    view.append(
      el("div", { className: "view-head" }, el("h1", { textContent: "Fleet" }), summary),
      el("div", { className: "toolbar" }, filter, stateFilter),
      el("div", { className: "table-wrap" }, table),
      empty,
    );

    const applyFilter = () => {
      const needle = filter.value.trim().toLowerCase();
      const wanted = stateFilter.value;
      let shown = 0;
      for (const row of tbody.rows) {
        const match =
          (!wanted || row.dataset.provisionState === wanted) &&
          (!needle || row.dataset.search.includes(needle));
        row.hidden = !match;
        if (match) shown += 1;
      }
      empty.hidden = shown > 0;
      empty.textContent = nodes.size ? "No node matches the filter." : "No nodes are enrolled.";
    };

    const refreshStateOptions = () => {
      const present = new Set([...nodes.values()].map((n) => n.provision_state));
      const wanted = stateFilter.value;
      if (wanted) present.add(wanted);
      const options = [el("option", { value: "", textContent: "All provision states" })];
      [...present].sort().forEach((state) => {
        options.push(el("option", { value: state, textContent: state }));
      });
      stateFilter.replaceChildren(...options);
      stateFilter.value = wanted;
    };

    const refreshSummary = () => {
      summary.replaceChildren(fleetSummary(nodes, (state) => {
        stateFilter.value = stateFilter.value === state ? "" : state;
        applyFilter();
      }));
      refreshStateOptions();
    };

    const upsert = (node, flash) => {
      const previous = nodes.get(node.uuid);
      // A node event carries the flow's progress; a listed node does not.
      const merged = { ...(previous || {}), ...node };
      if ("progress" in node) {
        // An event is the newest word on the flow: the listed step is stale.
        delete merged.clean_step;
        delete merged.deploy_step;
        delete merged.service_step;
      } else if (previous) merged.progress = previous.progress;
      nodes.set(node.uuid, merged);
      const row = fleetRow(merged);
      const old = tbody.querySelector(`tr[data-node-uuid="${CSS.escape(node.uuid)}"]`);
      if (old) old.replaceWith(row);
      else insertSorted(tbody, row);
      if (flash) row.classList.add("flash");
    };

    // Events that arrive while the list is read are held and applied after it:
    // the list may be older than they are. A reload asked for meanwhile runs next.
    let held = null;
    let again = false;
    const reload = async () => {
      if (held) {
        again = true;
        return;
      }
      held = [];
      try {
        const listed = await listAll("/v1/nodes?detail=true", "nodes");
        if (!current(token)) return;
        const seen = new Set();
        for (const node of listed) {
          seen.add(node.uuid);
          upsert(node, false);
        }
        for (const uuid of [...nodes.keys()]) {
          if (!seen.has(uuid)) removeNode(uuid);
        }
        table.dataset.loaded = "true";
        const pending = held;
        held = null;
        for (const [type, data] of pending) applyEvent(type, data);
        refreshSummary();
        applyFilter();
        await readProgress(listed.filter((n) => n.target_provision_state));
      } catch (err) {
        if (current(token)) reportError("Could not list the nodes", err);
      } finally {
        held = null;
        if (again && current(token)) {
          again = false;
          reload();
        }
      }
    };

    const applyEvent = (type, data) => {
      if (type === "node" && data.uuid) upsert(data, true);
      else if (type === "node_deleted" && data.uuid) removeNode(data.uuid);
    };

    // A listed node has no progress: ask for that of the first busy ones (events
    // bring it for the rest as their flows move on).
    const readProgress = async (busy) => {
      await Promise.allSettled(
        busy.slice(0, PROGRESS_READS).map(async (listed) => {
          const progress = await api(`/v1/nodes/${encodeURIComponent(listed.uuid)}/progress`);
          const now = nodes.get(listed.uuid);
          if (!current(token) || !now || now.provision_state !== progress.provision_state) return;
          if (now.progress) return; // an event was quicker, and is newer
          upsert({ ...now, progress }, false);
        }),
      );
    };

    const removeNode = (uuid) => {
      nodes.delete(uuid);
      const row = tbody.querySelector(`tr[data-node-uuid="${CSS.escape(uuid)}"]`);
      if (row) row.remove();
    };

    filter.addEventListener("input", applyFilter);
    stateFilter.addEventListener("change", applyFilter);
    app.refresh = reload;

    openStream("/v1/events", (type, data) => {
      if (!current(token)) return;
      if (type === "ready" || type === "resync") {
        // Subscribed (again), or events were missed: read the list now.
        reload();
        return;
      }
      if (type !== "node" && type !== "node_deleted") return;
      if (held) {
        held.push([type, data]);
        return;
      }
      applyEvent(type, data);
      refreshSummary();
      applyFilter();
    });
    reload();
  }

  function insertSorted(tbody, row) {
    const key = row.dataset.sortKey;
    for (const other of tbody.rows) {
      if (other.dataset.sortKey > key) {
        tbody.insertBefore(row, other);
        return;
      }
    }
    tbody.appendChild(row);
  }

  function fleetSummary(nodes, onState) {
    const byState = new Map();
    const byPower = new Map();
    let maintenance = 0;
    for (const node of nodes.values()) {
      byState.set(node.provision_state, (byState.get(node.provision_state) || 0) + 1);
      const power = node.power_state || "unknown";
      byPower.set(power, (byPower.get(power) || 0) + 1);
      if (node.maintenance) maintenance += 1;
    }
    const card = (label, count, props) =>
      el(
        "button",
        { type: "button", className: "count", ...(props || {}) },
        el("span", { className: "count-n", textContent: String(count) }),
        el("span", { className: "count-label", textContent: label }),
      );
    const states = [...byState.entries()].sort((a, b) => a[0].localeCompare(b[0]));
    return el(
      "div",
      { className: "counts" },
      card("nodes", nodes.size, { disabled: true, dataset: { count: "total" } }),
      states.map(([state, count]) =>
        card(state, count, {
          className: `count count-${stateKind(state)}`,
          dataset: { count: "state", state },
          title: `Show only ${state} nodes`,
          on: { click: () => onState(state) },
        }),
      ),
      card("in maintenance", maintenance, {
        disabled: true,
        className: maintenance ? "count count-warn" : "count",
        dataset: { count: "maintenance" },
      }),
      [...byPower.entries()]
        .sort((a, b) => a[0].localeCompare(b[0]))
        .map(([power, count]) =>
          card(power, count, { disabled: true, dataset: { count: "power", power } }),
        ),
    );
  }

  function currentStep(node) {
    const progress = node.progress;
    if (progress && progress.flow && progress.step_count) {
      const step = progress.current_step;
      const label = step ? `${step.interface}.${step.step}` : progress.flow;
      return { label, done: doneSteps(progress), count: progress.step_count, progress };
    }
    for (const key of ["clean_step", "deploy_step", "service_step"]) {
      const step = node[key];
      if (step && typeof step === "object" && step.step) {
        return { label: `${step.interface || "?"}.${step.step}`, done: null, count: null };
      }
    }
    return null;
  }

  function doneSteps(progress) {
    const steps = Array.isArray(progress.steps) ? progress.steps : [];
    return steps.filter((s) => s.status === "done").length;
  }

  function fleetRow(node) {
    const name = node.name || "";
    const step = currentStep(node);
    const link = el("a", {
      href: `#/nodes/${encodeURIComponent(node.uuid)}`,
      textContent: name || node.uuid,
      className: name ? "" : "muted",
    });
    const stepCell = el("td", { className: "step" });
    if (step) {
      stepCell.append(el("span", { textContent: step.label }));
      if (step.count) {
        stepCell.append(
          el("progress", { value: step.done, max: step.count }),
          el("span", { className: "muted", textContent: ` ${step.done}/${step.count}` }),
        );
      }
    } else stepCell.textContent = "—";
    const maintenanceCell = el("td", {
      className: node.maintenance ? "maint maint-on" : "maint",
      textContent: node.maintenance ? "on" : "off",
      title: (node.maintenance && node.maintenance_reason) || "",
    });
    if (node.maintenance && node.maintenance_reason) {
      maintenanceCell.append(
        el("span", { className: "reason", textContent: ` ${node.maintenance_reason}` }),
      );
    }
    const search = [
      name,
      node.uuid,
      node.provision_state,
      node.target_provision_state,
      node.power_state,
      node.resource_class,
      node.conductor_group,
      node.last_error,
      node.maintenance ? "maintenance" : "",
    ]
      .filter(Boolean)
      .join(" ")
      .toLowerCase();
    return el(
      "tr",
      {
        dataset: {
          nodeUuid: node.uuid,
          provisionState: node.provision_state || "",
          maintenance: node.maintenance ? "true" : "false",
          search,
          sortKey: `${name || "~"}\u0000${node.uuid}`,
        },
      },
      el("td", { className: "name" }, link),
      el("td", { className: "uuid mono", textContent: node.uuid, title: node.uuid }),
      el("td", { className: "provision-state" }, stateBadge(node.provision_state)),
      el("td", { textContent: text(node.target_provision_state) }),
      el("td", { textContent: text(node.power_state) }),
      maintenanceCell,
      el("td", { textContent: text(node.resource_class) }),
      el("td", { textContent: text(node.conductor_group) }),
      el("td", {
        className: node.last_error ? "last-error" : "last-error muted",
        textContent: text(node.last_error),
        title: node.last_error || "",
      }),
      stepCell,
    );
  }

  // -- node page ------------------------------------------------------------------

  const NODE_FIELDS = [
    ["name", "Name"],
    ["uuid", "UUID"],
    ["provision_state", "Provision state"],
    ["target_provision_state", "Target"],
    ["power_state", "Power state"],
    ["target_power_state", "Target power"],
    ["maintenance", "Maintenance"],
    ["maintenance_reason", "Maintenance reason"],
    ["last_error", "Last error"],
    ["driver", "Driver"],
    ["resource_class", "Resource class"],
    ["conductor_group", "Conductor group"],
    ["conductor", "Conductor"],
    ["owner", "Owner"],
    ["lessee", "Lessee"],
    ["instance_uuid", "Instance"],
    ["allocation_uuid", "Allocation"],
    ["description", "Description"],
    ["provision_updated_at", "State changed"],
    ["updated_at", "Updated"],
  ];

  function renderNode(view, token, ident) {
    const title = el("h1", { id: "node-title", textContent: ident });
    const badge = el("span", { id: "node-state" });
    const actions = el("div", { id: "node-actions", className: "actions" });
    const fields = el("dl", { id: "node-fields", className: "fields-list" });
    const raw = el("pre", { id: "node-raw", className: "raw" });
    const progress = el("div", { id: "node-progress" });
    const ports = el("div", { id: "node-ports" });
    const traits = el("div", { id: "node-traits" });
    const firmware = el("div", { id: "node-firmware" });
    const bios = el("div", { id: "node-bios" });
    const media = el("div", { id: "node-vmedia" });
    const history = el("ol", { id: "node-history", className: "timeline" });
    view.append(
      el(
        "div",
        { className: "view-head" },
        el("a", { href: "#/", className: "back", textContent: "← Fleet" }),
        title,
        badge,
      ),
      actions,
      el(
        "div",
        { className: "columns" },
        el(
          "div",
          { className: "column" },
          el("section", { className: "card" }, el("h2", { textContent: "Node" }), fields,
            el("details", {}, el("summary", { textContent: "Every field" }), raw)),
          el("section", { className: "card" }, el("h2", { textContent: "Ports" }), ports),
          el("section", { className: "card" }, el("h2", { textContent: "Traits" }), traits),
          el("section", { className: "card" }, el("h2", { textContent: "Firmware" }), firmware),
          el("section", { className: "card" }, el("h2", { textContent: "BIOS settings" }), bios),
          el("section", { className: "card" }, el("h2", { textContent: "Virtual media" }), media),
        ),
        el(
          "div",
          { className: "column" },
          el("section", { className: "card" }, el("h2", { textContent: "Current flow" }), progress),
          el("section", { className: "card" }, el("h2", { textContent: "History" }), history),
        ),
      ),
    );

    const page = {
      node: null,
      uuid: null,
      pollTimer: null,
      details: null,
      detailsAgain: false,
      events: 0,
    };

    const showNode = (node) => {
      page.node = node;
      page.uuid = node.uuid;
      title.textContent = node.name || node.uuid;
      title.dataset.nodeUuid = node.uuid;
      badge.replaceChildren(stateBadge(node.provision_state, { id: "node-provision-state" }));
      badge.dataset.provisionState = node.provision_state || "";
      badge.dataset.maintenance = node.maintenance ? "true" : "false";
      fields.replaceChildren(
        ...NODE_FIELDS.flatMap(([key, label]) => [
          el("dt", { textContent: label }),
          el("dd", {
            dataset: { field: key },
            textContent: key.endsWith("_at") ? formatTime(node[key]) : text(node[key]),
          }),
        ]),
      );
      raw.textContent = JSON.stringify(node, null, 2);
      // Rebuilt only when the choice changes: a button keeps its focus across events.
      const choice = `${node.provision_state}|${node.maintenance}|${Boolean(app.states)}`;
      if (actions.dataset.choice !== choice) {
        actions.dataset.choice = choice;
        actions.replaceChildren(...nodeActions(node, runAction));
      }
      schedulePoll();
    };

    // Without the live stream, keep re-reading a node while a flow runs.
    const schedulePoll = () => {
      window.clearTimeout(page.pollTimer);
      const live = $("live-status").dataset.live === "live";
      if (!live && page.node && page.node.target_provision_state && current(token)) {
        page.pollTimer = window.setTimeout(() => reloadAll(), FALLBACK_POLL_MS);
      }
    };

    // A read answered after a newer event must not undo it (the node would show a
    // state it has left, and no later event would come to correct it): a read during
    // which an event of this node arrived is not shown, and the node is read again.
    const reloadNode = async () => {
      for (;;) {
        const seen = page.events;
        const node = await api(`/v1/nodes/${encodeURIComponent(ident)}`);
        if (!current(token)) return node;
        if (page.events === seen) {
          showNode(node);
          return node;
        }
      }
    };

    // Events may come in bursts: one read of history and progress at a time,
    // and one more after it when events arrived meanwhile.
    const reloadDetails = () => {
      if (page.details) {
        page.detailsAgain = true;
        return page.details;
      }
      page.details = readDetails().finally(() => {
        page.details = null;
        if (page.detailsAgain && current(token)) {
          page.detailsAgain = false;
          reloadDetails();
        }
      });
      return page.details;
    };

    const readDetails = async () => {
      const uuid = encodeURIComponent(page.uuid);
      const tasks = [
        api(`/v1/nodes/${uuid}/history?detail=true`).then(
          (answer) => current(token) && history.replaceChildren(...timeline(answer)),
        ),
        api(`/v1/nodes/${uuid}/progress`).then(
          (answer) => current(token) && progress.replaceChildren(progressView(answer)),
          (err) => {
            if (!current(token) || (err instanceof ApiError && err.status === 401)) return;
            const why =
              err instanceof ApiError && err.status === 404
                ? "Progress is not available from this service."
                : `Progress unavailable: ${err.message}`;
            progress.replaceChildren(el("p", { className: "muted", textContent: why }));
          },
        ),
      ];
      const results = await Promise.allSettled(tasks);
      const failed = results.find((r) => r.status === "rejected");
      if (failed && current(token)) reportError("Could not read the node's history", failed.reason);
    };

    // What the node's flows and actions change besides the node: ports, traits and
    // what its BMC holds (firmware, BIOS, virtual media).
    const reloadTables = async () => {
      const uuid = encodeURIComponent(page.uuid);
      const [portList, traitList, firmwareList, biosList, mediaList] = await Promise.all([
        listAll(`/v1/ports?node=${uuid}&detail=true`, "ports"),
        api(`/v1/nodes/${uuid}/traits`),
        api(`/v1/nodes/${uuid}/firmware`).catch(unreadable),
        api(`/v1/nodes/${uuid}/bios?detail=true`).catch(unreadable),
        api(`/v1/nodes/${uuid}/vmedia`).catch(unreadable),
      ]);
      if (!current(token)) return;
      ports.replaceChildren(portsTable(portList));
      traits.replaceChildren(traitsList((traitList && traitList.traits) || []));
      firmware.replaceChildren(firmwareTable(firmwareList));
      bios.replaceChildren(biosTable(biosList));
      media.replaceChildren(mediaTable(mediaList));
      media.dataset.inserted = String(
        Array.isArray(mediaList) && mediaList.some((d) => d.inserted),
      );
    };

    const reloadAll = async () => {
      try {
        await reloadNode();
        if (!current(token)) return;
        await Promise.all([reloadTables(), reloadDetails()]);
        if (!current(token)) return;
        view.dataset.loaded = "true";
      } catch (err) {
        if (current(token)) reportError("Could not read the node", err);
      }
    };

    const runAction = async (action) => {
      const node = page.node;
      const label = node.name || node.uuid;
      const answer = await confirmAction(action.confirm(label));
      if (!answer || !current(token)) return;
      clearError();
      try {
        await action.request(node, answer);
        if (!current(token)) return;
        showNotice(`Requested: ${action.label.toLowerCase()} ${label}`);
      } catch (err) {
        if (current(token)) reportError(`${action.label} was refused`, err);
      }
      if (!current(token)) return;
      try {
        await reloadNode();
        await Promise.all([reloadTables(), reloadDetails()]);
      } catch (err) {
        if (current(token)) reportError("Could not read the node", err);
      }
    };

    app.refresh = reloadAll;
    app.cleanup = () => window.clearTimeout(page.pollTimer);

    openStream(`/v1/events?node=${encodeURIComponent(ident)}`, (type, data) => {
      if (!current(token)) return;
      const mine = data.uuid && (data.uuid === page.uuid || data.uuid === ident);
      if (type === "ready" || type === "resync") {
        reloadAll();
      } else if (type === "node_deleted" && mine) {
        showError("This node was deleted.");
        actions.dataset.choice = "deleted";
        actions.replaceChildren();
      } else if (type === "node" && mine) {
        page.events += 1;
        if (!page.node) return;
        // The event carries the list's fields only: keep the rest from the last read.
        const { progress: flow, ...fieldsNow } = data;
        const moved = fieldsNow.provision_state !== page.node.provision_state;
        showNode({ ...page.node, ...fieldsNow });
        if (flow) progress.replaceChildren(progressView(flow));
        reloadDetails();
        // A flow's steps change what the BMC holds: read it again when the state moves.
        if (moved) {
          reloadTables().catch((err) => current(token) && reportError("Could not read the node", err));
        }
      }
    });
    loadStates()
      .catch((err) => reportError("Could not read the state table", err))
      .then(() => reloadAll());
  }

  function nodeActions(node, run) {
    const table = app.states && app.states.verbs_by_state;
    const allowed = new Set(
      ((table && table[node.provision_state]) || []).map((v) => VERB_ALIASES[v] || v),
    );
    const buttons = [];
    for (const action of PROVISION_ACTIONS) {
      if (!allowed.has(action.verb)) continue;
      buttons.push(
        actionButton(
          {
            id: `action-${action.verb}`,
            label: action.label,
            danger: action.verb === "abort" || action.verb === "deleted",
            confirm: (name) => ({
              title: `${action.label} ${name}?`,
              message:
                `Request "${action.verb}" for node ${name}, now ${node.provision_state}: ` +
                `${action.hint}.`,
            }),
            request: (target) =>
              api(`/v1/nodes/${encodeURIComponent(target.uuid)}/states/provision`, {
                method: "PUT",
                json: { target: action.verb },
              }),
          },
          run,
        ),
      );
    }
    for (const action of dayTwoActions(node, allowed)) buttons.push(actionButton(action, run));
    if (node.maintenance) {
      buttons.push(
        actionButton(
          {
            id: "action-maintenance-off",
            label: "Maintenance off",
            confirm: (name) => ({
              title: `End maintenance of ${name}?`,
              message: `The conductor will manage node ${name} again.`,
            }),
            request: (target) =>
              api(`/v1/nodes/${encodeURIComponent(target.uuid)}/maintenance`, {
                method: "DELETE",
              }),
          },
          run,
        ),
      );
    } else {
      buttons.push(
        actionButton(
          {
            id: "action-maintenance-on",
            label: "Maintenance on",
            confirm: (name) => ({
              title: `Put ${name} in maintenance?`,
              message: `The conductor stops acting on node ${name} until maintenance ends.`,
              askReason: true,
            }),
            request: (target, answer) =>
              api(`/v1/nodes/${encodeURIComponent(target.uuid)}/maintenance`, {
                method: "PUT",
                json: answer.reason ? { reason: answer.reason } : {},
              }),
          },
          run,
        ),
      );
    }
    if (!buttons.length) {
      buttons.push(el("span", { className: "muted", textContent: "No action in this state." }));
    }
    return buttons;
  }

  // Day-2 work on a node: servicing, a firmware update and virtual media. Each asks in
  // the dialog for what its request needs; the API judges it (a refusal is shown).
  function dayTwoActions(node, allowed) {
    const actions = [];
    const provisionPath = (target) =>
      `/v1/nodes/${encodeURIComponent(target.uuid)}/states/provision`;
    const vmediaPath = (target) => `/v1/nodes/${encodeURIComponent(target.uuid)}/vmedia`;
    if (allowed.has("service")) {
      actions.push({
        id: "action-service",
        label: "Service",
        confirm: (name) => ({
          title: `Service ${name}?`,
          message:
            `Run steps on node ${name} while it stays deployed, then return it to active: ` +
            "a runbook's steps, or steps given as a JSON list.",
          inputs: [
            { name: "runbook", label: "Runbook (name or UUID)", kind: "text" },
            {
              name: "steps",
              label: "or service steps (JSON)",
              kind: "textarea",
              placeholder: '[{"interface": "bios", "step": "apply_configuration", "args": {}}]',
            },
          ],
        }),
        request: (target, answer) =>
          api(provisionPath(target), { method: "PUT", json: serviceBody(answer.values) }),
      });
    }
    // A firmware update is a step: of servicing on a deployed node, of cleaning otherwise.
    const flow = allowed.has("service") ? "service" : allowed.has("clean") ? "clean" : null;
    if (flow && node.firmware_interface && node.firmware_interface !== "no-firmware") {
      actions.push({
        id: "action-firmware-update",
        label: "Update firmware",
        confirm: (name) => ({
          title: `Update the firmware of ${name}?`,
          message:
            `The BMC of node ${name} flashes the image at the URL (http or https) ` +
            `during ${flow === "service" ? "servicing" : "manual cleaning"}.`,
          inputs: [
            {
              name: "component",
              label: "Component",
              kind: "select",
              options: [
                ["bios", "BIOS"],
                ["bmc", "BMC"],
              ],
            },
            {
              name: "url",
              label: "Image URL",
              kind: "text",
              required: true,
              placeholder: "https://firmware.example.com/bios-2.1.bin",
            },
          ],
        }),
        request: (target, answer) => {
          const { component, url } = answer.values;
          const step = {
            interface: "firmware",
            step: "update",
            args: { settings: [{ component, url }] },
          };
          return api(provisionPath(target), {
            method: "PUT",
            json: { target: flow, [`${flow}_steps`]: [step] },
          });
        },
      });
    }
    actions.push(
      {
        id: "action-vmedia-attach",
        label: "Attach media",
        confirm: (name) => ({
          title: `Attach virtual media to ${name}?`,
          message: `The BMC of node ${name} inserts the image at the URL in a virtual drive.`,
          inputs: [
            {
              name: "device_type",
              label: "Drive",
              kind: "select",
              options: [
                ["cdrom", "CD-ROM"],
                ["disk", "Disk"],
                ["floppy", "Floppy"],
              ],
            },
            {
              name: "image_url",
              label: "Image URL",
              kind: "text",
              required: true,
              placeholder: "https://images.example.com/rescue.iso",
            },
          ],
        }),
        request: (target, answer) =>
          api(vmediaPath(target), { method: "POST", json: answer.values }),
      },
      {
        id: "action-vmedia-detach",
        label: "Detach media",
        confirm: (name) => ({
          title: `Detach the virtual media of ${name}?`,
          message: `The BMC of node ${name} ejects every image its virtual drives hold.`,
        }),
        request: (target) => api(vmediaPath(target), { method: "DELETE" }),
      },
    );
    return actions;
  }

  // The body of a service request from the dialog: a runbook or a JSON list of steps.
  function serviceBody({ runbook, steps }) {
    if (runbook && steps) throw new Error("give a runbook or steps, not both");
    if (runbook) return { target: "service", runbook };
    if (!steps) throw new Error("give a runbook or the steps to run");
    let parsed;
    try {
      parsed = JSON.parse(steps);
    } catch (err) {
      throw new Error(`the steps are not JSON: ${err.message}`);
    }
    if (!Array.isArray(parsed)) throw new Error("the steps must be a JSON list");
    return { target: "service", service_steps: parsed };
  }

  function actionButton(action, run) {
    return el("button", {
      type: "button",
      id: action.id,
      className: action.danger ? "danger" : "",
      textContent: action.label,
      dataset: { action: action.id.replace(/^action-/, "") },
      on: { click: () => run(action) },
    });
  }

  function progressView(progress) {
    const flow = (progress && progress.flow) || "";
    const box = el("div", { className: "progress", dataset: { flow } });
    if (!flow) {
      box.append(el("p", { className: "muted", textContent: "No flow is running." }));
      const phases = phasesView(progress);
      if (phases) box.append(el("p", { className: "muted", textContent: "The last flow:" }), phases);
      return box;
    }
    const steps = Array.isArray(progress.steps) ? progress.steps : [];
    const done = doneSteps(progress);
    const count = progress.step_count || steps.length;
    box.append(
      el(
        "p",
        { className: "flow-line" },
        el("strong", { textContent: progress.flow }),
        ` — step ${Math.min(done + 1, count || 1)} of ${count || 0}`,
        " · ",
        el("span", { id: "progress-left", textContent: timeLeft(progress.estimated_seconds_left) }),
        progress.estimated_finish_at ? ` (by ${formatTime(progress.estimated_finish_at)})` : "",
      ),
      el("progress", {
        id: "progress-bar",
        value: done,
        max: Math.max(count, 1),
        attrs: { "aria-label": `${done} of ${count} steps done` },
      }),
      el(
        "ol",
        { className: "steps" },
        steps.map((step) => {
          const current = progress.current_step;
          const running =
            step.status === "running" &&
            current &&
            current.step === step.step &&
            current.interface === step.interface;
          const detail = [];
          if (running && Number.isFinite(current.elapsed_seconds)) {
            detail.push(`${Math.round(current.elapsed_seconds)} s elapsed`);
          }
          if (Number.isFinite(step.estimated_seconds)) {
            detail.push(`usually ${Math.round(step.estimated_seconds)} s`);
          }
          return el(
            "li",
            { className: `step-${slug(step.status)}`, dataset: { status: step.status || "" } },
            el("span", { className: "step-status", textContent: step.status || "?" }),
            el("span", { className: "mono", textContent: `${step.interface}.${step.step}` }),
            el("span", { className: "muted", textContent: detail.length ? ` ${detail.join(", ")}` : "" }),
          );
        }),
      ),
    );
    const phases = phasesView(progress);
    if (phases) box.append(phases);
    return box;
  }

  // The flow's timeline: one bar per state it went through, as wide as the time the
  // node stayed there, so the phase that dominates shows at a glance.
  function phasesView(progress) {
    const phases = (progress && Array.isArray(progress.phases) && progress.phases) || [];
    if (!phases.length) return null;
    const total = phases.reduce((sum, p) => sum + (Number(p.seconds) || 0), 0);
    const seconds = (value) => (value < 10 ? value.toFixed(1) : Math.round(value).toString());
    return el(
      "div",
      { className: "phases" },
      el("p", { className: "muted", id: "flow-duration", textContent: `${seconds(total)} s in all` }),
      el(
        "ol",
        { id: "flow-phases", className: "phase-bars" },
        phases.map((phase) => {
          const share = total > 0 ? (Number(phase.seconds) || 0) / total : 0;
          const label = `${phase.state}: ${seconds(Number(phase.seconds) || 0)} s`;
          const bar = el(
            "li",
            {
              dataset: { state: phase.state || "", seconds: String(phase.seconds) },
              title: `${label} (from ${formatTime(phase.entered_at)})`,
            },
            el("span", { textContent: label }),
          );
          // Through the CSSOM: the page's policy allows no inline style attributes.
          bar.style.flexGrow = String(Math.max(share, 0.02));
          return bar;
        }),
      ),
    );
  }

  function timeline(answer) {
    const entries = ((answer && answer.history) || []).slice().reverse();
    if (!entries.length) return [el("li", { className: "muted", textContent: "No history yet." })];
    return entries.map((entry) =>
      el(
        "li",
        { className: `event sev-${slug(entry.severity)}`, dataset: { eventType: entry.event_type || "" } },
        el("time", { dateTime: entry.created_at || "", textContent: formatTime(entry.created_at) }),
        el("span", { className: "sev", textContent: text(entry.severity) }),
        el("span", { className: "event-text", textContent: text(entry.event) }),
        el(
          "span",
          { className: "muted event-meta" },
          [
            entry.event_type,
            entry.user ? `by ${entry.user}` : null,
            entry.conductor ? `on ${entry.conductor}` : null,
          ]
            .filter(Boolean)
            .join(" · "),
        ),
      ),
    );
  }

  function portsTable(ports) {
    if (!ports.length) return el("p", { className: "muted", textContent: "No ports." });
    return simpleTable(
      "ports-table",
      ["Address", "UUID", "PXE", "Switch port"],
      ports.map((port) => {
        const link = port.local_link_connection || {};
        return [
          el("span", { className: "mono", textContent: text(port.address) }),
          el("span", { className: "mono wrap", textContent: text(port.uuid) }),
          port.pxe_enabled ? "yes" : "no",
          [link.switch_info || link.switch_id, link.port_id].filter(Boolean).join(" ") || "—",
        ];
      }),
    );
  }

  // A table the caller may not read (a 403 for a lessee, say) is shown as such, not as
  // a failure of the whole page.
  function unreadable(err) {
    if (err instanceof ApiError && err.status !== 0 && err.status !== 401) {
      return { unreadable: err.message };
    }
    throw err;
  }

  function firmwareTable(answer) {
    if (answer.unreadable) return el("p", { className: "muted", textContent: answer.unreadable });
    const components = answer.firmware || [];
    if (!components.length) {
      return el("p", { className: "muted", textContent: "No firmware versions read yet." });
    }
    return simpleTable(
      "firmware-table",
      ["Component", "Current", "Initial", "Last flashed"],
      components.map((c) => [
        el("span", { className: "mono", textContent: text(c.component) }),
        el("span", { className: "mono", textContent: text(c.current_version) }),
        el("span", { className: "mono", textContent: text(c.initial_version) }),
        el("span", { className: "mono", textContent: text(c.last_version_flashed) }),
      ]),
    );
  }

  function mediaTable(answer) {
    if (answer.unreadable) return el("p", { className: "muted", textContent: answer.unreadable });
    const drives = Array.isArray(answer) ? answer : [];
    if (!drives.length) {
      return el("p", { className: "muted", textContent: "The BMC reports no virtual drive." });
    }
    return simpleTable(
      "vmedia-table",
      ["Drive", "Inserted", "Image"],
      drives.map((d) => [
        el("span", { className: "mono", textContent: (d.media_types || []).join(", ") || "—" }),
        text(Boolean(d.inserted)),
        el("span", { className: "mono wrap", textContent: text(d.image) }),
      ]),
    );
  }

  function biosTable(answer) {
    if (answer.unreadable) return el("p", { className: "muted", textContent: answer.unreadable });
    const settings = answer.bios || [];
    if (!settings.length) {
      return el("p", { className: "muted", textContent: "No BIOS settings read yet." });
    }
    return simpleTable(
      "bios-table",
      ["Setting", "Value", "Allowed"],
      settings.map((s) => [
        el("span", { className: "mono", textContent: text(s.name) }),
        el("span", { className: "mono wrap", textContent: text(s.value) }),
        (s.allowable_values || []).join(", ") || (s.read_only ? "read-only" : "—"),
      ]),
    );
  }

  function traitsList(traits) {
    if (!traits.length) return el("p", { className: "muted", textContent: "No traits." });
    return el(
      "ul",
      { className: "chips" },
      traits.map((trait) => el("li", { className: "chip", textContent: String(trait) })),
    );
  }

  function simpleTable(id, headers, rows) {
    return el(
      "div",
      { className: "table-wrap" },
      el(
        "table",
        { id, className: "grid" },
        el("thead", {}, el("tr", {}, headers.map((h) => el("th", { textContent: h })))),
        el(
          "tbody",
          {},
          rows.map((cells) =>
            el("tr", {}, cells.map((cell) => el("td", {}, cell instanceof Node ? cell : text(cell)))),
          ),
        ),
      ),
    );
  }

  function nodeLink(uuid) {
    if (!uuid) return "—";
    return el("a", {
      href: `#/nodes/${encodeURIComponent(uuid)}`,
      className: "mono",
      textContent: uuid,
    });
  }

  // -- allocations and deploy templates ------------------------------------------

  function renderAllocations(view, token) {
    const holder = el("div", { id: "allocations" }, el("p", { className: "muted", textContent: "Loading…" }));
    view.append(el("div", { className: "view-head" }, el("h1", { textContent: "Allocations" })), holder);
    const reload = async () => {
      try {
        const items = await listAll("/v1/allocations", "allocations");
        if (!current(token)) return;
        holder.replaceChildren(
          items.length
            ? simpleTable(
                "allocations-table",
                ["Name", "UUID", "State", "Node", "Resource class", "Traits", "Last error", "Updated"],
                items.map((a) => [
                  text(a.name),
                  el("span", { className: "mono", textContent: text(a.uuid) }),
                  stateBadge(a.state),
                  nodeLink(a.node_uuid),
                  text(a.resource_class),
                  Array.isArray(a.traits) && a.traits.length ? a.traits.join(", ") : "—",
                  text(a.last_error),
                  formatTime(a.updated_at || a.created_at),
                ]),
              )
            : el("p", { className: "muted", textContent: "No allocations." }),
        );
        holder.dataset.loaded = "true";
      } catch (err) {
        if (current(token)) reportError("Could not list the allocations", err);
      }
    };
    app.refresh = reload;
    reload();
  }

  function renderTemplates(view, token) {
    const holder = el("div", { id: "templates" }, el("p", { className: "muted", textContent: "Loading…" }));
    view.append(
      el("div", { className: "view-head" }, el("h1", { textContent: "Deploy templates" })),
      holder,
    );
    const reload = async () => {
      try {
        const items = await listAll("/v1/deploy_templates?detail=true", "deploy_templates");
        if (!current(token)) return;
        holder.replaceChildren(
          items.length
            ? simpleTable(
                "templates-table",
                ["Name", "UUID", "Steps", "Updated"],
                items.map((t) => [
                  el("span", { className: "mono", textContent: text(t.name) }),
                  el("span", { className: "mono", textContent: text(t.uuid) }),
                  el(
                    "ol",
                    { className: "plain" },
                    (Array.isArray(t.steps) ? t.steps : []).map((s) =>
                      el("li", {
                        className: "mono",
                        textContent: `${s.interface}.${s.step} (priority ${text(s.priority)})`,
                      }),
                    ),
                  ),
                  formatTime(t.updated_at || t.created_at),
                ]),
              )
            : el("p", { className: "muted", textContent: "No deploy templates." }),
        );
        holder.dataset.loaded = "true";
      } catch (err) {
        if (current(token)) reportError("Could not list the deploy templates", err);
      }
    };
    app.refresh = reload;
    reload();
  }

  // -- rollouts and firmware drift ---------------------------------------------------

  const ROLLOUT_ACTIONS = [
    { id: "pause", label: "Pause", when: ["pending", "running"] },
    { id: "resume", label: "Resume", when: ["paused"] },
    { id: "abort", label: "Abort", when: ["pending", "running", "paused"], danger: true },
  ];

  function rolloutCard(rollout, reload) {
    const counts = rollout.node_counts || {};
    const summary = Object.keys(counts)
      .filter((state) => counts[state])
      .map((state) => `${counts[state]} ${state}`)
      .join(", ");
    const run = async (action) => {
      const answer = await confirmAction({
        title: `${action.label} rollout ${rollout.name || rollout.uuid}`,
        message:
          action.id === "abort"
            ? "No node will start any more; the nodes under way finish their flow."
            : action.id === "pause"
              ? "No node will start until it is resumed; the nodes under way finish."
              : "The rollout carries on with its next wave.",
      });
      if (!answer) return;
      try {
        await api(`/v1/rollouts/${encodeURIComponent(rollout.uuid)}/${action.id}`, {
          method: "POST",
        });
        showNotice(`Rollout ${rollout.name || rollout.uuid}: ${action.label.toLowerCase()} done.`);
      } catch (err) {
        reportError(`Could not ${action.id} the rollout`, err);
      }
      reload();
    };
    const buttons = ROLLOUT_ACTIONS.filter((a) => a.when.includes(rollout.state)).map((a) =>
      actionButton({ id: `rollout-${a.id}-${rollout.uuid}`, label: a.label, danger: a.danger }, () =>
        run(a),
      ),
    );
    return el(
      "section",
      { className: "card rollout", dataset: { rolloutUuid: rollout.uuid, rolloutState: rollout.state } },
      el(
        "div",
        { className: "view-head" },
        el("h2", { textContent: rollout.name || rollout.uuid }),
        stateBadge(rollout.state),
        el("div", { className: "actions" }, buttons),
      ),
      el("p", {
        className: "muted",
        textContent: [
          JSON.stringify(rollout.action),
          `canary ${rollout.canary}, batch ${rollout.batch}, max failures ${rollout.max_failures}`,
          summary,
        ].join(" · "),
      }),
      rollout.paused_reason ? el("p", { className: "notice", textContent: rollout.paused_reason }) : null,
      rollout.last_error ? el("p", { className: "error-text", textContent: rollout.last_error }) : null,
      simpleTable(
        `rollout-nodes-${rollout.uuid}`,
        ["Node", "Name", "Wave", "State", "Outcome", "Error"],
        (rollout.nodes || []).map((n) => [
          nodeLink(n.node_uuid),
          text(n.node_name),
          n.wave < 0 ? "—" : n.wave === 0 ? "canary" : String(n.wave),
          stateBadge(n.state),
          text(n.outcome),
          text(n.error),
        ]),
      ),
    );
  }

  function renderRollouts(view, token) {
    const holder = el("div", { id: "rollouts" }, el("p", { className: "muted", textContent: "Loading…" }));
    view.append(el("div", { className: "view-head" }, el("h1", { textContent: "Rollouts" })), holder);
    const reload = async () => {
      try {
        const items = await listAll("/v1/rollouts?detail=true", "rollouts");
        if (!current(token)) return;
        items.reverse(); // the newest first
        holder.replaceChildren(
          ...(items.length
            ? items.map((r) => rolloutCard(r, reload))
            : [el("p", { className: "muted", textContent: "No rollouts." })]),
        );
        holder.dataset.loaded = "true";
      } catch (err) {
        if (current(token)) reportError("Could not list the rollouts", err);
      }
    };
    app.refresh = reload;
    reload();
    // A rollout moves on its conductor's rounds, which send no event of their own: read
    // it again every few seconds while it is shown.
    const timer = setInterval(() => {
      if (current(token)) reload();
    }, 3000);
    app.cleanup = () => clearInterval(timer);
  }

  function renderFirmware(view, token) {
    const holder = el("div", { id: "firmware" }, el("p", { className: "muted", textContent: "Loading…" }));
    view.append(
      el("div", { className: "view-head" }, el("h1", { textContent: "Firmware baselines" })),
      holder,
    );
    const reload = async () => {
      try {
        const baselines = await listAll("/v1/firmware_baselines?detail=true", "firmware_baselines");
        const reports = await Promise.all(
          baselines.map((b) => api(`/v1/firmware_baselines/${encodeURIComponent(b.uuid)}/drift`)),
        );
        if (!current(token)) return;
        holder.replaceChildren(
          ...(baselines.length
            ? baselines.map((b, i) => {
                const report = reports[i] || { nodes: [], covered_nodes: 0 };
                const rows = report.nodes.flatMap((n) =>
                  n.components.map((c) => [
                    nodeLink(n.node_uuid),
                    text(n.node_name),
                    text(n.provision_state),
                    text(c.component),
                    text(c.expected_version),
                    text(c.current_version),
                    stateBadge(c.status),
                  ]),
                );
                const wanted = (b.components || []).map((c) => `${c.component} ${c.version}`).join(", ");
                return el(
                  "section",
                  { className: "card baseline", dataset: { baselineUuid: b.uuid } },
                  el("h2", { textContent: b.name }),
                  el("p", {
                    className: "muted",
                    textContent: `${b.vendor || "any vendor"} · ${b.model || "any model"} · ${wanted} · ${report.nodes.length} of ${report.covered_nodes} nodes off the baseline`,
                  }),
                  rows.length
                    ? simpleTable(
                        `drift-${b.uuid}`,
                        ["Node", "Name", "State", "Component", "Wanted", "Runs", "Status"],
                        rows,
                      )
                    : el("p", { className: "muted", textContent: "Every covered node is at the baseline." }),
                );
              })
            : [el("p", { className: "muted", textContent: "No firmware baselines." })]),
        );
        holder.dataset.loaded = "true";
      } catch (err) {
        if (current(token)) reportError("Could not read the firmware baselines", err);
      }
    };
    app.refresh = reload;
    reload();
  }

  // -- sign in ------------------------------------------------------------------------

  function selectedKind() {
    const checked = document.querySelector('input[name="auth-kind"]:checked');
    return checked ? checked.value : "basic";
  }

  function showKindFields() {
    const kind = selectedKind();
    $("login-basic-fields").hidden = kind !== "basic";
    $("login-token-fields").hidden = kind !== "token";
  }

  async function submitLogin(event) {
    event.preventDefault();
    const kind = selectedKind();
    let creds;
    if (kind === "basic") {
      const user = $("login-username").value.trim();
      const password = $("login-password").value;
      if (!user || !password) return loginError("Give a user name and a password.");
      creds = { kind, user, header: basicHeader(user, password) };
    } else if (kind === "token") {
      const token = $("login-token").value.trim();
      if (!token) return loginError("Give a token.");
      creds = { kind, token };
    } else creds = { kind: "none" };
    const button = $("login-submit");
    button.disabled = true;
    app.creds = creds;
    try {
      // Any authenticated call proves the credentials; a 403 still means "who", not "how".
      await api("/v1/nodes?limit=1&fields=uuid", { loginProbe: true });
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) {
        app.creds = null;
        button.disabled = false;
        return loginError(`Sign-in refused: ${err.message}`);
      }
      if (!(err instanceof ApiError) || err.status === 0) {
        app.creds = null;
        button.disabled = false;
        return loginError(err.message || String(err));
      }
    }
    button.disabled = false;
    saveCredentials(creds);
    $("login-password").value = "";
    $("login-token").value = "";
    signedIn();
  }

  function loginError(message) {
    const error = $("login-error");
    error.textContent = message;
    error.hidden = false;
  }

  function start() {
    document.querySelectorAll('input[name="auth-kind"]').forEach((radio) => {
      radio.addEventListener("change", showKindFields);
    });
    $("login-form").addEventListener("submit", submitLogin);
    $("logout").addEventListener("click", () => signOut(""));
    $("error-dismiss").addEventListener("click", clearError);
    $("refresh").addEventListener("click", () => {
      clearError();
      if (app.refresh) app.refresh();
    });
    window.addEventListener("hashchange", route);
    loadStates().catch(() => {});
    app.creds = loadCredentials();
    if (app.creds) signedIn();
    else enterWithoutCredentials();
  }

  // A service that asks for no credentials (noauth: ``make run``) lets anyone in, so the
  // page goes straight to the fleet; any other answers 401 and the sign-in form shows.
  async function enterWithoutCredentials() {
    app.creds = { kind: "none" };
    try {
      await api("/v1/nodes?limit=1&fields=uuid", { loginProbe: true });
    } catch (err) {
      if (err instanceof ApiError && err.status !== 0 && err.status !== 401) {
        saveCredentials(app.creds); // a 403 still means the service took no credentials
        return signedIn();
      }
      return signOut("");
    }
    saveCredentials(app.creds);
    signedIn();
  }

  start();
})();
