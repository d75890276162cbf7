// The node page's actions: a button for each provision verb the server's state table
// allows in the node's state, the day-2 actions (servicing, a firmware update, virtual
// media) and maintenance, each confirmed in the dialog before its request is sent.

import { api, listedVerbs, verbsAllowedIn } from "./api.js";
import { actionButton, el } from "./dom.js";

// What the buttons of the provision verbs say, keyed by the state table's canonical verb
// (states.json's `verbs`; its `verb_aliases` give the newer spellings), in the order
// they show. The verbs themselves come from the server: a verb it lists that is not
// here still gets a button, named after it (after these), and a verb it does not list
// is never offered.
const VERB_BUTTONS = new Map([
  ["manage", { label: "Manage", hint: "take the node under operator control" }],
  ["provide", { label: "Provide", hint: "clean the node and make it available" }],
  ["inspect", { label: "Inspect", hint: "collect the hardware inventory" }],
  ["active", { label: "Deploy", hint: "deploy the node's instance" }],
  ["rebuild", { label: "Rebuild", hint: "deploy the instance again" }],
  ["deleted", { label: "Undeploy", hint: "tear the deployment down and clean", danger: true }],
  ["adopt", { label: "Adopt", hint: "take over a running workload" }],
  ["unhold", { label: "Unhold", hint: "let a held flow continue" }],
  ["unrescue", { label: "Unrescue", hint: "return from rescue to the instance" }],
  ["abort", { label: "Abort", hint: "stop the running flow", danger: true }],
]);

// Verbs that are not a plain button: `service` (and `clean`, for a firmware update) ask
// for their steps in the dialog (dayTwoActions); `clean` with arbitrary steps and
// `rescue`, which needs a password, are left to the CLI.
const NOT_PLAIN = new Set(["clean", "rescue", "service"]);

// A verb the page has no words for: "some_verb" -> "Some verb".
function genericButton(verb) {
  const words = verb.replace(/_/g, " ");
  return { label: words.charAt(0).toUpperCase() + words.slice(1), hint: null };
}

// The plain provision buttons for the verbs allowed now: the known ones in the page's
// order, then any other the server lists, in its order.
function provisionActions(allowed) {
  const verbs = [
    ...[...VERB_BUTTONS.keys()].filter((verb) => allowed.has(verb)),
    ...listedVerbs().filter((verb) => allowed.has(verb) && !VERB_BUTTONS.has(verb)),
  ];
  return verbs
    .filter((verb) => !NOT_PLAIN.has(verb))
    .map((verb) => ({ verb, ...(VERB_BUTTONS.get(verb) || genericButton(verb)) }));
}

export function nodeActions(node, run) {
  const allowed = verbsAllowedIn(node.provision_state);
  const buttons = [];
  for (const action of provisionActions(allowed)) {
    buttons.push(
      actionButton(
        {
          id: `action-${action.verb}`,
          label: action.label,
          danger: Boolean(action.danger),
          confirm: (name) => ({
            title: `${action.label} ${name}?`,
            message:
              `Request "${action.verb}" for node ${name}, now ${node.provision_state}` +
              (action.hint ? `: ${action.hint}.` : "."),
          }),
          request: (target) =>
            api(`/v1/nodes/${encodeURIComponent(target.uuid)}/states/provision`, {
              method: "PUT",
              json: { target: action.verb },
            }),
        },
        run,
      ),
    );
  }
  for (const action of dayTwoActions(node, allowed)) buttons.push(actionButton(action, run));
  if (node.maintenance) {
    buttons.push(
      actionButton(
        {
          id: "action-maintenance-off",
          label: "Maintenance off",
          confirm: (name) => ({
            title: `End maintenance of ${name}?`,
            message: `The conductor will manage node ${name} again.`,
          }),
          request: (target) =>
            api(`/v1/nodes/${encodeURIComponent(target.uuid)}/maintenance`, {
              method: "DELETE",
            }),
        },
        run,
      ),
    );
  } else {
    buttons.push(
      actionButton(
        {
          id: "action-maintenance-on",
          label: "Maintenance on",
          confirm: (name) => ({
            title: `Put ${name} in maintenance?`,
            message: `The conductor stops acting on node ${name} until maintenance ends.`,
            askReason: true,
          }),
          request: (target, answer) =>
            api(`/v1/nodes/${encodeURIComponent(target.uuid)}/maintenance`, {
              method: "PUT",
              json: answer.reason ? { reason: answer.reason } : {},
            }),
        },
        run,
      ),
    );
  }
  if (!buttons.length) {
    buttons.push(el("span", { className: "muted", textContent: "No action in this state." }));
  }
  return buttons;
}

// Day-2 work on a node: servicing, a firmware update and virtual media. Each asks in
// the dialog for what its request needs; the API judges it (a refusal is shown).
function dayTwoActions(node, allowed) {
  const actions = [];
  const provisionPath = (target) =>
    `/v1/nodes/${encodeURIComponent(target.uuid)}/states/provision`;
  const vmediaPath = (target) => `/v1/nodes/${encodeURIComponent(target.uuid)}/vmedia`;
  if (allowed.has("service")) {
    actions.push({
      id: "action-service",
      label: "Service",
      confirm: (name) => ({
        title: `Service ${name}?`,
        message:
          `Run steps on node ${name} while it stays deployed, then return it to active: ` +
          "a runbook's steps, or steps given as a JSON list.",
        inputs: [
          { name: "runbook", label: "Runbook (name or UUID)", kind: "text" },
          {
            name: "steps",
            label: "or service steps (JSON)",
            kind: "textarea",
            placeholder: '[{"interface": "bios", "step": "apply_configuration", "args": {}}]',
          },
        ],
      }),
      request: (target, answer) =>
        api(provisionPath(target), { method: "PUT", json: serviceBody(answer.values) }),
    });
  }
  // A firmware update is a step: of servicing on a deployed node, of cleaning otherwise.
  const flow = allowed.has("service") ? "service" : allowed.has("clean") ? "clean" : null;
  if (flow && node.firmware_interface && node.firmware_interface !== "no-firmware") {
    actions.push({
      id: "action-firmware-update",
      label: "Update firmware",
      confirm: (name) => ({
        title: `Update the firmware of ${name}?`,
        message:
          `The BMC of node ${name} flashes the image at the URL (http or https) ` +
          `during ${flow === "service" ? "servicing" : "manual cleaning"}.`,
        inputs: [
          {
            name: "component",
            label: "Component",
            kind: "select",
            options: [
              ["bios", "BIOS"],
              ["bmc", "BMC"],
            ],
          },
          {
            name: "url",
            label: "Image URL",
            kind: "text",
            required: true,
            placeholder: "https://firmware.example.com/bios-2.1.bin",
          },
        ],
      }),
      request: (target, answer) => {
        const { component, url } = answer.values;
        const step = {
          interface: "firmware",
          step: "update",
          args: { settings: [{ component, url }] },
        };
        return api(provisionPath(target), {
          method: "PUT",
          json: { target: flow, [`${flow}_steps`]: [step] },
        });
      },
    });
  }
  actions.push(
    {
      id: "action-vmedia-attach",
      label: "Attach media",
      confirm: (name) => ({
        title: `Attach virtual media to ${name}?`,
        message: `The BMC of node ${name} inserts the image at the URL in a virtual drive.`,
        inputs: [
          {
            name: "device_type",
            label: "Drive",
            kind: "select",
            options: [
              ["cdrom", "CD-ROM"],
              ["disk", "Disk"],
              ["floppy", "Floppy"],
            ],
          },
          {
            name: "image_url",
            label: "Image URL",
            kind: "text",
            required: true,
            placeholder: "https://images.example.com/rescue.iso",
          },
        ],
      }),
      request: (target, answer) =>
        api(vmediaPath(target), { method: "POST", json: answer.values }),
      // Queued for the node's conductor (204 once queued): done once a drive holds it.
      settled: (media) => Array.isArray(media) && media.some((d) => d.inserted),
    },
    {
      id: "action-vmedia-detach",
      label: "Detach media",
      confirm: (name) => ({
        title: `Detach the virtual media of ${name}?`,
        message: `The BMC of node ${name} ejects every image its virtual drives hold.`,
      }),
      request: (target) => api(vmediaPath(target), { method: "DELETE" }),
      settled: (media) => Array.isArray(media) && !media.some((d) => d.inserted),
    },
  );
  return actions;
}

// The body of a service request from the dialog: a runbook or a JSON list of steps.
function serviceBody({ runbook, steps }) {
  if (runbook && steps) throw new Error("give a runbook or steps, not both");
  if (runbook) return { target: "service", runbook };
  if (!steps) throw new Error("give a runbook or the steps to run");
  let parsed;
  try {
    parsed = JSON.parse(steps);
  } catch (err) {
    throw new Error(`the steps are not JSON: ${err.message}`);
  }
  if (!Array.isArray(parsed)) throw new Error("the steps must be a JSON list");
  return { target: "service", service_steps: parsed };
}
