"""Indexes: build once into a folder with a manifest, open and search many times.

Lucene BM25 (k1=0.9, b=0.4, as in Pyserini's defaults) over passage title and text, with English
stop words and the Snowball English stemmer, via bm25s. Optionally, all-MiniLM-L6-v2 embeddings of
the same passages for exact dense search, and a hybrid of both by reciprocal rank fusion.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import WinnowError
from .bm25 import BM25Index
from .build import build_bm25_index, build_index
from .dense import DenseIndex, add_dense_embeddings
from .embedder import Embedder, load_embedder
from .hybrid import HybridIndex, reciprocal_rank_fusion

RETRIEVER_KINDS = ("bm25", "dense", "hybrid")


def open_retriever(index_dir: str | Path, kind: str = "bm25", *,
                   embedder: Embedder | None = None) -> BM25Index | DenseIndex | HybridIndex:
    """Open the index folder ``index_dir`` for search by ``kind``: "bm25", "dense" or "hybrid".

    Each kind has ``.search(query, k)``, ``.search_many(queries, k)`` and ``.name``. "dense" and
    "hybrid" need an index built with embeddings (``winnow index SOURCE --out DIR --dense``);
    ``embedder`` defaults to all-MiniLM-L6-v2, loaded on opening.
    """
    if kind not in RETRIEVER_KINDS:
        raise WinnowError(f"unknown retriever {kind!r}", f"choose one of {', '.join(RETRIEVER_KINDS)}")
    if kind == "bm25":
        return BM25Index.open(index_dir)
    if kind == "dense":
        return DenseIndex.open(index_dir, embedder=embedder)
    bm25 = BM25Index.open(index_dir)
    return HybridIndex(bm25, DenseIndex.open(index_dir, embedder=embedder, passages=bm25.passages))


__all__ = ["BM25Index", "DenseIndex", "Embedder", "HybridIndex", "RETRIEVER_KINDS", "add_dense_embeddings",
           "build_bm25_index", "build_index", "load_embedder", "open_retriever", "reciprocal_rank_fusion"]
