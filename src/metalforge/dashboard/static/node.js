// The node page (#/nodes/<uuid>): the node's fields, its tables, its running flow and
// history, kept current by the node's own event stream (or by re-reading it while a
// flow runs when there is no stream), and the actions offered in its state.

import { ApiError, api, listAll, loadStates } from "./api.js";
import { $, el, formatTime, stateBadge, text } from "./dom.js";
import { progressView } from "./flow.js";
import { nodeActions } from "./node-actions.js";
import {
  biosTable,
  firmwareTable,
  mediaTable,
  portsTable,
  timeline,
  traitsList,
  unreadable,
} from "./node-tables.js";
import { clearError, confirmAction, reportError, showError, showNotice } from "./notices.js";
import { app, current } from "./session.js";
import { openStream } from "./stream.js";

// Without the live stream an open node page re-reads a node that is in a flow.
const FALLBACK_POLL_MS = 3000;
// After an action queued for the conductor (virtual media), how often and how many
// times the page reads the node's tables again until they show it.
const SETTLE_MS = 1000;
const SETTLE_READS = 30;

const pause = (ms) => new Promise((resolve) => window.setTimeout(resolve, ms));

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

export function renderNode(view, token, ident) {
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
    return mediaList;
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
    let accepted = false;
    try {
      await action.request(node, answer);
      if (!current(token)) return;
      accepted = true;
      showNotice(`Requested: ${action.label.toLowerCase()} ${label}`);
    } catch (err) {
      if (current(token)) reportError(`${action.label} was refused`, err);
    }
    if (!current(token)) return;
    try {
      await reloadNode();
      const [media] = await Promise.all([reloadTables(), reloadDetails()]);
      // Work queued for the node's conductor (virtual media) changes no provision state,
      // so no event says when it is done: read the tables again until it shows, a while.
      let shown = media;
      for (let read = 0; accepted && action.settled && read < SETTLE_READS; read += 1) {
        if (action.settled(shown) || !current(token)) break;
        await pause(SETTLE_MS);
        if (!current(token)) break;
        shown = await reloadTables();
      }
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
