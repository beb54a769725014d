"""Typed settings, checked once: every method's knobs as a dataclass that coerces and checks itself.

The same values arrive from command-line flags and ``--set KEY=VALUE``, TOML/YAML files, the
Python API and HTTP requests. :func:`settings_from` turns any of them into the method's settings
object, or raises :class:`SettingError` naming the setting and the type or range it needs, never a
command-line flag: HTTP and Python users read the same message (and HTTP maps ``setting`` to the
field of its 422 answer).

A field's annotation is its type: ``int``, ``float``, ``bool``, ``str``, a ``Literal`` of the
allowed values, ``tuple[float, ...]`` (a list of numbers, e.g. fitted weights), or one of them
``| None`` for a setting whose absence means something (a derived default). Ranges are checked by
each settings class's ``check``. :data:`ModelPath` is a ``str`` that names a file or folder on the
machine that runs Winnow (a model, a tokenizer): a request to a server (a layer marked ``capped``,
HTTP and MCP) may not set one, whatever the method, and the server fills it in from its own options
(:meth:`Settings.path_settings`).
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Annotated, Any, ClassVar, Generic, Literal, Mapping, Protocol, Sequence, TypeVar

from .errors import WinnowError

S = TypeVar("S", bound="Settings")
# Settings class -> its fields' types. typing.get_type_hints evaluates every annotation string, ~3 ms a
# call, which `winnow eval` paid twice a question (first_stage_depth resolves the method's settings).
_FIELD_TYPES: dict[type, dict[str, Any]] = {}


_PATH_SETTINGS: dict[type, dict[str, LocalPath]] = {}


def _local_marks(kind: Any) -> list[LocalPath]:
    """The :class:`LocalPath` marks of an annotation (``ModelPath``, or ``ModelPath | None``)."""
    found = [mark for mark in getattr(kind, "__metadata__", ()) if isinstance(mark, LocalPath)]
    for argument in typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else ():
        found += _local_marks(argument)
    return found


class SettingError(WinnowError):
    """A setting with a value of the wrong type or out of range; ``setting`` names it."""

    def __init__(self, setting: str, message: str, hint: str = "") -> None:
        super().__init__(message, hint)
        self.setting = setting


class LayeredSettingError(SettingError):
    """A SettingError that also carries the field of the source that gave the bad value."""

    def __init__(self, setting: str, field_name: str, message: str, hint: str = "") -> None:
        super().__init__(setting, message, hint)
        self.field = field_name


@dataclass(frozen=True)
class LocalPath:
    """The mark of a setting that names a file or folder on this machine (see :data:`ModelPath`).

    ``chosen_by`` names the setting whose value says which kind of model the path is for (RRR's
    ``rerank_model`` is the model of ``rerank`` = cross-encoder or monot5): a server fills the path
    in from its own table for that kind (``winnow serve --rerank-model KIND=PATH``)."""

    what: str = "a model folder or file"
    chosen_by: str = ""


#: A setting that names a file or folder here (a model folder, a .gguf, a tokenizer), or a hub id.
#: Marked by type, so every front door treats every such setting alike: a server's request may not
#: set it (a client must not make the server read its disk); the server fills it in.
ModelPath = Annotated[str, LocalPath()]
#: The model of a trained reranker (a folder or hub id) of the kind the ``rerank`` setting chooses.
RerankerPath = Annotated[str, LocalPath("a reranker model folder", chosen_by="rerank")]


def _same_name(key: str) -> str:
    return key


@dataclass(frozen=True)
class SettingsLayer:
    """One source's setting values.

    ``source`` names it in provenance and messages ("--set", "config run.toml [rrr]", "request").
    ``field_of`` maps a setting to the field the source calls it (``options.window``), so a refusal
    names what the user wrote. With ``partial``, keys the method does not have are passed over
    (a config file's top level holds settings of every method); otherwise they are refused.
    A value of ``None`` is refused ("has no value"): a source that means "not given" leaves the key out.
    """

    source: str
    values: Mapping[str, Any]
    field_of: Callable[[str], str] = _same_name
    partial: bool = False
    capped: bool = False  # a server's ceilings on costly settings hold for this layer (a request's values)
    origin: str = ""  # the file the values came from, named first in a refusal

    def refuse(self, setting: str, message: str, hint: str = "") -> LayeredSettingError:
        """The error for a bad value of ``setting`` from this layer, naming the layer's field for it
        (and its file, for a config file's layers)."""
        field_name = self.field_of(setting)
        if self.origin:
            message = f"{self.origin}, field {field_name!r}: {message}"
        return LayeredSettingError(setting, field_name, message, hint)


def _optional_inner(kind: Any) -> Any:
    """``X`` for an ``X | None`` annotation, else None."""
    arguments = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in arguments:
        rest = [a for a in arguments if a is not type(None)]
        return rest[0] if len(rest) == 1 else None
    return None


def _type_name(kind: Any) -> str:
    inner = _optional_inner(kind)
    if inner is not None:
        return f"{_type_name(inner)} (or absent)"
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(kind))
    if _is_number_list(kind):
        return "a list of numbers"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(kind, str(kind))


def _is_number_list(kind: Any) -> bool:
    """Whether ``kind`` is ``tuple[float, ...]``: a setting holding a list of numbers (fitted weights)."""
    return typing.get_origin(kind) is tuple and typing.get_args(kind) == (float, ...)


def _described(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def coerce_value(name: str, kind: Any, value: Any) -> Any:
    """``value`` as ``kind``, or a SettingError naming ``name`` and the type expected.

    Lenient only where nothing can be misread: an integral float is an int (YAML and JSON users
    write ``20.0``), an int is a float. Strings are never parsed as numbers here: ``--set`` values
    are already read as YAML, so a string that reaches this point was meant as a string.
    """
    inner = _optional_inner(kind)
    if inner is not None:
        return None if value is None else coerce_value(name, inner, value)
    if typing.get_origin(kind) is Literal:
        if value in typing.get_args(kind) and isinstance(value, str):
            return value
    elif kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise SettingError(name, f"setting {name!r} must be a finite number (got {_described(value)})")
            return float(value)
    elif kind is str:
        if isinstance(value, str):
            return value
    elif _is_number_list(kind):
        # A TOML array, a YAML or JSON list: kept as a tuple, so the settings stay hashable and equal.
        if isinstance(value, (list, tuple)):
            try:
                return tuple(coerce_value(f"{name}[{i}]", float, v) for i, v in enumerate(value))
            except SettingError as exc:
                raise SettingError(name, str(exc)) from exc
    raise SettingError(name, f"setting {name!r} must be {_type_name(kind)} (got {_described(value)})")


@dataclass
class Settings:
    """Base of every typed settings class: build with :meth:`from_values`, then :meth:`check`."""

    #: What the settings belong to, for messages ("method 'rrr'").
    owner: ClassVar[str] = "settings"
    #: Largest value a setting may take anywhere (a token budget no model's context holds is an
    #: error at construction, not at the first question). Subclasses add theirs; :meth:`maxima` merges them.
    upper_bounds: ClassVar[dict[str, float]] = {}
    #: Settings that multiply LLM work, and the ceiling a server puts on them by default
    #: (``winnow serve --max-...``; a request above it is refused with 422).
    server_caps: ClassVar[dict[str, int]] = {}

    @classmethod
    def maxima(cls) -> dict[str, float]:
        """Every setting's upper bound, the class's own over its bases'."""
        return cls._merged_table("upper_bounds")

    @classmethod
    def default_server_caps(cls) -> dict[str, int]:
        """The costly settings' ceilings on a server, the class's own over its bases'."""
        return {name: int(cap) for name, cap in cls._merged_table("server_caps").items()}

    @classmethod
    def _merged_table(cls, name: str) -> dict[str, float]:
        """A class-level table (``upper_bounds``, ``server_caps``) merged down the class hierarchy:
        each class declares only its own settings' entries."""
        merged: dict[str, float] = {}
        for klass in reversed(cls.__mro__):
            merged.update(vars(klass).get(name, {}))
        return merged

    @classmethod
    def field_types(cls) -> dict[str, Any]:
        types = _FIELD_TYPES.get(cls)
        if types is None:
            hints = typing.get_type_hints(cls)
            types = _FIELD_TYPES[cls] = {f.name: hints[f.name] for f in fields(cls)}
        return dict(types)

    @classmethod
    def path_settings(cls) -> dict[str, LocalPath]:
        """The settings that name a file or folder on this machine (annotated :data:`ModelPath`),
        with their marks: what a request to a server may not set and the server fills in."""
        marks = _PATH_SETTINGS.get(cls)
        if marks is None:
            hints = typing.get_type_hints(cls, include_extras=True)
            marks = _PATH_SETTINGS[cls] = {f.name: mark for f in fields(cls) for mark in _local_marks(hints[f.name])}
        return dict(marks)

    @classmethod
    def from_values(cls: type[S], values: Mapping[str, Any], *, owner: str | None = None) -> S:
        """The defaults with ``values`` applied (``None`` means "not given"), coerced and checked."""
        types = cls.field_types()
        unknown = sorted(k for k, v in values.items() if v is not None and k not in types)
        if unknown:
            raise SettingError(unknown[0], f"{owner or cls.owner} has no setting(s) {unknown}",
                               f"its settings: {', '.join(types)}")
        chosen = {k: coerce_value(k, types[k], v) for k, v in values.items() if v is not None}
        for name, high in cls.maxima().items():
            value = chosen.get(name)
            if value is not None and value > high:
                raise SettingError(name, f"setting {name!r} must be at most {high:,} (got {_described(value)})")
        settings = cls(**chosen)
        settings.check()
        return settings

    def check(self) -> None:
        """Refuse values out of range, naming the setting. Subclasses extend it."""

    def to_dict(self) -> dict[str, Any]:
        # A list setting as a list: what JSON and TOML give back, so a recorded run compares equal.
        return {name: list(value) if isinstance(value, tuple) else value for name, value in asdict(self).items()}

    def require(self, condition: bool, setting: str, message: str, hint: str = "") -> None:
        """Raise a SettingError for ``setting`` unless ``condition`` holds."""
        if not condition:
            raise SettingError(setting, message, hint)


def at_least(settings: Settings, minimum: float, *names: str) -> None:
    """Every named setting must be at least ``minimum``."""
    for name in names:
        value = getattr(settings, name)
        settings.require(value >= minimum, name, f"setting {name!r} must be at least {minimum:g} (got {value})")


class WindowSettings(Protocol):
    """Settings with a sliding window: RankGPT's and RRR's methods, and the listwise reranker."""

    window: int
    step: int

    def require(self, condition: bool, setting: str, message: str, hint: str = "") -> None: ...


def check_sliding_window(settings: WindowSettings, *, smallest_window: int = 1) -> None:
    """A sliding window (RankGPT's listwise reranking; RRR §4(D)) needs ``window`` ≥ the smallest and
    1 ≤ ``step`` ≤ ``window``: a larger step would leave passages between windows unranked."""
    window, step = settings.window, settings.step
    settings.require(window >= smallest_window, "window",
                     f"setting 'window' must be at least {smallest_window} (got {window})")
    settings.require(step >= 1, "step", f"setting 'step' must be at least 1 (got {step})")
    settings.require(step <= window, "step", f"setting 'step' ({step}) cannot exceed setting 'window' ({window}): "
                                             "passages between windows would never be ranked")


DEFAULT_SOURCE = "default"


@dataclass(frozen=True)
class Resolved(Generic[S]):
    """Settings resolved from layers and, for each setting a layer gave, the source it came from."""

    settings: S
    provenance: dict[str, str] = field(default_factory=dict)

    def overrides(self) -> dict[str, Any]:
        """The values the layers gave (a profile's included), as a run specification records them."""
        values = self.settings.to_dict()
        return {name: values[name] for name in self.provenance}

    def source_of(self, setting: str) -> str:
        return self.provenance.get(setting, DEFAULT_SOURCE)


#: A last step over the merged values before they are built and checked: (values, provenance) -> values.
Adjust = Callable[[dict[str, Any], Mapping[str, str]], dict[str, Any]]


def resolve_layers(settings_type: type[S], layers: Sequence[SettingsLayer], *, owner: str,
                   caps: Mapping[str, int] | None = None, adjust: Adjust | None = None) -> Resolved[S]:
    """``settings_type``'s defaults with each layer's values applied in order (later layers win).

    Every value is coerced to its setting's type as it is read, and a refusal names the layer's
    field for it (:class:`LayeredSettingError`); the type's bounds and cross-field rules are checked
    once on the merged values, the error naming the layer that gave the setting at fault. ``caps``
    (setting -> largest value) hold for the layers marked ``capped``. ``adjust`` sees the merged
    values and their sources before they are built (a server lowers the defaults it caps and fills
    in its own paths there), so the settings are still built and checked once.
    """
    types = settings_type.field_types()
    paths = settings_type.path_settings()
    checked = [(layer, _layer_values(owner, layer, types, caps or {}, paths)) for layer in layers]
    chosen: dict[str, Any] = {}
    provenance: dict[str, str] = {}
    for layer, values in checked:
        chosen.update(values)
        provenance.update({name: layer.source for name in values})
    if adjust is not None:
        chosen = adjust(chosen, provenance)
    try:
        settings = settings_type.from_values(chosen, owner=owner)
    except SettingError as exc:
        origin = next((layer for layer, values in reversed(checked) if exc.setting in values), None)
        if origin is None:
            raise
        raise origin.refuse(exc.setting, exc.message, exc.hint) from exc
    return Resolved(settings, provenance)


def _layer_values(owner: str, layer: SettingsLayer, types: Mapping[str, Any], caps: Mapping[str, int],
                  paths: Mapping[str, LocalPath]) -> dict[str, Any]:
    """The layer's values coerced to their types and within ``caps``, naming the layer's field; a
    request (a ``capped`` layer) naming a file or folder here (a :data:`ModelPath`) is refused."""
    values: dict[str, Any] = {}
    for name, value in layer.values.items():
        if name not in types:
            if layer.partial:
                continue
            raise layer.refuse(name, f"{owner} has no setting {name!r}", f"its settings: {', '.join(sorted(types))}")
        if layer.capped and name in paths:
            raise layer.refuse(name, f"{layer.field_of(name)} names {paths[name].what} on the server, which a "
                                     f"request may not do: setting {name!r} is a path",
                               "the server runs the models it was started with (winnow serve --rerank-model, "
                               "--set on the server's command line); leave it out")
        if value is None and _optional_inner(types[name]) is None:
            raise layer.refuse(name, f"setting {name!r} has no value",
                               "give it a value (e.g. --set k=5), or leave it out for the default")
        try:
            value = coerce_value(name, types[name], value)
        except SettingError as exc:
            raise layer.refuse(name, exc.message, exc.hint) from exc
        cap = caps.get(name) if layer.capped else None
        if cap is not None and value is not None and not 0 <= value <= cap:
            label = f"{layer.source} setting {name!r}" if layer.source.startswith("profile") else layer.field_of(name)
            raise layer.refuse(name, f"{label} must be between 0 and {cap} (got {value})")
        values[name] = value
    return values
