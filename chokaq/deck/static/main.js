// The Deck: chokaq's operator dashboard, as native ES modules (no framework, no build step). This
// module wires them: sign-in, boot (GET /api/meta: who is calling and the API's vocabulary), the
// page's fixed controls and the refresh. It only calls the admin API; the API enforces roles, the
// Deck just hides what a role cannot use.

import { api, errorLines, whenRefused } from "./api.js";
import { $, $$, h } from "./dom.js";
import { flash } from "./feedback.js";
import { closeInspector, reloadInspector } from "./inspector.js";
import { setLive, startLive, stopLive } from "./live.js";
import { setRefresher } from "./refresh.js";
import { refreshView, route } from "./router.js";
import { TOKEN_KEY, state } from "./state.js";
import { loadStats } from "./stats.js";
import { loadAudit } from "./views/audit.js";
import { LISTS } from "./views/lists.js";

// What a refresh reloads: the view on screen, the header counters (the Overview and Queues views
// load the stats themselves) and the open inspector. Nothing while signed out: a refresh asked for
// just before sign-out must not render views without /api/meta's vocabulary.
async function refreshAll() {
  if (!state.meta) return;
  const jobs = [refreshView()];
  if (state.view !== "overview" && state.view !== "queues") jobs.push(loadStats().catch(() => null));
  if (state.insp && !state.insp.gone) jobs.push(reloadInspector());
  await Promise.all(jobs);
}

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
  state.audit.page_size ??= meta.limits.page_size_default;
  state.histWindow ??= meta.history_windows[0].name;
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
  whenRefused(showSignIn);
  setRefresher(refreshAll);
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
