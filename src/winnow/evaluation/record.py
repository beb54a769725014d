"""One finished question as a line of ``answers.jsonl``: the answer, its scores, and the ranked
passage ids of the first stage and of every stage of the method, with the ranks that hold an answer.

Everything the metrics need is in the line, so ``metrics.json``, the TREC run files and the
reports are recomputed from ``answers.jsonl`` alone, without the index or the model. Passage texts
are not stored (the index has them); only ids, ranks and, where the stage gave one per passage,
scores.

Stage labels are the stage names, numbered from the second occurrence within a question (RRR
retrieves once per round: ``retrieve``, ``retrieve#2``, …). A stage that hands on its input
unchanged (MAIN-RAG's per-document predictor, the reader) is marked ``passthrough``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..answers import AnswerMatcher, answer_scores
from ..details import JudgeDetails
from ..records import Answer, CandidateList, StageTrace, Usage
from .cost import UsageShare, usage_split
from .retrieval import answer_ranks
from .schema import FirstStage, QuestionRecord, RankedList, Scalar, Scores, StageEntry

if TYPE_CHECKING:
    from ..datasets.qa import QAItem

# Stage details small enough to keep in every line (MAIN-RAG's bar τ and the judge's mean and std,
# filters' kept counts and fallbacks); lists and per-passage maps stay in the full trace.
SCALAR_DETAILS = (str, int, float, bool)


class _PassageMatcher:
    """has_answer per passage id, each passage tokenised once per question."""

    def __init__(self, matcher: AnswerMatcher) -> None:
        self.matcher = matcher
        self.known: dict[str, bool] = {}

    def ranks(self, ids: list[str], texts: dict[str, str]) -> list[int]:
        def holds(pid: str) -> bool:
            if pid not in self.known:
                self.known[pid] = self.matcher(texts.get(pid, ""))
            return self.known[pid]

        return answer_ranks(ids, holds)


def rounded(usage: Usage) -> Usage:
    """``usage`` as its line holds it (seconds to the millisecond), so a record kept in memory and
    the same record read back from answers.jsonl give the same metrics."""
    return Usage(**usage.to_dict())


def _stage_entry(stage: StageTrace, label: str, matcher: _PassageMatcher) -> StageEntry:
    texts = {c["id"]: c.get("text", "") for c in [*stage.input, *stage.output]}
    output_ids = [c["id"] for c in stage.output]
    # A reranker that keeps only the top k records its whole order (see stages.pointwise).
    ids = list(getattr(stage.details, "ranked_ids", None) or output_ids)
    # Empty strings and zero counts say nothing; leaving them out keeps lines as they were before
    # the details were typed (every record now has every field of its kind).
    details: dict[str, Scalar] = {
        key: value for key, value in stage.details.to_dict().items()
        if isinstance(value, SCALAR_DETAILS) and value != "" and value is not False
        and not (type(value) is int and value == 0 and key != "kept")
        and not (isinstance(value, str) and len(value) > 300)}
    return StageEntry(
        stage=label, kind=stage.kind, ids=ids, answer_ranks=matcher.ranks(ids, texts),
        passthrough=bool(stage.input) and ids == [c["id"] for c in stage.input],
        # The scores as the stage gave them (a JSON float reads back exactly): the run files carry
        # them, and a run fed back with --run must fuse as the retriever's own scores do.
        scores=([float(c.get("score", 0.0)) for c in stage.output] if output_ids == ids
                else _whole_order_scores(stage.details, ids)),
        details=details or None,
        # MAIN-RAG's judge scores in retrieval order, for the score-distribution plot.
        judge_scores=({pid: round(float(s), 6) for pid, s in stage.details.scores.items()}
                      if isinstance(stage.details, JudgeDetails) else None),
        seconds=round(stage.seconds, 4), usage=rounded(stage.usage))


def _whole_order_scores(details: object, ids: list[str]) -> list[float] | None:
    """The scores of a stage that passed on only its top k, in its whole order ``ids``, when its
    details kept every passage's score (``scores`` by id: the pointwise and trained rerankers)."""
    scores = getattr(details, "scores", None)
    if not isinstance(scores, dict) or not ids or any(pid not in scores for pid in ids):
        return None
    return [float(scores[pid]) for pid in ids]


def stage_entries(answer: Answer, matcher: _PassageMatcher) -> list[StageEntry]:
    seen: Counter[str] = Counter()
    entries = []
    for stage in answer.trace.stages:
        if not stage.input and not stage.output:
            continue  # a stage with no passages (RRR's rewriter)
        seen[stage.name] += 1
        label = stage.name if seen[stage.name] == 1 else f"{stage.name}#{seen[stage.name]}"
        entries.append(_stage_entry(stage, label, matcher))
    return entries


def question_record(item: QAItem, answer: Answer, first_stage: CandidateList, *, retriever: str,
                    seconds: float, first_stage_seconds: float = 0.0) -> QuestionRecord:
    """The ``answers.jsonl`` line for ``item`` (a :class:`~winnow.datasets.QAItem`).

    ``first_stage`` is the retriever's own top-D list for the question (the baseline row);
    ``seconds`` is the wall time of the whole question, the first-stage search (``first_stage_seconds``)
    included.
    """
    regex = bool(item.is_regex)
    golds = list(item.golden_answers)
    matcher = _PassageMatcher(AnswerMatcher(golds, regex=regex))
    first_texts = {c.passage.id: c.passage.text for c in first_stage}
    first_ids = [c.passage.id for c in first_stage]
    final_texts = {c.passage.id: c.passage.text for c in answer.passages}
    final_ids = [c.passage.id for c in answer.passages]
    return QuestionRecord(
        id=item.id, question=item.question, history=tuple(item.history or ()), golden_answers=golds, regex=regex,
        answer=answer.text,
        scores=Scores(**answer_scores(answer.text, golds, regex=regex, metadata=item.metadata)),
        first_stage=FirstStage(retriever=retriever, ids=first_ids, answer_ranks=matcher.ranks(first_ids, first_texts),
                               seconds=round(first_stage_seconds, 4), scores=[float(c.score) for c in first_stage]),
        stages=stage_entries(answer, matcher),
        final=RankedList(ids=final_ids, answer_ranks=matcher.ranks(final_ids, final_texts),
                         scores=[float(c.score) for c in answer.passages]),
        usage=rounded(answer.usage),
        # The cost by (model, role): evaluation/cost.py.
        usage_split=[UsageShare(s.model, s.role, rounded(s.usage)) for s in usage_split(answer.trace)],
        method_seconds=round(answer.trace.seconds, 4), seconds=round(seconds, 4))
