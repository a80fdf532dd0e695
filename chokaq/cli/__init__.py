"""The ``chokaq`` command line."""
