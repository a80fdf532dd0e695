"""The admin HTTP API: ``create_api(chokaq_app)`` returns a FastAPI app."""

from chokaq.api.app import create_api

__all__ = ["create_api"]
