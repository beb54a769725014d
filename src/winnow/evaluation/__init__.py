"""Evaluation: answer metrics, retrieval metrics, resumable runs and reports.

``answers`` scores generations and passages against gold answers (EM, F1, Accuracy, DPR
``has_answer``); ``retrieval`` scores ranked lists (answer Recall@k per stage, qrels metrics).
"""

from .answers import AnswerMatcher, accuracy, dpr_tokens, exact_match, has_answer, normalize_answer, token_f1

__all__ = ["AnswerMatcher", "accuracy", "dpr_tokens", "exact_match", "has_answer", "normalize_answer", "token_f1"]
