"""Fitting passages to the model's context, measured and checked with the real SmolLM2-135M.

The model runs with a 512-token context so that a 20,000-character passage is far too long; every
fitted prompt is counted by the model's own tokenizer and then really sent to it.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from winnow.errors import WinnowError
from winnow.llm import LLM
from winnow.llm.llamacpp import LlamaCppBackend
from winnow.prompts import graded_prompt, listwise_prompt, prompt
from winnow.records import Passage, StageTrace
from winnow.stages.fitting import fit_passages, largest_budget

pytestmark = pytest.mark.llm

CONTEXT = 512
QUESTION = "who painted the mona lisa"
SENTENCE = "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci. "
LONG = Passage("long", (SENTENCE * 250)[:20_000], "Mona Lisa")


@contextmanager
def model_with_context(smollm2, context_size):
    backend = LlamaCppBackend(smollm2.path, model_name=smollm2.name, model_sha256=smollm2.sha256,
                              context_size=context_size)
    try:
        yield LLM(backend)
    finally:
        backend.close()


@pytest.fixture(scope="module")
def small_llm(smollm2):
    with model_with_context(smollm2, CONTEXT) as llm:
        yield llm


#: The smallest context llama.cpp allocates: the methods' prompts are cut hardest, and cost least.
TIGHT_CONTEXT = 256


@pytest.fixture(scope="module")
def tight_llm(smollm2):
    with model_with_context(smollm2, TIGHT_CONTEXT) as llm:
        yield llm


def _fits(llm, messages, output_tokens):
    return llm.count_prompt_tokens(messages) + output_tokens <= llm.context_size


def test_a_passage_longer_than_the_context_is_cut_to_fit(small_llm):
    template = prompt("rankrag.context_ranking")
    render = lambda passages: template.messages(QUESTION, passages)  # noqa: E731
    assert not _fits(small_llm, render([LONG]), 1)

    fitted = fit_passages(small_llm, render, [LONG], output_tokens=1)

    messages = render(fitted.passages)
    assert small_llm.count_prompt_tokens(messages) == fitted.prompt_tokens
    assert fitted.prompt_tokens + 1 <= CONTEXT
    assert fitted.prompt_tokens > CONTEXT - 40  # the room is used, not wasted
    # The instructions and the question are whole; the passage is a prefix of the original.
    assert messages[0]["content"] == template.system
    assert messages[1]["content"].endswith(template.user.format(question=QUESTION))
    assert LONG.text.startswith(fitted.passages[0].text) and fitted.passages[0].title == "Mona Lisa"
    [cut] = fitted.cuts
    assert cut.passage_id == "long" and cut.tokens_before == small_llm.count_tokens(LONG.text) > 3000
    assert cut.tokens_after == small_llm.count_tokens(fitted.passages[0].text) <= fitted.passage_budget
    assert (cut.chars_before, cut.chars_after) == (20_000, len(fitted.passages[0].text))
    record = fitted.to_dict()
    assert record["context_size"] == CONTEXT and record["token_counting"].startswith("exact")
    assert record["cut"][0]["passage_id"] == "long"
    # The model takes it: its own usage agrees with our count.
    trace = StageTrace("fit", "test")
    [scores] = small_llm.choice_scores([messages], ("True", "False"), stage=trace)
    assert scores.prompt_tokens == fitted.prompt_tokens


def test_unfitted_prompt_is_refused_by_the_model_itself(small_llm):
    # The failure fitting prevents: llama.cpp refuses the whole request.
    from winnow.errors import BackendError

    template = prompt("rankrag.context_ranking")
    with pytest.raises(BackendError, match="exceeds the available context size"):
        small_llm.backend.generate([template.messages(QUESTION, [LONG])], max_tokens=4)


def test_short_passages_keep_their_text_and_long_ones_share_the_rest(small_llm):
    template = prompt("rankrag.rag")
    short = [Passage(f"s{i}", f"Short passage number {i} about Leonardo.", "") for i in range(3)]
    other = Passage("other", ("Paris is the capital of France. " * 400), "Paris")
    passages = [short[0], LONG, short[1], other, short[2]]
    render = lambda ps: template.messages(QUESTION, ps)  # noqa: E731
    fitted = fit_passages(small_llm, render, passages, output_tokens=32)

    assert [p.id for p in fitted.passages] == [p.id for p in passages]  # order and ids kept
    assert [fitted.passages[i] for i in (0, 2, 4)] == short
    assert {c.passage_id for c in fitted.cuts} == {"long", "other"}
    # One budget for both long passages (within a token of each other after decoding).
    afters = [c.tokens_after for c in fitted.cuts]
    assert max(afters) <= fitted.passage_budget and max(afters) - min(afters) <= 2
    assert _fits(small_llm, render(fitted.passages), 32)
    [answer] = small_llm.backend.generate([render(fitted.passages)], max_tokens=32)
    assert answer.prompt_tokens == fitted.prompt_tokens


def test_listwise_window_of_long_passages_fits(small_llm):
    template = listwise_prompt("rrr.listwise")
    passages = [Passage(f"p{i}", (f"Passage {i} talks about painters. " * 200), f"Title {i}") for i in range(10)]
    render = lambda ps: template.messages(QUESTION, ps)  # noqa: E731
    fitted = fit_passages(small_llm, render, passages, output_tokens=45)
    assert len(fitted.cuts) == 10
    assert fitted.passage_budget < 64 and "small for 10 passage(s)" in fitted.notes[-1]
    assert fitted.prompt_tokens + 45 <= CONTEXT == fitted.context_size
    assert small_llm.count_prompt_tokens(render(fitted.passages)) == fitted.prompt_tokens


def test_graded_prompt_with_a_prefilled_answer_fits(small_llm):
    template = graded_prompt("rrr.relevance")
    render = lambda ps: template.messages(QUESTION, ps[0])  # noqa: E731
    fitted = fit_passages(small_llm, render, [LONG], output_tokens=1)
    messages = render(fitted.passages)
    assert messages[-1] == {"role": "assistant", "content": template.answer_prefix}
    [scores] = small_llm.choice_scores([messages], ("1", "2", "3", "4", "5"), stage=StageTrace("g", "test"))
    assert scores.prompt_tokens == fitted.prompt_tokens <= CONTEXT - 1


def test_prompts_that_fit_are_left_alone_unless_capped(small_llm):
    template = prompt("rankrag.context_ranking")
    render = lambda ps: template.messages(QUESTION, ps)  # noqa: E731
    passage = Passage("p", SENTENCE * 3, "Mona Lisa")
    fitted = fit_passages(small_llm, render, [passage], output_tokens=1)
    assert fitted.passages == [passage] and fitted.cuts == [] and fitted.passage_budget is None
    # A cap (RankGPT's per-passage limit, in tokens) applies even when everything would fit.
    capped = fit_passages(small_llm, render, [passage], output_tokens=1, max_passage_tokens=10)
    assert capped.passage_budget == 10 and capped.cuts[0].tokens_after <= 10
    assert passage.text.startswith(capped.passages[0].text)


def test_no_room_for_passages_names_the_context_size(small_llm):
    template = prompt("rankrag.context_ranking")
    question = "who painted " + "the famous portrait " * 150
    render = lambda ps: template.messages(question, ps)  # noqa: E731
    with pytest.raises(WinnowError, match=r"model's context of 512 tokens .*context_size=512") as caught:
        fit_passages(small_llm, render, [LONG], output_tokens=1)
    assert "context_size option" in caught.value.hint


def test_largest_budget_is_water_filling():
    assert largest_budget([10, 20, 1000], room=330, cap=330) == 300  # the short ones keep theirs
    assert largest_budget([10, 20, 30], room=330, cap=330) == 330  # all fit: only the cap binds
    assert largest_budget([500, 500], room=301, cap=301) == 150
    assert largest_budget([500, 500], room=1000, cap=100) == 100
    assert largest_budget([], room=10, cap=10) == 10


# --- every stage fits its prompts, over long documents, in every method -------------------------------

@pytest.fixture(scope="module")
def long_index(tmp_path_factory):
    """A real BM25 index of the small corpus with every text repeated to 20,000 characters."""
    import json

    from small_corpus import PASSAGES

    from winnow.corpus import load_corpus
    from winnow.index import BM25Index, build_bm25_index

    folder = tmp_path_factory.mktemp("long-corpus")
    source = folder / "corpus.jsonl"
    source.write_text("\n".join(json.dumps({**p, "text": ((p["text"] + " ") * 400)[:20_000]}) for p in PASSAGES))
    build_bm25_index(load_corpus(source).passages, folder / "index", source=str(source), source_checksum="x",
                     progress=False)
    return BM25Index.open(folder / "index")


METHOD_SETTINGS = {"vanilla": {"k": 3}, "rankrag": {"n": 3, "k": 2}, "mainrag": {"n": 2},
                   "rrr": {"n": 3, "k": 2, "rewrites": 2, "window": 3, "step": 2},
                   "rankgpt": {"n": 3, "k": 2, "window": 3, "step": 2}}


@pytest.mark.parametrize("method", list(METHOD_SETTINGS))
def test_every_stage_of_every_method_fits_long_documents(tight_llm, long_index, method):
    from winnow.methods import build_method

    answer = build_method(method, index=long_index, llm=tight_llm, **METHOD_SETTINGS[method]).ask(
        "what is the capital of france")
    llm_stages = [s for s in answer.trace.stages if s.llm_calls]
    assert llm_stages and answer.passages and answer.trace.stages[0].output  # the question finds passages
    for stage in llm_stages:
        for call in stage.llm_calls:
            # Every prompt the model received fitted with room for the answer asked for.
            assert tight_llm.count_prompt_tokens(call.messages) <= TIGHT_CONTEXT, (stage.name, call.prompt_tokens)
        if any(len(c.get("text", "")) > 10_000 for c in stage.input):
            assert stage.details.fitted, f"{method}: {stage.name} recorded no cut"
            cut = stage.details.fitted[0]
            assert cut["chars_before"] > cut["chars_after"] and cut["context_size"] == TIGHT_CONTEXT
    # The candidates keep their whole text: only what was sent was cut.
    assert all(len(c.passage.text) >= 14_000 for c in answer.passages)  # as indexed (the shortest is 14,000)


def test_an_answer_cut_by_its_token_limit_says_so(small_llm, long_index):
    from winnow.methods import build_method
    from winnow.report import answer_notes

    answer = build_method("vanilla", index=long_index, llm=small_llm, k=1, max_answer_tokens=1).ask(
        "describe the capital of france in detail")
    [reader] = [s for s in answer.trace.stages if s.kind == "reader"]
    assert reader.details.finish_reason == "length" and reader.details.cut_by_token_limit
    assert answer.to_dict()["answer_cut_by_token_limit"] is True
    assert any("cut at max_answer_tokens=1" in note for note in answer_notes(answer))
