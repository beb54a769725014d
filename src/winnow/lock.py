"""One writer at a time per output: an exclusive ``flock`` on a hidden ``.NAME.lock`` beside it.

The lock belongs to the open file, so the operating system releases it when the holder exits,
however it exits (``kill -9`` included): a crashed writer never leaves an output locked. The holder
writes its pid into the lock file, so a second writer is told which process is in its way.
:func:`output_lock` refuses at once (two ``winnow index --out D`` or ``winnow eval --out R`` must not
both write); ``wait=True`` queues instead (model files: the second process waits, then finds the
work done). The file is deleted on release; an opener that locked a file deleted meanwhile notices
(its inode is no longer the path's) and starts again, so two processes never hold "the" lock on two
different files. A process that already holds a lock may take it again (a command locks its
output early, before its slow part, and the writer it calls locks it too). Windows has no
``flock``: there the lock is a no-op.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import WinnowError
from .writable import cannot_write, make_parent

_HELD: dict[Path, int] = {}  # lock files this process holds, with how many blocks hold each


def lock_path(out: Path) -> Path:
    """The lock file of ``out``: beside it, since ``out`` itself may be replaced by a rename."""
    return out.parent / f".{out.name}.lock"


@contextmanager
def output_lock(out: str | Path, *, wait: bool = False) -> Iterator[None]:
    """Hold ``out``'s lock for the block; without ``wait``, a held lock is a :class:`WinnowError`
    saying which process holds it."""
    out = Path(out).expanduser()
    if sys.platform == "win32":
        yield
        return
    import fcntl

    path = lock_path(out)
    key = path.absolute()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    make_parent(out)
    while True:
        try:
            handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise cannot_write(out, exc) from exc
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(handle, 32, 0).decode("ascii", "replace").strip()
            os.close(handle)
            by = f"process {holder}" if holder.isdigit() else "another process"
            raise WinnowError(f"{out} is in use by {by}, which is writing it (lock {path})",
                              "wait for it to finish, or choose another --out") from None
        if _same_file(handle, path):
            break
        os.close(handle)  # locked a file its last holder had already deleted: take the new one
    _HELD[key] = 1
    try:
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        del _HELD[key]
        path.unlink(missing_ok=True)  # while still holding it: see the module notes
        os.close(handle)


def _same_file(handle: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(handle).st_ino
    except FileNotFoundError:
        return False


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine and has not exited (a zombie has exited)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    except OSError:
        return True  # cannot tell: assume alive, so its files are left alone
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"
