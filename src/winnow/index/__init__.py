"""Indexes: build once into a folder with a manifest, open and search many times.

Lucene BM25 (k1=0.9, b=0.4, as in Pyserini's defaults) over passage title and text, with English
stop words and the Snowball English stemmer, via bm25s. Optionally, dense embeddings of the same
passages by an encoder preset (all-MiniLM-L6-v2 by default; DPR, Contriever, Dragon+, E5, BGE),
searched exactly or through a faiss HNSW / IVF-PQ index, and a hybrid of BM25 and dense by
reciprocal rank fusion.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import WinnowError

# The package's names are imported from their module on first use (PEP 562), so that importing one
# light module of the package (encoder presets, the embedder) does not load bm25s, PyStemmer and
# faiss's glue: a rerank-only ``winnow.integrations.Winnower`` loads no index code at all.
if TYPE_CHECKING:
    from .ann import ANN_KINDS as ANN_KINDS
    from .ann import ann_settings as ann_settings
    from .bm25 import BM25Index as BM25Index
    from .build import build_bm25_index as build_bm25_index
    from .build import build_index as build_index
    from .dense import DenseIndex as DenseIndex
    from .dense import add_ann_index as add_ann_index
    from .dense import add_dense_embeddings as add_dense_embeddings
    from .embedder import Embedder as Embedder
    from .embedder import load_embedder as load_embedder
    from .encoders import DenseEncoder as DenseEncoder
    from .encoders import load_encoder as load_encoder
    from .hybrid import HybridIndex as HybridIndex
    from .hybrid import reciprocal_rank_fusion as reciprocal_rank_fusion
    from .lucene import LuceneIndex as LuceneIndex
    from .lucene_build import build_lucene_index as build_lucene_index
    from .presets import PRESETS as PRESETS
    from .presets import EncoderPreset as EncoderPreset
    from .presets import get_preset as get_preset

#: Each lazily imported name → the module of this package that defines it.
_LAZY = {
    "ANN_KINDS": "ann", "ann_settings": "ann", "BM25Index": "bm25", "build_bm25_index": "build",
    "build_index": "build", "DenseIndex": "dense", "add_ann_index": "dense", "add_dense_embeddings": "dense",
    "Embedder": "embedder", "load_embedder": "embedder", "DenseEncoder": "encoders", "load_encoder": "encoders",
    "HybridIndex": "hybrid", "reciprocal_rank_fusion": "hybrid", "PRESETS": "presets",
    "EncoderPreset": "presets", "get_preset": "presets", "LuceneIndex": "lucene", "build_lucene_index": "lucene_build",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value  # found directly from now on
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


RETRIEVER_KINDS = ("bm25", "dense", "hybrid", "lucene")


def open_retriever(index_dir: str | Path, kind: str = "bm25", *, embedder: DenseEncoder | None = None,
                   ann: str | None = None,
                   ann_overrides: dict[str, str | int] | None = None
                   ) -> BM25Index | DenseIndex | HybridIndex | LuceneIndex:
    """Open the index folder ``index_dir`` for search by ``kind``: "bm25", "dense", "hybrid" or "lucene".

    Each kind has ``.search(query, k)``, ``.search_many(queries, k)`` and ``.name``. "dense" and
    "hybrid" need an index built with embeddings (``winnow index SOURCE --out DIR --dense``);
    ``embedder`` defaults to the query encoder of the preset the index was built with, loaded on
    opening; ``ann`` ("hnsw", "ivfpq") searches through that ANN index instead of exactly, with
    ``ann_overrides`` changing its search settings (``{"efSearch": 512}``). ``ann`` with "bm25", or
    on an index without embeddings or without that ANN index, is refused naming what builds it.
    "lucene" searches through Lucene (:mod:`.lucene`: Java and the ``lucene`` extra) an index built with
    ``winnow index SOURCE --out DIR --bm25-engine lucene``, or ``pyserini:NAME``, a prebuilt index of Pyserini's.
    """
    from .bm25 import BM25Index
    from .dense import DenseIndex
    from .hybrid import HybridIndex

    if kind not in RETRIEVER_KINDS:
        raise WinnowError(f"unknown retriever {kind!r}", f"choose one of {', '.join(RETRIEVER_KINDS)}")
    if kind == "lucene":
        from .lucene import LuceneIndex

        if ann:
            raise WinnowError(f"--ann {ann} searches embeddings, not Lucene's BM25", "add --retriever dense or hybrid")
        return LuceneIndex.open(index_dir)
    if kind == "bm25":
        if ann:
            raise WinnowError(f"--ann {ann} searches embeddings, not BM25", "add --retriever dense or hybrid")
        return BM25Index.open(index_dir)
    if ann:
        check_ann_built(Path(index_dir), ann)
    if kind == "dense":
        return DenseIndex.open(index_dir, embedder=embedder, ann=ann, ann_overrides=ann_overrides)
    bm25 = BM25Index.open(index_dir)
    return HybridIndex(bm25, DenseIndex.open(index_dir, embedder=embedder, passages=bm25.passages, ann=ann,
                                             ann_overrides=ann_overrides))


def check_ann_built(index_dir: Path, ann: str) -> None:
    """Refuse ``--ann KIND`` on an index that has no embeddings or no such ANN index, before any
    model loads, naming the option and the command that builds what is missing."""
    from .manifest import read_manifest

    dense = read_manifest(index_dir).get("dense")
    if not dense:
        raise WinnowError(f"--ann {ann}: {index_dir} has no embeddings to search",
                          f"embed the passages first: `winnow embed {index_dir} --ann {ann}`")
    if ann not in (dense.get("ann") or {}):
        raise WinnowError(f"--ann {ann}: {index_dir} has no {ann} index",
                          f"build it: `winnow ann {index_dir} --ann {ann}`, or leave --ann out for exact search")


__all__ = ["ANN_KINDS", "BM25Index", "DenseEncoder", "DenseIndex", "Embedder", "EncoderPreset", "HybridIndex",
           "LuceneIndex", "PRESETS", "RETRIEVER_KINDS", "add_ann_index", "add_dense_embeddings", "ann_settings",
           "build_bm25_index", "build_index", "build_lucene_index", "get_preset", "load_embedder", "load_encoder",
           "open_retriever", "reciprocal_rank_fusion"]
