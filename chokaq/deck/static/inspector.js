// The job inspector: a job's facts, payload editor, schema, zombie details and audit, and the
// single-job actions (save, resurrect, cancel, purge).

import { ApiError, api, errorLines, qs } from "./api.js";
import { confirmDialog } from "./dialog.js";
import { $, $$, button, h, table, td } from "./dom.js";
import { flash } from "./feedback.js";
import { fmtDuration, fmtMs, fmtTime, num } from "./format.js";
import { logsSection, progressSection } from "./job_logs.js";
import { scheduleRefresh } from "./refresh.js";
import { atLeast, may, role, state } from "./state.js";
import { chooseSteps, stepsSection } from "./steps.js";

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

// Every attempt that did not succeed (and resurrects), oldest first: what ended it, on which worker,
// and its error with the traceback folded away. Text goes in as text nodes: hostile messages stay inert.
function attemptsSection(job) {
  const entries = job.attempts || [];
  if (!entries.length) return null;
  const rows = entries.map((a) => h("tr", { testid: "insp-attempt" },
    td(a.outcome === "resurrected" ? "–" : num(a.attempt), "num"),
    td(a.outcome + (a.reason ? ` (${a.reason})` : "") + (a.by ? ` by ${a.by}` : "")),
    td(a.worker || "–", "mono small"),
    td(a.ended_utc ? fmtTime(a.ended_utc) : "–", "nowrap"),
    td(a.duration_ms === null || a.duration_ms === undefined ? "–" : fmtMs(a.duration_ms), "num"),
    td(a.message || a.error_type ? h("div", {},
      h("span", { class: "mono small" }, [a.error_type, a.message].filter(Boolean).join(": ")),
      a.traceback ? h("details", {}, h("summary", {}, "Traceback"),
        h("pre", { class: "code error-details" }, a.traceback)) : null) : "–"),
  ));
  const dropped = entries[0].dropped_after;
  return h("section", { class: "insp-sec", testid: "insp-attempt-history" },
    h("h3", {}, "Attempts"),
    dropped ? h("p", { class: "muted small" }, `${dropped} attempt(s) after the first are not kept (the first and the latest are).`) : null,
    h("div", { class: "table-wrap" }, table(["#", "Ended as", "Worker", "Ended", "Took", "Error"], rows,
      { testid: "insp-attempt-table" })));
}

// A worker id as a link to its row on the Workers page (its state, and what it holds or left behind).
function workerLink(id) {
  if (!id) return "–";
  const href = `#/workers/${encodeURIComponent(id)}`;
  const go = (ev) => { ev.preventDefault(); closeInspector(); location.hash = href; };
  return h("a", { href, testid: "insp-worker-link", onclick: go }, id);
}

export async function openInspector(id, hint) {
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

export function closeInspector() {
  const panel = $('[data-testid="inspector"]');
  const opener = state.insp && state.insp.opener;
  state.insp = null;
  panel.hidden = true;
  panel.replaceChildren();
  document.body.classList.remove("has-inspector");
  for (const tr of $$('[data-testid="row"].is-open')) tr.classList.remove("is-open");
  if (opener && document.contains(opener)) opener.focus();
}

export async function reloadInspector({ replaceEditor = false } = {}) {
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

// The role may edit jobs where this one is (whether its state allows an edit is editable's part).
const mayEdit = (job) => may(job.location === "dlq" ? "PATCH /api/dlq/{job_id}" : "PATCH /api/jobs/{job_id}");

function editable(job) {
  if (!job) return false;
  if (job.location === "dlq") return may("PATCH /api/dlq/{job_id}");
  return job.location === "hot" && job.status === "Pending" && may("PATCH /api/jobs/{job_id}");
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
    field("Worker id", workerLink(job.worker_id), "insp-worker", "mono"),
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
  const force = atLeast("admin") && canEdit ? h("input", { id: "insp-force", type: "checkbox",
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
    if (may("POST /api/dlq/purge")) actions.append(button("Purge", () => inspectorPurge(), { kind: "btn-danger", mutating: true, testid: "insp-purge", fkey: "insp-purge" }));
  } else if (canEdit && job.location === "hot") {
    actions.append(
      h("button", { type: "button", class: "btn btn-primary", dataset: { testid: "insp-save", mutating: "1", needsJson: "1", fkey: "insp-save" },
        onclick: () => inspectorSave() }, "Save"),
      button("Cancel job", () => inspectorCancel(), { kind: "btn-danger", mutating: true, testid: "insp-cancel", fkey: "insp-cancel" }));
  } else if (job.location === "hot" && job.status !== "Pending" && may("POST /api/jobs/cancel")) {
    actions.append(button("Cancel running job", () => inspectorCancelRunning(), { kind: "btn-danger", mutating: true,
      testid: "insp-cancel-running", fkey: "insp-cancel-running" }));
  }
  const reschedule = canEdit && job.location === "hot" && may("POST /api/jobs/{job_id}/reschedule") ? rescheduleRow() : null;

  const readOnlyNote = !canEdit ? h("p", { class: "muted small" },
    !mayEdit(job) ? `Read only: your role is ${role()}.`
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
      field("Held by worker", workerLink(z.worker_id), "insp-z-worker", "mono"),
      field("Handler idempotent", z.handler_idempotent === null ? "unknown (no handler for this type here)"
        : z.handler_idempotent ? (z.handler_retries_zombies ? "yes; its zombies are retried, not dead-lettered"
          : "yes (it did not ask for zombie retries)") : "no: resurrecting may run it twice", "insp-z-idempotent"))) : null;

  const sections = [
    head, msg, facts, progressSection(job), zombieSec, stepsSection(job), attemptsSection(job), logsSection(job),
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
      errs, actions, reschedule),
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

async function inspectorResurrect() {
  const body = inspectorBody({ resurrect: true });
  if (!body) return;
  const job = state.insp.job;
  const id = job.id;
  if (job.steps && job.steps.length) {
    const choice = await chooseSteps(job, body.payload_text !== undefined);
    if (!choice || !state.insp || state.insp.job !== job) return;
    Object.assign(body, choice);
  }
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

// Move a Pending job's due time (the browser's local time, sent as an instant with its offset) or
// make it due now. The API refuses it (409) once a worker owns the job.
function rescheduleRow() {
  const when = h("input", { id: "insp-at", type: "datetime-local", step: 1,
    dataset: { testid: "insp-at", fkey: "insp-at" }, "aria-label": "Run at (your local time)" });
  return h("div", { class: "insp-actions", testid: "insp-reschedule" },
    h("label", { for: "insp-at" }, "Run at (local time) "), when,
    button("Reschedule", () => inspectorReschedule(when.value), { mutating: true, testid: "insp-reschedule-at", fkey: "insp-reschedule-at" }),
    button("Run now", () => inspectorReschedule(null), { mutating: true, testid: "insp-run-now", fkey: "insp-run-now" }));
}

function inspectorReschedule(local) {
  const id = state.insp.job.id;
  let body = { now: true };
  if (local !== null) {
    const at = new Date(local);
    if (!local || Number.isNaN(at.getTime())) {
      inspMessage("Pick a date and time to run at.", "error");
      return;
    }
    body = { at: at.toISOString() };
  }
  inspectorAct(() => api("POST", `/api/jobs/${encodeURIComponent(id)}/reschedule`, body),
    local === null ? "Due now: the next free worker takes it." : "Rescheduled.");
}

async function inspectorCancelRunning() {
  const job = state.insp.job;
  const answer = await confirmDialog({ title: "Cancel this running job?", body: [
    `Job ${job.id} is ${job.status} on worker ${job.worker_id || "?"}. It moves to the DLQ as Cancelled, and its handler is told to stop (at once on PostgreSQL, else at its worker's next heartbeat).`,
    "A handler that ignores the cancel runs on, but whatever it returns is discarded. Resurrect brings the job back."],
  count: 1, verb: "cancel", danger: true, requireTyping: false, confirmLabel: "Cancel running job", askReason: true });
  if (!answer || !state.insp) return;
  inspectorAct(async () => {
    const body = { ids: [job.id], running: true };
    if (answer.reason) body.reason = answer.reason;
    const res = await api("POST", "/api/jobs/cancel", body);
    if (!res.cancelled) throw new ApiError(409, "conflict", "not cancelled: the job has finished or left the hot table");
  }, "Cancelled: the job is in the DLQ now, and its worker is told to stop it.");
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
