// The history charts of a view (Overview, a queue's page): refetched with the view, i.e. on the
// event stream's hints (no polling of their own).

import { api, qs } from "../api.js";
import { HistoryPanel } from "../charts.js";
import { $ } from "../dom.js";
import { viewError } from "../feedback.js";
import { state } from "../state.js";

export async function loadHistory(testid, queue) {
  const root = $(`[data-testid="${testid}"]`);
  let hist;
  try {
    hist = await api("GET", `/api/stats/history${qs({ window: state.histWindow, queue })}`);
  } catch (exc) { return viewError("history", exc); }
  if (!root.isConnected || root.closest("[hidden]")) return undefined;
  let panel = state.panels[testid];
  if (!panel) {
    panel = new HistoryPanel(root, { testid, windows: state.meta.history_windows,
      onWindow: (w) => { state.histWindow = w; loadHistory(testid, queue); } });
    state.panels[testid] = panel;
  }
  panel.update(hist);
  return undefined;
}
