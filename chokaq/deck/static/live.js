// Live updates: the event stream (SSE) without a token, else polling of the recent-events buffer.
// Events are hints to reload (the database is the truth); each one also gets a console line.

import { api, qs } from "./api.js";
import { $, h } from "./dom.js";
import { num, plural } from "./format.js";
import { openInspector } from "./inspector.js";
import { isLive } from "./job_logs.js";
import { scheduleRefresh } from "./refresh.js";
import { state } from "./state.js";
import { setCounters } from "./stats.js";

const POLL_MS = 2000;
const CONSOLE_MAX = 200;

const ACTIONS = {
  "dlq.resurrect": "resurrected", "dlq.purge": "purged from the DLQ", "dlq.edit": "edited in the DLQ",
  "job.edit": "edited", "job.reschedule": "rescheduled", "job.cancel": "cancelled", "dlq.verify": "verified",
  "archive.purge": "purged from the archive", "dlq.retention": "purged from the DLQ (retention)",
};

function describeAudit(e) {
  const n = e.count || 0;
  const what = ACTIONS[e.action];
  if (!what) return `${e.action}${e.queue ? " " + e.queue : ""} by ${e.actor}${n ? ` (${plural(n, "job")})` : ""}`;
  const deleted = e.deleted ? plural(e.deleted, "job") : null;
  const subject = n === 1 && e.ids ? `Job ${e.ids[0]}` : deleted || plural(n, "job");
  return `${subject} ${what} by ${e.actor}`;
}

// A sweep writes a feed row per transaction; its lines show as one, counts added up.
function rescueText(e) {
  let t = `ZombieRescue: recovered ${num(e.recovered || 0)} abandoned, archived ${plural(e.archived || 0, "zombie")}`;
  if (e.retried) t += `, retried ${num(e.retried)} idempotent`;
  return t;
}

function describeEvent(e) {
  const by = e.actor ? ` by ${e.actor}` : "";
  const n = e.count ?? (e.ids ? e.ids.length : 1);
  switch (e.kind) {
    case "zombie.rescue": return rescueText(e);
    case "dlq.batch": return `${plural(e.count || 0, "job")} dead-lettered (${e.reason || "failed"})`;
    case "audit": return describeAudit(e);
    case "schedule.fired": return `Schedule ${e.name} enqueued ${plural(e.count || 0, "job")}`;
    case "breaker.changed": return `Circuit breaker of ${e.type}: ${e.old} → ${e.new} (${e.by || "?"})`;
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

const WARN = new Set(["zombie.rescue", "job.failed", "dlq.batch", "breaker.changed"]);

function jobLinks(ids) {
  if (!ids || !ids.length) return [];
  const links = ids.slice(0, 10).map((id) => h("a", {
    href: "#", class: "console-job", dataset: { testid: "console-job" },
    onclick: (ev) => { ev.preventDefault(); openInspector(id); },
  }, id));
  const out = [" "];
  links.forEach((a, i) => { if (i) out.push(", "); out.push(a); });
  if (ids.length > 10) out.push(` +${num(ids.length - 10)}`);
  return out;
}

const sweeps = new Map(); // a sweep's run id -> its console line and running totals

function logConsole(kind, text, at, e = {}) {
  const list = $('[data-testid="console"]');
  const time = new Date((at || Date.now() / 1000) * 1000).toISOString().slice(11, 19);
  const level = WARN.has(kind) ? "warn" : kind === "error" ? "error" : "info";
  const line = h("li", { class: `console-line ${level}`, dataset: { kind } },
    h("time", {}, time), " ", h("span", { class: "console-kind" }, kind), " ", h("span", { class: "console-text" }, text),
    h("span", { class: "console-jobs" }, ...jobLinks(e.ids)));
  list.append(line);
  while (list.children.length > CONSOLE_MAX) list.firstElementChild.remove();
  list.scrollTop = list.scrollHeight;
  return line;
}

function logRescue(e) {
  const seen = e.sweep && sweeps.get(e.sweep);
  if (!seen || !seen.line.isConnected) {
    const line = logConsole(e.kind, rescueText(e), e.at, e);
    if (e.sweep) sweeps.set(e.sweep, { line, totals: { ...e, ids: [...(e.ids || [])] } });
    if (sweeps.size > 50) sweeps.delete(sweeps.keys().next().value);
    return;
  }
  const t = seen.totals;
  for (const k of ["recovered", "archived", "retried"]) t[k] = (t[k] || 0) + (e[k] || 0);
  t.ids = [...t.ids, ...(e.ids || [])];
  $(".console-text", seen.line).textContent = rescueText(t);
  $(".console-jobs", seen.line).replaceChildren(...jobLinks(t.ids));
}
export function setLive(mode, text) {
  const el = $('[data-testid="live-status"]');
  el.dataset.mode = mode;
  $(".live-text", el).textContent = text;
}
function onStats(totals) {
  setCounters(totals);
  // A running job's logs and progress change with no event of their own: each tick reloads the
  // inspector while it shows one (its worker's heartbeat writes them).
  if (state.insp && !state.insp.gone && isLive(state.insp.job)) scheduleRefresh();
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
  const key = e.feed_id ? `feed:${e.feed_id}` : `${e.at}|${e.kind}|${e.id || ""}`;
  if (seen.has(key)) return;
  seen.add(key);
  if (seen.size > 2000) seen.clear();
  if (e.kind === "zombie.rescue") logRescue(e);
  else logConsole(e.kind, describeEvent(e), e.at, e.feed_id ? e : {});
  scheduleRefresh();
}

export function stopLive() {
  if (state.live) state.live.stop();
  state.live = null;
}

export function startLive() {
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
  let cursor = null;
  let stopped = false;
  let timer = null;
  const tick = async () => {
    try {
      const r = await api("GET", `/api/events/recent${qs({ after, cursor })}`);
      const fresh = after === null ? r.events.slice(-20) : r.events;
      after = r.now;
      cursor = r.cursor;
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
