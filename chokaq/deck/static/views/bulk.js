// Bulk actions on the DLQ and hot jobs: preview, confirm (typed when it is big or final), act.

import { ApiError, api, errorLines } from "../api.js";
import { confirmDialog } from "../dialog.js";
import { flash } from "../feedback.js";
import { num, plural } from "../format.js";
import { scheduleRefresh } from "../refresh.js";
import { limits, state } from "../state.js";

// The Deck's own caution (no API rule): acting on this many jobs or more needs the count typed.
const CONFIRM_AT = 25;

function describeFilter(f) {
  const parts = Object.entries(f).filter(([, v]) => v).map(([k, v]) => `${k.replace("_", " ")} = ${v}`);
  return parts.length ? parts.join(", ") : "no filter (the whole DLQ)";
}

const VERBS = {
  resurrect: { label: "Resurrect", past: "resurrected", path: "/api/dlq/resurrect" },
  purge: { label: "Purge", past: "purged", path: "/api/dlq/purge" },
  cancel: { label: "Cancel", past: "cancelled", path: "/api/jobs/cancel" },
  // The same route with running: true: jobs a worker holds are cancelled too, their handlers told to stop.
  cancelRunning: { label: "Cancel", past: "cancelled", path: "/api/jobs/cancel", verb: "cancel" },
};

// Preview (dry_run) first, then a confirmation typed when purging or touching CONFIRM_AT+ jobs.
export async function bulkConfirm(action, target) {
  const v = VERBS[action];
  const maxBulk = limits().max_bulk_ids;
  let count;
  let matched;
  let samples = [];
  const body = target.ids ? { ids: target.ids.slice(0, maxBulk) } : {
    filter: Object.fromEntries(Object.entries(target.filter).filter(([, x]) => x)), max_jobs: maxBulk };
  // The API refuses an empty filter unless it is told "everything" explicitly.
  if (body.filter && Object.keys(body.filter).length === 0) body.all = true;
  if (action === "cancelRunning") body.running = true;
  if (action === "cancel" || action === "cancelRunning") {
    count = matched = body.ids.length;
  } else {
    let preview;
    try {
      preview = await api("POST", v.path, { ...body, dry_run: true });
    } catch (exc) {
      flash(`Preview failed: ${errorLines(exc).join("; ")}`, "error");
      return;
    }
    matched = preview.matched;
    count = Math.min(preview.matched, maxBulk);
    samples = preview.sample_ids;
    if (body.filter) {
      // Bind the action to what the operator is about to confirm: this count, this snapshot.
      body.expected_count = preview.matched;
      body.snapshot = preview.snapshot;
    }
  }
  if (count === 0) {
    flash(`Nothing to ${action}: no job matches${target.ids ? " (they may have moved already)" : ""}.`, "warn");
    return;
  }
  const lines = [];
  if (target.filter) {
    lines.push(`Filter: ${describeFilter(body.filter)}.`);
    lines.push(matched > count ? `${plural(matched, "job")} match; this run acts on the oldest ${num(count)} (at most ${num(maxBulk)} per run).`
      : `${plural(matched, "job")} ${matched === 1 ? "matches" : "match"} this filter right now.`);
  } else lines.push(`${plural(count, "selected job")} ${action === "cancel" ? "(only Pending jobs can be cancelled; others are skipped)"
    : action === "cancelRunning" ? "(Pending, and running ones too)" : "still in the DLQ"}.`);
  if (action === "purge") lines.push("Purged jobs are deleted for good. This cannot be undone.");
  if (action === "resurrect") lines.push("They go back to Pending with a fresh retry budget.");
  if (action === "cancel") lines.push("Cancelled jobs move to the DLQ (reason Cancelled).");
  if (action === "cancelRunning") lines.push("Cancelled jobs move to the DLQ (reason Cancelled); the handlers of running ones "
    + "are told to stop (at once on PostgreSQL, else at their worker's next heartbeat), and whatever they return is discarded.");
  const yes = await confirmDialog({
    title: `${v.label} ${plural(count, "job")}?`, body: lines, count, verb: v.verb || action, samples,
    danger: action !== "resurrect", requireTyping: action === "purge" || count >= CONFIRM_AT,
    confirmLabel: `${v.label} ${plural(count, "job")}`,
  });
  if (!yes) return;
  try {
    const res = await api("POST", v.path, body);
    const done = res.affected ?? res.cancelled ?? 0;
    const skipped = (res.skipped_ids || []).length;
    const stopped = (res.was_running || []).length;
    flash(`${plural(done, "job")} ${v.past}${stopped ? ` (${num(stopped)} running: told to stop)` : ""}`
      + `${skipped ? `; ${num(skipped)} skipped (moved or not eligible)` : ""}.`,
      skipped ? "warn" : "info");
    for (const ls of Object.values(state.lists)) ls.selected.clear();
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 409 && body.filter) {
      flash(`${v.label} refused: more jobs match than the ${num(matched)} you confirmed, so nothing was `
        + `${v.past}. Look again and confirm the new count. (${errorLines(exc).join("; ")})`, "error");
    } else flash(`${v.label} failed: ${errorLines(exc).join("; ")}`, "error");
  }
  scheduleRefresh(0);
}
