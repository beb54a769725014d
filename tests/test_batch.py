"""Every registered method keeps the method and Stage contracts (winnow.testing), on the real model.

Real SmolLM2-135M through llama.cpp and a real BM25 index, no call cache (so the batch path really
asks the model). The methods come from the registry (``METHODS``) with their settings types'
contract runs, so a method added there is checked here with nothing else to write: each runs a
batch of questions, then each question alone, and stage by stage along its recipe; answers, final
passages, every stage's scores, the LLM calls and their count per question must agree, and every
stage record must be its kind's.
"""

from __future__ import annotations

import pytest

from winnow.llm import LLM
from winnow.methods import METHODS, build_method
from winnow.stages import Reader, Recipe, Retriever
from winnow.testing import MethodContract, contract_settings


@pytest.fixture(params=list(METHODS))
def contract_method(request):
    return request.param


@pytest.fixture
def contract_index(index):
    return index


@pytest.fixture
def contract_backend(llama_backend):
    return llama_backend


class TestEveryRegisteredMethod(MethodContract):
    pytestmark = pytest.mark.llm


@pytest.mark.llm
def test_rrr_uses_its_threshold_stage_and_one_based_ranks(index, llama_backend):
    rag = build_method("rrr", index=index, llm=LLM(llama_backend), **contract_settings("rrr").to_dict())
    answer = rag.ask("what is the capital of france")
    filters = [s for s in answer.trace.stages if s.name == "filter"]
    assert filters and all(s.kind == "threshold" and s.details.tau == 1.0 for s in filters)
    for stage in answer.trace.stages:
        for candidate in stage.output:
            assert all(score["rank"] >= 1 for score in candidate["scores"]), (stage.name, candidate["scores"])


def test_a_recipe_prints_as_it_is_composed(index):
    """``>>`` composes flat, ``%`` is a cut after the stage, and the repr shows each stage's arguments
    that differ from its defaults (never a model object)."""
    retrieve = Retriever(index, n=4)
    cut = retrieve % 2
    assert repr(cut) == "Retriever(index='bm25', n=4) % 2"
    assert (retrieve >> Recipe()) == Recipe.of(retrieve) and len(retrieve >> cut) == 3
    assert (retrieve >> (cut >> retrieve)).steps == ((retrieve >> cut) >> retrieve).steps
    with pytest.raises(TypeError, match="not a stage"):
        retrieve >> "generate"  # noqa: B018
    reader = Reader(llm=object(), max_tokens=8)  # type: ignore[arg-type]  # printed, never run
    assert repr(retrieve % 2 >> reader) == "Retriever(index='bm25', n=4) % 2 >> Reader(max_tokens=8)"
