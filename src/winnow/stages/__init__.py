"""Stages: small units with one verb over a candidate list, reusable by every method."""

from .adaptive_bar import adaptive_bar_filter, adaptive_judge_bar
from .base import stage_record
from .embedding import EmbeddingReranker
from .fusion import ScoreFusion
from .judge import NoisyDocumentJudge
from .predictor import PerDocumentPredictor
from .rewrite import QueryRewriter, parse_rewrite
from .graded import GradedRelevanceReranker, parse_score, threshold_filter
from .listwise import ListwiseReranker, parse_permutation, sliding_windows
from .pointwise import PointwiseTrueReranker
from .reader import Reader
from .retrieve import Retriever

__all__ = ["EmbeddingReranker", "GradedRelevanceReranker", "ListwiseReranker", "NoisyDocumentJudge", "PerDocumentPredictor",
           "PointwiseTrueReranker", "QueryRewriter", "Reader", "Retriever", "ScoreFusion", "adaptive_bar_filter",
           "adaptive_judge_bar", "parse_permutation", "parse_rewrite", "parse_score", "sliding_windows",
           "stage_record", "threshold_filter"]
