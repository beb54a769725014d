"""``--profile paper``: each method's settings set to its paper's values, overridable, and shown."""

from __future__ import annotations

import re
import sys

import pytest
from typer.testing import CliRunner

from winnow.cli import app, run
from winnow.evaluation.labels import run_label
from winnow.methods import METHODS, PROFILES, method_settings
from winnow.pipeline import RunSpec
from winnow.service.limits import ApiError, Limits, check_settings
from winnow.settings import SettingError


def test_the_paper_profile_sets_the_papers_values():
    """RankRAG §5.1: "retrieve top-N (100 for 8B and 30 for 70B) documents for ranking" and "set the
    maximum number of generated token to be 32 for OpenQA, 128 for ConvQA and 8 for others"; §1:
    "generates answer based on the refined top-k (e.g., 5)".
    GAR-meets-RAG §4(D): "The best values for these parameters are N_rw = 5, τ = 1 (i.e., prune the
    least scoring ones), w = 10 and s = 5"; App. B: "N_rw*N = 500 calls" (N = 100); Table 4:
    "Rewriter g · GPT-4 · token limit 20".
    RankGPT: GAR-meets-RAG §4(B), "we quote results from Thakur et al. (2021) and Sun et al. (2023)
    computed in identical setting", i.e. RankGPT's own: top 100, window 20, step 10.
    MAIN-RAG (the design brief): "Retriever returns N documents (paper: Contriever-MS MARCO, N=20)",
    "τ_q = mean(s) − n·std(s) per query (n is the only hyper-parameter, default 0".
    """
    paper = {name: method_settings(name, profile="paper").to_dict() for name in METHODS}
    assert (paper["rankrag"]["n"], paper["rankrag"]["k"], paper["rankrag"]["max_answer_tokens"]) == (100, 5, 32)
    rrr = paper["rrr"]
    assert (rrr["n"], rrr["rewrites"], rrr["tau"], rrr["window"], rrr["step"], rrr["max_rewrite_tokens"]) == \
        (100, 5, 1.0, 10, 5, 20)
    # §4(C): "then, further re-rank the top 30 documents using GPT-4" (the rerank2 role).
    assert (rrr["second_pass_depth"], rrr["rerank"]) == (30, "listwise")
    assert (paper["mainrag"]["n"], paper["mainrag"]["judge_n"]) == (20, 0.0)
    # RankGPT, the baseline GAR-meets-RAG quotes from Sun et al. (§4(B)): BM25 top 100, window 20, step 10.
    assert (paper["rankgpt"]["n"], paper["rankgpt"]["window"], paper["rankgpt"]["step"]) == (100, 20, 10)
    assert (paper["vanilla"]["k"], paper["vanilla"]["max_answer_tokens"]) == (5, 32)
    # The variants change only what §5.1 says they do.
    assert method_settings("rankrag", profile="paper-70b").n == 30
    assert method_settings("rrr", profile="paper-70b").n == 100
    assert method_settings("rankrag", profile="paper-fever").max_answer_tokens == 8
    assert method_settings("rankrag", profile="paper-70b-convqa").to_dict() == {
        **paper["rankrag"], "n": 30, "max_answer_tokens": 128, "task": "conversational"}
    # App. D prints its prompts as plain text; the task variants are its FEVER and ConvQA prompts.
    assert (paper["rankrag"]["framing"], paper["rankrag"]["task"]) == ("plain", "qa")
    assert method_settings("vanilla", profile="paper-fever").task == "fever"
    # An explicit task picks §5.1's answer limit for it; an explicit limit still wins.
    assert method_settings("rankrag", profile="paper", task="fever").max_answer_tokens == 8
    assert method_settings("rankrag", profile="paper", task="fever", max_answer_tokens=12).max_answer_tokens == 12
    assert method_settings("mainrag", profile="paper-fever") == method_settings("mainrag", profile="paper")


def test_every_profile_is_valid_for_every_method_it_names():
    for profile in PROFILES.values():
        assert set(profile.settings) <= set(METHODS)
        for method in METHODS:
            if profile.only_named and method not in profile.settings:
                continue  # refused: test_the_quoted_rankgpt_profile_is_rankgpts_alone
            method_settings(method, profile=profile.name)  # coerced and checked: raises if a value is out of range


def test_the_quoted_rankgpt_profile_is_two_listwise_passes_with_rank_gpt_py_prompt():
    """RRR Tables 1 and 3 quote RankGPT from Sun et al.; §4(C): "The re-ranker h follows the two-step
    process described in the RankGPT paper: first, re-rank N documents … using GPT-3.5-Turbo; then,
    further re-rank the top 30 documents using GPT-4". RankGPT's released sliding_windows: window 20,
    step 10, top 100, passages cut to 300 words, its own prompt."""
    quoted = method_settings("rankgpt", profile="rankgpt-quoted")
    assert (quoted.n, quoted.window, quoted.step, quoted.max_passage_words) == (100, 20, 10, 300)
    assert (quoted.listwise_prompt, quoted.second_pass_depth, quoted.rerank) == ("rankgpt", 30, "listwise")
    assert quoted.deviations() == {}
    # --profile paper stays RankGPT as RRR's h runs it: A.3's prompt, one pass.
    paper = method_settings("rankgpt", profile="paper")
    assert (paper.listwise_prompt, paper.second_pass_depth) == ("rrr", 0)
    assert run_label(RunSpec.resolve(run={"method": "rankgpt", "model": "m", "profile": "rankgpt-quoted"})) == \
        "rankgpt m profile=rankgpt-quoted N=100 k=5"


def test_the_quoted_rankgpt_profile_is_rankgpts_alone():
    with pytest.raises(SettingError) as caught:
        RunSpec.resolve(run={"method": "rrr", "profile": "rankgpt-quoted"})
    assert caught.value.setting == "profile"
    assert str(caught.value) == ("profile 'rankgpt-quoted' has settings for method rankgpt only, not 'rrr' "
                                 "(use --method rankgpt, or --profile paper for rrr)")
    with pytest.raises(ApiError) as refused:
        check_settings("mainrag", {}, {}, Limits(), profile="rankgpt-quoted")
    assert refused.value.field == "profile" and "rankgpt only" in refused.value.message


def test_the_quoted_rankgpt_profile_runs_each_pass_on_its_role(index):
    """Two OpenAI-compatible servers on loopback, one per role: the first pass (and the reader) on the
    method's model, the top 30 again on rerank2's; every window in rank_gpt.py's words, a titled
    passage as "Title: … Content: …"."""
    from fakes import ScriptedServer

    from winnow.llm import LLM
    from winnow.llm.openai_http import OpenAICompatibleBackend
    from winnow.methods import build_method

    first, second = ScriptedServer(delay=0), ScriptedServer(delay=0)
    try:
        def llm(server: ScriptedServer) -> LLM:
            return LLM(OpenAICompatibleBackend("m", base_url=server.url, context_size=8192))

        method = build_method("rankgpt", index=index, llm=llm(first), agents={"rerank2": llm(second)},
                              profile="rankgpt-quoted")
        # rerank2 has its model: no note about a second pass on the first one (the scripted servers do
        # not say which model they serve, which the framing check notes once each).
        assert not [note for note in method.notices if "second_pass_depth" in note]
        answer = method.ask("capital of france")
    finally:
        first.stop()
        second.stop()
    assert [s.name for s in answer.trace.stages] == ["retrieve", "listwise", "second_pass", "generate"]
    listwise, second_pass = answer.trace.stages[1:3]
    assert (listwise.settings["window"], listwise.settings["step"]) == (20, 10)
    assert listwise.settings["prompt"] == second_pass.settings["prompt"] == "rrr.listwise_rankgpt"
    assert second_pass.settings["depth"] == 30
    assert (second.requests, first.requests) == (1, 2)  # one window each (fewer than 20 passages), then the reader
    for stage in (listwise, second_pass):
        [call] = stage.llm_calls
        assert call.messages[-1]["content"].startswith("Search Query: capital of france. \nRank the ")
        assert call.messages[3]["content"].startswith("[1] Title: ") and " Content: " in call.messages[3]["content"]


def test_explicit_settings_override_the_profile(tmp_path):
    spec = RunSpec.resolve(run={"method": "rrr", "profile": "paper"}, settings={"n": 30, "window": 20, "step": 10})
    settings = method_settings(spec.method, **spec.settings)
    assert (settings.n, settings.window, settings.step, settings.rewrites, settings.max_rewrite_tokens) == \
        (30, 20, 10, 5, 20)
    config = tmp_path / "run.toml"
    config.write_text('method = "rankrag"\nprofile = "paper-70b"\nk = 3\n[rankrag]\nmax_answer_tokens = 16\n')
    spec = RunSpec.resolve(config=config)
    assert spec.profile == "paper-70b"
    assert method_settings(spec.method, **spec.settings).to_dict() == {
        "n": 30, "k": 3, "max_answer_tokens": 16, "fusion_alpha": 0.0, "framing": "plain", "task": "qa",
        "score": "raw", "adaptive_depth": 0.0, "adaptive_depth_keep": 0, "injection_guard": "off",
        "fusion_weights": []}
    # The flag's profile wins over the file's.
    assert RunSpec.resolve(config=config, run={"profile": "paper"}).settings["n"] == 100


def test_the_profile_is_recorded_in_the_spec_and_the_run_label():
    spec = RunSpec.resolve(run={"method": "rankrag", "model": "smollm2-135m", "profile": "paper"},
                           settings={"k": 10})
    assert spec.to_dict()["profile"] == "paper"
    assert run_label(spec) == "rankrag smollm2-135m profile=paper N=100 k=10"
    assert "profile" not in RunSpec.resolve(run={"method": "rankrag"}).to_dict()  # older run folders resume


def test_a_role_on_its_own_model_is_in_the_run_label():
    spec = RunSpec.resolve(run={"method": "mainrag", "model": "smollm2-135m",
                                "agents": {"judge": "qwen2.5-coder-0.5b", "final": "smollm2-135m"}})
    assert run_label(spec) == "mainrag smollm2-135m judge=qwen2.5-coder-0.5b N=20"
    assert run_label(RunSpec.resolve(run={"method": "mainrag", "model": "smollm2-135m"})) == "mainrag smollm2-135m N=20"


def test_an_unknown_profile_is_refused_with_the_list(monkeypatch, capsys):
    with pytest.raises(SettingError) as caught:
        RunSpec.resolve(run={"method": "vanilla", "profile": "papers"})
    assert caught.value.setting == "profile"
    assert "unknown profile 'papers'" in str(caught.value) and "paper, paper-fever" in str(caught.value)
    monkeypatch.setattr(sys, "argv", ["winnow", "ask", "--index", "nowhere", "--profile", "papers", "a question"])
    with pytest.raises(SystemExit) as exited:
        run()
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "unknown profile 'papers'" in error and "paper-70b" in error


def test_a_request_profile_counts_as_asked_and_names_its_field():
    limits = Limits()
    assert check_settings("rankrag", {}, {"k": 3}, limits, profile="paper")["n"] == 100
    assert check_settings("rankrag", {}, {"k": 3}, limits, profile="paper")["k"] == 3
    with pytest.raises(ApiError) as caught:
        check_settings("rankrag", {}, {}, limits, profile="nope")
    assert caught.value.field == "profile" and "paper-70b" in caught.value.message
    with pytest.raises(ApiError) as caught:  # a server whose --max-n is below the paper's N refuses, not lowers
        check_settings("rankrag", {}, {}, Limits(max_n=50), profile="paper")
    assert caught.value.field == "profile" and "profile 'paper' setting 'n' must be between 1 and 50" in \
        caught.value.message


def methods_rows(output: str) -> dict[str, dict[str, tuple[str, str]]]:
    """``winnow methods``' settings tables: method -> setting -> (default, paper)."""
    rows: dict[str, dict[str, tuple[str, str]]] = {}
    method = ""
    for line in output.splitlines():
        if (named := re.match(r"^([a-z_-]+): ", line)) and named.group(1) in METHODS:
            method = named.group(1)
        elif method and (row := re.match(r"^ ([a-z_]+) {2,}(\S+(?: \S+)*) {2,}(\S+(?: \S+)*) *$", line)):
            rows.setdefault(method, {})[row.group(1)] = (row.group(2), row.group(3))
    return rows


@pytest.mark.parametrize("columns", ["80", "220"])
def test_winnow_methods_shows_defaults_beside_the_paper_values(columns):
    result = CliRunner().invoke(app, ["methods"], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= int(columns) and not any("…" in line for line in lines)  # nothing cut
    header = next(line for line in lines if "setting" in line and "paper" in line)
    assert header.index("default") < header.index("paper")
    rows = methods_rows(result.output)
    assert set(rows) == set(METHODS)
    for method in ("rankrag", "rrr"):
        assert rows[method]["n"] == ("20", "100 *")  # CPU default 20, paper 100
    assert rows["rrr"]["max_rewrite_tokens"] == ("20", "20")  # Table 4's limit is also the CPU default
    assert rows["rrr"]["second_pass_depth"] == ("0", "30 *")  # rrr: off on the CPU, §4(C)'s top 30 in the paper
    assert rows["rrr"]["rewrites"] == ("5", "5")
    assert rows["mainrag"]["k"] == ("None", "None")  # Winnow's cap on the survivors, off as in the paper
    assert rows["mainrag"]["judge_sentence"] == ("added", "none *")  # Appendix C adds no request to the triplet
    # The baselines without retrieval and without MAIN-RAG's filter: counts they do not read are not shown.
    assert rows["no-retrieval"]["k"] == rows["no-retrieval"]["n"] == ("0", "- (not used)")
    assert rows["no-retrieval"]["framing"] == ("chat", "plain *")
    assert rows["mainrag-unfiltered"]["n"] == ("20", "20") and rows["mainrag-unfiltered"]["k"][1] == "- (not used)"
    for name in PROFILES:
        assert name in result.output


def test_a_server_on_the_quoted_rankgpt_profile_answers_other_methods_on_their_defaults(index):
    """`winnow serve --method rankgpt --profile rankgpt-quoted`: a request for another method gets
    that method's defaults (the server's profile is rankgpt's alone), not a refusal of the server's
    own profile; a request that names the profile for another method is refused on its field."""
    pytest.importorskip("starlette")
    from fakes import ScriptedServer

    from winnow.errors import WinnowWarning
    from winnow.pipeline import Pipeline
    from winnow.service import Service
    from winnow.service.schemas import AskRequest

    server = ScriptedServer(delay=0)
    try:
        spec = RunSpec.resolve(run={"method": "rankgpt", "model": "m", "backend": "openai", "base_url": server.url,
                                    "profile": "rankgpt-quoted"})
        with pytest.warns(WinnowWarning, match="no rerank2 model was given"):
            service = Service(Pipeline(spec, index.path, cache=False), cache=False)
        own = service.plan_ask(AskRequest(question="capital of france"))
        other = service.plan_ask(AskRequest(question="capital of france", method="rrr"))
        assert (own.request["settings"]["second_pass_depth"], other.request["settings"]["n"]) == (30, 20)
        with pytest.raises(ApiError) as refused:
            service.plan_ask(AskRequest(question="capital of france", method="rrr", profile="rankgpt-quoted"))
        assert refused.value.field == "profile"
    finally:
        server.stop()
