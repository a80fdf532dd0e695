"""The core runtime: the app and its handlers, workers, heartbeats, retries and the recovery sweep."""
