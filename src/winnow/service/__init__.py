"""Winnow as a service: the engine that answers requests, and the front doors that put it on a wire.

``Service`` (engine.py) holds the loaded index and models and turns requests into plans, with the
limits of limits.py; runner.py runs a plan (caches, then the model's worker, under a deadline).
Two front doors sit on it: ``create_app`` (app.py) puts FastAPI routes in front of it for
`winnow serve` (the serve extra), and mcp_server.py serves it as Model Context Protocol tools over
stdio for `winnow mcp` (the mcp extra). The engine itself needs only pydantic and starlette, which
either extra brings, so each front door imports its own framework and nothing of the other's.
"""

from ..extras import require_one_of

require_one_of(("serve", "mcp"), "winnow.service")

from .engine import Service  # noqa: E402  (after the check, which names the extra when it fails)
from .limits import Limits  # noqa: E402

__all__ = ["Limits", "Service"]
