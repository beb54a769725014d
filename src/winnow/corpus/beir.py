"""BEIR datasets: a folder with ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

The corpus loads like any JSONL corpus (BEIR writes ids as ``_id``). Queries and relevance judgments
are read strictly: a duplicate query id or a malformed judgment row is an :class:`InputError`, since
evaluating against a silently altered test set would give numbers nobody can trust.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, WinnowError
from .corpus import Corpus
from .jsonl import JSONL_SUFFIXES, load_jsonl, read_json_lines, record_id, require_object, string_field
from .lines import read_lines

BEIR_LAYOUT = "a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv"
QUERY_HINT = 'each line must be {"_id": ..., "text": ...}'
QRELS_HEADER = ["query-id", "corpus-id", "score"]
QRELS_HINT = "each row must be: query-id <tab> corpus-id <tab> integer score, after a header line"


@dataclass(slots=True)
class BeirDataset:
    """A BEIR dataset: the corpus, ``queries`` (id → text) and ``qrels`` (split → query id →
    document id → relevance score)."""

    corpus: Corpus
    queries: dict[str, str]
    qrels: dict[str, dict[str, dict[str, int]]]


def beir_file(folder: Path, stem: str) -> Path | None:
    """``folder/<stem>.jsonl`` (or ``.jsonl.gz``) if it exists."""
    for suffix in JSONL_SUFFIXES:
        if (path := folder / f"{stem}{suffix}").is_file():
            return path
    return None


def is_beir_folder(folder: Path) -> bool:
    return beir_file(folder, "corpus") is not None


def beir_parts_present(folder: Path) -> list[str]:
    """The BEIR files other than the corpus that ``folder`` holds ("queries.jsonl", "qrels/*.tsv"):
    a folder with them but no corpus is a BEIR download missing its corpus, not a text folder."""
    parts = ["queries.jsonl"] if beir_file(folder, "queries") is not None else []
    if any((folder / "qrels").glob("*.tsv")):
        parts.append("qrels/*.tsv")
    return parts


def load_beir_corpus(folder: Path, *, source: str | None = None) -> Corpus:
    """The passages of the folder's ``corpus.jsonl``."""
    return load_jsonl(_require(folder, "corpus"), source=source if source is not None else str(folder), kind="beir")


def load_beir(folder: str | Path) -> BeirDataset:
    """The corpus, queries and relevance judgments of the BEIR folder ``folder`` (all three are required)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise WinnowError(f"{folder}: not a folder", BEIR_LAYOUT)
    qrels_files = sorted((folder / "qrels").glob("*.tsv"))
    if not qrels_files:
        raise WinnowError(f"{folder}: no qrels/*.tsv files", BEIR_LAYOUT)
    return BeirDataset(
        corpus=load_beir_corpus(folder),
        queries=read_queries(_require(folder, "queries")),
        qrels={file.stem: read_qrels(file) for file in qrels_files},
    )


def read_queries(path: Path) -> dict[str, str]:
    """Query id → text from a BEIR ``queries.jsonl``."""
    queries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for line, record in read_json_lines(path, hint=QUERY_HINT):
        record = require_object(record, path, line, hint=QUERY_HINT)
        id_key, query_id = record_id(record, path, line, hint=QUERY_HINT)
        if query_id in queries:
            raise InputError(path, f"duplicate query id {query_id!r} (first at line {first_line[query_id]})",
                             line=line, field=id_key, hint="query ids must be unique")
        queries[query_id] = string_field(record, "text", path, line, hint=QUERY_HINT, required=True)
        first_line[query_id] = line
    return queries


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Query id → document id → score from a BEIR ``qrels/<split>.tsv`` (the header line is optional)."""
    qrels: dict[str, dict[str, int]] = {}
    header_allowed = True
    for line, text in read_lines(path):
        if not text.strip():
            continue
        fields = [field.strip() for field in text.split("\t")]
        if header_allowed:
            header_allowed = False
            if fields == QRELS_HEADER:
                continue
        if len(fields) != 3:
            raise InputError(path, f"expected 3 tab-separated fields, got {len(fields)}", line=line, hint=QRELS_HINT)
        query_id, doc_id, score_text = fields
        for name, value in zip(QRELS_HEADER[:2], (query_id, doc_id), strict=True):
            if not value:
                raise InputError(path, f"empty {name}", line=line, field=name, hint=QRELS_HINT)
        try:
            score = int(score_text)
        except ValueError as error:
            raise InputError(path, f"score must be an integer, got {score_text!r}", line=line, field="score",
                             hint=QRELS_HINT) from error
        judged = qrels.setdefault(query_id, {})
        if judged.get(doc_id, score) != score:
            raise InputError(path, f"query {query_id!r}, document {doc_id!r} is judged twice, with scores "
                                   f"{judged[doc_id]} and {score}", line=line, field="score",
                             hint="keep one judgment per pair")
        judged[doc_id] = score
    return qrels


def _require(folder: Path, stem: str) -> Path:
    if (path := beir_file(folder, stem)) is None:
        raise WinnowError(f"{folder}: no {stem}.jsonl", BEIR_LAYOUT)
    return path
