"""``metrics.json``: every metric of a run, recomputed from its ``answers.jsonl`` records.

Lists compared per question, in this order (the rows of RankRAG Tables 6 and 8, "before" and
"after" ranking):

* ``first_stage`` - the retriever's own top-D list (D = max(N, 20)): the baseline every report shows;
* each stage of the method that produced a list (``retrieve``, ``rerank``, ``judge``,
  ``adaptive_bar``, ``order``, …), skipping stages that only hand on their input and the extra
  rounds of RRR (``retrieve#2``…), which not every question has;
* ``final`` - the passages the answer was read from.

A question whose method skipped a stage (RRR does not rerank a pool of one) carries its previous
list forward, so every row averages over the same questions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from ..answers import mean
from ..records import Usage
from .cost import SplitCost, UsdCost, split_costs, usd_cost
from .efficiency import reranking_overhead
from .prices import PriceTable
from .retrieval import ANSWER_RECALL_KS, answer_recall, qrels_metrics
from .schema import (
    CostSummary,
    InjectionSummary,
    Metrics,
    QrelsMetrics,
    QuestionCounts,
    QuestionRecord,
    Ranked,
    RankedList,
    RunInfo,
    Scores,
    StageCost,
    UncachedCost,
)

QRELS_RECALL_KS = (5, 10, 20, 50, 100)


def answer_means(records: Sequence[QuestionRecord]) -> Scores:
    """Mean EM, F1 and accuracy over the questions, and ASQA's ``str_em`` and ``rouge_l`` (means over
    the questions that have them) when some have."""
    means = {name: mean(r.scores.of(name) for r in records) for name in Scores.NAMES}
    for name in Scores.OPTIONAL:
        scored = [value for r in records if (value := getattr(r.scores, name)) is not None]
        if scored:
            means[name] = mean(scored)
    return Scores(**means)


#: The ``metadata["dataset"]`` names of PopQA's questions (:mod:`winnow.datasets.benchmarks`).
POPQA_DATASETS = ("popqa", "popqa-longtail")


def cited_accuracy(profile: str | None, datasets: Iterable[str]) -> str:
    """The answer score a run quotes as its accuracy: Winnow's ``accuracy`` (SQuAD-normalised
    containment) without a profile; under a paper profile the metric the papers cite, Self-RAG's
    ``match`` (``accuracy_match``: RankRAG §5.1 and MAIN-RAG §4.1 "following Self-RAG"), or
    PopQA's own test (``accuracy_popqa``) when every question is PopQA's."""
    if not profile:
        return "accuracy"
    names = set(datasets)
    return "accuracy_popqa" if names and names <= set(POPQA_DATASETS) else "accuracy_match"


def stage_labels(records: Sequence[QuestionRecord]) -> list[str]:
    """The method's list-producing stages, in the order they ran (see the module notes)."""
    order: list[str] = []
    passthrough: dict[str, bool] = {}
    for record in records:
        for entry in record.stages:
            label = entry.stage
            if "#" in label:
                continue
            if label not in passthrough:
                order.append(label)
                passthrough[label] = True
            passthrough[label] = passthrough[label] and entry.passthrough
    return [label for label in order if not passthrough[label]]


def lists_by_row(records: Sequence[QuestionRecord], labels: Sequence[str]) -> dict[str, list[Ranked]]:
    """Row name → one ranked list per record, stages carried forward when skipped."""
    rows: dict[str, list[Ranked]] = {"first_stage": [r.first_stage for r in records]}
    rows.update({label: [] for label in labels})
    for record in records:
        own = {entry.stage: entry for entry in record.stages}
        previous: Ranked = RankedList(ids=[], answer_ranks=[])
        for label in labels:
            previous = own.get(label, previous)
            rows[label].append(previous)
    rows["final"] = [r.final for r in records]
    return rows


def cutoffs(depth: int, ks: Sequence[int]) -> list[int]:
    chosen = [k for k in ks if k <= depth]
    return chosen or [max(depth, 1)]


def cost_summary(records: Sequence[QuestionRecord]) -> CostSummary:
    totals = Usage()
    for record in records:
        totals.add(record.usage)
    count = max(len(records), 1)
    return CostSummary(
        llm_calls=totals.calls,
        cache_hits=totals.cache_hits,
        prompt_tokens=totals.prompt_tokens,
        completion_tokens=totals.completion_tokens,
        llm_seconds=round(totals.seconds, 3),
        llm_calls_per_question=totals.calls / count,
        prompt_tokens_per_question=totals.prompt_tokens / count,
        completion_tokens_per_question=totals.completion_tokens / count,
        seconds_per_question=mean(r.seconds for r in records),
        method_seconds_per_question=mean(r.method_seconds for r in records),
        first_stage_seconds_per_question=mean(r.first_stage.seconds or 0.0 for r in records),
        total_seconds=round(sum(r.seconds for r in records), 3),
        without_cache=without_cache(records, totals),
        cache_rejected=totals.cache_rejected,
        choices_not_in_top=totals.choices_not_in_top,
    )


def injection_summary(records: Sequence[QuestionRecord]) -> InjectionSummary | None:
    """The injection guard's flags and demotions over the run; None when it flagged nothing."""
    flagged = demoted = questions = 0
    for record in records:
        counts = [(int(s.detail("flagged_count") or 0), int(s.detail("demoted_count") or 0))
                  for s in record.stages if s.kind == "injection-guard"]
        questions += any(f for f, _ in counts)
        flagged += sum(f for f, _ in counts)
        demoted += sum(d for _, d in counts)
    if not flagged:
        return None
    return InjectionSummary(questions_flagged=questions, passages_flagged=flagged, passages_demoted=demoted)


def without_cache(records: Sequence[QuestionRecord], totals: Usage) -> UncachedCost | None:
    """What the run's LLM calls cost had none come from the call cache: the calls it made plus the cache
    hits at the price they had when first asked. ``None`` when some record predates that count."""
    if any(r.usage.cache_hits and not r.counts_cache_cost for r in records):
        return None
    count = max(len(records), 1)
    return UncachedCost(
        llm_calls_per_question=(totals.calls + totals.cache_hits) / count,
        prompt_tokens_per_question=(totals.prompt_tokens + totals.cached_prompt_tokens) / count,
        completion_tokens_per_question=(totals.completion_tokens + totals.cached_completion_tokens) / count,
        llm_seconds_per_question=(totals.seconds + totals.cached_seconds) / count,
    )


def stage_costs(records: Sequence[QuestionRecord]) -> dict[str, StageCost]:
    """Per stage name (rounds summed): mean seconds, LLM calls, tokens, the seconds the calls took on
    the server side (``llm_seconds``, summed over calls in flight together) and retries per question."""
    sums: dict[str, StageCost] = {}
    for record in records:
        for entry in record.stages:
            stage = sums.setdefault(entry.stage.split("#")[0], StageCost(
                seconds=0.0, llm_calls=0, prompt_tokens=0, completion_tokens=0, llm_seconds=0.0, retries=0))
            stage.seconds += entry.seconds
            stage.llm_calls += entry.usage.calls
            stage.prompt_tokens += entry.usage.prompt_tokens
            stage.completion_tokens += entry.usage.completion_tokens
            stage.llm_seconds += entry.usage.seconds
            stage.retries += entry.usage.retries
    count = max(len(records), 1)
    return {name: StageCost(**{f.name: getattr(stage, f.name) / count for f in fields(stage)})
            for name, stage in sums.items()}


def cost_split_metrics(records: Sequence[QuestionRecord], prices: PriceTable | None = None
                       ) -> tuple[dict[str, SplitCost] | None, dict[str, SplitCost] | None, UsdCost | None]:
    """``cost_by_model``, ``cost_by_role`` (None for records older than the split) and, with a price
    table, ``cost_usd``: see :mod:`.cost`."""
    split = split_costs(records, prices)
    if split is None:
        return None, None, None
    by_model, by_role = split
    return by_model, by_role, usd_cost(by_model, prices, len(records)) if prices else None


def compute_metrics(records: Sequence[QuestionRecord], *, selected: int, run: RunInfo, depth: int,
                    qrels: Mapping[str, Mapping[str, int]] | None = None, qrels_info: Mapping[str, Any] | None = None,
                    capped: bool = False, prices: PriceTable | None = None, relevance_level: int = 1,
                    headline: str = "accuracy") -> Metrics:
    """The whole ``metrics.json`` for the finished ``records`` of ``selected`` chosen questions;
    ``depth`` is the first-stage depth D, the deepest cutoff worth reporting; ``prices`` (``--prices``)
    adds the cost in USD; ``qrels_info`` the qrels file's ``file``, ``sha256`` and ``index_coverage``;
    ``relevance_level`` is the lowest qrels grade counted relevant (trec_eval's ``-l``); ``headline``
    the score quoted as the run's accuracy (:func:`cited_accuracy`), kept where the questions have it
    (labels, letters and regex answers have only ``accuracy``)."""
    labels = stage_labels(records)
    answer = answer_means(records)
    quoted = headline if headline != "accuracy" and getattr(answer, headline, None) is not None else None
    rows = lists_by_row(records, labels)
    answer_ks = cutoffs(depth, ANSWER_RECALL_KS)
    by_model, by_role, usd = cost_split_metrics(records, prices)
    judged = None
    if qrels is not None:
        qrels_ks = cutoffs(depth, QRELS_RECALL_KS)
        ids = [r.id for r in records]
        judged = QrelsMetrics(**dict(qrels_info or {}), capped=capped, relevance_level=relevance_level, rows={
            row: qrels_metrics(qrels, {qid: entry.ids for qid, entry in zip(ids, lists, strict=True)},
                               recall_ks=qrels_ks, capped=capped, relevance_level=relevance_level)
            for row, lists in rows.items()})
    return Metrics(
        run=run,
        questions=QuestionCounts(selected=selected, answered=len(records), remaining=selected - len(records),
                                 regex_answers=sum(1 for r in records if r.regex)),
        answer=answer,
        headline_accuracy=quoted,
        rows=["first_stage", *labels, "final"],
        answer_recall={row: answer_recall([entry.answer_ranks for entry in lists], answer_ks)
                       for row, lists in rows.items()},
        list_length={row: mean(len(entry.ids) for entry in lists) for row, lists in rows.items()},
        first_stage_depth=depth,
        cost=cost_summary(records),
        stage_cost=stage_costs(records),
        cost_by_model=by_model, cost_by_role=by_role, cost_usd=usd,
        efficiency=reranking_overhead(records),  # RankRAG §4.3/§5.5: the time overhead of reranking
        qrels=judged,
        injection=injection_summary(records),
        question_ids=[r.id for r in records],
    )
