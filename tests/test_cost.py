"""LLM cost per model and per agent role, and in USD from a price table (GAR-meets-RAG App. B)."""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import fields
from pathlib import Path

import pytest
from fast_model import suite_model
from small_corpus import PASSAGES

import winnow
from winnow.corpus import load_corpus
from winnow.errors import InputError
from winnow.evaluation.answering import ask_in_process
from winnow.evaluation.cost import SplitCost, UsageShare, UsdCost
from winnow.evaluation.prices import read_prices
from winnow.evaluation.report import write_report
from winnow.evaluation.runner import EvalRun
from winnow.index import build_index
from winnow.methods import METHODS, build_method
from winnow.models import resolve_model
from winnow.pipeline import Pipeline, RunSpec
from winnow.records import Usage

MODEL = suite_model()

PACKAGE = Path(winnow.__file__).parent
COUNTERS = [f.name for f in fields(Usage)]


# ---- the price table --------------------------------------------------------------------------

def test_a_price_table_in_toml_or_json_gives_usd_per_million_tokens(tmp_path):
    """App. B: "GPT-4: $0.03 per 1000 tokens of input and $0.06 per 1000 tokens of output" is 30 and 60
    USD per million; its "approximately 1000 tokens ... for input" per GPT-3.5 call at $0.0015 per
    1000 make Table A1's 320 calls cost 0.48 USD."""
    toml = tmp_path / "prices.toml"
    toml.write_text('[models."gpt-4"]\nprompt = 30.0\ncompletion = 60\n\n[models."gpt-3.5-turbo"]\n'
                    'prompt = 1.5\ncompletion = 2.0\n')
    table = read_prices(toml)
    assert table.price_of("gpt-3.5-turbo").usd(320 * 1000, 0) == pytest.approx(0.48)
    assert table.price_of("gpt-4").usd(1_000_000, 1_000_000) == pytest.approx(90.0)
    assert table.price_of("other") is None
    as_json = tmp_path / "prices.json"
    as_json.write_text(json.dumps({"models": {"gpt-4": {"prompt": 30, "completion": 60}}}))
    assert read_prices(as_json).models == {"gpt-4": table.models["gpt-4"]}


@pytest.mark.parametrize("text, line, field, words", [
    ('[models."gpt-4"]\nprompt = 30\ncompletion = -1\n', 3, "models.gpt-4.completion", "0 or more"),
    ('[models."gpt-4"]\nprompt = "cheap"\ncompletion = 1\n', 2, "models.gpt-4.prompt", "a number of USD"),
    ('[models."gpt-4"]\nprompt = 30\n', 1, "models.gpt-4.completion", "no completion price"),
    ('[models."gpt-4"]\nprompt = 30\ncompletion = 60\ncached = 1\n', 4, "models.gpt-4.cached", "unknown key"),
    ('currency = "EUR"\n[models."gpt-4"]\nprompt = 30\ncompletion = 60\n', 1, "currency", "unknown key"),
    ('[models."gpt-4"\nprompt = 30\n', 1, None, "not valid TOML"),
])
def test_a_bad_price_table_names_file_line_and_field(tmp_path, text, line, field, words):
    path = tmp_path / "prices.toml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_prices(path)
    assert (caught.value.path, caught.value.line, caught.value.field) == (str(path), line, field)
    assert words in str(caught.value)
    bad_json = tmp_path / "prices.json"
    bad_json.write_text('{"models": {"gpt-4": {"prompt": 30,\n "completion": true}}}')
    with pytest.raises(InputError) as caught:
        read_prices(bad_json)
    assert (caught.value.line, caught.value.field) == (2, "models.gpt-4.completion")


# ---- the split, on a real run -----------------------------------------------------------------

@pytest.mark.llm
def test_every_agent_role_is_named_for_the_stage_that_uses_it(llm, index):
    """A role missing from ``stage_roles`` would have its calls counted as the method's own model's."""
    for name, cls in METHODS.items():
        optional = {"second_pass_depth": 2} if "rerank2" in cls.roles else {}  # the second pass is off by default
        method = build_method(name, index=index, llm=llm, **optional)
        assert set(method.stage_roles.values()) == set(cls.roles), name


@pytest.fixture(scope="module")
def split_run(tmp_path_factory):
    """A real MAIN-RAG run of two questions whose judge (Agent-2) runs on a model of its own name
    (the SmolLM2 file by path: a second llama.cpp instance), with a price table pricing both."""
    folder = tmp_path_factory.mktemp("cost-run")
    source = folder / "corpus.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES))
    build_index(load_corpus(source).passages, folder / "idx", source=str(source), source_checksum="x", progress=False)
    questions = folder / "qa.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in [
        {"id": "q1", "question": "What is the capital of France?", "golden_answers": ["Paris"]},
        {"id": "q2", "question": "Who painted the Mona Lisa?", "golden_answers": ["Leonardo da Vinci"]}]))
    judge = resolve_model("smollm2-135m", progress=False).path
    prices = folder / "prices.toml"
    prices.write_text(f'[models."smollm2-135m"]\nprompt = 0.5\ncompletion = 1.5\n\n[models."{judge.stem}"]\n'
                      'prompt = 30\ncompletion = 60\n')
    spec = RunSpec.resolve(run={"method": "mainrag", "model": MODEL, "agents": {"judge": str(judge)}},
                           settings={"n": 2, "max_answer_tokens": 6, "max_document_answer_tokens": 6})
    run = EvalRun(spec, folder / "idx", questions, folder / "run", prices=read_prices(prices))
    pending = run.prepare()
    with Pipeline(spec, folder / "idx", threads=1, cache=folder / "calls.sqlite") as pipeline:
        run.check_models(pipeline)
        run.start_session(len(pending))
        ask_in_process(run, pipeline, pending, batch_size=2)
    metrics = run.finish()
    records = [json.loads(line) for line in (folder / "run" / "answers.jsonl").read_text().splitlines()]
    return folder, judge.stem, metrics, records


@pytest.mark.llm
def test_the_split_by_model_and_by_role_sums_to_the_total(split_run):
    _, judge, metrics, records = split_run
    for record in records:
        for counter in ("calls", "cache_hits", "prompt_tokens", "completion_tokens"):
            assert sum(share[counter] for share in record["usage_split"]) == record["usage"][counter]
        assert {(s["model"], s["role"]) for s in record["usage_split"]} == {
            ("smollm2-135m", "default"), (judge, "judge"), ("smollm2-135m", "final")}
        stages = {entry["stage"]: entry for entry in record["stages"]}
        judged = next(s for s in record["usage_split"] if s["role"] == "judge")
        assert judged["calls"] + judged["cache_hits"] == len(stages["retrieve"]["ids"])  # one judge call a document
    cost = metrics["cost"]
    for split in ("cost_by_model", "cost_by_role"):
        assert sum(c["llm_calls"] for c in metrics[split].values()) == cost["llm_calls"] > 0
        assert sum(c["prompt_tokens"] for c in metrics[split].values()) == cost["prompt_tokens"]
        assert sum(c["completion_tokens"] for c in metrics[split].values()) == cost["completion_tokens"]
    assert metrics["cost_by_model"][judge]["roles"] == ["judge"]
    assert metrics["cost_by_role"]["final"]["models"] == ["smollm2-135m"]


@pytest.mark.llm
def test_the_price_table_gives_the_expected_usd(split_run):
    folder, judge, metrics, records = split_run
    # Priced independently: each stage's own usage at the price of the model its role ran on.
    price = {"judge": (30.0, 60.0), "other": (0.5, 1.5)}
    expected = 0.0
    for record in records:
        for entry in record["stages"]:
            prompt, completion = price["judge" if entry["stage"] == "judge" else "other"]
            expected += (entry["usage"]["prompt_tokens"] * prompt + entry["usage"]["completion_tokens"] * completion) / 1e6
    usd = metrics["cost_usd"]
    assert usd["total"] == pytest.approx(expected) and usd["total"] > 0
    assert usd["per_question"] == pytest.approx(expected / 2) and usd["unpriced_models"] == []
    assert metrics["cost_by_model"][judge]["usd"] == pytest.approx(
        metrics["cost_by_model"][judge]["prompt_tokens"] * 30 / 1e6)
    # The report prices the same records, and names a model a table leaves out instead of a smaller sum.
    report = folder / "report.md"
    write_report([folder / "run"], report, prices=read_prices(folder / "prices.toml"))
    text = report.read_text()
    assert "Cost per model and role (GAR-meets-RAG App. B)" in text
    assert f"| **all models** |  |  |  |  | {expected / 2:,.6f} | {expected:,.4f} |" in text
    partial = folder / "partial.toml"
    partial.write_text('[models."smollm2-135m"]\nprompt = 0.5\ncompletion = 1.5\n')
    write_report([folder / "run"], report, prices=read_prices(partial))
    assert f"has no price for {judge}" in report.read_text() and "no price" in report.read_text()


# ---- the schema -------------------------------------------------------------------------------

@pytest.mark.llm
def test_the_cost_keys_written_and_read_are_the_typed_records(split_run):
    _, _, metrics, records = split_run
    assert set(records[0]["usage_split"][0]) == {"model", "role", *COUNTERS}
    assert UsageShare.from_dict(records[0]["usage_split"][0]).to_dict() == records[0]["usage_split"][0]
    for cost in [*metrics["cost_by_model"].values(), *metrics["cost_by_role"].values()]:
        assert set(cost) == {f.name for f in fields(SplitCost)}
    assert set(metrics["cost_usd"]) == {f.name for f in fields(UsdCost)}


def test_the_keys_eval_and_report_read_from_the_cost_records_are_their_fields():
    from winnow.commands.eval_tables import model_cost_table, usd_line
    from winnow.evaluation.report import model_cost_table as report_table

    table, line, report = (inspect.getsource(f) for f in (model_cost_table, usd_line, report_table))
    split = set(re.findall(r"""cost(?:\.get\(|\[)["']([a-z_]+)["']""", table))
    split |= set(re.findall(r"\bcost\.([a-z_]+)", report))
    usd = set(re.findall(r"""usd\[["']([a-z_]+)["']\]""", line)) | set(re.findall(r"\busd\.([a-z_]+)", report))
    assert {"llm_calls", "usd", "models", "cache_hits"} <= split and {"total", "unpriced_models"} <= usd
    assert split <= {f.name for f in fields(SplitCost)}
    assert usd <= {f.name for f in fields(UsdCost)}
