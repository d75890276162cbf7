// The deploy templates view (#/templates): every template with its steps, read when
// the view opens and again on Refresh.

import { listAll } from "./api.js";
import { el, formatTime, simpleTable, text } from "./dom.js";
import { reportError } from "./notices.js";
import { app, current } from "./session.js";

export function renderTemplates(view, token) {
  const holder = el("div", { id: "templates" }, el("p", { className: "muted", textContent: "Loading…" }));
  view.append(
    el("div", { className: "view-head" }, el("h1", { textContent: "Deploy templates" })),
    holder,
  );
  const reload = async () => {
    try {
      const items = await listAll("/v1/deploy_templates?detail=true", "deploy_templates");
      if (!current(token)) return;
      holder.replaceChildren(
        items.length
          ? simpleTable(
              "templates-table",
              ["Name", "UUID", "Steps", "Updated"],
              items.map((t) => [
                el("span", { className: "mono", textContent: text(t.name) }),
                el("span", { className: "mono", textContent: text(t.uuid) }),
                el(
                  "ol",
                  { className: "plain" },
                  (Array.isArray(t.steps) ? t.steps : []).map((s) =>
                    el("li", {
                      className: "mono",
                      textContent: `${s.interface}.${s.step} (priority ${text(s.priority)})`,
                    }),
                  ),
                ),
                formatTime(t.updated_at || t.created_at),
              ]),
            )
          : el("p", { className: "muted", textContent: "No deploy templates." }),
      );
      holder.dataset.loaded = "true";
    } catch (err) {
      if (current(token)) reportError("Could not list the deploy templates", err);
    }
  };
  app.refresh = reload;
  reload();
}
