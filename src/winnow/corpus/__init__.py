"""Corpus input: turn what the user points at into :class:`~winnow.records.Passage` records.

:func:`load_corpus` accepts a ``.jsonl``/``.jsonl.gz`` file, a BEIR folder, a folder of ``.txt``/``.md``
files, or the name ``wiki-vital``, and returns a :class:`Corpus` whose :class:`LoadReport` accounts
for every record it skipped.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import WinnowError
from .beir import BeirDataset, beir_parts_present, is_beir_folder, load_beir, load_beir_corpus
from .checksum import source_checksum
from .chunking import split_into_passages, split_sentences
from .corpus import Corpus
from .jsonl import is_jsonl, load_jsonl
from .report import LoadReport, Location
from .textdir import load_text_folder
from .wiki_vital import WIKI_VITAL, load_wiki_vital, wiki_vital_path

MIN_CHUNK_WORDS = 10
ACCEPTED_KINDS = ("give a .jsonl or .jsonl.gz file, a BEIR folder (corpus.jsonl, queries.jsonl, qrels/), "
                  "a folder of .txt/.md files, or wiki-vital")


def load_corpus(source: str | Path, *, chunk_words: int = 150) -> Corpus:
    """The passages of ``source``, its kind told by the path: a JSONL file, a BEIR folder (one with a
    ``corpus.jsonl``), any other folder (its text files, cut into passages of about ``chunk_words``
    words), or the name ``"wiki-vital"``."""
    if chunk_words < MIN_CHUNK_WORDS:
        raise WinnowError(f"--chunk-words must be at least {MIN_CHUNK_WORDS}, got {chunk_words}",
                          "passages of a few words retrieve poorly; the default is 150")
    if isinstance(source, str) and not source.strip():  # Path("") is "." : never index the cwd by accident
        raise WinnowError(f"the corpus SOURCE is empty ({source!r})",
                          ACCEPTED_KINDS + " (\".\" for the current folder)")
    if source == WIKI_VITAL:  # only the bare name: a Path (or "./wiki-vital") means a file or folder
        return load_wiki_vital()
    path = Path(source).expanduser()
    label = str(source)
    if path.is_dir():
        if is_beir_folder(path):
            return load_beir_corpus(path, source=label)
        if beir_parts := beir_parts_present(path):
            raise WinnowError(f"{label}: a BEIR folder (it has {' and '.join(beir_parts)}) without its "
                              "corpus.jsonl", "put the corpus.jsonl of the BEIR download beside queries.jsonl, "
                                              "or give a folder of .txt/.md files")
        return load_text_folder(path, chunk_words=chunk_words, source=label)
    if path.is_file():
        if is_jsonl(path):
            return load_jsonl(path, source=label)
        raise WinnowError(f"{label}: not a corpus file", ACCEPTED_KINDS)
    if path.exists():  # a FIFO, a socket, a device: reading it could block forever
        raise WinnowError(f"{label}: not a regular file or folder", ACCEPTED_KINDS)
    raise WinnowError(f"{label}: no such file or folder", ACCEPTED_KINDS)


__all__ = [
    "BeirDataset",
    "Corpus",
    "LoadReport",
    "Location",
    "load_beir",
    "load_corpus",
    "source_checksum",
    "split_into_passages",
    "split_sentences",
    "wiki_vital_path",
]
