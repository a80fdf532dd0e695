// Element helpers. Everything user- or job-supplied reaches the DOM as text nodes or attribute values
// set one by one (never innerHTML), so nothing a job holds can become markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "testid") el.dataset.testid = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "value") el.value = v;
    else if (k === "checked") el.checked = Boolean(v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}
export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

export function button(label, onclick, { kind = "", testid, mutating = false, title, disabled, fkey } = {}) {
  return h("button", {
    type: "button", class: `btn ${kind}`.trim(), onclick, testid, title, disabled,
    dataset: { ...(mutating ? { mutating: "1" } : {}), ...(fkey ? { fkey } : {}) },
  }, label);
}

// Replace a container's children, keeping keyboard focus on the "same" control if it survives.
export function replaceKeepingFocus(container, ...nodes) {
  const key = document.activeElement && container.contains(document.activeElement)
    ? document.activeElement.dataset.fkey : null;
  container.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
  if (key) {
    const again = container.querySelector(`[data-fkey="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}
const NUMERIC_HEADERS = new Set(["Pending", "Processing", "DLQ", "Succeeded", "Failed", "Attempts", "Priority",
  "Duration", "Jobs", "Count", "Jobs/min", "Failure rate"]);

export function table(headers, rows, { testid, empty = "Nothing here.", caption } = {}) {
  return h("table", { class: "table", testid },
    caption ? h("caption", { class: "sr-only" }, caption) : null,
    h("thead", {}, h("tr", {}, headers.map((x) => (x instanceof Node ? h("th", { scope: "col" }, x)
      : h("th", { scope: "col", class: NUMERIC_HEADERS.has(x) ? "num" : null }, x))))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: headers.length, class: "empty" }, empty))));
}
export const td = (v, cls) => h("td", { class: cls || null }, v);
export const tdn = (v) => h("td", { class: "num" }, v);
