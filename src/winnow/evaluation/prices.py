"""A price table: USD per million prompt and completion tokens, per model (``--prices FILE``).

GAR-meets-RAG App. B prices its runs this way ("GPT-4: $0.03 per 1000 tokens of input and $0.06
per 1000 tokens of output"), which is 30 and 60 USD per million. The file is TOML or JSON::

    # USD per million tokens; a model is named as `winnow eval` names it in its cost per model
    [models."gpt-4"]
    prompt = 30.0
    completion = 60.0

    [models."qwen2.5-coder-1.5b"]   # a local model: give it 0 to count it as free
    prompt = 0
    completion = 0

(JSON: ``{"models": {"gpt-4": {"prompt": 30, "completion": 60}}}``.) Every mistake is refused
with the file, the line and the field: an unknown key, a missing price, a negative or non-numeric
one.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, WinnowError

PRICE_FIELDS = ("prompt", "completion")


@dataclass(frozen=True)
class Price:
    """USD per million tokens of one model."""

    prompt: float
    completion: float

    def usd(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1_000_000


@dataclass(frozen=True)
class PriceTable:
    path: str
    sha256: str
    models: dict[str, Price]

    def price_of(self, model: str) -> Price | None:
        return self.models.get(model)


def _line_of(text: str, keys: list[str]) -> int | None:
    """The 1-based line where the key path ``keys`` is written (each key found after the previous
    one), or None: enough to point at the value in a TOML or JSON file of this simple shape."""
    position = 0
    for key in keys:
        # "key" (JSON, or a quoted TOML key), or a bare TOML key before =, . or ]
        found = re.compile(rf'"{re.escape(key)}"|(?<![\w"-]){re.escape(key)}(?=\s*[=.\]])').search(text, position)
        if found is None:
            return None
        position = found.end()
    return text.count("\n", 0, position) + 1


def read_prices(path: str | Path) -> PriceTable:
    """Read and check a price table (see the module notes)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise WinnowError(f"price table not found: {path}", "give --prices a .toml or .json file")
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    try:
        if path.suffix == ".toml":
            data: Any = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            raise InputError(path, "unknown price table format", hint="use a .toml or .json file")
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        raise InputError(path, f"not valid TOML: {exc}", line=int(line.group(1)) if line else None) from exc
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON: {exc.msg}", line=exc.lineno) from exc
    example = 'e.g. [models."gpt-4"] with prompt = 30.0 and completion = 60.0 (USD per million tokens)'
    if not isinstance(data, dict) or set(data) != {"models"} or not isinstance(data["models"], dict):
        extra = sorted(set(data) - {"models"}) if isinstance(data, dict) else []
        raise InputError(path, f"a price table holds one table, models{f'; unknown key(s) {extra}' if extra else ''}",
                         line=_line_of(text, extra[:1]) if extra else None, field=extra[0] if extra else "models",
                         hint=example)
    models: dict[str, Price] = {}
    for model, entry in data["models"].items():
        where = ["models", model]
        if not isinstance(entry, dict):
            raise InputError(path, "a model's prices must be a table of prompt and completion",
                             line=_line_of(text, where), field=f"models.{model}", hint=example)
        unknown = sorted(set(entry) - set(PRICE_FIELDS))
        if unknown:
            raise InputError(path, f"unknown key {unknown[0]!r}: a model has a prompt and a completion price",
                             line=_line_of(text, [*where, unknown[0]]), field=f"models.{model}.{unknown[0]}")
        values = {}
        for name in PRICE_FIELDS:
            value = entry.get(name)
            field = f"models.{model}.{name}"
            if value is None:
                raise InputError(path, f"no {name} price (USD per million {name} tokens)",
                                 line=_line_of(text, where), field=field, hint=example)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InputError(path, f"a price must be a number of USD, 0 or more (got {value!r})",
                                 line=_line_of(text, [*where, name]), field=field)
            values[name] = float(value)
        models[model] = Price(**values)
    return PriceTable(str(path), hashlib.sha256(raw).hexdigest(), models)
