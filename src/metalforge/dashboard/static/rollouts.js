// The rollouts view (#/rollouts): each rollout, the newest first, with its nodes' waves
// and outcomes, and Pause, Resume and Abort in the states that take them. A rollout
// moves on its conductor's rounds, which send no event: the view re-reads it.

import { api, listAll } from "./api.js";
import { actionButton, el, nodeLink, simpleTable, stateBadge, text } from "./dom.js";
import { confirmAction, reportError, showNotice } from "./notices.js";
import { app, current } from "./session.js";

const ROLLOUT_ACTIONS = [
  { id: "pause", label: "Pause", when: ["pending", "running"] },
  { id: "resume", label: "Resume", when: ["paused"] },
  { id: "abort", label: "Abort", when: ["pending", "running", "paused"], danger: true },
];

function rolloutCard(rollout, reload) {
  const counts = rollout.node_counts || {};
  const summary = Object.keys(counts)
    .filter((state) => counts[state])
    .map((state) => `${counts[state]} ${state}`)
    .join(", ");
  const run = async (action) => {
    const answer = await confirmAction({
      title: `${action.label} rollout ${rollout.name || rollout.uuid}`,
      message:
        action.id === "abort"
          ? "No node will start any more; the nodes under way finish their flow."
          : action.id === "pause"
            ? "No node will start until it is resumed; the nodes under way finish."
            : "The rollout carries on with its next wave.",
    });
    if (!answer) return;
    try {
      await api(`/v1/rollouts/${encodeURIComponent(rollout.uuid)}/${action.id}`, {
        method: "POST",
      });
      showNotice(`Rollout ${rollout.name || rollout.uuid}: ${action.label.toLowerCase()} done.`);
    } catch (err) {
      reportError(`Could not ${action.id} the rollout`, err);
    }
    reload();
  };
  const buttons = ROLLOUT_ACTIONS.filter((a) => a.when.includes(rollout.state)).map((a) =>
    actionButton({ id: `rollout-${a.id}-${rollout.uuid}`, label: a.label, danger: a.danger }, () =>
      run(a),
    ),
  );
  return el(
    "section",
    { className: "card rollout", dataset: { rolloutUuid: rollout.uuid, rolloutState: rollout.state } },
    el(
      "div",
      { className: "view-head" },
      el("h2", { textContent: rollout.name || rollout.uuid }),
      stateBadge(rollout.state),
      el("div", { className: "actions" }, buttons),
    ),
    el("p", {
      className: "muted",
      textContent: [
        JSON.stringify(rollout.action),
        `canary ${rollout.canary}, batch ${rollout.batch}, max failures ${rollout.max_failures}`,
        summary,
      ].join(" · "),
    }),
    rollout.paused_reason ? el("p", { className: "notice", textContent: rollout.paused_reason }) : null,
    rollout.last_error ? el("p", { className: "error-text", textContent: rollout.last_error }) : null,
    simpleTable(
      `rollout-nodes-${rollout.uuid}`,
      ["Node", "Name", "Wave", "State", "Outcome", "Error"],
      (rollout.nodes || []).map((n) => [
        nodeLink(n.node_uuid),
        text(n.node_name),
        n.wave < 0 ? "—" : n.wave === 0 ? "canary" : String(n.wave),
        stateBadge(n.state),
        text(n.outcome),
        text(n.error),
      ]),
    ),
  );
}

export function renderRollouts(view, token) {
  const holder = el("div", { id: "rollouts" }, el("p", { className: "muted", textContent: "Loading…" }));
  view.append(el("div", { className: "view-head" }, el("h1", { textContent: "Rollouts" })), holder);
  const reload = async () => {
    try {
      const items = await listAll("/v1/rollouts?detail=true", "rollouts");
      if (!current(token)) return;
      items.reverse(); // the newest first
      holder.replaceChildren(
        ...(items.length
          ? items.map((r) => rolloutCard(r, reload))
          : [el("p", { className: "muted", textContent: "No rollouts." })]),
      );
      holder.dataset.loaded = "true";
    } catch (err) {
      if (current(token)) reportError("Could not list the rollouts", err);
    }
  };
  app.refresh = reload;
  reload();
  // A rollout moves on its conductor's rounds, which send no event of their own: read
  // it again every few seconds while it is shown.
  const timer = setInterval(() => {
    if (current(token)) reload();
  }, 3000);
  app.cleanup = () => clearInterval(timer);
}
