"""Winnow: LLM-in-the-loop retrieval-augmented generation (RankRAG, MAIN-RAG, GAR-meets-RAG)."""

__version__ = "0.1.0"
