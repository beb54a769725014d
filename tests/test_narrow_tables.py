"""Every table Winnow prints stays whole at 80 columns: no line wider, no cell cut with "…"."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from winnow.cli import app
from winnow.commands.eval_tables import metrics_table, model_cost_table, stage_cost_table, sweep_table
from winnow.models import format_models_table, list_models
from winnow.records import Candidate, CandidateList, Passage, Query, StageScore, StageTrace, Usage
from winnow.report import passages_table, usage_table

WIDTH = 80


def rendered(table: Table, width: int = WIDTH) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.export_text().splitlines()


def assert_whole(lines: list[str], *texts: str) -> None:
    assert max(map(len, lines)) <= WIDTH, "\n".join(lines)
    assert not any("…" in line for line in lines), "\n".join(lines)
    for text in texts:  # short values are never folded
        assert any(text in line for line in lines), (text, "\n".join(lines))


def three_stage_list() -> CandidateList:
    stages = ("bm25", "relevance_filter", "listwise_rerank")
    text = "The Mona Lisa was painted by Leonardo da Vinci in Florence around 1503."
    candidates = [Candidate(Passage(f"doc-{i}", text, title=f"Mona Lisa {i}"),
                            [StageScore(stage, 12.3456 - i, i + 1) for stage in stages]) for i in range(3)]
    return CandidateList(Query("q1", "who painted the mona lisa"), candidates)


def test_the_passages_and_usage_tables_of_ask_and_rerank():
    assert_whole(rendered(passages_table(three_stage_list())), "Mona Lisa 0", "12.346")
    stages = [StageTrace(name, "retrieve" if name == "bm25" else "rerank",
                         usage=Usage(calls=120, cache_hits=30, prompt_tokens=123_456, completion_tokens=7_890,
                                     seconds=123.4), seconds=130.2)
              for name in ("bm25", "relevance_filter", "listwise_rerank")]
    assert_whole(rendered(usage_table(stages)), "listwise_rerank", "123456", "7890")


def test_the_tables_of_eval():
    metrics = {"run": {"label": "rrr qwen2.5-coder-1.5b k=5 n=20"}, "questions": {"answered": 1000},
               "answer": {"em": 0.4, "f1": 0.5, "accuracy": 0.6},
               "answer_recall": {row: {k: 0.5 for k in ("R@1", "R@5", "R@10", "R@20", "R@100")}
                                 for row in ("bm25", "relevance_filter", "listwise_rerank")},
               "list_length": {row: 20.0 for row in ("bm25", "relevance_filter", "listwise_rerank")},
               "rows": ["bm25", "relevance_filter", "listwise_rerank"],
               "qrels": {"rows": {row: {"nDCG@10": 0.5, "MRR@10": 0.4}
                                  for row in ("bm25", "relevance_filter", "listwise_rerank")}},
               "cost_usd": {"total": 1.0},
               "cost_by_model": {"qwen2.5-coder-1.5b": {"llm_calls": 123_456, "prompt_tokens": 98_765_432,
                                                        "completion_tokens": 1_234_567, "cache_hits": 12_345,
                                                        "usd": 12.3456}},
               "cost_by_role": {"judge": {"llm_calls": 123_456, "prompt_tokens": 98_765_432,
                                          "completion_tokens": 1_234_567, "cache_hits": 12_345, "usd": None}}}
    assert_whole(rendered(metrics_table(metrics)), "listwise_rerank", "50.0%", "0.500")
    assert_whole(rendered(model_cost_table(metrics)), "98,765,432", "12.3456", "no price")
    cost = {"llm_calls": 123.4, "prompt_tokens": 98_765.4, "completion_tokens": 1_234.5, "llm_seconds": 321.2,
            "retries": 1.0, "seconds": 400.5}
    assert_whole(rendered(stage_cost_table({"relevance_filter": cost, "listwise_rerank": cost}, 1000)),
                 "relevance_filter", "98,765,400", "400,500.0")
    efficiency = {"retrieval_seconds": 0.012, "reranking_seconds": 12.34, "generation_seconds": 1.23,
                  "overhead_ratio": 9.87}
    summary = {"setting": "n", "method": "rankrag", "model": "qwen2.5-coder-1.5b",
               "rows": [{"value": n, "questions": 1000, "em": 0.4, "f1": 0.5, "accuracy": 0.6, "llm_calls": 12_345,
                         "cache_hits": 678, "efficiency": efficiency} for n in (10, 20, 100)]}
    assert_whole(rendered(sweep_table(summary)), "12345", "13023", "9.87x", "12.34")


def test_winnow_models_table():
    assert_whole(rendered(format_models_table(list_models(), wide=False)), "smollm2-135m", "qwen2.5-coder-1.5b",
                 "not installed" if not all(s.installed for s in list_models()) else "smollm2-135m")


# `winnow data list` too (checked by hand: it reads all 38 datasets from the Pyserini jar, ~6 s, too slow here).
@pytest.mark.parametrize("command", [["methods"], ["models"], ["cache", "info"]])
def test_table_commands_at_80_columns(command, tmp_path):
    result = CliRunner().invoke(app, command, env={"COLUMNS": str(WIDTH), "WINNOW_CACHE_DIR": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert_whole(result.output.splitlines())
