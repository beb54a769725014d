"""Every registered method keeps the method and Stage contracts (winnow.testing), on the real model.

Real SmolLM2-135M through llama.cpp and a real BM25 index, no call cache (so the batch path really
asks the model). The methods come from the registry (``METHODS``) with their settings types'
contract runs, so a method added there is checked here with nothing else to write: each runs a
batch of questions, then each question alone, and stage by stage along its recipe; answers, final
passages, every stage's scores, the LLM calls and their count per question must agree, and every
stage record must be its kind's.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from winnow.llm import LLM
from winnow.methods import METHODS, build_method
from winnow.records import Query
from winnow.stages import ListStage, QuestionState, Reader, Recipe, Retriever, recording
from winnow.testing import QUESTIONS, ContractError, MethodContract, check_step, contract_settings


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


@dataclass
class _CutToBatchSize(ListStage):
    """A stage that breaks the contract the way a careless one would: its cut depends on the batch,
    and (``first_only``) it records only the first question, or (``kind``) a kind with no record."""

    first_only: bool = False
    kind: str = "threshold"
    name: str = "cut"

    def run(self, batch):
        with recording(batch[:1] if self.first_only else batch, self.name, self.kind, {}) as traces:
            for state, stage in zip(batch, traces, strict=False):
                state.candidates = state.ranked.truncated(len(batch) + 1)
                stage.output = state.ranked.to_dicts()
        for state in batch[len(traces):]:
            state.candidates = state.ranked.truncated(len(batch) + 1)


@pytest.mark.parametrize("stage, message", [
    (_CutToBatchSize(), "moved on differently alone"),
    (_CutToBatchSize(first_only=True), r"\[1, 0\] StageTraces for the 2 questions"),
    (_CutToBatchSize(kind="cutting"), "has no details record"),
])
def test_the_stage_checks_catch_a_stage_that_breaks_the_contract(index, stage, message):
    batch = [QuestionState(Query(q)) for q in QUESTIONS]
    check_step(Retriever(index, n=4), batch)  # a stage that keeps the contract passes
    with pytest.raises(ContractError, match=message):
        check_step(stage, batch)
