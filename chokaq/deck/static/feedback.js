// The flash line, and how a view reports that it could not load.

import { ApiError, errorLines } from "./api.js";
import { $ } from "./dom.js";

let flashTimer = null;
export function flash(text, kind = "info") {
  const el = $('[data-testid="flash"]');
  el.textContent = text;
  el.dataset.kind = kind;
  el.hidden = false;
  clearTimeout(flashTimer);
  flashTimer = setTimeout(() => { el.hidden = true; }, kind === "error" ? 12000 : 6000);
}
export function viewError(view, exc) {
  if (exc instanceof ApiError && exc.status === 401) return undefined;
  flash(`Could not load ${view}: ${errorLines(exc).join("; ")}`, "error");
  return undefined;
}
