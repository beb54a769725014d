"""Every run option through every front door: honoured (it reaches the run's RunSpec and the models'
loading) or refused with a message naming it. Nothing a front door accepts is dropped.

The front doors: the command line (``winnow ask``, ``serve`` and ``mcp`` in process through typer's
runner), the Python API (``winnow.open_pipeline``), the LangChain, LlamaIndex and Haystack method
retrievers, and a server's requests over HTTP (the app in process, starlette's test client) and MCP
(the tool called in process). The walk stops each command-line and Python run where the resolved run
is handed to :class:`~winnow.pipeline.Pipeline` (what it was given is recorded, nothing loads); the
adapters are built lazily and read back. That the spec then reaches the backend is checked for real
below: :func:`~winnow.pipeline.load_run_llm` (every front door loads its models there) builds an
OpenAI-compatible backend with every knob, and an adapter's runner opens one. A request's honoured
options run the real SmolLM2-135M (tiny answers); its refusals need no model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable

import anyio
import pytest
from fast_model import suite_model
from typer.testing import CliRunner

import winnow
from winnow.cli import app
from winnow.errors import WinnowError
from winnow.methods import MethodSettings
from winnow.methods.vanilla import VanillaRAG
from winnow.pipeline import Pipeline, load_run_llm
from winnow.run_spec import RunOptions, RunSpec
from winnow.settings import ModelPath

MODEL = suite_model()

DEAD = "http://127.0.0.1:9/v1"  # nothing listens: a backend built for it contacts no server until called
OPENAI = {"backend": "openai", "base_url": (DEAD,)}


@dataclass
class Option:
    """A run option's value, what else it needs (``with_``), and how to see it honoured."""

    value: Any
    honoured: Callable[[RunSpec, dict[str, Any]], bool]
    with_: dict[str, Any] | None = None


#: One value per field of RunOptions; ``loaded`` is what the models are loaded with besides the spec.
OPTIONS: dict[str, Option] = {
    "method": Option("vanilla", lambda s, _: s.method == "vanilla"),
    "model": Option("smollm2-135m", lambda s, _: s.model == "smollm2-135m"),
    "backend": Option("openai", lambda s, _: s.backend == "openai", {"base_url": (DEAD,)}),
    "base_url": Option((DEAD, "http://127.0.0.1:10/v1"), lambda s, _: s.base_url == f"{DEAD},http://127.0.0.1:10/v1",
                       {"backend": "openai"}),
    "api_key": Option("sk-walk", lambda _, loaded: loaded["api_key"] == "sk-walk", OPENAI),
    "max_inflight": Option(3, lambda s, _: s.max_inflight == 3, OPENAI),
    "timeout": Option(7.5, lambda s, _: s.timeout == 7.5, OPENAI),
    "hedge": Option(0.5, lambda s, _: s.hedge == 0.5, OPENAI),
    "tokenizer": Option("smollm2-135m", lambda s, _: s.tokenizer == "smollm2-135m", OPENAI),
    "slots": Option(2, lambda s, _: s.slots == 2),
    "threads": Option(2, lambda _, loaded: loaded["threads"] == 2),
    "context_size": Option(512, lambda s, _: s.context_size == 512),
    "retriever": Option("hybrid", lambda s, _: s.retriever == "hybrid"),
    "ann": Option("hnsw", lambda s, _: s.ann == "hnsw", {"retriever": "dense"}),
    "ann_set": Option(("efSearch=64",), lambda s, _: s.ann_set == {"efSearch": 64},
                      {"retriever": "dense", "ann": "hnsw"}),
    "n": Option(6, lambda s, _: s.settings["n"] == 6),
    "k": Option(2, lambda s, _: s.settings["k"] == 2),
    "fusion_alpha": Option(0.5, lambda s, _: s.settings["fusion_alpha"] == 0.5),
    "max_answer_tokens": Option(7, lambda s, _: s.settings["max_answer_tokens"] == 7),
    "framing": Option("plain", lambda s, _: s.settings["framing"] == "plain"),
    "task": Option("fever", lambda s, _: s.settings["task"] == "fever"),
    "judge_model": Option("smollm2-135m", lambda s, _: s.agents == {"judge": "smollm2-135m"}, {"method": "mainrag"}),
    "final_model": Option("smollm2-135m", lambda s, _: s.agents == {"final": "smollm2-135m"}, {"method": "mainrag"}),
    "agents": Option(("judge=smollm2-135m",), lambda s, _: s.agents == {"judge": "smollm2-135m"},
                     {"method": "mainrag"}),
    "assignments": Option(("max_answer_tokens=9",), lambda s, _: s.settings["max_answer_tokens"] == 9),
    "config": Option(None, lambda s, _: (s.method, s.settings["k"], s.timeout, s.provenance["timeout"]) == (
        "vanilla", 2, 9.0, "config run.toml")),
    "profile": Option("paper", lambda s, _: s.profile == "paper" and s.settings["n"] == 100),
    "no_cache": Option(True, lambda _, loaded: loaded["cache"] is False),
}

CONFIG = 'method = "vanilla"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\ntimeout = 9.0\n\n[vanilla]\nk = 2\n'


def test_the_walk_covers_every_run_option():
    assert set(OPTIONS) == {f.name for f in fields(RunOptions)}, "give the new run option a value to walk"


def test_a_run_file_holds_the_run_options_the_resolver_reads():
    """config.RUN_OPTIONS documents a run file's run options (winnow tune writes such files): the
    typed run settings and the tables, no more and no fewer."""
    from winnow.config import RUN_OPTIONS
    from winnow.run_spec import RUN_SETTINGS, RUN_TABLES

    assert set(RUN_OPTIONS) == {*RUN_SETTINGS, *RUN_TABLES}


def test_a_run_file_may_list_its_endpoints(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('backend = "openai"\nbase_url = ["http://a:1/v1", "http://b:2/v1"]\n')
    assert RunSpec.resolve(config=path).base_url == "http://a:1/v1,http://b:2/v1"
    path.write_text('method = "vanilla"\nhedge = -1\n')
    with pytest.raises(WinnowError, match=r"run.toml, field 'hedge': setting 'hedge' must be more than 0"):
        RunSpec.resolve(config=path)


@pytest.fixture(scope="module")
def run_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("walk") / "run.toml"
    path.write_text(CONFIG)
    return path


def given(name: str, run_file: Path) -> dict[str, Any]:
    """The option under test with what it needs."""
    option = OPTIONS[name]
    return {**(option.with_ or {}), name: run_file if name == "config" else option.value}


class Reached(Exception):
    """Raised where a front door hands its resolved run to the Pipeline: what it handed."""

    def __init__(self, spec: RunSpec, loaded: dict[str, Any]) -> None:
        super().__init__("reached the pipeline")
        self.spec, self.loaded = spec, loaded


@pytest.fixture
def stop_at_the_pipeline(monkeypatch):
    def reached(self, spec, index_dir, *, api_key="", cache=True, threads=None, **_):
        raise Reached(spec, {"api_key": api_key, "cache": cache, "threads": threads})

    monkeypatch.setattr(Pipeline, "__init__", reached)
    # `winnow serve` opens its pipeline on a thread beside a running uvicorn: here it is opened at
    # once instead, so no server (and none of uvicorn's signal and log set-up) runs inside the test.
    import winnow.commands.serve as serve_command

    # uvicorn's Config applies its logging set-up when made (pointing handlers at this test's stderr).
    monkeypatch.setattr(serve_command, "_uvicorn_server", lambda app, **_: None)
    monkeypatch.setattr(serve_command, "_run_server",
                        lambda server, sock, lifecycle, open_service, announce: (sock.close(), open_service()))


def flags(values: dict[str, Any], taken: set[str] = frozenset()) -> list[str]:
    """``values`` as the command line's flags (``taken``: flags the command keeps for itself)."""
    by_name = {f.name: f for f in fields(RunOptions)}
    args: list[str] = []
    for name, value in values.items():
        flag = next(f for f in by_name[name].metadata["flags"] if f not in taken)
        if value is True:
            args.append(flag)
        elif isinstance(value, tuple):
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, str(value)]
    return args


COMMANDS = {"ask": ([], ["a question"], set()), "serve": (["--port", "0"], [], {"--api-key", "--timeout"}),
            "mcp": ([], [], {"--timeout"})}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", OPTIONS)
def test_the_command_line_honours_every_run_option(name, command, index, run_file, stop_at_the_pipeline):
    own, arguments, taken = COMMANDS[command]
    result = CliRunner().invoke(app, [command, "--index", str(index.path), *own, *flags(given(name, run_file), taken),
                                      *arguments])
    assert isinstance(result.exception, Reached), (result.output, result.exception)
    assert OPTIONS[name].honoured(result.exception.spec, result.exception.loaded), result.exception.spec


@pytest.mark.parametrize("name", OPTIONS)
def test_the_python_api_honours_every_run_option(name, index, run_file, stop_at_the_pipeline):
    with pytest.raises(Reached) as reached:
        winnow.open_pipeline(index.path, **given(name, run_file))
    assert OPTIONS[name].honoured(reached.value.spec, reached.value.loaded), reached.value.spec


def adapter_runner(framework: str, values: dict[str, Any], index: Any) -> Any:
    """The method runner of ``framework``'s retriever built lazily with ``values``; ``agents`` spelt as
    the adapters take them, a mapping of role to model (or winnow LLM)."""
    values = dict(values)
    if isinstance(values.get("agents"), tuple):
        values["agents"] = dict(role.split("=") for role in values["agents"])
    method = values.pop("method", None)  # not given: the config file's, or the default
    if framework == "langchain":
        from winnow.integrations.langchain import WinnowRetriever

        return WinnowRetriever(method=method, index=index.path, lazy=True, **values)._runner
    if framework == "llamaindex":
        from winnow.integrations.llamaindex import WinnowRetriever as LlamaRetriever

        return LlamaRetriever(method, index=index.path, lazy=True, **values)._runner
    from winnow.integrations.haystack import WinnowRetriever as HaystackRetriever

    return HaystackRetriever(method, index=index.path, **values).runner


@pytest.mark.parametrize("framework", ["langchain", "llamaindex", "haystack"])
@pytest.mark.parametrize("name", OPTIONS)
def test_every_adapter_honours_every_run_option(name, framework, index, run_file):
    """The adapters took timeout, hedge and tokenizer and dropped them (their own copy of the run
    resolution had drifted); now they resolve through resolve_run like every front door."""
    runner = adapter_runner(framework, given(name, run_file), index)
    loaded = {"api_key": runner._api_key, "cache": runner._cache, "threads": runner._threads}
    assert OPTIONS[name].honoured(runner.spec, loaded), runner.spec
    saved = runner.config()  # and the framework's saved configuration builds the same run again
    again = adapter_runner(framework, {key: value for key, value in saved.items() if key not in ("index", "lazy")},
                           index)
    assert again.spec == runner.spec


# ---- from the spec to the backend ---------------------------------------------------------------

def test_every_backend_option_of_the_spec_reaches_the_backend():
    """Every front door loads its models with load_run_llm: each knob of the spec reaches the backend."""
    spec = RunSpec(model="walk-model", backend="openai", base_url=f"{DEAD},http://127.0.0.1:10/v1", timeout=7.5,
                   hedge=0.5, max_inflight=3, context_size=512)
    llm = load_run_llm(spec, "walk-model", api_key="sk-walk", cache=False)
    try:
        backend = llm.backend
        assert (backend.timeout, backend.max_inflight, backend.dispatcher.hedge_seconds) == (7.5, 3, 0.5)
        assert [e.base_url for e in backend.dispatcher.endpoints] == [DEAD, "http://127.0.0.1:10/v1"]
        assert backend._requested_context == 512 and llm.identity["model"] == "walk-model"
    finally:
        llm.close()


@pytest.mark.parametrize("door", ["python", "adapter"])
def test_a_front_door_opens_the_backend_its_options_ask_for(door, index):
    """Not stopped anywhere: the Python API's pipeline and an adapter's runner open the index and
    build the model's backend with the options given (an OpenAI-compatible one, contacted only when
    called)."""
    options = {"method": "vanilla", "backend": "openai", "base_url": DEAD, "timeout": 7.5, "hedge": 0.5,
               "max_inflight": 3, "no_cache": True}
    if door == "python":
        with winnow.open_pipeline(index.path, **options) as pipeline:
            backend = pipeline.llm.backend
            assert (backend.timeout, backend.max_inflight, backend.dispatcher.hedge_seconds) == (7.5, 3, 0.5)
        return
    from winnow.integrations.core import MethodRunner

    runner = MethodRunner(index=index.path, **options)
    try:
        backend = runner.method.llm.backend
        assert (backend.timeout, backend.max_inflight, backend.dispatcher.hedge_seconds) == (7.5, 3, 0.5)
    finally:
        runner.close()


def test_a_bad_run_option_is_refused_naming_it_at_every_door(index, stop_at_the_pipeline):
    """One resolver, one message: a hedge of 0 seconds, from the Python API, an adapter and the CLI."""
    from winnow.integrations.langchain import WinnowRetriever

    message = re.escape("setting 'hedge' must be more than 0 seconds (got 0.0)")
    with pytest.raises(WinnowError, match=message):
        winnow.open_pipeline(index.path, hedge=0, **OPENAI)
    with pytest.raises(ValueError, match=f"hedge: {message}"):
        WinnowRetriever(index=index.path, lazy=True, hedge=0, backend="openai", base_url=DEAD)
    result = CliRunner().invoke(app, ["ask", "--index", str(index.path), *flags(OPENAI), "--hedge", "0", "q"])
    assert result.exit_code == 2 and "--hedge" in result.output  # typer's own bound, named by its flag
    with pytest.raises(WinnowError, match=r"winnow.open_pipeline has no option\(s\) \['hedging'\]"):
        winnow.open_pipeline(index.path, hedging=1.0)


# ---- a server's requests: HTTP and MCP -----------------------------------------------------------

#: What a request may choose (the method and its settings), how it says it, and how the answer shows it.
REQUESTED = {
    "method": ({"method": "vanilla"}, lambda body: body["method"] == "vanilla"),
    "n": ({"n": 3}, lambda body: body["settings"]["n"] == 3),
    "k": ({"k": 1}, lambda body: body["settings"]["k"] == 1),
    "profile": ({"profile": "paper"}, lambda body: body["profile"] == "paper"),
    "fusion_alpha": ({"method": "rankrag", "n": 2, "options": {"fusion_alpha": 0.5}},
                     lambda body: body["settings"]["fusion_alpha"] == 0.5),
    "max_answer_tokens": ({"options": {"max_answer_tokens": 3}},
                          lambda body: body["settings"]["max_answer_tokens"] == 3),
    "framing": ({"options": {"framing": "plain"}}, lambda body: body["settings"]["framing"] == "plain"),
    "task": ({"options": {"task": "fever"}}, lambda body: body["settings"]["task"] == "fever"),
}
#: A tiny answer from vanilla, the base of every honoured request.
TINY = {"question": "what is the capital of france", "method": "vanilla", "k": 1, "options": {"max_answer_tokens": 2}}


def request_body(name: str) -> dict[str, Any]:
    """The request that asks for run option ``name``: what a request may choose where it says it,
    any other run option at the top level (or in ``options`` where the top-level name means
    something else: a request's ``timeout`` is its own deadline)."""
    if name in REQUESTED:
        extra = REQUESTED[name][0]
        return {**TINY, **{k: v for k, v in extra.items() if k != "options"},
                "options": {**TINY["options"], **extra.get("options", {})}}
    value = OPTIONS[name].value if name != "config" else "run.toml"
    value = list(value) if isinstance(value, tuple) else value
    if name == "timeout":
        return {**TINY, "options": {**TINY["options"], name: value}}
    return {**TINY, name: value}


@pytest.fixture(scope="module")
def service(index, llama_backend, tmp_path_factory):
    from winnow.llm import LLM, CallCache
    from winnow.service import Service

    llm = LLM(llama_backend, CallCache(tmp_path_factory.mktemp("walk-service") / "calls.sqlite"))
    pipeline = Pipeline.from_parts(RunSpec(model="smollm2-135m"), index, llm, index_dir=index.path)
    served = Service(pipeline)
    yield served
    served.worker.close()


@pytest.fixture(scope="module")
def http(service):
    from fastapi.testclient import TestClient

    from winnow.service.app import create_app

    with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
        yield client


@pytest.mark.llm
@pytest.mark.parametrize("name", OPTIONS)
def test_an_http_request_has_every_run_option_honoured_or_refused_by_name(name, http):
    response = http.post("/v1/ask", json=request_body(name))
    if name in REQUESTED:
        assert response.status_code == 200, response.text
        assert REQUESTED[name][1](response.json()), {k: v for k, v in response.json().items() if k not in ("passages", "trace")}
        return
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] in (name, f"options.{name}") and name in error["message"], error


def mcp_arguments(name: str) -> dict[str, Any]:
    """The MCP ``ask`` call for run option ``name``: the method and profile as arguments, everything
    else in ``settings``."""
    body = request_body(name)
    settings = {**body.pop("options")}
    settings.update({key: body.pop(key) for key in list(body) if key not in ("question", "method", "profile")})
    return {**body, "settings": settings}


@pytest.mark.llm
@pytest.mark.parametrize("name", OPTIONS)
def test_an_mcp_call_has_every_run_option_honoured_or_refused_by_name(name, service):
    from mcp.server.mcpserver.exceptions import ToolError

    from winnow.service.mcp_server import build_server

    server = build_server(service)
    arguments = mcp_arguments(name)
    if name in REQUESTED:
        result = anyio.run(server.call_tool, "ask", {**arguments, "full": True})
        body = json.loads(result.content[0].text)
        assert REQUESTED[name][1]({**body, "settings": body["settings"]}), body["settings"]
        return
    with pytest.raises(ToolError) as refused:
        anyio.run(server.call_tool, "ask", arguments)
    assert f"settings.{name}" in str(refused.value) or name in str(refused.value), refused.value


# ---- paths: a request never names a file on the server ----------------------------------------------

@dataclass
class EncoderSettings(MethodSettings):
    """A throwaway method's settings with a model folder of its own, under another name than RRR's."""

    encoder_folder: ModelPath = ""


class Throwaway(VanillaRAG):
    name = "throwaway"
    Settings = EncoderSettings


def test_every_path_setting_of_every_method_is_refused_from_a_request():
    """Path-like settings are marked by type (ModelPath), so every method's are refused from a request
    whatever they are called, and a method added with one of its own is covered with no other change."""
    from winnow.methods import METHODS
    from winnow.service.limits import ApiError, Limits, request_settings

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(METHODS, "throwaway", Throwaway)
        checked = 0
        for method, cls in METHODS.items():
            for setting in cls.Settings.path_settings():
                with pytest.raises(ApiError) as refused:
                    request_settings(method, {}, {f"options.{setting}": "/etc"}, Limits())
                assert refused.value.field == f"options.{setting}" and "path" in refused.value.message
                checked += 1
        assert checked >= 3  # rrr's and rankgpt's rerank_model, the throwaway's encoder_folder
        allowed = request_settings("throwaway", {"encoder_folder": "/models/enc"}, {}, Limits())
        assert allowed.encoder_folder == "/models/enc"  # the server's own settings may name one


def test_the_server_fills_in_the_reranker_model_it_was_started_with():
    from winnow.service.limits import Limits, request_settings

    chosen = request_settings("rrr", {}, {"options.rerank": "cross-encoder"}, Limits(),
                              paths={"cross-encoder": "/models/ce", "monot5": ""})
    assert (chosen.rerank, chosen.rerank_model) == ("cross-encoder", "/models/ce")
    assert request_settings("rrr", {}, {}, Limits(), paths={"cross-encoder": "/models/ce"}).rerank_model == ""


# ---- MAIN-RAG's k: a cap on the survivors, honoured at every door ------------------------------------

@pytest.fixture(scope="module")
def shared_llm(llama_backend, tmp_path_factory):
    from winnow.llm import LLM, CallCache

    return LLM(llama_backend, CallCache(tmp_path_factory.mktemp("walk-mainrag") / "calls.sqlite"))


#: N = 4 retrieved, n = 3 in the bar keeps all four (no score is 3 std below the mean of four): k alone caps.
MAINRAG = {"n": 4, "settings": {"judge_n": 3.0, "max_document_answer_tokens": 8}}
QUERY = "what is the capital of france"


@pytest.mark.llm
def test_mainrag_k_caps_the_survivors_in_the_langchain_and_haystack_retrievers(index, shared_llm):
    from winnow.integrations.haystack import WinnowRetriever as HaystackRetriever
    from winnow.integrations.langchain import WinnowRetriever

    retriever = WinnowRetriever(method="mainrag", index=index, llm=shared_llm, **MAINRAG)
    assert len(retriever.invoke(QUERY)) == 4  # no k: every survivor, as the paper
    docs = retriever.invoke(QUERY, k=2)
    assert len(docs) == 2
    scores = [d.metadata["winnow_stage_scores"]["judge"] for d in docs]
    bar = next(s for s in retriever.last_answer.trace.stages if s.kind == "adaptive-judge-bar")
    capped = [d for d in bar.details.dropped if "caps the survivors" in d["note"]]
    assert len(capped) == 2 and max(c["score"] for c in capped) <= min(scores)  # the best by judge score kept
    assert bar.settings["keep"] == 2
    haystack = HaystackRetriever("mainrag", index=index, llm=shared_llm, **MAINRAG)
    assert len(haystack.run(QUERY, top_k=3)["documents"]) == 3


@pytest.mark.llm
def test_winnow_ask_mainrag_k_answers_from_at_most_k(index, tmp_path, monkeypatch):
    monkeypatch.setenv("WINNOW_CACHE_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["ask", "--index", str(index.path), "--model", MODEL, "--method",
                                      "mainrag", "--n", "4", "--k", "2", "--set", "judge_n=3", "--set",
                                      "max_document_answer_tokens=8", "--max-answer-tokens", "4", "--json", QUERY])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert len(answer["passages"]) == 2 and answer["settings"]["k"] == 2


def test_mainrag_k_is_marked_as_winnows_deviation_and_off_by_default():
    from winnow.methods import method_settings
    from winnow.settings import SettingError

    assert method_settings("mainrag").k is None and "k" not in method_settings("mainrag").deviations()
    assert "Winnow's cap on the survivors" in method_settings("mainrag", k=2).deviations()["k"]
    with pytest.raises(SettingError, match="the naive variant has no bar"):
        method_settings("mainrag", k=2, variant="naive")
    with pytest.raises(SettingError, match=r"'k' \(5\) cannot exceed setting 'n' \(4\)"):
        method_settings("mainrag", n=4, k=5)
