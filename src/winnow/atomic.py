"""Files and folders that appear whole or not at all: the one place Winnow renames anything into place.

* A file is written under a hidden sibling name, flushed to the disk (fsync) and renamed over its
  final name (:func:`staged_file`, :func:`write_text`, :func:`write_lines`, :func:`write_json`).
  A rename within one folder is atomic on POSIX file systems, so a reader, or a process killed
  half-way, sees the old file or the new one, never a truncated one.
* A folder (an index, a benchmark build, a training blend) is built in a hidden sibling and renamed
  into place (:func:`staged_folder`); an existing folder is moved aside first and deleted last, so
  a failed rebuild never loses the old one. :func:`atomic_folder` also takes the output's lock
  (:mod:`winnow.lock`), removes what killed builders left behind and applies the overwrite guard.
* Hidden siblings are named ``.NAME.tmp-PID-HEX`` (being written) or ``.NAME.old-PID-HEX`` (moved
  aside): the writer's pid lets a later writer tell a dead writer's leftovers from a live one's
  work (:func:`remove_stale_siblings`).
* :func:`check_replaceable` is the overwrite guard: ``--overwrite`` replaces an earlier output of
  the same kind, never an unrelated folder (a mistyped ``--out ~/Documents`` must not delete it).
* A folder that cannot be written (read-only, or a file where a folder should be) is one clear
  :class:`~winnow.errors.WinnowError` naming the path, not a traceback (:mod:`winnow.writable`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import WinnowError
from .lock import output_lock, process_alive
from .writable import cannot_write, make_parent

TEMP, OLD = "tmp", "old"
SIBLING = re.compile(r"\.(?P<kind>tmp|old)-(?P<pid>\d+)-[0-9a-f]{8}")


def sibling(path: Path, kind: str) -> Path:
    """A hidden, unique name next to ``path``: same folder, so the final rename stays atomic."""
    return path.parent / f".{path.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


# --- files ------------------------------------------------------------------------------------------

@contextmanager
def staged_file(path: str | Path) -> Iterator[Path]:
    """Yield a hidden name next to ``path`` to write; on success it is fsynced and renamed to ``path``.

    Delete the yielded file inside the block to leave ``path`` as it was (a download whose checksum
    is wrong). On an exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path).expanduser()
    make_parent(path)
    temp = sibling(path, TEMP)
    try:
        yield temp
        if temp.exists():
            fsync_file(temp)  # the bytes reach the disk before the final name says "complete"
            os.replace(temp, path)
            fsync_folder(path.parent)
    except BaseException:
        temp.unlink(missing_ok=True)  # also on KeyboardInterrupt: leave no stray temp file behind
        raise


def write_bytes(path: str | Path, data: bytes) -> None:
    with staged_file(path) as temp:
        with _create(temp, "wb", path) as stream:
            stream.write(data)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` as UTF-8, exactly as given."""
    write_bytes(path, text.encode("utf-8"))


def write_lines(path: str | Path, lines: Iterable[str]) -> int:
    """Write ``lines`` (each without its newline) as UTF-8; return how many were written."""
    count = 0
    with staged_file(path) as temp:
        with _create(temp, "w", path) as stream:
            for line in lines:
                stream.write(line + "\n")
                count += 1
    return count


def write_json(path: str | Path, data: Any) -> None:
    """``data`` as indented UTF-8 JSON with a final newline."""
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _create(temp: Path, mode: str, path: str | Path) -> Any:
    try:
        if "b" in mode:
            return temp.open(mode)
        return temp.open(mode, encoding="utf-8", newline="\n")
    except OSError as exc:
        raise cannot_write(Path(path), exc) from exc


def fsync_file(path: Path) -> None:
    with path.open("rb") as stream:
        os.fsync(stream.fileno())


def fsync_folder(folder: Path) -> None:
    """Make a rename inside ``folder`` durable; a no-op where folders cannot be opened (Windows)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the rename itself has happened
    finally:
        os.close(handle)


# --- folders ----------------------------------------------------------------------------------------

@contextmanager
def atomic_folder(out: str | Path, *, overwrite: bool, looks_ours: Callable[[Path], bool], what: str,
                  report: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Yield a temporary folder that replaces ``out`` when the block succeeds, under ``out``'s lock.

    Before building: takes the lock (a second writer gets "in use by process N"), removes the
    leftovers of killed writers of ``out`` (each removal described to ``report``, by default on
    stderr: deleting anything in the user's folders is never silent), and applies
    :func:`check_replaceable` with ``looks_ours`` and ``what``.
    """
    out = Path(out).expanduser()
    with output_lock(out):
        for line in remove_stale_siblings(out):
            (report or _to_stderr)(line)
        check_replaceable(out, overwrite=overwrite, looks_ours=looks_ours, what=what)
        with staged_folder(out) as temp:
            yield temp


@contextmanager
def staged_folder(out: str | Path) -> Iterator[Path]:
    """Yield a temporary folder next to ``out`` that replaces ``out`` (whatever is there) on success.

    For callers that decided themselves that ``out`` may be replaced (the ``dense/`` folder inside
    an index, a model cache entry under its own lock); :func:`atomic_folder` checks first.
    """
    out = Path(out).expanduser()
    make_parent(out)
    temp = sibling(out, TEMP)
    try:
        temp.mkdir()
    except OSError as exc:
        raise cannot_write(out, exc) from exc
    try:
        yield temp
        for file in temp.rglob("*"):
            if file.is_file() and not file.is_symlink():
                fsync_file(file)
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
        fsync_folder(out.parent)
        return
    old = sibling(out, OLD)
    os.replace(out, old)
    try:
        os.replace(temp, out)
    except OSError:
        os.replace(old, out)  # put the old folder back: a failed rebuild must not lose it
        raise
    fsync_folder(out.parent)
    try:
        shutil.rmtree(old)
    except OSError as exc:
        raise WinnowError(f"the new {out} is in place, but the old one, moved aside to {old}, could not be "
                          f"deleted: {exc}", f"delete {old} by hand") from exc


def remove_stale_siblings(out: Path) -> list[str]:
    """Remove the hidden siblings of ``out`` that writers killed mid-way left; describe each removal.

    A sibling is stale when the process named in it is gone: a live writer's work is never touched
    (call this holding ``out``'s lock, so no live writer of ``out`` can be starting either). A
    writer killed between moving the old ``out`` aside and renaming the new one into place leaves
    no ``out`` at all: then the old one is put back rather than deleted.
    """
    done = []
    prefix = f".{out.name}."
    for path in sorted(out.parent.glob(f"{glob_escape(prefix)}*")) if out.parent.is_dir() else []:
        match = SIBLING.fullmatch(path.name[len(prefix) - 1:])
        if match is None or process_alive(int(match["pid"])):
            continue
        if match["kind"] == OLD and not out.exists():
            os.replace(path, out)
            done.append(f"restored {out} from {path.name}, which an interrupted rebuild had moved aside")
            continue
        size = tree_bytes(path)
        try:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        except OSError as exc:
            done.append(f"could not remove {path}, left by interrupted process {match['pid']}: {exc}")
            continue
        done.append(f"removed {path} ({size / 1e6:.1f} MB), left by interrupted process {match['pid']}")
    return done


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def tree_bytes(path: Path) -> int:
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size
    return sum(file.lstat().st_size for file in path.rglob("*") if file.is_file())


# --- the overwrite guard -----------------------------------------------------------------------------

def check_replaceable(out: Path, *, overwrite: bool, looks_ours: Callable[[Path], bool], what: str) -> None:
    """Refuse to write ``out`` unless it is free, or ``overwrite`` and ``out`` is empty or ``looks_ours``.

    ``what`` names the kind of output in the refusal ("a Winnow index").
    """
    if not out.exists():
        return
    if not overwrite:
        raise WinnowError(f"{out} already exists", "pass --overwrite to replace it, or choose another --out")
    empty = out.is_dir() and not any(out.iterdir())
    if not (empty or (out.is_dir() and looks_ours(out))):
        raise WinnowError(f"{out} exists and is not {what}, so --overwrite will not replace it",
                          "choose another --out, or remove it yourself if it is really unwanted")
