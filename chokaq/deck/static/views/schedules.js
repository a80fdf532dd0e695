// Schedules: recurring jobs declared in code, with pause / resume and "run now" for operators.

import { api, errorLines } from "../api.js";
import { $, button, h, replaceKeepingFocus, table, td } from "../dom.js";
import { flash, viewError } from "../feedback.js";
import { fmtTime } from "../format.js";
import { may, role, state } from "../state.js";

export async function loadSchedules() {
  let data;
  try {
    data = await api("GET", "/api/schedules");
  } catch (exc) { return viewError("schedules", exc); }
  if (state.view !== "schedules") return undefined;
  const box = $('[data-testid="schedules-table"]');
  const sig = JSON.stringify([data.items, role()]);
  if (sig === state.schedulesSig && box.querySelector("table")) return undefined;
  state.schedulesSig = sig;
  const canPause = may("POST /api/schedules/{name}/pause");
  const canRun = may("POST /api/schedules/{name}/run");
  const rows = data.items.map((s) => {
    const msg = h("div", { class: "row-msg", role: "status", testid: "schedule-msg" });
    const stateText = s.is_orphaned ? "Orphaned" : s.is_paused ? "Paused" : "Active";
    const badge = s.is_orphaned || s.is_paused ? "badge-warn" : "badge-ok";
    const lastJob = s.last_job_id
      ? h("span", {}, h("span", { class: "mono" }, s.last_job_id), " ",
        h("span", { class: `badge status-${s.last_job_outcome}`, testid: "schedule-outcome" }, s.last_job_outcome))
      : "–";
    const actions = [];
    if (canPause && !s.is_orphaned) {
      actions.push(button(s.is_paused ? "Resume" : "Pause",
        () => act(s.name, s.is_paused ? "resume" : "pause", msg),
        { kind: s.is_paused ? "btn-primary btn-sm" : "btn-sm", mutating: true, testid: "schedule-toggle",
          fkey: `s-toggle-${s.name}` }));
    }
    if (canRun) {
      actions.push(button("Run now", () => act(s.name, "run", msg),
        { kind: "btn-sm", mutating: true, testid: "schedule-run", fkey: `s-run-${s.name}` }));
    }
    return h("tr", { dataset: { schedule: s.name }, testid: "schedule-row" },
      td(s.name, "mono"),
      td(h("span", {}, h("span", { testid: "schedule-words" }, s.cron_in_words), h("br"),
        h("span", { class: "mono small muted" }, s.cron))),
      td(s.time_zone),
      td(fmtTime(s.next_due_utc)),
      td(fmtTime(s.last_fired_utc)),
      td(lastJob),
      td(h("span", { class: `badge ${badge}`, testid: "schedule-state" }, stateText)),
      h("td", {}, actions.length ? actions : null, msg));
  });
  replaceKeepingFocus(box,
    table(["Schedule", "When", "Time zone", "Next run", "Last run", "Last job", "State", ""], rows,
      { empty: "No schedules: declare them in code (app.schedule or @app.job(schedule=...)).", caption: "Schedules" }));
  return undefined;
}

async function act(name, action, msgEl) {
  try {
    const out = await api("POST", `/api/schedules/${encodeURIComponent(name)}/${action}`);
    flash(action === "run" ? `Schedule ${name}: job ${out.job_id} enqueued.` : `Schedule ${name} ${action}d.`);
    state.schedulesSig = "";
    await loadSchedules();
  } catch (exc) {
    msgEl.textContent = errorLines(exc).join("; ");
    msgEl.className = "row-msg error";
  }
}
