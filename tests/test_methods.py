"""RankRAG and vanilla end to end: a real BM25 index and the real SmolLM2-135M model."""

import json

import pytest

from winnow.errors import WinnowError
from winnow.methods import METHODS, build_method

pytestmark = pytest.mark.llm


def test_rankrag_reranks_the_retrieved_passages_and_answers(index, llm):
    rag = build_method("rankrag", index=index, llm=llm, n=4, k=2)
    answer = rag.ask("what is the capital of france")
    assert answer.text
    assert len(answer.passages) == 2
    retrieve, rerank, generate = answer.trace.stages
    assert (retrieve.name, rerank.name, generate.name) == ("retrieve", "rerank", "generate")
    assert len(retrieve.output) == 4 and len(rerank.input) == 4 and len(rerank.output) == 2
    # One single-token P("True") call per retrieved passage, one generation.
    assert rerank.usage.calls == 4 and rerank.usage.completion_tokens == 0
    assert generate.usage.calls == 1 and generate.usage.completion_tokens > 0
    for candidate in answer.passages:
        assert candidate.rank_of("bm25") is not None
        assert 0.0 <= candidate.score_of("rerank") <= 1.0
    scores = [c.score_of("rerank") for c in answer.passages]
    assert scores == sorted(scores, reverse=True)
    # The reader saw exactly the kept passages, in order, with the D.2 prompt.
    [call] = generate.llm_calls
    user = call.messages[-1]["content"]
    assert user.startswith(f"Passage 1: {answer.passages.candidates[0].passage.title}")
    assert user.endswith("what is the capital of france. Answer the above question with a short phrase.")


def test_rankrag_scores_every_passage_with_the_context_ranking_prompt(index, llm):
    answer = build_method("rankrag", index=index, llm=llm, n=3, k=3).ask("largest planet")
    rerank = answer.trace.stages[1]
    assert [c.messages[-1]["content"].split("\n")[0] for c in rerank.llm_calls] == [
        f"Passage: {c['title']} {c['text']}" for c in rerank.input]
    assert all(set(c.output) == {"True", "False"} for c in rerank.llm_calls)
    assert all(sum(c.output.values()) == pytest.approx(1.0, abs=1e-5) for c in rerank.llm_calls)


def test_vanilla_answers_from_the_bm25_top_k(index, llm):
    answer = build_method("vanilla", index=index, llm=llm, k=2).ask("who painted the mona lisa")
    assert [c.passage.id for c in answer.passages][0] == "mona"
    assert [s.name for s in answer.trace.stages] == ["retrieve", "generate"]
    assert answer.usage.calls == 1


def test_second_ask_is_served_from_the_cache(index, llm):
    rag = build_method("rankrag", index=index, llm=llm, n=3, k=2)
    first = rag.ask("which river is in africa")
    second = rag.ask("which river is in africa")
    assert second.text == first.text
    assert second.usage.calls == 0 and second.usage.cache_hits == first.usage.calls


def test_answer_json_has_the_promised_fields(index, llm):
    data = build_method("rankrag", index=index, llm=llm, n=3, k=2).ask("capital of italy").to_dict()
    assert {"question", "answer", "method", "passages", "usage", "trace", "settings"} <= set(data)
    assert {"id", "title", "text", "score", "rank"} <= set(data["passages"][0])
    assert data["settings"]["n"] == 3 and data["settings"]["k"] == 2
    json.dumps(data)  # serialisable


@pytest.mark.parametrize("overrides, message", [
    ({"n": 3, "k": 5}, "cannot exceed setting .n."),
    ({"n": 0}, "at least 1"),
    ({"temperature": 1}, "no setting"),
])
def test_bad_settings_name_the_option(index, llm, overrides, message):
    with pytest.raises(WinnowError, match=message):
        build_method("rankrag", index=index, llm=llm, **overrides)


def test_unknown_method_lists_the_known_ones(index, llm):
    with pytest.raises(WinnowError, match="rankrag"):
        build_method("nope", index=index, llm=llm)
    assert {"vanilla", "rankrag"} <= set(METHODS)
