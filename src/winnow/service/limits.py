"""What one request to `winnow serve` may ask for, and the 4xx error that names the field at fault.

A service shares one CPU-bound model between everyone, so every knob that multiplies LLM work
(question and document length, number of documents, N, k, token budgets, rewrite rounds) has a
ceiling; a request over it is refused before any work starts, with the field and the limit.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import WinnowError

#: Method settings that multiply LLM work, and their ceilings (a request's ``options`` may not exceed them).
SETTING_CAPS: dict[str, int] = {
    "max_answer_tokens": 512,
    "max_document_answer_tokens": 512,
    "max_rewrite_tokens": 256,
    "rewrites": 10,
    "feedback_docs": 20,
    "window": 100,
    "max_passage_words": 1000,
}


@dataclass(frozen=True)
class Limits:
    max_question_chars: int = 2000
    max_documents: int = 200
    max_document_chars: int = 20_000
    max_n: int = 100
    max_k: int = 50
    max_body_bytes: int = 8_000_000
    max_pending: int = 64  # requests queued for or holding the LLM; more are refused with 503
    timeout: float = 600.0  # seconds a request may wait for and use the LLM
    setting_caps: dict[str, int] = field(default_factory=lambda: dict(SETTING_CAPS))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ApiError(Exception):
    """An HTTP error with a JSON body ``{"error": {"type", "message", "field"}}``."""

    def __init__(self, status: int, kind: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.field = field
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.kind, "message": self.message, "field": self.field}}


def invalid(field_name: str, message: str) -> ApiError:
    return ApiError(422, "invalid_request", message, field_name)


def check_text(field_name: str, text: str, limit: int) -> str:
    if not text.strip():
        raise invalid(field_name, f"{field_name} must not be empty")
    if len(text) > limit:
        raise invalid(field_name, f"{field_name} has {len(text):,} characters; the limit is {limit:,}")
    return text


def check_range(field_name: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise invalid(field_name, f"{field_name} must be between {low} and {high} (got {value})")
    return value


def _k_ceiling(method: str, n: int, limits: Limits) -> int:
    return limits.max_k if method == "vanilla" else min(limits.max_k, n)  # k picks from the N, but vanilla's


def within_ceilings(method: str, settings: dict[str, Any], limits: Limits,
                    asked: Container[str] = ()) -> dict[str, Any]:
    """``settings`` with N and k lowered to the ceilings, except those in ``asked``: a default
    (the method's N=20, or the server's --n) above --max-n must not refuse requests that never
    mentioned N. Only what a request asks for itself is refused."""
    out = dict(settings)
    if "n" in out and "n" not in asked:
        out["n"] = min(out["n"], limits.max_n)
    if "k" in out and "k" not in asked:
        out["k"] = min(out["k"], _k_ceiling(method, out.get("n", limits.max_n), limits))
    return out


def check_settings(method: str, base: dict[str, Any], overrides: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """The method's settings for one request: ``base`` (the server's), then ``overrides`` (the
    request's n, k and options), each option type-checked against the method's defaults, the
    costly ones capped, N and k kept in range (defaults lowered to the ceilings, requested values
    refused above them). Returns the full resolved settings."""
    from ..methods import method_class, method_settings
    from ..settings import SettingError, coerce_value

    settings_type = method_class(method).Settings
    types = settings_type.field_types()
    defaults = settings_type().to_dict()
    field_of = lambda key: key if key in ("n", "k") else f"options.{key}"  # noqa: E731
    for key, value in overrides.items():
        name = field_of(key)
        if key not in types:
            raise invalid(name, f"method {method!r} has no setting {key!r}; its settings: {sorted(defaults)}")
        try:
            value = coerce_value(key, types[key], value)
        except SettingError as exc:
            raise invalid(name, str(exc)) from exc
        if key in limits.setting_caps and not 0 <= value <= limits.setting_caps[key]:
            raise invalid(name, f"{key} must be between 0 and {limits.setting_caps[key]} (got {value})")
    merged = within_ceilings(method, {"n": defaults["n"], "k": defaults["k"],
                                      **{k: v for k, v in base.items() if k in defaults}, **overrides},
                             limits, asked=overrides)
    n = check_range("n", merged["n"], 1, limits.max_n)
    check_range("k", merged["k"], 1, _k_ceiling(method, n, limits))
    try:
        return method_settings(method, **merged).to_dict()
    except SettingError as exc:
        raise invalid(field_of(exc.setting), str(exc)) from exc
    except WinnowError as exc:
        raise invalid("options", str(exc)) from exc
