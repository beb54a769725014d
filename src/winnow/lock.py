"""One writer at a time per output: an exclusive lock on a hidden ``.NAME.lock`` beside it.

The lock is :mod:`filelock`'s (``flock`` on Unix, ``LockFileEx`` on Windows), so it works on every
platform Winnow runs on. It belongs to the open file, so the operating system releases it when the
holder exits, however it exits (``kill -9`` included): a crashed writer never leaves an output
locked. The holder writes its pid into the lock file, so a second writer is told which process is
in its way. :func:`output_lock` refuses at once (two ``winnow index --out D`` or ``winnow eval --out
R`` must not both write); ``wait=True`` queues instead (model files: the second process waits, then
finds the work done). The file is deleted on release, while still held; filelock notices when the
inode it locked is no longer the path's (a holder deleted it meanwhile) and opens the path again,
so two processes never hold "the" lock on two different files. A process that already holds a lock
may take it again (a command locks its output early, before its slow part, and the writer it calls
locks it too).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import WinnowError
from .writable import cannot_write, make_parent

_HELD: dict[Path, int] = {}  # lock files this process holds, with how many blocks hold each


def lock_path(out: Path) -> Path:
    """The lock file of ``out``: beside it, since ``out`` itself may be replaced by a rename."""
    return out.parent / f".{out.name}.lock"


def _write_pid(handle: int) -> None:
    """filelock's ``on_acquired``: the holder's pid, for the message a second writer gets."""
    os.ftruncate(handle, 0)
    os.pwrite(handle, f"{os.getpid()}\n".encode("ascii"), 0)


@contextmanager
def output_lock(out: str | Path, *, wait: bool = False) -> Iterator[None]:
    """Hold ``out``'s lock for the block; without ``wait``, a held lock is a :class:`WinnowError`
    saying which process holds it."""
    out = Path(out).expanduser()
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
    import filelock  # here, not at the top: `import winnow` stays free of third-party imports

    # Not thread-local: the lock is the process's (a command's worker threads write under it too);
    # no soft fallback: a filesystem without flock gets a clear error, not a lock that a kill -9 leaves.
    lock = filelock.FileLock(path, timeout=-1 if wait else 0, thread_local=False, fallback_to_soft=False,
                             on_acquired=_write_pid)
    try:
        lock.acquire()
    except filelock.Timeout:
        try:
            holder = path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            holder = ""
        by = f"process {holder}" if holder.isdigit() else "another process"
        raise WinnowError(f"{out} is in use by {by}, which is writing it (lock {path})",
                          "wait for it to finish, or choose another --out") from None
    except OSError as exc:
        raise cannot_write(out, exc) from exc
    _HELD[key] = 1
    try:
        yield
    finally:
        del _HELD[key]
        try:
            path.unlink(missing_ok=True)  # while still holding it: see the module notes
        except OSError:
            pass  # Windows: an open file cannot be deleted; filelock removes it after the release
        lock.release(force=True)


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
