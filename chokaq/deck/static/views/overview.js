// The Overview: totals, per-queue counts, rates, the top error groups and the history charts.

import { button, $, h, replaceKeepingFocus, table, td, tdn } from "../dom.js";
import { viewError } from "../feedback.js";
import { fmtDuration, fmtTime, num } from "../format.js";
import { openInspector } from "../inspector.js";
import { state } from "../state.js";
import { loadStats } from "../stats.js";
import { loadHistory } from "./history.js";
import { setListFilters } from "./lists.js";

function card(label, value, testid, sub) {
  return h("div", { class: "stat", testid },
    h("div", { class: "stat-label" }, label),
    h("div", { class: "stat-value", dataset: { testid: `${testid}-value` } }, value),
    sub ? h("div", { class: "stat-sub" }, sub) : null);
}
function failureRate(r) {
  const total = (r.succeeded || 0) + (r.failed || 0);
  return total ? `${((100 * (r.failed || 0)) / total).toFixed(1)}%` : "–";
}

export async function loadOverview() {
  let s;
  try { s = await loadStats(); } catch (exc) { return viewError("overview", exc); }
  if (state.view !== "overview") return undefined;
  const t = s.totals;
  const r5 = (s.rates && s.rates["5m"]) || { succeeded: 0, failed: 0 };
  const r1 = (s.rates && s.rates["1m"]) || { succeeded: 0, failed: 0 };
  const cards = [
    card("Pending", num(t.pending), "card-pending"),
    card("Processing", num(t.processing), "card-processing", `${num(t.fetched)} fetched`),
    card("DLQ", num(t.dlq_size), "card-dlq"),
    card("Succeeded", num(t.succeeded_total), "card-succeeded", "total"),
    card("Failed", num(t.failed_total), "card-failed", `total · ${num(t.retried_total)} retried`),
    card("Oldest pending", fmtDuration(t.oldest_pending_lag_seconds), "card-lag", "queue lag"),
    card("Throughput", `${num(r1.succeeded)}/min`, "card-throughput", `${(r5.succeeded / 5).toFixed(1)}/min over 5 min`),
    card("Failure rate", failureRate(r5), "card-failrate", "last 5 min"),
  ];
  replaceKeepingFocus($('[data-testid="overview-cards"]'), ...cards);

  const qrows = s.queues.map((q) => h("tr", { dataset: { queue: q.queue } },
    td(q.queue, "mono"), tdn(num(q.pending)), tdn(num(q.processing + q.fetched)), tdn(num(q.dlq_size)),
    tdn(num(q.succeeded_total)), tdn(num(q.failed_total)), td(fmtDuration(q.oldest_pending_lag_seconds))));
  replaceKeepingFocus($('[data-testid="overview-queues"]'),
    table(["Queue", "Pending", "Processing", "DLQ", "Succeeded", "Failed", "Oldest pending"], qrows,
      { empty: "No queues yet.", caption: "Per-queue counts" }));

  const rrows = ["1m", "5m", "15m"].map((k) => {
    const r = (s.rates && s.rates[k]) || { succeeded: 0, failed: 0 };
    const mins = parseInt(k, 10);
    return h("tr", {}, td(`last ${mins} min`), tdn(num(r.succeeded)), tdn(num(r.failed)),
      tdn((r.succeeded / mins).toFixed(1)), tdn(failureRate(r)));
  });
  replaceKeepingFocus($('[data-testid="overview-rates"]'),
    table(["Window", "Succeeded", "Failed", "Jobs/min", "Failure rate"], rrows, { caption: "Throughput" }));

  const erows = (s.top_errors || []).map((e, i) => h("tr", {},
    td(e.type, "mono"), td(h("span", { class: `badge reason-${e.failure_reason}` }, e.failure_reason)),
    tdn(num(e.count)), td(fmtTime(e.last_failed_utc)),
    td(h("span", { class: "row-actions" },
      button("Show in DLQ", () => {
        setListFilters("dlq", { type: e.type, failure_reason: e.failure_reason });
        location.hash = "#/dlq";
      }, { kind: "btn-sm", fkey: `err-show-${i}` }),
      e.sample_id ? button("Inspect sample", () => openInspector(e.sample_id, "dlq"),
        { kind: "btn-sm btn-ghost", fkey: `err-sample-${i}` }) : null))));
  replaceKeepingFocus($('[data-testid="overview-errors"]'),
    table(["Type", "Reason", "Count", "Last failed", ""], erows, { empty: "The DLQ is empty.", caption: "Top errors" }));
  // Large tables are counted at most every Admin.LargeCountMaxAge: say how old their sizes are.
  const f = s.figures;
  const reused = f && !(f.hot_exact && f.dlq_exact)
    ? ` · ${f.dlq_exact ? "Pending" : f.hot_exact ? "DLQ" : "queue"} sizes counted ${fmtDuration(f.age_seconds)} ago`
    : "";
  $('[data-testid="overview-updated"]').textContent = `updated ${new Date().toLocaleTimeString()}${reused}`;
  return loadHistory("overview-history", null);
}
