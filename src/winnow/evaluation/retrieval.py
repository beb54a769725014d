"""Retrieval metrics of ranked passage lists.

* **Answer Recall@k** (RankRAG Tables 6 and 8, after DPR §5.1): the share of questions whose top k
  passages include at least one that holds a gold answer, by :func:`~winnow.answers.has_answer`.
  It needs no relevance judgements, only the answers, so every QA set has it. A question's list is
  reduced once to the 1-based ranks of its answer-bearing passages (:func:`answer_ranks`); every
  cutoff is then read off those ranks. A list shorter than k counts what it has: a filter that keeps
  three passages scores R@10 on those three.
* **Qrels metrics** (GAR-meets-RAG §2 and §4: nDCG@10 and Recall@k; nDCG@1 and nDCG@5 of its
  Table 3; MAP; MRR@10 as in MS MARCO) are computed by ``ir-measures`` (the trec_eval
  implementations through pytrec_eval). The *relevance level* is trec_eval's ``-l``: the lowest
  grade that counts as relevant for Recall, MRR and MAP (nDCG uses the grades themselves as gains).
  TREC DL's official figures use 2 ("highly relevant" or better; grade 1 is "related"), so the DL
  sets default to 2 and everything else to 1 (:func:`default_relevance_level`). *Capped* Recall@k
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
NDCG_KS = (1, 5, 10)
#: Datasets whose qrels are graded 0-3 with 1 meaning "related, not relevant" (TREC DL 2019/2020
#: passage and document tasks: Craswell et al. 2020, §3): their figures are at relevance level 2.
TREC_DL_DATASETS = ("dl19-passage", "dl20-passage")
_TREC_DL_IRDS = ("trec-dl-2019", "trec-dl-2020", "trec-dl-hard")


def default_relevance_level(dataset_names: Iterable[str]) -> int:
    """2 when the questions come from a TREC DL set (a catalog name, or an ``ir_datasets`` id of
    one), else 1 (BEIR, MS MARCO dev and other binary qrels)."""
    names = {name for name in dataset_names if name}
    dl = any(name in TREC_DL_DATASETS or any(part in name for part in _TREC_DL_IRDS) for name in names)
    return 2 if dl else 1


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
                  recall_ks: Iterable[int] = (5, 10, 20, 100), ndcg_ks: Iterable[int] = NDCG_KS, mrr_k: int = 10,
                  capped: bool = False, relevance_level: int = 1) -> dict[str, float | int]:
    """nDCG@k, MRR@10, MAP, Recall@k (and capped Recall@k) of ``ranked`` (``{qid: [docid, ...]}``),
    averaged over the questions in ``ranked`` that have a judgement of 1 or more.

    A document is relevant with a judgement of ``relevance_level`` or more (trec_eval's ``-l``);
    nDCG uses the grades as gains, as trec_eval does whatever the level. MAP is over the whole list
    (trec_eval's ``map`` of a run as deep as the list). ``judged_questions`` says how many questions
    were scored; questions of ``ranked`` with no judgement of 1 or more in ``qrels`` are counted in
    ``unjudged_questions`` and left out.
    """
    if relevance_level < 1:
        raise ValueError(f"the relevance level must be at least 1 (got {relevance_level})")
    ir_measures = import_extra("ir_measures", "eval", "qrels metrics (winnow eval --qrels)")
    RR, R, nDCG, AP = ir_measures.RR, ir_measures.R, ir_measures.nDCG, ir_measures.AP

    recall_ks = list(recall_ks)
    level = relevance_level
    relevant = {qid: sum(1 for grade in docs.values() if grade >= level) for qid, docs in qrels.items()}
    # Judged: some document graded 1 or more, whatever the level; a question whose documents are all
    # below the level scores 0 on the binary measures, as in trec_eval, and its nDCG still counts.
    judged = [qid for qid in ranked if any(grade >= 1 for grade in qrels.get(qid, {}).values())]
    measures = {f"nDCG@{k}": nDCG @ k for k in ndcg_ks}
    measures.update({f"MRR@{mrr_k}": RR(rel=level) @ mrr_k, "MAP": AP(rel=level)})
    measures.update({f"R@{k}": R(rel=level) @ k for k in recall_ks})
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
                                        if relevant[qid] else 0.0 for qid in judged)
    result["judged_questions"] = len(judged)
    result["unjudged_questions"] = len(ranked) - len(judged)
    return result
