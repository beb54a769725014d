"""Winnow: LLM-in-the-loop retrieval-augmented generation (RankRAG, MAIN-RAG, GAR-meets-RAG).

The Python API mirrors the command line::

    import winnow

    index = winnow.open_index("wiki-index")            # made by `winnow index` or winnow.build_index
    llm = winnow.load_llm("qwen2.5-coder-0.5b")        # or a .gguf path, or backend="openai"
    rag = winnow.build_method("rankrag", index=index, llm=llm, n=20, k=5)
    answer = rag.ask("who painted the mona lisa")
    print(answer.text, answer.usage)

``import winnow`` stays light: each function imports its layer when first called.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from .version import __version__

# load_llm and build_method are winnow.llm.load_llm and winnow.methods.build_method themselves,
# imported on first use (see __getattr__); the type checker sees them here.
if TYPE_CHECKING:
    from .index import BM25Index, DenseIndex, HybridIndex, LuceneIndex
    from .index.encoders import DenseEncoder
    from .integrations import Winnower as Winnower
    from .llm import load_llm as load_llm
    from .methods import build_method as build_method
    from .pipeline import Pipeline

#: Facade names that are another module's function or class as it is, imported when first used (PEP 562).
#: ``winnow.Winnower`` (one reranking or filtering stage over texts retrieved elsewhere) loads no index
#: code: neither bm25s, PyStemmer nor an encoder (tests/test_facade.py).
_LAZY = {"load_llm": "winnow.llm", "build_method": "winnow.methods", "Winnower": "winnow.integrations"}


def open_index(path: str | Path, retriever: str = "bm25", *,
               embedder: DenseEncoder | None = None, ann: str | None = None,
               ann_set: dict[str, str | int] | None = None) -> BM25Index | DenseIndex | HybridIndex | LuceneIndex:
    """Open an index folder made by ``winnow index`` (or :func:`build_index`) for search by
    ``retriever``: "bm25", "dense", "hybrid" or "lucene" (an index built with ``--bm25-engine lucene``,
    or ``pyserini:NAME``), as ``winnow search --retriever`` does. Dense and
    hybrid need an index built with embeddings (``--dense``, or ``build_index(..., dense=True)``);
    ``ann`` ("hnsw", "ivfpq") searches them through that ANN index, its search settings changed by
    ``ann_set`` (``{"efSearch": 512}``), as ``winnow search --ann`` does."""
    from .index import open_retriever

    return open_retriever(path, retriever, embedder=embedder, ann=ann, ann_overrides=ann_set)


def build_index(source: str | Path, out: str | Path, *, chunk_words: int = 150, dense: bool = False,
                bm25_profile: str = "default", encoder: str = "minilm", dense_storage: str = "float16",
                ann: Sequence[str] = (), overwrite: bool = False, progress: bool = True) -> BM25Index:
    """Read a corpus (JSONL, TSV, Parquet, BEIR folder, text folder or ``"wiki-vital"``) in one pass,
    index it like ``winnow index`` (with passage embeddings by the ``encoder`` preset when ``dense``,
    stored as ``dense_storage``, and the ANN indexes named in ``ann``; ``bm25_profile`` "default" or
    "pyserini", see :mod:`winnow.index.analysis`), and open it for BM25 search."""
    from .corpus import open_corpus, source_checksum
    from .index import BM25Index, add_ann_index, ann_settings, load_encoder
    from .index import build_index as index_passages
    from .index.vectors import STORAGES

    if dense_storage not in STORAGES:
        raise ValueError(f"dense_storage must be one of {', '.join(STORAGES)} (got {dense_storage!r})")
    wanted = [ann_settings(kind) for kind in ann]
    embedder = load_encoder(encoder) if dense else None  # before reading the corpus: a missing model fails fast
    corpus = open_corpus(source, chunk_words=chunk_words)
    index_passages(corpus.passages(progress=progress), Path(out), source=str(source),
                   source_checksum=lambda: source_checksum(corpus.files), load_report=lambda: corpus.report.to_dict(),
                   source_options={"chunk_words": chunk_words}, embedder=embedder, profile=bm25_profile,
                   overwrite=overwrite, progress=progress, dense_storage=dense_storage)
    for settings in wanted:
        add_ann_index(out, settings, progress=progress)
    return BM25Index.open(out)


def open_pipeline(index: str | Path, *, config: str | Path | None = None, cache: bool | str | Path = True,
                  **options: Any) -> Pipeline:
    """An index and a method with its models, from run options as ``winnow ask`` takes them: every
    keyword is a run option (:class:`winnow.run_spec.RunOptions`: ``method``, ``model``, ``backend``,
    ``base_url``, ``timeout``, ``hedge``, ``tokenizer``, ``slots``, ``context_size``, ``profile``,
    ``agents=["judge=MODEL"]``, the setting shortcuts ``n``, ``k``, …; ``settings={"window": 20}`` for
    any other method setting), and ``config`` a TOML or YAML run file, resolved by the one resolver
    of every front door (:func:`winnow.run_spec.resolve_run`; keywords win over the file). A misspelt
    keyword is refused naming it. Close the pipeline (or use ``with``) to free its models::

        with winnow.open_pipeline("wiki-index", method="mainrag", model="smollm2-135m", k=3) as rag:
            print(rag.ask("who painted the mona lisa").text)
    """
    import os

    from .pipeline import Pipeline
    from .run_spec import RunOptions, resolve_run
    from .settings import SettingsLayer

    settings = options.pop("settings", None) or {}
    run = RunOptions.checked("winnow.open_pipeline", {**options, "config": config})
    spec = resolve_run(run, settings=SettingsLayer("settings", dict(settings), field_of=lambda k: f"settings[{k!r}]"))
    api_key = run.api_key or os.environ.get("WINNOW_OPENAI_API_KEY", "")
    return Pipeline(spec, index, api_key=api_key, cache=False if run.no_cache else cache, threads=run.threads)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'winnow' has no attribute {name!r}")


__all__ = ["Winnower", "__version__", "build_index", "build_method", "load_llm", "open_index", "open_pipeline"]
