"""Typed settings, checked once: every method's knobs as a dataclass that coerces and checks itself.

The same values arrive from command-line flags and ``--set KEY=VALUE``, TOML/YAML files, the
Python API and HTTP requests. :func:`settings_from` turns any of them into the method's settings
object, or raises :class:`SettingError` naming the setting and the type or range it needs, never a
command-line flag: HTTP and Python users read the same message (and HTTP maps ``setting`` to the
field of its 422 answer).

A field's annotation is its type: ``int``, ``float``, ``bool``, ``str`` or a ``Literal`` of the
allowed values, or one of them ``| None`` for a setting whose absence means something (a derived
default). Ranges are checked by each settings class's ``check``.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Literal, Mapping, TypeVar

from .errors import WinnowError

S = TypeVar("S", bound="Settings")


class SettingError(WinnowError):
    """A setting with a value of the wrong type or out of range; ``setting`` names it."""

    def __init__(self, setting: str, message: str, hint: str = "") -> None:
        super().__init__(message, hint)
        self.setting = setting


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
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(kind, str(kind))


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
    raise SettingError(name, f"setting {name!r} must be {_type_name(kind)} (got {_described(value)})")


@dataclass
class Settings:
    """Base of every typed settings class: build with :meth:`from_values`, then :meth:`check`."""

    #: What the settings belong to, for messages ("method 'rrr'").
    owner: ClassVar[str] = "settings"

    @classmethod
    def field_types(cls) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        return {f.name: hints[f.name] for f in fields(cls)}

    @classmethod
    def from_values(cls: type[S], values: Mapping[str, Any], *, owner: str | None = None) -> S:
        """The defaults with ``values`` applied (``None`` means "not given"), coerced and checked."""
        types = cls.field_types()
        unknown = sorted(k for k, v in values.items() if v is not None and k not in types)
        if unknown:
            raise SettingError(unknown[0], f"{owner or cls.owner} has no setting(s) {unknown}",
                               f"its settings: {', '.join(types)}")
        chosen = {k: coerce_value(k, types[k], v) for k, v in values.items() if v is not None}
        settings = cls(**chosen)
        settings.check()
        return settings

    def check(self) -> None:
        """Refuse values out of range, naming the setting. Subclasses extend it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def require(self, condition: bool, setting: str, message: str, hint: str = "") -> None:
        """Raise a SettingError for ``setting`` unless ``condition`` holds."""
        if not condition:
            raise SettingError(setting, message, hint)


def at_least(settings: Settings, minimum: float, *names: str) -> None:
    """Every named setting must be at least ``minimum``."""
    for name in names:
        value = getattr(settings, name)
        settings.require(value >= minimum, name, f"setting {name!r} must be at least {minimum:g} (got {value})")
