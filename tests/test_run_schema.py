"""What a run writes is a schema: every field the readers use exists, and every file reads back whole.

``answers.jsonl`` lines and ``metrics.json`` are typed records (winnow/evaluation/schema.py), read
by the report, resuming, the metrics, the sweep summary and the progress bar through attributes.
These tests read those modules and fail when a field they use is missing from the records; they
round-trip files made by real runs (tests/run_files: a MAIN-RAG line and a RankRAG metrics.json
with qrels from today's Winnow, and a line and metrics.json from the first ``winnow eval``,
commit ad15b27, before half the fields existed), byte for byte; and they check that a damaged,
unknown or newer file is refused naming the file, line and field. The web inspector reads traces,
not run files (its fields are tests/test_details_schema.py's).
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
from run_records import line, run_info
from test_evaluation import bench, eval_args, winnow  # noqa: F401  (bench is a fixture)

from winnow.commands.evaluate import RunProgress
from winnow.errors import InputError
from winnow.evaluation import cost, efficiency, metrics, report, runner, sweep
from winnow.evaluation.metrics import compute_metrics
from winnow.evaluation.runfolder import RunFolder
from winnow.evaluation.schema import (
    ANSWERS_SCHEMA,
    METRICS_SCHEMA,
    USAGE_KEYS,
    CostSummary,
    Efficiency,
    Metrics,
    QuestionRecord,
    StageEntry,
    UncachedCost,
)

FILES = Path(__file__).parent / "run_files"

# The names each reader gives the records, so that `record.scores.accuracy` can be followed field by field.
ROOTS: dict[str, dict[str, type]] = {
    "report": {"metrics": Metrics, "m": Metrics, "c": CostSummary, "eff": Efficiency, "full": UncachedCost,
               "record": QuestionRecord, "entry": StageEntry, "judge": StageEntry, "bar": StageEntry},
    "metrics": {"r": QuestionRecord, "record": QuestionRecord, "entry": StageEntry},
    "efficiency": {"record": QuestionRecord, "entry": StageEntry},
    "cost": {"record": QuestionRecord},
    "runner": {"record": QuestionRecord, "r": QuestionRecord, "metrics": Metrics},
    "sweep": {"metrics": Metrics},
    "RunProgress": {"record": QuestionRecord, "r": QuestionRecord},
}
SOURCES = {"report": report, "metrics": metrics, "efficiency": efficiency, "cost": cost, "runner": runner,
           "sweep": sweep, "RunProgress": RunProgress}


def _unwrap(hint: typing.Any) -> typing.Any:
    """``X | None`` as ``X``; anything else as it is."""
    options = [a for a in typing.get_args(hint) if a is not type(None)]
    return options[0] if typing.get_origin(hint) in (typing.Union, __import__("types").UnionType) and \
        len(options) == 1 else hint


def _missing(root: type, chain: list[str]) -> str | None:
    """The first name of ``chain`` that ``root``'s record lacks, followed field by field (None: all there)."""
    record = root
    for name in chain:
        names = {f.name for f in fields(record)}
        if name in names:
            hint = _unwrap(typing.get_type_hints(record)[name])
            if not (isinstance(hint, type) and is_dataclass(hint)):
                return None  # a dict, a list or a number: the chain goes on into data, not fields
            record = hint
        elif hasattr(record, name):
            return None  # a method or property of the record
        else:
            return name
    return None


def _chain(node: ast.AST) -> list[str]:
    """``record.scores.accuracy`` as ["record", "scores", "accuracy"] ([] unless it starts at a name)."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return [node.id, *reversed(names)] if isinstance(node, ast.Name) else []


def reads() -> dict[str, set[str]]:
    """Every `root.field.field` chain the readers' code uses (not their docstrings), by reader."""
    found: dict[str, set[str]] = {}
    for reader, roots in ROOTS.items():
        tree = ast.parse(textwrap.dedent(inspect.getsource(SOURCES[reader])))
        found[reader] = set()
        for node in ast.walk(tree):
            chain = _chain(node) if isinstance(node, ast.Attribute) else []
            # A record is a name (`record.scores`) or a run's metrics (`run.metrics.cost`).
            start = 0 if chain and chain[0] in roots else chain.index("metrics") if "metrics" in chain[1:] else -1
            if start >= 0 and len(chain) > start + 1:
                found[reader].add(".".join(chain[start:]))
    return found


def test_every_field_the_readers_use_is_in_the_records():
    found = reads()
    # The parse itself still finds what it must (a rename of the readers' variables would empty it).
    assert {"metrics.cost", "metrics.run.label", "metrics.qrels.rows", "record.stages", "judge.judge_scores",
            "bar.ids", "c.cache_hits", "eff.overhead_ratio", "full.llm_seconds_per_question"} <= found["report"]
    assert {"record.scores.accuracy", "record.usage.prompt_tokens"} <= found["RunProgress"]
    assert {"r.first_stage.seconds", "entry.usage.retries", "r.counts_cache_cost"} <= found["metrics"]
    assert {"metrics.questions.failed_this_session", "metrics.efficiency.to_json"} <= found["sweep"]
    missing = [f"{reader}: {chain}" for reader, chains in found.items() for chain in sorted(chains)
               if _missing(ROOTS[reader][chain.split(".")[0]], chain.split(".")[1:])]
    assert missing == []


def test_the_walk_finds_a_field_that_is_not_there():
    assert _missing(Metrics, ["cost", "without_cach"]) == "without_cach"
    assert _missing(QuestionRecord, ["scores", "accuracy"]) is None


# --- files made by real runs ------------------------------------------------------------------------

def test_a_real_line_and_metrics_file_of_today_round_trip_byte_for_byte():
    text = (FILES / "answers.jsonl").read_text(encoding="utf-8").rstrip("\n")
    record = QuestionRecord.from_json(json.loads(text))
    assert json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":")) == text
    assert record.regex and record.usage_split and record.counts_cache_cost and record.usage_keys == USAGE_KEYS
    judge = record.stage("judge")
    assert judge is not None and judge.judge_scores and record.stage("adaptive_bar").detail("tau") is not None
    written = (FILES / "metrics.json").read_text(encoding="utf-8")
    parsed = Metrics.from_json(json.loads(written))
    assert json.dumps(parsed.to_json(), indent=2, ensure_ascii=False) + "\n" == written
    assert parsed.qrels is not None and parsed.qrels.index_coverage and parsed.cost_by_model and parsed.efficiency


def test_a_line_and_metrics_of_the_first_layout_read_and_the_line_writes_back_unchanged(tmp_path):
    text = (FILES / "answers-v0.jsonl").read_text(encoding="utf-8").rstrip("\n")
    record = QuestionRecord.from_json(json.loads(text))
    assert json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":")) == text
    # Fields added later read as "not recorded", not as zero cost.
    assert record.first_stage.seconds is None and record.usage_split is None and not record.counts_cache_cost
    assert record.usage_keys == ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "seconds")
    old = Metrics.from_json(json.loads((FILES / "metrics-v0.json").read_text(encoding="utf-8")))
    assert old.efficiency is None and old.cost_by_model is None and old.run.deviations is None
    assert old.cost.without_cache is None and old.stage_cost["judge"].llm_seconds == 0.0 and old.question_ids == []
    # Resuming such a run recomputes its metrics from the old lines (with a line of today beside them).
    today = QuestionRecord.from_json(json.loads((FILES / "answers.jsonl").read_text(encoding="utf-8")))
    folder = RunFolder(tmp_path)
    folder.answers_path.write_text(text + "\n" + json.dumps(today.to_json()) + "\n", encoding="utf-8")
    records = list(folder.read_answers().values())
    assert records == [record, today]
    recomputed = compute_metrics(records, selected=2, run=run_info(), depth=20)
    assert recomputed.cost_by_model is None  # one line predates the split: no split rather than half of one
    assert recomputed.cost.first_stage_seconds_per_question == pytest.approx((today.first_stage.seconds or 0) / 2)


# --- refusals -------------------------------------------------------------------------------------------

def refused(tmp_path: Path, second_line: str) -> InputError:
    folder = RunFolder(tmp_path)
    good = json.dumps(line(id="q1").to_json())
    folder.answers_path.write_text(good + "\n" + second_line + "\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        folder.read_answers()
    assert caught.value.path == str(folder.answers_path) and caught.value.line == 2
    return caught.value


@pytest.mark.parametrize("change, field, words", [
    ({"schema": ANSWERS_SCHEMA + 1}, "schema", f"schema version {ANSWERS_SCHEMA + 1}"),
    ({"scores": {"em": 1, "f1": "high", "accuracy": 1}}, "scores.f1", "expected a number, got str 'high'"),
    ({"stages": [{"stage": "x", "kind": "bm25", "ids": ["a", 3], "answer_ranks": [], "passthrough": False}]},
     "stages[0].ids[1]", "expected str"),
    ({"usage": {"calls": 1, "dollars": 2}}, "usage.dollars", "not a usage counter"),
    ({"answer_v2": "x"}, "answer_v2", "unknown field"),
    ({"history": [{"role": "robot", "text": "hi"}]}, "history[0]", "'user' or 'assistant'"),
])
def test_a_line_of_another_version_or_with_a_bad_field_is_refused_naming_file_line_and_field(
        tmp_path, change, field, words):
    error = refused(tmp_path, json.dumps({**line(id="q2").to_json(), **change}))
    assert error.field == field and words in str(error)


def test_a_line_missing_a_field_names_it(tmp_path):
    data = line(id="q2").to_json()
    del data["first_stage"]["retriever"]
    assert refused(tmp_path, json.dumps(data)).field == "first_stage.retriever"
    assert refused(tmp_path, "[1, 2]").field == "(line)"


def test_metrics_of_another_version_are_refused_naming_the_file(tmp_path):
    data = json.loads((FILES / "metrics.json").read_text(encoding="utf-8"))
    folder = RunFolder(tmp_path)
    folder.metrics_path.write_text(json.dumps({**data, "schema": METRICS_SCHEMA + 1}), encoding="utf-8")
    with pytest.raises(InputError, match="schema version 2") as caught:
        folder.read_metrics()
    assert caught.value.path == str(folder.metrics_path)
    data["cost"]["llm_calls"] = "many"
    folder.metrics_path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        folder.read_metrics()
    assert caught.value.field == "cost.llm_calls"


# --- a real run -------------------------------------------------------------------------------------------

@pytest.mark.llm
def test_a_real_run_writes_what_the_records_read_and_resuming_recomputes_the_same_metrics(bench, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    args = eval_args(bench, out, "--method", "rankrag", "--n", "3", "--k", "1", "--limit", "2",
                     "--set", "max_answer_tokens=4")
    winnow(*args)
    lines = (out / "answers.jsonl").read_text(encoding="utf-8").splitlines()
    for text in lines:
        record = QuestionRecord.from_json(json.loads(text))
        assert json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":")) == text
    first = (out / "metrics.json").read_text(encoding="utf-8")
    assert json.dumps(Metrics.from_json(json.loads(first)).to_json(), indent=2, ensure_ascii=False) + "\n" == first
    # The second session reads the records back from the file; the first scored the ones it kept in
    # memory. Both give the same metrics (only the time written differs).
    assert "0 to ask" in winnow(*args).stderr
    again = (out / "metrics.json").read_text(encoding="utf-8")
    assert {**json.loads(again), "written": ""} == {**json.loads(first), "written": ""}
