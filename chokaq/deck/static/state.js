// The one shared state object, and what the signed-in role may do. The words and numbers (roles,
// statuses, failure reasons, limits) are GET /api/meta's, kept in state.meta: the Deck declares none.

export const TOKEN_KEY = "chokaq.deck.token";

export const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  meta: null,
  view: null,
  stats: null,
  statsSig: "",
  queues: [],
  schedulesSig: "",
  breakersSig: "",
  workersSig: "",
  workerFocus: null, // the worker whose jobs #/workers/ID shows
  lists: {},
  audit: { filters: {}, page: 1, page_size: null, data: null }, // page_size: /api/meta's default
  insp: null, // {id, job, schema, audit, dirty, errors}
  live: null,
  histWindow: null, // the charts' window, shared by the Overview and the queue pages
  queueFocus: null, // the queue whose page (#/queues/NAME) shows its history
  panels: {}, // testid -> HistoryPanel
};
export const role = () => (state.meta ? state.meta.role : "viewer");
// The API's limits (payload size, bulk bounds, page sizes, queue settings), as /api/meta served them.
export const limits = () => state.meta.limits;

const roleInfo = (name) => (state.meta ? state.meta.roles.find((r) => r.name === name) : undefined);

// May the signed-in role call this endpoint? ``endpoint`` is "METHOD /path" with the route's own
// template (e.g. "PATCH /api/dlq/{job_id}"), as /api/meta lists it for each role.
export function may(endpoint) {
  const r = roleInfo(role());
  return Boolean(r && r.may.includes(endpoint));
}

// At least this role, by /api/meta's ranks: for a rule the API checks inside an endpoint rather
// than at its door (force on an edit needs admin).
export function atLeast(needed) {
  const mine = roleInfo(role());
  const want = roleInfo(needed);
  return Boolean(mine && want && mine.rank >= want.rank);
}
