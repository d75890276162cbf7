// The fleet view (#/): counts by state, a filterable table of every node, and the
// live stream applied to it row by row (a node that moves changes its row in place).

import { api, listAll, loadStates, stepFields } from "./api.js";
import { el, stateBadge, stateKind, text } from "./dom.js";
import { currentStep } from "./flow.js";
import { reportError } from "./notices.js";
import { app, current } from "./session.js";
import { openStream } from "./stream.js";

// The fleet view reads the progress of at most this many busy nodes when it loads.
const PROGRESS_READS = 50;

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

export function renderFleet(view, token) {
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
      for (const key of stepFields()) delete merged[key];
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
      // The state table names the running-step fields the rows show (read once; without
      // it a row shows the step a flow is at only from its progress).
      await loadStates().catch(() => null);
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
