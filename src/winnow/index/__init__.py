"""Indexes: build once into a folder with a manifest, open and search many times.

Lucene BM25 (k1=0.9, b=0.4, as in Pyserini's defaults) over passage title and text, with English
stop words and the Snowball English stemmer, via bm25s.
"""

from .bm25 import BM25Index
from .build import build_bm25_index

__all__ = ["BM25Index", "build_bm25_index"]
