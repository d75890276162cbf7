// DOM helpers: how every view builds its elements, and the small formatters they share.
//
// Every string the API returns is treated as hostile: elements are made with
// createElement and filled with textContent (or text nodes), never from markup.

export const $ = (id) => document.getElementById(id);

// el("td", {className: "x", dataset: {a: "b"}}, "text", child) -> element.
export function el(tag, props, ...children) {
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

export function text(value) {
  if (value === undefined || value === null || value === "") return "—";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function slug(value) {
  return String(value || "none").toLowerCase().replace(/[^a-z0-9]+/g, "-");
}

export function stateKind(state) {
  const s = String(state || "");
  if (s === "error" || s.endsWith("failed") || s === "older" || s === "differs") return "fail";
  if (s === "available" || s === "active" || s === "succeeded" || s === "done") return "ok";
  const idle = ["enroll", "manageable", "rescue", "", "pending", "paused", "skipped", "stopped", "unknown"];
  if (idle.includes(s)) return "idle";
  return "busy";
}

export function stateBadge(state, extra) {
  return el("span", {
    className: `state state-${stateKind(state)}`,
    dataset: { state: state || "" },
    textContent: state || "none",
    ...(extra || {}),
  });
}

export function formatTime(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`
  );
}

export function timeLeft(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) {
    return "no estimate yet";
  }
  if (seconds < 60) return "less than a minute left";
  return `about ${Math.round(seconds / 60)} min left`;
}

export function simpleTable(id, headers, rows) {
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

export function nodeLink(uuid) {
  if (!uuid) return "—";
  return el("a", {
    href: `#/nodes/${encodeURIComponent(uuid)}`,
    className: "mono",
    textContent: uuid,
  });
}

// A button for an action ({id: "action-...", label, danger}) that calls run(action).
export function actionButton(action, run) {
  return el("button", {
    type: "button",
    id: action.id,
    className: action.danger ? "danger" : "",
    textContent: action.label,
    dataset: { action: action.id.replace(/^action-/, "") },
    on: { click: () => run(action) },
  });
}
