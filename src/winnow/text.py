"""Checks on a question or query a user hands in, shared by the CLI, the QA reader and the service.

Two kinds of text pass a glance and then fail deep inside:

* a **lone surrogate** (U+D800-U+DFFF outside a pair), which no UTF-8 encoder can write, so hashing
  the prompt or writing the trace fails with a traceback. It arrives as a ``\\ud800`` escape in a JSON
  file, or as a byte that is not UTF-8 in a command-line argument, which Python decodes to
  U+DC80-U+DCFF (the ``surrogateescape`` handler, PEP 383);
* a question of **only invisible characters** (zero-width spaces and joiners, a byte-order mark,
  white space, control characters), which looks non-empty and retrieves nothing.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from .errors import WinnowError

_SURROGATE = re.compile("[\ud800-\udfff]")
# Unicode categories that print nothing: format characters (Cf: zero-width space, joiners, BOM, soft
# hyphen, bidirectional marks) and controls (Cc); white space is told by str.isspace.
_INVISIBLE_CATEGORIES = ("Cf", "Cc")
_ESCAPED_BYTES = range(0xDC80, 0xDD00)  # where surrogateescape puts the bytes 0x80-0xFF
TEXT_HINT = "write it as UTF-8 text with at least one visible character"


def lone_surrogate(value: str) -> tuple[int, str] | None:
    """The first lone surrogate in ``value``: its 0-based position and the character, or None.

    A Python ``str`` holds a valid pair as one code point, so any surrogate left in it is lone."""
    found = _SURROGATE.search(value)
    return None if found is None else (found.start(), found.group())


def describe_surrogate(position: int, char: str) -> str:
    """"holds U+D800 at character 7, a lone surrogate: …", with where such a character comes from."""
    code = ord(char)
    origin = (f"the byte 0x{code - 0xDC00:02x}, which is not UTF-8, or a \\u{code:04x} escape"
              if code in _ESCAPED_BYTES else f"a \\u{code:04x} escape without its pair")
    return f"holds U+{code:04X} at character {position + 1}, a lone surrogate: not valid Unicode (from {origin})"


def is_invisible(value: str) -> bool:
    """True when ``value`` has no visible character: empty, white space, zero-width or control only."""
    return all(char.isspace() or unicodedata.category(char) in _INVISIBLE_CATEGORIES for char in value)


@functools.cache
def visible_character_pattern() -> str:
    """A regular expression (JSON Schema's ``pattern``: found anywhere) that matches a text exactly
    when :func:`is_invisible` says it is not: one character that is not white space, control or
    zero-width. The HTTP API's schema states with it what every text field is checked for.
    (Characters past U+FFFF are left out of the class, so count as visible: the few format
    characters there, such as tag characters, are the one difference.)"""
    invisible = [code for code in range(0x10000)
                 if not 0xD800 <= code <= 0xDFFF and is_invisible(chr(code))]
    ranges: list[tuple[int, int]] = []
    for code in invisible:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    parts = "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)
    return f"[^{parts}]"


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be asked or searched, as a phrase to follow its name, or None if it can."""
    if (found := lone_surrogate(value)) is not None:
        return describe_surrogate(*found)
    if is_invisible(value):
        return ("is empty" if not value else
                "is empty once zero-width and white-space characters are removed")
    return None


def check_text(value: str, where: str) -> str:
    """``value`` unchanged if it can be asked or searched; else a :class:`WinnowError` naming
    ``where`` (e.g. "the question") and what is wrong with it."""
    if (problem := text_problem(value)) is not None:
        raise WinnowError(f"{where} {problem}", TEXT_HINT)
    return value
