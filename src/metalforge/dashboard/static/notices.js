// Telling the operator and asking first: the error and notice banners, and the
// confirmation dialog every action opens (with the action's own input fields).

import { ApiError } from "./api.js";
import { $, el } from "./dom.js";
import { app } from "./session.js";

// -- banners -----------------------------------------------------------------

export function showError(message) {
  $("error-text").textContent = message;
  $("error-banner").hidden = false;
}

export function clearError() {
  $("error-text").textContent = "";
  $("error-banner").hidden = true;
}

export function showNotice(message) {
  $("notice-text").textContent = message;
  $("notice-banner").hidden = false;
  window.clearTimeout(app.noticeTimer);
  app.noticeTimer = window.setTimeout(() => {
    $("notice-banner").hidden = true;
  }, 6000);
}

export function reportError(prefix, err) {
  if (err && err.name === "AbortError") return;
  if (err instanceof ApiError && err.status === 401) return;
  const status = err instanceof ApiError && err.status ? ` (${err.status})` : "";
  showError(`${prefix}${status}: ${err && err.message ? err.message : err}`);
}

// -- confirmation dialog -----------------------------------------------------

// Resolves to {reason, values} when confirmed, null when cancelled. `inputs` are
// the action's own fields ({name, label, kind: "text"|"select"|"textarea",
// options, required, placeholder}); `values` holds what was typed, by name.
export function confirmAction({ title, message, askReason, inputs }) {
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
