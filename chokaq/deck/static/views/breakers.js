// Circuit breakers per job type: open ones first, with "Close now" for operators (audited).

import { api, errorLines } from "../api.js";
import { $, button, h, replaceKeepingFocus, table, td } from "../dom.js";
import { flash, viewError } from "../feedback.js";
import { fmtTime } from "../format.js";
import { may, role, state } from "../state.js";

const LABEL = { open: "Open", half_open: "Half-open", closed: "Closed" };

export async function loadBreakers() {
  let data;
  try {
    data = await api("GET", "/api/breakers");
  } catch (exc) { return viewError("breakers", exc); }
  if (state.view !== "breakers") return undefined;
  const box = $('[data-testid="breakers-table"]');
  const sig = JSON.stringify([data.items, role()]);
  if (sig === state.breakersSig && box.querySelector("table")) return undefined;
  state.breakersSig = sig;
  const canClose = may("POST /api/breakers/{job_type}/close");
  const rows = data.items.map((b) => {
    const msg = h("div", { class: "row-msg", role: "status", testid: "breaker-msg" });
    const badge = b.state === "closed" ? "badge-ok" : "badge-warn";
    const actions = [];
    if (canClose && b.state !== "closed") {
      actions.push(button("Close now", () => closeNow(b.job_type, msg),
        { kind: "btn-primary btn-sm", mutating: true, testid: "breaker-close", fkey: `b-close-${b.job_type}` }));
    }
    return h("tr", { dataset: { breaker: b.job_type }, testid: "breaker-row" },
      td(b.job_type, "mono"),
      td(h("span", { class: `badge ${badge}`, testid: "breaker-state" }, LABEL[b.state] || b.state)),
      td(String(b.failure_count)),
      td(fmtTime(b.opened_at_utc)),
      td(b.state === "open" ? fmtTime(b.open_until_utc) : "–"),
      td(b.updated_by || "–", "mono small"),
      h("td", {}, actions.length ? actions : null, msg));
  });
  replaceKeepingFocus(box,
    table(["Job type", "State", "Failures", "Opened", "Probes from", "Last changed by", ""], rows,
      { empty: "No circuit breakers have counted a failure (Execution.CircuitBreaker).", caption: "Circuit breakers" }));
  return undefined;
}

async function closeNow(jobType, msgEl) {
  try {
    await api("POST", `/api/breakers/${encodeURIComponent(jobType)}/close`);
    flash(`Breaker of ${jobType} closed: its jobs are claimed again.`);
    state.breakersSig = "";
    await loadBreakers();
  } catch (exc) {
    msgEl.textContent = errorLines(exc).join("; ");
    msgEl.className = "row-msg error";
  }
}
