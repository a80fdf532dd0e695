// Crash incidents (docs/steps.md): the zombies each worker left, with how many of those still in the
// DLQ stopped inside a step, between steps or without steps, how many the sweep retried
// (retry_zombies) or left the DLQ since and by what,
// and one decision for the undecided ones (resume all, purge all): a bulk action filtered by that
// worker, previewed and bound to the preview.

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
    const open = i.undecided > 0;
    const taken = [[i.retried, "retried automatically"], [i.resurrected, "resurrected"], [i.purged, "purged"],
      [i.verified, "verified"]]
      .filter(([n]) => n > 0).map(([n, what]) => `${num(n)} ${what}`).join(" · ");
    return h("tr", { testid: "incident-row", dataset: { worker: key, open: open ? "yes" : "no" } },
      td(i.worker_id || "(no worker)", "mono small"),
      tdn(num(i.jobs)),
      td(i.last_seen_utc ? fmtTime(i.last_seen_utc) : "–", "nowrap"),
      td(i.last_failed_utc ? fmtTime(i.last_failed_utc) : "–", "nowrap"),
      h("td", { class: "small", testid: "incident-undecided" }, open
        ? `${num(i.undecided)}: ${num(i.inside_step)} inside a step · ${num(i.between_steps)} between steps · ${num(i.without_steps)} without steps`
        : "none"),
      h("td", { class: "small", testid: "incident-taken" }, taken || "–"),
      td(h("span", { class: "id-list" }, i.sample_ids.slice(0, 3).map((id) => button(id, () => openInspector(id, "dlq"),
        { kind: "link mono", fkey: `inc-${key}-${id}` })), i.undecided > 3 ? ` +${num(i.undecided - 3)}` : "")),
      td(open ? h("span", {},
        may("POST /api/dlq/resurrect") ? button("Resume all", () => bulkConfirm("resurrect", { filter }),
          { kind: "btn-sm", mutating: true, testid: "incident-resume", fkey: `inc-res-${key}` }) : null,
        may("POST /api/dlq/purge") ? button("Purge all", () => bulkConfirm("purge", { filter }),
          { kind: "btn-sm btn-danger", mutating: true, testid: "incident-purge", fkey: `inc-purge-${key}` }) : null)
        : "decided"));
  });
  replaceKeepingFocus($('[data-testid="incidents-table"]'),
    table(["Worker", "Jobs", "Last seen", "Buried", "Still in the DLQ", "Retried or taken out", "Undecided (sample)", "Decide"],
      rows, { empty: "No crash incidents.", caption: "Crash incidents" }),
    data.capped ? h("p", { class: "muted small" }, "Only the newest zombies were read: the DLQ is very large.") : null);
  return undefined;
}
