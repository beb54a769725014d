"""The time overhead of reranking, as RankRAG defines it (Yu et al., NeurIPS 2024, §4.3 and §5.5).

§4.3, "Efficiency Discussion": "for each question, denote the time for indexing and retrieval as
t1, the time for using LLM to calculate the relevance score as t2, and the time for generation as
t3, then the ratio of added time overhead is N∗t2 / (t1+t3)" (t2 per passage, so N·t2 is the
whole reranking). §5.5 and Fig. 5 plot it against N (20 to 100) beside exact match: "an
additional 0.9x to 6.0x increase in time".

From a run's ``answers.jsonl`` records, per question:

* t1 is the wall time of the method's retrieval stage(s) (no model call);
* N·t2 is the model time of every LLM call between retrieval and generation — RankRAG's N
  P("True") calls (for other methods, whatever they do in that place: MAIN-RAG's Agent-1 and
  Agent-2, RRR's relevance, rewrite and re-ranking calls);
* t3 is the model time of the generation stage's calls.

Model time is each call's measured seconds (server-side for an OpenAI-compatible server, the
in-process call for llama.cpp). A call served from the call cache counts at the seconds measured
when it was first made (``usage.cached_seconds``), so a run whose calls another run already paid
for (the P("True") calls of N = 20 are among those of N = 100) reports the ratio it would have had
alone. The ratio is of the means over the questions: Σ N·t2 / Σ (t1 + t3).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..details import ReaderDetails, RetrievalDetails
from .schema import Efficiency, QuestionRecord, StageEntry

RETRIEVAL_KINDS = RetrievalDetails.kinds
GENERATION_KINDS = ReaderDetails.kinds
DEFINITION = ("N·t2 / (t1 + t3) (RankRAG §4.3): t1 retrieval wall seconds, N·t2 and t3 the model seconds of the calls "
              "before generation and of generation, cache hits at their first measured seconds")


def model_seconds(entry: StageEntry) -> float:
    """A stage's LLM call seconds, cache hits at the seconds they took when first made."""
    return float(entry.usage.seconds) + float(entry.usage.cached_seconds)


def question_times(record: QuestionRecord) -> tuple[float, float, float]:
    """(t1, N·t2, t3) of one question: retrieval wall seconds, reranking and generation model seconds."""
    retrieval = reranking = generation = 0.0
    for entry in record.stages:
        if entry.kind in RETRIEVAL_KINDS:
            retrieval += float(entry.seconds)
        elif entry.kind in GENERATION_KINDS:
            generation += model_seconds(entry)
        else:
            reranking += model_seconds(entry)
    return retrieval, reranking, generation


def reranking_overhead(records: Sequence[QuestionRecord]) -> Efficiency | None:
    """Mean t1, N·t2 and t3 per question and the overhead ratio N·t2 / (t1 + t3); None without
    records or when retrieval and generation took no measurable time."""
    if not records:
        return None
    times = [question_times(record) for record in records]
    retrieval, reranking, generation = (sum(column) for column in zip(*times, strict=True))
    count = len(records)
    base = retrieval + generation
    return Efficiency(
        retrieval_seconds=round(retrieval / count, 6),
        reranking_seconds=round(reranking / count, 6),
        generation_seconds=round(generation / count, 6),
        overhead_ratio=round(reranking / base, 6) if base > 0 else None,
        definition=DEFINITION,
    )
