// The signed-in session: the credentials (kept in this tab's sessionStorage only),
// the headers they give every call, and the state the views share (which view is
// current, its live stream, what Refresh re-reads).

const API_VERSION = "latest";
const CREDENTIALS_KEY = "metalforge.dashboard.credentials";

export const app = {
  creds: null,
  states: null, // /dashboard/states.json
  stream: null,
  view: 0, // bumped on each navigation: late answers for an old view are dropped
  cleanup: null,
  refresh: null,
  noticeTimer: null,
};

// Whether the view that started some work (its token) is still the one shown.
export function current(token) {
  return token === app.view;
}

// What to do when the service refuses the credentials (a 401 on any call or on the
// stream): set by the page's boot, which signs out; the modules below it only report.
let refused = () => {};

export function whenCredentialsRefused(handler) {
  refused = handler;
}

export function credentialsRefused(message) {
  refused(message);
}

// -- credentials -----------------------------------------------------------

// Kept in sessionStorage only: they leave with the tab, never reach a URL.
export function loadCredentials() {
  try {
    const raw = window.sessionStorage.getItem(CREDENTIALS_KEY);
    const parsed = raw ? JSON.parse(raw) : null;
    return parsed && typeof parsed.kind === "string" ? parsed : null;
  } catch (_err) {
    return null;
  }
}

export function saveCredentials(creds) {
  window.sessionStorage.setItem(CREDENTIALS_KEY, JSON.stringify(creds));
}

export function clearCredentials() {
  window.sessionStorage.removeItem(CREDENTIALS_KEY);
}

export function basicHeader(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  let binary = "";
  bytes.forEach((b) => {
    binary += String.fromCharCode(b);
  });
  return `Basic ${window.btoa(binary)}`;
}

export function authHeaders(creds) {
  const headers = { "X-OpenStack-Ironic-API-Version": API_VERSION };
  if (creds && creds.kind === "basic") headers.Authorization = creds.header;
  if (creds && creds.kind === "token") headers["X-Auth-Token"] = creds.token;
  return headers;
}

export function describeCredentials(creds) {
  if (!creds) return "";
  if (creds.kind === "basic") return creds.user;
  if (creds.kind === "token") return "token";
  return "no authentication";
}
