"""Reranking by embedding similarity: the cheap, LLM-free baseline for the LLM rerankers.

Each candidate is scored by the cosine between the query's and the passage's all-MiniLM-L6-v2
embeddings (a bi-encoder, Reimers & Gurevych 2019, Sentence-BERT), both computed on the fly, the
passage as title, newline, text exactly as the dense index embeds it. Over a BM25 list this is
the usual "retrieve lexically, rerank semantically" baseline; over a dense list of the same model
it reproduces the dense order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..index.passage_text import indexed_text
from .contract import ListStage, QuestionState, recording

if TYPE_CHECKING:  # the embedder is handed in: importing the stages loads no encoder code
    from ..index.embedder import Embedder


@dataclass
class EmbeddingReranker(ListStage):
    embedder: Embedder
    keep: int | None = None  # top-k to keep after reranking; None keeps all
    name: str = "embedding"

    def run(self, batch: Sequence[QuestionState]) -> None:
        settings = {"scorer": f"cosine of {self.embedder.name} embeddings, query vs title + text",
                    "model": self.embedder.name, "keep": self.keep}
        with recording(batch, self.name, "embedding-cosine", settings) as traces:
            for state, stage in zip(batch, traces, strict=True):
                similarities: list[float] = []
                if len(state.ranked):
                    # One call: the query and passages are length-sorted into batches together.
                    vectors = self.embedder.embed([state.query.text, *map(indexed_text, state.ranked.passages)])
                    similarities = (vectors[1:] @ vectors[0]).tolist()
                state.candidates = state.ranked.ranked_by(self.name, similarities, keep=self.keep)
                stage.output = state.ranked.to_dicts()
