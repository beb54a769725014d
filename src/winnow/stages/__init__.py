"""Stages: small units with one verb over a batch of questions in flight (see :mod:`.contract`)."""

from .adaptive_bar import AdaptiveJudgeBar, adaptive_bar_filter, adaptive_judge_bar
from .adaptive_depth import AdaptiveDepth
from .contract import ListStage, QuestionState, Stage, recording, run_stages
from .cross_encoder import CrossEncoderReranker
from .embedding import EmbeddingReranker
from .fusion import ScoreFusion
from .graded import (
           GradedRelevanceReranker,
           ThresholdFilter,
           parse_score,
           threshold_filter,
)
from .judge import NoisyDocumentJudge
from .listwise import ListwiseReranker, parse_permutation, sliding_windows
from .pointwise import PointwiseTrueReranker
from .predictor import PerDocumentPredictor
from .reader import Reader
from .recipe import Composable, KeepTop, Recipe, label
from .retrieve import Retriever
from .rewrite import QueryRewriter, parse_rewrite
from .second_pass import HeadReranker
from .yes_no import YesNoJudgment

__all__ = ["AdaptiveDepth", "AdaptiveJudgeBar", "Composable", "CrossEncoderReranker", "EmbeddingReranker",
           "GradedRelevanceReranker", "HeadReranker", "KeepTop", "ListStage", "ListwiseReranker",
           "NoisyDocumentJudge", "PerDocumentPredictor", "PointwiseTrueReranker", "QueryRewriter", "QuestionState",
           "Reader", "Recipe", "Retriever", "ScoreFusion", "Stage", "ThresholdFilter", "adaptive_bar_filter",
           "adaptive_judge_bar", "label", "parse_permutation", "parse_rewrite", "parse_score", "recording",
           "run_stages", "sliding_windows", "threshold_filter", "YesNoJudgment"]
