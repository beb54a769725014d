"""Winnow: LLM-in-the-loop retrieval-augmented generation (RankRAG, MAIN-RAG, GAR-meets-RAG).

The Python API mirrors the command line::

    import winnow

    index = winnow.open_index("wiki-index")            # made by `winnow index` or winnow.build_index
    llm = winnow.load_llm("qwen2.5-coder-0.5b")        # or a .gguf path, or backend="openai"
    rag = winnow.build_method("rankrag", index=index, llm=llm, n=20, k=5)
    answer = rag.ask("who painted the mona lisa")
    print(answer.text, answer.usage)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .version import __version__


def open_index(path: str | Path) -> Any:
    """Open an index folder made by ``winnow index`` (checks its manifest first)."""
    from .index import BM25Index

    return BM25Index.open(path)


def build_index(source: str | Path, out: str | Path, *, chunk_words: int = 150, overwrite: bool = False,
                progress: bool = True) -> Any:
    """Load a corpus (JSONL, BEIR folder, text folder or ``"wiki-vital"``), index it, and open it."""
    from .corpus import load_corpus, source_checksum
    from .index import BM25Index, build_bm25_index

    corpus = load_corpus(source, chunk_words=chunk_words)
    build_bm25_index(corpus.passages, Path(out), source=str(source), source_checksum=source_checksum(corpus.files),
                     load_report=corpus.report.to_dict(), source_options={"chunk_words": chunk_words},
                     overwrite=overwrite, progress=progress)
    return BM25Index.open(out)


def load_llm(model: str = "smollm2-135m", **options: Any) -> Any:
    """An LLM behind the call cache; see :func:`winnow.llm.load_llm` for the options."""
    from .llm import load_llm as _load_llm

    return _load_llm(model, **options)


def build_method(name: str, **kwargs: Any) -> Any:
    """A method by name (``vanilla``, ``rankrag``); see :func:`winnow.methods.build_method`."""
    from .methods import build_method as _build_method

    return _build_method(name, **kwargs)


__all__ = ["__version__", "build_index", "build_method", "load_llm", "open_index"]
