// A running flow as the page shows it: the step a node is at (from its progress, or
// from the node's running-step fields the state table names), the node page's
// "Current flow" card with its steps, and the timeline of the states it went through.

import { stepFields } from "./api.js";
import { el, formatTime, slug, timeLeft } from "./dom.js";

// The step a node's flow is at: from its progress when an event brought it, else from
// the node's running-step fields (clean_step, deploy_step...: states.json's step_fields).
export function currentStep(node) {
  const progress = node.progress;
  if (progress && progress.flow && progress.step_count) {
    const step = progress.current_step;
    const label = step ? `${step.interface}.${step.step}` : progress.flow;
    return { label, done: doneSteps(progress), count: progress.step_count, progress };
  }
  for (const key of stepFields()) {
    const step = node[key];
    if (step && typeof step === "object" && step.step) {
      return { label: `${step.interface || "?"}.${step.step}`, done: null, count: null };
    }
  }
  return null;
}

export function doneSteps(progress) {
  const steps = Array.isArray(progress.steps) ? progress.steps : [];
  return steps.filter((s) => s.status === "done").length;
}

export function progressView(progress) {
  const flow = (progress && progress.flow) || "";
  const box = el("div", { className: "progress", dataset: { flow } });
  if (!flow) {
    box.append(el("p", { className: "muted", textContent: "No flow is running." }));
    const phases = phasesView(progress);
    if (phases) box.append(el("p", { className: "muted", textContent: "The last flow:" }), phases);
    return box;
  }
  const steps = Array.isArray(progress.steps) ? progress.steps : [];
  const done = doneSteps(progress);
  const count = progress.step_count || steps.length;
  box.append(
    el(
      "p",
      { className: "flow-line" },
      el("strong", { textContent: progress.flow }),
      ` — step ${Math.min(done + 1, count || 1)} of ${count || 0}`,
      " · ",
      el("span", { id: "progress-left", textContent: timeLeft(progress.estimated_seconds_left) }),
      progress.estimated_finish_at ? ` (by ${formatTime(progress.estimated_finish_at)})` : "",
    ),
    el("progress", {
      id: "progress-bar",
      value: done,
      max: Math.max(count, 1),
      attrs: { "aria-label": `${done} of ${count} steps done` },
    }),
    el(
      "ol",
      { className: "steps" },
      steps.map((step) => {
        const current = progress.current_step;
        const running =
          step.status === "running" &&
          current &&
          current.step === step.step &&
          current.interface === step.interface;
        const detail = [];
        if (running && Number.isFinite(current.elapsed_seconds)) {
          detail.push(`${Math.round(current.elapsed_seconds)} s elapsed`);
        }
        if (Number.isFinite(step.estimated_seconds)) {
          detail.push(`usually ${Math.round(step.estimated_seconds)} s`);
        }
        return el(
          "li",
          { className: `step-${slug(step.status)}`, dataset: { status: step.status || "" } },
          el("span", { className: "step-status", textContent: step.status || "?" }),
          el("span", { className: "mono", textContent: `${step.interface}.${step.step}` }),
          el("span", { className: "muted", textContent: detail.length ? ` ${detail.join(", ")}` : "" }),
        );
      }),
    ),
  );
  const phases = phasesView(progress);
  if (phases) box.append(phases);
  return box;
}

// The flow's timeline: one bar per state it went through, as wide as the time the
// node stayed there, so the phase that dominates shows at a glance.
function phasesView(progress) {
  const phases = (progress && Array.isArray(progress.phases) && progress.phases) || [];
  if (!phases.length) return null;
  const total = phases.reduce((sum, p) => sum + (Number(p.seconds) || 0), 0);
  const seconds = (value) => (value < 10 ? value.toFixed(1) : Math.round(value).toString());
  return el(
    "div",
    { className: "phases" },
    el("p", { className: "muted", id: "flow-duration", textContent: `${seconds(total)} s in all` }),
    el(
      "ol",
      { id: "flow-phases", className: "phase-bars" },
      phases.map((phase) => {
        const share = total > 0 ? (Number(phase.seconds) || 0) / total : 0;
        const label = `${phase.state}: ${seconds(Number(phase.seconds) || 0)} s`;
        const bar = el(
          "li",
          {
            dataset: { state: phase.state || "", seconds: String(phase.seconds) },
            title: `${label} (from ${formatTime(phase.entered_at)})`,
          },
          el("span", { textContent: label }),
        );
        // Through the CSSOM: the page's policy allows no inline style attributes.
        bar.style.flexGrow = String(Math.max(share, 0.02));
        return bar;
      }),
    ),
  );
}
