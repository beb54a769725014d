"""Questions and judgments of a BEIR folder (``queries.jsonl`` and ``qrels/<split>.tsv``).

The corpus of the folder is read by :func:`winnow.corpus.load_corpus` (``winnow index DIR``); this
module reads the other two parts with the same strict readers. As BEIR's own loader does, the
questions of a split are the queries its qrels judge, in ``queries.jsonl`` order; a judged query id
missing from ``queries.jsonl`` is an error rather than a silently shorter test set.
"""

from __future__ import annotations

from pathlib import Path

from ..corpus.beir import BEIR_LAYOUT, beir_file, read_qrels, read_queries
from ..errors import InputError, WinnowError
from .dataset import BEIR, Dataset
from .qa import QAItem


def load_beir_folder(folder: str | Path, split: str = "test") -> Dataset:
    """The queries judged in ``qrels/<split>.tsv`` of the BEIR folder ``folder``, with those qrels."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise WinnowError(f"{folder}: not a folder", BEIR_LAYOUT)
    queries_file = beir_file(folder, "queries")
    if queries_file is None:
        raise WinnowError(f"{folder}: no queries.jsonl", BEIR_LAYOUT)
    qrels_file = folder / "qrels" / f"{split}.tsv"
    if not qrels_file.is_file():
        splits = sorted(path.stem for path in (folder / "qrels").glob("*.tsv"))
        raise WinnowError(f"{folder}: no qrels/{split}.tsv",
                          f"splits here: {', '.join(splits)}" if splits else BEIR_LAYOUT)
    queries = read_queries(queries_file)
    qrels = read_qrels(qrels_file)
    if missing := [query_id for query_id in qrels if query_id not in queries]:
        raise InputError(qrels_file, f"{len(missing)} judged query ids are not in {queries_file.name}, e.g. "
                                     f"{missing[0]!r}", field="query-id", hint="the qrels belong to other queries")
    name = f"{folder.name}/{split}"
    questions = [QAItem(query_id, text, [], {"dataset": name}) for query_id, text in queries.items()
                 if query_id in qrels]
    return Dataset(name, BEIR, questions, qrels, f"BEIR folder {folder}", "see the dataset's own terms")
