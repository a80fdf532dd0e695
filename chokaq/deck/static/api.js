// The admin API client: bearer token, the cross-site request header, JSON errors as ApiError.

import { state } from "./state.js";

// What to do when the API refuses the session (main.js shows the sign-in form).
let onRefused = () => {};
export function whenRefused(fn) {
  onRefused = fn;
}

export class ApiError extends Error {
  constructor(status, code, detail) {
    super(typeof detail === "string" ? detail : code);
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  // The API's cross-site check: a header no other site's page can send without a CORS preflight.
  if (method !== "GET") headers["X-ChokaQ-Request"] = "1";
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store" });
  } catch (exc) {
    throw new ApiError(0, "network", `cannot reach the admin API (${exc.message})`);
  }
  let data = null;
  try { data = await res.json(); } catch { /* empty or not JSON */ }
  if (!res.ok) {
    const err = new ApiError(res.status, (data && data.error) || `http_${res.status}`,
      data && data.detail !== undefined ? data.detail : res.statusText);
    if (res.status === 401 && path !== "/api/meta") onRefused("Your session was refused; sign in again.");
    throw err;
  }
  return data;
}

export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) u.set(k, v);
  const s = u.toString();
  return s ? `?${s}` : "";
}

// API error detail -> readable lines. 422 details are [{loc, msg}]; drop the transport part of loc.
export function errorLines(err) {
  const d = err instanceof ApiError ? err.detail : String(err);
  if (Array.isArray(d)) {
    return d.map((e) => {
      const loc = (e.loc || []).filter((p, i) => !(i === 0 && (p === "body" || p === "query")))
        .filter((p, i) => !(i === 0 && (p === "payload" || p === "payload_text")));
      return loc.length ? `${loc.join(".")}: ${e.msg}` : e.msg;
    });
  }
  return [typeof d === "string" && d ? d : `${err.code || "error"}`];
}
