"""``winnow eval --sweep``: one run folder per value, the calls the values share made once.

Real runs (SmolLM2-135M, the tiny BM25 bench of test_evaluation) of the two sweeps the papers
report: MAIN-RAG's n of the adaptive judge bar (its judge calls do not depend on n) and RankRAG's
N (§5.5, Fig. 5: the reranking time overhead N·t2 / (t1 + t3) of §4.3 beside exact match).
"""

from __future__ import annotations

import json

import pytest
from fast_model import suite_model
from run_records import line
from test_evaluation import bench, read_lines, winnow  # noqa: F401  (bench is a fixture)

from winnow.errors import WinnowError
from winnow.evaluation.efficiency import question_times, reranking_overhead
from winnow.evaluation.report import load_run, overhead_table
from winnow.evaluation.sweep import parse_sweep, sweep_specs
from winnow.pipeline import RunSpec
from winnow.settings import SettingError

MODEL = suite_model()

FAST = ("--model", MODEL, "--limit", "2", "--set", "max_answer_tokens=4")


def sweep_args(bench, out, *extra):  # noqa: F811
    return ("eval", "--index", bench / "idx", "--queries", bench / "qa.jsonl", *FAST, "--out", out, *extra)


def stage(record, name):
    return next(entry for entry in record["stages"] if entry["stage"] == name)


# --- the reranking overhead (RankRAG §4.3) on hand-made records ----------------------------------------

def record(retrieve_s, rerank_paid, rerank_cached, generate_s):
    return line(id="q", stages=[
        {"stage": "retrieve", "kind": "bm25", "seconds": retrieve_s, "usage": {}},
        {"stage": "rerank", "kind": "pointwise-true", "seconds": 9.9,
         "usage": {"seconds": rerank_paid, "cached_seconds": rerank_cached}},
        {"stage": "generate", "kind": "reader", "seconds": 9.9, "usage": {"seconds": generate_s, "cached_seconds": 0.0}},
    ])


def test_overhead_is_reranking_over_retrieval_plus_generation_with_cache_hits_at_their_first_seconds():
    # Question 1: t1 = 0.5, N·t2 = 3 paid + 1 cached = 4, t3 = 1.5; question 2: 0.5, 2, 1.5.
    records = [record(0.5, 3.0, 1.0, 1.5), record(0.5, 0.0, 2.0, 1.5)]
    assert question_times(records[0]) == (0.5, 4.0, 1.5)
    eff = reranking_overhead(records)
    assert eff is not None
    assert (eff.retrieval_seconds, eff.reranking_seconds, eff.generation_seconds) == (0.5, 3.0, 1.5)
    assert eff.overhead_ratio == pytest.approx(6.0 / 4.0)  # Σ N·t2 / Σ (t1 + t3)
    assert reranking_overhead([]) is None


# --- refusals, before any model loads ----------------------------------------------------------------

def test_sweep_values_are_read_like_set_values_and_coerced_by_the_methods_settings():
    assert parse_sweep("judge_n=-0.5,0,0.5,1") == ("judge_n", [-0.5, 0, 0.5, 1])
    spec = RunSpec(method="mainrag", settings={"n": 3})
    points = sweep_specs(spec, "judge_n", [-0.5, 0, 0.5, 1])
    assert [label for label, _, _ in points] == ["judge_n=-0.5", "judge_n=0", "judge_n=0.5", "judge_n=1"]
    assert [s.settings for _, _, s in points][1] == {"n": 3, "judge_n": 0.0}
    assert [label for label, _, _ in sweep_specs(spec, "order", ["descending", "random"])] == [
        "order=descending", "order=random"]


@pytest.mark.parametrize("setting, values, message", [
    ("judge_nn", [0, 1], "method 'mainrag' has no setting 'judge_nn'"),
    ("judge_n", [0, "x"], "setting 'judge_n' must be a number"),
    ("order", ["descending", "sideways"], "setting 'order' must be one of"),
    ("judge_n", [0, 0.0], "the value 0 is given twice"),
])
def test_a_sweep_over_an_unknown_setting_or_a_bad_value_is_refused_naming_the_setting(setting, values, message):
    with pytest.raises(SettingError, match=message) as caught:
        sweep_specs(RunSpec(method="mainrag"), setting, values)
    assert caught.value.setting == setting


def test_a_sweep_over_a_setting_the_method_does_not_read_is_refused():
    """Vanilla retrieves k and reads no N; MAIN-RAG's k is a cap on its survivors, so it may be swept."""
    with pytest.raises(SettingError, match="method 'vanilla' does not use setting 'n'"):
        sweep_specs(RunSpec(method="vanilla"), "n", [1, 2])
    assert [label for label, _, _ in sweep_specs(RunSpec(method="mainrag"), "k", [1, 2])] == ["k=1", "k=2"]


def test_a_malformed_sweep_is_refused():
    for text in ("judge_n", "=1,2", "judge_n=1,,2"):
        with pytest.raises(WinnowError, match="is not SETTING=V1,V2"):
            parse_sweep(text)


def test_the_command_refuses_a_bad_sweep_or_a_setting_given_twice(bench, tmp_path):  # noqa: F811
    bad = winnow(*sweep_args(bench, tmp_path / "a", "--method", "rankrag", "--k", "1", "--sweep", "n=2,four"), check=False)
    assert bad.returncode == 2 and "setting 'n' must be an integer (got 'four')" in bad.stderr
    twice = winnow(*sweep_args(bench, tmp_path / "b", "--method", "rankrag", "--k", "1", "--n", "2", "--sweep", "n=2,4"),
                   check=False)
    assert twice.returncode == 2 and "setting 'n' is given both by --sweep and" in twice.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# --- real sweeps -------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def own_call_cache(tmp_path, monkeypatch):
    """A call cache of each test's own: other tests of the session ask the same bench, and the call
    counts below must not depend on which ran first."""
    monkeypatch.setenv("WINNOW_CACHE_DIR", str(tmp_path / "winnow-cache"))


@pytest.mark.llm
def test_a_sweep_over_judge_n_makes_the_judge_calls_once(bench, tmp_path):  # noqa: F811
    out = tmp_path / "mainrag-n"
    args = sweep_args(bench, out, "--method", "mainrag", "--n", "2", "--set", "max_document_answer_tokens=4",
                      "--sweep", "judge_n=-0.5,0,1")
    result = winnow(*args)
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["setting"] == "judge_n" and [row["folder"] for row in summary["rows"]] == [
        "judge_n=-0.5", "judge_n=0", "judge_n=1"]
    runs = {row["folder"]: read_lines(out / row["folder"] / "answers.jsonl") for row in summary["rows"]}
    first, *others = runs.values()
    documents = sum(len(stage(r, "retrieve")["ids"]) for r in first)
    # The first value pays Agent-1's and the judge's calls, one per document; the others get them from the cache.
    for name in ("predict", "judge"):
        assert sum(stage(r, name)["usage"]["calls"] for r in first) == documents
        for records in others:
            assert sum(stage(r, name)["usage"]["calls"] for r in records) == 0
            assert sum(stage(r, name)["usage"]["cache_hits"] for r in records) == documents
    # One set of judgments, one bar and one answer set per n.
    for records in others:
        assert [stage(r, "judge")["judge_scores"] for r in records] == [stage(r, "judge")["judge_scores"] for r in first]
    for folder, records in runs.items():
        n = float(folder.split("=")[1])
        assert json.loads((out / folder / "config.json").read_text())["identity"]["settings"]["judge_n"] == n
        for r in records:
            scores = list(stage(r, "judge")["judge_scores"].values())
            mean = sum(scores) / len(scores)
            std = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5
            assert stage(r, "adaptive_bar")["details"]["tau"] == pytest.approx(mean - n * std, abs=1e-5)
            assert stage(r, "adaptive_bar")["details"]["order"] == "descending"
    made = summary["calls"]["made"]
    assert made == sum(row["llm_calls"] for row in summary["rows"]) < summary["calls"]["asked"]
    assert "judge_n" in result.stdout and "EM" in result.stdout
    # Resumable: the same command asks nothing and loads no model.
    again = winnow(*args)
    assert "0 to ask in all" in again.stderr and json.loads((out / "sweep.json").read_text())["rows"] == summary["rows"]


@pytest.mark.llm
def test_a_sweep_over_n_reports_the_overhead_ratio_and_em_per_n_sharing_the_reranking_calls(bench, tmp_path):  # noqa: F811
    out = tmp_path / "rankrag-N"
    # --no-cache: the values still share their calls, through the sweep's own cache file.
    result = winnow(*sweep_args(bench, out, "--method", "rankrag", "--k", "1", "--sweep", "n=1,2", "--no-cache"))
    assert (out / "calls.sqlite").is_file() and not (tmp_path / "winnow-cache" / "llm-calls.sqlite").exists()
    summary = json.loads((out / "sweep.json").read_text())
    small, large = (read_lines(out / folder / "answers.jsonl") for folder in ("n=1", "n=2"))
    for short, full in zip(small, large, strict=True):
        one, two = stage(short, "rerank"), stage(full, "rerank")
        assert stage(full, "retrieve")["ids"][:1] == stage(short, "retrieve")["ids"]
        # N = 1 paid its P("True") call; N = 2 got that passage's from the cache and paid only for the new one.
        assert (one["usage"]["calls"], one["usage"]["cache_hits"]) == (1, 0)
        new = len(stage(full, "retrieve")["ids"]) - 1
        assert (two["usage"]["calls"], two["usage"]["cache_hits"]) == (new, 1)
        # The cached call counts at the seconds it took when N = 1 made it.
        assert two["usage"]["cached_seconds"] == pytest.approx(one["usage"]["seconds"], abs=1e-3)
    for row, records in zip(summary["rows"], (small, large), strict=True):
        eff = row["efficiency"]
        t1 = sum(stage(r, "retrieve")["seconds"] for r in records) / len(records)
        t2 = sum(stage(r, "rerank")["usage"]["seconds"] + stage(r, "rerank")["usage"]["cached_seconds"]
                 for r in records) / len(records)
        t3 = sum(stage(r, "generate")["usage"]["seconds"] + stage(r, "generate")["usage"]["cached_seconds"]
                 for r in records) / len(records)
        assert eff["reranking_seconds"] == pytest.approx(t2, abs=1e-4) and t2 > 0
        assert eff["overhead_ratio"] == pytest.approx(t2 / (t1 + t3), rel=1e-3)
        assert row["em"] == sum(r["scores"]["em"] for r in records) / len(records)
        assert f"{eff['overhead_ratio']:.2f}x" in result.stdout
    assert "RankRAG §5.5" in result.stdout and "overhead" in result.stdout
    metrics = json.loads((out / "n=2" / "metrics.json").read_text())
    assert metrics["efficiency"] == summary["rows"][1]["efficiency"]
    # `winnow report` over the sweep's folders shows the same figures, N by N.
    table = overhead_table([load_run(out / "n=2"), load_run(out / "n=1")]).splitlines()
    assert table[0] == "| runs | N | EM | Acc. | t1 s/q | N·t2 s/q | t3 s/q | overhead |"
    assert [line.split(" | ")[1] for line in table[2:]] == ["1", "2"]
    for line, row in zip(table[2:], summary["rows"], strict=True):
        assert line.endswith(f"| {row['efficiency']['overhead_ratio']:.2f}x |")
