"""One line of a JSONL file parsed as JSON, every way it can fail turned into an :class:`InputError`.

``json.loads`` fails in four ways a user can fix, and only the first is a ``JSONDecodeError``:
malformed JSON; nesting deeper than Python's recursion limit (``RecursionError``); an integer longer
than Python converts from a string (4,300 digits by default, ``ValueError``); and, without failing,
a ``\\ud800`` escape that leaves a lone surrogate in a string, which no UTF-8 writer accepts later.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..text import describe_surrogate, lone_surrogate

# A line decoded from strict UTF-8 can only carry a surrogate through a \u escape; this cheap test
# spares the walk over every parsed record that has none.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def describe_json_error(error: json.JSONDecodeError, *, with_line: bool = False) -> str:
    """"Expecting ',' delimiter at column 12" (``with_line``: "at line 3, column 12"). Some of
    Python's messages end in "starting at" already ("Unterminated string starting at")."""
    where = f"line {error.lineno}, column {error.colno}" if with_line else f"column {error.colno}"
    return f"{error.msg.removesuffix(' at')} at {where}"


def parse_json_line(text: str, source: str | Path, line: int, *, hint: str) -> Any:
    """The JSON value of ``text``, line ``line`` of ``source``; :class:`InputError` if it cannot be read
    or holds a string no UTF-8 file can store."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(source, f"not valid JSON: {describe_json_error(error)}", line=line, hint=hint) from error
    except RecursionError as error:
        raise InputError(source, "not readable JSON: nested too deeply (arrays or objects inside each other "
                                 f"more than about {sys.getrecursionlimit():,} levels)", line=line,
                         hint="flatten the record: " + hint) from error
    except ValueError as error:  # the only other ValueError json.loads raises: an over-long integer
        raise InputError(source, f"not readable JSON: {_long_integer(text)}", line=line,
                         hint='write long numbers as strings, e.g. "id": "123…"') from error
    if _SURROGATE_ESCAPE.search(text) and (found := _first_lone_surrogate(value)) is not None:
        field, position, char = found
        raise InputError(source, describe_surrogate(position, char), line=line, field=field,
                         hint="remove the escape, or pair it: a high \\ud800-\\udbff escape, then a low "
                              "\\udc00-\\udfff one")
    return value


def _long_integer(text: str) -> str:
    limit = sys.get_int_max_str_digits()
    found = re.search(r"[0-9]{%d,}" % (limit + 1), text)
    column = f" at column {found.start() + 1}" if found else ""
    return f"an integer of more than {limit:,} digits{column}"


def _first_lone_surrogate(value: Any) -> tuple[str | None, int, str] | None:
    """The first lone surrogate in a parsed JSON value (keys and strings, depth first): the top-level
    key it sits under (None for a bare string or an array), its position in its string, the character."""
    stack: list[tuple[str | None, Any]] = [(None, value)]
    while stack:
        top, item = stack.pop()
        if isinstance(item, str):
            if (found := lone_surrogate(item)) is not None:
                return (top, *found)
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                field = key if top is None and item is value else top
                children += [(field, key), (field, child)]
            stack += reversed(children)
        elif isinstance(item, list):
            stack += reversed([(top, child) for child in item])
    return None
