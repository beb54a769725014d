"""``winnow ARGS`` run inside the test process: what a subprocess would return, without the 2.3 s a
fresh interpreter spends importing Winnow before it does any work.

:func:`winnow` calls :func:`winnow.cli.run` (the typer app and its one-line errors, exit status 2)
with ``sys.argv`` set, under click's ``CliRunner`` isolation: stdin, stdout and stderr are captured,
the environment is changed only for the call. What a subprocess adds and this does not:
:func:`winnow.cli.main`'s end of the process (:mod:`winnow.process_end`, tested in
tests/test_process_end.py) and an interpreter of its own. Tests where the process boundary is what
is tested (a signal, ``kill -9``, two processes contending, what a fresh process imports) keep
their subprocess.

An exception that escapes the command is written to stderr as the interpreter would write it
(``Traceback ...``, status 1), so ``"Traceback" not in result.stderr`` still fails where it should.
Python warnings are shown on the captured stderr, each time, as in a fresh process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path

from click.testing import CliRunner


def _show_warning(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def winnow(*args: str | bytes | Path | int | float, env: Mapping[str, str] | None = None, input: str | None = None,
           text: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``winnow ARGS`` in this process; ``env`` holds the variables to set (or None to unset) for the
    call, ``input`` is stdin. Returns what ``subprocess.run(..., capture_output=True)`` would:
    ``returncode``, ``stdout`` and ``stderr`` (str, or bytes with ``text=False``)."""
    from winnow import cli
    from winnow.commands.common import STATE

    argv = [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in args]
    variables = {"COLUMNS": "160", **(env or {})}
    runner = CliRunner()
    saved_argv, saved_sigint, saved_cwd = sys.argv, signal.getsignal(signal.SIGINT), os.getcwd()
    code: int | str | None = 0
    with runner.isolation(input=input, env=variables) as (out, err, _):
        sys.argv = ["winnow", *argv]
        try:
            if cwd is not None:
                os.chdir(cwd)
            with warnings.catch_warnings():
                warnings.resetwarnings()
                warnings.simplefilter("default")
                warnings.showwarning = _show_warning
                cli.run()
        except SystemExit as stop:
            code = stop.code
        except BaseException:  # the interpreter prints what escapes and exits 1
            traceback.print_exc(file=sys.stderr)
            code = 1
        finally:
            sys.argv = saved_argv
            STATE["debug"] = False
            signal.signal(signal.SIGINT, saved_sigint)
            os.chdir(saved_cwd)
            sys.stdout.flush()
            sys.stderr.flush()
        stdout, stderr = out.getvalue(), err.getvalue()
    if code is None:
        code = 0
    elif not isinstance(code, int):  # a message as the status: Python prints it and exits 1
        stderr += f"{code}\n".encode()
        code = 1
    if text:
        return subprocess.CompletedProcess(["winnow", *argv], code, stdout.decode("utf-8", "replace"),
                                           stderr.decode("utf-8", "replace"))
    return subprocess.CompletedProcess(["winnow", *argv], code, stdout, stderr)
