"""One point of the search space: a method, its settings and its agent roles' models.

A configuration is what a trial of the study measures and what a run file (:mod:`.runfile`)
writes. Its settings are resolved by the one settings resolver when it is drawn, so a point that
breaks a rule between settings (``k`` above ``n``) is refused before it costs a call.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..methods import method_class, method_settings
from .space import AGENTS, REFERENCE_METHOD, Dimension, SearchSpace, resolve


@dataclass(frozen=True)
class Configuration:
    """A method with its settings (the values the space gave, as a run records them) and agent models."""

    method: str
    settings: dict[str, Any] = field(default_factory=dict)
    agents: dict[str, str] = field(default_factory=dict)  # role -> model; a role not named runs on the run's model

    def key(self) -> str:
        """Equal for two configurations that run the same: every setting, defaults included."""
        full = method_settings(self.method, **self.settings).to_dict()
        return json.dumps({"method": self.method, "settings": full, "agents": self.agents}, sort_keys=True,
                          default=str)

    def label(self) -> str:
        """``rankrag N=20 k=5 α=0.25``: the method and every setting that differs from its default,
        then the roles on their own model (``judge=qwen2.5-coder-0.5b``)."""
        klass = method_class(self.method)
        defaults = method_settings(self.method).to_dict()
        chosen = method_settings(self.method, **self.settings).to_dict()
        parts = [self.method]
        for name in ("n", "k"):
            if name not in klass.unused_settings and name in chosen:
                parts.append(f"{name.upper() if name == 'n' else name}={chosen[name]}")
        for name, value in chosen.items():
            if name not in ("n", "k") and value != defaults.get(name):
                parts.append(f"α={value:g}" if name == "fusion_alpha" else f"{name}={_shown(value)}")
        parts += [f"{role}={model}" for role, model in sorted(self.agents.items())]
        return " ".join(parts)

    @property
    def is_reference(self) -> bool:
        return self.method == REFERENCE_METHOD

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "settings": dict(self.settings), "agents": dict(self.agents)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Configuration:
        return cls(str(data["method"]), dict(data.get("settings") or {}), dict(data.get("agents") or {}))


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def suggest(trial: Any, dimension: Dimension) -> Any:
    """The dimension's value for an Optuna trial (``optuna.Trial``: its ``suggest_*`` verbs)."""
    if dimension.kind == "choices":
        return trial.suggest_categorical(dimension.name, list(dimension.choices))
    if dimension.kind == "int":
        return trial.suggest_int(dimension.name, int(dimension.low), int(dimension.high),
                                 step=int(dimension.step or 1), log=dimension.log)
    return trial.suggest_float(dimension.name, dimension.low, dimension.high, step=dimension.step, log=dimension.log)


def draw(space: SearchSpace, trial: Any) -> Configuration:
    """The configuration an Optuna trial chooses: the method first, then that method's dimensions
    (their names carry the method, so each method's values are learnt apart). Raises
    :class:`~winnow.errors.InputError` when the values break a rule between settings."""
    method = str(trial.suggest_categorical("method", list(space.methods)))
    part = space.methods[method]
    values = dict(part.fixed)
    agents = dict(part.agents)
    for dimension in part.dimensions:
        value = suggest(trial, dimension)
        if dimension.role:
            agents[dimension.role] = str(value)
        else:
            values[dimension.setting] = value
    return Configuration(method, resolve(space.source, method, values), agents)


def reference_params(space: SearchSpace) -> dict[str, Any]:
    """The Optuna parameters of the reference: vanilla at each setting's default, or, where the space
    does not allow the default, the allowed value nearest to it."""
    part = space.methods[REFERENCE_METHOD]
    defaults = method_settings(REFERENCE_METHOD).to_dict()
    params: dict[str, Any] = {"method": REFERENCE_METHOD}
    for dimension in part.dimensions:
        default = defaults.get(dimension.setting)
        if dimension.setting.startswith(f"{AGENTS}."):
            continue  # vanilla has no agent roles
        if dimension.kind == "choices":
            params[dimension.name] = (default if default in dimension.choices
                                      else _nearest(list(dimension.choices), default))
        else:
            low, high = dimension.low, dimension.high
            value = min(max(float(default), low), high) if isinstance(default, (int, float)) else low
            if dimension.step:
                value = low + round((value - low) / dimension.step) * dimension.step
            params[dimension.name] = int(round(value)) if dimension.kind == "int" else value
    return params


def _nearest(choices: list[Any], default: Any) -> Any:
    numbers = [c for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if numbers and isinstance(default, (int, float)):
        return min(numbers, key=lambda c: abs(c - default))
    return choices[0]


def random_params(space: SearchSpace, rng: Any) -> dict[str, Any]:
    """Optuna parameters of a configuration drawn uniformly (``rng``: a :class:`random.Random`), for
    when the sampler keeps proposing configurations already measured (a small discrete space)."""
    method = rng.choice(list(space.methods))
    params: dict[str, Any] = {"method": method}
    for dimension in space.methods[method].dimensions:
        if dimension.kind == "choices":
            params[dimension.name] = rng.choice(list(dimension.choices))
        elif dimension.kind == "int":
            params[dimension.name] = rng.randrange(int(dimension.low), int(dimension.high) + 1,
                                                   int(dimension.step or 1)) if not dimension.log else \
                int(round(math.exp(rng.uniform(math.log(dimension.low), math.log(dimension.high)))))
        elif dimension.step is not None:
            steps = int(round((dimension.high - dimension.low) / dimension.step))
            params[dimension.name] = round(dimension.low + rng.randrange(steps + 1) * dimension.step, 12)
        elif dimension.log:
            params[dimension.name] = math.exp(rng.uniform(math.log(dimension.low), math.log(dimension.high)))
        else:
            params[dimension.name] = rng.uniform(dimension.low, dimension.high)
    return params
