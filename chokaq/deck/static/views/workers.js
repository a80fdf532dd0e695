// Workers: every worker process the database has heard from (live, stopped, lost), with the jobs
// each holds now and the zombies the sweep took from it. #/workers/ID shows one worker's jobs.

import { api } from "../api.js";
import { openInspector } from "../inspector.js";
import { $, button, h, replaceKeepingFocus, table, td, tdn } from "../dom.js";
import { viewError } from "../feedback.js";
import { fmtDuration, fmtTime, num } from "../format.js";
import { state } from "../state.js";

const BADGE = { live: "badge-ok", lost: "reason-Zombie", stopped: "" };
const workerHref = (id) => `#/workers/${encodeURIComponent(id)}`;

export async function loadWorkers() {
  let data;
  let focus = null;
  try {
    data = await api("GET", "/api/workers");
    if (state.workerFocus) {
      try {
        focus = await api("GET", `/api/workers/${encodeURIComponent(state.workerFocus)}`);
      } catch (exc) {
        if (exc.status !== 404) throw exc;
        focus = { missing: state.workerFocus };
      }
    }
  } catch (exc) { return viewError("workers", exc); }
  if (state.view !== "workers") return undefined;
  $('[data-testid="workers-lost-after"]').textContent = fmtDuration(data.lost_after_seconds);
  const sig = JSON.stringify([data.items, focus]);
  const box = $('[data-testid="workers-table"]');
  if (sig === state.workersSig && box.querySelector("table")) return undefined;
  state.workersSig = sig;
  const rows = data.items.map((w) => h("tr", {
    dataset: { worker: w.worker_id }, testid: "worker-row",
    class: w.worker_id === state.workerFocus ? "is-open" : null,
  },
  td(h("a", { href: workerHref(w.worker_id), class: "mono", testid: "worker-link" }, w.worker_id)),
  td(h("span", { class: `badge ${BADGE[w.state] || ""}`, testid: "worker-state" }, w.state)),
  td(`${w.host} · ${w.pid}`, "mono small"),
  td(w.queues ? w.queues.join(", ") : "all", "small"),
  tdn(`${num(w.running)} / ${num(w.concurrency)}`),
  h("td", { class: "num", testid: "worker-holding" }, num(w.holding)),
  h("td", { class: "num", testid: "worker-zombies" }, num(w.zombies)),
  td(fmtTime(w.started_at_utc), "nowrap"),
  td(fmtTime(w.last_seen_utc), "nowrap"),
  td(w.stopped_at_utc ? fmtTime(w.stopped_at_utc) : "–", "nowrap")));
  replaceKeepingFocus(box, table(
    ["Worker", "State", "Host · pid", "Queues", "Running", "Holding", "Zombies", "Started", "Last seen", "Stopped / lost"],
    rows, { empty: "No worker has recorded itself yet: start one with `chokaq worker`.", caption: "Workers" }));
  renderFocus(focus);
  return undefined;
}

function jobRows(jobs) {
  return jobs.map((j) => h("tr", { testid: "worker-job", dataset: { id: j.id } },
    td(button(j.id, () => openInspector(j.id), { kind: "btn-ghost btn-sm mono", testid: "worker-job-open" })),
    td(h("span", { class: `badge ${j.status === "Zombie" ? "reason-Zombie" : `status-${j.status}`}` }, j.status)),
    td(j.queue, "mono"), td(j.type, "mono"), td(fmtTime(j.at_utc), "nowrap")));
}

function renderFocus(focus) {
  const card = $('[data-testid="worker-detail"]');
  card.hidden = !focus;
  if (!focus) { card.replaceChildren(); return; }
  if (focus.missing) {
    card.replaceChildren(h("p", { class: "muted pad", testid: "worker-missing" },
      `No worker ${focus.missing} is recorded (never seen, or pruned after Recovery.WorkerRetention).`));
    return;
  }
  const heads = ["Job", "Status", "Queue", "Type", "Since"];
  card.replaceChildren(
    h("h2", { testid: "worker-detail-name" }, "Worker ", h("span", { class: "mono" }, focus.worker_id)),
    h("p", { class: "muted" }, `${focus.state} · version ${focus.version} · concurrency ${focus.concurrency}`),
    h("h3", {}, `Holding now (${num(focus.holding)})`),
    h("div", { class: "table-wrap" }, table(heads, jobRows(focus.held_jobs),
      { testid: "worker-held", empty: "No job under its id now.", caption: "Jobs it holds" })),
    h("h3", {}, `Zombies in the DLQ (${num(focus.zombies)})`),
    h("div", { class: "table-wrap" }, table(heads, jobRows(focus.zombie_jobs),
      { testid: "worker-zombie-jobs", empty: "No zombie of this worker in the DLQ.", caption: "Its zombies" })));
}
