// The API client: calls to /v1 with the session's credentials, Ironic's error bodies
// made readable, collections read page by page, and the server's state table
// (/dashboard/states.json), from which the page takes its provision verbs and the
// node fields that hold a flow's running step.

import { app, authHeaders, credentialsRefused } from "./session.js";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// Ironic's error body is {"error_message": "<JSON string>"} whose inner
// object has a faultstring (or a description); either level may be missing.
export function errorText(status, body) {
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

export async function api(path, options) {
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
    if (response.status === 401 && !opts.loginProbe) credentialsRefused(error.message);
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
export async function listAll(path, key) {
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

// -- the state table ---------------------------------------------------------

// Read once (it is public, and the same for every caller; views that ask while it is
// being read share that read). The URL is relative to the page (/dashboard/).
let reading = null;

export function loadStates() {
  if (app.states) return Promise.resolve(app.states);
  if (!reading) {
    reading = readStates().finally(() => {
      reading = null;
    });
  }
  return reading;
}

async function readStates() {
  const response = await fetch("states.json", { cache: "no-store", credentials: "omit" });
  if (!response.ok) throw new ApiError(response.status, "the state table is unavailable");
  app.states = await response.json();
  return app.states;
}

function stateTable() {
  return app.states && typeof app.states === "object" ? app.states : {};
}

function listOf(value) {
  return Array.isArray(value) ? value.filter((v) => typeof v === "string") : [];
}

// The node fields that hold the step a flow is running (clean_step, deploy_step...):
// none until the table is read.
export function stepFields() {
  return listOf(stateTable().step_fields);
}

// The server's canonical verbs (states.VERBS), in its order.
export function listedVerbs() {
  return listOf(stateTable().verbs);
}

// The canonical verbs a caller may request in `state`: the table's events there, each
// alias spelled as its canonical verb, and only verbs the server lists as such.
export function verbsAllowedIn(state) {
  const table = stateTable();
  const listed = new Set(listedVerbs());
  const aliases = table.verb_aliases && typeof table.verb_aliases === "object" ? table.verb_aliases : {};
  const byState = table.verbs_by_state && typeof table.verbs_by_state === "object" ? table.verbs_by_state : {};
  const events = Object.hasOwn(byState, state) ? listOf(byState[state]) : [];
  const canonical = events.map((v) => (Object.hasOwn(aliases, v) ? aliases[v] : v));
  return new Set(canonical.filter((v) => listed.has(v)));
}
