"""Method settings from a TOML or YAML file, merged with command-line flags (flags win).

A config file holds run options and method settings at the top level, and optionally a table per
method whose keys apply only to that method::

    method = "rrr"
    model = "qwen2.5-coder-1.5b"
    n = 20

    [rrr]
    rewrites = 3
    tau = 1

Top-level settings a method does not have are ignored for it (``window`` means nothing to
``rankrag``); keys in a method's own table must be settings it has.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import InputError, WinnowError
from .settings import SettingError, SettingsLayer, value_hint


@functools.cache
def _settings_yaml() -> Any:
    """A YAML loader as settings are written: only true and false are booleans (YAML 1.2). PyYAML
    follows YAML 1.1, where off, on, yes, no, y and n are booleans too, so ``--set
    injection_guard=off`` would reach the setting as False and be refused. Made on first use:
    `winnow --help` does not import yaml."""
    import yaml

    class SettingsYaml(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
        pass

    boolean = "tag:yaml.org,2002:bool"
    SettingsYaml.yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != boolean]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    SettingsYaml.add_implicit_resolver(boolean, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    return SettingsYaml


def read_yaml(text: str) -> Any:
    """``text`` read as YAML, booleans as YAML 1.2 has them (:func:`_settings_yaml`)."""
    import yaml

    return yaml.load(text, Loader=_settings_yaml())  # noqa: S506 - a SafeLoader: plain data only


#: Options of a run rather than of a method. ``agents`` is a table of role -> model (``[agents]`` in
#: TOML, ``--agent ROLE=MODEL`` on the command line); judge_model / final_model are older spellings
#: of MAIN-RAG's two roles; ``profile`` names a preset of method settings (winnow.methods.profiles).
RUN_OPTIONS = ("method", "model", "backend", "base_url", "retriever", "context_size", "agents", "judge_model",
               "final_model", "max_inflight", "profile", "slots", "timeout", "hedge", "ann", "ann_set", "tokenizer")


def read_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise WinnowError(f"config file not found: {path}", "pass --config with a .toml or .yaml file")
    text = path.read_text(encoding="utf-8")
    import tomllib

    import yaml  # on first use: `winnow --help` reads neither format

    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            data = read_yaml(text) or {}
        else:
            raise InputError(path, "unknown config format", hint="use a .toml, .yaml or .yml file")
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, f"not valid TOML: {exc}") from exc
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise InputError(path, f"not valid YAML: {exc}", line=None if line is None else line + 1) from exc
    if not isinstance(data, dict):
        raise InputError(path, "a config file must hold a table of settings")
    return data


def _no_example(name: str) -> str | None:
    return None


def parse_assignment(text: str, example: Callable[[str], str | None] = _no_example) -> tuple[str, Any]:
    """``--set key=value``: the value is read as YAML, so 3, 0.5, true and words get their types.
    An empty value (``--set k=``) is refused naming the key: it would otherwise read as "not given".
    ``example`` gives a value a setting accepts, for the hints (None: the hint offers none)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        name = (key or text).strip().replace("-", "_")
        shown = example(name) if name else None
        # Another setting as the example where this one has none to offer: every method has max_answer_tokens.
        raise WinnowError(f"--set {text!r} is not KEY=VALUE",
                          f"e.g. --set {name}={shown}" if shown is not None else "e.g. --set max_answer_tokens=32")
    name = key.strip().replace("-", "_")
    if not value.strip():
        raise SettingError(name, f"--set {name}= has no value", value_hint(name, example(name)))
    import yaml

    try:
        parsed = read_yaml(value)
    except yaml.YAMLError as exc:
        raise SettingError(name, f"--set {name}={value!r} is not a value YAML can read ({exc.__class__.__name__})",
                           "quote words that hold ':' or '#'") from exc
    return name, parsed


def config_layers(config: dict[str, Any], method: str, path: str | Path = "config") -> list[SettingsLayer]:
    """A config file's settings for ``method`` as two layers: the top level (settings of any method;
    those ``method`` lacks are passed over) and the method's own ``[method]`` table (whose keys must
    all be its settings)."""
    own = config.get(method, {})
    if not isinstance(own, dict):
        raise InputError(path, f"[{method}] must be a table of settings", field=method)
    name = Path(path).name
    return [SettingsLayer(f"config {name}", config, partial=True, origin=str(path)),
            SettingsLayer(f"config {name} [{method}]", own, field_of=lambda key: f"{method}.{key}", origin=str(path))]
