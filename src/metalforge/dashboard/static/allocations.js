// The allocations view (#/allocations): every allocation, read when the view opens
// and again on Refresh.

import { listAll } from "./api.js";
import { el, formatTime, nodeLink, simpleTable, stateBadge, text } from "./dom.js";
import { reportError } from "./notices.js";
import { app, current } from "./session.js";

export function renderAllocations(view, token) {
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
