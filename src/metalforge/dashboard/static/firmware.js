// The firmware view (#/firmware): every firmware baseline with its drift report, the
// covered nodes whose components are older than the baseline's, differ or are unknown.

import { api, listAll } from "./api.js";
import { el, nodeLink, simpleTable, stateBadge, text } from "./dom.js";
import { reportError } from "./notices.js";
import { app, current } from "./session.js";

export function renderFirmware(view, token) {
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
