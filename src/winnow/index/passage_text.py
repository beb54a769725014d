"""The text a passage is indexed under, for BM25 and for embeddings alike (no bm25s needed to read it)."""

from __future__ import annotations

from ..records import Passage


def indexed_text(passage: Passage) -> str:
    """The text a passage is indexed under: its title, a newline, then its text."""
    return f"{passage.title}\n{passage.text}"
