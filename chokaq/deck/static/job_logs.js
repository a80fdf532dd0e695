// A job's logs and progress in the inspector (docs/job-logs.md). Refreshed with the inspector: while
// the job is Processing, every stats tick of the live stream reloads it (live.js), so new lines
// appear as the worker's heartbeat writes them. Text goes in as text nodes, and control and
// direction-changing characters as visible escapes: a hostile line cannot hide or reorder others.

import { h } from "./dom.js";
import { num } from "./format.js";

// C0 and C1 controls but tab and newline, and the bidi overrides and isolates.
const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

export const visible = (text) =>
  String(text).replace(HIDDEN, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

const clock = (ms) => (typeof ms === "number" ? new Date(ms).toISOString().slice(11, 23) : "–");

export function isLive(job) {
  return Boolean(job) && job.location === "hot" && (job.status === "Processing" || job.status === "Fetched");
}

export function progressSection(job) {
  const p = job.progress;
  if (!p) return null;
  const total = typeof p.total === "number" && p.total > 0 ? p.total : null;
  const pct = total ? Math.min(100, Math.max(0, (p.done / total) * 100)) : null;
  const label = total ? `${num(p.done)} of ${num(total)} (${pct.toFixed(0)}%)` : `${num(p.done)} done`;
  return h("section", { class: "insp-sec", testid: "insp-progress" },
    h("h3", {}, "Progress"),
    // No total: an indeterminate bar (no value), with the count beside it.
    h("progress", { class: "job-progress", max: total ? total : null, value: total ? Math.min(p.done, total) : null,
      "aria-label": `Progress: ${label}`, testid: "insp-progress-bar" }),
    h("p", { class: "small", testid: "insp-progress-text" }, label, p.note ? ` · ${visible(p.note)}` : ""));
}

export function logsSection(job) {
  const logs = job.logs;
  if (!logs) return null;
  const lines = logs.lines.map((l) => h("li", { class: `log-line log-${visible(l.level).toLowerCase()}`, testid: "insp-log-line" },
    h("time", {}, clock(l.at_ms)), " ",
    h("span", { class: "log-level" }, visible(l.level)), " ",
    l.logger ? h("span", { class: "log-logger" }, `${visible(l.logger)} `) : null,
    h("span", { class: "log-msg" }, visible(l.message)),
    l.fields ? h("span", { class: "log-fields" },
      Object.entries(l.fields).map(([k, v]) => ` ${visible(k)}=${visible(JSON.stringify(v))}`).join("")) : null));
  const list = h("ol", { class: "code job-logs", tabindex: "0", testid: "insp-logs", "aria-label": "Job logs" }, lines);
  if (isLive(job)) requestAnimationFrame(() => { list.scrollTop = list.scrollHeight; }); // follow the tail
  return h("section", { class: "insp-sec", testid: "insp-logs-section" },
    h("h3", {}, `Logs of attempt ${logs.attempt ?? "?"} `,
      isLive(job) ? h("span", { class: "badge badge-warn", testid: "insp-logs-live" }, "live") : null),
    logs.dropped ? h("p", { class: "muted small", testid: "insp-logs-dropped" },
      `${num(logs.dropped)} earlier line(s) dropped to keep the logs bounded (the latest are kept).`) : null,
    lines.length ? list : h("p", { class: "muted small" }, "No lines."));
}
