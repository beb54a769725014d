"""Where Winnow keeps its files: ``$WINNOW_CACHE_DIR``, else ``$XDG_CACHE_HOME/winnow``, else
``~/.cache/winnow``. Joined model files go in ``models/``, the LLM call cache in ``llm-calls.sqlite``."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    if os.environ.get("WINNOW_CACHE_DIR"):
        return Path(os.environ["WINNOW_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "winnow"


def llm_cache_path() -> Path:
    return cache_root() / "llm-calls.sqlite"
