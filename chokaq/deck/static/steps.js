// The step journal in the inspector (docs/steps.md): each step done (when, which attempt, its
// result), started and never confirmed, or failed; and the resurrect choice for a job that has one:
// resume after the finished steps (the default) or from scratch, and, with a payload edit, whether
// to keep the steps. Text goes in as text nodes: a hostile result stays inert.

import { h, table, td } from "./dom.js";
import { fmtTime, num } from "./format.js";

const STATES = {
  done: ["done", "badge-ok"],
  started: ["started, never confirmed: outcome unknown", "badge-warn"],
  failed: ["failed (it runs again)", "badge-err"],
};

function resultText(result) {
  if (result === null || result === undefined) return "–";
  const text = JSON.stringify(result);
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}

export function stepsSection(job) {
  const steps = job.steps || [];
  if (!steps.length) return null;
  const rows = steps.map((s) => {
    const [label, cls] = STATES[s.state] || [s.state, ""];
    return h("tr", { testid: "insp-step", dataset: { state: s.state } },
      td(s.name, "mono"),
      td(h("span", { class: `badge ${cls}` }, label)),
      td(num(s.attempt), "num"),
      td(s.worker, "mono small"),
      td(s.started_utc ? fmtTime(s.started_utc) : "–", "nowrap"),
      td(s.done_utc ? fmtTime(s.done_utc) : "–", "nowrap"),
      td(resultText(s.result), "mono small"));
  });
  const unknown = steps.filter((s) => s.state === "started").length;
  return h("section", { class: "insp-sec", testid: "insp-steps" },
    h("h3", {}, "Steps"),
    unknown ? h("p", { class: "form-error small", testid: "insp-steps-unknown" },
      `${unknown} step(s) started and never confirmed: on resume the handler is told their outcome is unknown.`) : null,
    h("p", { class: "muted small" }, "Steps not listed were not reached."),
    h("div", { class: "table-wrap" }, table(["Step", "State", "Attempt", "Worker", "Started", "Done", "Result"], rows,
      { testid: "insp-step-table" })));
}

// Resolves null when dismissed, else { steps, keep_steps } for the resurrect body.
export function chooseSteps(job, payloadEdited) {
  return new Promise((resolve) => {
    const done = job.steps.filter((s) => s.state === "done").length;
    const radio = (value, label, checked) => h("div", { class: "check-row" },
      h("input", { type: "radio", name: "steps-choice", id: `steps-${value}`, value, checked,
        dataset: { testid: `steps-${value}` } }),
      h("label", { for: `steps-${value}` }, label));
    const keep = payloadEdited ? h("input", { type: "checkbox", id: "steps-keep", dataset: { testid: "steps-keep" } }) : null;
    const ok = h("button", { type: "submit", class: "btn btn-primary", dataset: { testid: "steps-ok", mutating: "1" } },
      "Resurrect");
    const dlg = h("dialog", { class: "dialog", testid: "steps-dialog", "aria-labelledby": "steps-title" },
      h("form", { method: "dialog", onsubmit: (ev) => { ev.preventDefault(); close(true); } },
        h("h2", { id: "steps-title" }, "Resurrect: what about its steps?"),
        h("p", {}, `This job has a step journal: ${done} of ${job.steps.length} step(s) finished.`),
        radio("resume", "Resume after the finished steps (they return their recorded results)", true),
        radio("scratch", "From scratch: clear the journal, every step runs again", false),
        keep ? h("div", { class: "check-row" }, keep, h("label", { for: "steps-keep" },
          "Keep the steps although the payload was edited (an edit clears them otherwise)")) : null,
        h("p", { class: "muted small" }, "The choice is recorded in the audit log."),
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn btn-ghost", dataset: { testid: "steps-cancel" },
            onclick: () => close(false) }, "Cancel"), ok)));
    dlg.addEventListener("cancel", (ev) => { ev.preventDefault(); close(false); });
    const opener = document.activeElement;
    function close(confirmed) {
      const choice = dlg.querySelector('input[name="steps-choice"]:checked');
      const steps = choice ? choice.value : "resume";
      dlg.close();
      dlg.remove();
      if (opener && document.contains(opener)) opener.focus();
      resolve(confirmed ? { steps, keep_steps: Boolean(keep && keep.checked && steps === "resume") } : null);
    }
    document.body.append(dlg);
    dlg.showModal();
    ok.focus();
  });
}
