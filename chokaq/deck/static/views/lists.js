// The job lists (hot, archive, DLQ): filters, sort, pages, selection and the bulk bar.

import { ApiError, api, errorLines, qs } from "../api.js";
import { $, $$, button, h, replaceKeepingFocus, table, td, tdn } from "../dom.js";
import { firstLine, fmtMs, fmtTime, localToIso, num, plural, pluralTotal, totalText } from "../format.js";
import { openInspector } from "../inspector.js";
import { limits, may, state } from "../state.js";
import { bulkConfirm } from "./bulk.js";

export const LISTS = {
  hot: {
    title: "Hot jobs", endpoint: "/api/jobs", base: { location: "hot" },
    // Newest first by id, not by creation time: ids are ULIDs, which begin with their enqueue time,
    // and the primary key serves that order; no index of JobsHot serves Created, so at a million
    // Pending jobs a page sorted by it sorts them all (docs/admin-figures.md).
    sorts: [["id", "Newest (id)"], ["created", "Created"], ["scheduled", "Scheduled"], ["priority", "Priority"],
      ["queue", "Queue"], ["type", "Type"], ["status", "Status"], ["attempts", "Attempts"]],
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
    state.lists[name] = { filters: {}, sort: LISTS[name].sorts[0][0], desc: true, page: 1, page_size: limits().page_size_default,
      data: null, sig: "", selected: new Set(), built: false };
  }
  return state.lists[name];
}

export function setListFilters(name, filters) {
  const ls = listState(name);
  ls.filters = { ...filters };
  ls.page = 1;
  ls.selected.clear();
  if (ls.built) writeFilterForm(name);
}

function bulkActions(name) {
  if (name === "dlq") return { resurrect: may("POST /api/dlq/resurrect"), purge: may("POST /api/dlq/purge") };
  if (name === "hot") return { cancel: may("POST /api/jobs/cancel") };
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
      state.meta.job_statuses.map((s) => h("option", { value: s }, s))));
    case "failure_reason": return wrap("Failure reason", h("select", attrs, h("option", { value: "" }, "Any"),
      state.meta.failure_reasons.map((s) => h("option", { value: s }, s))));
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
  } }, limits().page_sizes.map((n) => h("option", { value: n }, `${n} per page`)));

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

export async function loadList(name) {
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
  $('[data-testid="list-total"]', sec).textContent = `${pluralTotal(data.total, data.total_is_lower_bound, "job")}${Object.keys(ls.filters).length ? " match the filter" : ""}`;
  $('[data-testid="list-total"]', sec).title = data.total_is_lower_bound
    ? "At least this many: past Admin.ExactCountLimit matches the count stops, so a page costs the same at any size" : "";

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
  const { total, page, page_size: size, total_is_lower_bound: lower } = ls.data;
  const pages = Math.max(1, Math.ceil(total / size));
  const go = (p) => { ls.page = p; loadList(name); };
  const first = total ? (page - 1) * size + 1 : 0;
  const last = Math.min(total, page * size, (page - 1) * size + ls.data.items.length);
  // A lower bound ("10,000+"): more pages may follow the last one it names, so Next stays open
  // while the page is full.
  const more = lower && ls.data.items.length === size;
  replaceKeepingFocus($(`[data-view="${name}"] [data-testid="pager"]`),
    h("span", { class: "muted" }, `${num(first)}–${num(last)} of ${totalText(total, lower)} · page ${num(page)} of ${totalText(pages, lower)}`),
    button("‹ Prev", () => go(page - 1), { kind: "btn-sm", disabled: page <= 1, testid: "page-prev", fkey: "prev" }),
    button("Next ›", () => go(page + 1), { kind: "btn-sm", disabled: page >= pages && !more, testid: "page-next", fkey: "next" }));
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
  if (acts.cancel) parts.push(button("Cancel selected, running too", () => bulkConfirm("cancelRunning", { ids: ids() }),
    { kind: "btn-sm btn-danger-outline", disabled: n === 0, mutating: true, testid: "bulk-cancel-running", fkey: "b-cancel-run" }));
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
