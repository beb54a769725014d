"""llama.cpp in-process with parallel slots: several sequences decoded together.

Real SmolLM2-135M. What slots guarantee is tested: llama.cpp really holds S sequences with
``context_size`` tokens each, a stage's calls really overlap, every prompt gets its own answer in
order, and the answers agree with one slot's up to llama.cpp's batch-dependent rounding (not to
the last bit: decoding several sequences together sums in another order, bench/bench_slots.py).
"""

from __future__ import annotations

import threading

import httpx
import pytest
from fast_model import suite_model

from winnow.errors import WinnowError
from winnow.llm import LLM, load_llm
from winnow.llm.llamacpp import LlamaCppBackend
from winnow.methods import build_method
from winnow.pipeline import Pipeline, RunSpec
from winnow.records import StageTrace
from winnow.settings import SettingError

MODEL = suite_model()

COUNTRIES = ["France", "Italy", "Spain", "Japan", "Egypt", "Peru"]


def _ask(country: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"What is the capital of {country}? Answer in one word."}]


def _judge(country: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Is Paris the capital of {country}? Answer True or False."}]


class _Overlap:
    """Counts how many calls are inside llama.cpp at once (the real server does the work)."""

    def __init__(self, server) -> None:
        self.server, self.now, self.most = server, 0, 0
        self.lock = threading.Lock()

    def handle_chat_completions(self, body):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            return self.server.handle_chat_completions(body)
        finally:
            with self.lock:
                self.now -= 1


@pytest.fixture(scope="module")
def four_slots(smollm2):
    backend = LlamaCppBackend(smollm2.path, model_name=smollm2.name, model_sha256=smollm2.sha256,
                              context_size=1024, slots=4)
    yield backend
    backend.close()


@pytest.mark.llm
def test_each_slot_holds_context_size_tokens(four_slots):
    props = httpx.get(f"{four_slots.http_address}/props", timeout=30).json()
    assert props["total_slots"] == 4
    assert props["default_generation_settings"]["n_ctx"] == 1024 == four_slots.context_size
    assert "for each of 4 slots" in four_slots.context_size_source
    assert four_slots.identity["slots"] == 4  # its answers are not one slot's: the call cache keeps them apart


@pytest.mark.llm
def test_a_batch_runs_in_the_slots_and_agrees_with_one_slot(four_slots, llama_backend):
    spy = _Overlap(four_slots._server)
    four_slots._server = spy
    progress: list[int] = []
    try:
        together = LLM(four_slots, progress=lambda stage, done, total: progress.append(done))
        trace = StageTrace("answer", "reader")
        texts = together.generate([_ask(c) for c in COUNTRIES], stage=trace, max_tokens=6)
        scores = together.choice_scores([_judge(c) for c in COUNTRIES], ["True", "False"], stage=trace)
    finally:
        four_slots._server = spy.server
    assert spy.most > 1  # the calls overlapped in llama.cpp
    assert progress == [*range(1, 7), *range(1, 7)]  # each finished call reported
    assert four_slots.inflight == 0 and four_slots.tokens_done > 0

    alone = LLM(llama_backend)
    one_trace = StageTrace("answer", "reader")
    one_texts = alone.generate([_ask(c) for c in COUNTRIES], stage=one_trace, max_tokens=6)
    one_scores = alone.choice_scores([_judge(c) for c in COUNTRIES], ["True", "False"], stage=one_trace)
    # Each prompt got its own answer, in order: the same prompt tokens and nearly the same scores.
    assert [g.prompt_tokens for g in texts] == [g.prompt_tokens for g in one_texts]
    assert [s.prompt_tokens for s in scores] == [s.prompt_tokens for s in one_scores]
    for mine, single in zip(scores, one_scores, strict=True):
        assert mine.logprobs["True"] == pytest.approx(single.logprobs["True"], abs=0.15)
    assert "Rome" in texts[1].text and "Tokyo" in texts[3].text  # Italy's and Japan's, not a neighbour's
    assert [c.output for c in trace.llm_calls][:6] == [g.text for g in texts]


@pytest.mark.llm
def test_a_method_batch_over_slots_answers_every_question(four_slots, llama_backend, index):
    questions = ["what is the capital of france", "who painted the mona lisa"]
    settings = {"n": 3, "k": 1, "max_answer_tokens": 8}
    answers = build_method("rankrag", index=index, llm=LLM(four_slots), **settings).ask_batch(questions)
    alone = build_method("rankrag", index=index, llm=LLM(llama_backend), **settings).ask_batch(questions)
    assert [a.usage.calls for a in answers] == [a.usage.calls for a in alone] and answers[0].usage.calls == 4
    assert all(a.text.strip() for a in answers)
    assert [a.trace.stages[0].output for a in answers] == [a.trace.stages[0].output for a in alone]


@pytest.mark.parametrize("value", [0, -2, 1.5, "four", True])
def test_bad_slot_values_are_refused_naming_the_option(value):
    with pytest.raises(SettingError, match="slots") as caught:
        RunSpec.resolve(run={"method": "vanilla", "slots": value})
    assert caught.value.setting == "slots"
    with pytest.raises(WinnowError, match="slots"):
        load_llm(MODEL, slots=value, cache=False)


@pytest.mark.parametrize("backend", ["openai", "transformers"])
def test_slots_are_refused_where_they_mean_nothing(backend):
    with pytest.raises(SettingError, match=f"'slots' applies to the in-process llama.cpp backend, not '{backend}'"):
        RunSpec.resolve(run={"method": "vanilla", "backend": backend, "slots": 2})
    with pytest.raises(WinnowError, match="llama-server --parallel"):
        load_llm("m", backend=backend, base_url="http://127.0.0.1:9/v1", slots=2, cache=False)


def test_slots_are_recorded_only_when_they_change_answers():
    assert "slots" not in RunSpec.resolve(run={"method": "vanilla", "slots": 1}).to_dict()
    assert RunSpec.resolve(run={"method": "vanilla", "slots": 3.0}).to_dict()["slots"] == 3


@pytest.mark.llm
def test_the_run_option_reaches_llama_cpp(index):
    spec = RunSpec.resolve(run={"method": "vanilla", "model": "smollm2-135m", "slots": 2, "context_size": 512})
    with Pipeline(spec, index.path, cache=False) as pipeline:
        assert pipeline.llm.backend.slots == 2 and pipeline.llm.context_size == 512
