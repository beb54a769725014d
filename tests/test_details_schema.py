"""The trace's stage details are a schema: every key the web inspector and the reports read exists.

The inspector (service/static/app.js) and the reports (evaluation/record.py, evaluation/report.py)
read stage details by field name and find stages by kind. These tests read those files and fail
when a field or kind they use is missing from winnow/details.py, so a rename cannot pass unseen.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import winnow
from winnow.details import (
    DETAIL_RECORDS,
    DETAILS_BY_KIND,
    TRACE_SCHEMA,
    FilterDetails,
    JudgeDetails,
    RankingDetails,
    YesNoDetails,
)
from winnow.details import schema as details_schema
from winnow.records import StageTrace, Trace

PACKAGE = Path(winnow.__file__).parent
APP_JS = (PACKAGE / "service" / "static" / "app.js").read_text(encoding="utf-8")
ALL_FIELDS = {f.name for record in DETAIL_RECORDS for f in fields(record)}
JS_BUILTINS = {"length", "push", "map", "slice", "forEach", "find", "filter"}


def _details_keys_read_by_inspector() -> set[str]:
    keys = set(re.findall(r"\bdetails\.([a-z_]+)", APP_JS))
    # Inside the stage renderers `d` is a stage's details (`const d = stage.details || {}` and the
    # histogram's argument); elsewhere `d` may be other data, so only read from the renderers on.
    renderers = APP_JS[APP_JS.index("// ---- stage details"):]
    keys |= set(re.findall(r"\bd\.([a-z_]+)", renderers))
    return keys - JS_BUILTINS - {"py"}


def test_every_details_key_the_inspector_reads_is_in_the_schema():
    read = _details_keys_read_by_inspector()
    assert {"tau", "mean", "std", "scores", "ranked_ids", "dropped", "rounds", "grades", "windows", "answers",
            "answer", "fallback", "warning", "flagged", "demoted", "mode"} <= read  # the parse still finds them
    assert read - ALL_FIELDS == set()


def test_every_stage_kind_the_inspector_names_has_a_details_record():
    kinds = set(re.findall(r"\bs(?:tage)?\.kind === \"([a-z-]+)\"", APP_JS))
    assert {"noisy-document-judge", "adaptive-judge-bar", "yes-no-judgment", "sort", "graded", "listwise",
            "reader", "injection-guard"} <= kinds
    assert kinds - set(DETAILS_BY_KIND) == set()


def test_the_keys_reports_read_are_in_the_records_they_come_from():
    names = lambda record: {f.name for f in fields(record)}  # noqa: E731
    assert {"tau", "mean", "std", "kept", "dropped", "fallback"} <= names(FilterDetails)  # evaluation/report.py
    assert "ranked_ids" in names(RankingDetails)  # evaluation/record.py
    assert "scores" in names(JudgeDetails)  # evaluation/record.py, judge score plots
    # MAIN-RAG's ablations: the order the bar handed the survivors on in (copied into answers.jsonl as a
    # scalar detail), and the naïve variant's Yes/No per document (the inspector lists them).
    assert "order" in names(FilterDetails) and {"decisions", "kept", "dropped"} <= names(YesNoDetails)
    assert DETAILS_BY_KIND["yes-no-judgment"] is YesNoDetails
    report = (PACKAGE / "evaluation" / "report.py").read_text(encoding="utf-8")
    for key in re.findall(r'details(?:\.get\(|\[)"([a-z_]+)"', report):
        assert key in ALL_FIELDS, key


def test_traces_carry_the_schema_version_and_each_kind_its_record():
    trace = Trace([StageTrace("judge", "noisy-document-judge"), StageTrace("x", "unknown-kind")])
    data = trace.to_dict()
    assert data["schema"] == TRACE_SCHEMA == details_schema()["version"]
    assert set(data["stages"][0]["details"]) == {f.name for f in fields(JudgeDetails)}
    assert set(data["stages"][1]["details"]) == {"fitted", "warning"}


def test_trained_rerankers_keep_every_score_and_the_whole_order():
    """The cross-encoder and monoT5 stages (RankRAG Table 6, RRR Tables 1-3): the inspector reads a
    cut passage's score from ``scores``, Recall@k after reranking reads ``ranked_ids``."""
    from winnow.details import CrossEncoderDetails

    assert DETAILS_BY_KIND["cross-encoder"] is DETAILS_BY_KIND["monot5"] is CrossEncoderDetails
    assert {"model", "scores", "ranked_ids", "truncated"} <= {f.name for f in fields(CrossEncoderDetails)}
    assert 'stage.kind === "monot5"' in APP_JS and "(stage.details || {}).scores" in APP_JS
    evaluation = (PACKAGE / "evaluation" / "report.py").read_text(encoding="utf-8")
    assert '"cross-encoder", "monot5")' in evaluation  # a reranker that changed nothing is reported
