"""The command line: index → search → ask, and its errors. The commands run in this process through
tests/cli_runner.py (the typer app and its one-line errors, as ``winnow`` runs them); one test runs
``python -m winnow.cli`` in a subprocess, for the entry point and its exit status.
"""

import json
import os
import subprocess
import sys

import pytest
from cli_runner import winnow as winnow_in_process
from fast_model import suite_model
from small_corpus import PASSAGES

from winnow.commands.common import dialogue_from
from winnow.errors import InputError, WinnowError
from winnow.records import Turn

MODEL = suite_model()


def winnow(*args, env_dir, check=True, input=None):
    result = winnow_in_process(*args, env={"WINNOW_CACHE_DIR": str(env_dir)}, input=input)
    if check and result.returncode != 0:
        raise AssertionError(f"winnow {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    source = folder / "corpus.jsonl"
    source.write_text("\n".join(json.dumps(p) for p in PASSAGES) + "\n")
    result = winnow("index", str(source), "--out", str(folder / "idx"), env_dir=folder / "cache")
    assert "indexed 8 passages" in result.stderr
    return folder


def test_search_json(built):
    result = winnow("search", "--index", str(built / "idx"), "--k", "3", "--json", "mona lisa painter",
                    env_dir=built / "cache")
    data = json.loads(result.stdout)
    assert data["passages"][0]["id"] == "mona"
    assert len(data["passages"]) <= 3


@pytest.mark.llm
def test_ask_json_and_human_output(built):
    args = ("ask", "--index", str(built / "idx"), "--model", MODEL, "--n", "4", "--k", "2")
    data = json.loads(winnow(*args, "--json", "what is the capital of france", env_dir=built / "cache").stdout)
    assert data["method"] == "rankrag" and data["answer"]
    assert len(data["passages"]) == 2
    assert [s["name"] for s in data["trace"]["stages"]] == ["retrieve", "rerank", "generate"]
    assert data["usage"]["calls"] == 5
    human = winnow(*args, "what is the capital of france", env_dir=built / "cache")
    assert "bm25 rank → rerank rank" in human.stdout
    assert "LLM usage" in human.stdout and "cache hits" in human.stdout
    assert "5 cached" in human.stderr  # the second run is served from the call cache


@pytest.mark.llm
def test_no_cache_calls_the_model_again(built):
    args = ("ask", "--index", str(built / "idx"), "--model", MODEL, "--method", "vanilla", "--k", "2",
            "--json", "--no-cache", "where is the nile")
    first = json.loads(winnow(*args, env_dir=built / "cache").stdout)
    second = json.loads(winnow(*args, env_dir=built / "cache").stdout)
    assert first["usage"]["calls"] == second["usage"]["calls"] == 1
    assert second["usage"]["cache_hits"] == 0


@pytest.mark.subprocess
def test_missing_index_is_one_clear_line(built):
    """In a real process: ``python -m winnow.cli`` exits with status 2 and one line."""
    env = {**os.environ, "WINNOW_CACHE_DIR": str(built / "cache"), "COLUMNS": "160"}
    result = subprocess.run([sys.executable, "-m", "winnow.cli", "search", "--index", str(built / "nope"), "x"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert str(built / "nope") in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2


def test_debug_shows_the_traceback(built):
    result = winnow("--debug", "search", "--index", str(built / "nope"), "x", env_dir=built / "cache", check=False)
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_bad_corpus_line_is_named(built):
    bad = built / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "fine"}\n{"id": "b", "title": "no text"}\n')
    result = winnow("index", str(bad), "--out", str(built / "bad-idx"), env_dir=built / "cache", check=False)
    assert result.returncode == 2
    assert "bad.jsonl, line 2" in result.stderr and "text" in result.stderr
    assert not (built / "bad-idx").exists()


def test_bad_k_fails_before_loading_a_model(built):
    result = winnow("ask", "--index", str(built / "idx"), "--n", "2", "--k", "4", "q", env_dir=built / "cache",
                    check=False)
    assert result.returncode == 2 and "setting 'k' (4) cannot exceed setting 'n' (2)" in result.stderr


def test_unknown_model_names_the_known_ones(built):
    result = winnow("ask", "--index", str(built / "idx"), "--model", "gpt-17", "q", env_dir=built / "cache",
                    check=False)
    assert result.returncode == 2 and "smollm2-135m" in result.stderr


def test_models_lists_the_registry(built):
    result = winnow("models", env_dir=built / "cache")
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert name in result.stdout


def test_methods_lists_every_method_with_its_defaults(built):
    result = winnow("methods", env_dir=built / "cache")
    for name in ("vanilla", "rankrag", "mainrag", "rrr", "rankgpt", "no-retrieval", "mainrag-unfiltered"):
        assert name in result.stdout
    for setting in ("judge_n", "rewrites", "window", "max_rewrite_tokens"):
        assert setting in result.stdout
    assert "paper" in result.stdout  # the papers' values beside the defaults (tests/test_profiles.py)
    # vanilla's n is not used: no paper value is claimed for it (issue 29); MAIN-RAG's k is now Winnow's
    # cap on the survivors, off by default, so it is listed as a setting. no-retrieval reads neither n
    # nor k, mainrag-unfiltered no k.
    assert result.stdout.count("- (not used)") == 4


@pytest.mark.llm
@pytest.mark.parametrize("method", ["mainrag", "rrr", "rankgpt"])
def test_every_method_answers_from_the_cli(built, method):
    extra = {"rrr": ["--set", "rewrites=2", "--set", "window=3", "--set", "step=2"],
             "rankgpt": ["--set", "window=3", "--set", "step=2", "--set", "second_pass_depth=3"], "mainrag": []}[method]
    result = winnow("ask", "--index", str(built / "idx"), "--model", MODEL, "--method", method, "--n", "4",
                    "--k", "2", *extra, "--json", "capital of france", env_dir=built / "cache")
    data = json.loads(result.stdout)
    assert data["method"] == method and data["answer"]
    assert data["settings"]["n"] == 4 and data["settings"]["retriever"] == "bm25"
    assert data["trace"]["stages"][0]["name"] == "retrieve"
    if method == "rankgpt":  # the method's notice, printed once before it runs (not as a Python warning)
        assert result.stderr.count("no rerank2 model was given") == 1 and "note:" in result.stderr
        assert "WinnowWarning" not in result.stderr


@pytest.mark.llm
def test_config_file_and_flags_merge(built):
    config = built / "run.toml"
    config.write_text(f'method = "rankgpt"\nmodel = "{MODEL}"\nn = 3\n\n[rankgpt]\nwindow = 2\nstep = 1\n')
    data = json.loads(winnow("ask", "--index", str(built / "idx"), "--config", str(config), "--k", "1", "--json",
                             "capital of france", env_dir=built / "cache").stdout)
    assert data["method"] == "rankgpt"
    assert (data["settings"]["n"], data["settings"]["k"], data["settings"]["window"]) == (3, 1, 2)


def test_unknown_config_key_is_named(built):
    config = built / "typo.toml"
    config.write_text("windw = 3\n")
    result = winnow("ask", "--index", str(built / "idx"), "--config", str(config), "q", env_dir=built / "cache",
                    check=False)
    assert result.returncode == 2 and "typo.toml" in result.stderr and "windw" in result.stderr


def test_judge_model_for_a_method_without_a_judge_is_refused(built):
    result = winnow("ask", "--index", str(built / "idx"), "--model", MODEL, "--method", "rankrag",
                    "--judge-model", "qwen2.5-coder-0.5b", "q", env_dir=built / "cache", check=False)
    assert result.returncode == 2 and "method 'rankrag' has no agent role(s) ['judge']" in result.stderr


@pytest.mark.llm
@pytest.mark.parametrize("method", ["pointwise", "graded", "listwise"])
def test_rerank_a_jsonl_file(built, method):
    data = json.loads(winnow("rerank", "--model", MODEL, "--method", method, "--top-n", "3", "--window", "4",
                             "--step", "2", "--json", "capital of france", str(built / "corpus.jsonl"),
                             env_dir=built / "cache").stdout)
    assert data["method"] == method and len(data["results"]) == 3
    ids = [r["id"] for r in data["results"]]
    assert len(set(ids)) == 3 and set(ids) <= {p["id"] for p in PASSAGES}
    assert all(r["scores"][0]["stage"] == "input" for r in data["results"])


def test_rerank_unknown_method(built):
    result = winnow("rerank", "--method", "nope", "q", str(built / "corpus.jsonl"), env_dir=built / "cache",
                    check=False)
    assert result.returncode == 2 and "pointwise" in result.stderr


def test_rerank_by_embedding_needs_no_llm(built):
    data = json.loads(winnow("rerank", "--method", "embedding", "--json", "What is the capital of France?",
                             str(built / "corpus.jsonl"), env_dir=built / "cache").stdout)
    assert data["method"] == "embedding" and data["usage"]["calls"] == 0
    assert {r["id"] for r in data["results"][:2]} == {"paris", "france"}
    assert [r["id"] for r in data["results"]] != [p["id"] for p in PASSAGES]  # the order really changed


# --- settings from --set and flags: typed, checked once, never silently dropped ---------------------

@pytest.mark.parametrize("assignment, message", [
    ("window=x", "setting 'window' must be an integer (got 'x')"),
    ("n=abc", "setting 'n' must be an integer (got 'abc')"),
    ("listwise_prompt=gpt", "setting 'listwise_prompt' must be one of 'rrr', 'rankgpt' (got 'gpt')"),
    ("fusion_alpha=2", "setting 'fusion_alpha' must be between 0 and 1 (got 2.0)"),
])
def test_a_bad_set_value_is_one_line_naming_the_setting_and_type(built, assignment, message):
    result = winnow("ask", "--index", str(built / "idx"), "--method", "rankgpt", "--set", assignment, "q",
                    env_dir=built / "cache", check=False)
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("assignment", ["k=", "k=  "])
def test_an_empty_set_value_exits_2_naming_the_setting(built, assignment):
    result = winnow("ask", "--index", str(built / "idx"), "--set", assignment, "q", env_dir=built / "cache",
                    check=False)
    assert result.returncode == 2 and "--set k= has no value" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _offered_flags(command, env_dir):
    """The long flags ``winnow COMMAND --help`` lists (read from its usage table)."""
    import re

    text = winnow(command, "--help", env_dir=env_dir).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", text))


def test_serve_and_mcp_offer_every_run_option_ask_does(built):
    from winnow.run_spec import RunOptions, fields_by_name

    run_flags = {flag for f in fields_by_name().values() for flag in f.metadata["flags"] if flag.startswith("--")}
    ask = _offered_flags("ask", built / "cache")
    assert run_flags <= ask
    for command in ("eval", "mcp"):
        assert run_flags <= _offered_flags(command, built / "cache"), command
    # serve keeps --api-key for its own clients' key; the backend's is --backend-api-key
    serve = _offered_flags("serve", built / "cache")
    assert run_flags - {"--api-key"} <= serve and "--backend-api-key" in serve
    assert len(fields_by_name()) == len(RunOptions.__dataclass_fields__)


def test_rerank_reads_passages_from_stdin(built):
    lines = "".join(json.dumps(p) + "\n" for p in PASSAGES[:3])
    result = winnow("rerank", "--method", "embedding", "--json", "capital of france", "-", input=lines,
                    env_dir=built / "cache")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["results"]) == 3


def test_version_and_short_help(built):
    from winnow.version import __version__

    assert winnow("--version", env_dir=built / "cache").stdout.strip() == f"winnow {__version__}"
    assert "ask [OPTIONS]" in winnow("ask", "-h", env_dir=built / "cache").stdout


def test_set_and_its_own_flag_must_agree(built):
    result = winnow("ask", "--index", str(built / "idx"), "--set", "k=1", "--k", "2", "q", env_dir=built / "cache",
                    check=False)
    assert result.returncode == 2 and "--set k=1 and --k 2 disagree" in result.stderr


@pytest.mark.llm
@pytest.mark.parametrize("method", ["vanilla", "rankrag"])
def test_set_values_are_honoured(built, method):
    """--set n/k/max_answer_tokens/fusion_alpha used to be dropped by the unset flags' None."""
    fusion = ["--set", "fusion_alpha=0.5"] if method == "rankrag" else []
    result = winnow("ask", "--index", str(built / "idx"), "--model", MODEL, "--method", method,
                    "--set", "k=1", "--set", "n=3", "--set", "max_answer_tokens=4", *fusion,
                    "--json", "what is the capital of france", env_dir=built / "cache")
    data = json.loads(result.stdout)
    settings = data["settings"]
    assert (settings["k"], settings["n"], settings["max_answer_tokens"]) == (1, 3, 4)
    assert len(data["passages"]) == 1 and data["passages"][0]["id"] in ("france", "paris")
    [reader] = [s for s in data["trace"]["stages"] if s["kind"] == "reader"]
    assert reader["settings"]["max_tokens"] == 4 and reader["llm_calls"][0]["completion_tokens"] <= 4
    if method == "rankrag":
        assert settings["fusion_alpha"] == 0.5
        assert [s["kind"] for s in data["trace"]["stages"]][:3] == ["bm25", "pointwise-true", "score-fusion"]
        assert len(data["trace"]["stages"][0]["output"]) == 3


def test_an_agent_role_the_method_lacks_is_refused_naming_its_roles(built):
    result = winnow("ask", "--index", str(built / "idx"), "--method", "rrr", "--agent", f"judge={MODEL}", "q",
                    env_dir=built / "cache", check=False)
    assert result.returncode == 2
    assert "method 'rrr' has no agent role(s) ['judge']" in result.stderr and "rewrite, relevance, rerank" in result.stderr


def test_max_inflight_on_an_in_process_backend_is_refused(built):
    """The in-process llama.cpp schedules its own calls (--slots): a bound it would ignore is refused."""
    result = winnow("ask", "--index", str(built / "idx"), "--model", MODEL, "--max-inflight", "4", "q",
                    env_dir=built / "cache", check=False)
    assert result.returncode == 2 and "max_inflight applies to the openai backend, not 'llama.cpp'" in result.stderr


def test_slots_on_an_http_backend_are_refused(built):
    """A server's parallel slots are set on the server: --slots with --backend openai would be ignored."""
    result = winnow("ask", "--index", str(built / "idx"), "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                    "--slots", "4", "q", env_dir=built / "cache", check=False)
    assert result.returncode == 2
    assert "'slots' applies to the in-process llama.cpp backend, not 'openai'" in result.stderr
    assert "--max-inflight" in result.stderr
    result = winnow("ask", "--index", str(built / "idx"), "--slots", "0", "q", env_dir=built / "cache", check=False)
    assert result.returncode == 2 and "--slots" in result.stderr


@pytest.mark.llm
def test_ask_takes_a_dialogue_history_into_the_plain_prompt(built, tmp_path):
    args = ("ask", "--index", str(built / "idx"), "--model", MODEL, "--method", "vanilla", "--k", "1",
            "--max-answer-tokens", "2", "--task", "conversational", "--framing", "plain", "--json")
    data = json.loads(winnow(*args, "--turn", "user:who painted the mona lisa", "--turn",
                             "assistant:Leonardo da Vinci", "when was it painted", env_dir=built / "cache").stdout)
    [generate] = [stage for stage in data["trace"]["stages"] if stage["name"] == "generate"]
    [sent] = generate["llm_calls"][0]["messages"]
    assert sent["role"] == "plain" and sent["content"].startswith("System: This is a chat")
    assert sent["content"].endswith("\n\nUser: who painted the mona lisa\n\nAssistant: Leonardo da Vinci\n\n"
                                    "User: when was it painted\n\nAssistant:")
    assert data["settings"]["task"] == "conversational" and data["settings"]["framing"] == "plain"


def test_a_bad_dialogue_history_names_what_is_wrong(built, tmp_path):
    with pytest.raises(WinnowError, match="--turn: history\\[0\\].role is 'assistant', expected 'user'"):
        dialogue_from(["assistant:hello"], None)
    history = tmp_path / "history.json"
    history.write_text(json.dumps([{"role": "user", "text": "hi"}, {"role": "assistant", "txt": "hello"}]))
    with pytest.raises(InputError, match="field 'history': history\\[1\\] must be an object with exactly"):
        dialogue_from(None, history)
    assert dialogue_from(["user: hi", "assistant:hello"], None) == (Turn("user", "hi"), Turn("assistant", "hello"))
    # Refused before a model is loaded: the qa task has no place for the turns.
    refused = winnow("ask", "--index", str(built / "idx"), "--model", MODEL, "--turn", "user:hi", "--turn",
                     "assistant:hello", "q", env_dir=built / "cache", check=False)
    assert refused.returncode == 2 and "set the task setting to 'conversational'" in refused.stderr


# --- hints name only values that are themselves accepted (issue 40, item 12) -------------------------

def _suggested(hint: str, name: str) -> str | None:
    """The value a hint offers for ``name`` (``e.g. --set NAME=VALUE``), or None where it offers none."""
    import re

    found = re.search(rf"--set {re.escape(name)}=(\S+?)(?:,|$|\s)", hint)
    return None if found is None else found.group(1)


def _every_setting():
    from winnow.methods import METHODS
    from winnow.run_spec import RUN_SETTINGS

    return [(method, name) for method, cls in METHODS.items()
            for name in sorted({*cls.Settings.field_types(), *RUN_SETTINGS} - {"method"})]


@pytest.mark.parametrize("method, name", _every_setting())
def test_every_hint_for_a_setting_without_a_value_offers_a_value_that_is_accepted(method, name):
    """``--set NAME=`` and ``--set NAME`` (no '=') and a null in a config file each hint at a value;
    given as the hint writes it, it is accepted (``--set framing=`` once offered ``framing=5``)."""
    import re
    from functools import partial

    from winnow.config import parse_assignment
    from winnow.methods import METHODS
    from winnow.run_spec import RunOptions, resolve_run, setting_example
    from winnow.settings import SettingsLayer, resolve_layers

    hints = []
    for text in (f"{name}=", name):
        with pytest.raises(WinnowError) as refused:
            parse_assignment(text, partial(setting_example, method=method))  # as resolve_run asks it
        hints.append(refused.value.hint)
    settings_type = METHODS[method].Settings
    if name in settings_type.field_types():
        try:  # an optional setting (MAIN-RAG's k) takes a null
            resolve_layers(settings_type, [SettingsLayer("config file", {name: None})], owner=method)
        except WinnowError as refused:
            hints.append(refused.hint)
    for hint in hints:
        other = re.search(r"--set (\w+)=", hint)  # a hint may offer another setting as its example
        key = name if _suggested(hint, name) is not None else (other.group(1) if other else name)
        value = _suggested(hint, key)
        if value is None:
            assert "leave it out" in hint
            continue
        resolve_run(RunOptions(method=method, assignments=(f"{key}={value}",)))
