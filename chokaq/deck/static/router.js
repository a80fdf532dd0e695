// Hash routes (#/overview, #/queues/NAME, #/dlq, ...) to views.

import { $$ } from "./dom.js";
import { state } from "./state.js";
import { loadAudit } from "./views/audit.js";
import { loadBreakers } from "./views/breakers.js";
import { loadIncidents } from "./views/incidents.js";
import { loadList } from "./views/lists.js";
import { loadOverview } from "./views/overview.js";
import { loadQueues } from "./views/queues.js";
import { loadSchedules } from "./views/schedules.js";
import { loadWorkers } from "./views/workers.js";

const VIEWS = ["overview", "queues", "schedules", "breakers", "workers", "hot", "archive", "dlq", "incidents", "audit"];

export function route() {
  const parts = location.hash.replace(/^#\/?/, "").split(/[?]/)[0].split("/");
  const name = parts[0] || "overview";
  state.queueFocus = name === "queues" && parts[1] ? decodeURIComponent(parts.slice(1).join("/")) : null;
  state.workerFocus = name === "workers" && parts[1] ? decodeURIComponent(parts.slice(1).join("/")) : null;
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

export async function refreshView() {
  const v = state.view;
  if (v === "overview") return loadOverview();
  if (v === "queues") return loadQueues();
  if (v === "schedules") return loadSchedules();
  if (v === "breakers") return loadBreakers();
  if (v === "workers") return loadWorkers();
  if (v === "hot" || v === "archive" || v === "dlq") return loadList(v);
  if (v === "incidents") return loadIncidents();
  if (v === "audit") return loadAudit();
  return undefined;
}
