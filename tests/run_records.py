"""Hand-made run records for the tests: an answers.jsonl line or a metrics.json with only the fields a
test cares about given, the rest filled with neutral values, read through the schema like a file."""

from __future__ import annotations

from typing import Any

from winnow.evaluation.schema import Metrics, QuestionRecord, RunInfo

STAGE = {"kind": "x", "ids": [], "answer_ranks": [], "passthrough": False, "seconds": 0.0, "usage": {}}
LINE = {"question": "q?", "golden_answers": ["a"], "answer": "a", "scores": {"em": 0.0, "f1": 0.0, "accuracy": 0.0},
        "first_stage": {"retriever": "bm25", "ids": [], "answer_ranks": []}, "stages": [],
        "final": {"ids": [], "answer_ranks": []}, "usage": {}, "method_seconds": 0.0, "seconds": 0.0}
RUN = {"method": "vanilla", "model": "m", "backend": "llama.cpp", "retriever": "bm25", "settings": {},
       "queries": "qa.jsonl", "seed": None, "limit": None, "label": "run"}
COST = {"llm_calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0, "llm_seconds": 0.0,
        "llm_calls_per_question": 0.0, "prompt_tokens_per_question": 0.0, "completion_tokens_per_question": 0.0,
        "seconds_per_question": 0.0, "method_seconds_per_question": 0.0, "total_seconds": 0.0}
METRICS = {"questions": {"selected": 0, "answered": 0, "remaining": 0, "regex_answers": 0},
           "answer": {"em": 0.0, "f1": 0.0, "accuracy": 0.0}, "rows": ["first_stage", "final"], "answer_recall": {},
           "list_length": {}, "first_stage_depth": 20}


def line(**fields: Any) -> QuestionRecord:
    """A question record: ``fields`` over neutral values (the parts and each stage filled in too)."""
    data = {**LINE, **fields}
    for part in ("scores", "first_stage", "final"):
        data[part] = {**LINE[part], **fields.get(part, {})}
    data["stages"] = [{**STAGE, **stage} for stage in data["stages"]]
    return QuestionRecord.from_data(data)


def run_info(**fields: Any) -> RunInfo:
    return RunInfo.from_data({**RUN, **fields})


def metrics(cost: dict[str, Any] | None = None, **run: Any) -> Metrics:
    """Metrics of a run whose ``run`` fields are ``run`` (label, method, …) and whose cost is ``cost``."""
    return Metrics.from_data({**METRICS, "run": {**RUN, **run}, "cost": {**COST, **(cost or {})}})
