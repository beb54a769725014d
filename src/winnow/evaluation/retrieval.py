"""Retrieval metrics of ranked passage lists.

* **Answer Recall@k** (RankRAG Tables 6 and 8, after DPR §5.1): the share of questions whose top k
  passages include at least one that holds a gold answer, by :func:`~winnow.answers.has_answer`.
  It needs no relevance judgements, only the answers, so every QA set has it. A question's list is
  reduced once to the 1-based ranks of its answer-bearing passages (:func:`answer_ranks`); every
  cutoff is then read off those ranks. A list shorter than k counts what it has: a filter that keeps
  three passages scores R@10 on those three.
* **Qrels metrics** (GAR-meets-RAG §2 and §4: nDCG@10 and Recall@k; MRR@10 as in MS MARCO) are
  computed by ``ir-measures`` (the trec_eval implementations through pytrec_eval). *Capped* Recall@k
  divides by min(k, relevant) instead of the number relevant (BEIR's R_cap, used for TREC-COVID in
  GAR-meets-RAG Tables 2 and A3), so a query with 300 relevant documents can still reach 1.0.

Ranked lists are handed to ir-measures with rank-derived scores (n, n-1, …), because trec_eval
re-sorts a run by score: the metric must judge the order the stage produced, whatever its scores.
Questions with judgements but an empty list score 0 (pytrec_eval would silently skip them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from ..answers import mean
from ..extras import import_extra

ANSWER_RECALL_KS = (1, 5, 10, 20, 50, 100)


def answer_ranks(texts: Iterable[str], holds_answer: Callable[[str], bool]) -> list[int]:
    """The 1-based ranks of the passages (texts, best first) that hold an answer."""
    return [rank for rank, text in enumerate(texts, start=1) if holds_answer(text)]


def answer_recall_at(ranks: Sequence[int], k: int) -> float:
    """1.0 when an answer-bearing passage is within the top ``k``."""
    return float(bool(ranks) and min(ranks) <= k)


def answer_recall(per_question_ranks: Sequence[Sequence[int]], ks: Iterable[int] = ANSWER_RECALL_KS
                  ) -> dict[str, float]:
    """Answer Recall@k averaged over questions, as ``{"R@5": 0.8, ...}``."""
    return {f"R@{k}": mean(answer_recall_at(ranks, k) for ranks in per_question_ranks) for k in ks}


def run_from_ranked(ranked: Mapping[str, Sequence[str]]) -> dict[str, dict[str, float]]:
    """A run ``{qid: {docid: score}}`` whose scores reproduce each list's order; repeats keep their
    first (best) rank, since a run has one score per document."""
    run: dict[str, dict[str, float]] = {}
    for qid, ids in ranked.items():
        scores: dict[str, float] = {}
        for rank, doc in enumerate(ids):
            scores.setdefault(doc, float(len(ids) - rank))
        run[qid] = scores
    return run


def qrels_metrics(qrels: Mapping[str, Mapping[str, int]], ranked: Mapping[str, Sequence[str]], *,
                  recall_ks: Iterable[int] = (5, 10, 20, 100), ndcg_k: int = 10, mrr_k: int = 10,
                  capped: bool = False) -> dict[str, float | int]:
    """nDCG@10, MRR@10, Recall@k (and capped Recall@k) of ``ranked`` (``{qid: [docid, ...]}``),
    averaged over the questions in ``ranked`` that have at least one relevant judgement.

    A document is relevant with a judgement of 1 or more (nDCG uses the grades as gains).
    ``judged_questions`` says how many questions were scored; questions of ``ranked`` with no
    relevant document in ``qrels`` are counted in ``unjudged_questions`` and left out.
    """
    ir_measures = import_extra("ir_measures", "eval", "qrels metrics (winnow eval --qrels)")
    RR, R, nDCG = ir_measures.RR, ir_measures.R, ir_measures.nDCG

    recall_ks = list(recall_ks)
    relevant = {qid: sum(1 for grade in docs.values() if grade >= 1) for qid, docs in qrels.items()}
    judged = [qid for qid in ranked if relevant.get(qid, 0) > 0]
    measures = {f"nDCG@{ndcg_k}": nDCG @ ndcg_k, f"MRR@{mrr_k}": RR @ mrr_k}
    measures.update({f"R@{k}": R @ k for k in recall_ks})
    by_measure = {measure: name for name, measure in measures.items()}
    values: dict[str, dict[str, float]] = {name: {} for name in measures}
    if judged:
        run = run_from_ranked({qid: ranked[qid] for qid in judged})
        judged_qrels = {qid: {doc: int(grade) for doc, grade in qrels[qid].items()} for qid in judged}
        for metric in ir_measures.iter_calc(list(measures.values()), judged_qrels, run):
            values[by_measure[metric.measure]][metric.query_id] = float(metric.value)
    result: dict[str, float | int] = {}
    for name in measures:
        # A question ir-measures skipped (its list was empty) scores 0, not nothing.
        result[name] = mean(values[name].get(qid, 0.0) for qid in judged)
    if capped:
        for k in recall_ks:
            # R@k · |relevant| is the number of relevant documents found in the top k.
            result[f"R_cap@{k}"] = mean(values[f"R@{k}"].get(qid, 0.0) * relevant[qid] / min(k, relevant[qid])
                                        for qid in judged)
    result["judged_questions"] = len(judged)
    result["unjudged_questions"] = len(ranked) - len(judged)
    return result
