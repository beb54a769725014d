"""Indexes: build once into a folder with a manifest, open and search many times."""

from .bm25 import BM25Index, build_bm25_index

__all__ = ["BM25Index", "build_bm25_index"]
