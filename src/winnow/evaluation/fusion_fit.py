"""Calibrated fusion, fitted: the weights of :func:`winnow.stages.fusion.calibrated` from a run.

The papers rank by the LLM's score alone; score fusion with a hand-set α (:mod:`winnow.stages.fusion`)
was the one setting that moved accuracy for the small models here (docs/results.md). Calibrated
fusion fits the blend instead, on tuning questions: a logistic regression of "this passage is
relevant" on the two scores each passage of a run carries,

    P(relevant | r, f) = σ(w_llm · r + w_first · f + bias)

r the reranker's score as it gave it, f the first stage's min-max normalised over the question's
list (:func:`~winnow.stages.fusion.calibrated_features`, shared with the stage, so the features
fitted on are the ones ranked by). A passage is relevant when the qrels judge it so (grade > 0) or,
without qrels, when it holds a gold answer (DPR's has_answer, the ``answer_ranks`` answers.jsonl
records). Fitted by Newton's method (iteratively reweighted least squares) with a small L2 penalty on
the two weights, so separable data still gives finite weights: numpy is enough, and scikit-learn
stays out of the dependencies.

The run must have kept every passage's reranker score: RankRAG and RankGPT's fallbacks record them
(``answers.jsonl``, the reranker stage's ``scores``), for the whole list when fusion is on and,
since calibrated fusion, when the reranker passed on its top k too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..errors import WinnowError
from ..stages.fusion import calibrated_features
from .runfolder import RunFolder
from .schema import QuestionRecord


@dataclass
class FusionExamples:
    """The passages of a run as (reranker score, normalised first-stage score) -> relevant, and the
    questions left out with why."""

    features: list[tuple[float, float]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    questions: int = 0
    left_out: dict[str, str] = field(default_factory=dict)  # question id -> why


@dataclass(frozen=True)
class FusionFit:
    """Fitted weights [w_llm, w_first, bias] and how they were fitted."""

    weights: tuple[float, float, float]
    passages: int
    relevant: int
    questions: int
    log_loss: float
    iterations: int

    def to_dict(self) -> dict[str, object]:
        return {"fusion_weights": list(self.weights), "passages": self.passages, "relevant": self.relevant,
                "questions": self.questions, "log_loss": round(self.log_loss, 6), "iterations": self.iterations}


def question_examples(record: QuestionRecord, reranker: str, qrels: Mapping[str, Mapping[str, int]] | None
                      ) -> tuple[list[tuple[float, float]], list[int]] | str:
    """One question's features and labels, or why it has none."""
    rerank = record.stage(reranker)
    first = record.stage("retrieve")
    if rerank is None:
        return f"no {reranker!r} stage (adaptive depth skipped it, or the method has none)"
    if rerank.scores is None:
        return f"its {reranker!r} stage kept no score per passage"
    if first is None or first.scores is None:
        return "no first-stage scores (stage 'retrieve')"
    first_score = dict(zip(first.ids, first.scores, strict=True))
    if any(pid not in first_score for pid in rerank.ids):
        return f"a passage of its {reranker!r} stage is not in its first-stage list"
    features = calibrated_features(rerank.scores, [first_score[pid] for pid in rerank.ids])
    if qrels is not None:
        judged = qrels.get(record.id)
        if judged is None:
            return "no qrels for it"
        labels = [int(judged.get(pid, 0) > 0) for pid in rerank.ids]
    else:
        holding = set(rerank.answer_ranks)
        labels = [int(rank in holding) for rank in range(1, len(rerank.ids) + 1)]
    return features, labels


def run_examples(run_dir: str | Path, *, reranker: str = "rerank",
                 qrels: Mapping[str, Mapping[str, int]] | None = None) -> FusionExamples:
    """Every passage the ``reranker`` stage scored in the run at ``run_dir`` (its ``answers.jsonl``)."""
    folder = RunFolder(run_dir)
    if not folder.answers_path.is_file():
        raise WinnowError(f"{folder.answers_path} does not exist", "give a run folder made by `winnow eval`")
    examples = FusionExamples()
    for record in folder.read_answers().values():
        found = question_examples(record, reranker, qrels)
        if isinstance(found, str):
            examples.left_out[record.id] = found
            continue
        examples.features += found[0]
        examples.labels += found[1]
        examples.questions += 1
    return examples


def fit_logistic(features: Sequence[tuple[float, float]], labels: Sequence[int], *, l2: float = 1e-3,
                 iterations: int = 100, tolerance: float = 1e-10) -> FusionFit:
    """Logistic regression by Newton's method, the two weights penalised by ``l2``·‖w‖² (not the bias)."""
    y = np.asarray(labels, dtype=float)
    if len(y) == 0:
        raise WinnowError("no passages to fit calibrated fusion on")
    positives = int(y.sum())
    if positives in (0, len(y)):
        raise WinnowError(f"calibrated fusion needs relevant and irrelevant passages to fit on; all {len(y)} are "
                          f"{'relevant' if positives else 'irrelevant'}",
                          "fit on more questions, or with qrels (--qrels)")
    x = np.column_stack([np.asarray(features, dtype=float), np.ones(len(y))])
    penalty = np.diag([l2 * len(y), l2 * len(y), 0.0])
    w = np.zeros(3)
    done = 0
    for step_number in range(1, iterations + 1):
        done = step_number
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -500, 500)))
        gradient = x.T @ (p - y) + penalty @ w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + penalty + 1e-9 * np.eye(3)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if float(np.abs(step).max()) < tolerance:
            break
    p = np.clip(1.0 / (1.0 + np.exp(-np.clip(x @ w, -500, 500))), 1e-12, 1 - 1e-12)
    loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    weights = (round(float(w[0]), 6), round(float(w[1]), 6), round(float(w[2]), 6))
    return FusionFit(weights, passages=len(y), relevant=positives, questions=0, log_loss=loss, iterations=done)


def fit_fusion(run_dir: str | Path, *, reranker: str = "rerank", qrels: Mapping[str, Mapping[str, int]] | None = None,
               l2: float = 1e-3) -> tuple[FusionFit, FusionExamples]:
    """The calibrated-fusion weights fitted on the run at ``run_dir`` (see the module docstring)."""
    examples = run_examples(run_dir, reranker=reranker, qrels=qrels)
    if not examples.questions:
        why = sorted(set(examples.left_out.values()))
        raise WinnowError(f"no question of {run_dir} has what calibrated fusion fits on"
                          + (f": {'; '.join(why[:3])}" if why else " (it has no answers)"),
                          "fit on a rankrag run (or rankgpt with rerank=pointwise), made with this Winnow")
    fit = fit_logistic(examples.features, examples.labels, l2=l2)
    fit = FusionFit(fit.weights, fit.passages, fit.relevant, examples.questions, fit.log_loss, fit.iterations)
    return fit, examples
