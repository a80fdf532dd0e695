// Queues: pause and resume, max workers and the zombie timeout per queue, and a queue's history.

import { api, errorLines } from "../api.js";
import { $, $$, button, h, replaceKeepingFocus, table, td, tdn } from "../dom.js";
import { flash, viewError } from "../feedback.js";
import { num } from "../format.js";
import { limits, may, role, state } from "../state.js";
import { loadStats } from "../stats.js";
import { loadHistory } from "./history.js";

export async function loadQueues() {
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
  const canChange = may("PATCH /api/queues/{name}");
  const rows = names.map((name) => {
    const q = byName[name] || { name, is_paused: false, max_workers: null, zombie_timeout_seconds: null };
    const st = statsBy[name] || {};
    const msg = h("div", { class: "row-msg", role: "status", testid: "queue-msg" });
    const setting = (field, label, current) => {
      const id = `q-${field}-${name}`;
      const input = h("input", { id, type: "number", min: limits()[`${field}_min`], max: limits()[`${field}_max`], step: 1, class: "input-num", value: typed[id] ?? current ?? "",
        placeholder: "default", dataset: { fkey: `${id}-input`, testid: `queue-${field}`, orig: String(current ?? "") } });
      const control = canChange
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
      setting("max_workers", "Max workers", q.max_workers),
      setting("zombie_timeout_seconds", "Zombie timeout (seconds)", q.zombie_timeout_seconds),
      h("td", {}, canChange
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
