"""Building a BM25 index folder: Lucene BM25 (k1=0.9, b=0.4, as in Pyserini's defaults) via bm25s.

The folder holds bm25s's own save format in ``bm25/`` (its precomputed per-term score matrix, loaded
memory-mapped), the passages in corpus order in the passage store ``passages/`` (row i is bm25s
document i; see :mod:`.store`) and ``manifest.json``; with an embedder, also ``dense/`` (see
:mod:`.embeddings`). It is written into a temporary sibling and renamed into place, so a killed
build never leaves a half index at ``out``. Passages are streamed to the store as they are read;
what still grows with the corpus is bm25s's in-memory tokenisation (see docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress

from ..atomic import atomic_folder, check_replaceable
from ..errors import WinnowError
from ..progress import progress_bar
from ..records import Passage
from .analysis import (
    FIELDS,
    bm25_profile,
    indexed_text,
    make_stemmer,
    require_indexable_words,
    stopword_list,
    tokenize_corpus,
)
from .embedding_shards import discard_work, work_folder
from .embeddings import DENSE_DIR, write_dense_folder
from .impacts import DEFAULT_IMPACTS, SCALES, check_impacts, encode, quantised_scales, row_dtype, widen_all
from .manifest import BM25S_ARRAYS, MANIFEST, write_manifest
from .scoring import MAXIMA, term_maxima
from .store import PassageStore, PassageStoreWriter
from .store_layout import STORE_DIR
from .vectors import DEFAULT_STORAGE, Storage

if TYPE_CHECKING:
    from .encoders import DenseEncoder
    from .ray_encoding import RayEncoding

OLD_PASSAGES = "passages.jsonl"  # format version 1's passages, read whole into memory
BM25_DIR = "bm25"
METHOD = "lucene"
# Any of these in a folder marks it as a (possibly damaged) index that --overwrite may replace.
INDEX_MARKERS = (MANIFEST, STORE_DIR, OLD_PASSAGES, BM25_DIR)
LoadReportSource = dict[str, Any] | Callable[[], dict[str, Any]]
WHAT = "a Winnow index"


def build_bm25_index(passages: Iterable[Passage], out: str | Path, *, source: str,
                     source_checksum: str | Callable[[], str],
                     load_report: LoadReportSource | None = None, source_options: dict[str, Any] | None = None,
                     profile: str = "default", k1: float | None = None, b: float | None = None,
                     overwrite: bool = False, progress: bool = True, impacts: str = DEFAULT_IMPACTS) -> Path:
    """Index ``passages`` (title and text) into the folder ``out`` and return ``out``.

    ``passages`` may be any iterable (a :class:`~winnow.corpus.CorpusStream`'s ``passages()``): it is
    read once. ``source`` and ``source_checksum`` say what was indexed (the manifest keeps them so a
    caller can tell a stale index; either may be a function called once the passages are read, so a
    source is read first and checksummed after); ``load_report`` (the corpus loader's account of skipped records,
    or a function giving it once the passages are read) and
    ``source_options`` (e.g. chunk size) are recorded if given. An existing ``out`` is refused
    unless ``overwrite``, and then replaced only once the new index is complete. ``impacts``: how
    the score arrays store impacts, float32 (exact), float16 or uint8 (:mod:`.impacts`).
    """
    return build_index(passages, out, source=source, source_checksum=source_checksum, load_report=load_report,
                       source_options=source_options, profile=profile, k1=k1, b=b, overwrite=overwrite,
                       progress=progress, impacts=impacts)


def build_index(passages: Iterable[Passage], out: str | Path, *, source: str,
                source_checksum: str | Callable[[], str],
                load_report: LoadReportSource | None = None, source_options: dict[str, Any] | None = None,
                profile: str = "default", k1: float | None = None, b: float | None = None,
                embedder: DenseEncoder | None = None, overwrite: bool = False, progress: bool = True,
                dense_storage: Storage = DEFAULT_STORAGE, ray: RayEncoding | None = None,
                impacts: str = DEFAULT_IMPACTS) -> Path:
    """:func:`build_bm25_index`, plus passage embeddings in ``dense/`` when ``embedder`` is given.

    Both go into the same temporary folder, so the index appears with its embeddings or not at all
    (a rebuild never leaves a window in which dense search of ``out`` fails). ``profile`` names the
    analysis and parameters (:data:`~winnow.index.analysis.PROFILES`: ``default`` or ``pyserini``);
    ``k1`` and ``b`` override the profile's. The embeddings are computed from the passage store just
    written (``passages`` may be a stream read once), in shards kept beside ``out`` until it is in
    place, so a killed build resumes them (:mod:`.embedding_shards`); ``dense_storage``: float16,
    int8 or float32 (:mod:`.vectors`); with ``ray`` they are computed on a Ray cluster
    (:mod:`.ray_encoding`).
    """
    import bm25s  # here: searching never needs it (bm25.read_bm25s_matrix), and it imports scipy.sparse
    out, impacts, chosen = Path(out), check_impacts(impacts), bm25_profile(profile)
    k1, b = chosen.k1 if k1 is None else k1, chosen.b if b is None else b
    # stderr, so that `--json` output on stdout stays clean.
    with progress_bar(*Progress.get_default_columns(), MofNCompleteColumn(), console=Console(stderr=True),
                  transient=True, disable=not progress) as bar, \
            atomic_folder(out, overwrite=overwrite, looks_ours=looks_like_index, what=WHAT,
                          report=bar.console.print) as temp:
        task = bar.add_task("reading passages", total=5)
        writer = PassageStoreWriter(temp)
        texts = []
        for passage in passages:
            writer.add(passage)
            texts.append(indexed_text(passage))
        if not texts:
            raise WinnowError("there are no passages to index",
                              "check the corpus: it is empty or every record was skipped")
        store_section = writer.finish()  # refuses a repeated id
        bar.update(task, advance=1, description="tokenising")
        tokens = tokenize_corpus(texts, make_stemmer(chosen.stemmer), stopword_list(chosen.stopwords))
        del texts
        require_indexable_words(tokens, source)
        bar.update(task, advance=1, description="indexing")
        model = bm25s.BM25(method=METHOD, k1=k1, b=b)
        model.index(tokens, show_progress=False)
        bar.update(task, advance=1, description="saving")
        model.save(temp / BM25_DIR, show_progress=False)
        rows = store_section["rows"]
        store_score_arrays(temp / BM25_DIR, model.scores, rows, impacts)
        counts = {"passages": rows, "vocabulary": len(tokens.vocab), "tokens": sum(len(doc) for doc in tokens.ids)}
        del model, tokens
        dense = None
        if embedder is not None:
            bar.update(task, description="embedding")
            embedding = bar.add_task("embedding passages", total=rows)
            (temp / DENSE_DIR).mkdir()
            # Read back from the store, not from ``passages``: a streamed corpus has been consumed.
            dense = write_dense_folder(temp / DENSE_DIR, PassageStore.open(temp, rows, "rebuild it"), embedder,
                                       progress=lambda n: bar.advance(embedding, n), storage=dense_storage,
                                       work=work_folder(out), report=bar.console.print, ray=ray)
            bar.remove_task(embedding)
        bar.update(task, advance=1, description="checksumming")
        fields: dict[str, Any] = {
            "source": source,
            "source_checksum": source_checksum() if callable(source_checksum) else source_checksum,
            "counts": counts,
            "store": store_section,
            "bm25": {"method": METHOD, "k1": k1, "b": b, "stopwords": chosen.stopwords, "stemmer": chosen.stemmer,
                     "fields": list(FIELDS), "profile": chosen.name, "impacts": impacts,
                     "library": f"bm25s {bm25s.__version__}"},
        }
        if dense is not None:
            fields["dense"] = dense
        if source_options:
            fields["source_options"] = source_options
        if load_report is not None:
            fields["load_report"] = load_report() if callable(load_report) else load_report
        write_manifest(temp, **fields)
        bar.update(task, advance=1)
    if embedder is not None:
        discard_work(work_folder(out))  # the index, with its embeddings, is in place
    return out


def store_score_arrays(folder: Path, scores: dict[str, Any], rows: int, impacts: str) -> None:
    """Rewrite bm25s's saved impacts in the format ``impacts`` and its passage rows as uint16 when
    they fit (:mod:`.impacts`), beside the per-term maxima of the impacts as stored (and uint8's scales)."""
    data, indptr = scores["data"], scores["indptr"]
    maxima = term_maxima(data, indptr)
    scales = quantised_scales(maxima) if impacts == "uint8" else None
    if impacts != DEFAULT_IMPACTS:
        data = encode(data, indptr, impacts, scales)
        np.save(folder / BM25S_ARRAYS[0], data)
        if scales is not None:
            np.save(folder / SCALES, scales)
        maxima = term_maxima(widen_all(data, indptr, scales), indptr)
    if row_dtype(rows) != scores["indices"].dtype:
        np.save(folder / BM25S_ARRAYS[1], scores["indices"].astype(row_dtype(rows)))
    np.save(folder / MAXIMA, maxima)


def looks_like_index(folder: Path) -> bool:
    return any((folder / marker).exists() for marker in INDEX_MARKERS)


def check_index_out(out: str | Path, *, overwrite: bool) -> None:
    """Refuse ``out`` early (before loading a corpus) if a build would refuse it."""
    check_replaceable(Path(out).expanduser(), overwrite=overwrite, looks_ours=looks_like_index, what=WHAT)
