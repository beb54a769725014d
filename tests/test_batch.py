"""Stage-wise batches: a method over many questions answers exactly as it does one at a time.

Real SmolLM2-135M through llama.cpp and a real BM25 index, no call cache (so the batch path really
asks the model). Every method runs a batch of questions, then each question alone; answers, final
passages, every stage's scores, the LLM calls and their count per question must agree.
"""

from __future__ import annotations

import pytest

from winnow.llm import LLM
from winnow.methods import build_method
from winnow.stages import Stage

QUESTIONS = ["what is the capital of france", "who painted the mona lisa"]
SETTINGS = {"vanilla": {"k": 2}, "rankrag": {"n": 4, "k": 2}, "rankgpt": {"n": 4, "k": 2, "window": 3, "step": 2},
            "mainrag": {"n": 3}, "rrr": {"n": 4, "k": 2, "rewrites": 2, "window": 3, "step": 2}}


def _stage_view(answer):
    return [(s.name, s.kind, [c["id"] for c in s.output], [round(c["score"], 4) for c in s.output],
             [(c.kind, c.messages, c.output if c.kind == "generate" else None) for c in s.llm_calls], s.usage.calls)
            for s in answer.trace.stages]


@pytest.mark.llm
@pytest.mark.parametrize("method", list(SETTINGS))
def test_a_batch_answers_as_each_question_alone(index, llama_backend, method):
    llm = LLM(llama_backend)  # no cache: both paths call the model
    rag = build_method(method, index=index, llm=llm, **SETTINGS[method])
    batched = rag.ask_batch(QUESTIONS)
    alone = [rag.ask(q) for q in QUESTIONS]
    for together, single in zip(batched, alone):
        assert together.text == single.text
        assert [c.passage.id for c in together.passages] == [c.passage.id for c in single.passages]
        assert _stage_view(together) == _stage_view(single)
        assert together.usage.calls == single.usage.calls > 0
        # The first stage ran with every question (a loop's later rounds may run with fewer).
        assert together.trace.stages[0].batch == len(QUESTIONS) and single.trace.stages[0].batch == 1


@pytest.mark.llm
def test_every_stage_of_every_method_keeps_the_contract(index, llama_backend):
    for method, settings in SETTINGS.items():
        rag = build_method(method, index=index, llm=LLM(llama_backend), **settings)
        stages = rag.recipe or [rag.retriever, rag.relevance, rag.filter, rag.rewriter, rag.reranker, rag.reader]
        assert all(isinstance(stage, Stage) for stage in stages), method


@pytest.mark.llm
def test_rrr_uses_its_threshold_stage_and_one_based_ranks(index, llama_backend):
    rag = build_method("rrr", index=index, llm=LLM(llama_backend), **SETTINGS["rrr"])
    answer = rag.ask("what is the capital of france")
    filters = [s for s in answer.trace.stages if s.name == "filter"]
    assert filters and all(s.kind == "threshold" and s.details.tau == 1.0 for s in filters)
    for stage in answer.trace.stages:
        for candidate in stage.output:
            assert all(score["rank"] >= 1 for score in candidate["scores"]), (stage.name, candidate["scores"])
