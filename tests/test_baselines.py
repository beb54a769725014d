"""The papers' baselines that retrieve or filter nothing: ``no-retrieval`` (RankRAG's and MAIN-RAG's
rows without retrieval) and ``mainrag-unfiltered`` (MAIN-RAG's instruction over every retrieved
document), and a k of 0 honoured or refused, never dropped, from every front door.

A scripted reader records what it is sent (what is tested is the prompt, not a model's answer); the
index is the real eight-passage BM25 index, the CLI runs in process.
"""

from __future__ import annotations

import re

import pytest
from cli_runner import winnow

from winnow.llm import LLM
from winnow.llm.base import Generation
from winnow.methods import METHODS, build_method, method_settings
from winnow.service.limits import ApiError, Limits, check_settings
from winnow.settings import SettingError


class RecordingReader:
    """Answers "ok" and keeps every prompt it was sent."""

    batch_size = 1
    identity = {"backend": "recording-reader"}

    def __init__(self) -> None:
        self.prompts: list = []

    def generate(self, prompts, *, max_tokens, temperature=0.0, stop=()):
        self.prompts.extend(prompts)
        return [Generation("ok", 10, 1, 0.0) for _ in prompts]

    def choice_logprobs(self, prompts, choices):
        raise AssertionError("the baselines only generate")

    def close(self):
        pass


def test_both_baselines_are_registered_methods():
    assert {"no-retrieval", "mainrag-unfiltered"} <= set(METHODS)


def test_no_retrieval_asks_the_d2_prompt_with_no_passages(index):
    reader = RecordingReader()
    answer = build_method("no-retrieval", index=index, llm=LLM(reader)).ask("who painted the mona lisa")
    assert [s.name for s in answer.trace.stages] == ["generate"] and len(answer.passages) == 0
    [(system, user)] = reader.prompts
    assert user == {"role": "user", "content": "who painted the mona lisa. Answer the above question with a short "
                                               "phrase."}
    assert "Passage" not in system["content"]


def test_no_retrieval_in_the_plain_framing_is_d2_without_its_passage_blocks(index):
    reader = RecordingReader()
    build_method("no-retrieval", index=index, llm=LLM(reader), profile="paper").ask("who painted the mona lisa")
    [text] = reader.prompts
    assert text.startswith("System: This is a chat between a user and an artificial intelligence assistant.")
    assert text.endswith("\n\nUser: who painted the mona lisa. Answer the above question with a short phrase."
                         "\n\nAssistant:") and "Passage" not in text


def test_no_retrieval_with_mainrags_instruction(index):
    reader = RecordingReader()
    build_method("no-retrieval", index=index, llm=LLM(reader), prompt="mainrag").ask("who painted the mona lisa")
    [(system, user)] = reader.prompts
    assert system["content"].startswith("You are an accurate and reliable AI assistant")
    assert user == {"role": "user", "content": "Question: who painted the mona lisa"}
    with pytest.raises(SettingError, match="prompt 'mainrag' is MAIN-RAG's Agent-3 instruction"):
        method_settings("no-retrieval", prompt="mainrag", framing="plain")


def test_mainrag_unfiltered_reads_all_n_in_retrieval_order_with_agent_3s_prompt(index):
    reader = RecordingReader()
    answer = build_method("mainrag-unfiltered", index=index, llm=LLM(reader), n=4).ask("capital city of france")
    retrieve, final = answer.trace.stages
    assert (retrieve.name, final.name) == ("retrieve", "final_predict")
    assert [c.passage.id for c in answer.passages] == [c["id"] for c in retrieve.output] and len(answer.passages) == 4
    [(system, user)] = reader.prompts
    assert system["content"].startswith("You are an accurate and reliable AI assistant")
    titles = [c["title"] for c in retrieve.output]
    assert user["content"].startswith(f"Document 1: {titles[0]}\n")
    assert all(f"Document {i}: {title}\n" in user["content"] for i, title in enumerate(titles, start=1))
    assert user["content"].endswith("Question: capital city of france")


@pytest.mark.parametrize("method, overrides, message", [
    ("no-retrieval", {"k": 3}, "setting 'k' (3) has no meaning for method no-retrieval"),
    ("no-retrieval", {"n": 20}, "setting 'n' (20) has no meaning for method no-retrieval"),
    ("mainrag-unfiltered", {"k": 5}, "setting 'k' (5) has no meaning for method mainrag-unfiltered"),
    ("vanilla", {"k": 0}, "--method no-retrieval answers from none"),
    ("rankrag", {"k": 0}, "--method no-retrieval answers from none"),
    ("mainrag", {"k": 0}, "--method no-retrieval answers from none"),
])
def test_a_count_a_method_cannot_honour_is_refused_with_the_reason(method, overrides, message):
    with pytest.raises(SettingError, match=re.escape(message)):
        method_settings(method, **overrides)


@pytest.mark.parametrize("method, flags, message", [
    ("vanilla", ["--k", "0"], "--method no-retrieval answers from none"),
    ("rankgpt", ["--k", "0"], "--method no-retrieval answers from none"),
    ("rankrag", ["--n", "0"], "setting 'n' must be at least 1 (got 0)"),
    ("no-retrieval", ["--k", "2"], "has no meaning for method no-retrieval"),
])
def test_winnow_ask_passes_a_zero_on_rather_than_dropping_it(index, method, flags, message):
    """`--k 0` was taken for "not given" (0 == False) and the run went on with k = 5."""
    result = winnow("ask", "-i", index.path, "--method", method, *flags, "who painted the mona lisa")
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_a_server_request_for_no_retrieval_takes_no_counts():
    limits = Limits(max_n=50, max_k=10)
    assert check_settings("no-retrieval", {}, {}, limits)["k"] == 0
    with pytest.raises(ApiError, match="has no meaning for method no-retrieval"):
        check_settings("no-retrieval", {}, {"k": 3}, limits)
    assert check_settings("mainrag-unfiltered", {}, {"n": 8}, limits)["n"] == 8
    # A server started with its own counts (`winnow serve --n 4 --k 2`) does not impose them on a
    # method that does not read them; a request that asks for one is refused.
    assert check_settings("no-retrieval", {"n": 4, "k": 2}, {}, limits)["k"] == 0
    assert check_settings("mainrag-unfiltered", {"n": 4, "k": 2}, {}, limits)["n"] == 4
