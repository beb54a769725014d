"""A method added as docs/architecture.md says gets, with no other file touched: its help text, the
method and Stage contract checks, and `winnow serve --rerank-model`.

The method is written here as it would be in methods/shortlist.py (a Method subclass, its typed
settings, its recipe composed of stages) and registered in ``METHODS`` for this module only. Real
parts: SmolLM2-135M through llama.cpp, the eight-passage BM25 index, a tiny random cross-encoder
saved as a model folder, the service's HTTP app.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar, Literal, Mapping

import pytest
from typer.testing import CliRunner

from winnow.cli import app
from winnow.llm.client import LLM
from winnow.methods import METHODS, build_method
from winnow.methods.base import Method, RerankingSettings
from winnow.methods.reranking import TrainedRerankers
from winnow.settings import at_least
from winnow.stages import Reader, Retriever
from winnow.stages.retrieve import SearchIndex
from winnow.testing import MethodContract

# ---- what methods/shortlist.py would hold ------------------------------------------------------


@dataclass
class ShortlistSettings(RerankingSettings):
    upper_bounds: ClassVar[dict[str, float]] = {"reader_tokens": 1024}
    rerank: Literal["pointwise", "graded", "cross-encoder", "monot5"] = "pointwise"
    reader_tokens: int = 16

    def check(self) -> None:
        super().check()
        at_least(self, 1, "reader_tokens")


class Shortlist(Method):
    name = "shortlist"
    summary = "retrieve N, rerank with the chosen reranker, answer from the top k"
    stages = ("retrieve(N)", "rerank (pointwise, graded or a trained reranker)", "keep top k", "generate")
    Settings = ShortlistSettings
    roles = {"rerank": "the reranker"}

    def __init__(self, index: SearchIndex, llm: LLM, settings: ShortlistSettings,
                 agents: Mapping[str, LLM] | None = None, rerankers: TrainedRerankers | None = None) -> None:
        super().__init__(index, llm, settings, agents, rerankers)
        reranker = self.reranker_named(settings.rerank, role="rerank")
        self.stage_roles = {reranker.name: "rerank"}
        self.recipe = Retriever(index, n=settings.n) >> reranker % settings.k >> Reader(llm, settings.reader_tokens)


# ---- registered, for this module only (methods/__init__.py: METHODS) -------------------------------


@pytest.fixture(scope="module", autouse=True)
def registered():
    METHODS[Shortlist.name] = Shortlist
    yield
    del METHODS[Shortlist.name]


@pytest.fixture
def contract_method():
    return Shortlist.name


@pytest.fixture
def contract_index(index):
    return index


@pytest.fixture
def contract_backend(llama_backend):
    return llama_backend


class TestShortlistKeepsTheContracts(MethodContract):
    """The checks every registered method passes, inherited."""

    pytestmark = pytest.mark.llm


def test_winnow_methods_describes_it_from_the_registry():
    result = CliRunner().invoke(app, ["methods"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "shortlist: retrieve N, rerank with the chosen reranker, answer from the top k" in result.stdout
    assert "agent roles (--agent ROLE=MODEL): rerank: the reranker" in result.stdout
    assert "reader_tokens" in result.stdout


def test_its_settings_come_from_every_source():
    from winnow.methods import method_settings
    from winnow.settings import SettingError

    assert method_settings("shortlist", reader_tokens=4, rerank="graded").reader_tokens == 4
    with pytest.raises(SettingError, match="reader_tokens"):
        method_settings("shortlist", reader_tokens=10**6)


@pytest.mark.llm
def test_its_recipe_is_printed_in_its_traces(index, llama_backend):
    rag = build_method("shortlist", index=index, llm=LLM(llama_backend), n=4, k=2)
    expected = "Retriever(index='bm25', n=4) >> PointwiseTrueReranker() % 2 >> Reader(max_tokens=16)"
    assert repr(rag.recipe) == expected
    answer = rag.ask("who painted the mona lisa")
    assert answer.trace.recipe == expected and answer.trace.to_dict()["recipe"] == expected
    assert [s.name for s in answer.trace.stages] == ["retrieve", "rerank", "generate"]
    assert [s.role for s in answer.trace.stages] == ["", "rerank", "default"]


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_rerankers import save_tiny_cross_encoder

    return save_tiny_cross_encoder(tmp_path_factory.mktemp("cross-encoder"))


@pytest.mark.llm
def test_serve_rerank_model_reaches_it(index, llama_backend, cross_encoder_dir):
    """`winnow serve --rerank-model cross-encoder=DIR`: a request for the new method with
    rerank=cross-encoder runs DIR's model (and RankGPT's, through the same door), not the default."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from winnow.pipeline import Pipeline
    from winnow.run_spec import RunSpec
    from winnow.service import Service
    from winnow.service.app import create_app

    llm = LLM(llama_backend)
    pipeline = Pipeline.from_parts(RunSpec(method="shortlist", model="smollm2-135m", backend="llama.cpp"), index, llm)
    service = Service(pipeline, cache=False, rerank_models={"cross-encoder": str(cross_encoder_dir)})
    try:
        with TestClient(create_app(service), base_url="http://127.0.0.1") as client:
            for method in ("shortlist", "rankgpt"):
                response = client.post("/v1/ask", json={"question": "capital of france", "method": method, "n": 4,
                                                         "k": 2, "options": {"rerank": "cross-encoder"},
                                                         "include_trace": True})
                assert response.status_code == 200, response.text
                [stage] = [s for s in response.json()["trace"]["stages"] if s["kind"] == "cross-encoder"]
                assert stage["settings"]["model"] == str(cross_encoder_dir), json.dumps(stage["settings"])
                assert stage["details"]["model"] == str(cross_encoder_dir)
            listed = {m["name"] for m in client.get("/v1/methods").json()["methods"]}
            assert "shortlist" in listed
    finally:
        service.worker.close()
