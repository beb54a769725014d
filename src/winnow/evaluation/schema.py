"""What a run folder holds, as typed records: one ``answers.jsonl`` line (:class:`QuestionRecord`)
and ``metrics.json`` (:class:`Metrics`).

Every reader of a run (``winnow report``, resuming, the sweep summary, the Ray driver, the progress
bar) goes through these records and reads fields, not string keys, so a renamed field is a type
error rather than a ``KeyError`` on someone's month-old run. ``to_json`` writes exactly the JSON
that ``winnow eval`` has always written (same keys, same order, fields added later included), and
``from_json`` reads every file a released layout wrote:

* answers.jsonl lines from before a field existed: the first-stage ``seconds`` (before the report),
  the cache-hit counters ``cached_*`` in ``usage`` (before "cost had nothing been cached"), the
  ``retries`` counter, ``usage_split`` (before the cost per model and role), ``history`` (only
  for dialogue questions). A line keeps the usage counters it was written with
  (:attr:`QuestionRecord.usage_keys`), so an old line is written back unchanged and the cost
  without the cache is not invented for it (:attr:`QuestionRecord.counts_cache_cost`).
* metrics.json from before ``written``, ``question_ids``, ``efficiency``, ``cost_by_model``,
  ``cost_by_role``, ``cost_usd``, ``run.deviations``, ``cost.without_cache``,
  ``cost.first_stage_seconds_per_question``, ``questions.failed_this_session`` and the stage
  costs' ``llm_seconds`` and ``retries``: absent reads as "not recorded" (None, or 0 for a count).

Versions. :data:`ANSWERS_SCHEMA` and :data:`METRICS_SCHEMA` are 1, the layout every run so far
wrote; version-1 files carry no version key, so no byte of them changes. A later layout writes
``"schema": N``; a reader meeting a version it does not know, a field of the wrong type, a missing
field or one it does not know (a newer Winnow's) refuses the file, naming it, the line and the
field. The test ``tests/test_run_schema.py`` fails when a field that the readers use is missing
here, so renaming a field means changing its readers and bumping the version.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar, Union

from ..errors import InputError
from ..records import Turn, Usage
from .cost import SplitCost, UsageShare, UsdCost

#: Layout of an ``answers.jsonl`` line. 1: every line written so far (no version key in the line).
ANSWERS_SCHEMA = 1
#: Layout of ``metrics.json``. 1: every file written so far (no version key in the file).
METRICS_SCHEMA = 1
#: The key a later layout writes its version under; absent means version 1.
VERSION_KEY = "schema"

#: Usage counters in the order :meth:`Usage.to_dict` writes them (what a new line holds).
USAGE_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Usage))

# A field marked OMIT is left out of the JSON when it holds its default: the writers have always
# left it out then (``regex`` only when true, ``history`` only for a dialogue), or older files lack it.
OMIT = {"omit": True}
# A field marked KEYS is not a JSON key: it says which usage counters the line was written with.
KEYS = {"keys": True}


class SchemaError(ValueError):
    """A field of a run file that is missing, unknown or of the wrong type; ``field`` is its dotted path."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field = field_path
        self.message = message


R = TypeVar("R", bound="JsonRecord")


class JsonRecord:
    """A record of a run file: ``to_json`` as the file holds it, ``from_data`` checked field by field."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = _dump(self)
        return data

    @classmethod
    def from_data(cls: type[R], data: object, where: str = "") -> R:
        """The record from parsed JSON; a :class:`SchemaError` names the field (``where`` prefixes it)."""
        return _build(cls, data, where)


# --- the records of an answers.jsonl line ------------------------------------------------------------

class Ranked(Protocol):
    """A ranked list of passage ids and the 1-based ranks that hold a gold answer."""

    ids: list[str]
    answer_ranks: list[int]


#: How a report names each accuracy a run may quote (``Metrics.headline_accuracy``).
ACCURACY_NAMES = {"accuracy": "normalised containment", "accuracy_match": "Self-RAG's match",
                  "accuracy_popqa": "PopQA's match"}


@dataclass(kw_only=True)
class Scores(JsonRecord):
    """A question's answer scores (SQuAD EM and token F1, containment accuracy), or their run means."""

    em: float
    f1: float
    accuracy: float
    str_em: float | None = field(default=None, metadata=OMIT)  # ASQA questions only (ALCE's str-em)
    rouge_l: float | None = field(default=None, metadata=OMIT)  # ASQA questions only (ROUGE-Lsum)
    #: Self-RAG's raw, case-sensitive containment, the accuracy RankRAG and MAIN-RAG cite (not for
    #: labels, choices or regex answers, and absent from lines written before it)
    accuracy_match: float | None = field(default=None, metadata=OMIT)
    accuracy_popqa: float | None = field(default=None, metadata=OMIT)  # PopQA's raw/lower/capitalised containment

    NAMES: ClassVar[tuple[str, ...]] = ("em", "f1", "accuracy")
    OPTIONAL: ClassVar[tuple[str, ...]] = ("str_em", "rouge_l", "accuracy_match", "accuracy_popqa")

    def of(self, name: str) -> float:
        """The score called ``name`` (one of :attr:`NAMES`)."""
        return float(getattr(self, name))

    def headline(self, name: str | None) -> float:
        """The accuracy a run quotes: the score ``name`` (``Metrics.headline_accuracy``) where the
        questions have it, else ``accuracy``."""
        value = getattr(self, name) if name else None
        return float(self.accuracy if value is None else value)


@dataclass(kw_only=True)
class RankedList(JsonRecord):
    """The passages the answer was read from (``final``), with their last stage's scores (None in
    lines older than them)."""

    ids: list[str]
    answer_ranks: list[int]
    scores: list[float] | None = field(default=None, metadata=OMIT)


@dataclass(kw_only=True)
class FirstStage(JsonRecord):
    """The retriever's own top-D list, the baseline row; ``seconds`` is None in lines older than it,
    ``scores`` (the retriever's, one per id, as it gave them) None in lines older than them."""

    retriever: str
    ids: list[str]
    answer_ranks: list[int]
    seconds: float | None = field(default=None, metadata=OMIT)
    scores: list[float] | None = field(default=None, metadata=OMIT)


#: A stage detail small enough for every line (MAIN-RAG's τ, a filter's kept count, …).
Scalar = Union[str, int, float, bool]


@dataclass(kw_only=True)
class StageEntry(JsonRecord):
    """One stage of the method for one question (see :mod:`.record`): its label (``retrieve#2``
    for a second round), kind, ranked ids, and what it cost. ``scores``, one per id, only when the
    stage scored every passage it ranked (kept in its details when it passed on its top k);
    ``details`` the scalar details; ``judge_scores`` MAIN-RAG's judge."""

    stage: str
    kind: str
    ids: list[str]
    answer_ranks: list[int]
    passthrough: bool
    scores: list[float] | None = field(default=None, metadata=OMIT)
    details: dict[str, Scalar] | None = field(default=None, metadata=OMIT)
    judge_scores: dict[str, float] | None = field(default=None, metadata=OMIT)
    seconds: float
    usage: Usage
    usage_keys: tuple[str, ...] = field(default=USAGE_KEYS, metadata=KEYS)

    def detail(self, name: str) -> Scalar | None:
        """The scalar detail ``name`` (``tau``, ``kept``, …), None when the stage recorded none."""
        return (self.details or {}).get(name)


@dataclass(kw_only=True)
class QuestionRecord(JsonRecord):
    """One ``answers.jsonl`` line: a finished question with everything its metrics need.

    ``usage_split`` is None in lines older than the cost per model and role; ``usage_keys`` names
    the usage counters the line holds (all of them for a new line).
    """

    id: str
    question: str
    history: tuple[Turn, ...] = field(default=(), metadata=OMIT)
    golden_answers: list[str]
    regex: bool = field(default=False, metadata=OMIT)
    answer: str
    scores: Scores
    first_stage: FirstStage
    stages: list[StageEntry]
    final: RankedList
    usage: Usage
    usage_split: list[UsageShare] | None = field(default=None, metadata=OMIT)
    method_seconds: float
    seconds: float
    usage_keys: tuple[str, ...] = field(default=USAGE_KEYS, metadata=KEYS)

    @property
    def counts_cache_cost(self) -> bool:
        """Whether the line records what its cache hits cost when first asked (lines since that count)."""
        return "cached_prompt_tokens" in self.usage_keys

    def stage(self, label: str) -> StageEntry | None:
        """The entry of the stage labelled ``label`` (``retrieve``, ``retrieve#2``, …), if it ran."""
        return next((entry for entry in self.stages if entry.stage == label), None)

    @classmethod
    def from_json(cls, data: object, *, path: str | Path = "answers.jsonl", line: int | None = None) -> QuestionRecord:
        """The record of one parsed line; an error names ``path``, ``line`` and the field at fault."""
        try:
            _check_version(data, ANSWERS_SCHEMA)
            return _build(cls, data, "")
        except SchemaError as exc:
            raise InputError(path, f"not an answer record of this Winnow ({exc.message})", line=line,
                             field=exc.field, hint=_HINT) from exc


# --- the records of metrics.json ---------------------------------------------------------------------

@dataclass(kw_only=True)
class RunInfo(JsonRecord):
    """What was run: method, models, retriever, every setting, the question file, the seed and limit.
    ``label`` names the run in reports; ``deviations`` are the settings beyond the paper (setting → why)."""

    method: str
    model: str
    backend: str
    retriever: str
    settings: dict[str, Any]
    queries: str
    seed: int | None
    limit: int | None
    label: str
    deviations: dict[str, str] | None = field(default=None, metadata=OMIT)


@dataclass(kw_only=True)
class QuestionCounts(JsonRecord):
    selected: int
    answered: int
    remaining: int
    regex_answers: int
    failed_this_session: int | None = field(default=None, metadata=OMIT)  # set by the run, not the metrics


@dataclass(kw_only=True)
class UncachedCost(JsonRecord):
    """Per question, the cost had no call come from the cache (the hits at the price of their first asking)."""

    llm_calls_per_question: float
    prompt_tokens_per_question: float
    completion_tokens_per_question: float
    llm_seconds_per_question: float


@dataclass(kw_only=True)
class CostSummary(JsonRecord):
    """The run's LLM calls, tokens and seconds, in all and per question."""

    llm_calls: int
    cache_hits: int
    prompt_tokens: int
    completion_tokens: int
    llm_seconds: float
    llm_calls_per_question: float
    prompt_tokens_per_question: float
    completion_tokens_per_question: float
    seconds_per_question: float
    method_seconds_per_question: float
    first_stage_seconds_per_question: float | None = field(default=None, metadata=OMIT)
    total_seconds: float
    without_cache: UncachedCost | None = None
    #: Cached answers refused (a bad checksum, none, or failing today's checks) and asked again; 0 is not written.
    cache_rejected: int = field(default=0, metadata=OMIT)
    #: Choice calls with none of the choices among the model's top tokens (each scored uniform); 0 is not written.
    choices_not_in_top: int = field(default=0, metadata=OMIT)


@dataclass(kw_only=True)
class InjectionSummary(JsonRecord):
    """The injection guard over the run (:mod:`winnow.stages.injection`): the questions with a passage
    that reads like instructions to the model, those passages, and those demoted (``demote`` mode)."""

    questions_flagged: int
    passages_flagged: int
    passages_demoted: int = 0


@dataclass(kw_only=True)
class StageCost(JsonRecord):
    """One stage's mean cost per question (its rounds summed)."""

    seconds: float
    llm_calls: float
    prompt_tokens: float
    completion_tokens: float
    llm_seconds: float = 0.0
    retries: float = 0.0


@dataclass(kw_only=True)
class Efficiency(JsonRecord):
    """RankRAG's time overhead of reranking N·t2 / (t1 + t3) (§4.3; :mod:`.efficiency`), per question."""

    retrieval_seconds: float
    reranking_seconds: float
    generation_seconds: float
    overhead_ratio: float | None
    definition: str


@dataclass(kw_only=True)
class QrelsMetrics(JsonRecord):
    """Relevance-judgement metrics per row (nDCG@10, MRR@10, Recall@k, ``judged_questions``), with the
    qrels file and its checksum and how many judged documents the index lacks (``index_coverage``)."""

    file: str | None = field(default=None, metadata=OMIT)
    sha256: str | None = field(default=None, metadata=OMIT)
    index_coverage: dict[str, Any] | None = field(default=None, metadata=OMIT)
    capped: bool = False
    # trec_eval's -l: the lowest grade counted relevant; files written before it was a choice used 1 and omit it
    relevance_level: int | None = field(default=None, metadata=OMIT)
    rows: dict[str, dict[str, float]]


@dataclass(kw_only=True)
class Metrics(JsonRecord):
    """``metrics.json``: every metric of a run, recomputed from its answers (:mod:`.metrics`).

    ``rows`` names the lists compared (``first_stage``, the method's stages, ``final``); ``answer_recall``
    and ``list_length`` are per row, ``question_ids`` the questions scored, in the order chosen.
    """

    written: str | None = field(default=None, metadata=OMIT)  # when the file was written
    run: RunInfo
    questions: QuestionCounts
    answer: Scores
    rows: list[str]
    answer_recall: dict[str, dict[str, float]]
    list_length: dict[str, float]
    first_stage_depth: int
    cost: CostSummary
    #: The answer score the run quotes as its accuracy when it is not ``accuracy`` (Winnow's
    #: normalised containment): ``accuracy_match`` (Self-RAG's ``match``, which RankRAG §5.1 and
    #: MAIN-RAG §4.1 cite) or ``accuracy_popqa`` on PopQA, under a paper profile
    #: (:func:`winnow.evaluation.metrics.cited_accuracy`). Both stay in ``answer``.
    headline_accuracy: str | None = field(default=None, metadata=OMIT)
    stage_cost: dict[str, StageCost] = field(default_factory=dict)
    cost_by_model: dict[str, SplitCost] | None = None
    cost_by_role: dict[str, SplitCost] | None = None
    cost_usd: UsdCost | None = None
    efficiency: Efficiency | None = None
    qrels: QrelsMetrics | None = None
    #: The injection guard's totals; only when a question had a passage flagged.
    injection: InjectionSummary | None = field(default=None, metadata=OMIT)
    question_ids: list[str] = field(default_factory=list)  # last: long, and what reports read the records by

    @classmethod
    def from_json(cls, data: object, *, path: str | Path = "metrics.json") -> Metrics:
        """The metrics of a parsed ``metrics.json``; an error names ``path`` and the field at fault."""
        try:
            _check_version(data, METRICS_SCHEMA)
            return _build(cls, data, "")
        except SchemaError as exc:
            raise InputError(path, f"not the metrics of this Winnow ({exc.message})", field=exc.field,
                             hint="rerun its `winnow eval` command: with nothing left to ask it rewrites them") from exc


#: Every record of the two files (for the schema test and the docs).
RECORDS: tuple[type, ...] = (QuestionRecord, Scores, FirstStage, StageEntry, RankedList, Metrics, RunInfo,
                             QuestionCounts, CostSummary, UncachedCost, StageCost, Efficiency, QrelsMetrics, SplitCost,
                             UsdCost, InjectionSummary)

_HINT = "every line is written whole by `winnow eval`; delete the damaged line to ask that question again"


# --- reading and writing, field by field ---------------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}
T = TypeVar("T")


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _check_version(data: Any, known: int) -> None:
    if isinstance(data, dict) and VERSION_KEY in data:
        version = data[VERSION_KEY]
        if version != known:
            raise SchemaError(VERSION_KEY, f"schema version {version!r}, this Winnow reads version {known} "
                                           "(written by another Winnow version: read it with that version)")


def _describe(value: Any) -> str:
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def _usage(data: Any, where: str) -> tuple[Usage, tuple[str, ...]]:
    """Usage counters (any subset: older lines hold fewer) and the names the line held, in its order."""
    if not isinstance(data, dict):
        raise SchemaError(where, f"expected an object of usage counters, got {_describe(data)}")
    hints = _hints(Usage)
    values = {}
    for key, value in data.items():
        if key not in hints:
            raise SchemaError(f"{where}.{key}", "not a usage counter (written by a newer Winnow?)")
        values[key] = _value(value, hints[key], f"{where}.{key}")
    return Usage(**values), tuple(data)


def _share(data: Any, where: str) -> UsageShare:
    if not isinstance(data, dict):
        raise SchemaError(where, f"expected an object, got {_describe(data)}")
    for key in ("model", "role"):
        if not isinstance(data.get(key), str):
            raise SchemaError(f"{where}.{key}", "missing, or not a string")
    _usage({k: v for k, v in data.items() if k not in ("model", "role")}, where)
    return UsageShare.from_dict(data)


def _value(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against the type ``hint``; records built, numbers kept as written."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        failure: SchemaError | None = None
        for option in options:
            if option is type(None):
                continue
            try:
                return _value(value, option, where)
            except SchemaError as exc:
                failure = failure or exc
        assert failure is not None
        raise failure
    if hint is UsageShare:
        return _share(value, where)
    if hint in (bool, int, float, str):
        ok = (isinstance(value, bool) if hint is bool else isinstance(value, str) if hint is str
              else not isinstance(value, bool) and isinstance(value, (int, float) if hint is float else int))
        if not ok:
            raise SchemaError(where, f"expected {'a number' if hint is float else hint.__name__}, "
                                     f"got {_describe(value)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise SchemaError(where, f"expected a list, got {_describe(value)}")
        item = typing.get_args(hint)[0]
        items = [_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(where, f"expected an object, got {_describe(value)}")
        item = typing.get_args(hint)[1]
        return {key: _value(v, item, f"{where}.{key}") for key, v in value.items()}
    if isinstance(hint, type) and is_dataclass(hint):
        return _build(hint, value, where)
    raise TypeError(f"{where}: no reader for {hint!r}")  # a field type this module does not know: a bug here


def _build(cls: type[T], data: Any, where: str) -> T:
    """A ``cls`` record from a JSON object, every field checked against its type."""
    if not isinstance(data, dict):
        raise SchemaError(where or "(line)", f"expected an object, got {_describe(data)}")
    prefix = f"{where}." if where else ""
    record_fields = fields(typing.cast(Any, cls))
    known = {f.name for f in record_fields if not f.metadata.get("keys")}
    unknown = [key for key in data if key not in known and not (key == VERSION_KEY and not where)]
    if unknown:
        raise SchemaError(prefix + unknown[0], "unknown field (written by a newer Winnow?)")
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for f in record_fields:
        if f.metadata.get("keys"):
            continue
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise SchemaError(prefix + f.name, "missing")
            continue
        if hints[f.name] is Usage:
            values[f.name], values["usage_keys"] = _usage(data[f.name], prefix + f.name)
        else:
            values[f.name] = _value(data[f.name], hints[f.name], prefix + f.name)
    try:
        return cls(**values)
    except ValueError as exc:  # a record's own check (a dialogue turn's role)
        raise SchemaError(where or "(line)", str(exc)) from exc


#: Values written as they are (checked first: most of a record's values are ids, ranks and scores).
_SCALARS = (str, int, float, bool, type(None))


def _dump(record: Any) -> Any:
    """A record as JSON data, its fields in order; OMIT fields left out at their default."""
    if isinstance(record, _SCALARS):
        return record
    if isinstance(record, UsageShare):
        return record.to_dict()
    if isinstance(record, Turn):
        return record.to_dict()
    if isinstance(record, (list, tuple)):
        return [item if isinstance(item, _SCALARS) else _dump(item) for item in record]
    if isinstance(record, dict):
        return {key: _dump(value) for key, value in record.items()}
    if not is_dataclass(record) or isinstance(record, type):
        return record
    data: dict[str, Any] = {}
    for name, omitted in _written_fields(type(record)):
        value = getattr(record, name)
        if value is omitted or (omitted is not _KEPT and value == omitted):
            continue
        if isinstance(value, Usage):
            counters = value.to_dict()
            data[name] = {key: counters[key] for key in getattr(record, "usage_keys", USAGE_KEYS)}
        else:
            data[name] = _dump(value)
    return data


_KEPT = object()  # a field written whatever its value


@lru_cache(maxsize=None)
def _written_fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """A record class's written fields in order, each with the value that leaves it out (OMIT fields
    at their default) or ``_KEPT``; read once per class, not per record."""
    return tuple((f.name, (f.default if f.default is not MISSING else None) if f.metadata.get("omit") else _KEPT)
                 for f in fields(cls) if not f.metadata.get("keys"))
