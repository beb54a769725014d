"""Errors a user can act on.

Every :class:`WinnowError` names what is at fault (a file and line, a field, an option) and what to
do. The CLI prints it as one line and exits non-zero; ``--debug`` shows the traceback.
"""

from __future__ import annotations

from pathlib import Path


class WinnowError(Exception):
    """A problem with the user's input, set-up or environment, with a hint on how to fix it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class WinnowWarning(UserWarning):
    """A run that goes ahead but not as the user may think (a paper setting without the model it needs)."""


class InputError(WinnowError):
    """Malformed input data: names the file, the line (1-based) and the field."""

    def __init__(self, path: str | Path, message: str, *, line: int | None = None, field: str | None = None,
                 hint: str = "") -> None:
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {message}", hint)
        self.path = str(path)
        self.line = line
        self.field = field


class IndexLoadError(WinnowError):
    """An index folder that is missing, corrupt or built by an incompatible version."""


class ModelError(WinnowError):
    """A model that cannot be found, assembled, verified or loaded."""


class BackendError(WinnowError):
    """An LLM backend that failed to answer (server down, bad response, unsupported feature)."""
