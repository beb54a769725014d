"""Model files from the Hugging Face hub, through ``huggingface_hub`` (the 'hub' extra).

The library resumes an interrupted download and keeps files in the cache every Hugging Face tool
shares (``HF_HOME``, ``HF_HUB_CACHE``), so a model fetched by transformers or ``hf download`` is not
fetched again. Winnow adds one thing: an offline machine is told at once, in one line naming the
model and what to do. huggingface_hub on its own retries an unreachable hub for about 23 s (five
backoffs, a warning each) before it gives up or falls back to its cache; here one quick request
decides, and an unreachable hub (or ``HF_HUB_OFFLINE=1``, which skips even that request) means the
cache alone is asked. ``WINNOW_HF_ENDPOINT`` replaces https://huggingface.co (a mirror); ``HF_TOKEN``
is sent for gated repositories by huggingface_hub itself.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

from ..errors import ModelError
from ..extras import import_extra

DEFAULT_HF_ENDPOINT = "https://huggingface.co"
#: The one request that tells an offline machine at once: any HTTP answer means reachable.
HUB_PROBE_SECONDS = 10.0
OFFLINE_HINT = "HF_HUB_OFFLINE=1 skips the hub check when offline"


def hub_endpoint() -> str:
    return os.environ.get("WINNOW_HF_ENDPOINT", DEFAULT_HF_ENDPOINT).rstrip("/")


def hub_library(feature: str, *, alternative: str) -> ModuleType:
    """``huggingface_hub``, or one line naming the 'hub' extra that installs it."""
    return import_extra("huggingface_hub", "hub", feature, alternative=alternative)


def offline_reason(hub: ModuleType, endpoint: str) -> str | None:
    """Why the hub is not to be asked (``HF_HUB_OFFLINE`` set, or nothing answers at ``endpoint``),
    or None when it answers: any HTTP answer, even an error status, means reachable."""
    # A submodule huggingface_hub's lazy top level does not load by itself.
    constants = importlib.import_module(f"{hub.__name__}.constants")
    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes"):
        return "HF_HUB_OFFLINE is set"
    import httpx  # here, not at the top: every method imports this module, few runs ask the hub

    try:
        httpx.head(endpoint, timeout=HUB_PROBE_SECONDS)  # proxies from the environment honoured
    except httpx.TransportError as exc:
        return f"{endpoint} cannot be reached ({type(exc).__name__}: {exc})"
    return None


def fetch(what: str, repo: str, *, filename: str | None = None, patterns: list[str] | None = None,
          alternative: str) -> Path:
    """One file of ``repo`` (``filename``), or a snapshot folder of its files matching ``patterns``,
    from the hub or, offline, from the shared cache. ``what`` names the model in the error line;
    ``alternative`` says what an offline user can use instead. Raises :class:`ModelError`."""
    hub = hub_library(what, alternative=alternative)
    endpoint = hub_endpoint()
    offline = offline_reason(hub, endpoint)
    try:
        if filename is not None:
            return Path(hub.hf_hub_download(repo, filename, endpoint=endpoint, local_files_only=offline is not None))
        return Path(hub.snapshot_download(repo, allow_patterns=patterns, endpoint=endpoint,
                                          local_files_only=offline is not None))
    except Exception as exc:  # offline, unknown repo, gated, disk full: one line, whichever it was
        # huggingface_hub's own messages run to several lines: the first one is the reason.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        if offline is not None:
            skip = "" if offline.startswith("HF_HUB_OFFLINE") else f"; {OFFLINE_HINT}"
            raise ModelError(f"{what} is not in the Hugging Face cache and cannot be downloaded: {offline}",
                             f"go online once (it is cached afterwards), or {alternative}{skip}") from exc
        raise ModelError(f"{what} cannot be downloaded from {endpoint} ({type(exc).__name__}: {first})",
                         f"check the name and your access (HF_TOKEN for gated models), or {alternative}") from exc
