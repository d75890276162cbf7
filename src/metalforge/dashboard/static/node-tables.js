// The node page's tables: its history as a timeline, its ports and traits, and what
// its BMC holds (firmware versions, BIOS settings, virtual media). A table the caller
// may not read says so instead of failing the page.

import { ApiError } from "./api.js";
import { el, formatTime, simpleTable, slug, text } from "./dom.js";

export function timeline(answer) {
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

export function portsTable(ports) {
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
export function unreadable(err) {
  if (err instanceof ApiError && err.status !== 0 && err.status !== 401) {
    return { unreadable: err.message };
  }
  throw err;
}

export function firmwareTable(answer) {
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

export function mediaTable(answer) {
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

export function biosTable(answer) {
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

export function traitsList(traits) {
  if (!traits.length) return el("p", { className: "muted", textContent: "No traits." });
  return el(
    "ul",
    { className: "chips" },
    traits.map((trait) => el("li", { className: "chip", textContent: String(trait) })),
  );
}
