"""Every failure of an HTTP request as one JSON shape: ``{"error": {"type", "message", "field"}}``.

:func:`install_error_handlers` maps, for the whole app:

- :class:`~winnow.service.limits.ApiError` (the service's own refusals) to its status, type and field;
- pydantic's validation errors to 422 ``invalid_request`` naming the deepest field at fault
  (``documents[3].text``), or 400 ``malformed_json`` when the body is not JSON at all;
- a JSON integer too long for Python to convert (over 4,300 digits) to 422 ``invalid_request`` naming
  its field, like any out-of-range value;
- Starlette's bare 400 for a body it could not decode (not UTF-8, nested too deeply) to 400
  ``malformed_json`` saying which; its 404 and 405 to ``not_found`` and ``method_not_allowed``;
- :class:`~winnow.settings.SettingError` to 422 naming the setting, :class:`~winnow.errors.BackendError`
  to 502, :class:`~winnow.errors.ModelError` (a model the server cannot load, e.g. a cross-encoder
  offline and not cached) to 503 ``model_unavailable``, any other :class:`~winnow.errors.WinnowError`
  to 500 ``error`` (the runner maps those it meets the same way), and anything else to 500
  ``internal_error``;
- a client that went away to a bare 499 (nobody is left to read a body).
"""

from __future__ import annotations

import json
import sys
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import BackendError, ModelError, WinnowError
from ..settings import SettingError
from .guards import error_response
from .limits import ApiError, invalid
from .runner import ClientGone

#: Union members pydantic names in an error's location; they are not fields of the request.
_UNION_MEMBERS = ("str", "RerankDocumentObject", "int", "float")


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a field path: ("body", "documents", 3, "text") -> documents[3].text."""
    path = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path") else loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in _UNION_MEMBERS or "[" in str(part):
            continue  # the union member pydantic tried, not a field
        else:
            path += f".{part}" if path else str(part)
    return path or "body"


def unreadable_body(cause: BaseException | None) -> str:
    """Why a body that is not a JSON decode error could not be read (the cause FastAPI wraps in a
    bare 400 "There was an error parsing the body")."""
    if isinstance(cause, UnicodeDecodeError):
        return (f"the body is not valid UTF-8: byte 0x{cause.object[cause.start]:02x} at position {cause.start:,} "
                f"({cause.reason}); send JSON text encoded as UTF-8")
    if isinstance(cause, RecursionError):
        return "the body nests arrays or objects too deeply to read (about 1,000 levels at most); flatten it"
    return f"the body could not be read as JSON: {type(cause).__name__}: {cause}"


def check_query_utf8(query_string: bytes) -> None:
    """Refuse a query parameter that is not UTF-8 once percent-decoded (Starlette would quietly
    turn the bad bytes into U+FFFD and search for that)."""
    for name, value in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, encoding="latin-1"):
        try:
            value.encode("latin-1").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise invalid(name, f"{name} is not valid UTF-8 once percent-decoded (byte 0x{exc.object[exc.start]:02x} "
                                f"at position {exc.start}); percent-encode the UTF-8 bytes of the text") from exc


def setting_field(setting: str) -> str:
    """The request field that carries a method setting: N and k are top-level, the rest in ``options``."""
    return setting if setting in ("n", "k") else f"options.{setting}"


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body(), exc.status, headers=exc.headers)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    broken = next((e for e in errors if e.get("type") == "json_invalid"), None)
    if broken is not None:
        return error_response(400, "malformed_json", f"the body is not valid JSON: "
                                                     f"{broken.get('ctx', {}).get('error', '')} at character "
                                                     f"{broken['loc'][-1]}", "body")
    first = max(errors, key=lambda e: len(e.get("loc", ())))  # the deepest: in a union, the member meant
    field = field_path(tuple(first.get("loc", ())))
    message = f"{field}: {first.get('msg', 'invalid')}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem(s))"
    return error_response(422, "invalid_request", message, field)


class _HugeInteger(int):
    """An integer literal past Python's conversion limit, found while locating it (its digit count)."""


def huge_integer_field(body: bytes) -> tuple[str, int] | None:
    """The field path and digit count of the first integer in ``body`` longer than Python converts
    (``sys.get_int_max_str_digits()``, 4,300 by default), or None when there is none."""
    limit = sys.get_int_max_str_digits() or sys.maxsize

    def parse_int(text: str) -> int:
        digits = len(text.lstrip("-"))
        return _HugeInteger(digits) if digits > limit else int(text)

    try:
        document = json.loads(body, parse_int=parse_int)
    except ValueError:
        return None
    pending: list[tuple[tuple[Any, ...], Any]] = [((), document)]
    while pending:
        loc, value = pending.pop(0)
        if isinstance(value, _HugeInteger):
            return field_path(loc), int(value)
        if isinstance(value, dict):
            pending += [((*loc, key), item) for key, item in value.items()]
        elif isinstance(value, list):
            pending += [((*loc, i), item) for i, item in enumerate(value)]
    return None


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    cause = exc.__cause__
    if exc.status_code == 400 and isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        # A JSON integer of thousands of digits: valid JSON, a value out of range. The same 422 as
        # any other out-of-range value, naming the field, not Python's conversion-limit message.
        found = huge_integer_field(await request.body())
        field, digits = found if found else ("body", 0)
        size = f"{digits:,} digits" if digits else "too many digits"
        return error_response(422, "invalid_request", f"{field}: the number has {size}, out of range for any "
                                                      f"setting (numbers of at most {sys.get_int_max_str_digits():,} "
                                                      f"digits are read)", field)
    if exc.status_code == 400 and cause is not None:  # the body is not UTF-8, or nests too deeply
        return error_response(400, "malformed_json", unreadable_body(cause), "body")
    kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, kind, str(exc.detail), headers=getattr(exc, "headers", None))


async def _winnow_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, SettingError):
        return error_response(422, "invalid_request", str(exc), setting_field(exc.setting))
    if isinstance(exc, BackendError):
        return error_response(502, "backend_error", str(exc))
    if isinstance(exc, ModelError):  # e.g. a reranker model the server cannot load (offline, not cached)
        return error_response(503, "model_unavailable", str(exc))
    return error_response(500, "error", str(exc))


async def _client_gone(request: Request, exc: Exception) -> Response:
    return Response(status_code=499)  # nginx's "client closed request": nobody is there to receive it


async def _internal_error(request: Request, exc: Exception) -> Response:
    return error_response(500, "internal_error", f"{type(exc).__name__}: {exc}")


def install_error_handlers(app: FastAPI) -> None:
    """Map every failure to the API's error shape (see the module docstring for the table)."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(WinnowError, _winnow_error)
    app.add_exception_handler(ClientGone, _client_gone)
    app.add_exception_handler(Exception, _internal_error)
