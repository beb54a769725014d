"""Stages: small units with one verb over a candidate list, reusable by every method."""

from .base import stage_record
from .pointwise import PointwiseTrueReranker
from .reader import Reader
from .retrieve import Retriever

__all__ = ["PointwiseTrueReranker", "Reader", "Retriever", "stage_record"]
