"""LLM cost per model and per agent role, and in USD with a price table (GAR-meets-RAG App. B).

App. B reports RRR's cost the way a reproducer needs it: per model ("320 calls to GPT-3.5-Turbo
and 9 calls to GPT-4 per query"), with the tokens each call used and the prices that make them
dollars (Table A1). Each ``answers.jsonl`` line keeps its question's cost split by (model, role)
under ``usage_split`` (:class:`UsageShare`); ``metrics.json`` sums those into ``cost_by_model`` and
``cost_by_role`` (:class:`SplitCost`) and, given ``--prices``, ``cost_usd`` (:class:`UsdCost`).

These records are the schema of those keys (:mod:`.schema` reads them in the run's files):
``tests/test_cost.py`` fails when a key that ``winnow eval`` or ``winnow report`` reads is not a field here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

from ..records import Trace, Usage
from .prices import PriceTable


@dataclass(frozen=True)
class UsageShare:
    """One (model, role) part of a question's LLM cost: an element of ``usage_split`` in answers.jsonl."""

    model: str
    role: str
    usage: Usage

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "role": self.role, **self.usage.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UsageShare:
        counters = {f.name for f in fields(Usage)}
        return cls(str(data["model"]), str(data["role"]), Usage(**{k: v for k, v in data.items() if k in counters}))


def usage_split(trace: Trace) -> list[UsageShare]:
    """A question's ``usage_split``: its trace's cost by (model, role)."""
    return [UsageShare(model, role, usage) for (model, role), usage in trace.usage_split().items()]


@dataclass
class SplitCost:
    """One model's (or one role's) part of a run's LLM cost, summed over its questions.

    ``models`` are the models that served a role, ``roles`` the roles a model served. ``usd`` is
    what the calls that reached the model cost at the price table's prices, ``usd_without_cache``
    adds the cache hits at the tokens of their first asking; both None without a price table or
    when a model has no price in it.
    """

    llm_calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    llm_seconds: float = 0.0
    models: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    usd: float | None = None
    usd_without_cache: float | None = None

    def add(self, share: UsageShare) -> None:
        usage = share.usage
        self.llm_calls += usage.calls
        self.cache_hits += usage.cache_hits
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.cached_prompt_tokens += usage.cached_prompt_tokens
        self.cached_completion_tokens += usage.cached_completion_tokens
        self.llm_seconds = round(self.llm_seconds + usage.seconds, 3)
        if share.model not in self.models:
            self.models.append(share.model)
        if share.role not in self.roles:
            self.roles.append(share.role)

    def price(self, prices: PriceTable) -> None:
        """Set ``usd`` and ``usd_without_cache`` from the prices of its model (a cost of one model,
        or a role's served by one model); left None when that model has no price."""
        price = prices.price_of(self.models[0]) if len(self.models) == 1 else None
        if price is not None:
            self.usd = price.usd(self.prompt_tokens, self.completion_tokens)
            self.usd_without_cache = price.usd(self.prompt_tokens + self.cached_prompt_tokens,
                                               self.completion_tokens + self.cached_completion_tokens)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class UsdCost:
    """A run's LLM cost in USD at a price table's prices (``metrics.json`` ``cost_usd``).

    ``total`` and the per-question figures are None when a model of the run has no price
    (``unpriced_models`` names them): a sum that leaves a model out would be wrong, not cheaper.
    """

    prices: str
    sha256: str
    questions: int
    total: float | None
    per_question: float | None
    without_cache_per_question: float | None
    unpriced_models: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SplitRecord(Protocol):
    """What the sums below read of an ``answers.jsonl`` line (:class:`~winnow.evaluation.schema.QuestionRecord`,
    which is built of these records and so is not imported here)."""

    @property
    def usage_split(self) -> Sequence[UsageShare] | None: ...


def shares_of(records: Sequence[SplitRecord]) -> list[UsageShare] | None:
    """Every (model, role) share of the records, or None when some record predates ``usage_split``."""
    splits = [record.usage_split for record in records]
    return None if any(split is None for split in splits) else [share for split in splits for share in split or ()]


def split_costs(records: Sequence[SplitRecord], prices: PriceTable | None = None
                ) -> tuple[dict[str, SplitCost], dict[str, SplitCost]] | None:
    """The run's cost by model and by role (None for records made before the split was recorded)."""
    shares = shares_of(records)
    if shares is None:
        return None
    by_model: dict[str, SplitCost] = {}
    by_role: dict[str, SplitCost] = {}
    for share in shares:
        by_model.setdefault(share.model, SplitCost()).add(share)
        by_role.setdefault(share.role, SplitCost()).add(share)
    if prices is not None:
        for cost in [*by_model.values(), *by_role.values()]:
            cost.price(prices)
    return by_model, by_role


def usd_cost(by_model: Mapping[str, SplitCost], prices: PriceTable, questions: int) -> UsdCost:
    """The run's cost in USD from its cost by model (see :class:`UsdCost`)."""
    unpriced = sorted(model for model in by_model if prices.price_of(model) is None)
    count = max(questions, 1)
    total = None if unpriced else sum(cost.usd or 0.0 for cost in by_model.values())
    full = None if unpriced else sum(cost.usd_without_cache or 0.0 for cost in by_model.values())
    return UsdCost(prices.path, prices.sha256, questions, total, None if total is None else total / count,
                   None if full is None else full / count, unpriced)
