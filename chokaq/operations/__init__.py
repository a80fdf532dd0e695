"""Operator actions, once for every surface: the admin API, the CLI and the Functions call these.

* :mod:`chokaq.operations.service`: :class:`~chokaq.operations.service.Operations`, the actions
  (enqueue, edit, cancel, resurrect, purge, queue changes) with their audit and their events;
* :mod:`chokaq.operations.rules`: the checks they share (zombie-timeout floor, failure reasons,
  loopback hosts); the settings use them too;
* :mod:`chokaq.operations.job_out`: the one public job shape (``JobOut.from_record``).

Nothing is imported here: ``chokaq.settings`` imports the rules, and the service imports the app
that imports the settings.
"""
