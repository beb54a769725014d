"""Reading a model server's JSON answer without trusting it.

A server is outside Winnow's control: a proxy may answer with an HTML page, a buggy build with
``"choices": {}``, a model with a NaN log-probability. Every reader checks the type of each field it
uses through the small accessors below; the first field that is wrong raises
:class:`MalformedResponse` saying where (``choices[0].message``) and what it found, and
:func:`malformed` turns that into the one-line :class:`~winnow.errors.BackendError` the user sees,
naming the server and showing the start of what it sent.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

from ..errors import BackendError

PREVIEW_CHARS = 200
#: No real count (tokens, context size) comes near 2**53; a larger one would also stop being exact
#: as a float in JSON, and Python refuses to print integers of more than 4,300 digits.
LARGEST_COUNT = 2**53
#: Servers compute log-probabilities in float32; log(p) of a probability that rounds to just above
#: 1 comes out a hair above 0. Anything beyond this is not a rounding error but a wrong value.
LOGPROB_ROUNDING = 1e-4


class MalformedResponse(Exception):
    """A field of a server's answer that is missing or of the wrong type; the message says which."""


class UnreadableAnswer(BackendError):
    """A success (200) whose body cannot be read: not JSON, or JSON without the fields an answer has.
    A proxy hiccup or a server bug garbles one answer in many, so the dispatcher retries it like a 5xx
    (:mod:`winnow.llm.dispatch`); only one garbled every time reaches the user."""


def kind_of(value: Any) -> str:
    """How a JSON value reads in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) and abs(value) > LARGEST_COUNT:
        return "a number too large to be meant"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def preview(sent: Any, limit: int = PREVIEW_CHARS) -> str:
    """The start of what a server sent, on one line: the raw body when there is one, else a bounded
    repr of the parsed value (bounded in depth too, so 100,000 nested lists cost nothing)."""
    if not isinstance(sent, str):
        sent = _BoundedRepr(limit).repr(sent)
    cut = sent[:limit]
    return repr(cut) + (" …" if len(sent) > limit else "")


class _BoundedRepr(reprlib.Repr):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother, self.maxlist, self.maxdict = 4, limit, limit, 8, 8

    def repr_int(self, x: int, level: int) -> str:
        # repr() of an integer of more than 4,300 digits raises ValueError.
        return repr(x) if abs(x) <= LARGEST_COUNT else "<a very large integer>"


def malformed(source: str, problem: MalformedResponse | str, sent: Any) -> UnreadableAnswer:
    """The error for a response that cannot be read: the server, what is wrong, how it began."""
    return UnreadableAnswer(f"{source} sent a response Winnow cannot read: {problem}; it began {preview(sent)}",
                        "is the address an OpenAI-compatible server (vLLM, llama.cpp server, TGI)? "
                        "a proxy or a server bug may have changed the answer")


def read_json(response: Any, source: str) -> Any:
    """The JSON value of an HTTP response (an ``httpx.Response``), or a BackendError showing its start.

    Deep nesting makes Python's parser raise RecursionError rather than ValueError; a body that is
    not UTF-8 raises UnicodeDecodeError (a ValueError); both are the server's fault, not ours.
    """
    try:
        return response.json()
    except (ValueError, RecursionError) as exc:
        raise malformed(source, MalformedResponse(f"its body is not JSON ({type(exc).__name__})"),
                        response.text) from exc


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedResponse(f"{where} is {kind_of(value)}, not an object")
    return value


def items(value: Any, where: str, *, nonempty: bool = True) -> list[Any]:
    if not isinstance(value, list):
        raise MalformedResponse(f"{where} is {kind_of(value)}, not a list")
    if nonempty and not value:
        raise MalformedResponse(f"{where} is an empty list")
    return value


def text(value: Any, where: str, *, optional: bool = False) -> str:
    """A string field; with ``optional``, null or absent reads as ""."""
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise MalformedResponse(f"{where} is {kind_of(value)}, not a string")
    return value


def _whole_number(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def count(value: Any, where: str, *, optional: bool = False) -> int:
    """A non-negative whole number (a token count, a context size); with ``optional``, null reads as 0."""
    if value is None and optional:
        return 0
    number = _whole_number(value)
    if number is None or not 0 <= number <= LARGEST_COUNT:
        raise MalformedResponse(f"{where} is {kind_of(value)}, not a count (a whole number of at least 0)")
    return number


def logprob(value: Any, where: str) -> float:
    """A log-probability: a finite number at most 0. NaN, infinities, positive values and anything
    that is not a number are refused rather than turned into NaN scores."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedResponse(f"{where} is {kind_of(value)}, not a log-probability")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the float range
        number = math.inf if value > 0 else -math.inf
    if not math.isfinite(number):
        raise MalformedResponse(f"{where} is {number}, not a finite log-probability")
    if number > LOGPROB_ROUNDING:
        raise MalformedResponse(f"{where} is {number}, but a log-probability is at most 0")
    return min(number, 0.0)
