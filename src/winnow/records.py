"""The small typed records every stage reads and writes.

A :class:`Passage` is a unit of retrievable text. A :class:`CandidateList` is the ranked list a
query carries through the pipeline: each :class:`Candidate` keeps the score and rank every stage
gave it, so the final list still shows where a passage started and why it moved. A :class:`Trace`
records each stage, every LLM call and what it cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterator, TypeVar

from .details import TRACE_SCHEMA, StageDetails, details_for

Details = TypeVar("Details", bound=StageDetails)
#: The role of a stage that calls the method's own model rather than an agent role's (the reader,
#: RankRAG's reranker, MAIN-RAG's Agent-1); the name Pipeline.model_roles gives that model.
DEFAULT_ROLE = "default"


@dataclass(frozen=True, slots=True)
class Passage:
    """A retrievable unit of text. ``id`` is unique within a corpus."""

    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text, "metadata": dict(self.metadata)}

    def with_text(self, text: str) -> Passage:
        """This passage with another text (a cut one); ``dataclasses.replace`` does the same, at
        several times the cost, and prompt fitting does it for every passage of every prompt."""
        return Passage(self.id, text, self.title, self.metadata)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Passage:
        return cls(
            id=str(data["id"]),
            text=data["text"],
            title=data.get("title") or "",
            metadata=dict(data.get("metadata") or {}),
        )


#: Who said a turn of a dialogue: the user asking, or the assistant answering.
ROLES = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class Turn:
    """One earlier turn of a dialogue: who said it (``"user"`` or ``"assistant"``) and what."""

    role: str
    text: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"a turn's role is 'user' or 'assistant', not {self.role!r}")

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "text": self.text}


def dialogue_history(value: Any) -> tuple[Turn, ...]:
    """The earlier turns of a dialogue as handed in (a JSON list of ``{"role", "text"}``), checked.

    A dialogue opens with the user and alternates, and the last earlier turn is the assistant's:
    the question itself is the user's next turn (RankRAG Appendix D: "User: {Question 1}",
    "Assistant: {Answer 1}", …, then the latest question). Each turn's text passes the same checks
    as a question (:func:`winnow.text.text_problem`). Raises ValueError naming the turn and field.
    """
    from .text import text_problem

    if not isinstance(value, list):
        raise ValueError(f"history must be a list of {{\"role\", \"text\"}} turns, not {type(value).__name__}")
    turns = []
    for i, item in enumerate(value):
        where = f"history[{i}]"
        if not isinstance(item, dict) or set(item) - {"role", "text"}:
            raise ValueError(f"{where} must be an object with exactly the fields \"role\" and \"text\"")
        role, text = item.get("role"), item.get("text")
        expected = ROLES[i % 2]
        if role != expected:
            raise ValueError(f"{where}.role is {role!r}, expected {expected!r}: a dialogue opens with the user "
                             "and alternates user and assistant")
        if not isinstance(text, str):
            raise ValueError(f"{where}.text must be a string")
        if (problem := text_problem(text)) is not None:
            raise ValueError(f"{where}.text {problem}")
        turns.append(Turn(role, text))
    if turns and turns[-1].role != "assistant":
        raise ValueError(f"history[{len(turns) - 1}] is the user's: the last earlier turn is the assistant's "
                         "answer (the question itself is the user's next turn)")
    return tuple(turns)


@dataclass(frozen=True, slots=True)
class Query:
    """A question or search query; ``id`` is optional for ad-hoc questions.

    ``history`` holds the turns of a dialogue before this question, oldest first (Doc2Dial,
    TopiOCQA, INSCIT: RankRAG §5.1, Appendix D); a query without one is a question on its own.
    """

    text: str
    id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    history: tuple[Turn, ...] = ()

    @property
    def search_text(self) -> str:
        """What a retriever searches for this query: the question, preceded by the dialogue's
        earlier turns when it has any (the latest question alone is often "what about him?")."""
        return " ".join([*(turn.text for turn in self.history), self.text])


@dataclass(frozen=True, slots=True)
class StageScore:
    """What one stage said about one candidate: its score and the 1-based rank it gave."""

    stage: str
    score: float
    rank: int


@dataclass(slots=True)
class Candidate:
    """A passage in a ranked list, with the score and rank each stage gave it."""

    passage: Passage
    scores: list[StageScore] = field(default_factory=list)
    note: str = ""  # why a stage kept, moved or dropped it (filters write here)

    @property
    def score(self) -> float:
        """The most recent stage's score."""
        return self.scores[-1].score if self.scores else 0.0

    def score_of(self, stage: str) -> float | None:
        for entry in reversed(self.scores):
            if entry.stage == stage:
                return entry.score
        return None

    def rank_of(self, stage: str) -> int | None:
        for entry in reversed(self.scores):
            if entry.stage == stage:
                return entry.rank
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.passage.id,
            "title": self.passage.title,
            "text": self.passage.text,
            "score": self.score,
            # Not dataclasses.asdict: it deep-copies field by field, a tenth of a fast run's CPU.
            "scores": [{"stage": s.stage, "score": s.score, "rank": s.rank} for s in self.scores],
            **({"note": self.note} if self.note else {}),
        }


@dataclass(slots=True)
class CandidateList:
    """The ranked candidates of one query, best first."""

    query: Query
    candidates: list[Candidate] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.candidates)

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self.candidates)

    @property
    def passages(self) -> list[Passage]:
        return [c.passage for c in self.candidates]

    def ranked_by(self, stage: str, scores: list[float], keep: int | None = None) -> CandidateList:
        """A new list ordered by ``scores`` (one per current candidate, higher is better).

        Ties keep the current order (a stable sort), so an uninformative scorer never shuffles
        the first-stage ranking. Every candidate records the stage's score and its new rank.
        """
        if len(scores) != len(self.candidates):
            raise ValueError(f"stage {stage!r} gave {len(scores)} scores for {len(self.candidates)} candidates")
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        if keep is not None:
            order = order[:keep]
        ranked = []
        for rank, i in enumerate(order, start=1):
            old = self.candidates[i]
            ranked.append(Candidate(old.passage, [*old.scores, StageScore(stage, float(scores[i]), rank)], old.note))
        return CandidateList(self.query, ranked)

    def truncated(self, k: int) -> CandidateList:
        return CandidateList(self.query, self.candidates[:k])

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(c.to_dict(), rank=rank) for rank, c in enumerate(self.candidates, start=1)]


@dataclass(slots=True)
class Usage:
    """LLM cost counters. ``seconds`` is wall time spent waiting on the model (0 for cache hits).

    The ``cached_*`` counters hold what the cache hits cost when they were first asked, so a rerun
    served from the cache can still say what it would cost without one.
    """

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    cached_seconds: float = 0.0
    retries: int = 0  # requests sent again after a passing server failure (429, 5xx, timeout, reset)
    cache_rejected: int = 0  # cached answers refused (bad checksum, none, or failing today's checks) and asked again
    choices_not_in_top: int = 0  # choice calls with none of the choices among the top tokens (scored uniform)

    def add(self, other: Usage) -> None:
        for name in _USAGE_COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def count(self, call: LLMCall) -> None:
        """Add one LLM call: to the calls and their cost, or, served from the cache, to the hits."""
        if call.cached:
            self.cache_hits += 1
            self.cached_prompt_tokens += call.prompt_tokens
            self.cached_completion_tokens += call.completion_tokens
            self.cached_seconds += call.seconds
        else:
            self.calls += 1
            self.prompt_tokens += call.prompt_tokens
            self.completion_tokens += call.completion_tokens
            self.seconds += call.seconds
            self.retries += call.retries
            self.cache_rejected += call.cache_rejected
        self.choices_not_in_top += call.choices_not_in_top

    def to_dict(self) -> dict[str, Any]:
        counts = {name: getattr(self, name) for name in _USAGE_COUNTERS}
        return {name: round(value, 3) if isinstance(value, float) else value for name, value in counts.items()}


#: Usage's counters in order (``dataclasses.fields`` rebuilds the tuple at every call: a question's
#: record adds and writes a dozen usages, and a fast server asks for hundreds of records a second).
_USAGE_COUNTERS = tuple(counter.name for counter in fields(Usage))


@dataclass(slots=True)
class LLMCall:
    """One request to a model and its answer, as recorded in a trace."""

    stage: str
    kind: str  # "generate" or "choices"
    messages: list[dict[str, str]]
    output: Any  # generated text, or {choice: probability}
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    cached: bool
    finish_reason: str = ""  # "length" when the token limit cut a generated answer
    retries: int = 0  # times the request was sent again after a passing server failure
    model: str = ""  # the model that answered (its identity's name), for cost per model
    #: A cached answer for this call was refused (see winnow.llm.cache) and the model asked again.
    cache_rejected: bool = False
    #: None of the choices was among the model's top next tokens: each got the lowest log-probability
    #: seen, so the choices are uniform after renormalisation (P = 1/len(choices); P("True") 0.5).
    choices_not_in_top: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for flag in _CALL_FLAGS:  # only when set: a trace's calls keep the keys they always had
            if not data[flag]:
                del data[flag]
        return data


_CALL_FLAGS = ("cache_rejected", "choices_not_in_top")


@dataclass(slots=True)
class StageTrace:
    """What one stage did for one question: its settings, its input and output lists, its typed
    details (:mod:`winnow.details`, one record per stage kind), its time and LLM use.

    A stage run over a batch of questions gives each question its own StageTrace; ``batch`` is the
    number of questions it ran with and ``seconds`` this question's share of the stage's wall time.
    """

    name: str
    kind: str
    settings: dict[str, Any] = field(default_factory=dict)
    input: list[dict[str, Any]] = field(default_factory=list)
    output: list[dict[str, Any]] = field(default_factory=list)
    details: StageDetails = None  # type: ignore[assignment]  # set from ``kind`` when not given
    seconds: float = 0.0
    usage: Usage = field(default_factory=Usage)
    llm_calls: list[LLMCall] = field(default_factory=list)
    batch: int = 1
    role: str = ""  # the agent role whose model the stage called (Method.stage_roles), "" without LLM calls

    def __post_init__(self) -> None:
        if self.details is None:
            self.details = details_for(self.kind)

    def details_as(self, record: type[Details]) -> Details:
        """``details`` as the record this stage's kind writes (a stage asks for its own kind's)."""
        if not isinstance(self.details, record):
            raise TypeError(f"stage {self.name!r} of kind {self.kind!r} has {type(self.details).__name__} details, "
                            f"not {record.__name__}")
        return self.details

    def record(self, call: LLMCall) -> None:
        """Add one LLM call to this stage's record and cost."""
        self.llm_calls.append(call)
        self.usage.count(call)

    def to_dict(self, with_text: bool = False) -> dict[str, Any]:
        def slim(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return items if with_text else [{k: v for k, v in c.items() if k != "text"} for c in items]

        return {
            "name": self.name,
            "kind": self.kind,
            "settings": self.settings,
            "input": slim(self.input),
            "output": slim(self.output),
            "details": self.details.to_dict(),
            "seconds": round(self.seconds, 3),
            **({"batch": self.batch} if self.batch > 1 else {}),
            **({"role": self.role} if self.role else {}),
            "usage": self.usage.to_dict(),
            "llm_calls": [c.to_dict() for c in self.llm_calls],
        }


@dataclass(slots=True)
class Trace:
    """The full record of one question: its stages in order, each with the LLM calls it made."""

    stages: list[StageTrace] = field(default_factory=list)
    seconds: float = 0.0
    #: The recipe the method ran, as it prints (``Retriever(...) >> ... % 5 >> Reader()``); "" for a
    #: stage run alone.
    recipe: str = ""

    @property
    def usage(self) -> Usage:
        total = Usage()
        for stage in self.stages:
            total.add(stage.usage)
        return total

    def usage_split(self) -> dict[tuple[str, str], Usage]:
        """The LLM cost by (model, role): which model answered each call, for which agent role
        (GAR-meets-RAG App. B counts calls and tokens per model). The parts sum to :attr:`usage`."""
        split: dict[tuple[str, str], Usage] = {}
        for stage in self.stages:
            for call in stage.llm_calls:
                split.setdefault((call.model, stage.role or DEFAULT_ROLE), Usage()).count(call)
        return split

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": TRACE_SCHEMA,
            "stages": [s.to_dict() for s in self.stages],
            "seconds": round(self.seconds, 3),
            "usage": self.usage.to_dict(),
            **({"recipe": self.recipe} if self.recipe else {}),
        }


@dataclass(slots=True)
class Answer:
    """The result of asking a method one question."""

    question: str
    text: str
    method: str
    passages: CandidateList
    trace: Trace
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def usage(self) -> Usage:
        return self.trace.usage

    @property
    def cut_by_token_limit(self) -> bool:
        """True when the answer stopped at its token limit rather than where the model ended it."""
        readers = [s for s in self.trace.stages if s.kind == "reader"]
        return bool(readers) and bool(getattr(readers[-1].details, "cut_by_token_limit", False))

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.text,
            "answer_cut_by_token_limit": self.cut_by_token_limit,
            "method": self.method,
            "settings": self.settings,
            "passages": self.passages.to_dicts(),
            "usage": self.usage.to_dict(),
            "trace": self.trace.to_dict(),
        }
