"""Progress where the output is not a terminal: a plain line every few seconds, not 15 silent minutes.

rich draws its live bar only at a terminal; in a pipe, a file or a CI log it drew nothing until the
end. :func:`winnow.progress.progress_bar` gives rich's bar at a terminal and, elsewhere, a
:class:`~winnow.progress.PlainProgress` writing one line per task on its own clock.
"""

from __future__ import annotations

import io
import json
import re
import time

from cli_runner import winnow
from rich.console import Console
from rich.progress import Progress
from small_corpus import PASSAGES

from winnow import progress as progress_module
from winnow.progress import PlainProgress, plain_line, progress_bar


def test_a_terminal_gets_richs_bar_and_a_pipe_plain_lines():
    assert type(progress_bar(console=Console(file=io.StringIO(), force_terminal=True))) is Progress
    assert type(progress_bar(console=Console(file=io.StringIO()))) is PlainProgress


def test_plain_lines_come_on_their_own_clock_and_end_with_the_last_state():
    written = io.StringIO()
    bar = PlainProgress(console=Console(file=written, width=200), every=0.02)
    with bar:
        task = bar.add_task("embedding [b]passages[/b]", total=40)
        bar.update(task, completed=12)
        deadline = time.monotonic() + 5
        while "12/40" not in written.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        bar.update(task, completed=40)
    lines = written.getvalue().splitlines()
    assert lines[0].startswith("embedding passages: 12/40 (30%), ")  # markup read as text, not printed
    assert lines[-1].startswith("embedding passages: 40/40 (100%), ") and "left" not in lines[-1]


def test_a_short_run_writes_nothing():
    written = io.StringIO()
    with PlainProgress(console=Console(file=written), every=60) as bar:
        bar.add_task("reading passages", total=5)
    assert written.getvalue() == ""


def test_a_task_without_a_total_says_how_far_it_is():
    bar = PlainProgress(console=Console(file=io.StringIO()))
    task = bar.add_task("shards", total=None)
    bar.advance(task, 3)
    assert plain_line(bar.tasks[0]).startswith("shards: 3, ")


def test_winnow_index_into_a_pipe_writes_progress_lines(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES), encoding="utf-8")
    monkeypatch.setattr(progress_module, "PLAIN_SECONDS", 0.001)
    result = winnow("index", corpus, "--out", tmp_path / "idx")
    assert result.returncode == 0, result.stderr
    # The build's five steps (reading passages, tokenising, …), each line saying which and how far.
    lines = [line for line in result.stderr.splitlines() if "/5 (" in line]
    assert lines, result.stderr
    assert all(re.fullmatch(r"[a-z ]+: [0-5]/5 \(\d+%\), \d+ s(, about .+ left)?", line) for line in lines), lines
