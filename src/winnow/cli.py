"""The ``winnow`` command line: the typer app with every command registered, and ``main``.

Each module under :mod:`winnow.commands` registers its commands on the shared app
(:mod:`winnow.commands.common`) when imported, and imports its heavy libraries inside the command
bodies, so ``winnow --help`` stays fast. Errors a user can fix print as one line and exit with
status 2; ``--debug`` shows the traceback. The process then ends without the interpreter's
teardown (:mod:`winnow.process_end`).
"""

from __future__ import annotations

import sys

from rich.markup import escape

from .commands import (  # noqa: F401  (they register)
    ask,
    cache,
    catalog,
    corpus,
    data,
    evaluate,
    fusion,
    mcp,
    report,
    serve,
    train,
    tune,
)
from .commands.common import STATE, app, err
from .errors import WinnowError
from .process_end import end_process


def main() -> None:
    """The ``winnow`` command: :func:`run`, then the process ends with its exit status, skipping the
    interpreter's teardown once every thread and exit handler is done (:mod:`winnow.process_end`)."""
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
    try:
        app(prog_name="winnow")  # also under `python -m winnow`: the usage lines and completion say winnow
    except WinnowError as exc:
        if STATE["debug"]:
            raise
        # escape: a message may hold brackets (pip install 'winnow-rag[serve]') that rich would take for markup
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
