"""What one request to `winnow serve` may ask for, and the 4xx error that names the field at fault.

A service shares one CPU-bound model between everyone, so every knob that multiplies LLM work
(question and document length, number of documents, N, k, token budgets, rewrite rounds) has a
ceiling; a request over it is refused before any work starts, with the field and the limit.
"""

from __future__ import annotations

import reprlib
from collections.abc import Container, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..errors import WinnowError
from ..settings import SettingError
from ..text import lone_surrogate

if TYPE_CHECKING:
    from ..methods import Method, MethodSettings


def default_setting_caps() -> dict[str, int]:
    """The ceilings a server puts on the settings that multiply LLM work, as the settings types
    declare them (``server_caps``), over every method and the rerank settings."""
    from ..methods import METHODS
    from ..rerank import RerankSettings
    from ..settings import Settings

    caps: dict[str, int] = {}
    types: list[type[Settings]] = [*(m.Settings for m in METHODS.values()), RerankSettings]
    for settings_type in types:
        caps.update(settings_type.default_server_caps())
    return caps


@dataclass(frozen=True)
class Limits:
    max_question_chars: int = 2000  # also each turn of a question's dialogue history
    max_history_turns: int = 40
    max_documents: int = 200
    max_document_chars: int = 20_000
    max_n: int = 100
    max_k: int = 50
    max_body_bytes: int = 8_000_000
    max_pending: int = 64  # requests queued for or holding the LLM; more are refused with 503
    timeout: float = 600.0  # seconds a request may wait for and use the LLM
    read_timeout: float = 30.0  # seconds a client has for its headers, and between parts of its body
    setting_caps: dict[str, int] = field(default_factory=default_setting_caps)

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
    """The one text check of the command line and the readers (:func:`winnow.text.text_problem`:
    a lone surrogate, or nothing visible), then the server's length limit."""
    from ..text import text_problem

    if not text.strip():
        raise invalid(field_name, f"{field_name} must not be empty")
    problem = text_problem(text)
    if problem:
        raise invalid(field_name, f"{field_name} {problem}")
    if len(text) > limit:
        raise invalid(field_name, f"{field_name} has {len(text):,} characters; the limit is {limit:,}")
    return text


def check_history(turns: list[Any], task: str, limits: Limits, *, container: str = "options",
                  method: str = "") -> tuple[Any, ...]:
    """A request's dialogue history: every turn's text passes the question's checks and limit
    (field ``history[i].text``), the turns make a dialogue (:func:`winnow.records.dialogue_history`),
    and the task is the one whose prompts place them, which ``method`` must have (the refusal says
    which methods do)."""
    from ..records import dialogue_history

    if not turns:
        return ()
    if len(turns) > limits.max_history_turns:
        raise invalid("history", f"history has {len(turns)} turns; the limit is {limits.max_history_turns}")
    for i, turn in enumerate(turns):
        check_text(f"history[{i}].text", turn.text, limits.max_question_chars)
    try:
        history = dialogue_history([{"role": turn.role, "text": turn.text} for turn in turns])
    except ValueError as exc:
        raise invalid("history", str(exc)) from exc
    if task != "conversational":
        from ..methods import METHODS

        having = [name for name, cls in METHODS.items() if "conversational" in cls.Settings.tasks]
        if method and method not in having:
            raise invalid("history", f"a dialogue history needs the conversational task, which method {method!r} "
                                     f"does not have: ask without the history, or with method "
                                     f"{' or '.join(having)} and {container}.task = \"conversational\"")
        raise invalid("history", f"a dialogue history needs the conversational task (this request's task is "
                                 f"{task!r}): set {container}.task = \"conversational\"")
    return history


def check_range(field_name: str, value: int, low: int, high: int, label: str = "") -> int:
    """``value`` if within [low, high], else a 422 naming ``field_name`` (described as ``label``)."""
    if not low <= value <= high:
        raise invalid(field_name, f"{label or field_name} must be between {low} and {high} (got {value})")
    return value


def check_unicode(body: Any) -> None:
    """Refuse a request with a lone surrogate in any string or key, naming the field
    (``documents[2].title``). Walked without recursion: a body may nest as deep as JSON allows."""
    pending: list[tuple[str, Any]] = [("", body)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, BaseModel):
            value = dict(value)  # the declared fields and the extra ones
        if isinstance(value, str):
            found = lone_surrogate(value)
            if found is not None:
                position = found[0]
                raise invalid(path, f"{path} has a lone surrogate ({value[position]!r} at character {position + 1}), "
                                    f"which is not Unicode text: send valid UTF-8 (a \\uD800-\\uDFFF escape "
                                    f"must be one half of a pair)")
        elif isinstance(value, dict):
            for key, item in reversed(value.items()):
                key = str(key)
                if lone_surrogate(key) is not None:
                    raise invalid(path or "body", f"a key in {path or 'the body'} has a lone surrogate ({key!r}): "
                                                  f"send valid UTF-8")
                pending.append((f"{path}.{key}" if path else key, item))
        elif isinstance(value, list):
            pending.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))


def _k_ceiling(method: str | type[Method], n: int, limits: Limits) -> int:
    """The largest k a request may ask: k picks from the N retrieved, unless the method (its name,
    or its class) does not read N (vanilla retrieves k)."""
    from ..methods import method_class

    cls = method_class(method) if isinstance(method, str) else method
    return limits.max_k if "n" in cls.unused_settings else min(limits.max_k, n)


def within_ceilings(method: str | type[Method], settings: dict[str, Any], limits: Limits,
                    asked: Container[str] = ()) -> dict[str, Any]:
    """``settings`` with N and k lowered to the ceilings, except those in ``asked``: a default
    (the method's N=20, or the server's --n) above --max-n must not refuse requests that never
    mentioned N. Only what a request asks for itself is refused. A k of None (MAIN-RAG's: no cap
    on the survivors) stays None."""
    out = dict(settings)
    if "n" in out and "n" not in asked:
        out["n"] = min(out["n"], limits.max_n)
    if out.get("k") is not None and "k" not in asked:
        out["k"] = min(out["k"], _k_ceiling(method, out.get("n", limits.max_n), limits))
    return out


_NOT_GIVEN = object()


def request_overrides(n: Any, k: Any, options: dict[str, Any], *, container: str = "options") -> dict[str, Any]:
    """The settings a request asks for, keyed by the field that asked: ``n``, ``k``,
    ``options.window`` (``container`` names the table of other settings: ``options`` over HTTP,
    ``settings`` in the MCP ``ask`` tool). N and k may come top-level or in the table; given both
    ways, they must be the same number (``2`` and ``2.0`` are, as settings read them; ``true`` is
    not ``1``), or the request is refused naming both fields: neither silently wins."""
    asked = {f"{container}.{key}": value for key, value in options.items()}
    for name, value in (("n", n), ("k", k)):
        if value is None:
            continue
        duplicate = asked.pop(f"{container}.{name}", _NOT_GIVEN)
        if duplicate is not _NOT_GIVEN and (duplicate != value or isinstance(duplicate, bool)):
            raise invalid(name, f"{name} is {value!r} but {container}.{name} is {reprlib.repr(duplicate)}: give "
                                f"{name} once (top-level or in {container}), or the same value in both")
        asked[name] = value
    return asked


def check_settings(method: str, base: dict[str, Any], overrides: dict[str, Any], limits: Limits, *,
                   container: str = "options", profile: str | None = None) -> dict[str, Any]:
    """:func:`request_settings` as plain values (the full resolved settings)."""
    return request_settings(method, base, overrides, limits, container=container, profile=profile).to_dict()


def request_settings(method: str, base: dict[str, Any], overrides: dict[str, Any], limits: Limits, *,
                     container: str = "options", profile: str | None = None,
                     paths: Mapping[str, str] | None = None) -> MethodSettings:
    """The method's settings for one request, resolved once (:func:`winnow.methods.resolve_settings`):
    ``base`` (the server's), then the request's ``profile`` (a named preset,
    :mod:`winnow.methods.profiles`), then ``overrides`` (what the request asked, keyed by field as
    :func:`request_overrides` gives them, ``container`` the table of settings other than N and k),
    each coerced to the setting's type, the costly ones capped, N and k kept in range (defaults
    lowered to the ceilings, requested values refused above them: a profile's count as requested,
    and an error about one names the field ``profile``). What the settings type marks as a path
    here (:data:`~winnow.settings.ModelPath`) a request may not set; the server fills it in from
    ``paths`` (the model for each kind, ``--rerank-model``) where its own settings leave it empty."""
    from ..methods import method_class, resolve_settings
    from ..settings import LayeredSettingError, SettingsLayer

    cls = method_class(method)  # once: the ceilings below read it again
    settings_type = cls.Settings
    known = settings_type.field_types()
    asked_field = {name.removeprefix(f"{container}."): name for name in overrides}
    asked = {name.removeprefix(f"{container}."): value for name, value in overrides.items()}

    def field_of(key: str) -> str:
        return asked_field.get(key, key if key in ("n", "k") else f"{container}.{key}")

    def served(values: dict[str, Any], provenance: Mapping[str, str]) -> dict[str, Any]:
        """The ceilings on N and k, and the server's paths, over the merged values (before they are
        built: the settings are built and checked once)."""
        requested = {key for key, source in provenance.items() if source != "server"}
        defaults = {f.name: f.default for f in fields(settings_type)}
        merged = within_ceilings(cls, {**{key: defaults[key] for key in ("n", "k")}, **values}, limits,
                                 asked=requested)

        def named(key: str) -> str:
            return "profile" if provenance.get(key, "").startswith("profile") else field_of(key)

        def label_of(key: str) -> str:
            return f"{provenance[key]} setting {key!r}" if named(key) == "profile" else named(key)

        # A count the method does not read (no-retrieval's N and k) is the settings type's to refuse.
        if "n" not in cls.unused_settings:
            check_range(named("n"), merged["n"], 1, limits.max_n, label_of("n"))
        if merged["k"] is not None and "k" not in cls.unused_settings:  # k ≤ n: the settings type's own rule
            check_range(named("k"), merged["k"], 1, limits.max_k, label_of("k"))
        for name, mark in settings_type.path_settings().items():
            kind = merged.get(mark.chosen_by, defaults.get(mark.chosen_by))
            if not merged.get(name) and (paths or {}).get(str(kind)):
                merged[name] = (paths or {})[str(kind)]
        return merged

    # The server's counts (`serve --k 2`) are not a request's: a method that does not read them gets none.
    layers = [SettingsLayer("server", {key: value for key, value in base.items()
                                       if key in known and key not in cls.unused_settings}),
              SettingsLayer("request", asked, field_of=field_of, capped=True)]
    try:
        return resolve_settings(method, layers, profile=profile, caps=limits.setting_caps, adjust=served).settings
    except LayeredSettingError as exc:
        raise invalid(exc.field, str(exc)) from exc
    except WinnowError as exc:
        raise invalid(field_of(exc.setting) if isinstance(exc, SettingError) else container, str(exc)) from exc
