// The confirmation dialog: one modal <dialog> built on demand (viewers never get one), with the
// count typed back when the action asks for it, and a free-text reason when it asks for one.
// Resolves false when dismissed; when confirmed, true, or { reason } if a reason was asked for.

import { h } from "./dom.js";

export function confirmDialog({ title, body, count, verb, danger, requireTyping, confirmLabel, samples, askReason }) {
  return new Promise((resolve) => {
    const phrase = `${verb} ${count}`;
    const input = requireTyping ? h("input", { id: "confirm-typed", type: "text", autocomplete: "off",
      spellcheck: "false", dataset: { testid: "confirm-input" } }) : null;
    const reason = askReason ? h("input", { id: "confirm-reason", type: "text", autocomplete: "off", maxlength: "500",
      dataset: { testid: "confirm-reason" } }) : null;
    const ok = h("button", { type: "submit", class: `btn ${danger ? "btn-danger" : "btn-primary"}`,
      dataset: { testid: "confirm-ok", mutating: "1" }, disabled: Boolean(requireTyping) }, confirmLabel);
    const dlg = h("dialog", { class: "dialog", testid: "confirm-dialog", "aria-labelledby": "confirm-title" },
      h("form", { method: "dialog", onsubmit: (ev) => {
        ev.preventDefault();
        if (ok.disabled) return;
        close(true);
      } },
      h("h2", { id: "confirm-title" }, title),
      body.map((p) => h("p", {}, p)),
      samples && samples.length ? h("details", { class: "samples" }, h("summary", {}, `Sample ids (${samples.length})`),
        h("ul", { class: "mono" }, samples.map((s) => h("li", {}, s)))) : null,
      reason ? h("div", { class: "field" }, h("label", { for: "confirm-reason" }, "Reason (recorded with the job)"), reason) : null,
      requireTyping ? h("div", { class: "field" },
        h("label", { for: "confirm-typed" }, "Type ", h("kbd", { testid: "confirm-phrase" }, phrase), " to confirm"),
        input) : null,
      h("div", { class: "dialog-actions" },
        h("button", { type: "button", class: "btn btn-ghost", dataset: { testid: "confirm-cancel" },
          onclick: () => close(false) }, "Cancel"), ok)));
    if (input) input.addEventListener("input", () => { ok.disabled = input.value.trim().toLowerCase() !== phrase; });
    dlg.addEventListener("cancel", (ev) => { ev.preventDefault(); close(false); });
    const opener = document.activeElement;
    function close(result) {
      dlg.close();
      dlg.remove();
      if (opener && document.contains(opener)) opener.focus();
      resolve(result && reason ? { reason: reason.value.trim() } : result);
    }
    document.body.append(dlg);
    dlg.showModal();
    (input || reason || ok).focus();
  });
}
