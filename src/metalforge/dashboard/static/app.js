// metalforge operator dashboard: the page's entry module (no framework, no build step).
// It signs the operator in and out, routes the URL's fragment to a view, and wires the
// top bar; each view and helper is a module of its own beside this one.
//
// Everything shown is read from the /v1 API with the operator's own
// credentials, so the API's policy decides what each operator sees and may do.
// Every string the API returns is treated as hostile: the DOM is built with
// createElement and textContent only, never from markup.

import { renderAllocations } from "./allocations.js";
import { ApiError, api, loadStates } from "./api.js";
import { $ } from "./dom.js";
import { renderFirmware } from "./firmware.js";
import { renderFleet } from "./fleet.js";
import { renderNode } from "./node.js";
import { clearError } from "./notices.js";
import { renderRollouts } from "./rollouts.js";
import {
  app,
  basicHeader,
  clearCredentials,
  describeCredentials,
  loadCredentials,
  saveCredentials,
  whenCredentialsRefused,
} from "./session.js";
import { closeStream } from "./stream.js";
import { renderTemplates } from "./templates.js";

// -- signing in and out, and routing -------------------------------------------

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
  // The first refusal signs out; a request still in flight then (refused for want of
  // credentials once they are cleared) must not replace its message.
  whenCredentialsRefused((message) => {
    if (app.creds) signOut(message);
  });
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
