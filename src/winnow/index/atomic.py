"""Writing a folder so that it appears whole or not at all: build in a temporary sibling, then rename."""

from __future__ import annotations

import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import WinnowError


@contextmanager
def atomic_folder(out: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary folder next to ``out``; on success it replaces ``out``, on failure it is removed.

    A killed process leaves at most a hidden ``.NAME.tmp-*`` sibling, never a half-written ``out``.
    """
    out = Path(out)
    if out.exists() and not overwrite:
        raise WinnowError(f"{out} already exists", "pass --overwrite to replace it, or choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = out.parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    temp.mkdir()
    try:
        yield temp
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    if out.exists():
        # Swap: move the old folder aside first so `out` is never missing a complete index for long.
        old = out.parent / f".{out.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
        os.replace(out, old)
        os.replace(temp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(temp, out)
