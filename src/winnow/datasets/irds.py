"""Queries and judgments from ``ir_datasets`` (MacAvaney et al. 2021), for users who are online.

``ir_datasets`` (the `data` extra) is imported only here, when asked for. It downloads data on first use
and caches it; a missing package or a failed download is a :class:`WinnowError` saying what to do.
Queries become :class:`QAItem` records; a query type with an ``answers`` field (such as
``dpr-w100/natural-questions/dev``) gives the gold answers.
"""

from __future__ import annotations

from typing import Any

from ..errors import WinnowError
from ..extras import import_extra
from .dataset import QA, RETRIEVAL, Dataset
from .qa import QAItem
from .trec import Qrels, add_judgment

PREFIX = "irds:"


def load_ir_dataset(dataset_id: str) -> Dataset:
    """The queries (and qrels, if any) of the ``ir_datasets`` dataset ``dataset_id``."""
    ir_datasets = import_extra("ir_datasets", "data", "an irds:<id> dataset",
                               alternative="use the data bundled in pyserini 0.21.0 (`winnow data list`)")
    try:
        dataset = ir_datasets.load(dataset_id)
    except KeyError as error:
        raise WinnowError(f"ir_datasets has no dataset {dataset_id!r}",
                          "see https://ir-datasets.com for the ids, e.g. beir/scifact/test") from error
    if not dataset.has_queries():
        raise WinnowError(f"ir_datasets {dataset_id!r} has no queries", "choose a split, e.g. beir/scifact/test")
    try:
        questions = [_question(query, dataset_id) for query in dataset.queries_iter()]
        qrels = _qrels(dataset) if dataset.has_qrels() else None
    except OSError as error:  # requests' connection errors are OSErrors too
        reason = str(error).split(" (Caused by")[0][:160]  # requests' messages run to several lines
        raise WinnowError(f"ir_datasets could not fetch {dataset_id!r}: {type(error).__name__}: {reason}",
                          "check the network connection (ir_datasets downloads on first use), or use the data "
                          "bundled in pyserini 0.21.0 (`winnow data list`)") from error
    return Dataset(dataset_id, QA if any(q.golden_answers for q in questions) else RETRIEVAL, questions, qrels,
                   f"ir_datasets {dataset_id}", "see https://ir-datasets.com for the dataset's terms")


def _question(query: Any, dataset_id: str) -> QAItem:
    text = getattr(query, "text", None)
    if not isinstance(text, str):
        text = query.default_text()  # queries with several fields (title, description, ...)
    answers = [answer for answer in getattr(query, "answers", ()) or () if isinstance(answer, str) and answer.strip()]
    return QAItem(str(query.query_id), text, answers, {"dataset": dataset_id})


def _qrels(dataset: Any) -> Qrels:
    qrels: Qrels = {}
    for judgment in dataset.qrels_iter():
        doc_id, grade = str(judgment.doc_id), int(judgment.relevance)
        if (earlier := add_judgment(qrels, str(judgment.query_id), doc_id, grade)) is not None:
            raise WinnowError(f"ir_datasets qrels judge query {judgment.query_id!r}, document {doc_id!r} twice, "
                              f"with relevance {earlier} and {grade}", "export and fix the qrels by hand")
    return qrels
