"""Big-file plumbing for models: hashing with a progress bar, remembered checksums, and joins
that appear under their final name only when complete (:mod:`winnow.atomic`), made by one process
at a time (:mod:`winnow.lock`). Hub downloads are huggingface_hub's (:mod:`.hub`).

Nothing here knows the registry; failures surface as ``OSError`` for the
caller to turn into a :class:`~winnow.errors.ModelError` that names the model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from ..atomic import remove_stale_siblings, staged_file, write_json
from ..paths import cache_root
from ..progress import progress_bar

CHUNK_BYTES = 8 * 1024 * 1024


def model_cache_dir() -> Path:
    """Where joined and downloaded models and remembered checksums live (not created here)."""
    return cache_root() / "models"


def read_chunks(path: Path) -> Iterator[bytes]:
    """A file's bytes in CHUNK_BYTES pieces: the one place model bytes are read."""
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk


@contextmanager
def byte_progress(label: str, total: int | None, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A transient byte progress bar on stderr; yields the function that advances it."""
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    with progress_bar(*columns, console=Console(stderr=True), transient=True, disable=not enabled) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def hash_files(paths: Iterable[Path], *, sink: IO[bytes] | None = None, label: str, total: int | None,
               progress: bool) -> str:
    """The sha256 of the files' bytes one after another, copying them into ``sink`` when given."""
    digest = hashlib.sha256()
    with byte_progress(label, total, progress) as advance:
        for path in paths:
            for chunk in read_chunks(path):
                digest.update(chunk)
                if sink is not None:
                    sink.write(chunk)
                advance(len(chunk))
    return digest.hexdigest()


def checksum_record(path: Path) -> Path:
    """Where the remembered sha256 of a file used in place lives: one small JSON per file, so
    processes never rewrite each other's records."""
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return model_cache_dir() / "checksums" / f"{key}.json"


def remembered_sha256(path: Path, record: Path) -> str | None:
    """The sha256 in ``record`` if it was taken from ``path`` as it is now (same absolute path, size
    and mtime_ns), else None. A missing or unreadable record only means hashing again."""
    try:
        stat = path.stat()
        saved = json.loads(record.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(saved, dict):
        return None
    unchanged = (saved.get("path") == str(path.resolve()) and saved.get("size") == stat.st_size
                 and saved.get("mtime_ns") == stat.st_mtime_ns)
    sha = saved.get("sha256")
    return sha if unchanged and isinstance(sha, str) else None


def remember(path: Path, record: Path, sha256: str) -> None:
    """Write ``record`` for ``path`` as it is now (written whole or not at all)."""
    stat = path.stat()
    write_json(record, {"path": str(path.resolve()), "sha256": sha256, "size": stat.st_size,
                        "mtime_ns": stat.st_mtime_ns})


@contextmanager
def _temporary_sibling(target: Path) -> Iterator[tuple[IO[bytes], Path]]:
    """An open file under a hidden name next to ``target``, renamed to ``target`` on success unless
    deleted meanwhile. Call with the lock held; leftovers of killed writers go first."""
    remove_stale_siblings(target)
    with staged_file(target) as temp, temp.open("xb") as handle:
        yield handle, temp


def join_verified(parts: list[Path], target: Path, *, expected_sha256: str, label: str, total: int,
                  progress: bool) -> str:
    """Stream ``parts`` into a temporary file next to ``target`` while hashing, and rename it to
    ``target`` only if its sha256 is ``expected_sha256``. Returns the sha256 of the joined bytes;
    whatever goes wrong, no temporary file is left behind. Hold ``output_lock(target, wait=True)``
    around it."""
    with _temporary_sibling(target) as (handle, temp):
        sha = hash_files(parts, sink=handle, label=label, total=total, progress=progress)
        if sha != expected_sha256:
            temp.unlink()  # not the bytes the registry names: keep nothing
    return sha
