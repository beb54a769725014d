"""Writing a folder so that it appears whole or not at all: build in a temporary sibling, then rename.

A rename within one directory is atomic on POSIX file systems, so readers of ``out`` see either the
old index or the new one, never a half-written folder. A killed process leaves at most a hidden
``.NAME.tmp-*`` sibling, which is never mistaken for an index.
"""

from __future__ import annotations

import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import WinnowError

# Any of these in a folder marks it as a (possibly damaged) index that --overwrite may replace.
INDEX_MARKERS = ("manifest.json", "passages.jsonl", "bm25")


def sibling(out: Path, kind: str) -> Path:
    """A hidden, unique name next to ``out``: same directory, so the final rename stays atomic."""
    return out.parent / f".{out.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def check_replaceable(out: Path, *, overwrite: bool) -> None:
    """Refuse to build into ``out`` unless it is free, or ``overwrite`` and ``out`` is an old index.

    ``--overwrite`` deletes the old folder, so it must not delete a folder that is not an index
    (a mistyped ``--out ~/Documents`` would be a disaster).
    """
    if not out.exists():
        return
    if not overwrite:
        raise WinnowError(f"{out} already exists", "pass --overwrite to replace it, or choose another --out")
    empty = out.is_dir() and not any(out.iterdir())
    looks_like_index = out.is_dir() and any((out / marker).exists() for marker in INDEX_MARKERS)
    if not (empty or looks_like_index):
        raise WinnowError(f"{out} exists and is not a Winnow index, so --overwrite will not replace it",
                          "choose another --out, or remove it yourself if it is really unwanted")


@contextmanager
def atomic_folder(out: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary folder next to ``out``; on success it replaces ``out``, on failure it is removed."""
    out = Path(out)
    check_replaceable(out, overwrite=overwrite)
    with staged_folder(out) as temp:
        yield temp


@contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """Yield a temporary folder next to ``out`` that replaces ``out`` (whatever is there) on success.

    For callers that decided themselves that ``out`` may be replaced, such as the ``dense/``
    folder inside an index; :func:`atomic_folder` checks first.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = sibling(out, "tmp")
    temp.mkdir()
    try:
        yield temp
        move_into_place(temp, out)
    except BaseException:
        # Also on KeyboardInterrupt. ignore_errors: a cleanup problem must not hide the real error,
        # which is re-raised either way.
        shutil.rmtree(temp, ignore_errors=True)
        raise


def move_into_place(temp: Path, out: Path) -> None:
    """Rename ``temp`` to ``out``; an existing ``out`` is moved aside first and deleted last."""
    if not out.exists():
        os.replace(temp, out)
        return
    old = sibling(out, "old")
    os.replace(out, old)
    try:
        os.replace(temp, out)
    except OSError:
        os.replace(old, out)  # put the old index back: a failed rebuild must not lose it
        raise
    try:
        shutil.rmtree(old)
    except OSError as exc:
        raise WinnowError(f"the new index is in {out}, but the old one, moved aside to {old}, could not be "
                          f"deleted: {exc}", f"delete {old} by hand") from exc
