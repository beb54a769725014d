"""What ``winnow tune`` maximises and what it counts as cost, per question.

Quality (``--objective``) is one of the answer metrics every ``winnow eval`` run reports (EM, F1 and
Accuracy, :func:`winnow.answers.answer_scores`), answer Recall@k of the passages the answer was
read from (RankRAG Tables 6 and 8), or nDCG@k of the method's last ranked list against qrels
(GAR-meets-RAG §4). Cost (``--cost``) is what a configuration costs to run, not what the study
paid: the LLM calls, tokens and seconds of a question as if none came from the call cache (a hit
counts at what it cost when first asked), or the same tokens in USD at a price table's prices
(GAR-meets-RAG App. B). Each is a per-question value, so every figure is a mean over questions and
two configurations compare question by question (:mod:`winnow.evaluation.paired`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ..errors import WinnowError
from ..evaluation.prices import PriceTable
from ..evaluation.retrieval import answer_recall_at, qrels_metrics
from ..evaluation.schema import QuestionRecord

ANSWER_METRICS = ("accuracy", "em", "f1")
COSTS = ("calls", "tokens", "usd", "seconds")
OBJECTIVE_HINT = "choose accuracy, em, f1, ndcg@K (e.g. ndcg@10) or answer_recall@K (e.g. answer_recall@5)"


@dataclass(frozen=True)
class Objective:
    """The quality a study maximises: ``accuracy``, ``em``, ``f1``, ``answer_recall@K`` or ``ndcg@K``."""

    name: str
    kind: Literal["answer", "answer_recall", "ndcg"]
    k: int = 0

    @property
    def needs_qrels(self) -> bool:
        return self.kind == "ndcg"

    @property
    def in_points(self) -> bool:
        """Shown as points out of 100 (a share of questions), not as a 0-1 score (nDCG)."""
        return self.kind != "ndcg"

    def shown(self, value: float) -> str:
        return f"{100 * value:.1f}" if self.in_points else f"{value:.3f}"

    def shown_difference(self, value: float) -> str:
        return f"{100 * value:+.1f}" if self.in_points else f"{value:+.3f}"

    def question_value(self, record: QuestionRecord, qrels: Mapping[str, Mapping[str, int]] | None) -> float:
        """The question's quality under this objective (see the module notes)."""
        if self.kind == "answer":
            return float(record.scores.of(self.name))
        if self.kind == "answer_recall":
            return answer_recall_at(record.final.answer_ranks, self.k)
        assert qrels is not None
        found = qrels_metrics(qrels, {record.id: ranked_ids(record)}, recall_ks=(), ndcg_ks=(self.k,))
        return float(found[f"nDCG@{self.k}"])


def ranked_ids(record: QuestionRecord) -> list[str]:
    """The method's last ranked list before its answer: the deepest ordering it made (a reranker's
    whole order, MAIN-RAG's survivors), or the passages read when no stage ranked (vanilla's top k)."""
    lists = [entry for entry in record.stages if not entry.passthrough and entry.ids]
    return list(lists[-1].ids) if lists else list(record.final.ids)


def parse_objective(text: str) -> Objective:
    """``--objective``: one line naming the choices for anything else."""
    name = text.strip().lower()
    if name in ANSWER_METRICS:
        return Objective(name, "answer")
    match = re.fullmatch(r"(answer_recall|ndcg)@(\d+)", name)
    if match and int(match.group(2)) >= 1:
        kind: Literal["answer_recall", "ndcg"] = "answer_recall" if match.group(1) == "answer_recall" else "ndcg"
        return Objective(f"{match.group(1)}@{int(match.group(2))}", kind, int(match.group(2)))
    raise WinnowError(f"--objective {text!r} is not an objective", OBJECTIVE_HINT)


def check_cost(text: str, prices: PriceTable | None) -> str:
    """``--cost``: calls, tokens, usd (which needs ``--prices``) or seconds."""
    cost = text.strip().lower()
    if cost not in COSTS:
        raise WinnowError(f"--cost {text!r} is not a cost", f"choose {', '.join(COSTS)}")
    if cost == "usd" and prices is None:
        raise WinnowError("--cost usd needs a price table", "add --prices FILE (USD per million tokens per model, "
                                                            "docs/reproducing.md)")
    return cost


def question_cost(cost: str, record: QuestionRecord, prices: PriceTable | None) -> float:
    """The question's cost without the call cache (hits at what they cost when first asked)."""
    usage = record.usage
    if cost == "calls":
        return float(usage.calls + usage.cache_hits)
    if cost == "tokens":
        return float(usage.prompt_tokens + usage.completion_tokens + usage.cached_prompt_tokens
                     + usage.cached_completion_tokens)
    if cost == "seconds":
        return usage.seconds + usage.cached_seconds
    assert prices is not None
    total = 0.0
    for share in record.usage_split or ():
        price = prices.price_of(share.model)
        if price is None:
            raise WinnowError(f"--prices {prices.path} has no price for model {share.model!r}",
                              "add it (a local model can cost 0) or choose another --cost")
        used = share.usage
        total += price.usd(used.prompt_tokens + used.cached_prompt_tokens,
                           used.completion_tokens + used.cached_completion_tokens)
    return total


def cost_unit(cost: str) -> str:
    return {"calls": "LLM calls", "tokens": "tokens", "usd": "USD", "seconds": "LLM seconds"}[cost]


def shown_cost(cost: str, value: float) -> str:
    if cost == "usd":
        return f"${value:.5f}"
    if cost == "tokens":
        return f"{value:,.0f}"
    return f"{value:.1f}" if cost == "calls" else f"{value:.2f}"
