"""The ``winnow`` command ends without the interpreter's teardown, and loses nothing by it; its
``--json`` for a pipe is written plainly, as rich would print it there."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.subprocess  # the command's own process, ended as `winnow` ends it


def _winnow_in_a_process(tmp_path, *args: str, entry: str = "main") -> subprocess.CompletedProcess[str]:
    """``winnow ARGS`` through :func:`winnow.cli.main` (or ``entry``), with an exit handler and a
    thread of the caller's."""
    script = textwrap.dedent(f"""
        import atexit, sys, threading, time
        def handler():
            open({str(tmp_path / "handler")!r}, "w").write("ran")
        atexit.register(handler)
        def late():
            time.sleep(0.3)
            open({str(tmp_path / "thread")!r}, "w").write("joined")
        threading.Thread(target=late).start()
        sys.argv = ["winnow", *{list(args)!r}]
        from winnow.cli import {entry}
        {entry}()
        """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_output_status_exit_handlers_and_threads_all_survive_the_fast_end(tmp_path):
    done = _winnow_in_a_process(tmp_path, "methods")
    assert done.returncode == 0, done.stderr
    # Piped stdout is block-buffered: all of it must be flushed before the process leaves, as the
    # interpreter's own exit flushes it (``run`` ends the usual way).
    assert len(done.stdout) > 1000
    assert done.stdout == _winnow_in_a_process(tmp_path, "methods", entry="run").stdout
    assert (tmp_path / "handler").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "joined"


def test_an_error_keeps_its_status_and_message(tmp_path):
    done = _winnow_in_a_process(tmp_path, "ask", "--index", str(tmp_path / "nowhere"), "a question")
    assert done.returncode == 2
    assert "error:" in done.stderr
    assert (tmp_path / "handler").read_text() == "ran"


def test_json_for_a_pipe_is_what_rich_prints_there_byte_for_byte():
    import io
    import json

    from rich.console import Console

    from winnow.commands.common import Output

    data = {"questions": {"answered": 3}, "text": "[bold]not markup[/] é \u2603 \"quoted\" " + "x" * 300,
            "scores": [0.1, 1e-9, None, True], "nested": {"empty": [], "deep": {"a": -1}}}
    for given in ({"data": data}, {"json": json.dumps(data)}):
        rich_text, plain_text = io.StringIO(), io.StringIO()
        Console(file=rich_text).print_json(**given)
        Output(file=plain_text).print_json(**given)
        assert plain_text.getvalue() == rich_text.getvalue()
