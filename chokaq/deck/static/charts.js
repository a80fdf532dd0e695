// History charts (GET /api/stats/history) drawn with the vendored uPlot (vendor/uplot-*/, loaded
// by index.html as a classic script: window.uPlot). Two charts per panel: throughput (succeeded and
// dead-lettered, stacked by failure reason) and queue wait p50/p95. Each has a text summary (a
// figcaption) and a readout that shows the hovered bucket's numbers as text, straight from the API.

import { h } from "./dom.js";

// One colour per failure reason, in the reasons' code order (the API's hist.reasons): MaxRetriesExceeded
// red, Cancelled slate, Zombie violet, ... Reasons past the end get OTHER_REASON_COLOR.
const REASON_PALETTE = ["#dc2626", "#64748b", "#7c3aed", "#ea580c", "#db2777", "#ca8a04", "#991b1b", "#0891b2",
  "#f97316", "#9333ea", "#475569"];
const OTHER_REASON_COLOR = "#334155";
const SUCCEEDED_COLOR = "#16a34a";
const nf = new Intl.NumberFormat("en-US");

const reasonColor = (hist, reason) => REASON_PALETTE[hist.reasons.indexOf(reason)] || OTHER_REASON_COLOR;

// "last hour (1 min buckets)", "last 6 hours (5 min)", ...: a window picker label from /api/meta's
// history_windows (name, seconds, bucket_seconds).
function span(seconds) {
  if (seconds >= 2 * 86400 && seconds % 86400 === 0) return `${seconds / 86400} days`;
  if (seconds % 3600 === 0) return seconds === 3600 ? "hour" : `${seconds / 3600} hours`;
  return `${seconds / 60} min`;
}
function windowLabel(w, first) {
  const bucket = w.bucket_seconds === 3600 ? "1 hour" : span(w.bucket_seconds);
  return `last ${span(w.seconds)} (${bucket}${first ? " buckets" : ""})`;
}

export function fmtWait(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  if (ms < 3600000) return `${(ms / 60000).toFixed(1)} min`;
  return `${(ms / 3600000).toFixed(1)} h`;
}

function hhmm(iso, withDay) {
  const s = iso.replace("Z", "");
  return withDay ? `${s.slice(5, 10)} ${s.slice(11, 16)}` : s.slice(11, 16);
}

function bucketLabel(hist, i) {
  const b = hist.buckets[i];
  const end = new Date(Date.parse(b.start_utc) + hist.bucket_seconds * 1000).toISOString();
  const withDay = hist.window === "7d" || hist.window === "24h";
  return `${hhmm(b.start_utc, withDay)}–${hhmm(end, false)} UTC`;
}

// Reasons present in the window, in the API's (code) order: the stack order, bottom to top.
function presentReasons(hist) {
  const seen = new Set();
  for (const b of hist.buckets) for (const r of Object.keys(b.failed)) seen.add(r);
  return hist.reasons.filter((r) => seen.has(r));
}

function throughputReadout(hist, i) {
  const b = hist.buckets[i];
  const parts = [`${nf.format(b.succeeded)} succeeded`];
  for (const r of presentReasons(hist)) if (b.failed[r]) parts.push(`${nf.format(b.failed[r])} ${r}`);
  if (!b.failed_total) parts.push("0 dead-lettered");
  return `${bucketLabel(hist, i)}: ${parts.join(", ")}`;
}

function waitReadout(hist, i) {
  const b = hist.buckets[i];
  if (!b.waits_measured) return `${bucketLabel(hist, i)}: no job started`;
  return `${bucketLabel(hist, i)}: wait p50 ${fmtWait(b.wait_p50_ms)}, p95 ${fmtWait(b.wait_p95_ms)} ` +
    `(${nf.format(b.waits_measured)} jobs), mean run ${fmtWait(b.mean_duration_ms)}`;
}

function throughputSummary(hist) {
  const ok = hist.buckets.reduce((s, b) => s + b.succeeded, 0);
  const byReason = {};
  for (const b of hist.buckets) for (const [r, n] of Object.entries(b.failed)) byReason[r] = (byReason[r] || 0) + n;
  const dead = Object.values(byReason).reduce((s, n) => s + n, 0);
  let text = `Last ${hist.window}: ${nf.format(ok)} succeeded, ${nf.format(dead)} dead-lettered`;
  const reasons = presentReasons(hist).map((r) => `${r} ${nf.format(byReason[r])}`);
  if (reasons.length) text += ` (${reasons.join(", ")})`;
  let peak = -1;
  let peakAt = -1;
  hist.buckets.forEach((b, i) => { const n = b.succeeded + b.failed_total; if (n > peak) { peak = n; peakAt = i; } });
  if (peak > 0) text += `; busiest bucket ${bucketLabel(hist, peakAt)} with ${nf.format(peak)} jobs`;
  return `${text}.`;
}

function waitSummary(hist) {
  let worst = null;
  hist.buckets.forEach((b, i) => {
    if (b.wait_p95_ms !== null && (worst === null || b.wait_p95_ms > hist.buckets[worst].wait_p95_ms)) worst = i;
  });
  if (worst === null) return `Last ${hist.window}: no archived job started in this window, so no queue wait.`;
  const last = [...hist.buckets].reverse().find((b) => b.waits_measured);
  return `Last ${hist.window}: queue wait p95 peaked at ${fmtWait(hist.buckets[worst].wait_p95_ms)} ` +
    `in ${bucketLabel(hist, worst)}; latest p50 ${fmtWait(last.wait_p50_ms)}, p95 ${fmtWait(last.wait_p95_ms)}.`;
}

function xs(hist) {
  // Bars centred on their bucket: the cursor snaps to the bucket under the pointer.
  const half = hist.bucket_seconds / 2;
  return hist.buckets.map((b) => Date.parse(b.start_utc) / 1000 + half);
}

function throughputData(hist, reasons) {
  // uPlot has no stacking: each layer is drawn as the running total up to it, top layer first,
  // so the lower layers paint over the bottom of the ones above.
  const layers = [hist.buckets.map((b) => b.succeeded), ...reasons.map((r) => hist.buckets.map((b) => b.failed[r] || 0))];
  const cumulative = [];
  let run = hist.buckets.map(() => 0);
  for (const layer of layers) { run = run.map((v, i) => v + layer[i]); cumulative.push(run); }
  return [xs(hist), ...cumulative.reverse()];
}

function baseOpts(width, xRange, series, readout, format) {
  return {
    width, height: 180, series,
    legend: { show: false },
    // The Deck shows UTC everywhere; uPlot would label the axis in the browser's zone.
    tzDate: (ts) => window.uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
    cursor: { drag: { x: false, y: false }, points: { show: false } },
    scales: { x: { time: true, range: xRange }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
    axes: [{ stroke: "#6b7280", grid: { stroke: "#eef0f3" } },
      { stroke: "#6b7280", grid: { stroke: "#eef0f3" }, size: 56, values: (u, vals) => vals.map(format) }],
    hooks: {
      setCursor: [(u) => {
        const i = u.cursor.idx;
        if (i === null || i === undefined) { readout.textContent = readout.dataset.hint; delete readout.dataset.idx; return; }
        readout.dataset.idx = String(i);
        readout.textContent = readout.dataset.kind === "wait" ? waitReadout(u.chokaqHist, i) : throughputReadout(u.chokaqHist, i);
      }],
    },
  };
}

// One chart: a figure with the canvas, a readout line and a text summary.
class Chart {
  constructor(root, kind, title) {
    this.kind = kind;
    this.sig = "";
    this.u = null;
    this.plot = h("div", { class: "chart-plot", testid: `chart-${kind}-plot`, "aria-hidden": "true" });
    this.readout = h("p", { class: "chart-readout", testid: `chart-${kind}-readout` });
    this.readout.dataset.kind = kind;
    this.readout.dataset.hint = "Hover over the chart for a bucket's numbers.";
    this.readout.textContent = this.readout.dataset.hint;
    this.summary = h("figcaption", { class: "chart-summary", testid: `chart-${kind}-summary` });
    this.legend = h("ul", { class: "chart-legend", "aria-hidden": "true" });
    this.figure = h("figure", { class: "chart", testid: `chart-${kind}` },
      h("h3", {}, title), this.legend, this.plot, this.readout, this.summary);
    root.append(this.figure);
  }

  width() {
    return Math.max(320, Math.floor(this.figure.clientWidth || 600));
  }

  update(hist) {
    const U = window.uPlot;
    const reasons = presentReasons(hist);
    const sig = JSON.stringify([hist.window, hist.bucket_seconds, reasons]);
    let data;
    let series;
    let format;
    if (this.kind === "throughput") {
      data = throughputData(hist, reasons);
      const layers = [["succeeded", SUCCEEDED_COLOR], ...reasons.map((r) => [r, reasonColor(hist, r)])];
      const bars = U.paths.bars({ size: [0.8, 40] });
      series = [{}, ...layers.reverse().map(([label, color]) => ({ label, fill: color, stroke: color, width: 0, paths: bars, points: { show: false } }))];
      format = (v) => nf.format(v);
      this.legend.replaceChildren(...[...layers].reverse().map(([label, color]) => {
        const sw = h("span", { class: "swatch" });
        sw.style.background = color; // CSSOM, which style-src 'self' allows (no inline style attribute)
        return h("li", {}, sw, label);
      }));
    } else {
      data = [xs(hist), hist.buckets.map((b) => b.wait_p50_ms), hist.buckets.map((b) => b.wait_p95_ms)];
      series = [{}, { label: "p50", stroke: "#2563eb", width: 2, spanGaps: false, points: { show: true, size: 5, fill: "#ffffff" } },
        { label: "p95", stroke: "#f59e0b", width: 2, spanGaps: false, points: { show: true, size: 5, fill: "#ffffff" } }];
      format = fmtWait;
      this.legend.replaceChildren(...[["p50", "#2563eb"], ["p95", "#f59e0b"]].map(([label, color]) => {
        const sw = h("span", { class: "swatch" });
        sw.style.background = color;
        return h("li", {}, sw, label);
      }));
    }
    if (!this.u || sig !== this.sig) {
      if (this.u) this.u.destroy();
      // The x range is the window itself (read at each redraw: the window moves as time passes).
      const range = () => [Date.parse(this.hist.start_utc) / 1000, Date.parse(this.hist.end_utc) / 1000];
      this.hist = hist;
      this.u = new U(baseOpts(this.width(), range, series, this.readout, format), data, this.plot);
      this.sig = sig;
    } else {
      this.hist = hist;
      this.u.setData(data, true);
    }
    this.u.chokaqHist = hist;
    this.figure.dataset.points = String(data[0].length);
    this.figure.dataset.start = hist.start_utc;
    this.figure.dataset.end = hist.end_utc;
    this.figure.dataset.lastSucceeded = String(hist.buckets.at(-1).succeeded);
    this.figure.dataset.lastFailed = String(hist.buckets.at(-1).failed_total);
    this.summary.textContent = this.kind === "throughput" ? throughputSummary(hist) : waitSummary(hist);
    // Keep the readout in step with new data under a resting pointer.
    const i = this.readout.dataset.idx;
    if (i !== undefined && hist.buckets[Number(i)]) {
      this.readout.textContent = this.kind === "wait" ? waitReadout(hist, Number(i)) : throughputReadout(hist, Number(i));
    }
  }

  resize() {
    if (this.u) this.u.setSize({ width: this.width(), height: 180 });
  }
}

// A history panel: window picker, the two charts and the retention note.
export class HistoryPanel {
  constructor(root, { testid, onWindow, windows }) {
    this.root = root;
    this.hist = null;
    const id = `${testid}-window`;
    this.select = h("select", { id, testid: `${testid}-window` });
    windows.forEach((w, i) => this.select.append(h("option", { value: w.name }, windowLabel(w, i === 0))));
    this.select.addEventListener("change", () => onWindow(this.select.value));
    this.note = h("p", { class: "muted small chart-note", testid: `${testid}-note` });
    const charts = h("div", { class: "charts" });
    root.replaceChildren(
      h("div", { class: "chart-controls" }, h("label", { for: id }, "Window "), this.select), charts, this.note);
    this.throughput = new Chart(charts, "throughput", "Throughput: succeeded and dead-lettered, by reason");
    this.wait = new Chart(charts, "wait", "Queue wait p50 / p95 (start − enqueue time)");
    root.dataset.testid = testid;
    this.onResize = () => { this.throughput.resize(); this.wait.resize(); };
    window.addEventListener("resize", this.onResize);
  }

  destroy() {
    window.removeEventListener("resize", this.onResize);
  }

  update(hist) {
    if (!window.uPlot) throw new Error("uPlot did not load (vendor/uplot)");
    this.hist = hist;
    this.select.value = hist.window;
    this.throughput.update(hist);
    this.wait.update(hist);
    const oldest = hist.archive_oldest_utc ? hist.archive_oldest_utc.replace("T", " ").replace(/\.\d+/, "").replace("Z", " UTC") : null;
    this.note.textContent = "Counted from the archive and the DLQ: jobs purged by retention are not in these charts" +
      (oldest ? ` (the oldest archived job still held finished ${oldest}).` : " (the archive holds no job yet).") +
      " Wait is start minus enqueue time (the archive keeps no due time), so a delayed job's delay counts.";
  }
}
