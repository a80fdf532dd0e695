// The audit log: operator actions, newest first, filtered by actor or job id.

import { api, qs } from "../api.js";
import { $, button, h, replaceKeepingFocus, table, td, tdn } from "../dom.js";
import { viewError } from "../feedback.js";
import { fmtTime, num, pluralTotal, totalText } from "../format.js";
import { openInspector } from "../inspector.js";
import { state } from "../state.js";

export async function loadAudit() {
  const a = state.audit;
  let data;
  try {
    data = await api("GET", `/api/audit${qs({ ...a.filters, page: a.page, page_size: a.page_size })}`);
  } catch (exc) { return viewError("audit", exc); }
  a.data = data;
  const rows = data.items.map((x) => h("tr", { testid: "audit-row" },
    td(fmtTime(x.at_utc), "nowrap"), td(x.actor), td(x.role), td(x.action, "mono"), tdn(num(x.job_count)),
    td(h("span", { class: "id-list" }, x.job_ids.slice(0, 3).map((id) => button(id, () => openInspector(id),
      { kind: "link mono", fkey: `audit-${x.id}-${id}` })), x.job_ids.length > 3 ? ` +${num(x.job_ids.length - 3)}` : "")),
    td(x.details ? JSON.stringify(x.details).slice(0, 200) : "–", "small")));
  replaceKeepingFocus($('[data-testid="audit-table"]'),
    table(["When", "Actor", "Role", "Action", "Jobs", "Job ids", "Details"], rows,
      { empty: "No operator actions yet.", caption: "Audit log" }));
  const lower = data.total_is_lower_bound;
  const pages = Math.max(1, Math.ceil(data.total / a.page_size));
  const more = lower && data.items.length === a.page_size;
  replaceKeepingFocus($('[data-testid="audit-pager"]'),
    h("span", { class: "muted" }, `${pluralTotal(data.total, lower, "entry", "entries")} · page ${a.page} of ${totalText(pages, lower)}`),
    button("‹ Prev", () => { a.page -= 1; loadAudit(); }, { kind: "btn-sm", disabled: a.page <= 1, fkey: "a-prev" }),
    button("Next ›", () => { a.page += 1; loadAudit(); }, { kind: "btn-sm", disabled: a.page >= pages && !more, fkey: "a-next" }));
  return undefined;
}
