"""Winnow as a service: an HTTP API (ask, rerank, search, traces) and a web inspector.

``Service`` (engine.py) holds the loaded index and models and turns requests into plans;
``create_app`` (app.py) puts FastAPI routes in front of it; `winnow serve` runs it under uvicorn.
"""

from .app import create_app
from .engine import Service
from .limits import Limits

__all__ = ["Limits", "Service", "create_app"]
