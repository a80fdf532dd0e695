// One debounced reload of what is on screen, asked for by events, polls and finished actions. What
// "what is on screen" means is main.js's to say (setRefresher): views and the inspector ask here
// without importing each other.

let refresher = async () => {};
export function setRefresher(fn) {
  refresher = fn;
}

let refreshTimer = null;
let refreshing = false;
let refreshAgain = false;

export function scheduleRefresh(delay = 250) {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(runRefresh, delay);
}

async function runRefresh() {
  if (refreshing) { refreshAgain = true; return; }
  refreshing = true;
  try {
    await refresher();
  } finally {
    refreshing = false;
    if (refreshAgain) { refreshAgain = false; scheduleRefresh(); }
  }
}
