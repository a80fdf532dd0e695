"""Fixtures the integration modules share."""

from tests.integration.test_worker import run_worker

__all__ = ["run_worker"]
