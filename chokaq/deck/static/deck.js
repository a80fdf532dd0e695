// The Deck: chokaq's operator dashboard. Plain ES module, no framework, no build step.
// It only calls the admin API; the API enforces roles, the Deck just hides what a role cannot use.
// Everything user- or job-supplied reaches the DOM as text nodes (never innerHTML).

import { HistoryPanel } from "./charts.js";

const TOKEN_KEY = "chokaq.deck.token";
const RANK = { viewer: 1, operator: 2, admin: 3 };
const PAGE_SIZES = [100, 500, 1000];
const MAX_BULK = 1000; // the API's cap per bulk request
const CONFIRM_AT = 25; // actions on this many jobs or more need a typed confirmation
const POLL_MS = 2000;
const CONSOLE_MAX = 200;
const FAILURE_REASONS = [
  "MaxRetriesExceeded", "Cancelled", "Zombie", "CircuitBreakerOpen", "Rejected", "Throttled",
  "FatalError", "Timeout", "Transient", "HeartbeatFailure", "RetryLifetimeExpired",
];

// ------------------------------------------------------------------ tiny DOM helpers
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "testid") el.dataset.testid = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "value") el.value = v;
    else if (k === "checked") el.checked = Boolean(v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}
const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

function button(label, onclick, { kind = "", testid, mutating = false, title, disabled, fkey } = {}) {
  return h("button", {
    type: "button", class: `btn ${kind}`.trim(), onclick, testid, title, disabled,
    dataset: { ...(mutating ? { mutating: "1" } : {}), ...(fkey ? { fkey } : {}) },
  }, label);
}

// Replace a container's children, keeping keyboard focus on the "same" control if it survives.
function replaceKeepingFocus(container, ...nodes) {
  const key = document.activeElement && container.contains(document.activeElement)
    ? document.activeElement.dataset.fkey : null;
  container.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
  if (key) {
    const again = container.querySelector(`[data-fkey="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

// ------------------------------------------------------------------ formatting
const nf = new Intl.NumberFormat("en-US");
const num = (n) => (n === null || n === undefined ? "–" : nf.format(n));
function fmtTime(s) {
  if (!s) return "–";
  return s.replace("T", " ").replace(/\.\d+/, "").replace(/(Z|\+00:00)$/, "") + " UTC";
}
function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}
function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}
const plural = (n, word, many = word + "s") => `${num(n)} ${n === 1 ? word : many}`;
function firstLine(text, max = 90) {
  if (!text) return "";
  const line = String(text).split("\n").find((l) => l.trim()) || "";
  return line.length > max ? line.slice(0, max - 1) + "…" : line;
}
function localToIso(v) {
  if (!v) return "";
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? "" : d.toISOString();
}

// ------------------------------------------------------------------ state
const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  meta: null,
  view: null,
  stats: null,
  statsSig: "",
  queues: [],
  lists: {},
  audit: { filters: {}, page: 1, page_size: 100, data: null },
  insp: null, // {id, job, schema, audit, dirty, errors}
  live: null,
  histWindow: "1h", // the charts' window, shared by the Overview and the queue pages
  queueFocus: null, // the queue whose page (#/queues/NAME) shows its history
  panels: {}, // testid -> HistoryPanel
};
const role = () => (state.meta ? state.meta.role : "viewer");
const can = (needed) => (RANK[role()] || 0) >= RANK[needed];

// ------------------------------------------------------------------ API
class ApiError extends Error {
  constructor(status, code, detail) {
    super(typeof detail === "string" ? detail : code);
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  // The API's cross-site check: a header no other site's page can send without a CORS preflight.
  if (method !== "GET") headers["X-ChokaQ-Request"] = "1";
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store" });
  } catch (exc) {
    throw new ApiError(0, "network", `cannot reach the admin API (${exc.message})`);
  }
  let data = null;
  try { data = await res.json(); } catch { /* empty or not JSON */ }
  if (!res.ok) {
    const err = new ApiError(res.status, (data && data.error) || `http_${res.status}`,
      data && data.detail !== undefined ? data.detail : res.statusText);
    if (res.status === 401 && path !== "/api/meta") showSignIn("Your session was refused; sign in again.");
    throw err;
  }
  return data;
}

function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) u.set(k, v);
  const s = u.toString();
  return s ? `?${s}` : "";
}

// API error detail -> readable lines. 422 details are [{loc, msg}]; drop the transport part of loc.
function errorLines(err) {
  const d = err instanceof ApiError ? err.detail : String(err);
  if (Array.isArray(d)) {
    return d.map((e) => {
      const loc = (e.loc || []).filter((p, i) => !(i === 0 && (p === "body" || p === "query")))
        .filter((p, i) => !(i === 0 && (p === "payload" || p === "payload_text")));
      return loc.length ? `${loc.join(".")}: ${e.msg}` : e.msg;
    });
  }
  return [typeof d === "string" && d ? d : `${err.code || "error"}`];
}

// ------------------------------------------------------------------ flash and console
let flashTimer = null;
function flash(text, kind = "info") {
  const el = $('[data-testid="flash"]');
  el.textContent = text;
  el.dataset.kind = kind;
  el.hidden = false;
  clearTimeout(flashTimer);
  flashTimer = setTimeout(() => { el.hidden = true; }, kind === "error" ? 12000 : 6000);
}

function describeEvent(e) {
  const by = e.actor ? ` by ${e.actor}` : "";
  const n = e.count ?? (e.ids ? e.ids.length : 1);
  switch (e.kind) {
    case "zombie.rescue": {
      let t = `ZombieRescue: recovered ${num(e.recovered || 0)} abandoned, archived ${plural(e.archived || 0, "zombie")}`;
      if (e.retried) t += `, retried ${num(e.retried)} idempotent`;
      return t;
    }
    case "job.archived": return `Job ${e.id} succeeded (${e.type || "?"} on ${e.queue || "?"})`;
    case "job.failed":
      return e.id ? `Job ${e.id} → DLQ: ${e.reason || "failed"} (${e.queue || "?"})`
        : `${plural(n, "job")} → DLQ: ${e.reason || "failed"}${by}`;
    case "job.resurrected": return e.id ? `Job ${e.id} resurrected${by}` : `${plural(n, "job")} resurrected${by}`;
    case "job.purged": return `${plural(n, "job")} purged from ${e.location || "dlq"}${by}`;
    case "job.updated":
      return `Job ${e.id || "?"} ${e.action || (e.status ? "→ " + e.status : "updated")}${e.location ? " in " + e.location : ""}${by}`;
    case "queue.changed": {
      const parts = ["paused", "max_workers", "zombie_timeout_seconds"].filter((k) => k in e)
        .map((k) => `${k}=${e[k] === null ? "default" : e[k]}`);
      return `Queue ${e.queue} changed: ${parts.join(", ") || "settings"}${by}`;
    }
    default: return `${e.kind}`;
  }
}

function logConsole(kind, text, at) {
  const list = $('[data-testid="console"]');
  const time = new Date((at || Date.now() / 1000) * 1000).toISOString().slice(11, 19);
  const level = kind === "zombie.rescue" || kind === "job.failed" ? "warn" : kind === "error" ? "error" : "info";
  list.append(h("li", { class: `console-line ${level}`, dataset: { kind } },
    h("time", {}, time), " ", h("span", { class: "console-kind" }, kind), " ", h("span", {}, text)));
  while (list.children.length > CONSOLE_MAX) list.firstElementChild.remove();
  list.scrollTop = list.scrollHeight;
}

// ------------------------------------------------------------------ header counters
function setCounters(totals) {
  if (!totals) return;
  $('[data-testid="hdr-pending"]').textContent = num(totals.pending);
  $('[data-testid="hdr-processing"]').textContent = num((totals.processing || 0) + (totals.fetched || 0));
  $('[data-testid="hdr-dlq"]').textContent = num(totals.dlq_size);
  $('[data-testid="nav-dlq-count"]').textContent = num(totals.dlq_size);
}

function setLive(mode, text) {
  const el = $('[data-testid="live-status"]');
  el.dataset.mode = mode;
  $(".live-text", el).textContent = text;
}

// ------------------------------------------------------------------ routing
const VIEWS = ["overview", "queues", "hot", "archive", "dlq", "audit"];

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split(/[?]/)[0].split("/");
  const name = parts[0] || "overview";
  state.queueFocus = name === "queues" && parts[1] ? decodeURIComponent(parts.slice(1).join("/")) : null;
  showView(VIEWS.includes(name) ? name : "overview");
}

function showView(name) {
  state.view = name;
  for (const sec of $$("[data-view]")) sec.hidden = sec.dataset.view !== name;
  for (const a of $$("[data-view-link]")) {
    if (a.dataset.viewLink === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `${name === "dlq" ? "DLQ" : name[0].toUpperCase() + name.slice(1)} · chokaq Deck`;
  refreshView();
}

async function refreshView() {
  const v = state.view;
  if (v === "overview") return loadOverview();
  if (v === "queues") return loadQueues();
  if (v === "hot" || v === "archive" || v === "dlq") return loadList(v);
  if (v === "audit") return loadAudit();
  return undefined;
}

// ------------------------------------------------------------------ stats and overview
async function loadStats() {
  const s = await api("GET", "/api/stats");
  state.stats = s;
  setCounters(s.totals);
  const queues = new Set([...s.queues.map((q) => q.queue), ...state.queues.map((q) => q.name)]);
  $("#dl-queues").replaceChildren(...[...queues].sort().map((q) => h("option", { value: q })));
  return s;
}

function card(label, value, testid, sub) {
  return h("div", { class: "stat", testid },
    h("div", { class: "stat-label" }, label),
    h("div", { class: "stat-value", dataset: { testid: `${testid}-value` } }, value),
    sub ? h("div", { class: "stat-sub" }, sub) : null);
}

const NUMERIC_HEADERS = new Set(["Pending", "Processing", "DLQ", "Succeeded", "Failed", "Attempts", "Priority",
  "Duration", "Jobs", "Count", "Jobs/min", "Failure rate"]);

function table(headers, rows, { testid, empty = "Nothing here.", caption } = {}) {
  return h("table", { class: "table", testid },
    caption ? h("caption", { class: "sr-only" }, caption) : null,
    h("thead", {}, h("tr", {}, headers.map((x) => (x instanceof Node ? h("th", { scope: "col" }, x)
      : h("th", { scope: "col", class: NUMERIC_HEADERS.has(x) ? "num" : null }, x))))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: headers.length, class: "empty" }, empty))));
}
const td = (v, cls) => h("td", { class: cls || null }, v);
const tdn = (v) => h("td", { class: "num" }, v);

function failureRate(r) {
  const total = (r.succeeded || 0) + (r.failed || 0);
  return total ? `${((100 * (r.failed || 0)) / total).toFixed(1)}%` : "–";
}

async function loadOverview() {
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
  $('[data-testid="overview-updated"]').textContent = `updated ${new Date().toLocaleTimeString()}`;
  return loadHistory("overview-history", null);
}

// Charts: refetched with the view, i.e. on the event stream's hints (no polling of their own).
async function loadHistory(testid, queue) {
  const root = $(`[data-testid="${testid}"]`);
  let hist;
  try {
    hist = await api("GET", `/api/stats/history${qs({ window: state.histWindow, queue })}`);
  } catch (exc) { return viewError("history", exc); }
  if (!root.isConnected || root.closest("[hidden]")) return undefined;
  let panel = state.panels[testid];
  if (!panel) {
    panel = new HistoryPanel(root, { testid, onWindow: (w) => { state.histWindow = w; loadHistory(testid, queue); } });
    state.panels[testid] = panel;
  }
  panel.update(hist);
  return undefined;
}

function viewError(view, exc) {
  if (exc instanceof ApiError && exc.status === 401) return undefined;
  flash(`Could not load ${view}: ${errorLines(exc).join("; ")}`, "error");
  return undefined;
}

// ------------------------------------------------------------------ queues
async function loadQueues() {
  let data;
  try {
    [data] = await Promise.all([api("GET", "/api/queues"), loadStats()]);
  } catch (exc) { return viewError("queues", exc); }
  state.queues = data.items;
  if (state.view !== "queues") return undefined;
  const box = $('[data-testid="queues-table"]');
  const focusCard = $('[data-testid="queue-history-card"]');
  focusCard.hidden = !state.queueFocus;
  if (state.queueFocus) {
    $('[data-testid="queue-history-name"]').textContent = state.queueFocus;
    if (state.panels["queue-history"] && state.panels["queue-history"].queue !== state.queueFocus) {
      state.panels["queue-history"].destroy();
      delete state.panels["queue-history"];
    }
    await loadHistory("queue-history", state.queueFocus);
    if (state.panels["queue-history"]) state.panels["queue-history"].queue = state.queueFocus;
  }
  const sig = JSON.stringify([data.items, state.stats ? state.stats.queues.map((q) => [q.queue, q.pending, q.processing,
    q.fetched, q.dlq_size]) : null, role()]);
  if (sig === state.queuesSig && box.querySelector("table")) return undefined;
  state.queuesSig = sig;
  // Keep what the user is typing: a live refresh must not wipe a half-entered value.
  const typed = Object.fromEntries($$("input[data-orig]", box).filter((i) => i.value !== i.dataset.orig)
    .map((i) => [i.id, i.value]));
  const statsBy = Object.fromEntries((state.stats ? state.stats.queues : []).map((q) => [q.queue, q]));
  const names = [...new Set([...data.items.map((q) => q.name), ...Object.keys(statsBy)])].sort();
  const byName = Object.fromEntries(data.items.map((q) => [q.name, q]));
  const rows = names.map((name) => {
    const q = byName[name] || { name, is_paused: false, max_workers: null, zombie_timeout_seconds: null };
    const st = statsBy[name] || {};
    const msg = h("div", { class: "row-msg", role: "status", testid: "queue-msg" });
    const setting = (field, label, min, current) => {
      const id = `q-${field}-${name}`;
      const input = h("input", { id, type: "number", min, step: 1, class: "input-num", value: typed[id] ?? current ?? "",
        placeholder: "default", dataset: { fkey: `${id}-input`, testid: `queue-${field}`, orig: String(current ?? "") } });
      const control = can("operator")
        ? h("span", { class: "inline-form" }, h("label", { for: id, class: "sr-only" }, `${label} for ${name}`), input,
          button("Set", () => patchQueue(name, { [field]: input.value === "" ? null : Number(input.value) }, msg),
            { kind: "btn-sm", mutating: true, testid: `queue-set-${field}`, fkey: `${id}-set` }))
        : (current ?? "default");
      return h("td", {}, control);
    };
    return h("tr", { dataset: { queue: name }, testid: "queue-row" },
      td(h("a", { href: `#/queues/${encodeURIComponent(name)}`, title: `History of ${name}`, testid: "queue-link" }, name),
        "mono"),
      td(h("span", { class: `badge ${q.is_paused ? "badge-warn" : "badge-ok"}`, testid: "queue-state" },
        q.is_paused ? "Paused" : "Active")),
      tdn(num(st.pending)), tdn(num((st.processing || 0) + (st.fetched || 0))), tdn(num(st.dlq_size)),
      setting("max_workers", "Max workers", 1, q.max_workers),
      setting("zombie_timeout_seconds", "Zombie timeout (seconds)", 1, q.zombie_timeout_seconds),
      h("td", {}, can("operator")
        ? button(q.is_paused ? "Resume" : "Pause", () => patchQueue(name, { paused: !q.is_paused }, msg),
          { kind: q.is_paused ? "btn-primary btn-sm" : "btn-sm", mutating: true, testid: "queue-toggle",
            fkey: `q-toggle-${name}` }) : null, msg));
  });
  replaceKeepingFocus(box,
    table(["Queue", "State", "Pending", "Processing", "DLQ", "Max workers", "Zombie timeout (s)", ""], rows,
      { empty: "No queues yet: they appear with their first job.", caption: "Queues" }));
  return undefined;
}

async function patchQueue(name, body, msgEl) {
  try {
    await api("PATCH", `/api/queues/${encodeURIComponent(name)}`, body);
    flash(`Queue ${name} updated.`);
    state.queuesSig = "";
    for (const field of Object.keys(body)) {
      const input = document.getElementById(`q-${field}-${name}`);
      if (input) input.value = input.dataset.orig; // the stored value replaces what was typed
    }
    await loadQueues();
  } catch (exc) {
    msgEl.textContent = errorLines(exc).join("; ");
    msgEl.className = "row-msg error";
  }
}

// ------------------------------------------------------------------ job lists (hot, archive, dlq)
const LISTS = {
  hot: {
    title: "Hot jobs", endpoint: "/api/jobs", base: { location: "hot" },
    sorts: [["created", "Created"], ["scheduled", "Scheduled"], ["priority", "Priority"], ["queue", "Queue"],
      ["type", "Type"], ["status", "Status"], ["attempts", "Attempts"]],
    filters: ["queue", "type", "status", "tag", "from", "to", "search"],
    timeLabel: "created",
    columns: [
      ["Type", (j) => td(j.type, "mono")], ["Queue", (j) => td(j.queue, "mono")],
      ["Status", (j) => td(h("span", { class: `badge status-${j.status}` }, j.status))],
      ["Priority", (j) => tdn(num(j.priority))], ["Attempts", (j) => tdn(num(j.attempt_count))],
      ["Scheduled", (j) => td(fmtTime(j.scheduled_at_utc), "nowrap")],
      ["Created", (j) => td(fmtTime(j.created_at_utc), "nowrap")], ["Worker", (j) => td(j.worker_id || "–", "mono")],
    ],
  },
  archive: {
    title: "Archive (succeeded)", endpoint: "/api/jobs", base: { location: "archive" },
    sorts: [["finished", "Finished"], ["created", "Created"], ["queue", "Queue"], ["type", "Type"],
      ["duration", "Duration"]],
    filters: ["queue", "type", "tag", "from", "to", "search"],
    timeLabel: "finished",
    columns: [
      ["Type", (j) => td(j.type, "mono")], ["Queue", (j) => td(j.queue, "mono")],
      ["Attempts", (j) => tdn(num(j.attempt_count))], ["Duration", (j) => tdn(fmtMs(j.duration_ms))],
      ["Finished", (j) => td(fmtTime(j.finished_at_utc), "nowrap")],
      ["Created", (j) => td(fmtTime(j.created_at_utc), "nowrap")],
    ],
  },
  dlq: {
    title: "Dead-letter queue", endpoint: "/api/dlq", base: {},
    sorts: [["failed", "Failed at"], ["created", "Created"], ["queue", "Queue"], ["type", "Type"],
      ["reason", "Reason"], ["attempts", "Attempts"]],
    filters: ["queue", "type", "failure_reason", "tag", "from", "to", "search"],
    timeLabel: "failed",
    columns: [
      ["Type", (j) => td(j.type, "mono")], ["Queue", (j) => td(j.queue, "mono")],
      ["Reason", (j) => td(h("span", { class: `badge reason-${j.failure_reason}` }, j.failure_reason))],
      ["Attempts", (j) => tdn(num(j.attempt_count))],
      ["Failed at", (j) => td(fmtTime(j.failed_at_utc), "nowrap")],
      ["Error", (j) => td(h("span", { title: firstLine(j.error_details, 400) }, firstLine(j.error_details, 70)), "error-cell")],
    ],
  },
};

function listState(name) {
  if (!state.lists[name]) {
    state.lists[name] = { filters: {}, sort: LISTS[name].sorts[0][0], desc: true, page: 1, page_size: 100,
      data: null, sig: "", selected: new Set(), built: false };
  }
  return state.lists[name];
}

function setListFilters(name, filters) {
  const ls = listState(name);
  ls.filters = { ...filters };
  ls.page = 1;
  ls.selected.clear();
  if (ls.built) writeFilterForm(name);
}

function bulkActions(name) {
  if (name === "dlq") return { resurrect: can("operator"), purge: can("admin") };
  if (name === "hot") return { cancel: can("operator") };
  return {};
}
const hasBulk = (name) => Object.values(bulkActions(name)).some(Boolean);

function filterField(name, key) {
  const id = `${name}-f-${key}`;
  const wrap = (label, control) => h("div", { class: "field" }, h("label", { for: id }, label), control);
  const attrs = { id, name: key, dataset: { testid: `filter-${key}` } };
  switch (key) {
    case "queue": return wrap("Queue", h("input", { ...attrs, type: "text", list: "dl-queues", autocomplete: "off" }));
    case "type": return wrap("Type", h("input", { ...attrs, type: "text", list: "dl-types", autocomplete: "off" }));
    case "status": return wrap("Status", h("select", attrs, h("option", { value: "" }, "Any"),
      ["Pending", "Fetched", "Processing"].map((s) => h("option", { value: s }, s))));
    case "failure_reason": return wrap("Failure reason", h("select", attrs, h("option", { value: "" }, "Any"),
      FAILURE_REASONS.map((s) => h("option", { value: s }, s))));
    case "tag": return wrap("Tag", h("input", { ...attrs, type: "text", autocomplete: "off" }));
    case "from": return wrap(`From (${LISTS[name].timeLabel}, local time)`, h("input", { ...attrs, type: "datetime-local", step: 1 }));
    case "to": return wrap(`To (${LISTS[name].timeLabel}, local time)`, h("input", { ...attrs, type: "datetime-local", step: 1 }));
    case "search": return wrap(name === "dlq" ? "Search (id, type, tags, error)" : "Search (id, type, tags)",
      h("input", { ...attrs, type: "search", autocomplete: "off" }));
    default: return null;
  }
}

function buildList(name) {
  const cfg = LISTS[name];
  const ls = listState(name);
  const sec = $(`[data-view="${name}"]`);
  const form = h("form", { class: "filters card", testid: "filters", onsubmit: (ev) => {
    ev.preventDefault();
    readFilterForm(name);
    ls.page = 1;
    ls.selected.clear();
    loadList(name);
  }, onreset: () => setTimeout(() => {
    ls.filters = {};
    ls.page = 1;
    ls.selected.clear();
    loadList(name);
  }) },
  cfg.filters.map((k) => filterField(name, k)),
  h("div", { class: "field field-actions" },
    h("button", { type: "submit", class: "btn btn-primary", dataset: { testid: "filter-apply" } }, "Apply"),
    h("button", { type: "reset", class: "btn btn-ghost", dataset: { testid: "filter-reset" } }, "Reset")));

  const sortSel = h("select", { id: `${name}-sort`, dataset: { testid: "sort" }, onchange: (ev) => {
    ls.sort = ev.target.value; ls.page = 1; loadList(name);
  } }, cfg.sorts.map(([k, label]) => h("option", { value: k }, label)));
  const dirSel = h("select", { id: `${name}-dir`, dataset: { testid: "sort-dir" }, onchange: (ev) => {
    ls.desc = ev.target.value === "desc"; ls.page = 1; loadList(name);
  } }, h("option", { value: "desc" }, "Descending"), h("option", { value: "asc" }, "Ascending"));
  const sizeSel = h("select", { id: `${name}-size`, dataset: { testid: "page-size" }, onchange: (ev) => {
    ls.page_size = Number(ev.target.value); ls.page = 1; loadList(name);
  } }, PAGE_SIZES.map((n) => h("option", { value: n }, `${n} per page`)));

  const toolbar = h("div", { class: "toolbar" },
    h("div", { class: "field-inline" }, h("label", { for: `${name}-sort` }, "Sort by"), sortSel),
    h("div", { class: "field-inline" }, h("label", { for: `${name}-dir`, class: "sr-only" }, "Sort direction"), dirSel),
    h("div", { class: "field-inline" }, h("label", { for: `${name}-size`, class: "sr-only" }, "Page size"), sizeSel),
    h("div", { class: "toolbar-spacer" }),
    h("div", { class: "pager", testid: "pager" }));

  const bulk = hasBulk(name) ? h("div", { class: "bulkbar", testid: "bulkbar" }) : null;
  replaceKeepingFocus(sec,
    h("div", { class: "view-head" }, h("h1", { id: `${name}-title` }, cfg.title),
      h("span", { class: "muted", testid: "list-total" }, "")),
    form, bulk,
    h("div", { class: "card list-card" }, toolbar, h("div", { class: "table-wrap", testid: "list" })));
  ls.built = true;
  writeFilterForm(name);
}

function writeFilterForm(name) {
  const ls = listState(name);
  const form = $(`[data-view="${name}"] form.filters`);
  for (const el of form.elements) {
    if (!el.name) continue;
    const v = ls.filters[el.name];
    if (el.type === "datetime-local") {
      el.value = v ? new Date(new Date(v).getTime() - new Date(v).getTimezoneOffset() * 60000).toISOString().slice(0, 19) : "";
    } else el.value = v ?? "";
  }
  $(`#${name}-sort`).value = ls.sort;
  $(`#${name}-dir`).value = ls.desc ? "desc" : "asc";
  $(`#${name}-size`).value = String(ls.page_size);
}

function readFilterForm(name) {
  const ls = listState(name);
  const form = $(`[data-view="${name}"] form.filters`);
  const f = {};
  for (const el of form.elements) {
    if (!el.name || !el.value.trim()) continue;
    f[el.name] = el.type === "datetime-local" ? localToIso(el.value) : el.value.trim();
  }
  ls.filters = f;
}

function describeFilter(f) {
  const parts = Object.entries(f).filter(([, v]) => v).map(([k, v]) => `${k.replace("_", " ")} = ${v}`);
  return parts.length ? parts.join(", ") : "no filter (the whole DLQ)";
}

async function loadList(name) {
  const cfg = LISTS[name];
  const ls = listState(name);
  if (!ls.built) buildList(name);
  const params = { ...cfg.base, ...ls.filters, sort: ls.sort, desc: ls.desc, page: ls.page, page_size: ls.page_size };
  let data;
  try {
    data = await api("GET", cfg.endpoint + qs(params));
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 401) return;
    const box = $(`[data-view="${name}"] [data-testid="list"]`);
    box.replaceChildren(h("p", { class: "form-error", role: "alert", testid: "list-error" },
      `Could not load: ${errorLines(exc).join("; ")}`));
    return;
  }
  if (data.items.length === 0 && data.total > 0 && ls.page > 1) { // the page emptied under us
    ls.page = Math.max(1, Math.ceil(data.total / ls.page_size));
    loadList(name);
    return;
  }
  const sig = JSON.stringify([params, data]);
  ls.data = data;
  const present = new Set(data.items.map((j) => j.id));
  for (const id of [...ls.selected]) if (!present.has(id)) ls.selected.delete(id);
  if (sig === ls.sig && $(`[data-view="${name}"] [data-testid="list"] table`)) {
    renderBulkbar(name);
    return;
  }
  ls.sig = sig;
  renderList(name);
}

function renderList(name) {
  const cfg = LISTS[name];
  const ls = listState(name);
  const data = ls.data;
  const sec = $(`[data-view="${name}"]`);
  const selectable = hasBulk(name);
  $('[data-testid="list-total"]', sec).textContent = `${plural(data.total, "job")}${Object.keys(ls.filters).length ? " match the filter" : ""}`;

  const allBox = selectable ? h("input", {
    type: "checkbox", "aria-label": "Select all jobs on this page", dataset: { testid: "select-page", fkey: "select-page" },
    checked: data.items.length > 0 && data.items.every((j) => ls.selected.has(j.id)),
    onchange: (ev) => {
      for (const j of data.items) { if (ev.target.checked) ls.selected.add(j.id); else ls.selected.delete(j.id); }
      for (const cb of $$('[data-testid="select-row"]', sec)) cb.checked = ev.target.checked;
      renderBulkbar(name);
    },
  }) : null;
  const headers = [...(selectable ? [allBox] : []), "Job id", ...cfg.columns.map((c) => c[0])];
  const rows = data.items.map((j) => h("tr", {
    testid: "row", dataset: { id: j.id }, class: state.insp && state.insp.id === j.id ? "is-open" : null,
  },
  selectable ? h("td", { class: "check" }, h("input", {
    type: "checkbox", "aria-label": `Select job ${j.id}`, checked: ls.selected.has(j.id),
    dataset: { testid: "select-row", fkey: `sel-${j.id}` },
    onchange: (ev) => {
      if (ev.target.checked) ls.selected.add(j.id); else ls.selected.delete(j.id);
      renderBulkbar(name);
    },
  })) : null,
  h("td", {}, h("button", { type: "button", class: "link mono", title: "Open in the inspector",
    dataset: { testid: "open-job", fkey: `open-${j.id}` }, onclick: () => openInspector(j.id, name) }, j.id)),
  cfg.columns.map((c) => c[1](j))));
  replaceKeepingFocus($('[data-testid="list"]', sec),
    table(headers, rows, { testid: `${name}-table`, caption: cfg.title,
      empty: Object.keys(ls.filters).length ? "No jobs match this filter." : "No jobs here." }));
  renderPager(name);
  renderBulkbar(name);
}

function renderPager(name) {
  const ls = listState(name);
  const { total, page, page_size: size } = ls.data;
  const pages = Math.max(1, Math.ceil(total / size));
  const go = (p) => { ls.page = p; loadList(name); };
  const first = total ? (page - 1) * size + 1 : 0;
  const last = Math.min(total, page * size);
  replaceKeepingFocus($(`[data-view="${name}"] [data-testid="pager"]`),
    h("span", { class: "muted" }, `${num(first)}–${num(last)} of ${num(total)} · page ${num(page)} of ${num(pages)}`),
    button("‹ Prev", () => go(page - 1), { kind: "btn-sm", disabled: page <= 1, testid: "page-prev", fkey: "prev" }),
    button("Next ›", () => go(page + 1), { kind: "btn-sm", disabled: page >= pages, testid: "page-next", fkey: "next" }));
}

function renderBulkbar(name) {
  const bar = $(`[data-view="${name}"] [data-testid="bulkbar"]`);
  if (!bar) return;
  const ls = listState(name);
  const acts = bulkActions(name);
  const n = ls.selected.size;
  const ids = () => [...ls.selected];
  const parts = [h("span", { class: "bulk-count", testid: "selected-count" }, `${plural(n, "job")} selected`)];
  if (acts.resurrect) parts.push(button("Resurrect selected", () => bulkConfirm("resurrect", { ids: ids() }),
    { kind: "btn-sm btn-primary", disabled: n === 0, mutating: true, testid: "bulk-resurrect", fkey: "b-res" }));
  if (acts.purge) parts.push(button("Purge selected", () => bulkConfirm("purge", { ids: ids() }),
    { kind: "btn-sm btn-danger", disabled: n === 0, mutating: true, testid: "bulk-purge", fkey: "b-purge" }));
  if (acts.cancel) parts.push(button("Cancel selected", () => bulkConfirm("cancel", { ids: ids() }),
    { kind: "btn-sm btn-danger", disabled: n === 0, mutating: true, testid: "bulk-cancel", fkey: "b-cancel" }));
  if (name === "dlq") {
    parts.push(h("span", { class: "bulk-sep", "aria-hidden": "true" }, "|"),
      h("span", { class: "muted" }, "All matching this filter:"));
    if (acts.resurrect) parts.push(button("Resurrect all matching…", () => bulkConfirm("resurrect", { filter: { ...ls.filters } }),
      { kind: "btn-sm", mutating: true, testid: "filter-resurrect", fkey: "f-res" }));
    if (acts.purge) parts.push(button("Purge all matching…", () => bulkConfirm("purge", { filter: { ...ls.filters } }),
      { kind: "btn-sm btn-danger-outline", mutating: true, testid: "filter-purge", fkey: "f-purge" }));
  }
  replaceKeepingFocus(bar, ...parts);
}

// ------------------------------------------------------------------ confirmation dialog
// One <dialog> built on demand (viewers never get one). Resolves true when confirmed.
function confirmDialog({ title, body, count, verb, danger, requireTyping, confirmLabel, samples }) {
  return new Promise((resolve) => {
    const phrase = `${verb} ${count}`;
    const input = requireTyping ? h("input", { id: "confirm-typed", type: "text", autocomplete: "off",
      spellcheck: "false", dataset: { testid: "confirm-input" } }) : null;
    const ok = h("button", { type: "submit", class: `btn ${danger ? "btn-danger" : "btn-primary"}`,
      dataset: { testid: "confirm-ok", mutating: "1" }, disabled: Boolean(requireTyping) }, confirmLabel);
    const dlg = h("dialog", { class: "dialog", testid: "confirm-dialog", "aria-labelledby": "confirm-title" },
      h("form", { method: "dialog", onsubmit: (ev) => {
        ev.preventDefault();
        if (ok.disabled) return;
        close(true);
      } },
      h("h2", { id: "confirm-title" }, title),
      body.map((p) => h("p", {}, p)),
      samples && samples.length ? h("details", { class: "samples" }, h("summary", {}, `Sample ids (${samples.length})`),
        h("ul", { class: "mono" }, samples.map((s) => h("li", {}, s)))) : null,
      requireTyping ? h("div", { class: "field" },
        h("label", { for: "confirm-typed" }, "Type ", h("kbd", { testid: "confirm-phrase" }, phrase), " to confirm"),
        input) : null,
      h("div", { class: "dialog-actions" },
        h("button", { type: "button", class: "btn btn-ghost", dataset: { testid: "confirm-cancel" },
          onclick: () => close(false) }, "Cancel"), ok)));
    if (input) input.addEventListener("input", () => { ok.disabled = input.value.trim().toLowerCase() !== phrase; });
    dlg.addEventListener("cancel", (ev) => { ev.preventDefault(); close(false); });
    const opener = document.activeElement;
    function close(result) {
      dlg.close();
      dlg.remove();
      if (opener && document.contains(opener)) opener.focus();
      resolve(result);
    }
    document.body.append(dlg);
    dlg.showModal();
    (input || ok).focus();
  });
}

const VERBS = {
  resurrect: { label: "Resurrect", past: "resurrected", path: "/api/dlq/resurrect" },
  purge: { label: "Purge", past: "purged", path: "/api/dlq/purge" },
  cancel: { label: "Cancel", past: "cancelled", path: "/api/jobs/cancel" },
};

// Preview (dry_run) first, then a confirmation typed when purging or touching 25+ jobs.
async function bulkConfirm(action, target) {
  const v = VERBS[action];
  let count;
  let matched;
  let samples = [];
  const body = target.ids ? { ids: target.ids.slice(0, MAX_BULK) } : {
    filter: Object.fromEntries(Object.entries(target.filter).filter(([, x]) => x)), max_jobs: MAX_BULK };
  // The API refuses an empty filter unless it is told "everything" explicitly.
  if (body.filter && Object.keys(body.filter).length === 0) body.all = true;
  if (action === "cancel") {
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
    count = Math.min(preview.matched, MAX_BULK);
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
    lines.push(matched > count ? `${plural(matched, "job")} match; this run acts on the oldest ${num(count)} (at most ${num(MAX_BULK)} per run).`
      : `${plural(matched, "job")} ${matched === 1 ? "matches" : "match"} this filter right now.`);
  } else lines.push(`${plural(count, "selected job")} ${action === "cancel" ? "(only Pending jobs can be cancelled; others are skipped)" : "still in the DLQ"}.`);
  if (action === "purge") lines.push("Purged jobs are deleted for good. This cannot be undone.");
  if (action === "resurrect") lines.push("They go back to Pending with a fresh retry budget.");
  if (action === "cancel") lines.push("Cancelled jobs move to the DLQ (reason Cancelled).");
  const yes = await confirmDialog({
    title: `${v.label} ${plural(count, "job")}?`, body: lines, count, verb: action, samples,
    danger: action !== "resurrect", requireTyping: action === "purge" || count >= CONFIRM_AT,
    confirmLabel: `${v.label} ${plural(count, "job")}`,
  });
  if (!yes) return;
  try {
    const res = await api("POST", v.path, body);
    const done = res.affected ?? res.cancelled ?? 0;
    const skipped = (res.skipped_ids || []).length;
    flash(`${plural(done, "job")} ${v.past}${skipped ? `; ${num(skipped)} skipped (moved or not eligible)` : ""}.`,
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

// ------------------------------------------------------------------ inspector
function schemaFor(type) {
  const hnd = state.meta && state.meta.handlers.find((x) => x.type === type);
  return hnd ? hnd.payload_schema : null;
}

async function fetchJob(id, hint) {
  if (hint === "dlq") {
    try { return await api("GET", `/api/dlq/${encodeURIComponent(id)}`); } catch (exc) {
      if (!(exc instanceof ApiError) || exc.status !== 404) throw exc;
    }
  }
  return api("GET", `/api/jobs/${encodeURIComponent(id)}`);
}

async function openInspector(id, hint) {
  const panel = $('[data-testid="inspector"]');
  state.insp = { id, hint, job: null, dirty: false, errors: [], message: null, audit: null, opener: document.activeElement };
  panel.hidden = false;
  document.body.classList.add("has-inspector");
  panel.replaceChildren(h("div", { class: "insp-head" }, h("h2", { id: "insp-title" }, "Job ", h("span", { class: "mono" }, id)),
    button("Close", closeInspector, { kind: "btn-ghost btn-sm", testid: "insp-close" })), h("p", { class: "muted pad" }, "Loading…"));
  for (const tr of $$('[data-testid="row"]')) tr.classList.toggle("is-open", tr.dataset.id === id);
  await reloadInspector({ replaceEditor: true });
  panel.focus();
}

function closeInspector() {
  const panel = $('[data-testid="inspector"]');
  const opener = state.insp && state.insp.opener;
  state.insp = null;
  panel.hidden = true;
  panel.replaceChildren();
  document.body.classList.remove("has-inspector");
  for (const tr of $$('[data-testid="row"].is-open')) tr.classList.remove("is-open");
  if (opener && document.contains(opener)) opener.focus();
}

async function reloadInspector({ replaceEditor = false } = {}) {
  const insp = state.insp;
  if (!insp) return;
  let job;
  let audit = null;
  try {
    job = await fetchJob(insp.id, insp.job ? insp.job.location : insp.hint);
    audit = await api("GET", `/api/audit${qs({ job_id: insp.id, page_size: 50 })}`).catch(() => null);
  } catch (exc) {
    if (state.insp !== insp) return;
    if (exc instanceof ApiError && exc.status === 404) {
      insp.gone = true;
      insp.message = { kind: "warn", text: "This job no longer exists (it was purged)." };
      renderInspector(false);
      return;
    }
    insp.message = { kind: "error", text: `Could not load the job: ${errorLines(exc).join("; ")}` };
    renderInspector(false);
    return;
  }
  if (state.insp !== insp) return;
  const sig = JSON.stringify([job, audit]);
  if (!replaceEditor && !insp.gone && sig === insp.sig) return; // nothing changed: keep the caret where it is
  const moved = insp.job && (insp.job.location !== job.location || insp.job.status !== job.status);
  insp.sig = sig;
  insp.job = job;
  insp.gone = false;
  insp.audit = audit;
  renderInspector(replaceEditor || !insp.dirty || (moved && !editable(job)));
}

function editable(job) {
  if (!can("operator") || !job) return false;
  return job.location === "dlq" || (job.location === "hot" && job.status === "Pending");
}

function payloadText(payload) {
  return typeof payload === "string" ? payload : JSON.stringify(payload, null, 2);
}

function renderInspector(replaceEditor) {
  const insp = state.insp;
  const panel = $('[data-testid="inspector"]');
  const job = insp.job;
  const prev = {
    payload: $('[data-testid="insp-payload"]', panel),
    tags: $('[data-testid="insp-tags"]', panel),
    priority: $('[data-testid="insp-priority"]', panel),
    force: $('[data-testid="insp-force"]', panel),
  };
  const keepEditor = !replaceEditor && prev.payload;
  const focusKey = document.activeElement && panel.contains(document.activeElement) ? document.activeElement.dataset.fkey : null;

  const head = h("div", { class: "insp-head" },
    h("h2", { id: "insp-title" }, "Job ", h("span", { class: "mono", testid: "insp-id" }, insp.id)),
    button("Close", closeInspector, { kind: "btn-ghost btn-sm", testid: "insp-close", fkey: "insp-close" }));
  const msg = h("div", { class: "insp-msg", role: "status", testid: "insp-status",
    dataset: { kind: insp.message ? insp.message.kind : "" } }, insp.message ? insp.message.text : "");
  if (!job) { panel.replaceChildren(head, msg); return; }

  const where = job.location === "hot" ? `hot · ${job.status}` : job.location === "archive" ? "archive · Succeeded" : "DLQ";
  const field = (label, value, testid, cls) => [h("dt", {}, label), h("dd", { testid, class: cls || null }, value ?? "–")];
  const facts = h("dl", { class: "facts" },
    field("Where", h("span", { class: `badge loc-${job.location}` }, where), "insp-location"),
    field("Type", job.type, "insp-type", "mono"),
    field("Queue", job.queue, "insp-queue", "mono"),
    job.location === "dlq" ? field("Failure reason", h("span", { class: `badge reason-${job.failure_reason}` }, job.failure_reason), "insp-reason") : null,
    field("Attempts", num(job.attempt_count), "insp-attempts"),
    job.location === "dlq" ? field("Failed at", fmtTime(job.failed_at_utc), "insp-failed-at") : null,
    job.location === "archive" ? field("Finished", `${fmtTime(job.finished_at_utc)} (${fmtMs(job.duration_ms)})`, "insp-finished") : null,
    field("Worker id", job.worker_id || "–", "insp-worker", "mono"),
    field("Heartbeat", fmtTime(job.heartbeat_utc), "insp-heartbeat"),
    job.priority !== null && job.priority !== undefined ? field("Priority", num(job.priority), "insp-prio") : null,
    field("Scheduled", fmtTime(job.scheduled_at_utc), "insp-scheduled"),
    field("Created", fmtTime(job.created_at_utc), "insp-created"),
    field("Created by", job.created_by || "–", "insp-created-by"),
    field("Last modified by", job.last_modified_by || "–", "insp-modified"),
    job.idempotency_key ? field("Idempotency key", job.idempotency_key, "insp-idem", "mono") : null);

  const canEdit = editable(job);
  const schema = job.payload_schema !== undefined ? job.payload_schema : schemaFor(job.type);

  const text = keepEditor ? prev.payload.value : payloadText(job.payload);
  const ta = h("textarea", { id: "insp-payload", class: "code", rows: 8, spellcheck: "false", readonly: !canEdit,
    "aria-describedby": "insp-json-status insp-errors", dataset: { testid: "insp-payload", fkey: "insp-payload" } });
  ta.value = text;
  const jsonStatus = h("p", { id: "insp-json-status", class: "json-status", testid: "insp-json-status", "aria-live": "polite" });
  const tags = h("input", { id: "insp-tags", type: "text", readonly: !canEdit, autocomplete: "off",
    value: keepEditor && prev.tags ? prev.tags.value : job.tags || "", dataset: { testid: "insp-tags", fkey: "insp-tags" } });
  const showPrio = canEdit;
  const prio = showPrio ? h("input", { id: "insp-priority", type: "number", step: 1, class: "input-num",
    placeholder: job.location === "dlq" ? "default" : "", dataset: { testid: "insp-priority", fkey: "insp-priority" },
    value: keepEditor && prev.priority ? prev.priority.value : job.location === "hot" ? job.priority ?? "" : "" }) : null;
  const force = can("admin") && canEdit ? h("input", { id: "insp-force", type: "checkbox",
    checked: keepEditor && prev.force ? prev.force.checked : false, dataset: { testid: "insp-force", fkey: "insp-force" } }) : null;
  const errs = h("ul", { id: "insp-errors", class: "field-errors", role: "alert", testid: "insp-errors" },
    insp.errors.map((e) => h("li", {}, e)));

  const actions = h("div", { class: "insp-actions" });
  const updateDirty = () => {
    let ok = true;
    if (canEdit) {
      try {
        JSON.parse(ta.value);
        jsonStatus.textContent = "✓ valid JSON";
        jsonStatus.dataset.state = "ok";
      } catch (exc) {
        ok = false;
        jsonStatus.textContent = `JSON syntax error: ${exc.message}`;
        jsonStatus.dataset.state = "error";
      }
    }
    insp.dirty = ta.value !== payloadText(job.payload) || tags.value !== (job.tags || "")
      || Boolean(prio && prio.value !== String(job.location === "hot" ? job.priority ?? "" : ""));
    for (const b of $$("[data-needs-json]", actions)) b.disabled = !ok;
    const res = $('[data-testid="insp-resurrect"]', actions);
    if (res) res.textContent = insp.dirty ? "Save & resurrect" : "Resurrect";
    const save = $('[data-testid="insp-save"]', actions);
    if (save) save.disabled = !ok || !insp.dirty;
  };
  ta.addEventListener("input", updateDirty);
  tags.addEventListener("input", updateDirty);
  if (prio) prio.addEventListener("input", updateDirty);

  if (canEdit && job.location === "dlq") {
    actions.append(
      h("button", { type: "button", class: "btn", dataset: { testid: "insp-save", mutating: "1", needsJson: "1", fkey: "insp-save" },
        onclick: () => inspectorSave() }, "Save (stay in DLQ)"),
      h("button", { type: "button", class: "btn btn-primary", dataset: { testid: "insp-resurrect", mutating: "1", needsJson: "1", fkey: "insp-resurrect" },
        onclick: () => inspectorResurrect() }, "Resurrect"));
    if (can("admin")) actions.append(button("Purge", () => inspectorPurge(), { kind: "btn-danger", mutating: true, testid: "insp-purge", fkey: "insp-purge" }));
  } else if (canEdit && job.location === "hot") {
    actions.append(
      h("button", { type: "button", class: "btn btn-primary", dataset: { testid: "insp-save", mutating: "1", needsJson: "1", fkey: "insp-save" },
        onclick: () => inspectorSave() }, "Save"),
      button("Cancel job", () => inspectorCancel(), { kind: "btn-danger", mutating: true, testid: "insp-cancel", fkey: "insp-cancel" }));
  }

  const readOnlyNote = !canEdit ? h("p", { class: "muted small" },
    !can("operator") ? "Read only: your role is viewer."
      : job.location === "archive" ? "Archived jobs are read only."
        : job.location === "hot" ? `Only Pending jobs can be edited; this one is ${job.status} (a worker owns it).` : "") : null;

  const auditRows = insp.audit ? insp.audit.items.map((a) => h("tr", {}, td(fmtTime(a.at_utc), "nowrap"),
    td(`${a.actor} (${a.role})`), td(a.action, "mono"), td(auditDetails(a), "small"))) : [];

  const z = job.zombie;
  const zombieSec = z ? h("section", { class: "insp-sec", testid: "insp-zombie" },
    h("h3", {}, "Zombie: why it was rescued"),
    h("dl", { class: "facts" },
      field("Last heartbeat", z.last_heartbeat_utc ? fmtTime(z.last_heartbeat_utc) : "none before it died", "insp-z-heartbeat"),
      field("Silent for", z.silent_seconds === null ? "–"
        : `${fmtDuration(z.silent_seconds)} (timeout ${fmtDuration(z.timeout_seconds)}, ` +
          `${z.timeout_source === "queue" ? "the queue's override" : "the default"})`, "insp-z-silent"),
      field("Held by worker", z.worker_id || "–", "insp-z-worker", "mono"),
      field("Handler idempotent", z.handler_idempotent === null ? "unknown (no handler for this type here)"
        : z.handler_idempotent ? (z.handler_retries_zombies ? "yes; its zombies are retried, not dead-lettered"
          : "yes (it did not ask for zombie retries)") : "no: resurrecting may run it twice", "insp-z-idempotent"))) : null;

  const sections = [
    head, msg, facts, zombieSec,
    job.error_details || job.location === "dlq" ? h("section", { class: "insp-sec" },
      h("h3", {}, "Error details"),
      h("pre", { class: "code error-details", tabindex: "0", testid: "insp-error", "aria-label": "Error details" },
        job.error_details || "(none)")) : null,
    h("section", { class: "insp-sec" },
      h("h3", {}, h("label", { for: "insp-payload" }, canEdit ? "Payload (JSON, editable)" : "Payload (JSON)")),
      job.payload_invalid ? h("p", { class: "form-error", role: "alert", testid: "insp-payload-invalid" },
        `The stored payload is not valid (${job.payload_problem}); this is a truncated preview. `
        + "Replace it with valid JSON, or purge the job.") : null,
      ta, canEdit ? jsonStatus : null, readOnlyNote,
      h("div", { class: "insp-row" },
        h("div", { class: "field grow" }, h("label", { for: "insp-tags" }, "Tags"), tags),
        prio ? h("div", { class: "field" }, h("label", { for: "insp-priority" },
          job.location === "dlq" ? "Priority on resurrect" : "Priority"), prio) : null),
      force ? h("div", { class: "check-row" }, force, h("label", { for: "insp-force" },
        "Force: store a payload the handler's model rejects (admin)")) : null,
      errs, actions),
    schema ? h("section", { class: "insp-sec" },
      h("details", { testid: "insp-schema", open: canEdit && job.location === "dlq" },
        h("summary", {}, `Payload schema of ${job.type}`),
        schemaSummary(schema),
        h("pre", { class: "code schema" }, JSON.stringify(schema, null, 2)))) : null,
    h("section", { class: "insp-sec" }, h("h3", {}, "Audit for this job"),
      h("div", { class: "table-wrap" }, table(["When", "Who", "Action", "Details"], auditRows,
        { testid: "insp-audit", empty: "No operator actions recorded for this job." }))),
  ];
  const caret = keepEditor ? [prev.payload.selectionStart, prev.payload.selectionEnd, prev.payload.scrollTop] : null;
  panel.replaceChildren(...sections.filter(Boolean));
  updateDirty();
  if (focusKey) { const el = panel.querySelector(`[data-fkey="${CSS.escape(focusKey)}"]`); if (el) el.focus(); }
  if (caret) { ta.setSelectionRange(caret[0], caret[1]); ta.scrollTop = caret[2]; }
}

function schemaSummary(schema) {
  const props = schema && schema.properties ? Object.entries(schema.properties) : [];
  if (!props.length) return null;
  const req = new Set(schema.required || []);
  return h("ul", { class: "schema-fields" }, props.map(([k, p]) => h("li", {},
    h("code", {}, k), req.has(k) ? h("span", { class: "req" }, " required") : h("span", { class: "muted" }, " optional"),
    ` · ${p.type || (p.anyOf ? p.anyOf.map((x) => x.type).join(" | ") : "any")}`,
    p.pattern ? ` · pattern ${p.pattern}` : "", p.minLength ? ` · min length ${p.minLength}` : "",
    p.description ? ` — ${p.description}` : "")));
}

function auditDetails(a) {
  const parts = [];
  if (a.job_count > 1) parts.push(`${num(a.job_count)} jobs`);
  if (a.details) parts.push(JSON.stringify(a.details).slice(0, 300));
  return parts.join(" · ") || "–";
}

function inspectorBody({ resurrect = false } = {}) {
  const insp = state.insp;
  const job = insp.job;
  const ta = $('[data-testid="insp-payload"]');
  const tags = $('[data-testid="insp-tags"]');
  const prio = $('[data-testid="insp-priority"]');
  const force = $('[data-testid="insp-force"]');
  const body = {};
  try { JSON.parse(ta.value); } catch (exc) {
    insp.errors = [`payload: not valid JSON (${exc.message})`];
    renderErrors();
    return null;
  }
  if (ta.value !== payloadText(job.payload)) body.payload_text = ta.value;
  if (tags.value !== (job.tags || "")) body.tags = tags.value;
  if (prio && prio.value !== "" && (resurrect || job.location === "hot")
      && (resurrect || prio.value !== String(job.priority ?? ""))) body.priority = Number(prio.value);
  if (force && force.checked) body.force = true;
  return body;
}

function renderErrors() {
  const ul = $('[data-testid="insp-errors"]');
  if (ul) ul.replaceChildren(...state.insp.errors.map((e) => h("li", {}, e)));
}

function inspMessage(text, kind = "info") {
  state.insp.message = { text, kind };
  const el = $('[data-testid="insp-status"]');
  if (el) { el.textContent = text; el.dataset.kind = kind; }
}

async function inspectorAct(fn, success) {
  const insp = state.insp;
  insp.errors = [];
  renderErrors();
  try {
    await fn();
  } catch (exc) {
    if (state.insp !== insp) return;
    insp.errors = errorLines(exc);
    const what = exc.status === 422 ? "Not saved: the API rejected the input (nothing was stored)."
      : exc.status === 409 ? "Not saved: the job changed state (a worker may own it now)." : "The action failed.";
    renderErrors();
    inspMessage(what, "error");
    return;
  }
  if (state.insp !== insp) return;
  inspMessage(success, "ok");
  insp.dirty = false;
  await reloadInspector({ replaceEditor: true });
  scheduleRefresh(0);
}

function inspectorSave() {
  const body = inspectorBody();
  if (!body) return;
  const job = state.insp.job;
  if (!Object.keys(body).filter((k) => k !== "force").length) { inspMessage("Nothing changed."); return; }
  const path = job.location === "dlq" ? `/api/dlq/${encodeURIComponent(job.id)}` : `/api/jobs/${encodeURIComponent(job.id)}`;
  inspectorAct(() => api("PATCH", path, body), job.location === "dlq" ? "Saved. The job stays in the DLQ." : "Saved.");
}

function inspectorResurrect() {
  const body = inspectorBody({ resurrect: true });
  if (!body) return;
  const id = state.insp.job.id;
  inspectorAct(() => api("POST", `/api/dlq/${encodeURIComponent(id)}/resurrect`, body),
    "Resurrected: the job is Pending again with a fresh retry budget.");
}

async function inspectorPurge() {
  const id = state.insp.job.id;
  const yes = await confirmDialog({ title: "Purge this job?", body: [`Job ${id} is deleted for good. This cannot be undone.`],
    count: 1, verb: "purge", danger: true, requireTyping: true, confirmLabel: "Purge 1 job" });
  if (!yes || !state.insp) return;
  try {
    await api("POST", "/api/dlq/purge", { ids: [id] });
    flash(`Job ${id} purged.`);
    closeInspector();
  } catch (exc) { inspMessage(`Purge failed: ${errorLines(exc).join("; ")}`, "error"); }
  scheduleRefresh(0);
}

async function inspectorCancel() {
  const id = state.insp.job.id;
  const yes = await confirmDialog({ title: "Cancel this job?", body: [`Job ${id} moves to the DLQ as Cancelled.`],
    count: 1, verb: "cancel", danger: true, requireTyping: false, confirmLabel: "Cancel 1 job" });
  if (!yes || !state.insp) return;
  inspectorAct(async () => {
    const res = await api("POST", "/api/jobs/cancel", { ids: [id] });
    if (!res.cancelled) throw new ApiError(409, "conflict", "not cancelled: the job is no longer Pending");
  }, "Cancelled: the job is in the DLQ now.");
}

// ------------------------------------------------------------------ audit view
async function loadAudit() {
  const a = state.audit;
  let data;
  try {
    data = await api("GET", `/api/audit${qs({ ...a.filters, page: a.page, page_size: a.page_size })}`);
  } catch (exc) { return viewError("audit", exc); }
  a.data = data;
  const rows = data.items.map((x) => h("tr", { testid: "audit-row" },
    td(fmtTime(x.at_utc), "nowrap"), td(x.actor), td(x.role), td(x.action, "mono"), tdn(num(x.job_count)),
    td(h("span", { class: "id-list" }, x.job_ids.slice(0, 3).map((id) => button(id, () => openInspector(id),
      { kind: "link mono", fkey: `audit-${x.id}-${id}` })), x.job_ids.length > 3 ? ` +${num(x.job_ids.length - 3)}` : "")),
    td(x.details ? JSON.stringify(x.details).slice(0, 200) : "–", "small")));
  replaceKeepingFocus($('[data-testid="audit-table"]'),
    table(["When", "Actor", "Role", "Action", "Jobs", "Job ids", "Details"], rows,
      { empty: "No operator actions yet.", caption: "Audit log" }));
  const pages = Math.max(1, Math.ceil(data.total / a.page_size));
  replaceKeepingFocus($('[data-testid="audit-pager"]'),
    h("span", { class: "muted" }, `${plural(data.total, "entry", "entries")} · page ${a.page} of ${pages}`),
    button("‹ Prev", () => { a.page -= 1; loadAudit(); }, { kind: "btn-sm", disabled: a.page <= 1, fkey: "a-prev" }),
    button("Next ›", () => { a.page += 1; loadAudit(); }, { kind: "btn-sm", disabled: a.page >= pages, fkey: "a-next" }));
  return undefined;
}

// ------------------------------------------------------------------ live updates
let refreshTimer = null;
let refreshing = false;
let refreshAgain = false;

function scheduleRefresh(delay = 250) {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(runRefresh, delay);
}

async function runRefresh() {
  if (refreshing) { refreshAgain = true; return; }
  refreshing = true;
  try {
    const jobs = [refreshView()];
    if (state.view !== "overview" && state.view !== "queues") jobs.push(loadStats().catch(() => null));
    if (state.insp && !state.insp.gone) jobs.push(reloadInspector());
    await Promise.all(jobs);
  } finally {
    refreshing = false;
    if (refreshAgain) { refreshAgain = false; scheduleRefresh(); }
  }
}

function onStats(totals) {
  setCounters(totals);
  const sig = JSON.stringify(totals);
  if (sig !== state.statsSig) {
    const first = state.statsSig === "";
    state.statsSig = sig;
    if (!first) scheduleRefresh();
  }
}

const seen = new Set();
function handleEvent(e) {
  if (!e || !e.kind) return;
  if (e.kind === "stats.updated") { onStats(e.totals); return; }
  const key = `${e.at}|${e.kind}|${e.id || ""}`;
  if (seen.has(key)) return;
  seen.add(key);
  if (seen.size > 2000) seen.clear();
  logConsole(e.kind, describeEvent(e), e.at);
  scheduleRefresh();
}

function stopLive() {
  if (state.live) state.live.stop();
  state.live = null;
}

function startLive() {
  stopLive();
  if (!state.token && "EventSource" in window) {
    // No bearer token (dev_open or cookie-based App Service auth): the browser's EventSource works.
    const es = new EventSource("/api/events");
    es.onopen = () => setLive("sse", "live (SSE)");
    es.onerror = () => setLive("reconnecting", "reconnecting…");
    es.onmessage = (m) => { try { handleEvent(JSON.parse(m.data)); } catch { /* ignore a malformed hint */ } };
    state.live = { stop: () => es.close() };
    return;
  }
  // EventSource cannot send an Authorization header: poll the recent-events buffer and the stats.
  let after = null;
  let stopped = false;
  let timer = null;
  const tick = async () => {
    try {
      const r = await api("GET", `/api/events/recent${qs({ after })}`);
      const fresh = after === null ? r.events.slice(-20) : r.events;
      after = r.now;
      fresh.forEach(handleEvent);
      const s = await api("GET", "/api/stats");
      state.stats = s;
      onStats(s.totals);
      setLive("poll", "live (polling 2 s)");
    } catch (exc) {
      setLive("reconnecting", exc.status === 401 ? "signed out" : "reconnecting…");
      if (exc.status === 401) { stopped = true; return; }
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  };
  tick();
  state.live = { stop: () => { stopped = true; clearTimeout(timer); } };
}

// ------------------------------------------------------------------ sign in and boot
function showSignIn(message) {
  stopLive();
  setLive("off", "offline");
  for (const sec of $$("[data-view]")) sec.hidden = sec.dataset.view !== "signin";
  $(".nav").hidden = true;
  const err = $('[data-testid="signin-error"]');
  err.hidden = !message;
  err.textContent = message || "";
  $('[data-testid="who"]').textContent = "";
  $('[data-testid="signout"]').hidden = !state.token;
  $("#signin-token").focus();
}

async function boot() {
  let meta;
  try {
    meta = await api("GET", "/api/meta");
  } catch (exc) {
    if (exc.status === 401) {
      showSignIn(state.token ? "That token was refused." : "");
      return;
    }
    if (exc.status === 403) { showSignIn(errorLines(exc).join("; ")); return; }
    flash(`Cannot reach the admin API: ${errorLines(exc).join("; ")}`, "error");
    setTimeout(boot, 3000);
    return;
  }
  state.meta = meta;
  document.body.dataset.role = meta.role;
  $(".nav").hidden = false;
  $('[data-testid="who"]').textContent = `${meta.actor} · ${meta.role}${meta.dev_open && !state.token && !meta.actor.includes("open") ? " · dev (open)" : ""}`;
  $('[data-testid="signout"]').hidden = !state.token;
  $("#dl-types").replaceChildren(...meta.handlers.map((x) => h("option", { value: x.type })));
  for (const ls of Object.values(state.lists)) ls.built = false;
  for (const name of Object.keys(LISTS)) $(`[data-view="${name}"]`).replaceChildren();
  startLive();
  route();
  loadStats().catch(() => null);
}

function init() {
  window.addEventListener("hashchange", () => { if (state.meta) route(); });
  $('[data-testid="signin-form"]').addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("#signin-token").value.trim();
    if (!token) return;
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("#signin-token").value = "";
    boot();
  });
  $('[data-testid="signout"]').addEventListener("click", () => {
    state.token = null;
    state.meta = null;
    sessionStorage.removeItem(TOKEN_KEY);
    closeInspector();
    boot();
  });
  $('[data-testid="console-clear"]').addEventListener("click", () => $('[data-testid="console"]').replaceChildren());
  $('[data-testid="console-toggle"]').addEventListener("click", (ev) => {
    const log = $("#console-log");
    log.hidden = !log.hidden;
    ev.currentTarget.setAttribute("aria-expanded", String(!log.hidden));
    ev.currentTarget.textContent = log.hidden ? "Show" : "Hide";
    document.body.classList.toggle("console-collapsed", log.hidden);
  });
  $("#audit-actor").form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    state.audit.filters = { actor: String(f.get("actor") || "").trim(), job_id: String(f.get("job_id") || "").trim() };
    state.audit.page = 1;
    loadAudit();
  });
  $("#audit-actor").form.addEventListener("reset", () => setTimeout(() => {
    state.audit.filters = {};
    state.audit.page = 1;
    loadAudit();
  }));
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && state.insp && !document.querySelector("dialog[open]")) closeInspector();
  });
  boot();
}

init();
