"""Building a BM25 index folder: Lucene BM25 (k1=0.9, b=0.4, as in Pyserini's defaults) via bm25s.

The folder holds bm25s's own save format in ``bm25/`` (its precomputed per-term score matrix, loaded
memory-mapped), the passages in corpus order in ``passages.jsonl`` (row i is bm25s document i) and
``manifest.json``; with an embedder, also ``dense/`` (see :mod:`.embeddings`). It is written into a
temporary sibling and renamed into place, so a killed build never leaves a half index at ``out``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import bm25s
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress

from ..atomic import atomic_folder, check_replaceable
from ..errors import WinnowError
from ..records import Passage
from .analysis import (
    FIELDS,
    STEMMER_LABEL,
    STOPWORDS,
    indexed_text,
    make_stemmer,
    require_indexable_words,
    tokenize_corpus,
)
from .embedding_shards import discard_work, work_folder
from .embeddings import DENSE_DIR, write_dense_folder
from .manifest import MANIFEST, write_manifest
from .vectors import DEFAULT_STORAGE, Storage

if TYPE_CHECKING:
    from .encoders import DenseEncoder

PASSAGES = "passages.jsonl"
BM25_DIR = "bm25"
METHOD = "lucene"
# Any of these in a folder marks it as a (possibly damaged) index that --overwrite may replace.
INDEX_MARKERS = (MANIFEST, PASSAGES, BM25_DIR)
WHAT = "a Winnow index"


def build_bm25_index(passages: Sequence[Passage], out: str | Path, *, source: str, source_checksum: str,
                     load_report: dict[str, Any] | None = None, source_options: dict[str, Any] | None = None,
                     k1: float = 0.9, b: float = 0.4, overwrite: bool = False, progress: bool = True) -> Path:
    """Index ``passages`` (title and text) into the folder ``out`` and return ``out``.

    ``source`` and ``source_checksum`` say what was indexed (the manifest keeps them so a caller can
    tell a stale index); ``load_report`` (the corpus loader's account of skipped records) and
    ``source_options`` (e.g. chunk size) are recorded if given. An existing ``out`` is refused
    unless ``overwrite``, and then replaced only once the new index is complete.
    """
    return build_index(passages, out, source=source, source_checksum=source_checksum, load_report=load_report,
                       source_options=source_options, k1=k1, b=b, overwrite=overwrite, progress=progress)


def build_index(passages: Sequence[Passage], out: str | Path, *, source: str, source_checksum: str,
                load_report: dict[str, Any] | None = None, source_options: dict[str, Any] | None = None,
                k1: float = 0.9, b: float = 0.4, embedder: DenseEncoder | None = None, overwrite: bool = False,
                progress: bool = True, dense_storage: Storage = DEFAULT_STORAGE) -> Path:
    """:func:`build_bm25_index`, plus passage embeddings in ``dense/`` when ``embedder`` is given.

    Both go into the same temporary folder, so the index appears with its embeddings or not at all
    (a rebuild never leaves a window in which dense search of ``out`` fails). The embeddings are
    computed in shards kept beside ``out`` until it is in place, so a killed build resumes them
    (:mod:`.embedding_shards`); ``dense_storage``: float16, int8 or float32 (:mod:`.vectors`).
    """
    if not passages:
        raise WinnowError("there are no passages to index", "check the corpus: it is empty or every record was skipped")
    check_unique_ids(passages)
    out = Path(out)
    stemmer = make_stemmer(STEMMER_LABEL)
    # stderr, so that `--json` output on stdout stays clean.
    with Progress(*Progress.get_default_columns(), MofNCompleteColumn(), console=Console(stderr=True),
                  transient=True, disable=not progress) as bar, \
            atomic_folder(out, overwrite=overwrite, looks_ours=looks_like_index, what=WHAT,
                          report=bar.console.print) as temp:
        task = bar.add_task("tokenising", total=5)
        tokens = tokenize_corpus([indexed_text(p) for p in passages], stemmer)
        require_indexable_words(tokens, source)
        bar.update(task, advance=1, description="indexing")
        model = bm25s.BM25(method=METHOD, k1=k1, b=b)
        model.index(tokens, show_progress=False)
        bar.update(task, advance=1, description="saving")
        model.save(temp / BM25_DIR, show_progress=False)
        bar.update(task, advance=1, description="writing passages")
        write_passages(temp / PASSAGES, passages)
        dense = None
        if embedder is not None:
            bar.update(task, description="embedding")
            embedding = bar.add_task("embedding passages", total=len(passages))
            (temp / DENSE_DIR).mkdir()
            dense = write_dense_folder(temp / DENSE_DIR, passages, embedder,
                                       progress=lambda n: bar.advance(embedding, n), storage=dense_storage,
                                       work=work_folder(out), report=bar.console.print)
            bar.remove_task(embedding)
        bar.update(task, advance=1, description="checksumming")
        fields: dict[str, Any] = {
            "source": source,
            "source_checksum": source_checksum,
            "counts": {"passages": len(passages), "vocabulary": len(tokens.vocab),
                       "tokens": sum(len(doc) for doc in tokens.ids)},
            "bm25": {"method": METHOD, "k1": k1, "b": b, "stopwords": STOPWORDS, "stemmer": STEMMER_LABEL,
                     "fields": list(FIELDS), "library": f"bm25s {bm25s.__version__}"},
        }
        if dense is not None:
            fields["dense"] = dense
        if source_options:
            fields["source_options"] = source_options
        if load_report is not None:
            fields["load_report"] = load_report
        write_manifest(temp, **fields)
        bar.update(task, advance=1)
    if embedder is not None:
        discard_work(work_folder(out))  # the index, with its embeddings, is in place
    return out


def looks_like_index(folder: Path) -> bool:
    return any((folder / marker).exists() for marker in INDEX_MARKERS)


def check_index_out(out: str | Path, *, overwrite: bool) -> None:
    """Refuse ``out`` early (before loading a corpus) if a build would refuse it."""
    check_replaceable(Path(out).expanduser(), overwrite=overwrite, looks_ours=looks_like_index, what=WHAT)


def check_unique_ids(passages: Sequence[Passage]) -> None:
    """Ids must be unique: ``BM25Index.get`` looks passages up by id, and evaluation matches on it."""
    seen: set[str] = set()
    for number, passage in enumerate(passages, start=1):
        if passage.id in seen:
            raise WinnowError(f"passage id {passage.id!r} occurs more than once (again at passage {number})",
                              "passage ids must be unique within a corpus")
        seen.add(passage.id)


def write_passages(path: Path, passages: Sequence[Passage]) -> None:
    """One ``Passage.to_dict()`` per line, in corpus order: the line number is the bm25s doc index."""
    with path.open("w", encoding="utf-8") as handle:
        for passage in passages:
            handle.write(json.dumps(passage.to_dict(), ensure_ascii=False) + "\n")
