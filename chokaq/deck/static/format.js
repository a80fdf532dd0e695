// Numbers, times and durations as the Deck shows them (UTC throughout).

export const nf = new Intl.NumberFormat("en-US");
export const num = (n) => (n === null || n === undefined ? "–" : nf.format(n));
export function fmtTime(s) {
  if (!s) return "–";
  return s.replace("T", " ").replace(/\.\d+/, "").replace(/(Z|\+00:00)$/, "") + " UTC";
}
export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}
export function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}
export const plural = (n, word, many = word + "s") => `${num(n)} ${n === 1 ? word : many}`;
// A list's total: "10,000+" when the API stopped counting at its cap (total_is_lower_bound),
// the number read as "at least": a page costs the same at a million matches as at a thousand.
export const totalText = (n, lower) => (lower ? `${num(n)}+` : num(n));
export const pluralTotal = (n, lower, word, many = word + "s") =>
  lower ? `${totalText(n, lower)} ${many}` : plural(n, word, many);
export function firstLine(text, max = 90) {
  if (!text) return "";
  const line = String(text).split("\n").find((l) => l.trim()) || "";
  return line.length > max ? line.slice(0, max - 1) + "…" : line;
}
export function localToIso(v) {
  if (!v) return "";
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? "" : d.toISOString();
}
