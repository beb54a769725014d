"""Joining a Ray cluster, for every command that shares work out over one (``winnow eval --engine
ray``, ``winnow index --dense --engine ray``): a clear error for an address nobody answers at, and
Ray's token authentication handled as a user expects.

Ray's token authentication (Ray 2.52 and later; docs.ray.io, "Ray token authentication"): a cluster
started with ``RAY_AUTH_MODE=token``, or by ``ray start`` on a machine that holds ``~/.ray/auth_token``
(which any earlier local ``ray.init()`` writes), refuses a driver that sends no token, and a driver
whose ``RAY_AUTH_MODE`` is unset sends none. So, as ``ray start`` does for the head, the driver turns
token mode on when ``RAY_AUTH_MODE`` is unset and a token is at hand, in Ray's order of precedence:
``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, ``~/.ray/auth_token``
(:func:`token_auth_mode`). ``RAY_AUTH_MODE=disabled`` keeps it off.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from types import ModuleType

from .errors import WinnowError
from .extras import import_extra

CONNECT_SECONDS = 5
#: Ray's token authentication settings (environment variables read by every Ray process).
AUTH_MODE, AUTH_TOKEN, AUTH_TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"
TOKEN_HINT = ("the cluster uses Ray's token authentication: give the driver its token as RAY_AUTH_TOKEN (or the file "
              "RAY_AUTH_TOKEN_PATH names); otherwise ~/.ray/auth_token is sent, which may be another cluster's")


def check_reachable(address: str) -> None:
    """Fail in seconds when nothing listens at a ``HOST:PORT`` address (``ray.init`` retries for minutes)."""
    host, colon, port = address.rpartition(":")
    if not colon or "://" in address or not port.isdigit():
        return  # ray://…, auto, local: Ray's own forms, left to Ray
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise WinnowError(f"--ray-address {address}: no Ray cluster answers there ({exc.strerror or exc})",
                          "start one with `ray start --head --port PORT` and give HOST:PORT") from exc


def token_auth_mode(environ: dict[str, str] | os._Environ[str], home: Path) -> str | None:
    """The ``RAY_AUTH_MODE`` the driver should join with: "token" when the user left it unset and a token
    is at hand (see the module notes), else None (the user's setting, or none, stands)."""
    if environ.get(AUTH_MODE):
        return None
    if environ.get(AUTH_TOKEN) or environ.get(AUTH_TOKEN_PATH) or (home / ".ray" / "auth_token").is_file():
        return "token"
    return None


def refused_token(exc: BaseException) -> bool:
    """Whether Ray refused the driver's token (or its lack of one) somewhere in ``exc``'s causes."""
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def connect(address: str | None, feature: str) -> ModuleType:
    """Join the Ray cluster at ``address`` (``None``: ``RAY_ADDRESS``, or a new one-machine cluster)
    for ``feature`` (named when the ``ray`` extra is missing); returns the ``ray`` module."""
    mode = token_auth_mode(os.environ, Path.home())
    if mode:
        os.environ[AUTH_MODE] = mode  # before Ray reads its configuration (on import and init)
    ray = import_extra("ray", "ray", feature)
    if address:
        check_reachable(address)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, configure_logging=True)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError or its AuthenticationError
        where = address or "RAY_ADDRESS / a new local cluster"
        if refused_token(exc):
            raise WinnowError(f"the Ray cluster at {where} refused this driver's token", TOKEN_HINT) from exc
        if not isinstance(exc, (ConnectionError, RuntimeError, ValueError)):
            raise
        raise WinnowError(f"cannot join the Ray cluster at {where}: {exc}",
                          "start it with `ray start --head` and give its address as --ray-address HOST:PORT") from exc
    return ray


def worker_error(exc: BaseException) -> str:
    """What a worker raised, as one line: a WinnowError's own message, else the last line of Ray's."""
    cause = getattr(exc, "cause", None)  # a RayTaskError carries the exception the task raised
    if isinstance(cause, WinnowError):
        return str(cause)
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
