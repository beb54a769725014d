"""A configuration written as a run file: the TOML that ``--config FILE`` (``ask``, ``eval``, ``serve``,
``mcp``) and ``config=`` (the framework adapters) read through :meth:`winnow.run_spec.RunSpec.resolve`.

The file holds the run options that decide the answers at its top level (method, model, backend,
server, retriever, context), the method's settings in its ``[method]`` table and the agent roles'
models in ``[agents]``: the format :mod:`winnow.config` documents, nothing new. It is read back and
resolved before it is written, so a file ``tune`` writes is one the resolver accepts.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import write_text
from .configuration import Configuration

if TYPE_CHECKING:
    from ..run_spec import RunSpec


def toml_value(value: Any) -> str:
    """A TOML literal for a setting's value (a string, a whole number, a number, true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are TOML basic-string escapes
    raise TypeError(f"no TOML literal for {value!r}")


def _key(name: str) -> str:
    return name if name.replace("_", "").replace("-", "").isalnum() else json.dumps(name)


def run_file_text(spec: RunSpec, configuration: Configuration, header: Sequence[str] = ()) -> str:
    """The run file of ``configuration`` on ``spec``'s model, backend and retriever (no key is ever written)."""
    lines = [f"# {line}" for line in header]
    run: dict[str, Any] = {"method": configuration.method, "model": spec.model, "backend": spec.backend}
    slots = spec.slots if (spec.slots or 1) > 1 else None  # one slot is the default, left out as eval does
    optional = (("base_url", spec.base_url), ("retriever", spec.retriever), ("context_size", spec.context_size),
                ("tokenizer", spec.tokenizer), ("ann", spec.ann), ("slots", slots))
    run.update({key: value for key, value in optional if value})
    lines += [f"{_key(key)} = {toml_value(value)}" for key, value in run.items()]
    tables: list[tuple[str, Mapping[str, Any]]] = [("ann_set", spec.ann_set), (configuration.method,
                                                                              configuration.settings),
                                                   ("agents", configuration.agents)]
    for name, values in tables:
        if values:
            lines += ["", f"[{name}]"] + [f"{_key(key)} = {toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def write_run_file(path: Path, spec: RunSpec, configuration: Configuration, header: Sequence[str] = ()) -> Path:
    """Write the run file atomically, once the resolver has read it back as ``configuration``."""
    from ..run_spec import RunSpec

    text = run_file_text(spec, configuration, header)
    data = tomllib.loads(text)
    assert data.get(configuration.method, {}) == configuration.settings, "run file settings did not round-trip"
    write_text(path, text)
    resolved = RunSpec.resolve(config=path)
    assert (resolved.method, resolved.agents) == (configuration.method, configuration.agents)
    return path
