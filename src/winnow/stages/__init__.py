"""Stages: small units with one verb over a candidate list, reusable by every method."""

from .base import stage_record
from .graded import GradedRelevanceReranker, parse_score, threshold_filter
from .listwise import ListwiseReranker, parse_permutation, sliding_windows
from .pointwise import PointwiseTrueReranker
from .reader import Reader
from .retrieve import Retriever

__all__ = ["GradedRelevanceReranker", "ListwiseReranker", "PointwiseTrueReranker", "Reader", "Retriever",
           "parse_permutation", "parse_score", "sliding_windows", "stage_record", "threshold_filter"]
