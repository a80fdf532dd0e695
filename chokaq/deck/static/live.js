// Live updates: the event stream (SSE) without a token, else polling of the recent-events buffer.
// Events are hints to reload (the database is the truth); each one also gets a console line.

import { api, qs } from "./api.js";
import { $, h } from "./dom.js";
import { num, plural } from "./format.js";
import { isLive } from "./job_logs.js";
import { scheduleRefresh } from "./refresh.js";
import { state } from "./state.js";
import { setCounters } from "./stats.js";

const POLL_MS = 2000;
const CONSOLE_MAX = 200;

function describeEvent(e) {
  const by = e.actor ? ` by ${e.actor}` : "";
  const n = e.count ?? (e.ids ? e.ids.length : 1);
  switch (e.kind) {
    case "zombie.rescue": {
      let t = `ZombieRescue: recovered ${num(e.recovered || 0)} abandoned, archived ${plural(e.archived || 0, "zombie")}`;
      if (e.retried) t += `, retried ${num(e.retried)} idempotent`;
      return t;
    }
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

function logConsole(kind, text, at) {
  const list = $('[data-testid="console"]');
  const time = new Date((at || Date.now() / 1000) * 1000).toISOString().slice(11, 19);
  const level = kind === "zombie.rescue" || kind === "job.failed" || kind === "breaker.changed" ? "warn" : kind === "error" ? "error" : "info";
  list.append(h("li", { class: `console-line ${level}`, dataset: { kind } },
    h("time", {}, time), " ", h("span", { class: "console-kind" }, kind), " ", h("span", {}, text)));
  while (list.children.length > CONSOLE_MAX) list.firstElementChild.remove();
  list.scrollTop = list.scrollHeight;
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
  const key = `${e.at}|${e.kind}|${e.id || ""}`;
  if (seen.has(key)) return;
  seen.add(key);
  if (seen.size > 2000) seen.clear();
  logConsole(e.kind, describeEvent(e), e.at);
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
