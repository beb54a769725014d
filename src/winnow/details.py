"""What each kind of stage says about its work: one typed record per stage kind.

A :class:`~winnow.records.StageTrace` carries one of these as ``details``. They are serialised
into every trace (``winnow ask --json``, ``/v1/ask``, ``answers.jsonl``) under the schema version
:data:`TRACE_SCHEMA`, and the web inspector (``service/static/app.js``) and the reports
(``evaluation/record.py``, ``evaluation/report.py``) read them by these field names. The test
``tests/test_details_schema.py`` fails when a field that a reader uses disappears, so renaming a
field here means changing its readers and bumping :data:`TRACE_SCHEMA`.

Every record shares :class:`StageDetails`'s fields: ``fitted`` (passages shortened to fit the
model's context, see :mod:`winnow.stages.fitting`) and ``warning`` (something the reader of the
trace must not miss).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

#: Version of the trace layout, the stage ``details`` records included. 2: typed details per kind.
TRACE_SCHEMA = 2


@dataclass(slots=True)
class StageDetails:
    """Fields every stage kind has. ``kinds`` names the stage kinds that write this record."""

    kinds: ClassVar[tuple[str, ...]] = ()
    fitted: list[dict[str, Any]] = field(default_factory=list)  # {id, tokens, kept_tokens} per passage cut
    warning: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True)
class RetrievalDetails(StageDetails):
    """A first-stage retriever (``bm25``, ``dense``, ``hybrid``, ``lucene``, or ``run``: a precomputed run
    read from a file); ``query`` is the text searched."""

    kinds: ClassVar[tuple[str, ...]] = ("bm25", "dense", "hybrid", "lucene", "run", "retrieve")
    query: str = ""


@dataclass(slots=True)
class RankingDetails(StageDetails):
    """A reranker that scores each passage (RankRAG's P("True"), embedding cosine, score fusion).

    ``ranked_ids`` is the whole reranked order when the stage passed on only its top k (answer
    Recall@k after reranking, RankRAG Table 6, needs ranks beyond k), and ``scores`` every passage's
    score by id then (``winnow fit-fusion`` fits on them); ``choices_not_in_top_tokens``
    lists choices the model's top tokens lacked (their probability is then a bound).
    """

    kinds: ClassVar[tuple[str, ...]] = ("pointwise-true", "embedding-cosine", "score-fusion")
    ranked_ids: list[str] | None = None
    scores: dict[str, float] | None = None  # with ranked_ids: every passage's score (calibrated fusion fits on them)
    choices_not_in_top_tokens: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CrossEncoderDetails(StageDetails):
    """A trained reranker (a cross-encoder's logit, monoT5's P("true"); RankRAG Table 6, RRR Tables 1-3).

    ``model`` is the model folder or hub id; ``scores`` every passage's score by id, those a ``keep``
    cut away included; ``ranked_ids`` the whole order when only the top k went on (as for
    :class:`RankingDetails`); ``truncated`` the passages cut to fit the model's ``max_length``.
    """

    kinds: ClassVar[tuple[str, ...]] = ("cross-encoder", "monot5")
    model: str = ""
    scores: dict[str, float] = field(default_factory=dict)
    ranked_ids: list[str] | None = None
    truncated: int = 0


@dataclass(slots=True)
class PredictorDetails(StageDetails):
    """MAIN-RAG Agent-1: the answer given from each document alone, by passage id."""

    kinds: ClassVar[tuple[str, ...]] = ("per-document-predictor",)
    answers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class JudgeDetails(StageDetails):
    """MAIN-RAG Agent-2: s = log P("Yes") − log P("No") by passage id."""

    kinds: ClassVar[tuple[str, ...]] = ("noisy-document-judge",)
    scores: dict[str, float] = field(default_factory=dict)
    choices_not_in_top_tokens: dict[str, list[str]] = field(default_factory=dict)


@dataclass(slots=True)
class FilterDetails(StageDetails):
    """A filter: MAIN-RAG's adaptive judge bar (τ, mean, std) or RRR's σ > τ threshold.

    ``dropped`` holds each dropped candidate (id, title, scores, note saying why); ``fallback``
    says when the filter kept something against its rule so the reader had a passage; ``order``
    is the order the bar handed the survivors on in ("descending", "ascending", "random (seed 3)").
    """

    kinds: ClassVar[tuple[str, ...]] = ("adaptive-judge-bar", "threshold")
    tau: float | None = None
    mean: float | None = None
    std: float | None = None
    kept: int = 0
    dropped: list[dict[str, Any]] = field(default_factory=list)
    fallback: str = ""
    order: str = ""


@dataclass(slots=True)
class YesNoDetails(StageDetails):
    """The naïve multi-agent variant of MAIN-RAG: the judge's "Yes" or "No" for each passage id,
    the number kept (those judged "Yes", in retrieval order) and the dropped ones with a note."""

    kinds: ClassVar[tuple[str, ...]] = ("yes-no-judgment",)
    decisions: dict[str, str] = field(default_factory=dict)
    kept: int = 0
    dropped: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class GradedDetails(StageDetails):
    """RRR's relevance model σ ∈ 1..5: each passage's grade (``RelevanceGrade.to_dict``).

    ``already_graded`` counts passages whose grade was reused from an earlier round of the same
    question; ``generated_grades`` / ``unreadable_grades`` count grades read from generated text
    rather than next-token probabilities, and those no grade could be read from.
    """

    kinds: ClassVar[tuple[str, ...]] = ("graded",)
    grades: list[dict[str, Any]] = field(default_factory=list)
    already_graded: int = 0
    generated_grades: int = 0
    unreadable_grades: int = 0
    continuation: str = ""  # whether the server continued the started "<<Score>>" (llm/continuation.py)
    probe_calls: int = 0  # the calls that asked it (once per backend)


@dataclass(slots=True)
class ListwiseDetails(StageDetails):
    """RankGPT's sliding windows: each window's ids, the model's answer and the parsed permutation."""

    kinds: ClassVar[tuple[str, ...]] = ("listwise",)
    windows: list[dict[str, Any]] = field(default_factory=list)
    windows_sent: int = 0
    windows_unchanged: int = 0
    windows_repaired: int = 0


@dataclass(slots=True)
class RewriteDetails(StageDetails):
    """RRR's rewriter g: the model's raw answer and the rewrite read from it."""

    kinds: ClassVar[tuple[str, ...]] = ("rewriter",)
    rewrites: list[dict[str, str]] = field(default_factory=list)
    continuation: str = ""  # whether the server continued the started "<<Rewrite>>" (llm/continuation.py)


@dataclass(slots=True)
class PoolDetails(StageDetails):
    """RRR's union S ordered by σ: every round (query, retrieved, kept, new ids, running total)."""

    kinds: ClassVar[tuple[str, ...]] = ("sort",)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    fallback: str = ""
    beyond_n: list[str] = field(default_factory=list)  # ids of S past N, left out by cap_pool_at_n


@dataclass(slots=True)
class AdaptiveDepthDetails(StageDetails):
    """Adaptive depth's decision for one question (:mod:`winnow.stages.adaptive_depth`): the ``rule``
    and the first stage's ``margin`` under it (None when a candidate had no first-stage score), the
    ``threshold``, whether the first stage was ``sure``, how many candidates the LLM stages saw
    (``depth``), how many they did not (``set_aside``), and ``skipped`` when they saw none."""

    kinds: ClassVar[tuple[str, ...]] = ("adaptive-depth",)
    rule: str = ""
    margin: float | None = None
    threshold: float = 0.0
    sure: bool = False
    depth: int = 0
    set_aside: int = 0
    skipped: bool = False


@dataclass(slots=True)
class InjectionDetails(StageDetails):
    """The injection guard (:mod:`winnow.stages.injection`): its ``mode``, the passages that read like
    instructions to the model (``flagged``: id -> the patterns found; ``flagged_count`` of them) and,
    with ``demote``, those moved below the others (``demoted``)."""

    kinds: ClassVar[tuple[str, ...]] = ("injection-guard",)
    mode: str = ""
    flagged: dict[str, list[str]] = field(default_factory=dict)
    flagged_count: int = 0
    demoted: list[str] = field(default_factory=list)
    demoted_count: int = 0  # len(demoted), kept as a scalar in answers.jsonl for the run's totals


@dataclass(slots=True)
class ReaderDetails(StageDetails):
    """The answer and why generation stopped; ``cut_by_token_limit`` when max_tokens ended it."""

    kinds: ClassVar[tuple[str, ...]] = ("reader",)
    answer: str = ""
    finish_reason: str = ""
    cut_by_token_limit: bool = False


DETAIL_RECORDS: tuple[type[StageDetails], ...] = (
    RetrievalDetails, RankingDetails, CrossEncoderDetails, PredictorDetails, JudgeDetails, FilterDetails, YesNoDetails,
    GradedDetails, ListwiseDetails, RewriteDetails, PoolDetails, AdaptiveDepthDetails, InjectionDetails, ReaderDetails)

#: The details record of each stage kind.
DETAILS_BY_KIND: dict[str, type[StageDetails]] = {kind: record for record in DETAIL_RECORDS for kind in record.kinds}


def details_for(kind: str) -> StageDetails:
    """A fresh details record for a stage of ``kind`` (the shared fields alone for unknown kinds)."""
    return DETAILS_BY_KIND.get(kind, StageDetails)()


def schema() -> dict[str, Any]:
    """The details schema as data: version, and each kind's field names (for docs and tests)."""
    return {"version": TRACE_SCHEMA,
            "kinds": {kind: [f.name for f in fields(record)] for kind, record in DETAILS_BY_KIND.items()}}
