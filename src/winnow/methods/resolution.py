"""One settings resolver: a method's typed settings from layers of values, with where each came from.

Every source of method settings comes here: command-line flags and ``--set``, a config file's top
level and its ``[method]`` table, a named profile (``--profile paper``), the Python API, HTTP
requests, MCP tool calls and the framework integrations. A layer is one source's values; later
layers win (a profile < the config file's top level < its method table < flags). Each value is
coerced to the setting's type and checked against the setting's bounds as it is read, so an error
names the source's own field (``options.window`` over HTTP, ``window`` on the command line), and
the cross-field rules (``k ≤ n``, ``step ≤ window``) are checked once, on the merged settings, by
the settings type itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..settings import Adjust, LayeredSettingError, Resolved, SettingError, SettingsLayer, coerce_value, resolve_layers
from .base import MethodSettings

#: A method's resolved settings, with the source of each value a layer gave.
ResolvedSettings = Resolved[MethodSettings]


def resolve_settings(method: str, layers: Sequence[SettingsLayer], *, profile: str | None = None,
                     caps: Mapping[str, int] | None = None, adjust: Adjust | None = None) -> ResolvedSettings:
    """The settings of ``method`` from its defaults, then ``profile``'s values (a named preset,
    :mod:`.profiles`), then each layer in order (:func:`winnow.settings.resolve_layers`).

    ``caps`` (setting -> largest value) are a server's ceilings on costly settings, on top of the
    bounds every settings type declares; they hold for the layers marked ``capped`` (what a request
    asked, and the profile it named), not for the server's own settings. A bad value raises
    :class:`~winnow.settings.LayeredSettingError` naming the setting and the layer's field for it.
    ``adjust`` is :func:`~winnow.settings.resolve_layers`'s last step (a server's ceilings and fills).
    """
    from .profiles import profile_settings
    from .registry import method_class

    settings_type = method_class(method).Settings
    try:
        preset = profile_settings(profile, method, _explicit_task(settings_type, layers))
    except SettingError as exc:
        raise LayeredSettingError("profile", "profile", exc.message, exc.hint) from exc
    if preset:
        layers = [SettingsLayer(f"profile {profile!r}", preset, field_of=lambda _key: "profile",
                                capped=any(layer.capped for layer in layers)), *layers]
    return resolve_layers(settings_type, layers, owner=f"method {method!r}", caps=caps, adjust=adjust)


def _explicit_task(settings_type: type[MethodSettings], layers: Sequence[SettingsLayer]) -> str | None:
    """The task the layers give (the last one's), which picks a profile's answer limit for it; a
    value that is not a task is left for its own layer to refuse."""
    for layer in reversed(layers):
        value = layer.values.get("task")
        if value is not None:
            try:
                return str(coerce_value("task", settings_type.field_types()["task"], value))
            except SettingError:
                return None
    return None
