// Crash incidents (docs/steps.md): the DLQ's zombies grouped by the worker that held them, with how
// many stopped inside a step, between steps or without steps, and one decision for each incident
// (resume all, purge all): a bulk action filtered by that worker, previewed and bound to the preview.

import { api } from "../api.js";
import { $, button, h, replaceKeepingFocus, table, td, tdn } from "../dom.js";
import { viewError } from "../feedback.js";
import { fmtTime, num } from "../format.js";
import { openInspector } from "../inspector.js";
import { may } from "../state.js";
import { bulkConfirm } from "./bulk.js";

export async function loadIncidents() {
  let data;
  try {
    data = await api("GET", "/api/dlq/incidents");
  } catch (exc) { return viewError("incidents", exc); }
  const rows = data.items.map((i) => {
    const filter = { worker: i.worker_id, failure_reason: "Zombie" };
    const key = i.worker_id || "none";
    return h("tr", { testid: "incident-row", dataset: { worker: key } },
      td(i.worker_id || "(no worker)", "mono small"),
      tdn(num(i.jobs)),
      td(i.last_seen_utc ? fmtTime(i.last_seen_utc) : "–", "nowrap"),
      td(i.last_failed_utc ? fmtTime(i.last_failed_utc) : "–", "nowrap"),
      td(`${num(i.inside_step)} inside a step · ${num(i.between_steps)} between steps · ${num(i.without_steps)} without steps`,
        "small"),
      td(h("span", { class: "id-list" }, i.sample_ids.slice(0, 3).map((id) => button(id, () => openInspector(id, "dlq"),
        { kind: "link mono", fkey: `inc-${key}-${id}` })), i.jobs > 3 ? ` +${num(i.jobs - 3)}` : "")),
      td(h("span", {},
        may("POST /api/dlq/resurrect") ? button("Resume all", () => bulkConfirm("resurrect", { filter }),
          { kind: "btn-sm", mutating: true, testid: "incident-resume", fkey: `inc-res-${key}` }) : null,
        may("POST /api/dlq/purge") ? button("Purge all", () => bulkConfirm("purge", { filter }),
          { kind: "btn-sm btn-danger", mutating: true, testid: "incident-purge", fkey: `inc-purge-${key}` }) : null)));
  });
  replaceKeepingFocus($('[data-testid="incidents-table"]'),
    table(["Worker", "Jobs", "Last seen", "Buried", "Where they stopped", "Jobs (sample)", "Decide"], rows,
      { empty: "No zombies in the DLQ.", caption: "Crash incidents" }),
    data.capped ? h("p", { class: "muted small" }, "Only the newest zombies were read: the DLQ is very large.") : null);
  return undefined;
}
