// The header counters and GET /api/stats (shared by every view).

import { api } from "./api.js";
import { $, h } from "./dom.js";
import { num } from "./format.js";
import { state } from "./state.js";

export function setCounters(totals) {
  if (!totals) return;
  $('[data-testid="hdr-pending"]').textContent = num(totals.pending);
  $('[data-testid="hdr-processing"]').textContent = num((totals.processing || 0) + (totals.fetched || 0));
  $('[data-testid="hdr-dlq"]').textContent = num(totals.dlq_size);
  $('[data-testid="nav-dlq-count"]').textContent = num(totals.dlq_size);
}
export async function loadStats() {
  const s = await api("GET", "/api/stats");
  state.stats = s;
  setCounters(s.totals);
  const queues = new Set([...s.queues.map((q) => q.queue), ...state.queues.map((q) => q.name)]);
  $("#dl-queues").replaceChildren(...[...queues].sort().map((q) => h("option", { value: q })));
  return s;
}
