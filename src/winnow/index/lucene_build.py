"""Building a Winnow index whose BM25 postings are Lucene's (``winnow index --bm25-engine lucene``).

The folder is a Winnow index like any other (:mod:`.build`): the passages in the passage store
``passages/`` (:mod:`.store`), ``manifest.json`` listing every file with its sha256, written into a
temporary sibling and renamed into place. Where Winnow's own engine writes bm25s's score arrays into
``bm25/``, this one writes a Lucene index into ``lucene/``: Anserini's ``SimpleIndexer`` (the class
Pyserini's ``LuceneIndexer`` wraps), ``JsonCollection`` documents ``{"id", "contents"}`` through
``DefaultLuceneDocumentGenerator`` and the ``DefaultEnglishAnalyzer`` (Porter stemmer, Lucene's 33
English stop words), as ``python -m pyserini.index.lucene --collection JsonCollection`` indexes a
folder of JSONL, postings only (no positions, document vectors or raw text: the text is in the store).
``contents`` is the passage's indexed text, its title and text (:func:`.passage_text.indexed_text`).
BM25's k1 and b are search-time parameters in Lucene: the manifest records them (0.9 and 0.4,
Pyserini's defaults, unless given) and :class:`.lucene.LuceneIndex` searches with them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress

from ..atomic import atomic_folder
from ..cores import available_cores
from ..errors import WinnowError
from ..progress import progress_bar
from ..records import Passage
from .analysis import FIELDS
from .build import WHAT, LoadReportSource, looks_like_index
from .lucene_jvm import PYSERINI, anserini
from .manifest import write_manifest
from .passage_text import indexed_text
from .store import PassageStoreWriter

LUCENE_DIR = "lucene"
LAYOUT = "lucene"  # the manifest's bm25.layout of an index searched by Lucene
K1, B = 0.9, 0.4  # Pyserini's LuceneSearcher defaults (BM25, Robertson et al.; Lucene's BM25Similarity)
BATCH = 10_000  # documents handed to Java per call: few JNI crossings, bounded memory


def build_lucene_index(passages: Iterable[Passage], out: str | Path, *, source: str, source_checksum: Any,
                       load_report: LoadReportSource | None = None, source_options: dict[str, Any] | None = None,
                       k1: float | None = None, b: float | None = None, threads: int | None = None,
                       overwrite: bool = False, progress: bool = True) -> Path:
    """Index ``passages`` with Lucene into the folder ``out`` and return ``out``.

    The arguments are :func:`.build.build_bm25_index`'s (``source_checksum`` and ``load_report`` may be
    functions called once the passages are read); ``threads`` Lucene indexing threads (default: the
    cores this process may use). Needs Java and the ``lucene`` extra (:mod:`.lucene_jvm`), checked
    before anything is read."""
    out = Path(out)
    autoclass = anserini("winnow index --bm25-engine lucene")
    k1 = K1 if k1 is None else k1
    b = B if b is None else b
    threads = threads or available_cores()
    with progress_bar(*Progress.get_default_columns(), MofNCompleteColumn(), console=Console(stderr=True),
                      transient=True, disable=not progress) as bar, \
            atomic_folder(out, overwrite=overwrite, looks_ours=looks_like_index, what=WHAT,
                          report=bar.console.print) as temp:
        task = bar.add_task("indexing passages with Lucene", total=None)
        writer = PassageStoreWriter(temp)
        indexer = autoclass("io.anserini.index.SimpleIndexer")(
            ["-input", "", "-index", str(temp / LUCENE_DIR), "-collection", "JsonCollection",
             "-threads", str(threads)])
        try:
            for batch in _batches(passages, writer):
                added = indexer.addRawDocuments(batch)
                if added != len(batch):
                    raise WinnowError(f"Lucene indexed {added} of a batch of {len(batch)} passages",
                                      "see the Java error above; the index was not written")
                bar.advance(task, len(batch))
        finally:
            indexer.close()
        if not len(writer):
            raise WinnowError("there are no passages to index",
                              "check the corpus: it is empty or every record was skipped")
        store_section = writer.finish()  # refuses a repeated id
        bar.update(task, description="checksumming")
        fields: dict[str, Any] = {
            "source": source,
            "source_checksum": source_checksum() if callable(source_checksum) else source_checksum,
            "counts": {"passages": store_section["rows"], **_statistics(autoclass, temp / LUCENE_DIR)},
            "store": store_section,
            "bm25": {"method": "lucene", "layout": LAYOUT, "k1": k1, "b": b, "stopwords": "lucene-english",
                     "stemmer": "porter", "fields": list(FIELDS), "analyzer": "DefaultEnglishAnalyzer",
                     "library": f"Anserini {PYSERINI} (pyserini {PYSERINI})",
                     "lucene_files": sorted(path.name for path in (temp / LUCENE_DIR).iterdir())},
        }
        if source_options:
            fields["source_options"] = source_options
        if load_report is not None:
            fields["load_report"] = load_report() if callable(load_report) else load_report
        write_manifest(temp, **fields)
    return out


def _batches(passages: Iterable[Passage], writer: PassageStoreWriter) -> Iterable[list[str]]:
    """Each passage into the store, and its Lucene document ``{"id", "contents"}`` into batches."""
    batch: list[str] = []
    for passage in passages:
        writer.add(passage)
        batch.append(json.dumps({"id": passage.id, "contents": indexed_text(passage)}, ensure_ascii=False))
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _statistics(autoclass: Any, folder: Path) -> dict[str, int]:
    """The index's vocabulary and token counts, as Anserini's index reader reports them."""
    utils = autoclass("io.anserini.index.IndexReaderUtils")
    reader = utils.getReader(str(folder))
    try:
        stats = utils.getIndexStats(reader)
        counts = {"vocabulary": int(stats.get("unique_terms")), "tokens": int(stats.get("total_terms"))}
        return {name: count for name, count in counts.items() if count >= 0}  # -1: Lucene does not know
    finally:
        reader.close()
