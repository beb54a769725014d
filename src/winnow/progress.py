"""Progress for a person at a terminal, and for a log: the one place a progress display is made.

At a terminal, :func:`progress_bar` is rich's live bar. Where the output is not a terminal (a pipe,
a file, a CI log, ``nohup``), rich draws nothing until the end, so a long ``winnow index --dense``
printed nothing for 15 minutes; there the display is :class:`PlainProgress` instead, which writes
one plain line per task every :data:`PLAIN_SECONDS` seconds (what it is doing, how far, how long, how
long left), and a last line at the end when it wrote any. A run shorter than that writes nothing.
"""

from __future__ import annotations

import threading

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, ProgressColumn, Task
from rich.text import Text

#: Seconds between two plain progress lines where the output is not a terminal.
PLAIN_SECONDS = 10.0


def progress_bar(*columns: str | ProgressColumn, console: Console | None = None, transient: bool = False,
                 disable: bool = False) -> Progress:
    """A rich :class:`~rich.progress.Progress` with ``columns`` on ``console`` (stderr by default) at a
    terminal; where it is not one, a :class:`PlainProgress` writing a line every :data:`PLAIN_SECONDS`."""
    console = console or Console(stderr=True)
    if console.is_terminal or console.is_jupyter:
        return Progress(*columns, console=console, transient=transient, disable=disable)
    return PlainProgress(*columns, console=console, disable=disable)


class PlainProgress(Progress):
    """rich's Progress without the live display: a thread writes each task's state as one plain line
    every ``every`` seconds (tasks, updates and columns are rich's own, so callers do not change)."""

    def __init__(self, *columns: str | ProgressColumn, console: Console, disable: bool = False,
                 every: float | None = None) -> None:
        super().__init__(*columns, console=console, auto_refresh=False, disable=disable)
        self.every = PLAIN_SECONDS if every is None else every
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._wrote = False

    def start(self) -> None:
        if self.disable or self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._write_every, name="winnow-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopping.set()
        thread.join()
        if self._wrote:  # the end of what the log has been following
            self.write_lines()

    def refresh(self) -> None:
        """Nothing to redraw: the lines are written on their own clock."""

    def _write_every(self) -> None:
        while not self._stopping.wait(self.every):
            self.write_lines()

    def write_lines(self) -> None:
        """One line per task: ``description: 1,200/10,033 (12%), 40 s, about 5 min left``."""
        with self._lock:
            lines = [plain_line(task) for task in self._tasks.values() if task.visible]
        for line in lines:
            self.console.print(escape(line), highlight=False, soft_wrap=True)
        self._wrote = self._wrote or bool(lines)


def plain_line(task: Task) -> str:
    """A task's state in words, for a log."""
    description = Text.from_markup(task.description).plain.strip() or "working"
    done = f"{task.completed:,.0f}"
    if task.total is not None:
        done += f"/{task.total:,.0f} ({task.percentage:.0f}%)"
    parts = [f"{description}: {done}"]
    if task.elapsed is not None:
        parts.append(duration(task.elapsed))
    remaining = task.time_remaining
    if remaining is not None and not task.finished:
        parts.append(f"about {duration(remaining)} left")
    return ", ".join(parts)


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 4 min``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"

