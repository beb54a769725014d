"""The search space of ``winnow tune``: methods, their settings' values and each agent role's models.

A space is a TOML file with a table per method; each key is a setting of that method, with a fixed
value, a list of values to choose from, or a range::

    max_answer_tokens = 32              # top level: every method that has the setting (fixed or searched)

    [rankrag]
    n = [10, 20, 40]                    # choices
    k = { low = 3, high = 8 }           # an integer range (step 1)
    fusion_alpha = { low = 0.0, high = 1.0, step = 0.25 }

    [mainrag]
    judge_n = [-0.5, 0, 0.5, 1]
    [mainrag.agents]                    # a model per agent role, searched like a setting
    judge = ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]

Every value is checked by the settings resolver every other front door uses
(:func:`winnow.methods.resolve_settings`, the typed settings' bounds and rules), so a value or a
range end outside a setting's bounds, an unknown setting, method or agent role is refused naming the
file, the method and the setting. ``vanilla`` is always in the space: it is the reference every
configuration is measured against (:mod:`.study`).
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import InputError, WinnowError
from ..methods import METHODS, check_agent_roles, method_class, resolve_settings
from ..settings import SettingError, SettingsLayer

#: The method of the reference configuration: plain RAG with the run's model (RankRAG Table 2's baseline).
REFERENCE_METHOD = "vanilla"
AGENTS = "agents"
RANGE_KEYS = ("low", "high", "step", "log")

#: The space searched when ``--space`` is not given: each method's settings that trade quality for
#: LLM calls, over values a CPU or a served model can afford (the papers' values are the large ends).
DEFAULT_SPACE = """\
# winnow tune's default search space (docs/tuning.md). Copy it, change it, pass it with --space.
[vanilla]
k = [3, 5, 10]

[rankrag]                       # RankRAG: P("True") reranking of the top N (§4.3)
n = [10, 20, 40]
k = [3, 5]
fusion_alpha = [0.0, 0.25, 0.5, 0.75]

[mainrag]                       # MAIN-RAG: the judge's adaptive bar tau = mean - n * std
n = [10, 20]
judge_n = [-0.5, 0.0, 0.5, 1.0]

[rrr]                           # GAR-meets-RAG: rewrite, grade, rerank (§4(D))
n = [10, 20]
k = [3, 5]
rewrites = [1, 2, 3]
tau = [1.0, 2.0, 3.0]
window = [5, 10]
step = [3, 5]

[rankgpt]                       # RankGPT: listwise sliding windows
n = [10, 20]
k = [3, 5]
window = [5, 10]
step = [3, 5]
fusion_alpha = [0.0, 0.5]
"""


@dataclass(frozen=True)
class Dimension:
    """One searched setting (or agent role) of one method: a list of choices, or a numeric range."""

    method: str
    setting: str  # a setting's name, or "agents.ROLE"
    choices: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    step: float | None = None
    log: bool = False
    kind: Literal["choices", "int", "float"] = "choices"

    @property
    def name(self) -> str:
        """The parameter's name in the study: ``rankrag.n``, ``mainrag.agents.judge``."""
        return f"{self.method}.{self.setting}"

    @property
    def role(self) -> str:
        """The agent role this dimension chooses a model for, "" for a setting."""
        return self.setting.split(".", 1)[1] if self.setting.startswith(f"{AGENTS}.") else ""

    def values(self) -> list[Any]:
        """The values this dimension can take, where they are few (a range's ends otherwise)."""
        if self.kind == "choices":
            return list(self.choices)
        if self.step is not None and not self.log:
            count = int(round((self.high - self.low) / self.step)) + 1
            if count <= 64:
                found = [self.low + i * self.step for i in range(count)]
                return [int(v) for v in found] if self.kind == "int" else [round(v, 12) for v in found]
        return [self.low, self.high]

    def size(self) -> int | None:
        """How many values the dimension has; None for a continuous range."""
        if self.kind == "choices":
            return len(self.choices)
        if self.kind == "int" and not self.log:
            return int((self.high - self.low) // (self.step or 1)) + 1
        if self.step is not None and not self.log:
            return int(round((self.high - self.low) / self.step)) + 1
        return None

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "choices":
            return {"choices": list(self.choices)}
        return {"kind": self.kind, "low": self.low, "high": self.high, "step": self.step, "log": self.log}


@dataclass(frozen=True)
class MethodSpace:
    """A method's part of the space: its fixed settings and agent models, and its dimensions."""

    method: str
    fixed: dict[str, Any] = field(default_factory=dict)
    agents: dict[str, str] = field(default_factory=dict)  # role -> model, fixed
    dimensions: tuple[Dimension, ...] = ()

    def size(self) -> int | None:
        total = 1
        for dimension in self.dimensions:
            count = dimension.size()
            if count is None:
                return None
            total *= count
        return total


@dataclass(frozen=True)
class SearchSpace:
    """The methods searched (vanilla, the reference, always among them) and where the space came from."""

    source: str
    methods: dict[str, MethodSpace]

    def size(self) -> int | None:
        """Configurations in the space (None when a range is continuous)."""
        sizes = [space.size() for space in self.methods.values()]
        return None if any(size is None for size in sizes) else sum(size or 0 for size in sizes)

    def models(self) -> list[str]:
        """Every model an agent role may run on, in the order the space names them."""
        found: dict[str, None] = {}
        for space in self.methods.values():
            found.update(dict.fromkeys(space.agents.values()))
            for dimension in space.dimensions:
                if dimension.role:
                    found.update(dict.fromkeys(dimension.choices))
        return list(found)

    def to_dict(self) -> dict[str, Any]:
        return {method: {"fixed": space.fixed, "agents": space.agents,
                         "dimensions": {d.setting: d.to_dict() for d in space.dimensions}}
                for method, space in self.methods.items()}

    def fingerprint(self) -> str:
        """The space's identity (not its file's layout): a study continues only in the space it began in."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_space(path: Path | None) -> SearchSpace:
    """The space of the TOML file ``path``, checked; the default space when ``path`` is None."""
    if path is None:
        return parse_space(tomllib.loads(DEFAULT_SPACE), "the default space")
    if not path.is_file():
        raise WinnowError(f"--space {path}: no such file", "give a TOML search space (docs/tuning.md), or leave "
                                                           "--space out for the default space")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text ({exc.reason})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, f"not valid TOML: {exc}") from exc
    return parse_space(data, str(path))


def parse_space(data: Mapping[str, Any], source: str) -> SearchSpace:
    """The space of a parsed TOML document (see the module notes); ``source`` names it in refusals."""
    tables = {key: value for key, value in data.items() if key in METHODS}
    shared = {key: value for key, value in data.items() if key not in METHODS}
    for key, value in tables.items():
        if not isinstance(value, dict):
            raise InputError(source, f"[{key}] must be a table of the method's settings", field=key)
    unknown = [key for key, value in shared.items() if isinstance(value, dict) and not _is_range(value)]
    if unknown:
        raise InputError(source, f"unknown method {unknown[0]!r}", field=unknown[0],
                         hint=f"a table per method: {', '.join(METHODS)}")
    for key in shared:
        if key == AGENTS:
            raise InputError(source, "agent roles belong to a method: [METHOD.agents]", field=key,
                             hint="e.g. [mainrag.agents] judge = [\"qwen2.5-coder-1.5b\"]")
        if not any(key in m.Settings.field_types() for m in METHODS.values()):
            raise InputError(source, f"no method has a setting {key!r}", field=key,
                             hint="`winnow methods` lists every method's settings")
    chosen = list(tables) or [REFERENCE_METHOD]
    if REFERENCE_METHOD not in chosen:
        chosen.insert(0, REFERENCE_METHOD)  # the reference is always measured
    methods = {}
    for method in chosen:
        klass = method_class(method)
        own = dict(tables.get(method, {}))
        usable = {key: value for key, value in shared.items()
                  if key in klass.Settings.field_types() and key not in klass.unused_settings}
        methods[method] = _method_space(source, method, {**usable, **own})
    return SearchSpace(source, methods)


def _is_range(value: Mapping[str, Any]) -> bool:
    return bool(value) and set(value) <= set(RANGE_KEYS)


def _method_space(source: str, method: str, table: Mapping[str, Any]) -> MethodSpace:
    klass = method_class(method)
    types = klass.Settings.field_types()
    fixed: dict[str, Any] = {}
    agents: dict[str, str] = {}
    dimensions: list[Dimension] = []
    for key, value in table.items():
        if key == AGENTS:
            role_fixed, role_dims = _agents(source, method, value)
            agents.update(role_fixed)
            dimensions.extend(role_dims)
            continue
        if key not in types:
            raise InputError(source, f"method {method!r} has no setting {key!r}", field=f"{method}.{key}",
                             hint=f"its settings: {', '.join(types)}")
        if key in klass.unused_settings:
            raise InputError(source, f"method {method!r} does not use setting {key!r}: every value gives the same "
                                     "run", field=f"{method}.{key}", hint="leave it out of this method's table")
        if isinstance(value, list):
            dimensions.append(_choices(source, method, key, value))
        elif isinstance(value, dict):
            dimensions.append(_range(source, method, key, value, types[key]))
        else:
            fixed[key] = value
    space = MethodSpace(method, fixed, agents, tuple(dimensions))
    _check_values(source, space)
    return space


def _agents(source: str, method: str, value: Any) -> tuple[dict[str, str], list[Dimension]]:
    """``[method.agents]``: role = "model" (fixed) or role = ["model", ...] (searched)."""
    if not isinstance(value, dict):
        raise InputError(source, f"[{method}.agents] must be a table of role = model(s)", field=f"{method}.agents",
                         hint='e.g. judge = ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]')
    fixed: dict[str, str] = {}
    dimensions: list[Dimension] = []
    for role, models in value.items():
        where = f"{method}.agents.{role}"
        try:
            check_agent_roles(method, [role])
        except WinnowError as exc:
            raise InputError(source, exc.message, field=where, hint=exc.hint) from exc
        listed = models if isinstance(models, list) else [models]
        if not listed or not all(isinstance(m, str) and m.strip() for m in listed):
            raise InputError(source, "an agent role takes a model name or a list of them", field=where,
                             hint='e.g. ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]')
        if isinstance(models, list):
            dimensions.append(_choices(source, method, f"{AGENTS}.{role}", models))
        else:
            fixed[role] = models
    return fixed, dimensions


def _choices(source: str, method: str, setting: str, values: list[Any]) -> Dimension:
    where = f"{method}.{setting}"
    if not values:
        raise InputError(source, "an empty list of values", field=where, hint="give at least one value")
    if not all(isinstance(v, (str, int, float, bool)) for v in values):
        raise InputError(source, "a list of values must hold numbers, words or true/false", field=where)
    seen = [json.dumps(v) for v in values]
    twice = next((v for i, v in enumerate(values) if seen.index(json.dumps(v)) != i), None)
    if twice is not None:
        raise InputError(source, f"the value {twice!r} is given twice", field=where)
    return Dimension(method, setting, choices=tuple(values))


def _range(source: str, method: str, setting: str, value: Mapping[str, Any], kind: Any) -> Dimension:
    where = f"{method}.{setting}"
    extra = sorted(set(value) - set(RANGE_KEYS))
    if extra:
        raise InputError(source, f"a range has no key(s) {extra}", field=where,
                         hint="a range is { low = A, high = B } with optional step and log")
    if kind not in (int, float):
        raise InputError(source, f"setting {setting!r} is not a number: give a list of values, not a range",
                         field=where)
    missing = [key for key in ("low", "high") if key not in value]
    if missing:
        raise InputError(source, f"a range needs {' and '.join(missing)}", field=where,
                         hint="e.g. { low = 0.0, high = 1.0, step = 0.25 }")
    numbers = {key: value[key] for key in ("low", "high", "step") if key in value}
    for key, number in numbers.items():
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            raise InputError(source, f"the range's {key} must be a number (got {number!r})", field=where)
        if kind is int and not float(number).is_integer():
            raise InputError(source, f"setting {setting!r} is an integer: the range's {key} must be one "
                                     f"(got {number!r})", field=where)
    low, high = float(numbers["low"]), float(numbers["high"])
    step = float(numbers["step"]) if "step" in numbers else (1.0 if kind is int else None)
    log = value.get("log", False)
    if not isinstance(log, bool):
        raise InputError(source, f"the range's log must be true or false (got {log!r})", field=where)
    if low > high:
        raise InputError(source, f"the range's low ({low:g}) is above its high ({high:g})", field=where)
    if step is not None and step <= 0:
        raise InputError(source, f"the range's step must be above 0 (got {step:g})", field=where)
    if log and (low <= 0 or "step" in numbers):
        raise InputError(source, "a log range needs low above 0 and no step", field=where)
    if step is not None and not log:
        count = (high - low) / step
        if abs(count - round(count)) > 1e-9:
            raise InputError(source, f"the range's high - low ({high - low:g}) is not a multiple of its step "
                                     f"({step:g})", field=where, hint="make high = low + a whole number of steps")
    kind_name: Literal["int", "float"] = "int" if kind is int else "float"
    return Dimension(method, setting, low=low, high=high, step=None if log else step, log=log, kind=kind_name)


def _check_values(source: str, space: MethodSpace) -> None:
    """Every fixed value, every choice and both ends of every range through the settings resolver.

    A value is accepted when some assignment of the space's other values makes the method's rules
    hold: ``k = 10`` is fine beside ``n = [5, 20]`` (``k ≤ n`` holds at n = 20). The refusal names
    the file, the method and the setting (``space.toml, field 'rankrag.k': setting 'k' must be …``)."""
    method = space.method
    resolve(source, method, space.fixed)
    settings = [d for d in space.dimensions if not d.role]
    for dimension in settings:
        others = [d for d in settings if d is not dimension]
        contexts: list[dict[str, Any]] = [{}]
        contexts += [{d.setting: min(d.values(), key=_order) for d in others},
                     {d.setting: max(d.values(), key=_order) for d in others}]
        contexts += [{d.setting: v} for d in others for v in d.values()]
        for value in dimension.values():
            _check_one(source, space, dimension, value, contexts)


def _order(value: Any) -> Any:
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def _check_one(source: str, space: MethodSpace, dimension: Dimension, value: Any,
               contexts: Sequence[dict[str, Any]]) -> None:
    first: WinnowError | None = None
    for context in contexts:
        try:
            resolve(source, space.method, {**space.fixed, **context, dimension.setting: value},
                    blame=dimension.setting)
            return
        except WinnowError as exc:
            first = first or exc
    assert first is not None
    raise first


def resolve(source: str, method: str, values: Mapping[str, Any], *, blame: str = "") -> dict[str, Any]:
    """``values`` for ``method`` through :func:`~winnow.methods.resolve_settings`: the method's
    settings as a run records them (those given), or an :class:`InputError` naming ``source`` and
    ``method.SETTING``; with ``blame``, that setting is named whichever setting's rule refused it."""
    layer = SettingsLayer(f"space [{method}]", values, field_of=lambda key: f"{method}.{key}")
    try:
        return resolve_settings(method, [layer]).overrides()
    except SettingError as exc:
        message, hint = exc.message, exc.hint
        if hint and message.endswith(f" ({hint})"):
            message = message[: -len(hint) - 3]
        setting = blame or exc.setting
        raise InputError(source, message, field=f"{method}.{setting}", hint=hint) from exc
