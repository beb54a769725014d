"""A precomputed first stage: rankings read from a run file, served like a retriever.

The papers rerank what a strong first stage found (RankRAG: Dragon's top 100 of 21M passages;
MAIN-RAG: Contriever-MS MARCO's top 20; RRR: Pyserini BM25), and FlashRAG, rank_llm, Rankify and
BERGEN all let a researcher bring such a run instead of retrieving. :class:`PrecomputedRun` serves
one: ``search(query, k)`` returns the run's ranking for the query (its first ``k`` entries), the
passages fetched from an index's passage store (:mod:`.store`), each candidate carrying
``StageScore("run", score-from-the-file, rank)``.

Three formats are read (:func:`read_first_stage_run`):

* a TREC run, ``query-id Q0 doc-id rank score tag`` (what ``winnow eval`` writes as
  ``runs/retrieve.trec``, Anserini/Pyserini's output): keyed by query id;
* rank_llm's requests/results, JSON (a list) or JSONL (one a line) of
  ``{"query": {"text", "qid"}, "candidates": [{"docid", "score", "doc"}]}``, best first: keyed by
  query id;
* FlashRAG's retrieval cache (``retrieval_cache.json``), an object ``{query text: [{"id",
  "contents", "score", ...}, ...]}``: keyed by the query's text, as FlashRAG keys it.

Nothing is guessed: a query the run does not list is an error naming it (a silently empty first
stage would score as a retrieval failure); a document id the index does not hold is dropped from
its ranking and counted, and :meth:`PrecomputedRun.summary` names how many and which.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..corpus.json_line import describe_json_error, parse_json_line
from ..corpus.lines import read_lines
from ..datasets.trec import parse_run
from ..errors import InputError, WinnowError
from ..records import Candidate, CandidateList, Passage, Query, StageScore
from .store import PassageStore, open_passage_store

RunFormat = Literal["trec", "rank_llm", "flashrag"]
SHOWN = 3
RANK_LLM_HINT = ('each request must be {"query": {"text": ..., "qid": ...}, '
                 '"candidates": [{"docid": ..., "score": ...}]}')
FLASHRAG_HINT = 'a FlashRAG retrieval cache is {"query text": [{"id": ..., "score": ...}, ...]}'


@dataclass(slots=True)
class FirstStageRun:
    """Rankings read from ``path``: key (query id, or text for FlashRAG) → (doc id, score), best first."""

    path: Path
    format: RunFormat
    rankings: dict[str, list[tuple[str, float]]]
    texts: dict[str, str] = field(default_factory=dict)  # query id → its text, where the format has it (rank_llm)

    @property
    def keyed_by(self) -> Literal["id", "text"]:
        return "text" if self.format == "flashrag" else "id"

    def query_for(self, question: str, qid: str | None = None) -> Query:
        """The query a free-text question (``winnow ask --run``) is looked up as: by ``qid`` when
        given, else by its text where the run records texts (rank_llm's ``query.text``, FlashRAG's
        keys). A TREC run records no text, so it needs ``qid``."""
        if qid is not None:
            if self.keyed_by == "text":
                raise WinnowError(f"{self.path} is a FlashRAG retrieval cache, keyed by query text, not id",
                                  "leave --qid out: the question's text is looked up")
            return Query(question, id=qid)
        if self.keyed_by == "text":
            return Query(question)
        matching = [key for key, text in self.texts.items() if text.strip() == question.strip()]
        if len(matching) == 1:
            return Query(question, id=matching[0])
        if self.format == "trec":
            raise WinnowError(f"{self.path} is a TREC run: its rankings are keyed by query id and it holds no "
                              "query text", "give the question's id in the run with --qid ID")
        found = f"{len(matching)} queries of the run have" if matching else "no query of the run has"
        raise WinnowError(f"{self.path}: {found} the text {question[:80]!r}", "give its id in the run with --qid ID")


def read_first_stage_run(path: str | Path) -> FirstStageRun:
    """The run in ``path``, its format told by its content: JSON or JSONL (rank_llm's requests or
    FlashRAG's cache) when it starts with ``[``, ``{``, else a TREC run."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(path, "no such file", hint="give a TREC run, a rank_llm JSON/JSONL file or a FlashRAG "
                                                    "retrieval_cache.json")
    first = _first_character(path)
    if first not in "[{":
        return FirstStageRun(path, "trec", parse_run(read_lines(path), path))
    texts: dict[str, str] = {}
    if first == "[" or path.name.lower().endswith((".jsonl", ".jsonl.gz")):
        return FirstStageRun(path, "rank_llm", _rank_llm(path, texts), texts)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise InputError(path, f"not valid JSON: {describe_json_error(error, with_line=True)}",
                         hint=FLASHRAG_HINT) from error
    except UnicodeDecodeError as error:
        raise InputError(path, f"not UTF-8 text ({error.reason})", hint=FLASHRAG_HINT) from error
    if isinstance(data, dict) and "query" in data and "candidates" in data:  # one rank_llm request, JSONL
        return FirstStageRun(path, "rank_llm", _rank_llm(path, texts), texts)
    return FirstStageRun(path, "flashrag", _flashrag(path, data))


def _first_character(path: Path) -> str:
    for _line, text in read_lines(path):
        if text.strip():
            return text.lstrip()[0]
    raise InputError(path, "the run is empty", hint="give a run with at least one ranking")


def _rank_llm(path: Path, texts: dict[str, str] | None = None) -> dict[str, list[tuple[str, float]]]:
    """rank_llm's requests: query id → ranking; ``texts`` (if given) is filled with each id's query text."""
    rankings: dict[str, list[tuple[str, float]]] = {}
    for where, request in _rank_llm_requests(path):
        if not isinstance(request, dict) or not isinstance(request.get("query"), dict):
            raise InputError(path, f"{where}: expected an object with a query object", field="query",
                             hint=RANK_LLM_HINT)
        qid = request["query"].get("qid")
        if isinstance(qid, bool) or not isinstance(qid, (str, int)) or not str(qid).strip():
            raise InputError(path, f"{where}: query.qid must be a non-empty string or integer", field="query.qid",
                             hint=RANK_LLM_HINT)
        candidates = request.get("candidates")
        if not isinstance(candidates, list):
            raise InputError(path, f"{where}: candidates must be a list", field="candidates", hint=RANK_LLM_HINT)
        if str(qid) in rankings:
            raise InputError(path, f"{where}: query {str(qid)!r} is listed twice", field="query.qid",
                             hint="one request per query")
        rankings[str(qid)] = _ranking(path, where, candidates, "docid", RANK_LLM_HINT)
        if texts is not None and isinstance(request["query"].get("text"), str):
            texts[str(qid)] = request["query"]["text"]
    return rankings


def _rank_llm_requests(path: Path) -> Iterator[tuple[str, Any]]:
    if _first_character(path) == "[":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise InputError(path, f"not valid JSON: {describe_json_error(error, with_line=True)}",
                             hint=RANK_LLM_HINT) from error
        for number, request in enumerate(data, start=1):
            yield f"request {number}", request
        return
    for line, text in read_lines(path):
        if text.strip():
            yield f"line {line}", parse_json_line(text, path, line, hint=RANK_LLM_HINT)


def _flashrag(path: Path, data: Any) -> dict[str, list[tuple[str, float]]]:
    if not isinstance(data, dict):
        raise InputError(path, "expected a JSON object of query text → retrieved documents", hint=FLASHRAG_HINT)
    return {query: _ranking(path, f"query {query!r}", documents, "id", FLASHRAG_HINT)
            for query, documents in data.items()}


def _ranking(path: Path, where: str, items: Any, id_key: str, hint: str) -> list[tuple[str, float]]:
    if not isinstance(items, list):
        raise InputError(path, f"{where}: expected a list of documents", hint=hint)
    ranking: list[tuple[str, float]] = []
    seen: set[str] = set()
    for rank, item in enumerate(items, start=1):
        doc_id = item.get(id_key) if isinstance(item, dict) else None
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip():
            raise InputError(path, f"{where}, rank {rank}: no {id_key!r} (string or integer)", field=id_key, hint=hint)
        score = item.get("score", 0.0)
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise InputError(path, f"{where}, rank {rank}: score must be a number", field="score", hint=hint)
        if str(doc_id) in seen:
            raise InputError(path, f"{where}: document {str(doc_id)!r} is ranked twice", field=id_key,
                             hint="a ranking lists each document once")
        seen.add(str(doc_id))
        ranking.append((str(doc_id), float(score)))
    return ranking


@dataclass
class PrecomputedRun:
    """A run served as a first stage over an index's passage store (a ``SearchIndex``)."""

    run: FirstStageRun
    passages: PassageStore
    name: str = "run"
    unknown: dict[str, list[str]] = field(default_factory=dict)  # query key → ids not in the store
    _served: dict[str, list[tuple[Passage, float]]] = field(default_factory=dict)

    @classmethod
    def open(cls, index_dir: str | Path, run_path: str | Path) -> PrecomputedRun:
        """The run in ``run_path`` over the passages of the index folder ``index_dir``; refused when
        the run names no passage of the index (every question would be answered from nothing)."""
        served = cls(read_first_stage_run(run_path), open_passage_store(Path(index_dir)))
        served.check_overlap(Path(index_dir))
        return served

    def check_overlap(self, index_dir: Path) -> None:
        """Refuse a run none of whose documents the index holds: a run made over another corpus, or
        ids written in another form (``doc12`` against ``12``)."""
        named = {doc_id for ranking in self.run.rankings.values() for doc_id, _score in ranking}
        if named and not any(self.passages.has_id(doc_id) for doc_id in named):
            examples = ", ".join(repr(doc_id) for doc_id in sorted(named)[:SHOWN])
            examples += ", ..." if len(named) > SHOWN else ""
            raise WinnowError(f"{self.run.path}: none of the {len(named)} documents the run names ({examples}) "
                              f"is a passage of the index {index_dir}",
                              "give the index the run was made over, or a run of this index's passage ids "
                              "(`winnow eval` writes one as runs/retrieve.trec)")

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str | Query, k: int = 10) -> CandidateList:
        """The run's ranking for ``query`` (looked up by its id, or by its text for a FlashRAG cache),
        first ``k`` kept, ids the index lacks dropped (and counted)."""
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str | Query], k: int = 10) -> list[CandidateList]:
        if k < 1:
            raise WinnowError(f"k must be at least 1 (got {k})")
        results = []
        for query in queries:
            item = query if isinstance(query, Query) else Query(text=query)
            ranked = self._ranking(item)[:k]
            results.append(CandidateList(item, [Candidate(passage, [StageScore(self.name, score, rank)])
                                                for rank, (passage, score) in enumerate(ranked, start=1)]))
        return results

    def _ranking(self, query: Query) -> list[tuple[Passage, float]]:
        key = self._key(query)
        if key in self._served:
            return self._served[key]
        if key not in self.run.rankings:
            what = f"query id {key!r}" if self.run.keyed_by == "id" else f"query text {key!r}"
            raise WinnowError(f"{self.run.path}: the run has no ranking for {what}",
                              "give a run made for these queries (the query ids of --queries must be the run's)")
        kept, missing = [], []
        for doc_id, score in self.run.rankings[key]:
            passage = self.passages.get(doc_id)
            if passage is None:
                missing.append(doc_id)
            else:
                kept.append((passage, score))
        if missing:
            self.unknown[key] = missing
        self._served[key] = kept
        return kept

    def _key(self, query: Query) -> str:
        if self.run.keyed_by == "text":
            return query.text
        if not query.id:
            raise WinnowError(f"{self.run.path}: a precomputed run is looked up by query id, and the query "
                              f"{query.text[:60]!r} has none", "give queries with ids (a first stage that "
                                                               "rewrites the query, as RRR's, cannot use a run)")
        return query.id

    def summary(self) -> str:
        """One line on the documents the run names that the index does not hold ("" if none), with
        how many questions lost all of their list and how many the most a question lost."""
        count = sum(len(ids) for ids in self.unknown.values())
        if not count:
            return ""
        examples = [doc_id for ids in self.unknown.values() for doc_id in ids][:SHOWN]
        more = f", and {count - len(examples)} more" if count > len(examples) else ""
        emptied = [key for key in self.unknown if not self._served.get(key)]
        most = max(self.unknown, key=lambda key: len(self.unknown[key]))
        per_question = (f"; {len(emptied)} {'query was' if len(emptied) == 1 else 'queries were'} left with no "
                        "passage" if emptied else "")
        per_question += (f"; the most a query lost: {len(self.unknown[most])} of "
                         f"{len(self.run.rankings[most])} ({most!r})")
        return (f"{count} {'document' if count == 1 else 'documents'} of {self.run.path} "
                f"({', '.join(map(repr, examples))}{more}) in the rankings of {len(self.unknown)} "
                f"{'query' if len(self.unknown) == 1 else 'queries'} are not in the index: dropped from their "
                f"rankings{per_question}")
