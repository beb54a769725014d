"""TREC relevance judgments (qrels) and run files, in and out.

* qrels: ``query-id iteration doc-id relevance`` per line (the iteration column, ``0`` or ``Q0``, is
  ignored), as ``trec_eval`` and ``ir-measures`` read them.
* runs: ``query-id Q0 doc-id rank score tag`` per line.

Both are whitespace-separated, so an id holding white space cannot be written: it is refused rather
than silently split into two columns. Readers are strict and name the file and line of any fault; a
query/document pair judged twice with different grades, or listed twice in one ranking, is an error,
because ``trec_eval`` would quietly keep one of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from ..atomic import write_lines
from ..corpus.lines import read_lines
from ..errors import InputError, WinnowError

Qrels = dict[str, dict[str, int]]  # query id -> document id -> relevance grade
Run = dict[str, list[tuple[str, float]]]  # query id -> (document id, score), best first

QRELS_HINT = "each line must be: query-id 0 doc-id relevance (whitespace-separated, integer relevance)"
RUN_HINT = "each line must be: query-id Q0 doc-id rank score tag (whitespace-separated)"


def read_qrels(path: str | Path) -> Qrels:
    """The judgments of the TREC qrels file ``path`` (``.gz`` is decompressed)."""
    path = Path(path).expanduser()
    _require_file(path, "qrels")
    return parse_qrels(read_lines(path), path)


def parse_qrels(lines: Iterable[tuple[int, str]], source: str | Path) -> Qrels:
    """Judgments from numbered lines; ``source`` names the file in error messages."""
    qrels: Qrels = {}
    for line, text in lines:
        if not (fields := _fields(text, 4, source, line, QRELS_HINT)):
            continue
        query_id, _iteration, doc_id, grade_text = fields
        try:
            grade = int(grade_text)
        except ValueError as error:
            raise InputError(source, f"relevance must be an integer, got {grade_text!r}", line=line,
                             field="relevance", hint=QRELS_HINT) from error
        if (earlier := add_judgment(qrels, query_id, doc_id, grade)) is not None:
            raise InputError(source, f"query {query_id!r}, document {doc_id!r} is judged twice, with "
                                     f"relevance {earlier} and {grade}", line=line, field="relevance",
                             hint="keep one judgment per pair")
    return qrels


def add_judgment(qrels: Qrels, query_id: str, doc_id: str, grade: int) -> int | None:
    """Record a judgment; if the pair was already judged with another grade, keep that one and return it
    (a repeat with the same grade is harmless)."""
    judged = qrels.setdefault(query_id, {})
    earlier = judged.setdefault(doc_id, grade)
    return earlier if earlier != grade else None


def _fields(text: str, count: int, source: str | Path, line: int, hint: str) -> list[str]:
    """The whitespace-separated fields of a line: none for a blank line, else exactly ``count``."""
    fields = text.split()
    if fields and len(fields) != count:
        raise InputError(source, f"expected {count} fields, got {len(fields)}", line=line, hint=hint)
    return fields


def write_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | Path) -> int:
    """Write ``qrels`` to ``path`` atomically as ``query-id 0 doc-id relevance``; return the line count."""
    def lines() -> Iterator[str]:
        for query_id, judged in qrels.items():
            _check_id(query_id, "query id", path)
            for doc_id, grade in judged.items():
                _check_id(doc_id, "document id", path)
                if isinstance(grade, bool) or not isinstance(grade, int):
                    raise WinnowError(f"{path}: relevance of query {query_id!r}, document {doc_id!r} must be "
                                      f"an integer, got {grade!r}")
                yield f"{query_id} 0 {doc_id} {grade}"

    return write_lines(path, lines())


def read_run(path: str | Path) -> Run:
    """The rankings of the TREC run file ``path``, each ordered by its rank column (best first).

    Several tags in one file are refused: that is several runs, and mixing them would score nonsense.
    """
    path = Path(path).expanduser()
    _require_file(path, "run")
    return parse_run(read_lines(path), path)


def parse_run(lines: Iterable[tuple[int, str]], source: str | Path) -> Run:
    """Rankings from numbered lines; ``source`` names the file in error messages."""
    ranked: dict[str, list[tuple[int, str, float]]] = {}
    seen: dict[tuple[str, str], int] = {}
    tag: tuple[str, int] | None = None
    for line, text in lines:
        if not (fields := _fields(text, 6, source, line, RUN_HINT)):
            continue
        query_id, _q0, doc_id, rank_text, score_text, line_tag = fields
        try:
            rank = int(rank_text)
        except ValueError as error:
            raise InputError(source, f"rank must be an integer, got {rank_text!r}", line=line, field="rank",
                             hint=RUN_HINT) from error
        try:
            score = float(score_text)
        except ValueError as error:
            raise InputError(source, f"score must be a number, got {score_text!r}", line=line, field="score",
                             hint=RUN_HINT) from error
        if not math.isfinite(score):
            raise InputError(source, f"score must be finite, got {score_text!r}", line=line, field="score",
                             hint=RUN_HINT)
        if tag is None:
            tag = (line_tag, line)
        elif line_tag != tag[0]:
            raise InputError(source, f"tag {line_tag!r} differs from {tag[0]!r} (line {tag[1]})", line=line,
                             field="tag", hint="one run per file: split it by tag")
        if (query_id, doc_id) in seen:
            raise InputError(source, f"document {doc_id!r} is ranked twice for query {query_id!r} (first at "
                                     f"line {seen[query_id, doc_id]})", line=line, field="doc-id",
                             hint="a ranking lists each document once")
        seen[query_id, doc_id] = line
        ranked.setdefault(query_id, []).append((rank, doc_id, score))
    # Sorted by the rank column (stable for equal ranks, so file order breaks ties).
    return {query_id: [(doc_id, score) for _rank, doc_id, score in sorted(rows, key=lambda row: row[0])]
            for query_id, rows in ranked.items()}


def scores_in_order(scores: Sequence[float] | None, length: int) -> list[float]:
    """The scores a TREC file carries for a ranking of ``length`` documents in its given order.

    ``scores`` themselves (a stage's or a retriever's, one per document) where they never rise, so a
    run read back (``--run``) gives what uses score values, such as ``--fusion-alpha``, the values
    retrieval gave; a tie is written as the next float below the score above it (one unit in the
    last place), since trec_eval would break it by document id rather than keep the given order.
    Where there are no scores, or they rise somewhere (an order that is not the scores', such as
    ``demote``'s), or one is not finite: ``length - rank + 1``, which keeps the order and nothing else.
    """
    if scores is None or len(scores) != length or not all(math.isfinite(s) for s in scores) or any(
            later > earlier for earlier, later in zip(scores, scores[1:], strict=False)):
        return [float(length - rank) for rank in range(length)]
    written: list[float] = []
    for score in map(float, scores):
        written.append(math.nextafter(written[-1], -math.inf) if written and score >= written[-1] else score)
    return written


def write_run(run: Mapping[str, Sequence[tuple[str, float]]], path: str | Path, *, tag: str = "winnow",
              scores_from_rank: bool = False) -> int:
    """Write ``run`` (query id → ``(doc id, score)`` pairs, best first) to ``path`` atomically.

    ``trec_eval`` and ``ir-measures`` order a ranking by *score*, not by the rank column, and break
    ties by document id. So a list whose scores do not strictly decrease would be scored in another
    order than the one given: that is refused unless ``scores_from_rank``, which writes
    ``score = length - rank + 1`` so the written order is the order scored.
    """
    check_tag(tag, path)
    checked: set[str] = set()  # document ids already checked: a corpus's ids recur over queries
    return write_lines(path, (line for query_id, ranking in run.items()
                              for line in ranking_lines(query_id, ranking, path, tag=tag,
                                                        scores_from_rank=scores_from_rank, checked=checked)))


def check_tag(tag: str, path: str | Path) -> None:
    """Refuse a run tag that cannot be one column of ``path``."""
    _check_id(tag, "tag", path)


def ranking_lines(query_id: str, ranking: Sequence[tuple[str, float]], path: str | Path, *, tag: str,
                  scores_from_rank: bool = False, checked: set[str] | None = None) -> list[str]:
    """One query's lines of the TREC run file ``path`` (see :func:`write_run`; ``tag`` already
    checked), or the error that names the query and rank at fault. ``checked`` holds document ids
    known to be writable, shared over the queries of one file."""
    _check_id(query_id, "query id", path)
    writable = set() if checked is None else checked
    listed: set[str] = set()
    for doc_id, _ in ranking:
        if doc_id in listed:
            raise WinnowError(f"{path}: query {query_id!r}: document {doc_id!r} is ranked twice",
                              "a ranking lists each document once")
        listed.add(doc_id)
        if doc_id not in writable:
            _check_id(doc_id, "document id", path)
            writable.add(doc_id)
    if scores_from_rank:  # length - rank + 1: finite and falling by construction
        length = len(ranking)
        return [f"{query_id} Q0 {doc_id} {rank} {float(length - rank + 1)!r} {tag}"
                for rank, (doc_id, _) in enumerate(ranking, start=1)]
    lines = []
    previous: float | None = None
    for rank, (doc_id, given) in enumerate(ranking, start=1):
        score = float(given)
        if not math.isfinite(score):
            raise WinnowError(f"{path}: query {query_id!r}, rank {rank}: score {score!r} is not finite")
        if previous is not None and score >= previous:
            raise WinnowError(f"{path}: query {query_id!r}, rank {rank}: score {score!r} does not fall "
                              f"below the score above it ({previous!r}), so trec_eval would reorder it",
                              "pass scores_from_rank=True to write scores that keep the given order")
        previous = score
        lines.append(f"{query_id} Q0 {doc_id} {rank} {score!r} {tag}")  # repr: the float reads back exactly
    return lines


def run_scores(run: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, dict[str, float]]:
    """Query id → document id → score: the shape ``ir-measures`` and ``pytrec_eval`` take."""
    return {query_id: {doc_id: float(score) for doc_id, score in ranking} for query_id, ranking in run.items()}


def _check_id(value: str, what: str, path: str | Path) -> None:
    # split() drops every white-space character str.isspace knows: one piece, the value itself.
    if not isinstance(value, str) or value.split() != [value]:
        raise WinnowError(f"{path}: {what} {value!r} cannot be written to a TREC file",
                          "ids must be non-empty and hold no white space")


def _require_file(path: Path, kind: str) -> None:
    if not path.is_file():
        raise InputError(path, "no such file", hint=f"give a TREC {kind} file")
