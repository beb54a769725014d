"""Judged documents the index does not hold: a judgement no retriever can ever satisfy.

A qrels file made for another corpus, another chunking of it (text-folder ids are ``path#n``) or
another version of it names documents the index lacks. Scoring does not fail on them: the questions
just score 0 for those documents, which reads as a bad method. So the run counts them and says so,
as the corpus loader counts the records it skips.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..datasets.trec import Qrels

SHOWN_IDS = 3  # how many unknown ids a summary names before "and N more"


def read_run_qrels(qrels_path: Path, index_dir: Path,
                   question_ids: Iterable[str]) -> tuple[Qrels, dict[str, Any]]:
    """A run's ``--qrels``: the judgements, and what ``metrics.json`` records of the file (its path
    and checksum, and how many judged documents the index lacks: :func:`unknown_documents`)."""
    from ..datasets.trec import read_qrels
    from ..index.manifest import file_sha256

    qrels = read_qrels(qrels_path)
    info = {"file": str(Path(qrels_path).resolve()), "sha256": file_sha256(Path(qrels_path)),
            "index_coverage": unknown_documents(qrels, indexed_ids(index_dir), question_ids)}
    return qrels, info


def indexed_ids(index_dir: Path) -> Container[str]:
    """The passage ids of the index folder, looked up in its memory-mapped passage store (``id in``
    reads a few pages; nothing is read whole and the BM25 arrays are not loaded)."""
    from ..index.store import open_passage_store

    return open_passage_store(Path(index_dir)).ids


def unknown_documents(qrels: Mapping[str, Mapping[str, int]], indexed_ids: Container[str],
                      question_ids: Iterable[str]) -> dict[str, Any]:
    """How many distinct documents ``qrels`` judges and how many of them are not in ``indexed_ids``
    (with the first few, in file order); of the judgements of ``question_ids`` (the run's questions),
    how many relevant ones (grade ≥ 1) name such a document."""
    unknown: dict[str, None] = {}
    judged: set[str] = set()
    for documents in qrels.values():
        for doc_id in documents:
            judged.add(doc_id)
            if doc_id not in indexed_ids:
                unknown[doc_id] = None
    relevant_unknown = sum(1 for qid in dict.fromkeys(question_ids)
                           for doc_id, grade in qrels.get(qid, {}).items() if grade >= 1 and doc_id in unknown)
    return {"judged_documents": len(judged), "unknown_documents": len(unknown),
            "unknown_examples": list(unknown)[:SHOWN_IDS], "relevant_judgements_unknown": relevant_unknown}


def unknown_documents_note(coverage: Mapping[str, Any]) -> str:
    """One line for the user, or "" when every judged document is in the index."""
    count = coverage["unknown_documents"]
    if not count:
        return ""
    examples = ", ".join(repr(doc_id) for doc_id in coverage["unknown_examples"])
    shown = len(coverage["unknown_examples"])
    more = f", and {count - shown} more" if count > shown else ""
    relevant = coverage["relevant_judgements_unknown"]
    return (f"{count} of the {coverage['judged_documents']} documents judged in the qrels are not in the index "
            f"({examples}{more}); this run's questions have {relevant} relevant "
            f"{'judgement' if relevant == 1 else 'judgements'} on them, which no ranking can find "
            "(check that --qrels and --index come from the same corpus)")
