"""RankGPT listwise reranking (Sun et al., 2023) with RRR's prompt (Appendix A.3): windows, repair, stage."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from winnow.llm import LLM
from winnow.llm.base import Generation
from winnow.prompts import listwise_prompt
from winnow.records import Candidate, CandidateList, Passage, Query, StageScore, Trace
from winnow.stages import ListwiseReranker, parse_permutation, sliding_windows
from winnow.stages.listwise import ranking_token_budget

# --- sliding_windows ---------------------------------------------------------------------------


def test_windows_100_passages_w20_s10():
    windows = sliding_windows(100, 20, 10)
    assert len(windows) == 9
    assert windows[0] == (80, 100) and windows[-1] == (0, 20)


def test_windows_25_passages_w10_s5_last_covers_the_first_passage():
    assert sliding_windows(25, 10, 5) == [(15, 25), (10, 20), (5, 15), (0, 10)]


def test_final_partial_window_is_included():
    # RankGPT's loop stops at (3, 13) and never ranks passages 0-2.
    assert sliding_windows(23, 10, 5) == [(13, 23), (8, 18), (3, 13), (0, 8)]


@pytest.mark.parametrize("n", [1, 5, 10])
def test_a_list_no_longer_than_the_window_is_one_window(n):
    assert sliding_windows(n, 10, 5) == [(0, n)]


def test_rrr_appendix_b_call_count_for_the_gpt4_pass():
    # App. B: ((30 - w) // s) + 1 calls for the top 30 with w=10, s=5.
    assert len(sliding_windows(30, 10, 5)) == (30 - 10) // 5 + 1 == 5


def test_no_passages_no_windows():
    assert sliding_windows(0, 10, 5) == []


@pytest.mark.parametrize("window, step", [(0, 1), (10, 0), (5, 6)])
def test_bad_window_settings_are_refused(window, step):
    with pytest.raises(ValueError):
        sliding_windows(20, window, step)


@given(st.integers(0, 300), st.integers(1, 40), st.data())
def test_windows_cover_everything_back_to_front(n, window, data):
    step = data.draw(st.integers(1, window))
    windows = sliding_windows(n, window, step)
    if n == 0:
        assert windows == []
        return
    assert windows[0][1] == n and windows[-1][0] == 0
    assert all(0 <= start < end <= n and end - start <= window for start, end in windows)
    assert [end for _, end in windows] == list(range(n, n - step * len(windows), -step))
    assert set().union(*(range(s, e) for s, e in windows)) == set(range(n))
    assert len(windows) == (1 if n <= window else math.ceil((n - window) / step) + 1)
    rankgpt_count = (n - window) // step + 1 if n >= window else 0
    if n > window:  # RankGPT's own loop is one window short exactly when (n - w) % s != 0
        assert len(windows) == rankgpt_count + ((n - window) % step != 0)


# --- parse_permutation -------------------------------------------------------------------------


@pytest.mark.parametrize("text, n, order", [
    ("[2] > [3] > [1]", 3, [1, 2, 0]),
    ("[2] >> [3] >> [1]", 3, [1, 2, 0]),
    ("[3] > [1]", 4, [2, 0, 1, 3]),  # missing ids follow in their previous order
    ("[2] > [2] > [9] > [0] > [1]", 3, [1, 0, 2]),  # repeats, out of range and 0 dropped
    ("The most relevant passages are [1] and [2].", 3, [0, 1, 2]),
    ("", 3, [0, 1, 2]),
    ("[10] > [1] > [02]", 10, [9, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
    ("[1] > [²] > [٣]", 3, [0, 1, 2]),  # only ASCII digits are ids
    ("9" * 5000 + " [2]", 2, [1, 0]),  # a huge number is out of range, not a crash
    ("[1] > [2]", 0, []),
])
def test_parse_permutation_hand_cases(text, n, order):
    assert parse_permutation(text, n) == order


@given(st.text(), st.integers(0, 40))
def test_parse_permutation_of_any_text_is_a_permutation(text, n):
    assert sorted(parse_permutation(text, n)) == list(range(n))


@given(st.text(alphabet="[]> 0123456789,\n"), st.integers(0, 25))
def test_parse_permutation_of_ranking_like_text_is_a_permutation(text, n):
    assert sorted(parse_permutation(text, n)) == list(range(n))


@given(st.permutations(list(range(12))))
def test_a_well_formed_ranking_is_read_exactly(order):
    text = " > ".join(f"[{i + 1}]" for i in order)
    assert parse_permutation(text, 12) == order


def test_token_budget_covers_a_full_ranking():
    # Measured on SmolLM2's tokenizer: 40 tokens for 10 ids, 90 for 20 (one token per digit).
    assert ranking_token_budget(10) >= 40 and ranking_token_budget(20) >= 90
    assert ranking_token_budget(10) <= 5 * 10


# --- the A.3 prompt ----------------------------------------------------------------------------

SYSTEM = "You are RankGPT, an intelligent assistant that can rank passages based on their relevancy to the query."
# RRR Appendix A.3 as printed.
PAPER_A3_INSTRUCTION = (
    "Rank the {num} passages above based on their relevance to the search query. The passages should be "
    "listed in descending order using identifiers. The most relevant passages should be listed first. The "
    "output format should be [] >> [], e.g., [1] >> [2]. Only response the ranking results, do not say any "
    "word or explain.")


def test_listwise_prompt_matches_appendix_a3():
    passages = [Passage(id="a", text="Hamlet is a tragedy."), Passage(id="b", title="Paris", text="A city.")]
    messages = listwise_prompt("rrr.listwise").messages("who wrote hamlet", passages)
    assert messages == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "I will provide you with 2 passages, each indicated by number identifier []. "
                                    "Rank the passages based on their relevance to query: who wrote hamlet"},
        {"role": "assistant", "content": "Okay, please provide the passages."},
        {"role": "user", "content": "[1] Hamlet is a tragedy."},
        {"role": "assistant", "content": "Received passage [1]"},
        {"role": "user", "content": "[2] Paris A city."},
        {"role": "assistant", "content": "Received passage [2]"},
        {"role": "user", "content": PAPER_A3_INSTRUCTION.format(num=2)},
    ]


def test_rankgpt_variant_keeps_the_released_code_wording():
    messages = listwise_prompt("rrr.listwise_rankgpt").messages("who wrote hamlet", [Passage(id="a", text="x")])
    assert messages[1]["content"].endswith(" []. \nRank the passages based on their relevance to query: who wrote hamlet.")
    assert messages[4] == {"role": "assistant", "content": "Received passage [1]."}
    assert messages[-1]["content"].startswith("Search Query: who wrote hamlet. \nRank the 1 passages above")
    assert "[] > [], e.g., [1] > [2]." in messages[-1]["content"]


def test_rankgpt_variant_reads_a_titled_passage_as_rank_gpt_py_does():
    """rank_gpt.py's run_retriever: "'Title: ' + title + ' ' + 'Content: ' + text", whitespace
    collapsed, cut to 300 words with "Title:" and "Content:" counted; a passage without a title is
    its text. A.3's prompt keeps Winnow's "title text"."""
    titled = Passage(id="a", title="Paris", text="Paris is  the capital\nof France.")
    untitled = Passage(id="b", text="one two three four five")
    rankgpt = listwise_prompt("rrr.listwise_rankgpt")
    messages = rankgpt.messages("q", [titled, untitled])
    assert messages[3]["content"] == "[1] Title: Paris Content: Paris is the capital of France."
    assert messages[5]["content"] == "[2] one two three four five"
    cut = rankgpt.messages("q", [titled, untitled], max_words=4)
    assert (cut[3]["content"], cut[5]["content"]) == ("[1] Title: Paris Content: Paris", "[2] one two three four")
    assert listwise_prompt("rrr.listwise").messages("q", [titled])[3]["content"] == \
        "[1] Paris Paris is the capital of France."


def test_passages_are_cut_to_max_words_on_one_line():
    passage = Passage(id="a", title="Title", text="one  two\nthree four five")
    messages = listwise_prompt("rrr.listwise").messages("q", [passage], max_words=3)
    assert messages[3]["content"] == "[1] Title one two"


# --- the stage with a scripted model -----------------------------------------------------------


class WindowReverser:
    """Answers every window by reversing it, and keeps what it was asked."""

    batch_size = 1

    def __init__(self):
        self.requests = []

    @property
    def identity(self):
        return {"backend": "reverser"}

    def generate(self, prompts, *, max_tokens, temperature=0.0, stop=()):
        out = []
        for messages in prompts:
            num = (len(messages) - 4) // 2  # system, intro, reply, 2 turns per passage, instruction
            self.requests.append((messages, max_tokens))
            out.append(Generation(" > ".join(f"[{i}]" for i in range(num, 0, -1)), 50, 10, 0.0))
        return out

    def choice_logprobs(self, prompts, choices):
        raise AssertionError("the listwise reranker only generates")

    def close(self):
        pass


def candidate_list(n: int, query: str = "who wrote hamlet") -> CandidateList:
    return CandidateList(Query(query), [
        Candidate(Passage(f"d{i}", f"Passage number {i}."), [StageScore("bm25", float(n - i), i + 1)])
        for i in range(n)])


def test_windows_are_applied_back_to_front_hand_computed():
    # n=5, w=3, s=2: windows (2,5) then (0,3). [a b c d e] → [a b e d c] → [e b a d c]
    trace = Trace()
    backend = WindowReverser()
    ranked = ListwiseReranker(LLM(backend), window=3, step=2).rank(candidate_list(5), trace)
    assert [c.passage.id for c in ranked] == ["d4", "d1", "d0", "d3", "d2"]
    assert [c.score for c in ranked] == [5.0, 4.0, 3.0, 2.0, 1.0]
    assert [c.rank_of("listwise") for c in ranked] == [1, 2, 3, 4, 5]
    assert all(c.score_of("bm25") is not None for c in ranked)
    windows = trace.stages[0].details.windows
    assert [(w["start"], w["end"]) for w in windows] == [(2, 5), (0, 3)]
    assert windows[1]["ids"] == ["d0", "d1", "d4"] and windows[1]["ranked_ids"] == ["d4", "d1", "d0"]
    assert windows[0]["response"] == "[3] > [2] > [1]" and windows[0]["permutation"] == [2, 1, 0]
    assert windows[0]["repaired"] is False and windows[0]["max_tokens"] == ranking_token_budget(3)
    assert [max_tokens for _, max_tokens in backend.requests] == [ranking_token_budget(3)] * 2


def test_a_model_that_copies_the_format_example_is_flagged():
    """The 1.5B model's real habit on wiki-vital QA: "[1] >> [2]" whatever the passages."""
    class ExampleCopier(WindowReverser):
        def generate(self, prompts, *, max_tokens, temperature=0.0, stop=()):
            return [Generation("[1] >> [2]", 50, 8, 0.0) for _ in prompts]

    trace = Trace()
    ranked = ListwiseReranker(LLM(ExampleCopier()), window=3, step=2).rank(candidate_list(5), trace)
    assert [c.passage.id for c in ranked] == ["d0", "d1", "d2", "d3", "d4"]
    details = trace.stages[0].details
    assert (details.windows_sent, details.windows_unchanged, details.windows_repaired) == (2, 2, 2)
    assert "unchanged in all 2 window(s)" in details.warning

    reversed_trace = Trace()
    ListwiseReranker(LLM(WindowReverser()), window=3, step=2).rank(candidate_list(5), reversed_trace)
    reordered = reversed_trace.stages[0].details
    assert (reordered.windows_unchanged, reordered.windows_repaired) == (0, 0) and reordered.warning == ""


def test_the_most_relevant_passage_bubbles_up_from_the_bottom():
    class Oracle(WindowReverser):
        def generate(self, prompts, *, max_tokens, temperature=0.0, stop=()):
            [messages] = prompts
            passages = [m["content"] for m in messages[3:-1:2]]
            best = next((i for i, p in enumerate(passages) if "number 19." in p), 0)
            return [Generation(f"[{best + 1}]", 50, 3, 0.0)]

    ranked = ListwiseReranker(LLM(Oracle()), window=4, step=2).rank(candidate_list(20), Trace())
    assert ranked.candidates[0].passage.id == "d19"


def test_keep_and_a_single_passage_window_is_not_sent():
    trace = Trace()
    backend = WindowReverser()
    # n=5, w=s=4: windows (1,5) then (0,1); the second holds one passage.
    ranked = ListwiseReranker(LLM(backend), window=4, step=4, keep=3).rank(candidate_list(5), trace)
    assert len(ranked) == 3 and len(backend.requests) == 1
    assert trace.stages[0].details.windows[1]["skipped"] == "a single passage: nothing to rank"


def test_an_empty_list_asks_nothing():
    trace = Trace()
    ranked = ListwiseReranker(LLM(WindowReverser())).rank(candidate_list(0), trace)
    assert len(ranked) == 0 and trace.stages[0].llm_calls == []


# --- the real model (SmolLM2-135M through llama.cpp) -------------------------------------------

TEXTS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "Shakespeare was an English playwright, poet and actor.",
    "Mount Everest is Earth's highest mountain above sea level.",
    "Hamlet is a tragedy written by William Shakespeare around 1600.",
    "Python is a high-level programming language.",
]


@pytest.mark.llm
def test_listwise_reranker_with_the_real_model(llm):
    candidates = CandidateList(Query("who wrote hamlet"), [
        Candidate(Passage(f"d{i}", t), [StageScore("bm25", 10.0 - i, i + 1)]) for i, t in enumerate(TEXTS)])
    trace = Trace()
    reranker = ListwiseReranker(llm, window=4, step=2, max_words=20)
    ranked = reranker.rank(candidates, trace)
    stage = trace.stages[0]
    windows = sliding_windows(len(TEXTS), 4, 2)
    assert windows == [(2, 6), (0, 4)]
    assert sorted(c.passage.id for c in ranked) == sorted(c.passage.id for c in candidates)
    assert [c.score for c in ranked] == [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    assert len(stage.llm_calls) == len(windows) and {c.kind for c in stage.llm_calls} == {"generate"}
    assert stage.usage.calls == len(windows)
    assert stage.settings["window"] == 4 and stage.settings["prompt"] == "rrr.listwise"
    for record, call in zip(stage.details.windows, stage.llm_calls):
        assert sorted(record["permutation"]) == [0, 1, 2, 3]
        assert record["response"] == call.output
        assert sorted(record["ranked_ids"]) == sorted(record["ids"])
        assert call.completion_tokens <= record["max_tokens"]
        assert call.messages[-1]["content"].startswith("Rank the 4 passages above")


@pytest.mark.llm
@pytest.mark.parametrize("method", ["rankgpt", "rrr"])
def test_the_listwise_prompt_is_a_setting_of_both_listwise_methods(method, llm, index):
    from winnow.errors import WinnowError
    from winnow.methods import build_method

    default = build_method(method, index=index, llm=llm, n=4, k=2)
    assert default.reranker.template.name == "rrr.listwise"
    chosen = build_method(method, index=index, llm=llm, n=4, k=2, listwise_prompt="rankgpt")
    assert chosen.reranker.template.name == "rrr.listwise_rankgpt"
    with pytest.raises(WinnowError, match="setting .listwise_prompt. must be one of .rrr., .rankgpt."):
        build_method(method, index=index, llm=llm, n=4, k=2, listwise_prompt="gpt4")


@pytest.mark.llm
def test_rankgpt_with_the_released_prompt_asks_with_the_query_last(llm, index):
    from winnow.methods import build_method

    answer = build_method("rankgpt", index=index, llm=llm, n=4, k=2, listwise_prompt="rankgpt",
                          max_answer_tokens=8).ask("Which city is the capital of France?")
    stage = next(s for s in answer.trace.stages if s.name == "listwise")
    assert stage.settings["prompt"] == "rrr.listwise_rankgpt"
    assert all(call.messages[-1]["content"].startswith("Search Query: Which city is the capital of France?")
               for call in stage.llm_calls) and stage.llm_calls
    assert answer.settings["listwise_prompt"] == "rankgpt"


# --- a batch against a server: each question's windows flow ---------------------------------------


def _server_batch(server, *, concurrent: bool):
    """8 questions of 20 passages (three windows each, w=10 s=5) through a server's backend, the
    windows flowing (``concurrent``) or in lock-step, one window of every question at a time (how a
    batch was ranked before the windows flowed, and still is for a model in process)."""
    from winnow.llm.openai_http import OpenAICompatibleBackend
    from winnow.stages.contract import QuestionState

    backend = OpenAICompatibleBackend("m", base_url=server.url, max_inflight=4, timeout=10)
    if not concurrent:
        backend.concurrent_callers = False
    batch = [QuestionState(Query(f"question {q}{' slowly' if q == 0 else ''}"),
                           candidates=candidate_list(20, f"question {q}{' slowly' if q == 0 else ''}"))
             for q in range(8)]
    with LLM(backend) as llm:
        ListwiseReranker(llm, window=10, step=5, template=listwise_prompt("rrr.listwise_rankgpt")).run(batch)
    return batch


def test_a_batch_flows_question_by_question_with_the_lock_steps_rankings():
    from fakes import ScriptedServer

    flowing, lockstep = ScriptedServer(delay=0.005, ranking=True), ScriptedServer(delay=0.005, ranking=True)
    for server in (flowing, lockstep):  # question 0's windows take 20 times as long
        server.slow_word, server.slow_factor = "slowly", 20
    try:
        flowed, stepped = _server_batch(flowing, concurrent=True), _server_batch(lockstep, concurrent=False)
    finally:
        flowing.stop()
        lockstep.stop()
    # Byte-identical results: every question's final order, scores and windows as the lock-step's.
    for a, b in zip(flowed, stepped, strict=True):
        assert [(c.passage.id, c.score) for c in a.ranked] == [(c.passage.id, c.score) for c in b.ranked]
        assert a.trace.stages[0].details.windows == b.trace.stages[0].details.windows
        assert [c.messages for c in a.trace.stages[0].llm_calls] == [c.messages for c in b.trace.stages[0].llm_calls]
    assert any([c.passage.id for c in q.ranked] != [f"d{i}" for i in range(20)] for q in flowed)  # windows reorder
    assert len(flowing.finished) == len(lockstep.finished) == 24
    # Flowing, other questions' later windows returned while the slow question's first was on the
    # wire; in lock-step no question's second window was sent before it returned.
    assert [i for i, prompt in enumerate(flowing.finished) if "slowly" in prompt][0] > 8
    assert [i for i, prompt in enumerate(lockstep.finished) if "slowly" in prompt][0] < 8


def test_every_question_of_a_batch_flows_at_once_so_the_last_wave_is_of_last_windows():
    """A question's windows are a chain: a question started late makes the batch's tail. With every
    question of the batch flowing (16, four times the server's 4 slots), the dispatcher sends all the
    first windows before any last one; with twice the slots in progress the last eight questions
    started only as the first ones finished their chains."""
    from fakes import ScriptedServer

    from winnow.llm.openai_http import OpenAICompatibleBackend
    from winnow.stages.contract import QuestionState

    server = ScriptedServer(delay=0.02, ranking=True)
    try:
        backend = OpenAICompatibleBackend("m", base_url=server.url, max_inflight=4, timeout=10)
        batch = [QuestionState(Query(f"q{q}"), candidates=candidate_list(20, f"q{q}")) for q in range(16)]
        with LLM(backend) as llm:
            ListwiseReranker(llm, window=10, step=5, template=listwise_prompt("rrr.listwise_rankgpt")).run(batch)
    finally:
        server.stop()
    assert len(server.finished) == 48 and server.max_inflight <= 4
    # A question's k-th prompt on the server is its k-th window (its windows are sent one at a time).
    asked = [re.match(r"Search Query: (q[0-9]+)\.", prompt).group(1) for prompt in server.finished]
    first = [i for i, question in enumerate(asked) if asked[:i].count(question) == 0]
    last = [i for i, question in enumerate(asked) if asked[:i].count(question) == 2]
    assert len(first) == len(last) == 16
    assert max(first) < min(last)


def test_progress_over_a_flowing_batch_counts_the_batchs_windows():
    from fakes import ScriptedServer

    from winnow.llm.openai_http import OpenAICompatibleBackend
    from winnow.stages.contract import QuestionState

    server = ScriptedServer(delay=0.001, ranking=True)
    reported: list[tuple[str, int, int]] = []
    try:
        backend = OpenAICompatibleBackend("m", base_url=server.url, max_inflight=4, timeout=10)
        batch = [QuestionState(Query(f"q{q}"), candidates=candidate_list(12, f"q{q}")) for q in range(5)]
        with LLM(backend, progress=lambda *event: reported.append(event)) as llm:
            ListwiseReranker(llm, window=10, step=5).run(batch)
    finally:
        server.stop()
    # 12 passages: windows (2, 12) and (0, 7), both sent, for each of 5 questions.
    assert sorted(reported) == [("listwise", n, 10) for n in range(1, 11)]
