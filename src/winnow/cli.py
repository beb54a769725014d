"""The ``winnow`` command line: ``main``, and the typer app with every command registered (``app``).

Each module under :mod:`winnow.commands` registers its commands on the shared app
(:mod:`winnow.commands.common`) when imported, and imports its heavy libraries inside the command
bodies, so ``winnow --help`` stays fast. A run of one command imports only the module that
registers it (:data:`COMMAND_MODULES`): typer then builds one command's options, not some 70 of
every command (0.10 s less before ``winnow eval`` starts, docs/benchmarks.md). ``winnow.cli.app``,
as tests and other programs take it, has every command. Errors a user can fix print as one line
and exit with status 2; ``--debug`` shows the traceback. The process then ends without the
interpreter's teardown (:mod:`winnow.process_end`).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.markup import escape

from .commands import common
from .errors import WinnowError
from .process_end import end_process
from .startup import pause_collection

#: The module of :mod:`winnow.commands` that registers each command, in the order ``winnow --help``
#: lists them (tests/test_cli_startup.py checks it against what each module registers).
COMMAND_MODULES = {
    "ask": "ask", "rerank": "ask", "cache": "cache", "methods": "catalog", "models": "catalog",
    "index": "corpus", "search": "corpus", "embed": "corpus", "ann": "corpus", "sign": "corpus",
    "data": "data", "bench-data": "data", "eval": "evaluate", "fit-fusion": "fusion", "mcp": "mcp",
    "report": "report", "serve": "serve", "train": "train", "tune": "tune",
}


def register_commands(args: Sequence[str] = ()) -> None:
    """Import the command module the arguments name (after an optional ``--debug``), or every one
    when they name none (``winnow``, ``winnow --help``), an unknown one (typer then suggests the
    nearest), or the shell's completion asks."""
    words = list(args)
    if words[:1] == ["--debug"]:
        words = words[1:]
    named = COMMAND_MODULES.get(words[0]) if words and "_WINNOW_COMPLETE" not in os.environ else None
    for module in [named] if named else dict.fromkeys(COMMAND_MODULES.values()):
        importlib.import_module(f"{__package__}.commands.{module}")


def __getattr__(name: str) -> Any:
    """``winnow.cli.app``: the typer app with every command registered (tests, other programs)."""
    if name == "app":
        register_commands()
        return common.app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The ``winnow`` command: :func:`run`, then the process ends with its exit status, skipping the
    interpreter's teardown once every thread and exit handler is done (:mod:`winnow.process_end`)."""
    pause_collection()  # until the command's body (winnow.startup)
    try:
        run()
    except SystemExit as stop:
        code = stop.code
    else:
        code = 0
    if code is None or isinstance(code, int):
        end_process(code or 0)
    raise SystemExit(code)  # a message as the status: Python prints it


def run() -> None:
    """The typer app, with the errors a user can fix printed as one line (status 2)."""
    register_commands(sys.argv[1:])
    try:
        common.app(prog_name="winnow")  # also under `python -m winnow`: the usage lines and completion say winnow
    except WinnowError as exc:
        if common.STATE["debug"]:
            raise
        # escape: a message may hold brackets (pip install 'winnow-rag[serve]') that rich would take for markup
        common.err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        common.err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
