"""Evaluation: answer metrics, retrieval metrics, resumable runs and reports.

The answer metrics (EM, F1, Accuracy, DPR ``has_answer``) live in :mod:`winnow.answers`, since
datasets and training match answers too, and are handed on here; ``retrieval`` scores ranked
lists (answer Recall@k per stage, qrels metrics).
"""

from ..answers import AnswerMatcher, accuracy, dpr_tokens, exact_match, has_answer, normalize_answer, token_f1

__all__ = ["AnswerMatcher", "accuracy", "dpr_tokens", "exact_match", "has_answer", "normalize_answer", "token_f1"]
