"""Corpus input: turn what the user points at into :class:`~winnow.records.Passage` records.

:func:`open_corpus` accepts a ``.jsonl``/``.jsonl.gz`` file, a TSV collection (DPR's ``psgs_w100.tsv``
or MS MARCO's ``collection.tsv``, optionally gzipped), a ``.parquet`` file, a BEIR folder, a folder
of ``.txt``/``.md`` files, or the name ``wiki-vital``, and returns a :class:`CorpusStream` that reads
it in one pass with bounded memory; :func:`load_corpus` reads it all into a :class:`Corpus`. Either
way a :class:`LoadReport` accounts for every record skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import WinnowError
from ..records import Passage
from .beir import BeirDataset, beir_file, beir_parts_present, load_beir
from .checksum import source_checksum
from .chunking import split_into_passages, split_sentences
from .corpus import Corpus
from .jsonl import is_jsonl, iter_jsonl_passages
from .meter import Meter
from .parquet import is_parquet, iter_parquet_passages, parquet_rows
from .report import LoadReport, Location, not_regular_files
from .stream import CorpusStream
from .textdir import iter_text_passages, list_text_files
from .tsv import is_tsv, iter_tsv_passages
from .wiki_vital import WIKI_VITAL, iter_wiki_vital_passages, wiki_vital_path

MIN_CHUNK_WORDS = 10
ACCEPTED_KINDS = ("give a .jsonl or .jsonl.gz file, a .tsv or .tsv.gz collection (DPR's or MS MARCO's layout), "
                  "a .parquet file, a BEIR folder (corpus.jsonl, queries.jsonl, qrels/), a folder of .txt/.md "
                  "files, or wiki-vital")


def load_corpus(source: str | Path, *, chunk_words: int = 150) -> Corpus:
    """All the passages of ``source`` in memory (see :func:`open_corpus` for the kinds of source).
    For a large corpus, iterate ``open_corpus(source).passages()`` instead."""
    stream = open_corpus(source, chunk_words=chunk_words)
    passages = list(stream.passages())
    return Corpus(passages, stream.source, stream.kind, stream.files, stream.report)


def open_corpus(source: str | Path, *, chunk_words: int = 150) -> CorpusStream:
    """``source`` opened for one pass, its kind told by the path: a JSONL, TSV or Parquet file, a
    BEIR folder (one with a ``corpus.jsonl``), any other folder (its text files, cut into passages
    of about ``chunk_words`` words), or the name ``"wiki-vital"``. Nothing is read yet but the
    folder's file list; errors about the source itself come now."""
    if chunk_words < MIN_CHUNK_WORDS:
        raise WinnowError(f"--chunk-words must be at least {MIN_CHUNK_WORDS}, got {chunk_words}",
                          "passages of a few words retrieve poorly; the default is 150")
    if isinstance(source, str) and not source.strip():  # Path("") is "." : never index the cwd by accident
        raise WinnowError(f"the corpus SOURCE is empty ({source!r})",
                          ACCEPTED_KINDS + " (\".\" for the current folder)")
    if source == WIKI_VITAL:  # only the bare name: a Path (or "./wiki-vital") means a file or folder
        data = wiki_vital_path()
        return CorpusStream(WIKI_VITAL, WIKI_VITAL, [data], lambda meter: iter_wiki_vital_passages(data))
    path = Path(source).expanduser()
    label = str(source)
    if path.is_dir():
        if (corpus_file := beir_file(path, "corpus")) is not None:
            return _file_stream(label, "beir", corpus_file, iter_jsonl_passages)
        if beir_parts := beir_parts_present(path):
            raise WinnowError(f"{label}: a BEIR folder (it has {' and '.join(beir_parts)}) without its "
                              "corpus.jsonl", "put the corpus.jsonl of the BEIR download beside queries.jsonl, "
                                              "or give a folder of .txt/.md files")
        files, not_regular = list_text_files(path)
        if not files:
            found = f" (skipped {not_regular_files(not_regular)})" if not_regular else ""
            raise WinnowError(f"{label}: no .txt or .md files in this folder{found}",
                              "a folder corpus is read from its .txt and .md files (hidden ones are skipped)")
        return CorpusStream(label, "textdir", files,
                            lambda meter: iter_text_passages(path, files, chunk_words, meter),
                            total=sum(file.stat().st_size for file in files), not_regular=not_regular)
    if path.is_file():
        if is_jsonl(path):
            return _file_stream(label, "jsonl", path, iter_jsonl_passages)
        if is_tsv(path):
            return _file_stream(label, "tsv", path, iter_tsv_passages)
        if is_parquet(path):
            return CorpusStream(label, "parquet", [path], lambda meter: iter_parquet_passages(path, meter),
                                total=parquet_rows(path), unit="rows")
        raise WinnowError(f"{label}: not a corpus file", ACCEPTED_KINDS)
    if path.exists():  # a FIFO, a socket, a device: reading it could block forever
        raise WinnowError(f"{label}: not a regular file or folder", ACCEPTED_KINDS)
    raise WinnowError(f"{label}: no such file or folder", ACCEPTED_KINDS)


def _file_stream(label: str, kind: str, path: Path,
                 reader: Callable[[Path, Meter], Iterator[tuple[Passage, Location]]]) -> CorpusStream:
    return CorpusStream(label, kind, [path], lambda meter: reader(path, meter), total=path.stat().st_size)


__all__ = [
    "BeirDataset",
    "Corpus",
    "CorpusStream",
    "LoadReport",
    "Location",
    "load_beir",
    "load_corpus",
    "open_corpus",
    "source_checksum",
    "split_into_passages",
    "split_sentences",
    "wiki_vital_path",
]
