"""``with``-blocks for the adapters: what a Winnow object loaded (models, an HTTP client's sessions) is
closed when the block ends, as :meth:`close` does.

The dispatcher of an OpenAI-compatible backend also closes its sessions when it is collected or the
interpreter exits (:mod:`winnow.llm.dispatch`), so forgetting :meth:`close` prints no "Unclosed client
session"; a ``with`` block frees them at a known moment instead.
"""

from __future__ import annotations

from typing import Any, TypeVar

Self = TypeVar("Self", bound="Closing")


class Closing:
    """A context manager over the subclass's ``close()``: ``with Winnower(...) as w: ...``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: Self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
